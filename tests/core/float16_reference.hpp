#pragma once
// Independent references for the half / bfloat16 tests: decoding by ldexp arithmetic and
// round-to-nearest-even by searching a table of every representable value (no bit tricks shared
// with the implementation under test).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace specdec_test {

//! IEEE-style format with `mant` fraction bits and `exp` exponent bits in 16 bits.
struct format16 {
  int exp_bits;
  int mant_bits;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  int max_exp_field() const { return (1 << exp_bits) - 1; }
};
inline constexpr format16 binary16{5, 10};
inline constexpr format16 bfloat16_format{8, 7};

//! Value of a 16-bit pattern, as double, by ldexp (exact: every such value fits a double).
inline double decode(format16 f, std::uint16_t bits) {
  const bool neg = (bits >> 15) & 1;
  const int e = (bits >> f.mant_bits) & f.max_exp_field();
  const int m = bits & ((1 << f.mant_bits) - 1);
  double v;
  if (e == f.max_exp_field()) {
    v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - f.bias() - f.mant_bits);
  } else {
    v = std::ldexp(static_cast<double>(m + (1 << f.mant_bits)), e - f.bias() - f.mant_bits);
  }
  return neg ? -v : v;
}

//! Round-to-nearest-even of a finite double to the format, by table search: among the two
//! neighbouring representable magnitudes pick the nearer; on a tie the one with an even pattern.
//! Magnitudes at or beyond the midpoint between the largest finite value and the next power
//! (which would be 2^(emax+1)) round to infinity.
class rne_reference {
 public:
  explicit rne_reference(format16 f) : f_(f) {
    const std::uint16_t inf = static_cast<std::uint16_t>(f.max_exp_field() << f.mant_bits);
    for (std::uint32_t b = 0; b <= inf; ++b) mags_.push_back(decode(f, static_cast<std::uint16_t>(b)));
    // The "value" of the Inf pattern for rounding purposes is the next binade's first value.
    mags_.back() = std::ldexp(1.0, f.max_exp_field() - f.bias());
  }
  std::uint16_t round(double x) const {
    const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double a = std::fabs(x);
    const auto it = std::upper_bound(mags_.begin(), mags_.end(), a);
    if (it == mags_.end()) return static_cast<std::uint16_t>(sign | (mags_.size() - 1));  // beyond 2^(emax+1): Inf
    const std::size_t hi = static_cast<std::size_t>(it - mags_.begin());
    const std::size_t lo = hi - 1;  // mags_[0] == 0 <= a, so hi >= 1
    const double dlo = a - mags_[lo], dhi = mags_[hi] - a;
    std::size_t pick;
    if (dlo < dhi) pick = lo;
    else if (dhi < dlo) pick = hi;
    else pick = (lo % 2 == 0) ? lo : hi;
    return static_cast<std::uint16_t>(sign | pick);
  }
  //! Magnitude of pattern b (b <= the Inf pattern; Inf reads as 2^(emax+1)).
  double magnitude(std::uint16_t b) const { return mags_[b]; }
  std::uint16_t inf_bits() const { return static_cast<std::uint16_t>(mags_.size() - 1); }

 private:
  format16 f_;
  std::vector<double> mags_;
};

inline std::uint32_t fbits(float f) { return std::bit_cast<std::uint32_t>(f); }
inline float bitsf(std::uint32_t u) { return std::bit_cast<float>(u); }

}  // namespace specdec_test
