// Helpers shared by the cross-attention and sliding-window tests (previously duplicated in
// test_cross_attention_util.hpp and test_sliding_window_util.hpp): storage-type casts, filling a
// buffer with normal random values, and a one-assertion-per-tensor closeness check against a
// reference::attention_result.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

#include "specdec/core/numeric.hpp"
#include "specdec/reference/attention.hpp"

namespace attn_rand {

template <class T>
T cast(double x) {
  return specdec::from_float<T>(static_cast<float>(x));
}
template <class T>
double wide(T x) {
  return static_cast<double>(specdec::to_float(x));
}

//! Fills `x` with standard-normal values (rounded to T) drawn from `rng`.
template <class T>
void fill_normal(std::vector<T>& x, std::mt19937& rng) {
  std::normal_distribution<double> nd;
  for (auto& e : x) e = cast<T>(nd(rng));
}

//! |got - ref| <= atol + rtol |ref| for every output, lse within 1e-5 relative (-inf where the
//! reference has no keys); one assertion per tensor (keeps Debug/ASan runs fast), naming the worst index.
template <class T>
void require_close(const specdec::reference::attention_result& ref, const std::vector<T>& out,
                   const std::vector<float>& lse, double atol, double rtol) {
  REQUIRE(out.size() == ref.out.size());
  double worst = -1;
  std::size_t at = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double excess = std::abs(wide(out[i]) - ref.out[i]) - atol - rtol * std::abs(ref.out[i]);
    if (!(excess <= worst)) {
      worst = excess;
      at = i;
    }
  }
  INFO("worst out index " << at << " got " << (out.empty() ? 0.0 : wide(out[at])) << " want "
                          << (out.empty() ? 0.0 : ref.out[at]));
  REQUIRE(worst <= 0);
  bool lse_ok = true;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < lse.size() && lse_ok; ++i) {
    if (std::isinf(ref.lse[i]))
      lse_ok = std::isinf(lse[i]) && lse[i] < 0;
    else
      lse_ok = std::abs(lse[i] - ref.lse[i]) <= 1e-5 * (1 + std::abs(ref.lse[i]));
    bad = i;
  }
  INFO("lse index " << bad);
  REQUIRE(lse_ok);
}

}  // namespace attn_rand
