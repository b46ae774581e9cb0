#pragma once
//! \file tile.hpp
//! Level 1 of the host attention backend (see run.hpp for the whole call): the tile geometry and the
//! register-blocked microkernels every pass is built from -- the score tile S^T = K Qt, the PV tile
//! O = alpha O + P^T V, row staging (widen to fp32, prefetch the next tile) and the masked tiles'
//! non-finite-value handling. Each works on one staged tile in L1 and knows nothing of requests,
//! parts or plans.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "specdec/core/bitmask.hpp"
#include "specdec/core/config.hpp"
#include "specdec/core/detail/simd.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/numeric.hpp"

#define SPECDEC_ISA_BODIES "specdec/attention/detail/host/tile.inl"
#include "specdec/core/detail/isa_native.inl"  // at this file's own flags, in lvl_native
#undef SPECDEC_ISA_BODIES
