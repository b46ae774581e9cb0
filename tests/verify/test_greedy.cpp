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

namespace {
// Lowest index of the largest value (the rows below have no NaN).
std::int32_t argmax_lowest(const float* row, int v) {
  std::int32_t best = 0;
  for (int i = 1; i < v; ++i)
    if (row[i] > row[best]) best = i;
  return best;
}

// Brute force of the documented rule, independent of the walk: a node is greedy-reachable iff every
// node on its root path carries the argmax of its parent's row; the accepted path ends at the deepest
// such node (lowest index among equally deep ones); the bonus is the argmax after it.
specdec::verify_result brute_longest_greedy(const specdec::token_tree& t, const std::vector<float>& rows, int v) {
  int best = -1;
  for (int i = 0; i < t.size(); ++i) {
    bool ok = true;
    for (int u = i; u >= 0 && ok; u = t.parent(u))
      ok = t.token(u) == argmax_lowest(rows.data() + static_cast<std::size_t>(t.parent(u) + 1) * v, v);
    if (ok && (best < 0 || t.depth(i) > t.depth(best))) best = i;
  }
  specdec::verify_result r;
  if (best >= 0) r.accepted = t.path(best);
  r.bonus = argmax_lowest(rows.data() + static_cast<std::size_t>(best + 1) * v, v);
  return r;
}

// The pre-fix rule (follow the first matching sibling), to measure how often duplicates matter.
std::size_t first_match_length(const specdec::token_tree& t, const std::vector<float>& rows, int v) {
  std::size_t len = 0;
  for (std::int32_t cur = -1;;) {
    const std::int32_t want = argmax_lowest(rows.data() + static_cast<std::size_t>(cur + 1) * v, v);
    std::int32_t next = -1;
    for (auto c : t.children(cur))
      if (t.token(c) == want) {
        next = c;
        break;
      }
    if (next < 0) return len;
    ++len, cur = next;
  }
}
}  // namespace

TEST_CASE("greedy verification follows every duplicate sibling: hand-built example", "[verify][greedy]") {
  // Two root children carry token 4 (same context); only the second one's subtree continues greedily.
  //   0:'4' (leaf)   1:'4' -> 2:'6' -> 3:'1'
  const auto tree = specdec::token_tree::from_parents(std::vector<std::int32_t>{4, 4, 6, 1},
                                                      std::vector<std::int32_t>{-1, -1, 1, 2});
  const int v = 8;
  const auto rows = one_hot_rows({4, 6, 6, 1, 3}, v);  // root -> 4, after 0 -> 6, after 1 -> 6, after 2 -> 1, after 3 -> 3
  const auto res = specdec::verify_greedy(tree, specdec::make_view<2>(rows.data(), {5, v}));
  CHECK(res.accepted == std::vector<std::int32_t>{1, 2, 3});
  CHECK(res.bonus == 3);
  // Equally long paths through duplicates: the one ending at the lower node index.
  //   0:'4' -> 2:'6'   1:'4' -> 3:'6'
  const auto tie = specdec::token_tree::from_parents(std::vector<std::int32_t>{4, 4, 6, 6},
                                                     std::vector<std::int32_t>{-1, -1, 1, 0});
  const auto rows2 = one_hot_rows({4, 6, 6, 2, 5}, v);
  const auto r2 = specdec::verify_greedy(tie, specdec::make_view<2>(rows2.data(), {5, v}));
  CHECK(r2.accepted == std::vector<std::int32_t>{1, 2});
  CHECK(r2.bonus == 2);
}

TEST_CASE("greedy verification accepts the longest greedy-matching path of random trees with duplicate siblings",
          "[verify][greedy]") {
  // The filer's setting: random trees over a small vocabulary, so siblings repeat tokens often, and rows
  // with ties. verify_greedy and verify_greedy_batch must both equal the brute force on every tree.
  specdec::philox_stream rng(20, 4);
  int shorter_before = 0, with_duplicates = 0;
  const int trials = 20000;
  std::vector<specdec::token_tree> batch_trees;
  std::vector<std::vector<float>> batch_rows;
  std::vector<specdec::verify_result> batch_want;
  auto flush = [&]() {
    std::vector<float> all;
    for (const auto& r : batch_rows) all.insert(all.end(), r.begin(), r.end());
    const std::vector<std::int32_t> committed(batch_trees.size(), 1);
    const specdec::token_tree_batch b(batch_trees, committed);
    const int v = 4;
    const auto got = specdec::verify_greedy_batch(specdec::host{2}, b,
                                                  specdec::make_view<2>(all.data(), {static_cast<std::int64_t>(all.size() / v), v}));
    for (std::size_t r = 0; r < batch_trees.size(); ++r) REQUIRE(got.request(static_cast<int>(r)) == batch_want[r]);
    batch_trees.clear(), batch_rows.clear(), batch_want.clear();
  };
  for (int trial = 0; trial < trials; ++trial) {
    const int v = trial % 2 ? 4 : 2 + static_cast<int>(rng.below(3));
    const int n = static_cast<int>(rng.below(13));
    const auto tree = harness::random_tree(n, v, rng);
    std::vector<float> rows(static_cast<std::size_t>((n + 1) * v));
    for (auto& x : rows) x = static_cast<float>(rng.below(3));  // ties are common: lowest id wins
    const auto want = brute_longest_greedy(tree, rows, v);
    const auto got = specdec::verify_greedy(tree, specdec::make_view<2>(rows.data(), {n + 1, v}));
    INFO("trial " << trial);
    REQUIRE(got == want);
    shorter_before += first_match_length(tree, rows, v) < want.accepted.size();
    bool dup = false;
    for (int p = -1; p < n && !dup; ++p) {
      const auto c = tree.children(p);
      for (std::size_t a = 0; a < c.size() && !dup; ++a)
        for (std::size_t b = a + 1; b < c.size() && !dup; ++b) dup = tree.token(c[a]) == tree.token(c[b]);
    }
    with_duplicates += dup;
    if (v == 4) {
      batch_trees.push_back(tree), batch_rows.push_back(rows), batch_want.push_back(want);
      if (batch_trees.size() == 64) flush();
    }
  }
  flush();
  // The setting exercises the case: many trees have duplicate siblings, and for a few percent of them
  // following only the first matching sibling accepts a shorter path.
  CHECK(with_duplicates > trials / 4);
  CHECK(shorter_before > trials / 200);
}

TEST_CASE("greedy verification rejects NaN and +inf in the rows it reads, naming row and token", "[verify][greedy][validation]") {
  using Catch::Contains;
  const auto tree = specdec::token_tree::from_parents(std::vector<std::int32_t>{1, 2}, std::vector<std::int32_t>{-1, -1});
  const int v = 4;
  auto rows = one_hot_rows({1, 3, 0}, v);
  rows[static_cast<std::size_t>(1 * v + 2)] = std::numeric_limits<float>::quiet_NaN();  // row 1: after node 0 (visited)
  REQUIRE_THROWS_WITH(specdec::verify_greedy(tree, specdec::make_view<2>(rows.data(), {3, v})),
                      Contains("verify_greedy") && Contains("target_logits") && Contains("row 1") && Contains("token 2"));
  rows[static_cast<std::size_t>(1 * v + 2)] = std::numeric_limits<float>::infinity();
  REQUIRE_THROWS_WITH(specdec::verify_greedy(tree, specdec::make_view<2>(rows.data(), {3, v})), Contains("row 1"));
  // A row the walk never reads (after node 1, which does not match) cannot influence the result.
  rows = one_hot_rows({1, 3, 0}, v);
  rows[static_cast<std::size_t>(2 * v)] = std::numeric_limits<float>::quiet_NaN();
  const auto r = specdec::verify_greedy(tree, specdec::make_view<2>(rows.data(), {3, v}));
  CHECK(r.accepted == std::vector<std::int32_t>{0});
  CHECK(r.bonus == 3);
  // Wider rows (vectorized body + tail): NaN of either sign anywhere, +inf, and an all -inf row are
  // rejected; -inf entries are legal.
  {
    const int w = 37;
    const auto chain = specdec::token_tree::from_parents(std::vector<std::int32_t>{5}, std::vector<std::int32_t>{-1});
    for (const int at : {0, 17, 31, 32, 36}) {
      for (const float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity()}) {
        auto wide = one_hot_rows({5, 9}, w);
        wide[static_cast<std::size_t>(w + at)] = bad;  // row 1, read for the bonus
        REQUIRE_THROWS_WITH(specdec::verify_greedy(chain, specdec::make_view<2>(wide.data(), {2, w})),
                            Contains("row 1") && Contains("token " + std::to_string(at)));
      }
    }
    auto wide = one_hot_rows({5, 9}, w);
    for (int t = 1; t < w; t += 3) wide[static_cast<std::size_t>(w + t)] = -std::numeric_limits<float>::infinity();
    CHECK(specdec::verify_greedy(chain, specdec::make_view<2>(wide.data(), {2, w})).bonus == 9);
    for (int t = 0; t < w; ++t) wide[static_cast<std::size_t>(w + t)] = -std::numeric_limits<float>::infinity();
    REQUIRE_THROWS_WITH(specdec::verify_greedy(chain, specdec::make_view<2>(wide.data(), {2, w})),
                        Contains("row 1") && Contains("all -inf"));
  }
  // The batch names the request and its local row.
  const std::vector<specdec::token_tree> trees{tree, tree};
  const specdec::token_tree_batch b(trees, std::vector<std::int32_t>{1, 1});
  std::vector<float> all = one_hot_rows({1, 3, 0, 1, 3, 0}, v);
  all[static_cast<std::size_t>(3 * v + 1)] = std::numeric_limits<float>::quiet_NaN();  // request 1, row 0
  REQUIRE_THROWS_WITH(specdec::verify_greedy_batch(specdec::host{1}, b, specdec::make_view<2>(all.data(), {6, v})),
                      Contains("verify_greedy_batch") && Contains("request 1") && Contains("row 0") && Contains("token 1"));
}
