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

// 64-byte vectors passed by value change the ABI when AVX-512 is off; everything here is inlined.

// 64-byte vectors passed by value change the ABI when AVX-512 is off. Every function taking or
// returning one is inline, so the ABI never crosses a translation-unit boundary; GCC nevertheless
// emits -Wpsabi at the end of the TU (where push/pop cannot reach), so it stays disabled here.
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
SPECDEC_FORCEINLINE void vstore(float* p, vf16 v) noexcept { std::memcpy(p, &v, sizeof v); }
// Brace-initialised, not `vf16{} + x`: 0 + x is not x for x = -0, so that form costs a scalar add
// before every broadcast and blocks FMA's embedded-broadcast memory operand.
SPECDEC_FORCEINLINE vf16 vbroadcast(float x) noexcept { return vf16{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }

//! 2^x for x <= 0 (x = -inf or x < -126 gives exactly 0). Round-to-nearest range reduction and a
//! degree-7 Taylor polynomial of e^(f ln 2) on [-0.5, 0.5]: relative error below 1e-7, ample for the
//! 1e-5 agreement the tests demand.
SPECDEC_FORCEINLINE vf16 vexp2(vf16 x) noexcept {
  const vi16 underflow = x < -126.0f;
  x = underflow ? vbroadcast(-126.0f) : x;
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

SPECDEC_FORCEINLINE vf16 vmax(vf16 a, vf16 b) noexcept { return a > b ? a : b; }

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
SPECDEC_FORCEINLINE void vstore_as(T* p, vf16 v) noexcept {
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
