#pragma once
//! \file lse_merge.cuh
//! The specdec::cuda backend of lse_merge (LongSpec §3.3 "Aggregation", Appendix A, Proposition
//! A.1): the merge kernel (detail/cuda/merge_kernel.cuh, shared with the attention backend) behind
//! the two-way and n-way entry points of lse_merge.hpp, which hold their documentation (natural-log
//! LSE, -inf = no keys, out/lse_out may alias an input). Include this header (compiled with nvcc) to
//! call lse_merge with a specdec::cuda policy.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "specdec/attention/detail/backend.hpp"
#include "specdec/attention/detail/cuda/merge_kernel.cuh"
#include "specdec/attention/detail/cuda_common.cuh"
#include "specdec/attention/lse_merge.hpp"
#include "specdec/core/device_types.cuh"
#include "specdec/core/execution.hpp"
#include "specdec/core/tensor.hpp"

namespace specdec::detail {

template <>
struct merge_backend<cuda> {
  template <class T>
  static void run(const cuda& policy, const lse_merge_params<T>& p) {
    launch_lse_merge(to_device_params(p), policy.stream);
  }
};

}  // namespace specdec::detail
