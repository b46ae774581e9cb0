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

namespace specdec::detail {
inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp
namespace lvl_native {  // this file's own flags (see core/detail/isa_levels.inl for why a namespace)
#include "specdec/attention/detail/host/tile.inl"
}  // namespace lvl_native
using namespace lvl_native;
}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec::detail
