#pragma once
//! \file sampler.hpp
//! Token samplers over one processed row: greedy argmax and exact categorical sampling by inverse
//! CDF, without sorting the vocabulary.
//!
//! Exactness of the categorical samplers: one uniform u = k * 2^-53 (k uniform in [0, 2^53), two
//! Philox words) is scaled by the row total S (double sum of block sums) and the token returned is
//! the first i with u*S < C_i, C_i the running double sum of the weights (found by walking the block
//! sums, then scanning one block). Token i is therefore drawn with probability w_i / S up to the 2^-53
//! grid of u and double rounding (relative error below V * 2^-53, < 1.5e-11 for V = 128K): far below
//! anything a statistical test or a language model can resolve. For logits the weights are
//! w_i = detail::fast_exp(l_i - max) (relative error < 2e-7 against exp, the same function every
//! processor uses, so "the distribution" is defined by it consistently). Zero-weight tokens are never
//! returned (rounding past a block's end falls back to that block's last positive-weight token).
//! Randomness: only through the caller's philox_stream, so (seed, request, step) fixes the draw.

#include <algorithm>
#include <cmath>
#include <vector>
#include <cstdint>
#include <limits>
#include <span>

#include "specdec/core/error.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/sampling/detail/vec.hpp"

namespace specdec {

//! Greedy decoding: the index of the largest logit (or probability), lowest id on ties.
//! Preconditions: non-empty; at least one value above -inf (NaN values are never chosen).
//! Complexity: O(V), one pass.
[[nodiscard]] inline std::int32_t greedy_token(std::span<const float> row) {
  constexpr std::string_view fn = "specdec::greedy_token";
  require(!row.empty(), fn, "row", "a non-empty row", row.size());
  const float m = detail::row_max(row.data(), row.size());
  require(m > -std::numeric_limits<float>::infinity(), fn, "row", "at least one value above -inf", "all -inf or NaN");
  return static_cast<std::int32_t>(detail::first_index_of(row.data(), row.size(), m));
}

namespace detail {

//! Inverse-CDF draw from non-negative weights given through `weight(i)`; `total` their double sum.
template <class Weight>
std::int32_t inverse_cdf(std::size_t v, Weight&& weight, double total, philox_stream& rng) {
  const double u = rng.uniform_double() * total;
  double c = 0.0;
  std::int32_t last = -1;
  for (std::size_t i = 0; i < v; ++i) {
    const double w = weight(i);
    if (w > 0.0) {
      c += w;
      last = static_cast<std::int32_t>(i);
      if (u < c) return last;
    }
  }
  return last;
}

//! Blocked inverse CDF: weight(i) for i in [0, v) is the same pure function in both passes;
//! block_sum(lo, hi) must equal the sum the scan would see up to rounding. Blocks of 1024 tokens: one
//! vectorized pass computes block sums (the total is their sum in block order), the draw walks the
//! block sums and scans a single block element by element. If rounding leaves u * total at or past
//! the end of the chosen block, the last positive-weight token of that block is returned; if past the
//! last block, the last positive-weight token of the row.
template <class BlockSum, class Weight>
std::int32_t blocked_inverse_cdf(std::size_t v, BlockSum&& block_sum, Weight&& weight, philox_stream& rng,
                                 std::string_view fn, std::string_view argument) {
  constexpr std::size_t block = 1024;
  const std::size_t nb = (v + block - 1) / block;
  double local[128];
  std::vector<double> heap;
  double* bs = local;
  if (nb > 128) {
    heap.resize(nb);
    bs = heap.data();
  }
  double total = 0.0;
  for (std::size_t b = 0; b < nb; ++b) {
    bs[b] = block_sum(b * block, std::min(v, (b + 1) * block));
    total += bs[b];
  }
  require(total > 0.0, fn, argument, "a positive sum", total);
  const double u = rng.uniform_double() * total;
  double c = 0.0;
  for (std::size_t b = 0; b < nb; ++b) {
    if (c + bs[b] > u && bs[b] > 0.0) {
      std::int32_t last = -1;
      for (std::size_t i = b * block; i < std::min(v, (b + 1) * block); ++i) {
        const double w = weight(i);
        if (w > 0.0) {
          c += w;
          last = static_cast<std::int32_t>(i);
          if (u < c) return last;
        }
      }
      return last;
    }
    c += bs[b];
  }
  for (std::size_t i = v; i-- > 0;)
    if (weight(i) > 0.0) return static_cast<std::int32_t>(i);
  return -1;  // unreachable: total > 0
}

}  // namespace detail

//! Draws a token from softmax(logits) (the processed row; -inf = excluded) by blocked inverse CDF
//! (exp by detail::fast_exp, sums in double). Preconditions: non-empty; no NaN; at least one logit
//! above -inf (+inf logits: uniform over them, the limit of softmax). Consumes two Philox words.
//! Complexity: O(V): a validation/max pass, one vectorized exp-and-sum pass, a scan of one 1024-token
//! block; no sorting, no allocation below 128K tokens.
[[nodiscard]] inline std::int32_t sample_token(std::span<const float> logits, philox_stream& rng) {
  constexpr std::string_view fn = "specdec::sample_token";
  require(!logits.empty(), fn, "logits", "a non-empty row", logits.size());
  const float m = detail::row_max(logits.data(), logits.size());
  bool nan = false;
  for (float x : logits) nan |= x != x;
  require(!nan, fn, "logits", "no NaN logits", "NaN");
  require(m > -std::numeric_limits<float>::infinity(), fn, "logits", "at least one logit above -inf", "all -inf");
  if (std::isinf(m)) {  // +inf dominates: uniform over the +inf entries, as the limit of softmax
    double cnt = 0.0;
    for (float x : logits) cnt += (x == m);
    return detail::inverse_cdf(
        logits.size(), [&](std::size_t i) { return logits[i] == m ? 1.0 : 0.0; }, cnt, rng);
  }
  const float* x = logits.data();
  return detail::blocked_inverse_cdf(
      logits.size(), [&](std::size_t lo, std::size_t hi) { return detail::exp_sum(x + lo, hi - lo, m, nullptr); },
      [&](std::size_t i) { return static_cast<double>(detail::fast_exp(x[i] - m)); }, rng, fn, "logits");
}

//! Draws a token from a row of non-negative probabilities (or any non-negative weights: the row is
//! normalised by its own sum) by blocked inverse CDF. Preconditions: non-empty, every entry finite and
//! >= 0, positive sum. Consumes two Philox words. Complexity: O(V), two vectorized passes and a scan
//! of one 1024-token block.
[[nodiscard]] inline std::int32_t sample_from_probs(std::span<const float> probs, philox_stream& rng) {
  constexpr std::string_view fn = "specdec::sample_from_probs";
  require(!probs.empty(), fn, "probs", "a non-empty row", probs.size());
  bool bad = false;
  for (float x : probs) bad |= !(x >= 0.0f && x <= std::numeric_limits<float>::max());
  require(!bad, fn, "probs", "finite non-negative entries", "a negative, infinite or NaN entry");
  const float* x = probs.data();
  return detail::blocked_inverse_cdf(
      probs.size(), [&](std::size_t lo, std::size_t hi) { return detail::lane_sum(x + lo, hi - lo); },
      [&](std::size_t i) { return static_cast<double>(x[i]); }, rng, fn, "probs");
}

}  // namespace specdec
