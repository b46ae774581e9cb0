#pragma once
//! \file decode_attention.hpp
//! Split-KV ("flash-decoding") attention of each request's query tokens over that request's cached
//! K/V, unmasked: every cached token is visible to every query token of the request. This is the
//! Flash_Decoding half of LongSpec's hybrid tree attention (§3.3, "Splitting Key-Value Pairs"),
//! and, over a target model's kv_layout, the cache-free cross-attention of LongSpec §3.1.
//!
//! The cache of request r (cache.length(r) tokens) is cut into chunks of options.kv_split_size
//! tokens (0 = heuristic), each chunk gives a partial (O, LSE), and the partials are merged by
//! log-sum-exp (lse_merge.hpp, LongSpec Appendix A, Proposition A.1).
//!
//! Backends (the execution policy, first argument): specdec::host runs here; specdec::cuda needs
//! decode_attention.cuh (nvcc). Both validate identically except for the memory-space rules listed
//! at decode_attention below.

#include <cstddef>
#include <string_view>
#include <type_traits>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/detail/backend.hpp"
#include "specdec/attention/detail/host/backend.hpp"
#include "specdec/attention/detail/validate.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/kv/kv_layout.hpp"

namespace specdec {
inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

//! Bytes of workspace decode_attention(policy, q, cache, q_indptr, ...) with the same options needs;
//! pass an attention_workspace at least this large (host memory for specdec::host; device memory,
//! `attention_workspace(ptr, bytes, memory_space::device)`, for specdec::cuda) to make the call
//! allocation-free (and, on cuda, graph-capturable). Validates its arguments like decode_attention.
//! Host: O(num_requests); cuda: O(1), from shapes and the SM count only.
template <execution_policy P, tensor_like Q, class L, tensor_like I>
[[nodiscard]] std::size_t decode_attention_workspace_bytes(const P& policy, const Q& q, const L& cache,
                                                           const I& q_indptr, const attention_options& options = {}) {
  return detail::cached_attention_workspace_bytes<false>("specdec::decode_attention_workspace_bytes", policy, q, cache,
                                                         q_indptr, options);
}

//! Decode attention: for each request r, each of its query tokens q[q_indptr[r] .. q_indptr[r+1])
//! and each query head h attends to all cache.length(r) cached tokens of kv head h / (Hq / Hkv):
//!   out = softmax(scale * q K^T) V,  lse = log sum exp(scale * q K^T)
//! (natural log; -inf and out = 0 for a request with an empty cache).
//!
//! Arguments: q, out [total_tokens, Hq, D] (same storage type as the cache; unit inner stride);
//! lse fp32 [total_tokens, Hq]; q_indptr int32 [cache.num_requests() + 1], q_indptr[0] = 0,
//! non-decreasing, last = total_tokens; D in {64, 128, 256}; Hq a multiple of
//! cache.num_kv_heads(). A wrong element type (storage of the policy, mixed storage, const out or
//! lse, non-float lse, non-int32 q_indptr) does not compile: one static_assert sentence per wrong
//! argument (detail::check_attention_types). Other violations throw specdec::invalid_argument.
//!   specdec::host: storage float, half or bfloat16 (fp32 accumulation); all memory host-accessible.
//!     Parallel over (request, kv head, KV split) on the host pool. No allocation with
//!     options.workspace set.
//!   specdec::cuda (decode_attention.cuh), enqueued on policy.stream, no host synchronisation:
//!     storage half or bfloat16 (tensor cores, fp32 accumulation; float does not compile); every
//!     tensor and the cache device-accessible, q/out rows 16-byte aligned (data pointer, token and head
//!     strides multiples of 8 elements), the shipped layouts' base pointers 16-byte aligned;
//!     q_indptr's values and the cache lengths live on the device and are NOT checked (q_indptr[0]
//!     == 0, non-decreasing, last == q.extent(0), 0 <= length(r) <= capacity are preconditions);
//!     options.workspace must be device memory, else a stream-ordered cudaMallocAsync is taken.
//!     The cache is split so that Hkv x row tiles x chunks CTAs fill every SM twice; a second
//!     kernel merges the chunks by LSE. CUDA runtime errors throw specdec::cuda_error.
//! Complexity O(sum_r n_r * L_r * Hq * D) FLOPs, reading each cached K/V row once per (request, kv
//! head) on the host, once per 64-row tile of (token, query head) pairs on cuda.
template <execution_policy P, tensor_like Q, class L, tensor_like I, tensor_like O, tensor_like LS>
void decode_attention(const P& policy, const Q& q, const L& cache, const I& q_indptr, const O& out, const LS& lse,
                      const attention_options& options = {}) {
  static_assert(check_kv_layout<L>());  // L is unconstrained so that these messages are what a non-layout gets
  if constexpr (kv_layout<L>) {
    constexpr std::string_view fn = "specdec::decode_attention";
    using QT = typename Q::element_type;
    using T = std::remove_cv_t<QT>;
    if constexpr (detail::check_attention_types<P, QT, typename L::value_type, void, void, typename O::element_type,
                                                typename LS::element_type, typename I::element_type, void>()) {
      const auto io = detail::validate_cached_call<P, T>(fn, policy, q, cache, q_indptr, &out, &lse, options);
      detail::attention_backend<P>::template run<true, false>(fn, policy, io, cache,
                                                              static_cast<const tree_kv_params<T>*>(nullptr), options);
    }
  }
}

}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec
