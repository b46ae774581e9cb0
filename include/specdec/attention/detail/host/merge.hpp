#pragma once
//! \file merge.hpp
//! The host merge of one query row's parts (LongSpec Appendix A, Proposition A.1, n-way) with the
//! rules of lse_merge_weights (merge_state.hpp), vectorised over head_dim. Used by the host
//! attention's merge pass (run.hpp) and by the public lse_merge (lse_merge.hpp).

#include <algorithm>
#include <cstdint>
#include <limits>

#include "specdec/attention/detail/merge_state.hpp"
#include "specdec/core/detail/simd.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/numeric.hpp"
#include "specdec/core/simd_level.hpp"

// The merge at this file's flags and, with run-time dispatch (core/simd_level.hpp), once per level:
// here rather than in the attention backend's kernels.inl, so the public lse_merge (which does not
// include the backend) and the backend's merge pass share one copy per level.
#define SPECDEC_ISA_BODIES "specdec/attention/detail/host/merge.inl"
#include "specdec/core/detail/isa_family.inl"
#undef SPECDEC_ISA_BODIES
