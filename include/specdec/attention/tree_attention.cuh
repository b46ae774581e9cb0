#pragma once
//! \file tree_attention.cuh
//! CUDA backend of tree_attention (LongSpec §3.3 "fused_mask_attn"): the specdec::cuda overloads
//! of tree_attention and tree_attention_workspace_bytes, same arguments and semantics as
//! tree_attention.hpp. Kernels: attention/detail/cuda_attention.cuh (the tree part only).

#include <cstddef>
#include <string_view>
#include <type_traits>

#include "specdec/attention/detail/cuda_attention.cuh"
#include "specdec/attention/detail/cuda_common.cuh"
#include "specdec/attention/tree_attention.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/tensor.hpp"

namespace specdec {

//! Bytes of device workspace tree_attention(cuda, q, ..., q_indptr, ...) needs (see
//! decode_attention_workspace_bytes(cuda, ...) for how to pass it). `num_kv_heads` is
//! spec_k.extent(1). Depends only on shapes, never on device data. O(1).
template <tensor_like Q, tensor_like I>
[[nodiscard]] std::size_t tree_attention_workspace_bytes(const cuda&, const Q& q, int num_kv_heads, const I& q_indptr,
                                                         const attention_options& options = {}) {
  constexpr std::string_view fn = "specdec::tree_attention_workspace_bytes";
  using QT = typename Q::element_type;
  using T = std::remove_cv_t<QT>;
  detail::check_attention_types<QT, void, void, void, T, float, typename I::element_type, void>(fn);
  detail::require_cuda_storage<QT>(fn, "q");
  if constexpr (detail::attention_types_ok<QT, void, void, void, T, float, typename I::element_type, void> &&
                detail::cuda_attention_storage_v<QT>) {
    const auto io = detail::validate_io_cuda<T, Q, I, strided_view<T, 3>, strided_view<float, 2>>(
        fn, q, q_indptr, nullptr, nullptr, -1, num_kv_heads, options.scale);
    return detail::plan_cuda_attention(fn, false, true, io.total_tokens, io.num_requests, io.num_qo_heads,
                                       io.num_kv_heads, io.head_dim)
        .bytes();
  } else {
    return 0;
  }
}

//! Tree attention on a CUDA device, enqueued on policy.stream: the n_r tree tokens of request r
//! attend to each other under the request's bit-packed ancestor mask (token i sees j iff bit j of
//! row i is set). Same arguments and results as the host overload, with the cuda differences listed
//! at decode_attention(cuda, ...): half/bfloat16 only, device-accessible 16-byte aligned rows, and
//! q_indptr values and the mask contents (diagonal set, no bit above it, length sum_r n_r *
//! words_per_row(n_r)) are unchecked preconditions -- the host overload checks them. Key tiles past
//! a row tile's last token are skipped (fully masked). O(sum_r n_r^2 Hq D) tensor-core FLOPs.
template <tensor_like Q, tensor_like K, tensor_like V, tensor_like I, tensor_like M, tensor_like O, tensor_like LS>
void tree_attention(const cuda& policy, const Q& q, const K& spec_k, const V& spec_v, const I& q_indptr, const M& mask,
                    const O& out, const LS& lse, const attention_options& options = {}) {
  constexpr std::string_view fn = "specdec::tree_attention";
  using QT = typename Q::element_type;
  using T = std::remove_cv_t<QT>;
  detail::check_attention_types<QT, void, typename K::element_type, typename V::element_type, typename O::element_type,
                                typename LS::element_type, typename I::element_type, typename M::element_type>(fn);
  detail::require_cuda_storage<QT>(fn, "q");
  if constexpr (detail::attention_types_ok<QT, void, typename K::element_type, typename V::element_type,
                                           typename O::element_type, typename LS::element_type,
                                           typename I::element_type, typename M::element_type> &&
                detail::cuda_attention_storage_v<QT>) {
    detail::require_rank<K>(fn, "spec_k", 3);
    const int hkv = static_cast<int>(spec_k.extent(1));
    require(hkv > 0, fn, "spec_k", "at least one kv head (extent 1)", hkv);
    const auto io = detail::validate_io_cuda<T>(fn, q, q_indptr, &out, &lse, -1, hkv, options.scale);
    const auto tree = detail::validate_tree_cuda(fn, io, spec_k, spec_v, mask);
    detail::run_cuda_attention<false, true, T>(fn, policy, io, detail::no_cuda_cache{}, &tree, options);
  }
}

}  // namespace specdec
