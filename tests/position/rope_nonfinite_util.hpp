#pragma once
// The non-finite RoPE case shared by the host test (tests/position/test_rope.cpp) and its device
// twin (tests/cuda/test_rope.cu): x [2 tokens, 2 heads, 8 dims], rotary dim 4, positions {0, 7}, with
// one element (token 1, head 0, dim) set to NaN, +inf or -inf. A rotated dim makes exactly its pair's
// two outputs non-finite; a pass-through dim (>= rotary dim) keeps the value; every other output is
// the clean run's. And the denormal case: a denormal pair rotates to the double reference (no flush
// to zero). Host code only (the backends differ only in the `run` / `rotate` callback).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "specdec/core/numeric.hpp"
#include "specdec/position/rope.hpp"
#include "specdec/reference/rope.hpp"

namespace rope_test {

//! The input of one run: x [2 tokens, 2 heads, 8 dims] of type T; `dim` >= 0 sets element
//! (token 1, head 0, dim) to `value` (as T).
template <class T>
std::vector<T> nonfinite_input(int dim, float value) {
  std::vector<T> x(2 * 2 * 8);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = specdec::from_float<T>(0.25f * static_cast<float>(i % 7) - 0.5f);
  if (dim >= 0) x[8 * 2 + static_cast<std::size_t>(dim)] = specdec::from_float<T>(value);
  return x;
}

//! x widened to float, element by element.
template <class T>
std::vector<float> to_floats(const std::vector<T>& x) {
  std::vector<float> out;
  for (const T& e : x) out.push_back(specdec::to_float(e));
  return out;
}

//! The checks for one style: `run(dim, value)` rotates nonfinite_input(dim, value) (rotary dim 4,
//! positions {0, 7}, `style`) and returns the outputs as float; `label` prefixes each INFO.
template <class Run>
void check_nonfinite_pairs(specdec::rope_style style, const std::string& label, Run&& run) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> clean = run(-1, 0.0f);
  const int partner = style == specdec::rope_style::rotate_half ? 2 : 1;  // dim 0's pair
  for (float bad : {nan, inf, -inf}) {
    INFO(label << " value " << bad);
    // a rotated dim: its pair's two outputs are non-finite, every other value is the clean run's
    const std::vector<float> got = run(0, bad);
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (i == 16 || i == 16 + static_cast<std::size_t>(partner)) {
        CHECK_FALSE(std::isfinite(got[i]));
      } else {
        CHECK(got[i] == clean[i]);
      }
    }
    // a pass-through dim (>= rotary dim) keeps the value and touches nothing else
    const std::vector<float> pass = run(6, bad);
    for (std::size_t i = 0; i < pass.size(); ++i) {
      if (i == 16 + 6) {
        CHECK((std::isnan(bad) ? std::isnan(pass[i]) : pass[i] == bad));
      } else {
        CHECK(pass[i] == clean[i]);
      }
    }
  }
}

//! The denormal checks for one style: `rotate(p, x, pos)` rotates x [1 token, 1 head, 4 dims] (a
//! std::vector<float>, then a std::vector<specdec::half>) in place at the positions `pos` ({7}) with
//! parameters p. Float denormals must come out nonzero and within 4 denorm_min of the double
//! reference, half subnormals within half's subnormal step (2^-24).
template <class Rotate>
void check_denormal_pairs(specdec::rope_style style, Rotate&& rotate) {
  const std::vector<std::int32_t> pos{7};
  const specdec::rope_params p{.style = style};
  const auto narrow = [](const std::vector<double>& v, auto zero) {
    std::vector<decltype(zero)> o;
    for (double x : v) o.push_back(specdec::from_float<decltype(zero)>(static_cast<float>(x)));
    return o;
  };
  const std::vector<double> xd{3e-40, -1e-40, 2e-40, 5e-41};
  std::vector<double> ref(4);
  specdec::reference::rope(p, 1, 1, 4, xd.data(), pos.data(), ref.data());
  auto xf = narrow(xd, 0.0f);
  rotate(p, xf, pos);
  for (int i = 0; i < 4; ++i) {
    CHECK(xf[i] != 0.0f);
    CHECK(std::abs(xf[i] - ref[i]) <= 4 * std::numeric_limits<float>::denorm_min());
  }
  const std::vector<double> xh{3 * 0x1p-24, -0x1p-22, 0x1p-20, 5 * 0x1p-24};  // half subnormals
  specdec::reference::rope(p, 1, 1, 4, xh.data(), pos.data(), ref.data());
  auto hx = narrow(xh, specdec::half{});
  rotate(p, hx, pos);
  for (int i = 0; i < 4; ++i) CHECK(std::abs(specdec::to_float(hx[i]) - ref[i]) <= 0x1p-24);
}

}  // namespace rope_test
