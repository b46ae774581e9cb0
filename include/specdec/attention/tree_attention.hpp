#pragma once
//! \file tree_attention.hpp
//! Masked attention among the speculative (tree) tokens themselves: the fused_mask_attn half of
//! LongSpec's hybrid tree attention (§3.3): "only the queries and the key-value pairs
//! {K_specs, V_specs} from the current speculative tokens need masking".

#include <cstddef>
#include <string_view>
#include <type_traits>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/detail/host_attention.hpp"
#include "specdec/attention/detail/validate.hpp"
#include "specdec/core/bitmask.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/tensor.hpp"

namespace specdec {

//! Bytes of workspace tree_attention(policy, q, ..., q_indptr, ...) needs (see attention_workspace).
//! Validates q (storage type, head_dim) and q_indptr. `num_kv_heads` is spec_k.extent(1). O(requests).
template <tensor_like Q, tensor_like I>
[[nodiscard]] std::size_t tree_attention_workspace_bytes(const host& policy, const Q& q, int num_kv_heads,
                                                         const I& q_indptr, const attention_options& options = {}) {
  constexpr std::string_view fn = "specdec::tree_attention_workspace_bytes";
  using QT = typename Q::element_type;
  detail::check_attention_types<QT, void, void, void, std::remove_cv_t<QT>, float, typename I::element_type, void>(fn);
  if constexpr (detail::attention_types_ok<QT, void, void, void, std::remove_cv_t<QT>, float,
                                           typename I::element_type, void>) {
    require(policy.num_threads >= 0, fn, "policy.num_threads", ">= 0", policy.num_threads);
    const auto io = detail::validate_io<std::remove_cv_t<QT>, Q, I, strided_view<std::remove_cv_t<QT>, 3>, strided_view<float, 2>>(fn, q, q_indptr, nullptr, nullptr, -1,
                                                                          num_kv_heads, options.scale);
    detail::host_plan p;
    p.num_requests = io.num_requests;
    p.hkv = io.num_kv_heads;
    p.group = io.num_qo_heads / io.num_kv_heads;
    p.head_dim = io.head_dim;
    p.has_tree = true;
    return detail::plan_host_attention(p, io.q_indptr, [](int) { return 0; }, nullptr);
  } else {
    return 0;
  }
}

//! Tree attention on the host: the n_r tree tokens of request r (rows q_indptr[r] .. q_indptr[r+1]
//! of q, spec_k, spec_v) attend to each other under the request's ancestor mask: token i sees token
//! j iff bit j of mask row i is set (j == i or j an ancestor of i). Gives out = softmax(scale q K^T
//! + mask) V and the natural-log LSE over the visible tree keys.
//!
//! Arguments: q, out [T, Hq, D]; spec_k, spec_v [T, Hkv, D] (T = total tree tokens; one storage type
//! for all four: float, half or bfloat16; unit inner stride); lse fp32 [T, Hq]; q_indptr int32
//! [num_requests + 1] (num_requests = its extent - 1); mask uint64 rank 1 holding, per request and
//! back to back, n_r rows of words_per_row(n_r) words (LSB first). Every mask row must have its
//! diagonal bit set and no bit j > i (topological order); violations throw invalid_argument, as
//! do shape, type and memory-space errors. Complexity O(sum_r n_r^2 * Hq * D); key tiles past a
//! query block's last token are skipped (they are fully masked).
template <tensor_like Q, tensor_like K, tensor_like V, tensor_like I, tensor_like M, tensor_like O, tensor_like LS>
void tree_attention(const host& policy, const Q& q, const K& spec_k, const V& spec_v, const I& q_indptr, const M& mask,
                    const O& out, const LS& lse, const attention_options& options = {}) {
  constexpr std::string_view fn = "specdec::tree_attention";
  using QT = typename Q::element_type;
  using TT = std::remove_cv_t<QT>;
  detail::check_attention_types<QT, void, typename K::element_type, typename V::element_type,
                                typename O::element_type, typename LS::element_type, typename I::element_type,
                                typename M::element_type>(fn);
  if constexpr (detail::attention_types_ok<QT, void, typename K::element_type, typename V::element_type,
                                           typename O::element_type, typename LS::element_type,
                                           typename I::element_type, typename M::element_type>) {
    require(policy.num_threads >= 0, fn, "policy.num_threads", ">= 0", policy.num_threads);
    detail::require_rank<K>(fn, "spec_k", 3);
    const int hkv = static_cast<int>(spec_k.extent(1));
    require(hkv > 0, fn, "spec_k", "at least one kv head (extent 1)", hkv);
    const auto io = detail::validate_io<TT>(fn, q, q_indptr, &out, &lse, -1, hkv, options.scale);
    const auto tree = detail::validate_tree(fn, io, spec_k, spec_v, mask);
    detail::host_attention_entry<false, true, TT>(fn, policy, io, detail::no_cache{}, &tree, 1, options.workspace);
  }
}

}  // namespace specdec
