#pragma once
//! \file hybrid_tree_attention.cuh
//! CUDA backend of hybrid_tree_attention (LongSpec §3.3, Figure 2b): the specdec::cuda overloads of
//! hybrid_tree_attention and hybrid_tree_attention_workspace_bytes, same arguments and semantics as
//! hybrid_tree_attention.hpp. The cache part (unmasked, split-KV) and the tree part (masked) run as
//! parts of one kernel launch and are merged by LSE (Appendix A, Proposition A.1) from their fp32
//! partials, so no intermediate rounding to the storage type occurs (attention/detail/cuda_attention.cuh).

#include <cstddef>
#include <string_view>
#include <type_traits>

#include "specdec/attention/detail/cuda_attention.cuh"
#include "specdec/attention/detail/cuda_common.cuh"
#include "specdec/attention/hybrid_tree_attention.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/kv/kv_layout.hpp"

namespace specdec {

//! Bytes of device workspace hybrid_tree_attention(cuda, q, cache, ..., q_indptr, ...) needs (see
//! decode_attention_workspace_bytes(cuda, ...) for how to pass it). Depends only on shapes and the
//! SM count, never on device data. O(1).
template <tensor_like Q, kv_layout L, tensor_like I>
[[nodiscard]] std::size_t hybrid_tree_attention_workspace_bytes(const cuda&, const Q& q, const L& cache,
                                                                const I& q_indptr,
                                                                const attention_options& options = {}) {
  static_assert(check_kv_layout<L>());
  constexpr std::string_view fn = "specdec::hybrid_tree_attention_workspace_bytes";
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
    return detail::plan_cuda_attention(fn, true, true, io.total_tokens, io.num_requests, io.num_qo_heads,
                                       io.num_kv_heads, io.head_dim)
        .bytes();
  } else {
    return 0;
  }
}

//! Hybrid tree attention on a CUDA device, enqueued on policy.stream. For request r, tree token i
//! and query head h attend to all cache.length(r) cached tokens of kv head h / (Hq / Hkv) plus the
//! tree tokens j with mask bit (i, j) set:
//!   out = softmax(scale q [K_cache; K_spec]^T + [0 | mask]) [V_cache; V_spec],  lse = its LSE.
//! Arguments and results as the host overload; the cuda differences (half/bfloat16 only,
//! device-accessible 16-byte aligned rows, unchecked device-side q_indptr/lengths/mask contents,
//! a device workspace) are listed at decode_attention(cuda, ...). Work O(sum_r n_r (L_r + n_r) Hq D)
//! tensor-core FLOPs, each cached K/V row read once per 64-row tile; no host synchronisation.
template <tensor_like Q, kv_layout L, tensor_like K, tensor_like V, tensor_like I, tensor_like M, tensor_like O,
          tensor_like LS>
void hybrid_tree_attention(const cuda& policy, const Q& q, const L& cache, const K& spec_k, const V& spec_v,
                           const I& q_indptr, const M& mask, const O& out, const LS& lse,
                           const attention_options& options = {}) {
  static_assert(check_kv_layout<L>());
  constexpr std::string_view fn = "specdec::hybrid_tree_attention";
  using QT = typename Q::element_type;
  using T = std::remove_cv_t<QT>;
  detail::check_attention_types<QT, typename L::value_type, typename K::element_type, typename V::element_type,
                                typename O::element_type, typename LS::element_type, typename I::element_type,
                                typename M::element_type>(fn);
  detail::require_cuda_storage<QT>(fn, "q");
  if constexpr (detail::attention_types_ok<QT, typename L::value_type, typename K::element_type,
                                           typename V::element_type, typename O::element_type,
                                           typename LS::element_type, typename I::element_type,
                                           typename M::element_type> &&
                detail::cuda_attention_storage_v<QT>) {
    detail::validate_cache_cuda(fn, cache, q);
    const auto io = detail::validate_io_cuda<T>(fn, q, q_indptr, &out, &lse, cache.num_requests(),
                                                cache.num_kv_heads(), options.scale);
    const auto tree = detail::validate_tree_cuda(fn, io, spec_k, spec_v, mask);
    detail::run_cuda_attention<true, true, T>(fn, policy, io, cache, &tree, options);
  }
}

}  // namespace specdec
