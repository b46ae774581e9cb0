#pragma once
// Bit reinterpretation usable in host and device code.
#include <bit>
#include <cstdint>

#include "specdec/core/config.hpp"

namespace specdec::detail {

SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE constexpr std::uint32_t float_bits(float f) noexcept {
#if SPECDEC_IN_DEVICE_CODE
  return __float_as_uint(f);
#else
  return std::bit_cast<std::uint32_t>(f);
#endif
}

SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE constexpr float bits_float(std::uint32_t u) noexcept {
#if SPECDEC_IN_DEVICE_CODE
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}

}  // namespace specdec::detail
