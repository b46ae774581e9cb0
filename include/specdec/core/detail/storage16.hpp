#pragma once
//! \file storage16.hpp
//! The part of specdec's 16-bit floating-point storage types (half, bfloat16) that does not depend
//! on the format: the raw bits, construction from float and from bits, widening to float. A format
//! supplies `static std::uint16_t from_float(float)` and `static float to_float(std::uint16_t)`.

#include <cstdint>

#include "specdec/core/config.hpp"

namespace specdec::detail {

//! CRTP base of half and bfloat16: trivially copyable, 2 bytes, the bits in `bits`.
template <class Format>
struct storage16 {
  std::uint16_t bits = 0;

  storage16() = default;
  //! Round-to-nearest-even conversion from float (the format's from_float).
  SPECDEC_HOST_DEVICE explicit storage16(float f) noexcept : bits(Format::from_float(f)) {}
  //! Build from raw bits.
  SPECDEC_HOST_DEVICE static constexpr Format from_bits(std::uint16_t b) noexcept {
    Format x;
    x.bits = b;
    return x;
  }
  //! Exact widening conversion.
  SPECDEC_HOST_DEVICE operator float() const noexcept { return Format::to_float(bits); }
};

}  // namespace specdec::detail
