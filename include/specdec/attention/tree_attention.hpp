#pragma once
//! \file tree_attention.hpp
//! Masked attention among the speculative (tree) tokens themselves: the fused_mask_attn half of
//! LongSpec's hybrid tree attention (§3.3): "only the queries and the key-value pairs
//! {K_specs, V_specs} from the current speculative tokens need masking".
//!
//! Backends (the execution policy, first argument): specdec::host runs here; specdec::cuda needs
//! tree_attention.cuh (nvcc). The cuda rules are those listed at decode_attention; in addition the
//! mask's length and contents are unchecked preconditions on cuda, while the host checks them.

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

namespace specdec {
inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

//! Bytes of workspace tree_attention(policy, q, ..., q_indptr, ...) needs (see attention_workspace
//! and decode_attention_workspace_bytes for the memory each backend wants). Validates q (storage
//! type, head_dim) and q_indptr. `num_kv_heads` is spec_k.extent(1). Host: O(requests); cuda: O(1).
//! The host size grows with the policy's thread count (attention_options::workspace).
template <execution_policy P, tensor_like Q, tensor_like I>
[[nodiscard]] std::size_t tree_attention_workspace_bytes(const P& policy, const Q& q, int num_kv_heads,
                                                         const I& q_indptr, const attention_options& options = {}) {
  constexpr std::string_view fn = "specdec::tree_attention_workspace_bytes";
  using QT = typename Q::element_type;
  using T = std::remove_cv_t<QT>;
  if constexpr (detail::check_attention_types<P, QT, void, void, void, T, float, typename I::element_type, void>()) {
    detail::validate_policy(fn, policy);
    detail::validate_split_options(fn, options);
    const auto io = detail::validate_io<P, T>(fn, q, q_indptr, detail::no_out<T>, detail::no_lse, -1, num_kv_heads,
                                              options.scale);
    return detail::attention_backend<P>::template workspace_bytes<false, true>(fn, policy, io, detail::no_cache{},
                                                                                options);
  } else {
    return 0;
  }
}

//! Tree attention: the n_r tree tokens of request r (rows q_indptr[r] .. q_indptr[r+1] of q,
//! spec_k, spec_v) attend to each other under the request's ancestor mask: token i sees token j iff
//! bit j of mask row i is set (j == i or j an ancestor of i). Gives out = softmax(scale q K^T + mask) V
//! and the natural-log LSE over the visible tree keys.
//!
//! Arguments: q, out [T, Hq, D]; spec_k, spec_v [T, Hkv, D] (T = total tree tokens; one storage type
//! for all four, unit inner stride; host: float, half or bfloat16, cuda: half or bfloat16); lse fp32
//! [T, Hq]; q_indptr int32 [num_requests + 1] (num_requests = its extent - 1); mask uint64 rank 1
//! holding, per request and back to back, n_r rows of words_per_row(n_r) words (LSB first). Every
//! mask row must have its diagonal bit set and no bit j > i (topological order); on the host
//! violations throw invalid_argument, as do shape and memory-space errors on both backends. Element
//! types are checked at compile time (one static_assert per wrong argument, as for decode_attention).
//! Complexity O(sum_r n_r^2 * Hq * D); key tiles past a query block's last token are skipped
//! (they are fully masked).
template <execution_policy P, tensor_like Q, tensor_like K, tensor_like V, tensor_like I, tensor_like M, tensor_like O,
          tensor_like LS>
void tree_attention(const P& policy, const Q& q, const K& spec_k, const V& spec_v, const I& q_indptr, const M& mask,
                    const O& out, const LS& lse, const attention_options& options = {}) {
  constexpr std::string_view fn = "specdec::tree_attention";
  using QT = typename Q::element_type;
  using T = std::remove_cv_t<QT>;
  if constexpr (detail::check_attention_types<P, QT, void, typename K::element_type, typename V::element_type,
                                              typename O::element_type, typename LS::element_type,
                                              typename I::element_type, typename M::element_type>()) {
    const auto [io, tree] =
        detail::validate_tree_call<P, T>(fn, policy, q, spec_k, spec_v, q_indptr, mask, out, lse, options);
    detail::attention_backend<P>::template run<false, true>(fn, policy, io, detail::no_cache{}, &tree, options);
  }
}

}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec
