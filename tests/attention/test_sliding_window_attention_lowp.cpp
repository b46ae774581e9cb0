// sliding_window_attention with half and bfloat16 storage (fp32 accumulation) against the double
// reference computed from the same stored values; tolerances are the output rounding of the type.
#include "attention/test_sliding_window_util.hpp"

using swtest::differential;

TEST_CASE("sliding window attention (fp16) matches the reference") {
  std::uint32_t seed = 100;
  for (int d : {64, 128})
    for (auto [hq, hkv] : {std::pair{4, 4}, std::pair{8, 2}}) {
      differential<specdec::half>(3, hq, hkv, d, 16, 4, {0, 9, 70}, {0, 2, 4}, {5, 1, 16}, seed++, 1e-4, 1.0 / 1024);
      differential<specdec::half>(2, hq, hkv, d, 64, 0, {64, 200}, {0, 0}, {64, 0}, seed++, 1e-4, 1.0 / 1024);
    }
  differential<specdec::half>(1, 8, 2, 128, 512, 0, {1100}, {0}, {64}, seed++, 1e-4, 1.0 / 1024);
}

TEST_CASE("sliding window attention (bf16) matches the reference") {
  std::uint32_t seed = 200;
  for (int d : {64, 256})
    for (auto [hq, hkv] : {std::pair{2, 2}, std::pair{8, 2}}) {
      differential<specdec::bfloat16>(3, hq, hkv, d, 16, 4, {3, 16, 45}, {1, 0, 4}, {9, 1, 0}, seed++, 1e-3, 1.0 / 128);
      differential<specdec::bfloat16>(2, hq, hkv, d, 32, 0, {100, 31}, {0, 0}, {17, 40}, seed++, 1e-3, 1.0 / 128);
    }
}
