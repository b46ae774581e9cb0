#pragma once
//! \file decode_attention.hpp
//! Split-KV ("flash-decoding") attention of each request's query tokens over that request's cached
//! K/V, unmasked: every cached token is visible to every query token of the request. This is the
//! Flash_Decoding half of LongSpec's hybrid tree attention (§3.3, "Splitting Key-Value Pairs"),
//! and, over a target model's kv_layout, the cache-free cross-attention of LongSpec §3.1.
//!
//! The cache of request r (cache.length(r) tokens) is cut into chunks of options.kv_split_size
//! tokens (0 = heuristic: see detail::choose_kv_split), each chunk gives a partial (O, LSE), and the
//! partials are merged by log-sum-exp (lse_merge.hpp, LongSpec Appendix A, Proposition A.1).

#include <cstddef>
#include <string_view>
#include <type_traits>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/detail/host_attention.hpp"
#include "specdec/attention/detail/validate.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/kv/kv_layout.hpp"

namespace specdec {

namespace detail {
template <class Q, class L, class I>
struct decode_prepared {
  using T = std::remove_cv_t<typename Q::element_type>;
  attention_io_params<T> io;
  int split = 0;
};

template <class Q, class L, class I, class O, class LS>
auto validate_decode(std::string_view fn, const host& policy, const Q& q, const L& cache, const I& q_indptr,
                     const O* out, const LS* lse, const attention_options& options) {
  using T = std::remove_cv_t<typename Q::element_type>;
  require(policy.num_threads >= 0, fn, "policy.num_threads", ">= 0", policy.num_threads);
  validate_cache(fn, cache, q);
  decode_prepared<Q, L, I> d;
  d.io = validate_io<T>(fn, q, q_indptr, out, lse, cache.num_requests(), cache.num_kv_heads(), options.scale);
  d.split = resolve_kv_split(fn, cache, d.io.num_requests, d.io.num_kv_heads / heads_per_item(d.io),
                             host_threads(policy),
                             options.kv_split_size);
  return d;
}
}  // namespace detail

//! Bytes of workspace decode_attention(policy, q, cache, q_indptr, ...) with the same options needs;
//! pass an attention_workspace at least this large to make the call allocation-free. Validates its
//! arguments like decode_attention. O(num_requests).
template <tensor_like Q, kv_layout L, tensor_like I>
[[nodiscard]] std::size_t decode_attention_workspace_bytes(const host& policy, const Q& q, const L& cache,
                                                           const I& q_indptr, const attention_options& options = {}) {
  static_assert(check_kv_layout<L>());
  constexpr std::string_view fn = "specdec::decode_attention_workspace_bytes";
  using QT = typename Q::element_type;
  detail::check_attention_types<QT, typename L::value_type, void, void, std::remove_cv_t<QT>, float,
                                typename I::element_type, void>(fn);
  if constexpr (detail::attention_types_ok<QT, typename L::value_type, void, void, std::remove_cv_t<QT>, float,
                                           typename I::element_type, void>) {
    const auto d = detail::validate_decode<Q, L, I, strided_view<std::remove_cv_t<QT>, 3>, strided_view<float, 2>>(fn, policy, q, cache, q_indptr, nullptr, nullptr, options);
    detail::host_plan p;
    p.num_requests = d.io.num_requests;
    p.hkv = d.io.num_kv_heads;
    p.group = d.io.num_qo_heads / d.io.num_kv_heads;
    p.head_dim = d.io.head_dim;
    p.split = d.split;
    p.has_cache = true;
    return detail::plan_host_attention(p, d.io.q_indptr, [&](int r) { return static_cast<int>(cache.length(r)); },
                                       nullptr);
  } else {
    return 0;
  }
}

//! Decode attention on the host: for each request r, each of its query tokens
//! q[q_indptr[r] .. q_indptr[r+1]) and each query head h attends to all cache.length(r) cached
//! tokens of kv head h / (Hq / Hkv):  out = softmax(scale * q K^T) V,  lse = log sum exp(scale * q K^T)
//! (natural log; -inf and out = 0 for a request with an empty cache).
//!
//! Arguments: q, out [total_tokens, Hq, D] (same storage type as the cache: float, half or bfloat16;
//! unit inner stride); lse fp32 [total_tokens, Hq]; q_indptr int32 [cache.num_requests() + 1],
//! q_indptr[0] = 0, non-decreasing, last = total_tokens; D in {64, 128, 256}; Hq a multiple of
//! cache.num_kv_heads(); all memory host-accessible. Violations throw specdec::invalid_argument.
//! Complexity O(sum_r n_r * L_r * Hq * D) FLOPs, reading each cached K/V row once per (request, kv
//! head); parallel over (request, kv head, KV split). No allocation with options.workspace set.
template <tensor_like Q, kv_layout L, tensor_like I, tensor_like O, tensor_like LS>
void decode_attention(const host& policy, const Q& q, const L& cache, const I& q_indptr, const O& out, const LS& lse,
                      const attention_options& options = {}) {
  static_assert(check_kv_layout<L>());
  constexpr std::string_view fn = "specdec::decode_attention";
  using QT = typename Q::element_type;
  detail::check_attention_types<QT, typename L::value_type, void, void, typename O::element_type,
                                typename LS::element_type, typename I::element_type, void>(fn);
  if constexpr (detail::attention_types_ok<QT, typename L::value_type, void, void, typename O::element_type,
                                           typename LS::element_type, typename I::element_type, void>) {
    const auto d = detail::validate_decode<Q, L, I, O, LS>(fn, policy, q, cache, q_indptr, &out, &lse, options);
    using T = std::remove_cv_t<QT>;
    detail::host_attention_entry<true, false, T>(fn, policy, d.io, cache, static_cast<const tree_kv_params<T>*>(nullptr),
                                                 d.split, options.workspace);
  }
}

}  // namespace specdec
