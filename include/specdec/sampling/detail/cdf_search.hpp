#pragma once
//! \file cdf_search.hpp
//! The arithmetic of the blocked inverse-CDF draw (sampling/sampler.hpp), written once for host and
//! device code so that a CUDA kernel drawing with the same Philox words returns the same token, bit
//! for bit:
//!  - the order in which one block's weights are summed in double: `lanes` partial sums, lane j
//!    adding the weights of tokens lo + j, lo + j + lanes, ... in index order over the block's body
//!    (its length rounded down to a multiple of `lanes`), then a sum that starts at 0, adds the tail
//!    tokens in index order and then the `lanes` partial sums in lane order (lane_partial,
//!    lane_combine). This is the order of vec.inl's lane_sum_kernel and of stochastic.hpp's
//!    residual_block_sum, which the host evaluates with vector code: each lane is one vector element,
//!    so vectorizing does not reassociate anything;
//!  - the search (cdf_search): the block sums walked in block order, then one block scanned token by
//!    token, with the fallbacks sampler.hpp documents.
//! Double addition is exact IEEE arithmetic on both sides (no contraction applies to a sum), so the
//! same weights in the same order give the same doubles on a CPU and a GPU.

#include <cstddef>
#include <cstdint>

#include "specdec/core/config.hpp"

namespace specdec::detail {

//! Tokens per block of the blocked inverse CDF: one pass computes the block sums, a draw walks them
//! and scans a single block.
inline constexpr std::size_t cdf_block = 1024;

//! Independent partial sums of every row reduction (vec.inl's kernels, one vector element each) and
//! of a block sum here.
inline constexpr int lanes = 16;

//! The CUDA draws (cdf_device.cuh) keep a row's block sums in shared memory: at most this many
//! blocks (2M tokens, beyond any LLM vocabulary; 16 KiB of doubles). The array-form entry points of
//! the stochastic verifiers take at most device_cdf_max_vocab tokens under every policy.
inline constexpr std::int64_t device_cdf_max_blocks = 2048;
inline constexpr std::int64_t device_cdf_max_vocab = device_cdf_max_blocks * static_cast<std::int64_t>(cdf_block);

//! End of the body of block [lo, hi): the tokens the lanes sum; [body_end, hi) is the tail.
SPECDEC_HOST_DEVICE constexpr std::int64_t lane_body_end(std::int64_t lo, std::int64_t hi) noexcept {
  return hi - (hi - lo) % lanes;
}

//! Lane j's partial sum over block [lo, hi): weight(lo + j) + weight(lo + j + lanes) + ... in order,
//! from 0.0, over the body.
template <class Weight>
SPECDEC_HOST_DEVICE double lane_partial(const Weight& weight, std::int64_t lo, std::int64_t hi, int j) {
  double a = 0.0;
  for (std::int64_t i = lo + j, e = lane_body_end(lo, hi); i < e; i += lanes) a += weight(i);
  return a;
}

//! The block's sum from its lanes' partial sums: 0.0 + the tail tokens in order + partial[0] + ... +
//! partial[lanes - 1].
template <class Weight>
SPECDEC_HOST_DEVICE double lane_combine(const Weight& weight, std::int64_t lo, std::int64_t hi,
                                        const double* partial) {
  double s = 0.0;
  for (std::int64_t i = lane_body_end(lo, hi); i < hi; ++i) s += weight(i);
  for (int j = 0; j < lanes; ++j) s += partial[j];
  return s;
}

//! The sum of weight over [lo, hi) in the order above, written out serially: the definition the
//! vectorized host kernels and the CUDA kernels are tested against.
template <class Weight>
SPECDEC_HOST_DEVICE double lane_order_sum(const Weight& weight, std::int64_t lo, std::int64_t hi) {
  double partial[lanes];
  for (int j = 0; j < lanes; ++j) partial[j] = lane_partial(weight, lo, hi, j);
  return lane_combine(weight, lo, hi, partial);
}

//! The row total: the block sums added in block order (the u of a draw is uniform_double() times it).
SPECDEC_HOST_DEVICE constexpr double cdf_total(const double* bs, std::int64_t nb) noexcept {
  double t = 0.0;
  for (std::int64_t b = 0; b < nb; ++b) t += bs[b];
  return t;
}

//! The token a blocked inverse-CDF draw returns for the scaled uniform u (uniform_double() * the
//! total of the block sums) over v tokens in nb = ceil(v / cdf_block) blocks with sums bs: the first
//! token i, in a block whose sum is positive and whose end the running sum passes, with
//! u < C_i (C_i: the running double sum, block sums before the block, then the block's positive
//! weights one by one). If rounding leaves u past a chosen block's end, that block's last
//! positive-weight token; past the last block, the row's last positive-weight token; -1 when no
//! weight is positive (the caller reports the row). `weight(i)` must be the pure function (values
//! >= 0) the block sums were taken over.
template <class Weight>
SPECDEC_HOST_DEVICE std::int64_t cdf_search(const double* bs, std::int64_t nb, std::int64_t v, double u,
                                            const Weight& weight) {
  double c = 0.0;
  for (std::int64_t b = 0; b < nb; ++b) {
    if (bs[b] > 0.0 && c + bs[b] > u) {
      std::int64_t last = -1;
      const std::int64_t lo = b * static_cast<std::int64_t>(cdf_block);
      const std::int64_t hi = v - lo < static_cast<std::int64_t>(cdf_block) ? v : lo + static_cast<std::int64_t>(cdf_block);
      for (std::int64_t i = lo; i < hi; ++i) {
        const double w = weight(i);
        if (w > 0.0) {
          c += w;
          last = i;
          if (u < c) return last;
        }
      }
      if (last >= 0) return last;  // rounding left u past the block's end
    }
    c += bs[b];
  }
  for (std::int64_t i = v; i-- > 0;)  // rounding left u at or past the total
    if (weight(i) > 0.0) return i;
  return -1;
}

//! A bound on how far the running sum of a cdf_search block scan (c_start plus up to cdf_block + 1
//! weights, added one by one in double) and any other evaluation of the same prefix sums with at most
//! 64 more additions can lie from the exact prefix sums, for a block whose c_start + block sum is m:
//! the recursive-summation bound gamma_k = k 2^-53 / (1 - k 2^-53) applied to both, doubled. A faster
//! search that finds token i from approximate prefixes (before adding w_i, after adding it) may return
//! i without the serial scan only when cdf_prefix_safe holds; otherwise it runs cdf_search.
SPECDEC_HOST_DEVICE constexpr double cdf_search_margin(double m) noexcept {
  return m * (4.0 * static_cast<double>(cdf_block + 64) * 0x1p-53);
}

//! True when approximate prefix sums `before` (up to token i, exclusive) and `at` (inclusive), each
//! within `margin` of the serial scan's, prove that the serial scan returns token i for u: its sum
//! before i is then <= u (no earlier return; the running sum never decreases) and its sum at i is > u.
SPECDEC_HOST_DEVICE constexpr bool cdf_prefix_safe(double u, double before, double at, double margin) noexcept {
  return before + margin <= u && u < at - margin;
}

}  // namespace specdec::detail
