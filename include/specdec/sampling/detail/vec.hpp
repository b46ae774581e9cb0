#pragma once
//! \file vec.hpp
//! Row kernels written so GCC and Clang vectorize them without -ffast-math (the loops are in vec.inl,
//! compiled once per run-time dispatch level; core/simd_level.hpp): reductions keep a fixed number of
//! independent lanes (elementwise on a small array, so no reassociation is needed and the result is
//! deterministic: it depends only on the row length, never on threads), and exp is a branch-free
//! polynomial (Cephes expf: range reduction by ln 2, degree-5 minimax polynomial; relative error
//! below 2e-7 on [-87.3, 0], i.e. about 1-2 ulp) instead of a libm call.

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "specdec/core/config.hpp"
#include "specdec/core/detail/bits.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/simd_level.hpp"
#include "specdec/sampling/detail/cdf_search.hpp"  // lanes

namespace specdec::detail {

//! Number of top-p histogram bins (sampling/logits_processor.hpp): float exponent and top 3 mantissa
//! bits of a weight, an eighth of a binade each (weights exp(l - max) lie in [0, 1], keys <= 1016).
inline constexpr std::uint32_t top_p_bins = 1024;

//! Top-p histogram bin of a weight: monotone non-decreasing in w >= 0, and always in [0, top_p_bins)
//! whatever the bits (an out-of-range weight -- NaN, negative, > 2 -- lands in the top bin instead of
//! indexing past the histogram). Host and device (sampling/logits_processor.cuh).
[[nodiscard]] SPECDEC_HOST_DEVICE constexpr std::uint32_t top_p_bin_of(float w) noexcept {
  const std::uint32_t key = float_bits(w) >> 20;
  return key < top_p_bins - 1 ? key : top_p_bins - 1;
}

//! The spacing of the weights in top-p bin b (< 1016): every weight in it is a multiple of
//! 2^(E - 150) (2^-149 for the denormal binade, E = 0), E = b / 8 its exponent field. A bin's weights
//! share one exponent, so their sums in double are exact (up to 2^29 of them) and do not depend on
//! the order they are added in.
[[nodiscard]] SPECDEC_HOST_DEVICE inline double top_p_quantum(std::uint32_t bin) noexcept {
  const int e = static_cast<int>(bin >> 3);
  return std::ldexp(1.0, e == 0 ? -149 : e - 150);  // exact: a power of two
}

//! Exact weight sums in 32-bit integers (the CUDA backend of top-p: sampling/logits_processor.cuh).
//! A weight w > 0 of top-p bin b is top_p_units(w) quanta of top_p_quantum(b): its significand with
//! the implicit bit, an integer below 2^24. Its high and low 12 bits go to two 32-bit counters of the
//! bin, which hold the sums of at most top_p_units_round weights (2^20 * 4095 < 2^32) before they are
//! folded into the bin's double (top_p_units_mass) and cleared. Every fold adds an integer number of
//! quanta below 2^44, and a bin's total stays below 2^53 quanta (V <= 2^29), so the double is the
//! bin's exact mass: the host's sum, in any order. (Double atomics in shared memory are
//! compare-and-swap loops, serialised on the few bins most weights of a row fall in; 32-bit integer
//! additions are single instructions.)
inline constexpr std::int64_t top_p_units_round = std::int64_t{1} << 20;
static_assert(top_p_units_round * 4095 <= std::int64_t{0xFFFFFFFF}, "a round's 12-bit parts fit 32 bits");

//! w / top_p_quantum(top_p_bin_of(w)) for a weight w in (0, 1]: the significand, with the implicit
//! bit unless w is denormal.
[[nodiscard]] SPECDEC_HOST_DEVICE constexpr std::uint32_t top_p_units(float w) noexcept {
  const std::uint32_t b = float_bits(w), f = b & 0x7FFFFFu;
  return (b >> 23) != 0u ? f | 0x800000u : f;
}
[[nodiscard]] SPECDEC_HOST_DEVICE constexpr std::uint32_t top_p_units_hi(std::uint32_t units) noexcept { return units >> 12; }
[[nodiscard]] SPECDEC_HOST_DEVICE constexpr std::uint32_t top_p_units_lo(std::uint32_t units) noexcept { return units & 0xFFFu; }
//! The mass counted by a bin's two counters, in quanta of `quantum` (exact: an integer < 2^44 times a
//! power of two).
[[nodiscard]] SPECDEC_HOST_DEVICE inline double top_p_units_mass(std::uint32_t hi, std::uint32_t lo, double quantum) noexcept {
  return (static_cast<double>(hi) * 4096.0 + static_cast<double>(lo)) * quantum;
}

//! Eta-sampling's cut on the weights w = fast_exp(l - max) of a row (logits_processor.hpp, step 7):
//! tokens with w below it are masked. cut = eta * sum, eta = min(epsilon, alpha exp(-H)), alpha =
//! sqrt(epsilon) when eta_alpha < 0; h = H, sum = the weights' total. In exact arithmetic eta <=
//! alpha exp(-H) <= alpha P_max (min-entropy <= entropy), so the cut is at most alpha times the
//! maximum's weight fast_exp(0) = 1: the clamp to alpha changes nothing there, and keeps the tokens
//! tied with the maximum that rounding would put below the cut (alpha = 1 on a uniform row of N:
//! exp(-log N) * N came out as 1 + 2^-52 for some N and masked all but the first token). Host and
//! device (sampling/logits_processor.cuh).
[[nodiscard]] SPECDEC_HOST_DEVICE inline double eta_weight_cut(float epsilon, float eta_alpha, double sum, double h) noexcept {
  const double alpha = eta_alpha < 0.0f ? std::sqrt(static_cast<double>(epsilon)) : static_cast<double>(eta_alpha);
  const double a = static_cast<double>(epsilon), b = alpha * std::exp(-h);
  const double cut = (a < b ? a : b) * sum;
  return cut < alpha ? cut : alpha;
}

//! fast_exp (vec.inl) as the host levels with FMA instructions compute it (AVX2, AVX-512, aarch64:
//! each multiply-add of the reduction and the polynomial fused explicitly), for a CUDA device, which
//! otherwise contracts as it likes. tests/sampling check that the host's dispatched exp equals it at
//! the AVX2 and AVX-512 levels. The portable x86-64 level (no FMA) rounds each product, so its
//! weights can differ in the last bit.
[[nodiscard]] SPECDEC_HOST_DEVICE inline float fast_exp_fused(float x) noexcept {
  const float xc = x < -87.3f ? -87.3f : x;
  const float t = std::fma(xc, 1.44269504088896341f, 12582912.0f);
  const float n = t - 12582912.0f;
  float r = std::fma(-n, 0.693359375f, xc);
  r = std::fma(n, 2.12194440e-4f, r);
  const float r2 = r * r;
  float y = std::fma(1.9875691500e-4f, r, 1.3981999507e-3f);
  y = std::fma(y, r, 8.3334519073e-3f);
  y = std::fma(y, r, 4.1665795894e-2f);
  y = std::fma(y, r, 1.6666665459e-1f);
  y = std::fma(y, r, 5.0000001201e-1f);
  y = std::fma(y, r2, r) + 1.0f;
  const std::int32_t e = (static_cast<std::int32_t>(float_bits(t)) - 0x4B400000) + 127;
  return x < -87.3f ? 0.0f : y * bits_float(static_cast<std::uint32_t>(e) << 23);
}

//! What the token-producing entry points need to know about a row of logits, from one pass: the
//! largest value, the smallest value above -inf (+inf when there is none) and whether any entry is
//! NaN or +inf (those are rejected; see the non-finite policy in sampling/sampler.hpp). NaN entries
//! take no part in max and min.
struct logit_scan {
  float max;
  float min;
  bool bad;
};

}  // namespace specdec::detail

// The kernels at this file's flags and, with run-time dispatch (core/simd_level.hpp), once per level.
// Their code depends on the target flags (vector width, FMA), and several are out of line: in the ISA
// namespace (core/isa.hpp), so a file built for AVX-512 and one built for baseline x86-64 keep
// separate copies, rather than the linker keeping one (possibly the AVX-512 one) for both.
#define SPECDEC_ISA_BODIES "specdec/sampling/detail/vec.inl"
#include "specdec/core/detail/isa_family.inl"
#undef SPECDEC_ISA_BODIES

namespace specdec::detail {
inline namespace SPECDEC_HOST_ISA {

// The entry points: each calls its *_kernel at the level the call dispatches to (one relaxed atomic
// load and a switch; core/simd_level.hpp), or at this file's flags without dispatch.

//! Index of the first element of x[0..n) equal to v, or -1.
inline std::int64_t first_index_of(const float* x, std::size_t n, float v) noexcept {
  SPECDEC_ISA_DISPATCH_RETURN(first_index_of_kernel(x, n, v));
}

//! The logit_scan of x[0..n).
inline logit_scan scan_logits(const float* x, std::size_t n) noexcept {
  SPECDEC_ISA_DISPATCH_RETURN(scan_logits_kernel(x, n));
}

//! True if some x[i], i in [0, n), is not an admissible probability.
inline bool any_inadmissible_prob(const float* x, std::size_t n) noexcept {
  SPECDEC_ISA_DISPATCH_RETURN(any_inadmissible_prob_kernel(x, n));
}

//! Sum of x[0..n) (float or double) in double: `lanes` fixed partial sums, then added in lane order
//! (deterministic).
template <class T>
inline double lane_sum(const T* x, std::size_t n) noexcept {
  SPECDEC_ISA_DISPATCH_RETURN(lane_sum_kernel(x, n));
}

//! Index of the first NaN or +inf in x[0..n), or n (the error path of scan_logits).
inline std::size_t first_nan_or_posinf(const float* x, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    if (!(x[i] < std::numeric_limits<float>::infinity())) return i;
  return n;
}

//! Index of the first entry of x[0..n) that is not an admissible probability, or n.
inline std::size_t first_inadmissible_prob(const float* x, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    if (!admissible_prob(x[i])) return i;
  return n;
}

//! Sum of probabilities x[0..n) in double (lane_sum) and whether any is not admissible: two passes
//! over a block that stays in L1 (callers pass 1024-token blocks).
struct prob_sum {
  double sum;
  bool bad;
};
inline prob_sum checked_prob_sum(const float* x, std::size_t n) noexcept {
  return {lane_sum(x, n), any_inadmissible_prob(x, n)};
}

//! out[i] = fast_exp(x[i] - m) (out may be null: sum only; or x: in place); returns the sum in double
//! (exp_sum_kernel in vec.inl: chunk by chunk, in a fixed order for a given n). Preconditions: m >=
//! every x[i]; out null, x, or disjoint from x.
inline double exp_sum(const float* x, std::size_t n, float m, float* out) noexcept {
  SPECDEC_ISA_DISPATCH_RETURN(exp_sum_kernel(x, n, m, out));
}

//! x[i] *= s for i in [0, n).
inline void scale_row(float* x, std::size_t n, float s) noexcept { SPECDEC_ISA_DISPATCH_CALL(scale_kernel(x, n, s)); }

//! x[i] = (x[i] - m) / t for i in [0, n).
inline void shift_divide_row(float* x, std::size_t n, float m, float t) noexcept {
  SPECDEC_ISA_DISPATCH_CALL(shift_divide_kernel(x, n, m, t));
}

//! x[i] = -inf where x[i] < cut (NaN too), for i in [0, n).
inline void mask_below(float* x, std::size_t n, float cut) noexcept {
  SPECDEC_ISA_DISPATCH_CALL(mask_below_kernel(x, n, cut));
}

//! sum over w[i] > 0 of w[i] * (x[i] - m) in double, in a fixed order for a given n.
inline double weighted_shift_sum(const float* w, const float* x, std::size_t n, float m) noexcept {
  SPECDEC_ISA_DISPATCH_RETURN(weighted_shift_sum_kernel(w, x, n, m));
}

//! x[k] = -inf where w[k] < cut (compared in double) and k != keep, for k in [0, n).
inline void mask_weight_below(float* x, const float* w, std::size_t n, double cut, std::int64_t keep) noexcept {
  SPECDEC_ISA_DISPATCH_CALL(mask_weight_below_kernel(x, w, n, cut, keep));
}

//! x[i] = v for i in [0, n).
inline void fill_row(float* x, std::size_t n, float v) noexcept { SPECDEC_ISA_DISPATCH_CALL(fill_kernel(x, n, v)); }

//! Top-p's final pass: x[i] kept where top_p_bin(w[i]) > boundary, or == boundary with mark[i] set;
//! -inf elsewhere.
inline void top_p_mask(float* x, const float* w, const std::uint8_t* mark, std::size_t n,
                       std::uint32_t boundary) noexcept {
  SPECDEC_ISA_DISPATCH_CALL(top_p_mask_kernel(x, w, mark, n, boundary));
}

//! w[i] = max(0, base[i] - c q[i]) over [lo, hi), base = p or (p null) w; returns the block's sum.
inline double residual_block(const float* p, double* w, const float* q, std::size_t lo, std::size_t hi,
                             double c) noexcept {
  SPECDEC_ISA_DISPATCH_RETURN(residual_block_kernel(p, w, q, lo, hi, c));
}

}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec::detail
