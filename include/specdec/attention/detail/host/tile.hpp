#pragma once
//! \file tile.hpp
//! Level 1 of the host attention backend (see run.hpp for the whole call): the tile geometry and the
//! register-blocked microkernels every pass is built from -- the score block S^T = K Qt (score_keys,
//! on a few fp32 K rows wherever they lie; score_tile over a staged tile), the PV block
//! O = alpha O + P^T V (pv_blocks and pv_row_groups on V rows in storage type; pv_tile over a staged tile),
//! row staging (widen to fp32, prefetch the next tile) and the masked tiles' non-finite-value
//! handling. Each works on rows in L1/L2 and knows nothing of requests, parts or plans.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "specdec/attention/detail/merge_state.hpp"
#include "specdec/core/bitmask.hpp"
#include "specdec/core/config.hpp"
#include "specdec/core/detail/simd.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/numeric.hpp"

#define SPECDEC_ISA_BODIES "specdec/attention/detail/host/tile.inl"
#include "specdec/core/detail/isa_native.inl"  // at this file's own flags, in lvl_native
#undef SPECDEC_ISA_BODIES
