#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "specdec/core/numeric.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/topk.hpp"

namespace {
template <class T>
std::vector<T> random_row(int n, std::uint64_t seed, int distinct) {
  specdec::philox_stream rng(seed, 1);
  std::vector<T> v(static_cast<std::size_t>(n));
  // distinct > 0: draw from a small set of values so ties are frequent
  for (auto& x : v) x = distinct > 0 ? static_cast<T>(rng.below(static_cast<std::uint32_t>(distinct))) : static_cast<T>(rng.uniform() * 20 - 10);
  return v;
}
}  // namespace

TEST_CASE("topk: matches a full stable sort, ties broken by lower index", "[core][topk]") {
  for (int n : {1, 5, 16, 17, 100, 1000, 32000}) {
    for (int distinct : {0, 2, 7, 1000}) {
      const auto v = random_row<float>(n, 77u + static_cast<std::uint64_t>(n * 13 + distinct), distinct);
      for (int k : {0, 1, 3, 16, 20, 64, n}) {
        if (k > n) continue;
        std::vector<std::int32_t> idx(static_cast<std::size_t>(k));
        std::vector<float> val(static_cast<std::size_t>(k));
        specdec::topk_workspace<float> ws;
        specdec::topk<float>(v, k, idx, val, ws);
        const auto want = specdec::topk_indices_by_sort<float>(v, k);
        REQUIRE(idx == want);
        for (int j = 0; j < k; ++j) REQUIRE(val[static_cast<std::size_t>(j)] == v[static_cast<std::size_t>(want[static_cast<std::size_t>(j)])]);
      }
    }
  }
}

TEST_CASE("topk: adversarial orders (increasing, decreasing, all equal) and double/int types", "[core][topk]") {
  std::vector<double> inc(500), dec(500), eq(500, 1.5);
  for (int i = 0; i < 500; ++i) inc[static_cast<std::size_t>(i)] = i, dec[static_cast<std::size_t>(i)] = -i;
  for (int k : {1, 10, 499}) {
    REQUIRE(specdec::topk_indices<double>(inc, k) == specdec::topk_indices_by_sort<double>(inc, k));
    REQUIRE(specdec::topk_indices<double>(dec, k) == specdec::topk_indices_by_sort<double>(dec, k));
    const auto e = specdec::topk_indices<double>(eq, k);
    for (int j = 0; j < k; ++j) REQUIRE(e[static_cast<std::size_t>(j)] == j);  // lower token id first
  }
  const std::vector<int> iv{3, 9, 9, 1, 9, 0};
  REQUIRE(specdec::topk_indices<int>(iv, 4) == std::vector<std::int32_t>{1, 2, 4, 0});
}

TEST_CASE("topk: NaN ranks below -inf; -inf handled", "[core][topk]") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> v{nan, -inf, 2.0f, nan, 2.0f, -1.0f};
  for (int i = 0; i < 40; ++i) v.push_back(nan);
  v.push_back(5.0f);
  const auto got = specdec::topk_indices<float>(v, 6);
  REQUIRE(got == std::vector<std::int32_t>{46, 2, 4, 5, 1, 0});
  REQUIRE(got == specdec::topk_indices_by_sort<float>(v, 6));
}

TEST_CASE("topk: half and bfloat16 rank NaN last too", "[core][topk]") {
  // their NaN test widened to float: it said "not NaN" for every 16-bit value, and a NaN ranked second
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> f{1.0f, nan, 3.0f, 2.0f, nan, -inf, 5.0f};
  const std::vector<std::int32_t> want{6, 2, 3, 0, 5, 1};
  const auto check = [&]<class T>(T) {
    std::vector<T> v;
    for (float x : f) v.push_back(specdec::from_float<T>(x));
    CHECK(specdec::topk_indices<T>(v, 4) == std::vector<std::int32_t>(want.begin(), want.begin() + 4));
    CHECK(specdec::topk_indices<T>(v, 6) == want);
    CHECK(specdec::topk_indices_by_sort<T>(v, 6) == want);
  };
  check(specdec::half{});
  check(specdec::bfloat16{});
}

TEST_CASE("topk: validation", "[core][topk][validation]") {
  using Catch::Contains;
  const std::vector<float> v(10, 0.0f);
  std::vector<std::int32_t> idx(3);
  specdec::topk_workspace<float> ws;
  REQUIRE_THROWS_WITH(specdec::topk<float>(v, 11, idx, {}, ws), Contains("specdec::topk") && Contains("'k'"));
  REQUIRE_THROWS_WITH(specdec::topk<float>(v, -1, idx, {}, ws), Contains("'k'"));
  REQUIRE_THROWS_AS(specdec::topk<float>(v, 4, idx, {}, ws), specdec::invalid_argument);
  REQUIRE_THROWS_WITH(specdec::topk<float>(v, 4, idx, {}, ws), Contains("out_indices.size()"));
  std::vector<float> vals(2);
  REQUIRE_THROWS_WITH(specdec::topk<float>(v, 3, idx, vals, ws), Contains("out_values.size()"));
}
