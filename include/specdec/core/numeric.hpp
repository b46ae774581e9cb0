#pragma once
//! \file numeric.hpp
//! Uniform load/store conversions between storage types (float, double, half, bfloat16) and the
//! accumulation type. Kernels write `to_float(x)` / `from_float<T>(acc)` and stay type-generic.

#include <type_traits>

#include "specdec/core/bfloat16.hpp"
#include "specdec/core/config.hpp"
#include "specdec/core/half.hpp"

namespace specdec {

//! Widen a storage value to float (exact for half/bfloat16; rounds for double).
template <class T>
SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE float to_float(T x) noexcept {
  return static_cast<float>(x);
}

//! Narrow an accumulator to storage type T with round-to-nearest-even.
template <class T, class Acc>
SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE T from_float(Acc x) noexcept {
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    return T(static_cast<float>(x));
  } else {
    return static_cast<T>(x);
  }
}

//! Accumulation type for storage type T: double for double (the reference), float otherwise.
template <class T>
using accum_t = std::conditional_t<std::is_same_v<std::remove_cv_t<T>, double>, double, float>;

}  // namespace specdec
