#pragma once
//! \file reference/sliding_window_attention.hpp
//! Naive double reference of attention/sliding_window_attention.hpp for the differential tests. It
//! never touches a ring: the window comes from the full history (reference/ring_kv.hpp), and the
//! softmax is the oracles' one (reference/attention.hpp).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "specdec/core/bitmask.hpp"
#include "specdec/core/numeric.hpp"
#include "specdec/reference/attention.hpp"
#include "specdec/reference/ring_kv.hpp"

namespace specdec::reference {

//! Naive double reference of sliding_window_attention that never touches a ring: for request r it
//! takes the last min(|history_r|, W) tokens of the full history, appends the tree tokens selected
//! by the mask row (all of them when `mask` is null: sliding_window_decode with spec_k == nullptr
//! means no tree part), and computes a max-subtracted softmax. All tensors row-major:
//!   q [T, Hq, D], spec_k/spec_v [T, Hkv, D] (or null), q_indptr [R + 1].
//! Returns out [T, Hq, D] and natural-log lse [T, Hq] (-inf for a row with no keys).
//! O(sum_r n_r (min(|history_r|, W) + n_r) Hq D).
template <class S>
attention_result sliding_window_attention(const std::vector<double>& q, int hq, int head_dim,
                                          const std::vector<sliding_window_history<S>>& history, const double* spec_k,
                                          const double* spec_v, const std::vector<std::int32_t>& q_indptr,
                                          const mask_word* mask, double scale = 0.0) {
  const int requests = static_cast<int>(history.size());
  const int hkv = requests ? history[0].kv_heads : 1;
  const int group = hq / hkv, d = head_dim;
  if (scale == 0.0) scale = 1.0 / std::sqrt(static_cast<double>(d));
  const int tokens = q_indptr.back();
  attention_result res = detail::empty_result(tokens, hq, d);
  std::size_t mask_off = 0;
  std::vector<double> logits;
  std::vector<const double*> tree_v;
  for (int r = 0; r < requests; ++r) {
    const auto& hist = history[r];
    const int t0 = q_indptr[r], n = q_indptr[r + 1] - t0, wpr = words_per_row(n);
    for (int i = 0; i < n; ++i)
      for (int h = 0; h < hq; ++h) {
        const int g = h / group;
        const double* qr = &q[(static_cast<std::size_t>(t0 + i) * hq + h) * d];
        logits.clear();
        tree_v.clear();
        const int window = hist.length();  // the window: the newest min(n, W) history tokens
        for (int t = 0; t < window; ++t) {
          const S* kr = hist.k_row(t, g);
          double s = 0;
          for (int c = 0; c < d; ++c) s += qr[c] * static_cast<double>(to_float(kr[c]));
          logits.push_back(s * scale);
        }
        if (spec_k != nullptr)
          for (int j = 0; j < n; ++j) {
            if (mask != nullptr && !test_bit(mask + mask_off + static_cast<std::size_t>(i) * wpr, j)) continue;
            const double* kr = spec_k + (static_cast<std::size_t>(t0 + j) * hkv + g) * d;
            double s = 0;
            for (int c = 0; c < d; ++c) s += qr[c] * kr[c];
            logits.push_back(s * scale);
            tree_v.push_back(spec_v + (static_cast<std::size_t>(t0 + j) * hkv + g) * d);
          }
        res.lse[static_cast<std::size_t>(t0 + i) * hq + h] = detail::softmax_row(
            logits,
            [&](std::size_t k) {
              const S* wv = k < static_cast<std::size_t>(window) ? hist.v_row(static_cast<int>(k), g) : nullptr;
              const double* tv = wv ? nullptr : tree_v[k - static_cast<std::size_t>(window)];
              return [wv, tv](int c) { return wv ? static_cast<double>(to_float(wv[c])) : tv[c]; };
            },
            &res.out[(static_cast<std::size_t>(t0 + i) * hq + h) * d], d);
      }
    mask_off += static_cast<std::size_t>(n) * wpr;
  }
  return res;
}

}  // namespace specdec::reference
