#pragma once
//! \file decode_attention.cuh
//! CUDA backend of decode_attention (split-KV flash-decoding, LongSpec §3.3 "Flash_Decoding"):
//! the specdec::cuda overloads of decode_attention and decode_attention_workspace_bytes, with the
//! same arguments and semantics as the host ones in decode_attention.hpp. Kernels and the plan are
//! described in attention/detail/cuda_attention.cuh.

#include <cstddef>
#include <string_view>
#include <type_traits>

#include "specdec/attention/decode_attention.hpp"
#include "specdec/attention/detail/cuda_attention.cuh"
#include "specdec/attention/detail/cuda_common.cuh"
#include "specdec/core/execution.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/kv/kv_layout.hpp"

namespace specdec {

//! Bytes of device workspace decode_attention(cuda, q, cache, q_indptr, ...) needs: wrap at least
//! this much device memory in an attention_workspace (`attention_workspace(ptr, bytes,
//! memory_space::device)`) and pass it as options.workspace to make calls allocation-free and
//! graph-capturable. Depends only on q's shape, the request and head counts and the device's SM
//! count (read once per device), never on device data; validates like decode_attention. O(1).
template <tensor_like Q, kv_layout L, tensor_like I>
[[nodiscard]] std::size_t decode_attention_workspace_bytes(const cuda&, const Q& q, const L& cache, const I& q_indptr,
                                                           const attention_options& options = {}) {
  static_assert(check_kv_layout<L>());
  constexpr std::string_view fn = "specdec::decode_attention_workspace_bytes";
  using QT = typename Q::element_type;
  using T = std::remove_cv_t<QT>;
  detail::check_attention_types<QT, typename L::value_type, void, void, T, float, typename I::element_type, void>(fn);
  detail::require_cuda_storage<QT>(fn, "q");
  if constexpr (detail::attention_types_ok<QT, typename L::value_type, void, void, T, float, typename I::element_type,
                                           void> &&
                detail::cuda_attention_storage_v<QT>) {
    detail::validate_cache_cuda(fn, cache, q);
    const auto io = detail::validate_io_cuda<T, Q, I, strided_view<T, 3>, strided_view<float, 2>>(
        fn, q, q_indptr, nullptr, nullptr, cache.num_requests(), cache.num_kv_heads(), options.scale);
    require(options.kv_split_size >= 0, fn, "options.kv_split_size", ">= 0 (0 = automatic)", options.kv_split_size);
    return detail::plan_cuda_attention(fn, true, false, io.total_tokens, io.num_requests, io.num_qo_heads,
                                       io.num_kv_heads, io.head_dim)
        .bytes();
  } else {
    return 0;
  }
}

//! Decode attention on a CUDA device, enqueued on policy.stream: for each request r, each of its
//! query tokens and each query head h attends to all cache.length(r) cached tokens of kv head
//! h / (Hq / Hkv): out = softmax(scale q K^T) V, lse = natural-log LSE (-inf and out = 0 for an
//! empty cache). Same arguments as the host overload, with these differences:
//!   * storage type half or bfloat16 (tensor cores; fp32 accumulation); float throws;
//!   * q, out, lse, q_indptr and the cache must be device-accessible (device or managed), q/out
//!     rows 16-byte aligned (data pointer, token and head strides multiples of 8 elements), and a
//!     custom layout's rows 16-byte aligned (the shipped layouts' base pointers are checked);
//!   * q_indptr's values and the cache lengths live on the device and are not checked: q_indptr[0]
//!     == 0, non-decreasing, last == q.extent(0), 0 <= length(r) <= capacity are preconditions;
//!   * options.workspace must be device memory of decode_attention_workspace_bytes(cuda, ...)
//!     bytes; without one the call takes a stream-ordered allocation (cudaMallocAsync).
//! No host synchronisation; errors of the CUDA runtime throw specdec::cuda_error. Work
//! O(sum_r n_r L_r Hq D) FLOPs on the tensor cores, each K/V row read once per 64-row tile of
//! (token, query head) pairs; the cache is split into enough chunks that Hkv x tiles x chunks
//! CTAs fill every SM twice, then a second kernel merges the chunks by LSE.
template <tensor_like Q, kv_layout L, tensor_like I, tensor_like O, tensor_like LS>
void decode_attention(const cuda& policy, const Q& q, const L& cache, const I& q_indptr, const O& out, const LS& lse,
                      const attention_options& options = {}) {
  static_assert(check_kv_layout<L>());
  constexpr std::string_view fn = "specdec::decode_attention";
  using QT = typename Q::element_type;
  using T = std::remove_cv_t<QT>;
  detail::check_attention_types<QT, typename L::value_type, void, void, typename O::element_type,
                                typename LS::element_type, typename I::element_type, void>(fn);
  detail::require_cuda_storage<QT>(fn, "q");
  if constexpr (detail::attention_types_ok<QT, typename L::value_type, void, void, typename O::element_type,
                                           typename LS::element_type, typename I::element_type, void> &&
                detail::cuda_attention_storage_v<QT>) {
    detail::validate_cache_cuda(fn, cache, q);
    const auto io = detail::validate_io_cuda<T>(fn, q, q_indptr, &out, &lse, cache.num_requests(),
                                                cache.num_kv_heads(), options.scale);
    detail::run_cuda_attention<true, false, T>(fn, policy, io, cache, static_cast<const tree_kv_params<T>*>(nullptr),
                                               options);
  }
}

}  // namespace specdec
