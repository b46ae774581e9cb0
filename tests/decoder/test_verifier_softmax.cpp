// The verifier adapters' softmax (detail::softmax_rows in decoder/verifiers.hpp) is logits_to_probs
// row by row: the same bits, close to a double-precision softmax, the same bits on a strided view,
// and errors that name the verifier, 'logits', the row and the token.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/decoder/verifiers.hpp"

using namespace specdec;

namespace {
constexpr float inf = std::numeric_limits<float>::infinity();

std::vector<float> random_rows(std::int64_t rows, std::int64_t V, std::uint64_t seed) {
  philox_stream rng(seed, 3);
  std::vector<float> l(static_cast<std::size_t>(rows * V));
  for (auto& x : l) {
    const auto u = rng.below(1000);
    x = u < 100 ? -inf : static_cast<float>(u) / 25.0f - 20.0f;  // some masked tokens, a wide range
  }
  l[0] = 3.0f;  // row 0 is never all -inf
  for (std::int64_t r = 0; r < rows; ++r) l[static_cast<std::size_t>(r * V + r % V)] = 1.0f;
  return l;
}
}  // namespace

TEST_CASE("verifier softmax: logits_to_probs per row, close to the double softmax, -inf -> 0", "[decoder][verify]") {
  for (const std::int64_t V : {1, 5, 16, 255, 256, 257, 1000, 4099}) {
    const std::int64_t rows = 4;
    const auto l = random_rows(rows, V, static_cast<std::uint64_t>(V));
    std::vector<float> probs;
    detail::softmax_rows(make_view<2>(l.data(), {rows, V}), probs, "test");
    REQUIRE(probs.size() == static_cast<std::size_t>(rows * V));
    std::vector<float> want(static_cast<std::size_t>(V));
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::span<const float> row(l.data() + r * V, static_cast<std::size_t>(V));
      logits_to_probs(row, want);
      double mx = -std::numeric_limits<double>::infinity(), sum = 0;
      for (float x : row) mx = std::max(mx, static_cast<double>(x));
      for (float x : row) sum += std::exp(static_cast<double>(x) - mx);
      for (std::int64_t v = 0; v < V; ++v) {
        const float p = probs[static_cast<std::size_t>(r * V + v)];
        INFO("V " << V << " row " << r << " token " << v << " p " << p << " logit " << row[static_cast<std::size_t>(v)]);
        REQUIRE(p == want[static_cast<std::size_t>(v)]);
        const double exact = std::exp(static_cast<double>(row[static_cast<std::size_t>(v)]) - mx) / sum;
        if (row[static_cast<std::size_t>(v)] == -inf) REQUIRE(p == 0.0f);
        // fast_exp (< 2e-7), the float l - max (half an ulp of |l - max|: relative 6e-8 |l - max| in
        // exp), 1 / sum in float and the scale: the double softmax's relative error is bounded by
        // 1e-6 + 1.2e-7 |l - max|, so ~5e-6 for a token 40 nats below the max (p ~ 4e-18).
        else REQUIRE(std::abs(p - exact) <= (1e-6 + 1.2e-7 * (mx - row[static_cast<std::size_t>(v)])) * exact);
      }
    }
  }
}

TEST_CASE("verifier softmax: a strided view gives the contiguous view's bits", "[decoder][verify]") {
  for (const std::int64_t V : {1, 7, 256, 600}) {
    const std::int64_t rows = 3;
    const auto l = random_rows(rows, V, 40 + static_cast<std::uint64_t>(V));
    // [rows, V] with token stride 3 and row stride 3 V + 5, garbage in between
    const std::int64_t ts = 3, rs = 3 * V + 5;
    std::vector<float> big(static_cast<std::size_t>(rows * rs), std::numeric_limits<float>::quiet_NaN());
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t v = 0; v < V; ++v) big[static_cast<std::size_t>(r * rs + v * ts)] = l[static_cast<std::size_t>(r * V + v)];
    std::vector<float> a, b;
    detail::softmax_rows(make_view<2>(l.data(), {rows, V}), a, "test");
    detail::softmax_rows(strided_view<const float, 2>(static_cast<const float*>(big.data()), {rows, V}, {rs, ts}), b, "test");
    REQUIRE(a == b);
    // the policy on the strided path: token 2 of row 1
    if (V > 2) {
      big[static_cast<std::size_t>(rs + 2 * ts)] = inf;
      REQUIRE_THROWS_WITH(detail::softmax_rows(strided_view<const float, 2>(static_cast<const float*>(big.data()), {rows, V}, {rs, ts}), b,
                                               "specdec::chain_speculative_verifier"),
                          Catch::Contains("specdec::chain_speculative_verifier") && Catch::Contains("'logits'") &&
                              Catch::Contains("row 1, token 2"));
    }
  }
}

TEST_CASE("verifier softmax: non-finite policy messages", "[decoder][verify][validation]") {
  using Catch::Contains;
  const std::int64_t V = 300;
  std::vector<float> l(static_cast<std::size_t>(2 * V), 0.0f), probs;
  l[static_cast<std::size_t>(V + 290)] = std::numeric_limits<float>::quiet_NaN();
  l[static_cast<std::size_t>(V + 291)] = inf;
  REQUIRE_THROWS_WITH(detail::softmax_rows(make_view<2>(static_cast<const float*>(l.data()), {2, V}), probs, "specdec::multi_draft_verifier"),
                      Contains("specdec::multi_draft_verifier") && Contains("'logits'") && Contains("row 1, token 290") &&
                          Contains("finite or -inf logits"));
  std::fill(l.begin(), l.end(), -inf);
  l[0] = 0.0f;
  REQUIRE_THROWS_WITH(detail::softmax_rows(make_view<2>(static_cast<const float*>(l.data()), {2, V}), probs, "specdec::sample_and_match_verifier"),
                      Contains("specdec::sample_and_match_verifier") && Contains("'logits'") && Contains("row 1") &&
                          Contains("all -inf"));
}

TEST_CASE("verifiers' verify(): the logits and the tree are checked before a row is read or written",
          "[decoder][verify][validation]") {
  // (A review found each of these reading or writing out of bounds, or reading through a null or
  // device pointer, in the stochastic verifiers; greedy_verifier checked them through verify_greedy.)
  using Catch::Contains;
  const std::int64_t V = 4;
  const auto chain = token_tree::from_parents(std::vector<std::int32_t>{1, 2}, std::vector<std::int32_t>{-1, 0});
  std::vector<float> l(static_cast<std::size_t>(3 * V), 0.0f);
  draft_candidates draft;
  verify_result out;
  const auto each = [&](const verify_input& in, const std::string& what, bool greedy_too = true) {
    philox_stream r(1, 2);
    const verify_input again{in.tree, in.logits, in.draft, r};
    CHECK_THROWS_WITH(sample_and_match_verifier{}.verify(again, out), Contains("sample_and_match_verifier") && Contains(what));
    CHECK_THROWS_WITH(chain_speculative_verifier{}.verify(again, out), Contains("chain_speculative_verifier") && Contains(what));
    CHECK_THROWS_WITH(multi_draft_verifier{}.verify(again, out), Contains("multi_draft_verifier") && Contains(what));
    if (greedy_too) CHECK_THROWS_WITH(greedy_verifier{}.verify(again, out), Contains(what));
  };
  philox_stream rng(1, 2);
  // one row for a two-node tree (the q rows were sized from the logits and written past them)
  each({chain, make_view<2>(static_cast<const float*>(l.data()), {1, V}), draft, rng}, "expected shape [3, *]");
  // null data, device memory
  each({chain, strided_view<const float, 2>(static_cast<const float*>(nullptr), {3, V}, {V, 1}), draft, rng}, "null");
  each({chain, strided_view<const float, 2>(l.data(), {3, V}, {V, 1}, memory_space::device), draft, rng},
       "host-accessible");
  // a tree token outside the vocabulary (the one-hot draft row was written at it)
  const auto far = token_tree::from_parents(std::vector<std::int32_t>{1, 1000}, std::vector<std::int32_t>{-1, 0});
  each({far, make_view<2>(static_cast<const float*>(l.data()), {3, V}), draft, rng}, "1000", false);
  // and the same inputs done right run
  philox_stream r(1, 2);
  chain_speculative_verifier{}.verify({chain, make_view<2>(static_cast<const float*>(l.data()), {3, V}), draft, r}, out);
  CHECK(out.num_emitted() >= 1);
}

TEST_CASE("exp_sum in place gives exp_sum's bits; logits_to_probs in place too, and refuses a partial overlap",
          "[decoder][verify][validation]") {
  for (const std::int64_t V : {1, 7, 256, 257, 1000}) {
    auto l = random_rows(1, V, 40 + static_cast<std::uint64_t>(V));
    const float m = *std::max_element(l.begin(), l.end());
    std::vector<float> apart(l.size()), in_place = l;
    const double s1 = detail::exp_sum(l.data(), l.size(), m, apart.data());
    const double s2 = detail::exp_sum(in_place.data(), in_place.size(), m, in_place.data());
    CHECK(s1 == s2);
    CHECK(apart == in_place);
    std::vector<float> probs(l.size()), row = l;
    logits_to_probs(l, probs);
    logits_to_probs(row, row);
    CHECK(row == probs);
  }
  std::vector<float> buf(101, 0.5f);
  CHECK_THROWS_WITH(logits_to_probs(std::span<const float>(buf.data(), 100), std::span<float>(buf.data() + 1, 100)),
                    Catch::Contains("logits_to_probs") && Catch::Contains("'probs'") &&
                        Catch::Contains("disjoint from 'logits'"));
}
