#pragma once
//! \file sampler.hpp
//! Token samplers over one processed row: greedy argmax and exact categorical sampling by inverse
//! CDF, without sorting the vocabulary.
//!
//! Exactness of the categorical samplers: one uniform u = k * 2^-53 (k uniform in [0, 2^53), two
//! Philox words) is scaled by the row total S and the row is scanned once, accumulating weights in
//! double; the token returned is the first i with u*S < C_i (C_i the running sum). Token i is therefore
//! drawn with probability w_i / S up to the 2^-53 grid of u and double rounding of the running sum
//! (relative error below V * 2^-53, i.e. < 1.5e-11 for V = 128K): far below anything a statistical
//! test or a language model can resolve. Zero-weight tokens are never returned (if rounding leaves u*S
//! at or past the last running sum, the last token with positive weight is returned).
//! Randomness: only through the caller's philox_stream, so (seed, request, step) fixes the draw.

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>

#include "specdec/core/error.hpp"
#include "specdec/core/philox.hpp"

namespace specdec {

//! Greedy decoding: the index of the largest logit (or probability), lowest id on ties.
//! Preconditions: non-empty; at least one value above -inf (NaN values are never chosen).
//! Complexity: O(V), one pass.
[[nodiscard]] inline std::int32_t greedy_token(std::span<const float> row) {
  constexpr std::string_view fn = "specdec::greedy_token";
  require(!row.empty(), fn, "row", "a non-empty row", row.size());
  std::int32_t best = -1;
  float bv = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < row.size(); ++i)
    if (row[i] > bv) {
      bv = row[i];
      best = static_cast<std::int32_t>(i);
    }
  require(best >= 0, fn, "row", "at least one value above -inf", "all -inf or NaN");
  return best;
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

}  // namespace detail

//! Draws a token from softmax(logits) (the processed row; -inf = excluded) by inverse CDF.
//! Preconditions: non-empty; no NaN; at least one logit above -inf. Consumes two Philox words.
//! Complexity: O(V), three passes (max, sum of exp, scan); no sorting, no allocation.
[[nodiscard]] inline std::int32_t sample_token(std::span<const float> logits, philox_stream& rng) {
  constexpr std::string_view fn = "specdec::sample_token";
  require(!logits.empty(), fn, "logits", "a non-empty row", logits.size());
  float m = -std::numeric_limits<float>::infinity();
  bool nan = false;
  for (float x : logits) {
    nan |= std::isnan(x);
    m = x > m ? x : m;
  }
  require(!nan, fn, "logits", "no NaN logits", "NaN");
  require(m > -std::numeric_limits<float>::infinity(), fn, "logits", "at least one logit above -inf", "all -inf");
  if (std::isinf(m)) {  // +inf dominates: uniform over the +inf entries, as the limit of softmax
    double cnt = 0.0;
    for (float x : logits) cnt += (x == m);
    return detail::inverse_cdf(
        logits.size(), [&](std::size_t i) { return logits[i] == m ? 1.0 : 0.0; }, cnt, rng);
  }
  const double md = m;
  double s = 0.0;
  for (float x : logits) s += std::exp(static_cast<double>(x) - md);
  return detail::inverse_cdf(
      logits.size(), [&](std::size_t i) { return std::exp(static_cast<double>(logits[i]) - md); }, s, rng);
}

//! Draws a token from a row of non-negative probabilities (or any non-negative weights: the row is
//! normalised by its own sum) by inverse CDF. Preconditions: non-empty, every entry finite and >= 0,
//! positive sum. Consumes two Philox words. Complexity: O(V), two passes.
[[nodiscard]] inline std::int32_t sample_from_probs(std::span<const float> probs, philox_stream& rng) {
  constexpr std::string_view fn = "specdec::sample_from_probs";
  require(!probs.empty(), fn, "probs", "a non-empty row", probs.size());
  double s = 0.0;
  bool bad = false;
  for (float x : probs) {
    bad |= !(x >= 0.0f && x <= std::numeric_limits<float>::max());
    s += x;
  }
  require(!bad, fn, "probs", "finite non-negative entries", "a negative, infinite or NaN entry");
  require(s > 0.0, fn, "probs", "a positive sum", s);
  return detail::inverse_cdf(
      probs.size(), [&](std::size_t i) { return static_cast<double>(probs[i]); }, s, rng);
}

}  // namespace specdec
