#pragma once
// Rows for topk_batch's tests (host: tests/core/test_topk_batch.cpp, CUDA: tests/cuda/test_topk_batch.cu),
// [rows, n] row-major, by kind:
//   0: uniform floats in [-1, 1) (distinct keys, no ties);
//   1: eight distinct values (every k cuts through a tie);
//   2: one value everywhere (the answer is the first k indices);
//   3: mixed specials: NaN (both signs), +-0, +-inf, denormals, and a few ordinary values;
//   4: mostly -inf, a few finite (a masked logits row);
//   5: uniform floats with many exact duplicates of the largest value;
//   6: mostly NaN, a few uniform floats (NaN entries among the k best).
#include <cstdint>
#include <limits>
#include <vector>

#include "specdec/core/philox.hpp"

namespace specdec_test {

inline constexpr int topk_row_kinds = 7;

inline std::vector<float> topk_rows(std::int64_t rows, std::int64_t n, int kind, std::uint64_t seed) {
  constexpr float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  specdec::philox_stream rng(seed, 9);
  std::vector<float> v(static_cast<std::size_t>(rows * n));
  const float specials[] = {nan, -nan, 0.0f, -0.0f, inf, -inf, 1.0e-42f, -1.0e-42f, 1.0f, -1.0f, 2.5f};
  for (auto& x : v) {
    switch (kind) {
      case 0: x = 2.0f * rng.uniform() - 1.0f; break;
      case 1: x = static_cast<float>(rng.below(8)) * 0.5f - 1.0f; break;
      case 2: x = 0.75f; break;
      case 3: x = specials[rng.below(11)]; break;
      case 4: x = rng.below(50) == 0 ? rng.uniform() : -inf; break;
      case 5: x = rng.below(5) == 0 ? 1.0f : rng.uniform(); break;
      default: x = rng.below(20) == 0 ? rng.uniform() : nan; break;
    }
  }
  return v;
}

}  // namespace specdec_test
