#pragma once
//! \file reference/cross_attention.hpp
//! Double-precision references of attention/cross_attention.hpp for the differential tests: the
//! cross-attention of draft queries to a target layer's committed prefix, and GLIDE's query
//! projection, as plain loops. The attention one loops over the layout's rows directly (it does not
//! go through decode_attention or kv_prefix) and shares only the oracles' softmax
//! (reference/attention.hpp).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/numeric.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/kv/kv_layout.hpp"
#include "specdec/reference/attention.hpp"

namespace specdec::reference {

//! Double reference of cross_attention with committed lengths: for request r, query token i, head h,
//! keys = target rows [0, committed[r]) of kv head h / (Hq / Hkv), plain max-subtracted softmax.
//! O(sum_r n_r committed_r Hq D). Bad arguments throw specdec::invalid_argument naming this
//! function: the layout (validate_kv_layout), committed.size() == R and 0 <= committed[r] <=
//! target.length(r), q_indptr [R + 1] with valid offsets summing to q's tokens, Hq a multiple of
//! Hkv, q's head_dim equal to the target's, a finite scale.
template <tensor_like Q, kv_layout L, tensor_like I>
attention_result cross_attention(const Q& q_in, const L& target, std::span<const std::int32_t> committed,
                                 const I& q_indptr_in, double scale = 0.0) {
  {
    constexpr std::string_view fn = "specdec::reference::cross_attention";
    const auto qv = as_view(q_in);
    const auto iv = as_view(q_indptr_in);
    static_assert(decltype(qv)::rank == 3, "specdec::reference::cross_attention: q is [tokens, heads, head_dim]");
    static_assert(decltype(iv)::rank == 1, "specdec::reference::cross_attention: q_indptr is [requests + 1]");
    require(target.num_requests() >= 0, fn, "target", "num_requests() >= 0", target.num_requests());
    const std::int64_t requests = target.num_requests();
    if (!(static_cast<std::int64_t>(committed.size()) == requests)) [[unlikely]]
      throw_invalid_argument(fn, "committed", "one length per request (" + std::to_string(requests) + ")",
                             committed.size());
    require_shape(fn, "q_indptr", iv, {requests + 1});
    validate_kv_layout(target, fn, "target");
    for (int r = 0; r < target.num_requests(); ++r)
      if (!(committed[static_cast<std::size_t>(r)] >= 0 && committed[static_cast<std::size_t>(r)] <= target.length(r)))
          [[unlikely]]
        throw_invalid_argument(fn, "committed",
                               "committed length of request " + std::to_string(r) + " in [0, target length " +
                                   std::to_string(target.length(r)) + "]",
                               committed[static_cast<std::size_t>(r)]);
    require_array(fn, "q", qv);
    const std::int64_t tokens = qv.extent(0), hq = qv.extent(1), d = qv.extent(2);
    require(tokens <= INT32_MAX, fn, "q", "at most 2^31-1 tokens", tokens);
    require(hq >= 1 && hq <= INT32_MAX, fn, "q", "between 1 and 2^31-1 query heads (extent 1)", hq);
    (void)checked_size_product(fn, "q", {tokens, hq, d});
    if (target.head_dim() != d) [[unlikely]]
      throw_invalid_argument(fn, "target", "head_dim() equal to q's head_dim " + std::to_string(d), target.head_dim());
    detail::require_head_groups(fn, hq, target.num_kv_heads());
    (void)detail::checked_q_offsets(fn, iv, tokens);
    require(std::isfinite(scale), fn, "scale", "a finite value (0 = 1/sqrt(head_dim))", scale);
  }
  const auto q = as_view(q_in);
  const auto ip = as_view(q_indptr_in);
  const int tokens = static_cast<int>(q.extent(0)), hq = static_cast<int>(q.extent(1)),
            d = static_cast<int>(q.extent(2));
  const int group = hq / target.num_kv_heads();
  if (scale == 0.0) scale = 1.0 / std::sqrt(static_cast<double>(d));
  attention_result res = detail::empty_result(tokens, hq, d);
  std::vector<double> logits;
  for (int r = 0; r < target.num_requests(); ++r)
    for (int t = ip(r); t < ip(r + 1); ++t)
      for (int h = 0; h < hq; ++h) {
        const int n = committed[static_cast<std::size_t>(r)], g = h / group;
        logits.clear();
        for (int k = 0; k < n; ++k) {
          const auto* kr = target.k_row(r, k, g);
          double dot = 0;
          for (int c = 0; c < d; ++c) dot += static_cast<double>(to_float(q(t, h, c))) * to_float(kr[c]);
          logits.push_back(dot * scale);
        }
        res.lse[static_cast<std::size_t>(t) * hq + h] = detail::softmax_row(
            logits,
            [&](std::size_t k) {
              const auto* vr = target.v_row(r, static_cast<int>(k), g);
              return [vr](int c) { return static_cast<double>(to_float(vr[c])); };
            },
            &res.out[(static_cast<std::size_t>(t) * hq + h) * d], d);
      }
  return res;
}

//! Double reference of glide_project_queries (row-major hidden [T, dD], w [Hq*D, dD]). Throws
//! specdec::invalid_argument naming this function on a negative size or a hidden / w whose
//! size is not T * dD / Hq * D * dD.
inline std::vector<double> glide_project_queries(const std::vector<double>& hidden, const std::vector<double>& w,
                                                 int tokens, int d_draft, int heads, int head_dim) {
  {
    constexpr std::string_view fn = "specdec::reference::glide_project_queries";
    require(tokens >= 0, fn, "tokens", ">= 0", tokens);
    require(d_draft >= 0, fn, "d_draft", ">= 0", d_draft);
    require(heads >= 0, fn, "heads", ">= 0", heads);
    require(head_dim >= 0, fn, "head_dim", ">= 0", head_dim);
    const std::int64_t hidden_size = checked_size_product(fn, "hidden", {tokens, d_draft});
    const std::int64_t w_size = checked_size_product(fn, "w", {heads, head_dim, d_draft});
    (void)checked_size_product(fn, "tokens", {tokens, heads, head_dim});  // the result's size
    if (!(hidden.size() == static_cast<std::size_t>(hidden_size))) [[unlikely]]
      throw_invalid_argument(fn, "hidden", "tokens * d_draft = " + std::to_string(hidden_size) + " elements",
                             hidden.size());
    if (!(w.size() == static_cast<std::size_t>(w_size))) [[unlikely]]
      throw_invalid_argument(fn, "w", "heads * head_dim * d_draft = " + std::to_string(w_size) + " elements",
                             w.size());
  }
  std::vector<double> q(static_cast<std::size_t>(tokens) * heads * head_dim, 0.0);
  for (int t = 0; t < tokens; ++t)
    for (int j = 0; j < heads; ++j)
      for (int e = 0; e < head_dim; ++e) {
        double s = 0;
        for (int c = 0; c < d_draft; ++c)
          s += hidden[static_cast<std::size_t>(t) * d_draft + c] *
               w[(static_cast<std::size_t>(j) * head_dim + e) * d_draft + c];
        q[(static_cast<std::size_t>(t) * heads + j) * head_dim + e] = s;
      }
  return q;
}

}  // namespace specdec::reference
