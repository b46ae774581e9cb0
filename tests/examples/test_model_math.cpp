// The example models' dense kernels (examples/common/model_math.hpp), at the level the run selects
// (a dispatching test: ctest runs it once per level with SPECDEC_ISA):
//  - y = x W^T against a double-precision reference, within fp32 rounding of sum |x_i w_i|;
//  - every row of an m-token product equals the 1-token product of that row, bit for bit, whatever m
//    and the tiles it falls into (what keeps a tree step's logits equal to decoding's);
//  - the += form adds the = form's sums to y;
//  - the double model's path, and the demo target's shapes.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "../../examples/common/model_math.hpp"
#include "specdec/core/philox.hpp"

using namespace specdec;
using namespace specdec::examples;

namespace {
template <class T>
std::vector<T> random_vec(std::size_t n, philox_stream& rng) {
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(2.0 * rng.uniform() - 1.0);
  return v;
}

struct shape {
  int m, out, in;
};

std::vector<shape> shapes(philox_stream& rng) {
  // the demo target's projections (hidden 256, q 256, kv 128, ffn 768), m = 1..9 (trees up to 8)
  std::vector<shape> s{{1, 256, 256}, {4, 128, 256}, {9, 768, 256}, {3, 256, 768}, {2, 768, 256}};
  for (int i = 0; i < 60; ++i)
    s.push_back({1 + static_cast<int>(rng.below(9)), 1 + static_cast<int>(rng.below(70)), 1 + static_cast<int>(rng.below(300))});
  return s;
}

template <class T>
void check_matmul(const shape& sh, philox_stream& rng) {
  const auto [m, out, in] = sh;
  INFO("m " << m << " out " << out << " in " << in);
  const auto x = random_vec<T>(static_cast<std::size_t>(m) * in, rng);
  const auto W = random_vec<T>(static_cast<std::size_t>(out) * in, rng);
  std::vector<T> y(static_cast<std::size_t>(m) * out);
  matmul_nt<T>(x, W, y, m, out, in);
  for (int t = 0; t < m; ++t) {
    // each row alone (m = 1): the same bits
    std::vector<T> lone(static_cast<std::size_t>(out));
    matmul_nt<T>(std::span<const T>(x).subspan(static_cast<std::size_t>(t) * in, static_cast<std::size_t>(in)), W, lone, 1,
                 out, in);
    CHECK(std::memcmp(lone.data(), y.data() + static_cast<std::size_t>(t) * out, lone.size() * sizeof(T)) == 0);
    for (int o = 0; o < out; ++o) {
      double ref = 0, mag = 0;
      for (int i = 0; i < in; ++i) {
        const double p = static_cast<double>(x[static_cast<std::size_t>(t) * in + i]) * static_cast<double>(W[static_cast<std::size_t>(o) * in + i]);
        ref += p, mag += std::fabs(p);
      }
      const double eps = std::is_same_v<T, float> ? 0x1p-24 : 0x1p-53;
      const double got = static_cast<double>(y[static_cast<std::size_t>(t) * out + o]);
      CHECK(std::fabs(got - ref) <= 2.0 * (in + 1) * eps * mag + 1e-300);
    }
  }
  // += : y0 + the = form's sums, rounded once
  auto acc = random_vec<T>(y.size(), rng);
  const auto before = acc;
  matmul_nt_add<T>(x, W, acc, m, out, in);
  for (std::size_t k = 0; k < acc.size(); ++k) {
    const T want = static_cast<T>(static_cast<accum_t<T>>(before[k]) + static_cast<accum_t<T>>(y[k]));
    CHECK(std::memcmp(&acc[k], &want, sizeof(T)) == 0);
  }
}
}  // namespace

TEST_CASE("model_math: matmul_nt against a double reference, rows independent of m", "[examples][model_math]") {
  INFO("level " << to_string(active_simd_level()));
  philox_stream rng(17, 3);
  for (const auto& sh : shapes(rng)) check_matmul<float>(sh, rng);
  for (const auto& sh : shapes(rng)) check_matmul<double>(sh, rng);
}

TEST_CASE("model_math: a product over a parallel split equals the serial one", "[examples][model_math]") {
  // m * out * in >= 2^16 goes through parallel_for in 32-row blocks; below it runs serially. A row
  // count just either side of a block edge, m large enough for the parallel path.
  philox_stream rng(23, 1);
  for (const int out : {31, 32, 33, 95, 100}) {
    const int m = 7, in = 300;
    const auto x = random_vec<float>(static_cast<std::size_t>(m) * in, rng);
    const auto W = random_vec<float>(static_cast<std::size_t>(out) * in, rng);
    std::vector<float> all(static_cast<std::size_t>(m) * out), one(static_cast<std::size_t>(out));
    matmul_nt<float>(x, W, all, m, out, in);
    for (int t = 0; t < m; ++t) {
      const auto row = std::span<const float>(x).subspan(static_cast<std::size_t>(t) * in, static_cast<std::size_t>(in));
      for (int o = 0; o < out; ++o) {  // one output row at a time: the 1 x 1 tile, serial
        float v = 0;
        matmul_nt<float>(row, std::span<const float>(W).subspan(static_cast<std::size_t>(o) * in, static_cast<std::size_t>(in)),
                         std::span<float>(&v, 1), 1, 1, in);
        one[static_cast<std::size_t>(o)] = v;
      }
      CHECK(std::memcmp(one.data(), all.data() + static_cast<std::size_t>(t) * out, one.size() * sizeof(float)) == 0);
    }
  }
}
