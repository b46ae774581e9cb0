#pragma once
//! \file half.hpp
//! IEEE-754 binary16 storage type usable on host and device.
//!
//! Conversions round to nearest, ties to even, exactly as the hardware does; NaN stays NaN (quieted),
//! infinities and subnormals are preserved. In CUDA device code the conversions use the __half
//! intrinsics, and specdec::half has the size, alignment and bit layout of __half, so device code
//! reinterprets buffers freely (see to_device_type in core/device_types.cuh). A NaN's bits are not
//! portable between the two: the host keeps its sign and payload (quieted), the __half intrinsics
//! may give the canonical NaN 0x7fff; every other value converts to the same bits on both.

#include <cstdint>

#include "specdec/core/config.hpp"
#include "specdec/core/detail/bits.hpp"
#include "specdec/core/detail/storage16.hpp"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

namespace specdec {
namespace detail {

//! float -> binary16 bits, round to nearest even.
SPECDEC_HOST_DEVICE constexpr std::uint16_t float_to_half_bits(float f) noexcept {
  const std::uint32_t x = float_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) {                       // Inf or NaN
    if (a == 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // quiet NaN, payload kept
  }
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to Inf
  if (a < 0x38800000u) {                        // below 2^-14: half subnormal or zero
    const std::uint32_t e = a >> 23;
    const std::uint32_t shift = 126u - e;       // value in units of 2^-24 is m >> shift
    if (shift > 24u) return static_cast<std::uint16_t>(sign);
    const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
    std::uint32_t r = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;
    return static_cast<std::uint16_t>(sign | r);
  }
  std::uint32_t r = (a - 0x38000000u) >> 13;    // rebias exponent 127 -> 15
  const std::uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // may carry into the exponent: correct
  return static_cast<std::uint16_t>(sign | r);
}

//! binary16 bits -> float (exact).
SPECDEC_HOST_DEVICE constexpr float half_bits_to_float(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t e = (h >> 10) & 0x1fu;
  std::uint32_t m = h & 0x3ffu;
  if (e == 0) {
    if (m == 0) return bits_float(sign);
    e = 113;                                    // 127 - 14
    while ((m & 0x400u) == 0) {
      m <<= 1;
      --e;
    }
    return bits_float(sign | (e << 23) | ((m & 0x3ffu) << 13));
  }
  if (e == 31) return bits_float(sign | 0x7f800000u | (m << 13) | (m != 0 ? 0x00400000u : 0u));  // NaN quieted, as F16C
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

}  // namespace detail

//! IEEE binary16 value. Trivially copyable, 2 bytes, bit-compatible with CUDA's __half.
struct half : detail::storage16<half> {
  using storage16::storage16;

  SPECDEC_HOST_DEVICE static std::uint16_t from_float(float f) noexcept {
#if SPECDEC_IN_DEVICE_CODE
    return __half_as_ushort(__float2half_rn(f));
#else
    return detail::float_to_half_bits(f);
#endif
  }
  SPECDEC_HOST_DEVICE static float to_float(std::uint16_t b) noexcept {
#if SPECDEC_IN_DEVICE_CODE
    return __half2float(__ushort_as_half(b));
#else
    return detail::half_bits_to_float(b);
#endif
  }
};
static_assert(sizeof(half) == 2 && alignof(half) == 2);

}  // namespace specdec
