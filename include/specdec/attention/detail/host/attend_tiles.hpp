#pragma once
//! \file attend_tiles.hpp
//! Level 2 of the host attention backend (see run.hpp): the tile pass attend_part, one part (a
//! split-KV chunk of the cache, or the tree tokens under their mask) of one work item, streamed
//! as 64-token tiles through the microkernels of tile.hpp with an online softmax over 16/32-row
//! blocks; it writes the part's normalised O and LSE.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "specdec/attention/detail/host/scratch.hpp"
#include "specdec/attention/detail/host/tile.hpp"
#include "specdec/attention/detail/merge_state.hpp"
#include "specdec/core/bitmask.hpp"
#include "specdec/core/detail/simd.hpp"
#include "specdec/core/isa.hpp"

#define SPECDEC_ISA_BODIES "specdec/attention/detail/host/attend_tiles.inl"
#include "specdec/core/detail/isa_native.inl"  // at this file's own flags, in lvl_native
#undef SPECDEC_ISA_BODIES
