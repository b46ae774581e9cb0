#pragma once
//! \file attend_lanes.hpp
//! Level 2 of the host attention backend (see run.hpp): the lanes pass attend_part_lanes, for cache
//! parts with 9-16 query rows per kv head (a small tree: 5-8 tokens at GQA 2, 3-4 at GQA 4), and
//! 17-32 where a 16-lane vector is one register (the avx512 level; 5-8 tokens at GQA 4): the query
//! rows in the lanes of one or two vectors (or one and up to 8 tail rows scored by dot products
//! along head_dim, at the avx512 level), like the tile kernel's microkernels, and the K/V rows
//! read where they lie, streamed token-major in 32-key blocks with K (lanes_kpf_dist) and V
//! prefetched ahead. Same interface and partial format as attend_part (attend_tiles.hpp).

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/detail/host/attend_rows.hpp"
#include "specdec/attention/detail/host/scratch.hpp"
#include "specdec/attention/detail/host/tile.hpp"
#include "specdec/attention/detail/merge_state.hpp"
#include "specdec/core/detail/simd.hpp"
#include "specdec/core/isa.hpp"

#define SPECDEC_ISA_BODIES "specdec/attention/detail/host/attend_lanes.inl"
#include "specdec/core/detail/isa_native.inl"  // at this file's own flags, in lvl_native
#undef SPECDEC_ISA_BODIES
