#pragma once
// Plain reference of the logits-processor chain (specdec/sampling/logits_processor.hpp): sets instead
// of marks, full sorts instead of linear-time selection. Same float arithmetic for the value-changing
// steps (penalties, temperature), so processed rows must agree element for element.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

#include "specdec/sampling/logits_processor.hpp"

namespace ref {

inline void process(std::vector<float>& row, const specdec::sampling_params& p, const std::vector<std::int32_t>& ctx) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const std::size_t v = row.size();
  if (p.repetition_penalty != 1.0f) {
    const std::set<std::int32_t> s(ctx.begin(), ctx.end());
    for (auto t : s) row[t] = row[t] > 0.0f ? row[t] / p.repetition_penalty : row[t] * p.repetition_penalty;
  }
  if (p.contextual_penalty != 1.0f && p.penalty_window > 0) {
    const std::size_t w = std::min<std::size_t>(ctx.size(), p.penalty_window);
    const std::set<std::int32_t> s(ctx.end() - static_cast<std::ptrdiff_t>(w), ctx.end());
    for (auto t : s)
      row[t] = (p.contextual_sign_aware && row[t] <= 0.0f) ? row[t] * p.contextual_penalty
                                                             : row[t] / p.contextual_penalty;
  }
  std::vector<std::int32_t> order(v);
  auto sort_order = [&] {
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  };
  if (p.temperature == 0.0f) {
    sort_order();
    const int top = order[0];
    for (std::size_t i = 0; i < v; ++i) row[i] = static_cast<int>(i) == top ? 0.0f : ninf;
    return;
  }
  if (p.temperature != 1.0f) {
    const float inv = 1.0f / p.temperature;
    for (auto& x : row) x *= inv;
  }
  if (p.top_k > 0 && static_cast<std::size_t>(p.top_k) < v) {
    sort_order();
    for (std::size_t j = static_cast<std::size_t>(p.top_k); j < v; ++j) row[order[j]] = ninf;
  }
  // the processors' weights: exp(l - max) by specdec::detail::fast_exp (their definition of softmax)
  auto weights = [&] {
    const float m = *std::max_element(row.begin(), row.end());
    std::vector<double> w(v);
    for (std::size_t i = 0; i < v; ++i) w[i] = specdec::detail::fast_exp(row[i] - m);
    return w;
  };
  if (p.top_p < 1.0f) {
    const auto w = weights();
    // order: weight desc, then logit desc (weights that round equal), then id asc
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      if (w[a] != w[b]) return w[a] > w[b];
      if (row[a] != row[b]) return row[a] > row[b];
      return a < b;
    });
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    double cum = 0.0;
    std::size_t j = 0;
    for (; j < v; ++j) {
      if (w[order[j]] <= 0.0) break;
      cum += w[order[j]];
      if (cum >= p.top_p * total) { ++j; break; }
    }
    for (; j < v; ++j) row[order[j]] = ninf;
  }
  if (p.min_p > 0.0f) {  // P >= p_base * p_max  <=>  l - max >= ln(p_base)
    const double m = *std::max_element(row.begin(), row.end()), lnp = std::log(static_cast<double>(p.min_p));
    for (std::size_t i = 0; i < v; ++i) if (!(static_cast<double>(row[i]) - m >= lnp)) row[i] = ninf;
  }
  if (p.eta_epsilon > 0.0f) {
    const auto w = weights();
    const double s = std::accumulate(w.begin(), w.end(), 0.0);
    double h = 0.0;
    for (double x : w) if (x > 0) h -= (x / s) * std::log(x / s);
    const double alpha = p.eta_alpha < 0 ? std::sqrt(double(p.eta_epsilon)) : p.eta_alpha;
    const double eta = std::min<double>(p.eta_epsilon, alpha * std::exp(-h));
    sort_order();
    for (std::size_t i = 0; i < v; ++i) if (w[i] / s < eta && static_cast<int>(i) != order[0]) row[i] = ninf;
  }
}

//! The top-p keep set by the documented rule with a full sort (apply_top_p selects instead): bins
//! above the boundary whole, then the boundary bin's tokens in (logit desc, id asc) order until
//! their weight reaches what is still needed, the weights added exactly in that order.
inline std::vector<float> top_p_by_sort(const std::vector<float>& row, float top_p) {
  const float m = *std::max_element(row.begin(), row.end());
  std::vector<float> w(row.size());
  const double total = specdec::detail::exp_sum(row.data(), row.size(), m, w.data());
  std::vector<double> mass(specdec::detail::top_p_bins, 0.0);
  for (const float x : w) mass[specdec::detail::top_p_bin_of(x)] += x;
  const double need = static_cast<double>(top_p) * total;
  double above = 0.0;
  std::uint32_t b = specdec::detail::top_p_bins - 1;
  for (; b > 0 && above + mass[b] < need; --b) above += mass[b];
  std::vector<std::int32_t> idx;
  for (std::size_t i = 0; i < row.size(); ++i)
    if (w[i] > 0.0f && specdec::detail::top_p_bin_of(w[i]) == b) idx.push_back(static_cast<std::int32_t>(i));
  std::sort(idx.begin(), idx.end(), [&](std::int32_t x, std::int32_t y) {
    return row[static_cast<std::size_t>(x)] > row[static_cast<std::size_t>(y)] ||
           (row[static_cast<std::size_t>(x)] == row[static_cast<std::size_t>(y)] && x < y);
  });
  std::vector<float> out(row.size(), -std::numeric_limits<float>::infinity());
  for (std::size_t i = 0; i < row.size(); ++i)
    if (specdec::detail::top_p_bin_of(w[i]) > b) out[i] = row[i];
  double acc = 0.0;
  for (std::size_t j = 0; j < idx.size() && acc < need - above; ++j) {
    acc += w[static_cast<std::size_t>(idx[j])];
    out[static_cast<std::size_t>(idx[j])] = row[static_cast<std::size_t>(idx[j])];
  }
  return out;
}

}  // namespace ref
