#pragma once
//! \file hybrid_tree_attention.hpp
//! Hybrid tree attention (LongSpec §3.3, Figure 2b): the tree tokens' queries attend to
//!   (1) the whole cached prefix, unmasked (split-KV decode attention, "Flash_Decoding"), and
//!   (2) the tree tokens themselves under the ancestor mask ("fused_mask_attn"),
//! and the two (O, LSE) results are merged by log-sum-exp (§3.3 "Aggregation"; correctness is
//! Proposition A.1 of Appendix A). The result equals attention over concat(cache, tree) K/V with the
//! full mask [all ones | tree mask]. The host backend runs both parts as work items of one pass and
//! merges their fp32 partials directly, so no intermediate rounding to the storage type occurs.

#include <cstddef>
#include <string_view>
#include <type_traits>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/detail/host_attention.hpp"
#include "specdec/attention/detail/validate.hpp"
#include "specdec/core/bitmask.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/kv/kv_layout.hpp"

namespace specdec {

//! Bytes of workspace hybrid_tree_attention(policy, q, cache, ..., q_indptr, ...) needs with the same
//! options; size an attention_workspace with it once to make calls allocation-free. O(requests).
template <tensor_like Q, kv_layout L, tensor_like I>
[[nodiscard]] std::size_t hybrid_tree_attention_workspace_bytes(const host& policy, const Q& q, const L& cache,
                                                                const I& q_indptr,
                                                                const attention_options& options = {}) {
  static_assert(check_kv_layout<L>());
  constexpr std::string_view fn = "specdec::hybrid_tree_attention_workspace_bytes";
  using QT = typename Q::element_type;
  detail::check_attention_types<QT, typename L::value_type, void, void, std::remove_cv_t<QT>, float,
                                typename I::element_type, void>(fn);
  if constexpr (detail::attention_types_ok<QT, typename L::value_type, void, void, std::remove_cv_t<QT>, float,
                                           typename I::element_type, void>) {
    require(policy.num_threads >= 0, fn, "policy.num_threads", ">= 0", policy.num_threads);
    detail::validate_cache(fn, cache, q);
    const auto io = detail::validate_io<std::remove_cv_t<QT>, Q, I, strided_view<std::remove_cv_t<QT>, 3>, strided_view<float, 2>>(
        fn, q, q_indptr, nullptr, nullptr, cache.num_requests(), cache.num_kv_heads(), options.scale);
    detail::host_plan p;
    p.num_requests = io.num_requests;
    p.hkv = io.num_kv_heads;
    p.group = io.num_qo_heads / io.num_kv_heads;
    p.head_dim = io.head_dim;
    p.split = detail::resolve_kv_split(fn, cache, io.num_requests, io.num_kv_heads / detail::heads_per_item(io),
                                       detail::host_threads(policy),
                                       options.kv_split_size);
    p.has_cache = true;
    p.has_tree = true;
    return detail::plan_host_attention(p, io.q_indptr, [&](int r) { return static_cast<int>(cache.length(r)); },
                                       nullptr);
  } else {
    return 0;
  }
}

//! Hybrid tree attention on the host. For request r with L_r = cache.length(r) cached tokens and
//! n_r = q_indptr[r+1] - q_indptr[r] tree tokens, tree token i and query head h attend to all L_r
//! cached tokens of kv head h / (Hq / Hkv) plus the tree tokens j with mask bit (i, j) set:
//!   out = softmax(scale * q [K_cache; K_spec]^T + [0 | mask]) [V_cache; V_spec],  lse = its LSE.
//!
//! Arguments (argument order is the public contract; posattn's sliding-window attention calls this
//! over a ring-buffer layout):
//!   policy    specdec::host{.num_threads}
//!   q         [T, Hq, D] tree-token queries (T = total tree tokens), float/half/bfloat16
//!   cache     any kv_layout with num_requests() = R, num_kv_heads() = Hkv, head_dim() = D, same
//!             value_type as q; host-accessible
//!   spec_k    [T, Hkv, D] the tree tokens' own keys (row i of request r = q_indptr[r] + i)
//!   spec_v    [T, Hkv, D] their values
//!   q_indptr  int32 [R + 1]
//!   mask      uint64 [sum_r n_r * words_per_row(n_r)], per-request ancestor masks back to back
//!   out       [T, Hq, D], same type as q
//!   lse       fp32 [T, Hq], natural log
//!   options   scale (0 = 1/sqrt(D)), kv_split_size (0 = heuristic), workspace
//! Preconditions as for decode_attention and tree_attention (D in {64,128,256}, Hq % Hkv == 0,
//! mask diagonal set and no bit above it). Complexity O(sum_r n_r (L_r + n_r) Hq D).
template <tensor_like Q, kv_layout L, tensor_like K, tensor_like V, tensor_like I, tensor_like M, tensor_like O,
          tensor_like LS>
void hybrid_tree_attention(const host& policy, const Q& q, const L& cache, const K& spec_k, const V& spec_v,
                           const I& q_indptr, const M& mask, const O& out, const LS& lse,
                           const attention_options& options = {}) {
  static_assert(check_kv_layout<L>());
  constexpr std::string_view fn = "specdec::hybrid_tree_attention";
  using QT = typename Q::element_type;
  using TT = std::remove_cv_t<QT>;
  detail::check_attention_types<QT, typename L::value_type, typename K::element_type, typename V::element_type,
                                typename O::element_type, typename LS::element_type, typename I::element_type,
                                typename M::element_type>(fn);
  if constexpr (detail::attention_types_ok<QT, typename L::value_type, typename K::element_type,
                                           typename V::element_type, typename O::element_type,
                                           typename LS::element_type, typename I::element_type,
                                           typename M::element_type>) {
    require(policy.num_threads >= 0, fn, "policy.num_threads", ">= 0", policy.num_threads);
    detail::validate_cache(fn, cache, q);
    const auto io = detail::validate_io<TT>(fn, q, q_indptr, &out, &lse, cache.num_requests(), cache.num_kv_heads(),
                                            options.scale);
    const auto tree = detail::validate_tree(fn, io, spec_k, spec_v, mask);
    const int split = detail::resolve_kv_split(fn, cache, io.num_requests, io.num_kv_heads / detail::heads_per_item(io),
                                               detail::host_threads(policy), options.kv_split_size);
    detail::host_attention_entry<true, true, TT>(fn, policy, io, cache, &tree, split, options.workspace);
  }
}

}  // namespace specdec
