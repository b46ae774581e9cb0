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
#include <vector>

#include "specdec/core/numeric.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/kv/kv_layout.hpp"
#include "specdec/reference/attention.hpp"

namespace specdec::reference {

//! Double reference of cross_attention with committed lengths: for request r, query token i, head h,
//! keys = target rows [0, committed[r]) of kv head h / (Hq / Hkv), plain max-subtracted softmax.
//! O(sum_r n_r committed_r Hq D).
template <tensor_like Q, kv_layout L, tensor_like I>
attention_result cross_attention(const Q& q_in, const L& target, std::span<const std::int32_t> committed,
                                 const I& q_indptr_in, double scale = 0.0) {
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

//! Double reference of glide_project_queries (row-major hidden [T, dD], w [Hq*D, dD]).
inline std::vector<double> glide_project_queries(const std::vector<double>& hidden, const std::vector<double>& w,
                                                 int tokens, int d_draft, int heads, int head_dim) {
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
