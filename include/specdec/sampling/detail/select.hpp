#pragma once
//! \file select.hpp
//! Linear-time selection helpers used by the truncating logits processors (top-k, top-p). Nothing here
//! sorts the whole vocabulary: top-k is one nth_element over the values, top-p a mass-aware
//! quickselect (expected O(V)), so a 128K-token row costs a few passes instead of V log V.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace specdec::detail {

//! Token order every truncation uses: higher value first, then lower id. A strict total order, so
//! "the k best tokens" and "the smallest set with mass >= p" are unique even with ties.
struct value_then_id {
  const float* values;
  bool operator()(std::int32_t a, std::int32_t b) const noexcept {
    const float va = values[a], vb = values[b];
    return va > vb || (va == vb && a < b);
  }
};

//! Marks the k best tokens of `values` (order value_then_id) by setting keep[i] = 1, others 0.
//! -inf values count as ordinary (lowest) values. `scratch` is resized to values.size().
//! Expected O(V): one nth_element over a copy of the values, then one pass that resolves ties at the
//! k-th value in favour of lower ids.
inline void select_top_k(std::span<const float> values, int k, std::vector<float>& scratch,
                         std::vector<std::uint8_t>& keep) {
  const std::size_t v = values.size();
  keep.assign(v, 0);
  if (k <= 0) return;
  if (static_cast<std::size_t>(k) >= v) {
    std::fill(keep.begin(), keep.end(), std::uint8_t{1});
    return;
  }
  scratch.assign(values.begin(), values.end());
  // k-th largest: position k-1 in descending order.
  std::nth_element(scratch.begin(), scratch.begin() + (k - 1), scratch.end(), std::greater<float>());
  const float kth = scratch[static_cast<std::size_t>(k - 1)];
  std::size_t above = 0;
  for (std::size_t i = 0; i < v; ++i) above += values[i] > kth;
  std::size_t ties_left = static_cast<std::size_t>(k) - above;  // >= 1 by construction of kth
  for (std::size_t i = 0; i < v; ++i) {
    if (values[i] > kth) {
      keep[i] = 1;
    } else if (values[i] == kth && ties_left > 0) {
      keep[i] = 1;
      --ties_left;
    }
  }
}

//! Nucleus selection (TokenSwift Appendix D.1, Holtzman et al. 2020): given unnormalised weights
//! w (w >= 0, total `total`), returns the number m of tokens in the smallest prefix of the
//! value_then_id order of `order_key` whose weight reaches `fraction * total`, and leaves those m
//! ids in idx[0..m). `idx` must hold the candidate ids (tokens with w > 0). Expected O(|idx|):
//! nth_element at the midpoint, then recurse into the half that holds the boundary (the classic
//! weighted-median quickselect). Sums are double.
inline std::size_t select_top_p(const double* w, const float* order_key, double fraction, double total,
                                std::vector<std::int32_t>& idx) {
  const std::size_t n = idx.size();
  if (n == 0) return 0;
  double need = fraction * total;
  std::size_t lo = 0, hi = n;  // invariant: idx[0, lo) kept (already subtracted), boundary m in (lo, hi]
  const value_then_id before{order_key};
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    std::nth_element(idx.begin() + static_cast<std::ptrdiff_t>(lo), idx.begin() + static_cast<std::ptrdiff_t>(mid),
                     idx.begin() + static_cast<std::ptrdiff_t>(hi), before);
    double left = 0.0;
    for (std::size_t i = lo; i < mid; ++i) left += w[idx[i]];
    if (left >= need) {
      hi = mid;
    } else {
      need -= left;
      lo = mid;
    }
  }
  return hi;
}

}  // namespace specdec::detail
