#pragma once
//! \file row_convert.hpp
//! Bulk widening/narrowing of a row of half/bfloat16 values to/from float for the host RoPE kernel.
//! The scalar specdec::half conversions are exact but branchy (~10 ns per element); with F16C
//! (`-mf16c`, implied by -march=native on x86-64) eight values convert per instruction. Both paths
//! round to nearest even, so results are identical with and without F16C.

#include <cstdint>
#include <type_traits>

#include "specdec/core/bfloat16.hpp"
#include "specdec/core/half.hpp"
#include "specdec/core/isa.hpp"

#if defined(__F16C__) && !defined(__CUDA_ARCH__)
#include <immintrin.h>
#endif

namespace specdec::detail {
inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

//! dst[i] = float(src[i]) for i < n.
template <class T>
inline void load_row_as_float(const T* src, float* dst, int n) noexcept {
  int i = 0;
  if constexpr (std::is_same_v<T, half>) {
#if defined(__F16C__) && !defined(__CUDA_ARCH__)
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
    for (; i < n; ++i) dst[i] = half::to_float(src[i].bits);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    for (; i < n; ++i) dst[i] = bf16_bits_to_float(src[i].bits);
  } else {
    for (; i < n; ++i) dst[i] = static_cast<float>(src[i]);
  }
}

//! dst[i] = T(src[i]) (round to nearest even) for i < n.
template <class T>
inline void store_row_from_float(const float* src, T* dst, int n) noexcept {
  int i = 0;
  if constexpr (std::is_same_v<T, half>) {
#if defined(__F16C__) && !defined(__CUDA_ARCH__)
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
    for (; i < n; ++i) dst[i].bits = float_to_half_bits(src[i]);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    for (; i < n; ++i) dst[i].bits = float_to_bf16_bits(src[i]);
  } else {
    for (; i < n; ++i) dst[i] = static_cast<T>(src[i]);
  }
}

}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec::detail
