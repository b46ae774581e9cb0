#pragma once
//! \file vec.hpp
//! Row kernels written so g++ -O3 vectorizes them without -ffast-math: reductions keep a fixed number
//! of independent lanes (elementwise on a small array, so no reassociation is needed and the result
//! is deterministic: it depends only on the row length, never on threads), and exp is a branch-free
//! polynomial (Cephes expf: range reduction by ln 2, degree-5 minimax polynomial; relative error below
//! 2e-7 on [-87.3, 0], i.e. about 1-2 ulp) instead of a libm call.

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "specdec/core/isa.hpp"

namespace specdec::detail {

inline constexpr int lanes = 16;

// The kernels' code depends on the target flags (vector width, FMA), and first_index_of,
// scan_logits, any_inadmissible_prob and exp_sum are out of line: in the ISA namespace (core/isa.hpp)
// so a file built for AVX-512 and one built for baseline x86-64 keep separate copies, rather than
// the linker keeping one (possibly the AVX-512 one) for both.
inline namespace SPECDEC_HOST_ISA {

//! exp(x) for x <= 0 (x = logit - max); returns exactly 0 for x < -87.3 (including -inf), so masked
//! tokens get exactly zero weight. Rounds x*log2(e) to the nearest integer n with the 1.5*2^23
//! magic-number trick (valid for |x log2 e| < 2^22 and vectorizable, unlike floor), reduces
//! r = x - n ln 2 in two parts (Cody-Waite), evaluates Cephes' degree-5 polynomial and scales by 2^n
//! through the exponent bits. Not valid for x > 0 or NaN (callers guarantee x <= 0).
inline float fast_exp(float x) noexcept {
  const float xc = x < -87.3f ? -87.3f : x;
  const float t = xc * 1.44269504088896341f + 12582912.0f;  // 1.5 * 2^23: t's low mantissa bits = round(.)
  const float n = t - 12582912.0f;
  float r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  const float r2 = r * r;
  const float y = ((((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r + 4.1665795894e-2f) * r +
                     1.6666665459e-1f) *
                        r +
                    5.0000001201e-1f) *
                       r2 +
                   r) +
                  1.0f;
  const std::int32_t e = (std::bit_cast<std::int32_t>(t) - 0x4B400000) + 127;  // n + bias, in [1, 127]
  const float scale = std::bit_cast<float>(e << 23);
  return x < -87.3f ? 0.0f : y * scale;
}

//! Index of the first element equal to v, or -1. Blocks of 64 are tested with an int flag (vectorizes;
//! a bool flag did not: 45-75 us at V = 128K against 5-12 us), then the hit block is scanned.
[[gnu::noinline]] inline std::int64_t first_index_of(const float* x, std::size_t n, float v) noexcept {
  constexpr std::size_t block = 64;
  std::size_t i = 0;
  for (; i + block <= n; i += block) {
    int any = 0;
    for (std::size_t j = 0; j < block; ++j) any |= x[i + j] == v;
    if (any) break;
  }
  for (; i < n; ++i)
    if (x[i] == v) return static_cast<std::int64_t>(i);
  return -1;
}

//! What the token-producing entry points need to know about a row of logits, from one pass: the
//! largest value, the smallest value above -inf (+inf when there is none) and whether any entry is
//! NaN or +inf (those are rejected; see the non-finite policy in sampling/sampler.hpp). NaN entries
//! take no part in max and min.
}  // namespace SPECDEC_HOST_ISA
struct logit_scan {
  float max;
  float min;
  bool bad;
};
inline namespace SPECDEC_HOST_ISA {

//! True if v is an admissible probability / weight: finite and >= 0 (NaN, +-inf and negatives are not).
inline bool admissible_prob(float v) noexcept { return v >= 0.0f && v <= std::numeric_limits<float>::max(); }

// The policy checks below are out of line: inlined into a large caller, GCC sometimes left their lane
// loops scalar (sample_from_probs took 150 us for 128K tokens where the sum alone takes 7). Out of line
// they vectorize at -O2 and -O3 alike, and their flags are int lanes ORed with & (a bool flag or a
// short-circuit && kept them scalar). Measured at V = 128K, scan_logits: 6 us with AVX-512, 9 us
// with AVX2, 26-35 us on baseline x86-64 (the max pass and the NaN scan it replaces took 60-70 us).

//! scan_logits over x[0..n): `lanes` independent max / min / flag chains, then the tail.
[[gnu::noinline]] inline logit_scan scan_logits(const float* x, std::size_t n) noexcept {
  constexpr float inf = std::numeric_limits<float>::infinity();
  float mx[lanes], mn[lanes];
  int bad[lanes];
  for (int j = 0; j < lanes; ++j) mx[j] = -inf, mn[j] = inf, bad[j] = 0;
  const std::size_t body = n - n % lanes;
  for (std::size_t i = 0; i < body; i += lanes)
    for (int j = 0; j < lanes; ++j) {
      const float v = x[i + j];
      mx[j] = v > mx[j] ? v : mx[j];
      const float finite_or_inf = v > -inf ? v : inf;  // -inf takes no part in the minimum
      mn[j] = finite_or_inf < mn[j] ? finite_or_inf : mn[j];
      bad[j] |= !(v < inf);  // NaN or +inf
    }
  logit_scan r{-inf, inf, false};
  for (int j = 0; j < lanes; ++j) {
    r.max = mx[j] > r.max ? mx[j] : r.max;
    r.min = mn[j] < r.min ? mn[j] : r.min;
    r.bad |= bad[j] != 0;
  }
  for (std::size_t i = body; i < n; ++i) {
    const float v = x[i];
    r.max = v > r.max ? v : r.max;
    r.min = v > -inf && v < r.min ? v : r.min;
    r.bad |= !(v < inf);
  }
  return r;
}

//! True if some x[i], i in [0, n), is not an admissible probability (`lanes` int flags, then the tail).
[[gnu::noinline]] inline bool any_inadmissible_prob(const float* x, std::size_t n) noexcept {
  int bad[lanes] = {};
  const std::size_t body = n - n % lanes;
  for (std::size_t i = 0; i < body; i += lanes)
    for (int j = 0; j < lanes; ++j) {
      const float v = x[i + j];
      bad[j] |= ((v >= 0.0f) & (v <= std::numeric_limits<float>::max())) ? 0 : 1;
    }
  bool r = false;
  for (int j = 0; j < lanes; ++j) r |= bad[j] != 0;
  for (std::size_t i = body; i < n; ++i) r |= !admissible_prob(x[i]);
  return r;
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

//! Sum of x[0..n) (float or double) in double: `lanes` fixed partial sums, then added in lane order
//! (deterministic).
template <class T>
inline double lane_sum(const T* x, std::size_t n) noexcept {
  double acc[lanes] = {};
  const std::size_t body = n - n % lanes;
  for (std::size_t i = 0; i < body; i += lanes)
    for (int j = 0; j < lanes; ++j) acc[j] += x[i + j];
  double s = 0.0;
  for (std::size_t i = body; i < n; ++i) s += x[i];
  for (int j = 0; j < lanes; ++j) s += acc[j];
  return s;
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

//! out[i] = fast_exp(x[i] - m) for i in [0, n) (pure elementwise: vectorizes).
inline void exp_shifted(const float* __restrict x, std::size_t n, float m, float* __restrict out) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = fast_exp(x[i] - m);
}

//! out[i] = fast_exp(x[i] - m) (out may be null: sum only); returns the sum in double, computed chunk
//! by chunk (256 tokens, lane_sum each, chunk sums added in order): fixed order for a given n.
//! Precondition: m >= every x[i]. Out of line for the reason given at scan_logits: inlined into a
//! caller that also inlines the samplers, its exp loop stayed scalar (logits_to_probs at 360 us for
//! 128K tokens instead of 45-80 with AVX-512).
[[gnu::noinline]] inline double exp_sum(const float* x, std::size_t n, float m, float* out) noexcept {
  constexpr std::size_t chunk = 256;
  float local[chunk];
  double s = 0.0;
  for (std::size_t lo = 0; lo < n; lo += chunk) {
    const std::size_t len = n - lo < chunk ? n - lo : chunk;
    float* dst = out ? out + lo : local;
    exp_shifted(x + lo, len, m, dst);
    s += lane_sum(dst, len);
  }
  return s;
}

}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec::detail
