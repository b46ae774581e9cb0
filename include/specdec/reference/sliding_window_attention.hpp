#pragma once
//! \file reference/sliding_window_attention.hpp
//! Naive double reference of attention/sliding_window_attention.hpp for the differential tests. It
//! never touches a ring: the window comes from the full history (reference/ring_kv.hpp), and the
//! softmax is the oracles' one (reference/attention.hpp).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/bitmask.hpp"
#include "specdec/core/error.hpp"
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
//! Throws specdec::invalid_argument naming this function on: q_indptr not of R + 1 valid offsets
//! (validate_indptr), q not of q_indptr.back() * hq * head_dim elements, hq < 1, head_dim < 1, a
//! history whose kv_heads, head_dim or window (>= 1) differs from the first's / head_dim, hq not a
//! multiple of kv_heads, spec_k without spec_v, a non-finite scale. spec_k, spec_v and mask are raw
//! pointers: their sizes ([T, Hkv, D], the packed masks) remain the caller's to get right.
template <class S>
attention_result sliding_window_attention(const std::vector<double>& q, int hq, int head_dim,
                                          const std::vector<sliding_window_history<S>>& history, const double* spec_k,
                                          const double* spec_v, const std::vector<std::int32_t>& q_indptr,
                                          const mask_word* mask, double scale = 0.0) {
  {
    constexpr std::string_view fn = "specdec::reference::sliding_window_attention";
    const std::int64_t requests = static_cast<std::int64_t>(history.size());
    require(requests <= INT32_MAX - 1, fn, "history", "at most 2^31-2 requests", requests);
    if (!(static_cast<std::int64_t>(q_indptr.size()) == requests + 1)) [[unlikely]]
      throw_invalid_argument(fn, "q_indptr",
                             "history.size() + 1 = " + std::to_string(requests + 1) + " offsets (num_requests + 1)",
                             q_indptr.size());
    specdec::detail::validate_indptr(fn, "q_indptr", "q_indptr", q_indptr.data(), requests);
    require(hq >= 1, fn, "hq", ">= 1", hq);
    require(head_dim >= 1, fn, "head_dim", ">= 1", head_dim);
    const std::int64_t q_size = checked_size_product(fn, "q", {q_indptr.back(), hq, head_dim});
    if (!(q.size() == static_cast<std::size_t>(q_size))) [[unlikely]]
      throw_invalid_argument(fn, "q",
                             "q_indptr.back() * hq * head_dim = " + std::to_string(q_size) +
                                 " elements ([tokens, hq, head_dim])",
                             q.size());
    const int kv_heads = requests ? history[0].kv_heads : 1;
    for (std::size_t r = 0; r < history.size(); ++r) {
      const auto& h = history[r];
      if (!(h.kv_heads == kv_heads)) [[unlikely]]
        throw_invalid_argument(fn, "history",
                               "the same kv_heads = " + std::to_string(kv_heads) + " in every history (request " +
                                   std::to_string(r) + ")",
                               h.kv_heads);
      if (!(h.head_dim == head_dim)) [[unlikely]]
        throw_invalid_argument(fn, "history",
                               "head_dim equal to the argument head_dim = " + std::to_string(head_dim) +
                                   " in every history (request " + std::to_string(r) + ")",
                               h.head_dim);
      if (!(h.window >= 1)) [[unlikely]]
        throw_invalid_argument(fn, "history", "window >= 1 in every history (request " + std::to_string(r) + ")",
                               h.window);
    }
    require(kv_heads >= 1, fn, "history", "kv_heads >= 1", kv_heads);
    if (!(hq % kv_heads == 0)) [[unlikely]]
      throw_invalid_argument(fn, "hq",
                             "a multiple of the number of kv heads (" + std::to_string(kv_heads) + ")", hq);
    if (spec_k != nullptr && spec_v == nullptr) [[unlikely]]
      throw_invalid_argument(fn, "spec_v", "non-null when spec_k is given (the tree tokens' values)", "nullptr");
    require(std::isfinite(scale), fn, "scale", "a finite value (0 = 1/sqrt(head_dim))", scale);
  }
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
