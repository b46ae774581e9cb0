#pragma once
//! \file attend_rows.hpp
//! Level 2 of the host attention backend (see run.hpp): the rows pass attend_part_rows, for cache
//! parts with few query rows per kv head (decode steps, small trees): vectorised along head_dim,
//! K streamed token-major with software prefetch spread over both passes of a block. Same
//! interface and partial format as attend_part (attend_tiles.hpp).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "specdec/attention/detail/host/scratch.hpp"
#include "specdec/attention/detail/host/tile.hpp"
#include "specdec/attention/detail/merge_state.hpp"
#include "specdec/core/detail/simd.hpp"
#include "specdec/core/isa.hpp"

#define SPECDEC_ISA_BODIES "specdec/attention/detail/host/attend_rows.inl"
#include "specdec/core/detail/isa_native.inl"  // at this file's own flags, in lvl_native
#undef SPECDEC_ISA_BODIES
