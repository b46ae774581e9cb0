#pragma once
//! \file simd.hpp
//! 16-lane float vectors for the host attention microkernels, written with GCC/Clang vector
//! extensions so the same code compiles to one zmm register with -mavx512f, to two ymm with AVX2,
//! and to four xmm (or scalar) without any -m flags. fp16 rows are widened with F16C/AVX-512
//! conversions when the target has them (`__F16C__`), bf16 rows with a 16-bit shift.

#include <cstdint>
#include <cstring>

#include "specdec/core/bfloat16.hpp"
#include "specdec/core/config.hpp"
#include "specdec/core/half.hpp"

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

// A 64-byte vector passed or returned by value has a different ABI with and without AVX-512.
// Everything here is always-inline, so that ABI never crosses a function boundary, but GCC still
// diagnoses it in a TU built without AVX-512: a -Wpsabi *warning* for returns, which the pragma
// below silences, and a -Wpsabi *note* for by-value parameters, which no pragma reaches. Hence
// every vector parameter is a const reference (free once inlined).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace specdec::detail {

inline constexpr int vlanes = 16;
typedef float vf16 __attribute__((vector_size(64)));
typedef std::int32_t vi16 __attribute__((vector_size(64)));
typedef std::uint32_t vu16 __attribute__((vector_size(64)));
typedef std::uint16_t vh16 __attribute__((vector_size(32)));

SPECDEC_FORCEINLINE vf16 vload(const float* p) noexcept {
  vf16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
SPECDEC_FORCEINLINE void vstore(float* p, const vf16& v) noexcept { std::memcpy(p, &v, sizeof v); }
// Brace-initialised, not `vf16{} + x`: 0 + x is not x for x = -0, so that form costs a scalar add
// before every broadcast and blocks FMA's embedded-broadcast memory operand.
SPECDEC_FORCEINLINE vf16 vbroadcast(float x) noexcept { return vf16{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }

//! 2^x for x <= 0 (x = -inf or x < -126 gives exactly 0). Round-to-nearest range reduction and a
//! degree-7 Taylor polynomial of e^(f ln 2) on [-0.5, 0.5]: relative error below 1e-7, ample for the
//! 1e-5 agreement the tests demand.
SPECDEC_FORCEINLINE vf16 vexp2(const vf16& x_in) noexcept {
  const vi16 underflow = x_in < -126.0f;
  const vf16 x = underflow ? vbroadcast(-126.0f) : x_in;
  const vi16 n = __builtin_convertvector(x - 0.5f, vi16);  // trunc toward 0 of (x - .5) = round(x) for x <= 0
  const vf16 f = x - __builtin_convertvector(n, vf16);    // in (-0.5, 0.5]
  constexpr float c1 = 0.6931471805599453f, c2 = 0.2402265069591007f, c3 = 0.05550410866482158f,
                  c4 = 0.009618129107628477f, c5 = 0.0013333558146428443f, c6 = 0.00015403530393381606f,
                  c7 = 1.525273380405984e-05f;
  vf16 p = c7 * f + c6;
  p = p * f + c5;
  p = p * f + c4;
  p = p * f + c3;
  p = p * f + c2;
  p = p * f + c1;
  p = p * f + 1.0f;
  vi16 bits;
  std::memcpy(&bits, &p, sizeof bits);
  bits += n << 23;
  bits = underflow ? vi16{} : bits;
  vf16 r;
  std::memcpy(&r, &bits, sizeof r);
  return r;
}

SPECDEC_FORCEINLINE vf16 vmax(const vf16& a, const vf16& b) noexcept { return a > b ? a : b; }

typedef float vf8 __attribute__((vector_size(32)));
typedef float vf4 __attribute__((vector_size(16)));

#if defined(__AVX512F__)
//! 16 lanes -> 4 lanes by two halvings (256-bit, then 128-bit), in registers. The maskz extract
//! avoids _mm512_reduce_*_ps and _mm512_castps512_ps256, whose "undefined" source register GCC 12
//! flags as maybe-uninitialized.
template <class Op>
SPECDEC_FORCEINLINE __m128 reduce_to_4(const vf16& v, Op op) noexcept {
  __m512 x;
  std::memcpy(&x, &v, sizeof x);
  const __m512d xd = _mm512_castps_pd(x);
  const __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(static_cast<__mmask8>(0xFF), xd, 0));
  const __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(static_cast<__mmask8>(0xFF), xd, 1));
  const __m256 h8 = op(lo, hi);
  return op(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
}
#endif

//! Sum of the 16 lanes: halving to 8, then 4 lanes, then (x0 + x2) + (x1 + x3); the same order
//! with and without AVX-512, and no trip through memory.
SPECDEC_FORCEINLINE float vhsum(const vf16& v) noexcept {
#if defined(__AVX512F__)
  const __m128 s4 = reduce_to_4(v, [](auto a, auto b) { return a + b; });
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
#else
  vf8 lo, hi;
  std::memcpy(&lo, &v, sizeof lo);
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
  const vf8 s8 = lo + hi;
  vf4 a, b;
  std::memcpy(&a, &s8, sizeof a);
  std::memcpy(&b, reinterpret_cast<const char*>(&s8) + sizeof a, sizeof b);
  const vf4 s4 = a + b;
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
#endif
}

//! Maximum of the 16 lanes (same halving scheme as vhsum).
SPECDEC_FORCEINLINE float vhmax(const vf16& v) noexcept {
#if defined(__AVX512F__)
  const __m128 m4 = reduce_to_4(v, [](auto a, auto b) {
    if constexpr (sizeof(a) == 32) return _mm256_max_ps(a, b);
    else return _mm_max_ps(a, b);
  });
  const __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  return _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps(m2, m2, 1)));
#else
  vf8 lo, hi;
  std::memcpy(&lo, &v, sizeof lo);
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
  const vf8 m8 = lo > hi ? lo : hi;
  vf4 a, b;
  std::memcpy(&a, &m8, sizeof a);
  std::memcpy(&b, reinterpret_cast<const char*>(&m8) + sizeof a, sizeof b);
  const vf4 m4 = a > b ? a : b;
  const float x = m4[0] > m4[2] ? m4[0] : m4[2], y = m4[1] > m4[3] ? m4[1] : m4[3];
  return x > y ? x : y;
#endif
}

//! Widen 16 consecutive storage elements to a float vector.
template <class T>
SPECDEC_FORCEINLINE vf16 vload_as_float(const T* p) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    return vload(p);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    vh16 h;
    std::memcpy(&h, p, sizeof h);
    const vu16 w = __builtin_convertvector(h, vu16) << 16;
    vf16 r;
    std::memcpy(&r, &w, sizeof r);
    return r;
  } else {
    static_assert(std::is_same_v<T, half>, "vload_as_float: float, half or bfloat16");
#if defined(__AVX512F__)
    // maskz form: the plain one reads an "undefined" register that GCC 12 flags as maybe-uninitialized.
    const __m512 r = _mm512_maskz_cvtph_ps(static_cast<__mmask16>(0xFFFF), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    vf16 v;
    std::memcpy(&v, &r, sizeof v);
    return v;
#elif defined(__F16C__)
    const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
    vf16 v;
    std::memcpy(&v, &lo, 32);
    std::memcpy(reinterpret_cast<char*>(&v) + 32, &hi, 32);
    return v;
#else
    vf16 v;
    for (int i = 0; i < vlanes; ++i) v[i] = half::to_float(p[i].bits);
    return v;
#endif
  }
}

//! Narrow a float vector to 16 storage elements with round-to-nearest-even, bit-identical to
//! from_float<T> (F16C/AVX-512 for half when available; integer rounding for bfloat16).
template <class T>
SPECDEC_FORCEINLINE void vstore_as(T* p, const vf16& v) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    vstore(p, v);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    vu16 x;
    std::memcpy(&x, &v, sizeof x);
    const vu16 nan = (x & 0x7fffffffu) > 0x7f800000u;
    const vu16 rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    const vu16 r = nan ? ((x >> 16) | 0x0040u) : rounded;
    const vh16 h = __builtin_convertvector(r, vh16);
    std::memcpy(static_cast<void*>(p), &h, sizeof h);
  } else {
    static_assert(std::is_same_v<T, half>, "vstore_as: float, half or bfloat16");
#if defined(__AVX512F__)
    __m512 f;
    std::memcpy(&f, &v, sizeof f);
    // maskz form for the same GCC 12 maybe-uninitialized false positive as in vload_as_float.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_maskz_cvtps_ph(static_cast<__mmask16>(0xFFFF), f, _MM_FROUND_TO_NEAREST_INT));
#elif defined(__F16C__)
    __m256 lo, hi;
    std::memcpy(&lo, &v, 32);
    std::memcpy(&hi, reinterpret_cast<const char*>(&v) + 32, 32);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 8), _mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT));
#else
    for (int i = 0; i < vlanes; ++i) p[i] = half(v[i]);
#endif
  }
}

//! Widen `n` (a multiple of 16) storage elements into floats.
template <class T>
SPECDEC_FORCEINLINE void widen_row(const T* src, float* dst, int n) noexcept {
  for (int i = 0; i < n; i += vlanes) vstore(dst + i, vload_as_float(src + i));
}

}  // namespace specdec::detail
