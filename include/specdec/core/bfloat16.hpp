#pragma once
//! \file bfloat16.hpp
//! bfloat16 storage type usable on host and device.
//!
//! float -> bfloat16 rounds to nearest, ties to even (NaN stays a quiet NaN with its sign on the host;
//! in device code the __nv_bfloat16 intrinsics may give the canonical NaN 0x7fff instead, the one
//! value whose bits differ); bfloat16 -> float is exact. Bit-compatible with CUDA's __nv_bfloat16.

#include <cstdint>

#include "specdec/core/config.hpp"
#include "specdec/core/detail/bits.hpp"
#include "specdec/core/detail/storage16.hpp"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#endif

namespace specdec {
namespace detail {

//! float -> bfloat16 bits, round to nearest even.
SPECDEC_HOST_DEVICE constexpr std::uint16_t float_to_bf16_bits(float f) noexcept {
  const std::uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  const std::uint32_t lsb = (x >> 16) & 1u;
  return static_cast<std::uint16_t>((x + 0x7fffu + lsb) >> 16);  // overflow rounds to Inf, as it should
}

//! bfloat16 bits -> float (exact).
SPECDEC_HOST_DEVICE constexpr float bf16_bits_to_float(std::uint16_t b) noexcept {
  return bits_float(static_cast<std::uint32_t>(b) << 16);
}

}  // namespace detail

//! bfloat16 value. Trivially copyable, 2 bytes, bit-compatible with CUDA's __nv_bfloat16.
struct bfloat16 : detail::storage16<bfloat16> {
  using storage16::storage16;

  SPECDEC_HOST_DEVICE static std::uint16_t from_float(float f) noexcept {
#if SPECDEC_IN_DEVICE_CODE
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
#else
    return detail::float_to_bf16_bits(f);
#endif
  }
  SPECDEC_HOST_DEVICE static float to_float(std::uint16_t b) noexcept { return detail::bf16_bits_to_float(b); }
};
static_assert(sizeof(bfloat16) == 2 && alignof(bfloat16) == 2);

}  // namespace specdec
