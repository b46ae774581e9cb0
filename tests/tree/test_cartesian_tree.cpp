#include <catch2/catch.hpp>

#include <limits>
#include <set>

#include "specdec/core/philox.hpp"
#include "specdec/decoder/tree_builders.hpp"  // cartesian_tree_builder: the draft_candidates -> tree step
#include "specdec/tree/cartesian_tree.hpp"

using specdec::head_candidates;

namespace {
std::vector<head_candidates> make_heads(const std::vector<std::vector<std::int32_t>>& toks) {
  std::vector<head_candidates> h;
  for (const auto& t : toks) {
    head_candidates c{t, {}};
    for (std::size_t r = 0; r < t.size(); ++r) c.logprobs.push_back(-static_cast<float>(r + 1));
    h.push_back(c);
  }
  return h;
}
}  // namespace

TEST_CASE("cartesian_tree: Appendix E example, top-2 x top-3 gives 6 branches", "[tree][cartesian]") {
  const auto heads = make_heads({{10, 11}, {20, 21, 22}});
  const auto t = specdec::cartesian_tree(heads);
  REQUIRE(t.size() == 2 + 6);
  CHECK(std::vector<std::int32_t>(t.tokens().begin(), t.tokens().end()) ==
        std::vector<std::int32_t>{10, 11, 20, 21, 22, 20, 21, 22});
  CHECK(std::vector<std::int32_t>(t.parents().begin(), t.parents().end()) ==
        std::vector<std::int32_t>{-1, -1, 0, 0, 0, 1, 1, 1});
  CHECK(t.leaves().size() == 6);
  CHECK(t.score(7) == -5.0f);  // rank 1 of head 0 (-2) + rank 2 of head 1 (-3)
}

TEST_CASE("cartesian_tree: TokenSwift [1,3,3,3] from head logits has 40 nodes and all 27 branches", "[tree][cartesian]") {
  const int V = 50;
  specdec::philox_stream rng(9, 0);
  std::vector<float> rows(4 * V);
  for (auto& x : rows) x = rng.uniform() * 4 - 8;
  const auto t = specdec::cartesian_tree(rows, V);  // default widths [1,3,3,3]
  REQUIRE(t.size() == 40);
  REQUIRE(t.max_depth() == 3);
  const auto leaves = t.leaves();
  REQUIRE(leaves.size() == 27);
  const std::vector<int> widths{1, 3, 3, 3};
  std::vector<std::vector<std::int32_t>> top;
  for (int k = 0; k < 4; ++k)
    top.push_back(specdec::topk_indices_by_sort<float>(std::span<const float>(rows.data() + k * V, V), widths[static_cast<std::size_t>(k)]));
  std::set<std::vector<std::int32_t>> branches;
  for (auto l : leaves) {
    const auto p = t.path_tokens(l);
    REQUIRE(p.size() == 4);
    float s = 0;
    for (int k = 0; k < 4; ++k) {
      const auto& tk = top[static_cast<std::size_t>(k)];
      REQUIRE(std::find(tk.begin(), tk.end(), p[static_cast<std::size_t>(k)]) != tk.end());
      s += rows[static_cast<std::size_t>(k * V + p[static_cast<std::size_t>(k)])];
    }
    REQUIRE(t.score(l) == Approx(s));
    branches.insert(p);
  }
  REQUIRE(branches.size() == 27);  // every combination exactly once
  // Children appear in rank order.
  for (int i = 0; i < t.size(); ++i) {
    const auto c = t.children(i);
    for (std::size_t j = 1; j < c.size(); ++j) REQUIRE(t.logprob(c[j - 1]) >= t.logprob(c[j]));
  }
}

TEST_CASE("sparse_tree: Medusa-style choices, prefixes added, equals the product tree when complete", "[tree][cartesian]") {
  const auto heads = make_heads({{10, 11, 12}, {20, 21}, {30, 31}});
  // {2,0} needs its prefix {2}; duplicates merge.
  const auto t = specdec::sparse_tree(heads, {{0}, {0, 0}, {2, 0}, {0, 1}, {0, 0}, {0, 1, 1}});
  // order: {0} {2} {0,0} {0,1} {2,0} {0,1,1}
  CHECK(std::vector<std::int32_t>(t.tokens().begin(), t.tokens().end()) == std::vector<std::int32_t>{10, 12, 20, 21, 20, 31});
  CHECK(std::vector<std::int32_t>(t.parents().begin(), t.parents().end()) == std::vector<std::int32_t>{-1, -1, 0, 0, 1, 3});
  CHECK(t.score(5) == -1.0f - 2.0f - 2.0f);

  std::vector<std::vector<int>> all;
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 2; ++c) all.push_back({a, b, c});
  REQUIRE(specdec::sparse_tree(heads, all) == specdec::cartesian_tree(heads));
}

TEST_CASE("cartesian/sparse trees: validation", "[tree][cartesian][validation]") {
  using Catch::Contains;
  REQUIRE_THROWS_WITH(specdec::cartesian_tree(make_heads({{1, 2}, {}})), Contains("heads[1].tokens"));
  REQUIRE_THROWS_WITH(specdec::cartesian_tree(make_heads({{1, 1}})), Contains("distinct"));
  REQUIRE_THROWS_WITH(specdec::cartesian_tree(make_heads({{1, -2}})), Contains("heads[0].tokens[1]"));
  auto bad = make_heads({{1, 2}});
  bad[0].logprobs.pop_back();
  REQUIRE_THROWS_WITH(specdec::cartesian_tree(bad), Contains("logprobs.size()"));
  REQUIRE_THROWS_WITH(specdec::cartesian_tree(make_heads({{1, 2, 3}, {4, 5, 6}}), 10), Contains("max_nodes"));
  const std::vector<float> rows(8, -1.0f);
  REQUIRE_THROWS_WITH(specdec::cartesian_tree(rows, 4, std::vector<int>{1, 5}), Contains("widths[1]"));
  REQUIRE_THROWS_WITH(specdec::cartesian_tree(rows, 4, std::vector<int>{1}), Contains("logprobs.size()"));
  REQUIRE_THROWS_WITH(specdec::cartesian_tree(rows, 0, std::vector<int>{1}), Contains("vocab_size"));
  const auto heads = make_heads({{1, 2}, {3}});
  REQUIRE_THROWS_WITH(specdec::sparse_tree(heads, {{0, 1}}), Contains("choices[0][1]"));
  REQUIRE_THROWS_WITH(specdec::sparse_tree(heads, {{0}, {}}), Contains("choices[1]"));
  REQUIRE_THROWS_WITH(specdec::sparse_tree(heads, {{0, 0, 0}}), Contains("choices[0].size()"));
  REQUIRE_THROWS_WITH(specdec::sparse_tree(heads, {{-1}}), Contains("choices[0][0]"));
}

TEST_CASE("cartesian trees: NaN / +inf head log-probs are rejected naming head and rank", "[tree][cartesian][validation]") {
  using Catch::Contains;
  auto heads = make_heads({{1, 2}, {3, 4}});
  heads[1].logprobs[1] = std::nanf("");
  REQUIRE_THROWS_WITH(specdec::cartesian_tree(heads), Contains("cartesian_tree") && Contains("heads[1].logprobs[1]"));
  heads[1].logprobs[1] = std::numeric_limits<float>::infinity();
  REQUIRE_THROWS_WITH(specdec::sparse_tree(heads, {{0, 1}}), Contains("sparse_tree") && Contains("heads[1].logprobs[1]"));
  heads[1].logprobs[1] = -std::numeric_limits<float>::infinity();  // impossible, but a legal score
  CHECK(specdec::cartesian_tree(heads).size() == 6);
  // each log-prob finite but their sum past float: named as this builder's heads[d].logprobs[r] (the
  // message named token_tree::add's node before)
  auto big = make_heads({{1}, {3, 4}});
  big[0].logprobs[0] = 3e38f;
  big[1].logprobs[1] = 3e38f;
  REQUIRE_THROWS_WITH(specdec::cartesian_tree(big), Contains("specdec::cartesian_tree") && Contains("'heads[1].logprobs[1]'") &&
                                                        Contains("cumulative score inf"));
  REQUIRE_THROWS_WITH(specdec::sparse_tree(big, {{0, 1}}), Contains("specdec::sparse_tree") && Contains("'heads[1].logprobs[1]'"));
  CHECK(specdec::sparse_tree(big, {{0, 0}}).size() == 2);
  // Rows with NaN: top-k ranks NaN last, so a NaN used to become a node's log-prob when the width
  // exceeded the non-NaN entries.
  std::vector<float> rows{-1.0f, std::nanf(""), -2.0f, -3.0f};
  REQUIRE_THROWS_WITH(specdec::heads_topk(rows, 2, std::vector<int>{2, 2}), Contains("heads_topk") && Contains("logprobs (row 0)"));
}

TEST_CASE("cartesian_tree_builder: depth k is the best distinct alternatives[k]; repeats merged", "[tree][cartesian]") {
  // A sampled chain (the drafter ranked 3 first at depth 0 but drew 7) keeps the documented ranking:
  // depth 0 is alternatives[0]'s best, not chain[0] (draft_candidates.hpp).
  specdec::draft_candidates c;
  c.chain = {{7, -2.0f}, {9, -1.5f}};
  c.alternatives = {{{3, -0.5f}, {7, -2.0f}, {5, -2.5f}}, {{8, -3.0f}, {9, -1.5f}, {8, -0.7f}, {6, -4.0f}}};
  specdec::token_tree t;
  specdec::cartesian_tree_builder({1, 3}).build(c, t);
  // depth 1: 8 listed twice is one node (the better log-prob), so the third token is 6. Duplicates
  // used to reach cartesian_tree and throw ("distinct tokens").
  CHECK(std::vector<std::int32_t>(t.tokens().begin(), t.tokens().end()) == std::vector<std::int32_t>{3, 8, 9, 6});
  CHECK(t.logprob(1) == -0.7f);
  specdec::cartesian_tree_builder({2, 2}).build(c, t);
  CHECK(std::vector<std::int32_t>(t.tokens().begin(), t.tokens().end()) == std::vector<std::int32_t>{3, 7, 8, 9, 8, 9});
  for (int i = 0; i < t.size(); ++i)  // no two siblings share a token
    for (int j = i + 1; j < t.size(); ++j) CHECK_FALSE((t.parent(i) == t.parent(j) && t.token(i) == t.token(j)));
  // Without alternatives at a depth, the chain token alone.
  c.alternatives.resize(1);
  specdec::cartesian_tree_builder({2, 2}).build(c, t);
  CHECK(std::vector<std::int32_t>(t.tokens().begin(), t.tokens().end()) == std::vector<std::int32_t>{3, 7, 9, 9});
}
