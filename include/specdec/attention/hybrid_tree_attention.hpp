#pragma once
//! \file hybrid_tree_attention.hpp
//! Hybrid tree attention (LongSpec §3.3, Figure 2b): the tree tokens' queries attend to
//!   (1) the whole cached prefix, unmasked (split-KV decode attention, "Flash_Decoding"), and
//!   (2) the tree tokens themselves under the ancestor mask ("fused_mask_attn"),
//! and the two (O, LSE) results are merged by log-sum-exp (§3.3 "Aggregation"; correctness is
//! Proposition A.1 of Appendix A). The result equals attention over concat(cache, tree) K/V with the
//! full mask [all ones | tree mask]. Both backends run the two parts in one pass (host: work items of
//! one parallel pass; cuda: parts of one kernel launch) and merge their fp32 partials directly, so no
//! intermediate rounding to the storage type occurs.
//!
//! Backends (the execution policy, first argument): specdec::host runs here; specdec::cuda needs
//! hybrid_tree_attention.cuh (nvcc). The cuda rules are those listed at decode_attention; in
//! addition the mask's length and contents are unchecked preconditions on cuda (they depend on
//! q_indptr's device-side values), while the host checks them.

#include <cstddef>
#include <string_view>
#include <type_traits>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/detail/backend.hpp"
#include "specdec/attention/detail/host/backend.hpp"
#include "specdec/attention/detail/validate.hpp"
#include "specdec/core/bitmask.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/kv/kv_layout.hpp"

namespace specdec {
inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

//! Bytes of workspace hybrid_tree_attention(policy, q, cache, ..., q_indptr, ...) needs with the same
//! options (host memory for specdec::host, device memory for specdec::cuda: see
//! decode_attention_workspace_bytes); size an attention_workspace with it once to make calls
//! allocation-free. Host: O(requests), and the size grows with
//! the policy's thread count (a kernel staging slot per thread: attention_options::workspace); cuda: O(1), from shapes only.
template <execution_policy P, tensor_like Q, class L, tensor_like I>
[[nodiscard]] std::size_t hybrid_tree_attention_workspace_bytes(const P& policy, const Q& q, const L& cache,
                                                                const I& q_indptr,
                                                                const attention_options& options = {}) {
  return detail::cached_attention_workspace_bytes<true>("specdec::hybrid_tree_attention_workspace_bytes", policy, q,
                                                        cache, q_indptr, options);
}

//! Hybrid tree attention. For request r with L_r = cache.length(r) cached tokens and
//! n_r = q_indptr[r+1] - q_indptr[r] tree tokens, tree token i and query head h attend to all L_r
//! cached tokens of kv head h / (Hq / Hkv) plus the tree tokens j with mask bit (i, j) set:
//!   out = softmax(scale * q [K_cache; K_spec]^T + [0 | mask]) [V_cache; V_spec],  lse = its LSE.
//!
//! Arguments (argument order is the public contract; sliding_window_attention calls this over a
//! ring-buffer layout):
//!   policy    specdec::host{.num_threads} or specdec::cuda{.stream}
//!   q         [T, Hq, D] tree-token queries (T = total tree tokens); host: float/half/bfloat16,
//!             cuda: half/bfloat16
//!   cache     any kv_layout with num_requests() = R, num_kv_heads() = Hkv, head_dim() = D, same
//!             value_type as q
//!   spec_k    [T, Hkv, D] the tree tokens' own keys (row i of request r = q_indptr[r] + i)
//!   spec_v    [T, Hkv, D] their values
//!   q_indptr  int32 [R + 1]
//!   mask      uint64 [sum_r n_r * words_per_row(n_r)], per-request ancestor masks back to back
//!   out       [T, Hq, D], same type as q
//!   lse       fp32 [T, Hq], natural log
//!   options   scale (0 = 1/sqrt(D)), kv_split_size (0 = heuristic), workspace
//! Preconditions as for decode_attention (memory-space rules per backend there) and tree_attention
//! (D in {64,128,256}, Hq % Hkv == 0, mask diagonal set and no bit above it: checked on the host).
//! Element types as listed are checked at compile time: a wrong one fails with one static_assert
//! sentence naming the argument (detail::check_attention_types), e.g. a uint32 mask.
//! Complexity O(sum_r n_r (L_r + n_r) Hq D); on cuda each cached K/V row is read once per 64-row tile.
template <execution_policy P, tensor_like Q, class L, tensor_like K, tensor_like V, tensor_like I, tensor_like M,
          tensor_like O, tensor_like LS>
void hybrid_tree_attention(const P& policy, const Q& q, const L& cache, const K& spec_k, const V& spec_v,
                           const I& q_indptr, const M& mask, const O& out, const LS& lse,
                           const attention_options& options = {}) {
  static_assert(check_kv_layout<L>());  // L is unconstrained so that these messages are what a non-layout gets
  if constexpr (kv_layout<L>) {
    constexpr std::string_view fn = "specdec::hybrid_tree_attention";
    using QT = typename Q::element_type;
    using T = std::remove_cv_t<QT>;
    if constexpr (detail::check_attention_types<P, QT, typename L::value_type, typename K::element_type,
                                                typename V::element_type, typename O::element_type,
                                                typename LS::element_type, typename I::element_type,
                                                typename M::element_type>()) {
      const auto io = detail::validate_cached_call<P, T>(fn, policy, q, cache, q_indptr, &out, &lse, options);
      const auto tree = detail::validate_tree<P>(fn, io, spec_k, spec_v, mask);
      detail::require_tree_inputs_apart(fn, out, lse, spec_k, spec_v, mask);
      detail::require_workspace_apart(fn, options, "spec_k", &spec_k, "spec_v", &spec_v, "mask", &mask);
      detail::attention_backend<P>::template run<true, true>(fn, policy, io, cache, &tree, options);
    }
  }
}

}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec
