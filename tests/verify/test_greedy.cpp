// Greedy tree verification (verify/greedy.hpp): the accepted path is the longest one matching the target
// argmax at every parent; output equals the target's own greedy decoding token for token.
#include <catch2/catch.hpp>

#include <limits>

#include "specdec/verify/greedy.hpp"
#include "verify/lossless_harness.hpp"

namespace {
std::vector<float> one_hot_rows(const std::vector<int>& argmax, int v) {
  std::vector<float> r(argmax.size() * static_cast<std::size_t>(v), 0.0f);
  for (std::size_t i = 0; i < argmax.size(); ++i) r[i * v + static_cast<std::size_t>(argmax[i])] = 1.0f;
  return r;
}
}  // namespace

TEST_CASE("greedy verification walks the matching path and emits the bonus argmax") {
  // root children: 0:'3', 1:'5'; 2:'7' under 1; 3:'2' under 1; 4:'4' under 3
  const auto tree = specdec::token_tree::from_parents(std::vector<std::int32_t>{3, 5, 7, 2, 4},
                                                      std::vector<std::int32_t>{-1, -1, 1, 1, 3});
  const int v = 8;
  // argmax per row: root -> 5, after node 0 -> 1, after 1 -> 2, after 2 -> 0, after 3 -> 4, after 4 -> 6
  const auto rows = one_hot_rows({5, 1, 2, 0, 4, 6}, v);
  const auto res = specdec::verify_greedy(tree, specdec::make_view<2>(rows.data(), {6, v}));
  CHECK(res.accepted == std::vector<std::int32_t>{1, 3, 4});
  CHECK(res.bonus == 6);
  CHECK(res.emitted_tokens(tree) == std::vector<std::int32_t>{5, 2, 4, 6});
  // nothing matches at the root: only the bonus
  const auto rows0 = one_hot_rows({6, 1, 2, 0, 4, 6}, v);
  const auto r0 = specdec::verify_greedy(tree, specdec::make_view<2>(rows0.data(), {6, v}));
  CHECK(r0.accepted.empty());
  CHECK(r0.bonus == 6);
  // ties resolve to the lowest id: row 0 has 3 and 5 tied -> 3 (node 0, a leaf), bonus = argmax after node 0
  auto tie = one_hot_rows({5, 1, 2, 0, 4, 6}, v);
  tie[3] = 1.0f;
  const auto rt = specdec::verify_greedy(tree, specdec::make_view<2>(tie.data(), {6, v}));
  CHECK(rt.accepted == std::vector<std::int32_t>{0});
  CHECK(rt.bonus == 1);
  // an empty tree emits the root argmax
  const specdec::token_tree empty;
  const std::vector<float> one{0.0f, 2.0f, 1.0f};
  const auto re = specdec::verify_greedy(empty, specdec::make_view<2>(one.data(), {1, 3}));
  CHECK(re.accepted.empty());
  CHECK(re.bonus == 1);
}

TEST_CASE("greedy speculative output equals the target's greedy decoding") {
  const harness::toy_model p{16, 101, 1, true}, q{16, 102, 0, false};
  specdec::philox_stream shape_rng(3, 3);
  for (int trial = 0; trial < 200; ++trial) {
    // autoregressive greedy reference: 12 tokens
    harness::seq ref;
    for (int i = 0; i < 12; ++i) ref.push_back(specdec::greedy_token(p.dist(ref)));
    harness::seq out;
    while (out.size() < 12) {
      // mix of a top-k tree from the draft and a random tree: anything must give the same output
      const auto tree = trial % 2 ? harness::topk_tree(q, out, {2, 2, 1}) : harness::random_tree(10, 16, shape_rng);
      std::vector<float> pr;
      harness::fill_rows(p, out, tree, pr);
      const auto res = specdec::verify_greedy(tree, harness::rows_view(pr, tree.size() + 1, 16));
      const auto toks = res.emitted_tokens(tree);
      out.insert(out.end(), toks.begin(), toks.end());
    }
    out.resize(12);
    REQUIRE(out == ref);
  }
}

TEST_CASE("greedy batch verification equals per-request verification") {
  specdec::philox_stream rng(8, 8);
  std::vector<specdec::token_tree> trees;
  std::vector<std::int32_t> committed;
  std::vector<float> all;
  const int v = 6;
  std::vector<specdec::verify_result> expect;
  for (int r = 0; r < 5; ++r) {
    trees.push_back(harness::random_tree(r == 2 ? 0 : 1 + static_cast<int>(rng.below(9)), v, rng));
    committed.push_back(10 + r);
    std::vector<float> rows(static_cast<std::size_t>((trees.back().size() + 1) * v));
    for (auto& x : rows) x = static_cast<float>(rng.below(4));  // many ties
    expect.push_back(specdec::verify_greedy(trees.back(), specdec::make_view<2>(rows.data(), {trees.back().size() + 1, v})));
    all.insert(all.end(), rows.begin(), rows.end());
  }
  const specdec::token_tree_batch batch(trees, committed);
  const auto total = static_cast<std::int64_t>(all.size() / v);
  const auto got = specdec::verify_greedy_batch(specdec::host{2}, batch, specdec::make_view<2>(all.data(), {total, v}));
  REQUIRE(got.num_requests() == 5);
  for (int r = 0; r < 5; ++r) CHECK(got.request(r) == expect[static_cast<std::size_t>(r)]);
  CHECK(got.accepted_indptr.back() == static_cast<std::int32_t>(got.accepted.size()));
}
