#pragma once
//! \file cross_attention.hpp
//! Cache-free cross-attention of the draft model to the target model's KV cache (GLIDE §4.1;
//! LongSpec §3.1 "we leverage the KV cache of the target model ... completely removes additional
//! storage overhead for long contexts").
//!
//! The draft keeps no KV for this layer: its queries attend to ONE chosen layer of the target's KV
//! cache, read in place through the target's own kv_layout (contiguous, paged, or the engine's own),
//! up to the target's committed length (the target only keeps verified tokens: GLIDE §4.1, "we will
//! keep only the KV cache for tokens up to position (t - 1)"). Unmasked: every draft query of
//! request r sees target tokens [0, committed_r). The attention itself is decode_attention
//! (split-KV, attention/decode_attention.hpp) over that layout.
//!
//! Query projection (decided here): GLIDE projects the draft's hidden states H^m [i, d_D] into one
//! query matrix per target head, Q^{m,j} = H^m W_j with W_j in R^{d_D x d_k} (§4.1). The attention
//! entry points take queries ALREADY projected to the target's head count and head_dim
//! ([T, Hq_target, D_target]), so any projection (fused GEMM, LoRA, quantized) can be used;
//! glide_project_queries() is a plain host helper for the common case of a dense weight. Queries
//! must carry RoPE at their own positions with the target's RoPE base (LongSpec §3.2: the draft
//! keeps the target's base) -- apply_rope(position/rope.hpp) before calling.
//!
//! Layer mapping (GLIDE §4.1): draft layer m (1-based) reads target layer l = N_T - N_D + m, i.e.
//! the draft's layers read the target's top N_D layers in order.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/decode_attention.hpp"
#include "specdec/core/config.hpp"
#include "specdec/core/dtype.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/numeric.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/core/thread_pool.hpp"
#include "specdec/kv/kv_layout.hpp"

namespace specdec {

// ---- GLIDE layer mapping -----------------------------------------------------------------------

//! GLIDE §4.1: the target layer l = N_T - N_D + m read by draft layer m, all 1-based as in the
//! paper. Preconditions: 1 <= num_draft_layers <= num_target_layers, 1 <= draft_layer <=
//! num_draft_layers. Result in [N_T - N_D + 1, N_T]. O(1).
[[nodiscard]] inline int glide_target_layer(int num_target_layers, int num_draft_layers, int draft_layer) {
  constexpr std::string_view fn = "specdec::glide_target_layer";
  require(num_target_layers >= 1, fn, "num_target_layers", ">= 1", num_target_layers);
  if (!(num_draft_layers >= 1 && num_draft_layers <= num_target_layers)) [[unlikely]]
    throw_invalid_argument(fn, "num_draft_layers",
                           "a value in [1, num_target_layers = " + std::to_string(num_target_layers) + "]",
                           num_draft_layers);
  if (!(draft_layer >= 1 && draft_layer <= num_draft_layers)) [[unlikely]]
    throw_invalid_argument(fn, "draft_layer",
                           "a 1-based draft layer in [1, num_draft_layers = " + std::to_string(num_draft_layers) + "]",
                           draft_layer);
  return num_target_layers - num_draft_layers + draft_layer;
}

//! The same mapping with 0-based indices (as engines index layer arrays): draft layer m0 in
//! [0, N_D) reads target layer N_T - N_D + m0 in [N_T - N_D, N_T). O(1).
[[nodiscard]] inline int glide_target_layer_index(int num_target_layers, int num_draft_layers, int draft_layer_index) {
  constexpr std::string_view fn = "specdec::glide_target_layer_index";
  require(num_target_layers >= 1, fn, "num_target_layers", ">= 1", num_target_layers);
  if (!(num_draft_layers >= 1 && num_draft_layers <= num_target_layers)) [[unlikely]]
    throw_invalid_argument(fn, "num_draft_layers",
                           "a value in [1, num_target_layers = " + std::to_string(num_target_layers) + "]",
                           num_draft_layers);
  if (!(draft_layer_index >= 0 && draft_layer_index < num_draft_layers)) [[unlikely]]
    throw_invalid_argument(fn, "draft_layer_index",
                           "a 0-based draft layer in [0, num_draft_layers = " + std::to_string(num_draft_layers) + ")",
                           draft_layer_index);
  return num_target_layers - num_draft_layers + draft_layer_index;
}

//! Picks, from the target's per-layer KV layouts (index 0 = bottom layer), the one draft layer
//! `draft_layer_index` (0-based) reads under GLIDE's mapping. Returns a reference into `target_layers`.
template <class L>
[[nodiscard]] const L& glide_select_layer(std::span<const L> target_layers, int num_draft_layers,
                                          int draft_layer_index) {
  require(!target_layers.empty(), "specdec::glide_select_layer", "target_layers", "at least one layer", 0);
  const int l = glide_target_layer_index(static_cast<int>(target_layers.size()), num_draft_layers, draft_layer_index);
  return target_layers[static_cast<std::size_t>(l)];
}

// ---- a zero-copy length limit over any layout ----------------------------------------------------

//! A kv_layout showing only the first limits[r] tokens of each request of `base` (zero copy: rows are
//! the base layout's own rows). Used to restrict the draft's view of the target cache to the
//! committed prefix when the target's layout also holds tokens being verified.
template <kv_layout L>
struct kv_prefix {
  using value_type = typename L::value_type;

  L base;
  const std::int32_t* limits = nullptr;  //!< [base.num_requests()], each in [0, base.length(r)]

  SPECDEC_HOST_DEVICE int num_requests() const noexcept { return base.num_requests(); }
  SPECDEC_HOST_DEVICE int num_kv_heads() const noexcept { return base.num_kv_heads(); }
  SPECDEC_HOST_DEVICE int head_dim() const noexcept { return base.head_dim(); }
  SPECDEC_HOST_DEVICE int length(int r) const noexcept { return limits[r]; }
  SPECDEC_HOST_DEVICE memory_space space() const noexcept { return base.space(); }
  SPECDEC_HOST_DEVICE auto k_row(int r, int t, int h) const noexcept { return base.k_row(r, t, h); }
  SPECDEC_HOST_DEVICE auto v_row(int r, int t, int h) const noexcept { return base.v_row(r, t, h); }

  //! The memory the view reads, for overlap checks (kv_cache::visit_memory): the base layout's, when
  //! it reports it, and the limits array. Without it a workspace over the target cache passed the
  //! attention's overlap check (the base's memory went unreported through the wrapper). Host code. O(1).
  template <class F>
  void visit_memory(F&& f) const {
    if constexpr (requires { base.visit_memory(f); }) base.visit_memory(f);
    if (limits != nullptr && base.num_requests() > 0)
      f(std::string_view("committed_lengths"),
        strided_view<const std::int32_t, 1>(limits, {static_cast<std::int64_t>(base.num_requests())}, {1}, base.space()));
  }
};

//! Validates the base layout, then (host memory) every limit in [0, base.length(r)].
template <class L>
void validate_layout(const kv_prefix<L>& l, std::string_view function, std::string_view argument) {
  validate_kv_layout(l.base, function, argument);
  if (!(l.base.num_requests() == 0 || l.limits != nullptr)) [[unlikely]]
    throw_invalid_argument(function, argument, "non-null limits (committed lengths)", "nullptr");
  if (!host_accessible(l.base.space())) return;
  for (int r = 0; r < l.base.num_requests(); ++r)
    if (!(l.limits[r] >= 0 && l.limits[r] <= l.base.length(r))) [[unlikely]]
      throw_invalid_argument(function, argument,
                             "committed length of request " + std::to_string(r) + " in [0, target length " +
                                 std::to_string(l.base.length(r)) + "]",
                             l.limits[r]);
}

// ---- cross-attention -----------------------------------------------------------------------------

inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

//! Bytes of workspace cross_attention needs with the same arguments and options. O(requests).
template <execution_policy P, tensor_like Q, class L, tensor_like I>
[[nodiscard]] std::size_t cross_attention_workspace_bytes(const P& policy, const Q& q, const L& target_cache,
                                                          const I& q_indptr, const attention_options& options = {}) {
  static_assert(check_kv_layout<L>());  // L is unconstrained so that these messages are what a non-layout gets
  if constexpr (kv_layout<L>)
    return detail::delegate_call("specdec::cross_attention_workspace_bytes", [&] {
      return decode_attention_workspace_bytes(policy, q, target_cache, q_indptr, options);
    });
  else
    return std::size_t{0};
}

//! Cross-attention of draft queries to one target layer's KV cache, read in place: every query token
//! of request r attends, unmasked, to target tokens [0, target_cache.length(r)).
//!   q             [T, Hq, D] draft queries projected to the target's Hq and D (see file comment),
//!                 same storage type as the target cache (float, half, bfloat16)
//!   target_cache  the target layer's kv_layout (never copied; read through k_row/v_row)
//!   q_indptr      int32 [R + 1], R = target_cache.num_requests()
//!   out [T, Hq, D], lse fp32 [T, Hq]
//! Preconditions: those of decode_attention (D in {64,128,256}, Hq % Hkv == 0). Policy: host (host
//! memory), or cuda with attention/decode_attention.cuh included (the target's KV in device memory,
//! 16-bit storage, read in place by the cuda decode kernels). Errors name this function. Complexity O(sum_r n_r L_r Hq D); allocation-free with options.workspace.
template <execution_policy P, tensor_like Q, class L, tensor_like I, tensor_like O, tensor_like LS>
void cross_attention(const P& policy, const Q& q, const L& target_cache, const I& q_indptr, const O& out,
                     const LS& lse, const attention_options& options = {}) {
  static_assert(check_kv_layout<L>());  // L is unconstrained so that these messages are what a non-layout gets
  if constexpr (kv_layout<L>)
    detail::delegate_call("specdec::cross_attention",
                          [&] { decode_attention(policy, q, target_cache, q_indptr, out, lse, options); });
}

//! Cross-attention limited to each request's committed prefix: request r's queries see target tokens
//! [0, committed_lengths[r]) only (the target's layout may already hold tokens under verification).
//! Zero copy (a kv_prefix over the target layout). Extra precondition: committed_lengths.size() == R
//! and 0 <= committed_lengths[r] <= target_cache.length(r).
template <tensor_like Q, class L, tensor_like I, tensor_like O, tensor_like LS>
void cross_attention(const host& policy, const Q& q, const L& target_cache,
                     std::span<const std::int32_t> committed_lengths, const I& q_indptr, const O& out, const LS& lse,
                     const attention_options& options = {}) {
  static_assert(check_kv_layout<L>());  // L is unconstrained so that these messages are what a non-layout gets
  if constexpr (kv_layout<L>) {
    constexpr std::string_view fn = "specdec::cross_attention";
    if (!(static_cast<std::int64_t>(committed_lengths.size()) == target_cache.num_requests())) [[unlikely]]
      throw_invalid_argument(fn, "committed_lengths",
                             "one length per request (" + std::to_string(target_cache.num_requests()) + ")",
                             committed_lengths.size());
    validate_kv_layout(target_cache, fn, "target_cache");
    if (host_accessible(target_cache.space()))
      for (int r = 0; r < target_cache.num_requests(); ++r)
        if (!(committed_lengths[r] >= 0 && committed_lengths[r] <= target_cache.length(r))) [[unlikely]]
          throw_invalid_argument(fn, "committed_lengths",
                                 "committed length of request " + std::to_string(r) + " in [0, target length " +
                                     std::to_string(target_cache.length(r)) + "]",
                                 committed_lengths[r]);
    const kv_prefix<L> prefix{target_cache, committed_lengths.data()};
    detail::delegate_call(fn, [&] { decode_attention(policy, q, prefix, q_indptr, out, lse, options); });
  }
}

// ---- GLIDE query projection --------------------------------------------------------------------

//! GLIDE §4.1 query projection Q^{m,j} = H^m W_j for every target head j:
//!   q[t, j, e] = sum_c hidden[t, c] * w_q[j * D + e, c]
//! with w_q in the nn.Linear layout [Hq * D, d_D] (row j*D + e is column e of the paper's W_j).
//!   hidden [T, d_D], w_q [Hq * D, d_D], q_out [T, Hq, D]; all the same storage type (float, half,
//!   bfloat16), unit inner stride, host memory. fp32 accumulation.
//! Complexity O(T * Hq * D * d_D), parallel over (token block, head).
template <tensor_like H, tensor_like W, tensor_like QO>
void glide_project_queries(const host& policy, const H& hidden_in, const W& w_in, const QO& q_in) {
  constexpr std::string_view fn = "specdec::glide_project_queries";
  static_assert(H::rank == 2, "glide_project_queries: hidden must be rank 2 [tokens, d_draft]");
  static_assert(W::rank == 2, "glide_project_queries: w_q must be rank 2 [heads * head_dim, d_draft]");
  static_assert(QO::rank == 3, "glide_project_queries: q_out must be rank 3 [tokens, heads, head_dim]");
  using T = std::remove_cv_t<typename QO::element_type>;
  static_assert(storage_float<T> && !std::is_const_v<typename QO::element_type>,
                "glide_project_queries: q_out must be a writable float/half/bfloat16 tensor");
  static_assert(std::is_same_v<std::remove_cv_t<typename H::element_type>, T> &&
                    std::is_same_v<std::remove_cv_t<typename W::element_type>, T>,
                "glide_project_queries: hidden, w_q and q_out must share one storage type");
  const auto hidden = as_view(hidden_in);
  const auto w = as_view(w_in);
  const auto q = as_view(q_in);
  require(policy.num_threads >= 0, fn, "policy.num_threads", ">= 0", policy.num_threads);
  require_host_accessible(fn, "hidden", hidden);
  require_host_accessible(fn, "w_q", w);
  require_host_accessible(fn, "q_out", q);
  require_unit_inner_stride(fn, "hidden", hidden);
  require_unit_inner_stride(fn, "w_q", w);
  require_unit_inner_stride(fn, "q_out", q);
  require_array(fn, "hidden", hidden);
  const std::int64_t tokens = hidden.extent(0), dd = hidden.extent(1);
  const std::int64_t heads = q.extent(1), hd = q.extent(2);
  require(dd > 0, fn, "hidden", "d_draft (extent 1) > 0", dd);
  require(heads > 0 && hd > 0 && heads <= INT32_MAX && hd <= INT32_MAX, fn, "q_out",
          "heads and head_dim in [1, 2^31)", shape_string(q));
  require_shape(fn, "q_out", q, {tokens, -1, -1});
  require_shape(fn, "w_q", w, {heads * hd, dd});
  require_unique_elements(fn, "q_out", q);
  // q_out is written while hidden and w_q are still read (by other tasks too)
  require_outputs_apart(fn, std::forward_as_tuple("q_out", q), std::forward_as_tuple("hidden", hidden, "w_q", w));
  if (tokens == 0) return;
  constexpr std::int64_t tok_block = 8;
  const std::int64_t tblocks = (tokens + tok_block - 1) / tok_block;
  auto body = [&](std::int64_t item) {
    const std::int64_t tb = item / heads, j = item % heads;
    const std::int64_t t0 = tb * tok_block, t1 = std::min(tokens, t0 + tok_block);
    for (std::int64_t e = 0; e < hd; ++e) {
      const auto* wr = &w(j * hd + e, 0);
      for (std::int64_t t = t0; t < t1; ++t) {
        const auto* hr = &hidden(t, 0);
        // 16 independent partial sums: the compiler vectorizes them (a single running sum is a
        // serial dependency it may not reorder without -ffast-math).
        using A = accum_t<T>;
        A lanes[16] = {};
        std::int64_t c = 0;
        for (; c + 16 <= dd; c += 16)
          for (int l = 0; l < 16; ++l)
            lanes[l] += static_cast<A>(to_float(hr[c + l])) * static_cast<A>(to_float(wr[c + l]));
        A acc = 0;
        for (; c < dd; ++c) acc += static_cast<A>(to_float(hr[c])) * static_cast<A>(to_float(wr[c]));
        for (int l = 0; l < 16; ++l) acc += lanes[l];
        if constexpr (std::is_same_v<T, double>)
          q(t, j, e) = acc;
        else
          q(t, j, e) = from_float<T>(acc);
      }
    }
  };
  if (policy.num_threads == 1 || tokens * heads * hd * dd < (1 << 18)) {
    for (std::int64_t i = 0; i < tblocks * heads; ++i) body(i);
  } else {
    parallel_for(policy, tblocks * heads, body);
  }
}

}  // namespace SPECDEC_HOST_ISA

}  // namespace specdec
