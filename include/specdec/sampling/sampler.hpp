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
//! returned, and neither is anything outside [0, V): rounding past a block's end falls back to that
//! block's last positive-weight token, past the last block to the row's last positive-weight token,
//! and a row with no positive weight is an error (never a -1).
//! Randomness: only through the caller's philox_stream, so (seed, request, step) fixes the draw.
//!
//! Non-finite numbers (the policy of every token-producing entry point: logits processors, samplers,
//! verifiers). A token id cannot carry a NaN, so bad numbers are rejected with
//! specdec::invalid_argument naming the function, the argument, the row (and request) and the token:
//!  - logits: NaN and +inf are rejected; -inf is legal (a masked token, weight exactly 0); a row with
//!    no logit above -inf has no admissible token and is rejected;
//!  - probabilities / weights: NaN, +-inf and negative entries are rejected; an all-zero row has no
//!    admissible token and is rejected;
//!  - denormals are ordinary numbers (no flush-to-zero is assumed): a row whose only mass is denormal
//!    samples exactly like any other row.
//! The check is folded into a pass that already reads the row (the max pass for logits; for
//! probabilities the block-sum pass, which re-reads each 1024-token block from L1), so it adds no pass
//! over memory; it runs before any Philox word is drawn.

#include <algorithm>
#include <cmath>
#include <vector>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>

#include "specdec/core/error.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/sampling/detail/cdf_search.hpp"
#include "specdec/sampling/detail/row_error.hpp"
#include "specdec/sampling/detail/vec.hpp"

namespace specdec {

namespace detail {

//! scan_logits under the non-finite policy: throws for NaN / +inf (naming the first such token) and
//! for a row with no logit above -inf.
inline logit_scan checked_logit_scan(std::span<const float> row, const row_ref& at) {
  const logit_scan s = scan_logits(row.data(), row.size());
  if (s.bad) [[unlikely]] {
    const std::size_t i = first_nan_or_posinf(row.data(), row.size());
    throw_bad_entry(at, bad_logit_text, static_cast<std::int64_t>(i), row[i]);
  }
  if (!(s.max > -std::numeric_limits<float>::infinity())) [[unlikely]]
    throw_empty_row(at, "at least one logit above -inf", "all -inf");
  return s;
}

//! A model's logits row (float, or double for a model whose logit_type is double) as float, for the
//! float processors and samplers: a finite value outside float's range is refused (its conversion
//! is undefined; it read as +-inf and was then refused as "inf" or taken for a masked token), NaN and
//! +-inf are kept for the checks downstream. O(V).
template <class T>
void assign_float_logits(std::vector<float>& dst, std::span<const T> src, const row_ref& at) {
  if constexpr (std::is_same_v<std::remove_cv_t<T>, float>) {
    dst.assign(src.begin(), src.end());
  } else {
    dst.resize(src.size());
    for (std::size_t i = 0; i < src.size(); ++i) {
      const auto x = src[i];
      if (std::isfinite(x) && !(std::abs(x) <= std::numeric_limits<float>::max())) [[unlikely]]
        throw_bad_entry(at, "logits within float's range (|x| <= FLT_MAX, or +-inf)", static_cast<std::int64_t>(i),
                        static_cast<double>(x));
      dst[i] = static_cast<float>(x);
    }
  }
}

//! Block sums of one row of non-negative weights, and draws from the row by blocked inverse CDF (see
//! the file comment). No allocation up to 128 blocks (128K tokens).
class cdf_blocks {
 public:
  //! Sizes the block sums for a row of v tokens; returns the array (count() entries) for the caller
  //! to fill with the sum of weight(i) over each block; then call sum_up().
  double* reset(std::size_t v) {
    v_ = v;
    nb_ = (v + cdf_block - 1) / cdf_block;
    if (nb_ > local_blocks) heap_.resize(nb_);
    total_ = 0.0;
    return sums();
  }
  //! total() = the block sums added in block order.
  void sum_up() noexcept {
    total_ = cdf_total(sums(), static_cast<std::int64_t>(nb_));
  }
  //! reset(v), block b's sum = block_sum(lo, hi) (the weights of tokens [lo, hi)), sum_up().
  template <class BlockSum>
  void compute(std::size_t v, BlockSum&& block_sum) {
    double* bs = reset(v);
    for (std::size_t b = 0; b < nb_; ++b) bs[b] = block_sum(b * cdf_block, std::min(v, (b + 1) * cdf_block));
    sum_up();
  }
  [[nodiscard]] double total() const noexcept { return total_; }
  [[nodiscard]] std::size_t count() const noexcept { return nb_; }
  [[nodiscard]] double* sums() noexcept { return nb_ > local_blocks ? heap_.data() : local_; }
  [[nodiscard]] const double* sums() const noexcept { return nb_ > local_blocks ? heap_.data() : local_; }

  //! Draws token i with probability weight(i) / total(); weight must be the pure function (values
  //! >= 0) the block sums were taken over. Consumes two Philox words. Returns a token in [0, v) whose
  //! weight is positive, never anything else: a total that is not positive and finite (no admissible
  //! token) throws invalid_argument naming `at` before any word is drawn, and if the block sums ever
  //! disagreed with the weights so that no positive weight is found where one was announced, the walk
  //! goes on to the next blocks and ends at the row's last positive-weight token (or throws).
  template <class Weight>
  std::int32_t draw(Weight&& weight, philox_stream& rng, const row_ref& at) const {
    if (!(total_ > 0.0 && total_ <= std::numeric_limits<double>::max())) [[unlikely]]
      throw_empty_row(at, "a positive sum (at least one token with positive probability)",
                      total_ > 0.0 ? "inf" : "0");
    const double u = rng.uniform_double() * total_;
    const std::int64_t i = cdf_search(sums(), static_cast<std::int64_t>(nb_), static_cast<std::int64_t>(v_), u, weight);
    if (i >= 0) return static_cast<std::int32_t>(i);
    throw_empty_row(at, "a positive sum (at least one token with positive probability)", "no positive weight");
  }

 private:
  static constexpr std::size_t local_blocks = 128;
  std::size_t v_ = 0, nb_ = 0;
  double total_ = 0.0;
  double local_[local_blocks];
  std::vector<double> heap_;
};

//! One blocked inverse-CDF draw: cdf_blocks::compute then cdf_blocks::draw (see there).
template <class BlockSum, class Weight>
std::int32_t blocked_inverse_cdf(std::size_t v, BlockSum&& block_sum, Weight&& weight, philox_stream& rng,
                                 const row_ref& at) {
  cdf_blocks blocks;
  blocks.compute(v, block_sum);
  return blocks.draw(weight, rng, at);
}

//! The same with the error naming `fn` and `argument` only.
template <class BlockSum, class Weight>
std::int32_t blocked_inverse_cdf(std::size_t v, BlockSum&& block_sum, Weight&& weight, philox_stream& rng,
                                 std::string_view fn, std::string_view argument) {
  return blocked_inverse_cdf(v, block_sum, weight, rng, row_ref{fn, argument});
}

//! sample_from_probs with errors naming `at` (the verifiers name their tensor, row and request).
inline std::int32_t draw_from_probs(std::span<const float> probs, philox_stream& rng, const row_ref& at) {
  const float* x = probs.data();
  return blocked_inverse_cdf(
      probs.size(),
      [&](std::size_t lo, std::size_t hi) {
        const prob_sum s = checked_prob_sum(x + lo, hi - lo);
        if (s.bad) [[unlikely]] {
          const std::size_t i = lo + first_inadmissible_prob(x + lo, hi - lo);
          throw_bad_entry(at, bad_prob_text, static_cast<std::int64_t>(i), x[i]);
        }
        return s.sum;
      },
      [&](std::size_t i) { return static_cast<double>(x[i]); }, rng, at);
}

}  // namespace detail

//! Greedy decoding: the index of the largest logit (or probability), lowest id on ties.
//! Preconditions (checked, invalid_argument otherwise): non-empty; no NaN or +inf; at least one
//! value above -inf (see the non-finite policy above). Complexity: O(V), one checking max pass and
//! a search for the first maximum.
[[nodiscard]] inline std::int32_t greedy_token(std::span<const float> row) {
  constexpr std::string_view fn = "specdec::greedy_token";
  detail::require_row_size(fn, "row", row.size());
  const detail::logit_scan s = detail::checked_logit_scan(row, {fn, "row"});
  return static_cast<std::int32_t>(detail::first_index_of(row.data(), row.size(), s.max));
}

//! Draws a token from softmax(logits) (the processed row; -inf = excluded) by blocked inverse CDF
//! (exp by detail::fast_exp at the dispatched level, sums in double). Preconditions (checked, invalid_argument otherwise):
//! non-empty; no NaN or +inf; at least one logit above -inf. Consumes two Philox words.
//! Complexity: O(V): one checking max pass, one vectorized exp-and-sum pass, a scan of one 1024-token
//! block; no sorting, no allocation below 128K tokens.
[[nodiscard]] inline std::int32_t sample_token(std::span<const float> logits, philox_stream& rng) {
  constexpr std::string_view fn = "specdec::sample_token";
  detail::require_row_size(fn, "logits", logits.size());
  const detail::row_ref at{fn, "logits"};
  const float m = detail::checked_logit_scan(logits, at).max;
  const float* x = logits.data();
  const std::size_t v = logits.size();
  // The scanned block's weights come from exp_sum too, at the dispatched level the block sums came
  // from: fast_exp at this file's own flags rounds its multiply-adds where that level fuses them (a
  // default x86-64 build under an AVX-512 dispatch), and weights that differ in their last bit from
  // the summed ones sent a draw that fell in the difference to the block's last token.
  alignas(64) float w[detail::cdf_block];
  std::size_t wlo = v;  // the block held in w (none yet)
  return detail::blocked_inverse_cdf(
      v, [&](std::size_t lo, std::size_t hi) { return detail::exp_sum(x + lo, hi - lo, m, nullptr); },
      [&](std::size_t i) {
        if (i < wlo || i - wlo >= detail::cdf_block) {
          wlo = i - i % detail::cdf_block;
          (void)detail::exp_sum(x + wlo, std::min(detail::cdf_block, v - wlo), m, w);
        }
        return static_cast<double>(w[i - wlo]);
      },
      rng, at);
}

//! Draws a token from a row of non-negative probabilities (or any non-negative weights: the row is
//! normalised by its own sum) by blocked inverse CDF. Preconditions (checked, invalid_argument
//! otherwise): non-empty; every entry finite and >= 0; positive sum (denormal-only rows are fine).
//! Consumes two Philox words. Complexity: O(V): one vectorized checking block-sum pass and a scan of
//! one 1024-token block.
[[nodiscard]] inline std::int32_t sample_from_probs(std::span<const float> probs, philox_stream& rng) {
  constexpr std::string_view fn = "specdec::sample_from_probs";
  detail::require_row_size(fn, "probs", probs.size());
  return detail::draw_from_probs(probs, rng, {fn, "probs"});
}

}  // namespace specdec
