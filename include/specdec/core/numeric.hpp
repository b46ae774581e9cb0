#pragma once
//! \file numeric.hpp
//! Uniform load/store conversions between storage types (float, double, half, bfloat16) and the
//! accumulation type. Kernels write `to_float(x)` / `from_float<T>(acc)` and stay type-generic.

#include <cstdint>
#include <type_traits>

#include "specdec/core/bfloat16.hpp"
#include "specdec/core/config.hpp"
#include "specdec/core/detail/bits.hpp"
#include "specdec/core/half.hpp"

namespace specdec {

//! Widen a storage value to float (exact for half/bfloat16; rounds for double).
template <class T>
SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE float to_float(T x) noexcept {
  return static_cast<float>(x);
}

namespace detail {
//! x rounded to float by round-to-odd: the float neighbour of x (of the two that bracket it) whose
//! last significand bit is 1, or x itself when exact; beyond float's range, +-FLT_MAX (odd). A
//! second rounding of that float to nearest-even in a format of at most 22 significand bits (half,
//! bfloat16) then equals x rounded once (round-to-odd needs 2 bits more than the target). A plain
//! float cast first rounded twice: 1 + 2^-11 + 2^-40 became half 1.0, not 1 + 2^-10. NaN stays NaN.
SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE float float_round_to_odd(double x) noexcept {
  const float f = static_cast<float>(x);
  if (x != x || static_cast<double>(f) == x) return f;  // NaN, or exact (infinities included)
  const std::uint32_t b = float_bits(f), sign = b & 0x80000000u;
  if ((b & 0x7fffffffu) == 0x7f800000u) return bits_float(sign | 0x7f7fffffu);  // overflowed: FLT_MAX
  if (b & 1u) return f;
  // f is even: the other bracketing neighbour, one step of magnitude towards x, is odd
  const bool above = (x < 0) ? static_cast<double>(f) < x : static_cast<double>(f) > x;  // |f| > |x|
  return bits_float(above ? b - 1u : b + 1u);
}
}  // namespace detail

//! Narrow an accumulator to storage type T with round-to-nearest-even (rounded once: a double goes to
//! half or bfloat16 through detail::float_round_to_odd).
template <class T, class Acc>
SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE T from_float(Acc x) noexcept {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    if constexpr (std::is_same_v<Acc, double>)
      return T(detail::float_round_to_odd(x));
    else
      return T(static_cast<float>(x));
  } else {
    return static_cast<T>(x);
  }
}

//! Accumulation type for storage type T: double for double (the reference), float otherwise.
template <class T>
using accum_t = std::conditional_t<std::is_same_v<std::remove_cv_t<T>, double>, double, float>;

}  // namespace specdec
