#include <catch2/catch.hpp>

#include <limits>
#include <random>
#include <set>

#include "specdec/core/philox.hpp"
#include "specdec/tree/token_tree.hpp"

using specdec::token_tree;
using specdec::token_tree_batch;

namespace {

// A random topological tree of n nodes: parent of node i uniform in [-1, i).
token_tree random_tree(int n, std::uint64_t seed) {
  specdec::philox_stream rng(seed, 0);
  token_tree t;
  for (int i = 0; i < n; ++i) {
    const auto parent = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(i + 1))) - 1;
    t.add(static_cast<std::int32_t>(rng.below(1000)), parent, -rng.uniform());
  }
  return t;
}

// Brute-force ancestor test by walking parents with a set (independent of the mask code).
bool brute_ancestor_or_self(const token_tree& t, int a, int b) {
  std::set<int> anc;
  for (int v = b; v != -1; v = t.parent(v)) anc.insert(v);
  return anc.count(a) != 0;
}

}  // namespace

TEST_CASE("token_tree: hand-built tree has the documented depths, scores, paths, positions and mask", "[tree]") {
  // root -> 0(a) -> {2(c) -> 5(f), 3(d)};  root -> 1(b) -> 4(e)
  token_tree t;
  REQUIRE(t.empty());
  REQUIRE(t.max_depth() == -1);
  CHECK(t.add(10, -1, -0.5f) == 0);
  CHECK(t.add(11, -1, -1.0f) == 1);
  CHECK(t.add(12, 0, -0.25f) == 2);
  CHECK(t.add(13, 0, -2.0f) == 3);
  CHECK(t.add(14, 1, -0.125f) == 4);
  CHECK(t.add(15, 2, -1.5f) == 5);
  REQUIRE(t.size() == 6);
  CHECK(std::vector<std::int32_t>(t.depths().begin(), t.depths().end()) == std::vector<std::int32_t>{0, 0, 1, 1, 1, 2});
  CHECK(t.score(5) == -2.25f);  // -0.5 - 0.25 - 1.5 (exact in binary)
  CHECK(t.score(4) == -1.125f);
  CHECK(t.logprob(3) == -2.0f);
  CHECK(t.max_depth() == 2);
  CHECK(t.children(-1) == std::vector<std::int32_t>{0, 1});
  CHECK(t.children(0) == std::vector<std::int32_t>{2, 3});
  CHECK(t.children(5).empty());
  CHECK(t.path(5) == std::vector<std::int32_t>{0, 2, 5});
  CHECK(t.path_tokens(5) == std::vector<std::int32_t>{10, 12, 15});
  CHECK(t.path(1) == std::vector<std::int32_t>{1});
  CHECK(t.leaves() == std::vector<std::int32_t>{3, 4, 5});
  CHECK(t.positions(100) == std::vector<std::int32_t>{100, 100, 101, 101, 101, 102});
  CHECK(t.find_child(0, 13) == 3);
  CHECK(t.find_child(0, 14) == -1);
  CHECK(t.find_child(-1, 11) == 1);

  const auto m = t.ancestor_mask();
  REQUIRE(m.rows() == 6);
  REQUIRE(m.cols() == 6);
  // Rows as bit patterns (LSB = column 0), written out by hand from the picture above.
  const std::uint64_t expect[6] = {0b000001, 0b000010, 0b000101, 0b001001, 0b010010, 0b100101};
  for (int i = 0; i < 6; ++i) CHECK(m.row(i)[0] == expect[i]);
}

TEST_CASE("token_tree: from_parents round-trips and from_arrays checks depths", "[tree]") {
  const std::vector<std::int32_t> tok{5, 6, 7, 8}, par{-1, 0, 0, 2}, dep{0, 1, 1, 2};
  const std::vector<float> lp{-1.0f, -2.0f, -3.0f, -4.0f};
  const auto t = token_tree::from_parents(tok, par, lp);
  CHECK(t.score(3) == -8.0f);
  CHECK(token_tree::from_arrays(tok, par, dep, lp) == t);
  const auto t0 = token_tree::from_parents(tok, par);
  CHECK(t0.score(3) == 0.0f);
}

TEST_CASE("token_tree: validation rejects malformed trees with named arguments", "[tree][validation]") {
  using Catch::Contains;
  token_tree t;
  REQUIRE_THROWS_WITH(t.add(1, 0, 0.0f), Contains("token_tree::add") && Contains("parent"));
  t.add(1, -1, 0.0f);
  REQUIRE_THROWS_AS(t.add(1, -2, 0.0f), specdec::invalid_argument);
  REQUIRE_THROWS_WITH(t.add(1, 1, 0.0f), Contains("parent"));
  REQUIRE_THROWS_WITH(t.token(1), Contains("token_tree::token") && Contains("'i'"));
  REQUIRE_THROWS_WITH(t.depth(-1), Contains("'i'"));
  REQUIRE_THROWS_WITH(t.path(3), Contains("'i'"));
  REQUIRE_THROWS_WITH(t.children(-2), Contains("'i'"));
  REQUIRE_THROWS_WITH(t.positions(0), Contains("committed_length"));

  const std::vector<std::int32_t> tok{1, 2, 3};
  // parent not earlier than the node (self and forward references), and out of range.
  REQUIRE_THROWS_WITH(token_tree::from_parents(tok, std::vector<std::int32_t>{-1, 1, 0}),
                      Contains("from_parents") && Contains("parents[1]"));
  REQUIRE_THROWS_WITH(token_tree::from_parents(tok, std::vector<std::int32_t>{-1, 2, 0}), Contains("parents[1]"));
  REQUIRE_THROWS_WITH(token_tree::from_parents(tok, std::vector<std::int32_t>{-1, 0, -7}), Contains("parents[2]"));
  REQUIRE_THROWS_WITH(token_tree::from_parents(tok, std::vector<std::int32_t>{-1, 0}), Contains("parents.size()"));
  REQUIRE_THROWS_WITH(token_tree::from_parents(tok, std::vector<std::int32_t>{-1, 0, 0}, std::vector<float>{0.0f}),
                      Contains("logprobs.size()"));
  // inconsistent depth
  REQUIRE_THROWS_WITH(token_tree::from_arrays(tok, std::vector<std::int32_t>{-1, 0, 0},
                                              std::vector<std::int32_t>{0, 1, 2}),
                      Contains("from_arrays") && Contains("depths[2]"));
  REQUIRE_THROWS_WITH(token_tree::from_arrays(tok, std::vector<std::int32_t>{-1, 0, 0},
                                              std::vector<std::int32_t>{1, 2, 2}),
                      Contains("depths[0]"));
  REQUIRE_THROWS_WITH(token_tree::from_arrays(tok, std::vector<std::int32_t>{-1, 0, 0}, std::vector<std::int32_t>{0}),
                      Contains("depths.size()"));
  std::vector<specdec::mask_word> buf(9);
  const auto t3 = token_tree::from_parents(tok, std::vector<std::int32_t>{-1, 0, 0});
  REQUIRE_THROWS_WITH(t3.write_ancestor_mask(buf.data(), 0), Contains("row_stride"));
  REQUIRE_THROWS_WITH(t3.write_ancestor_mask(nullptr, 1), Contains("'rows'") && Contains("non-null"));
  token_tree{}.write_ancestor_mask(nullptr, 1);  // an empty tree writes no row
}

TEST_CASE("token_tree: ancestor mask, paths and leaves of large random trees match brute force", "[tree]") {
  for (int n : {1, 63, 64, 65, 200, 1024, 1500}) {
    const auto t = random_tree(n, 1234 + static_cast<std::uint64_t>(n));
    const auto m = t.ancestor_mask();
    REQUIRE(m.rows() == n);
    REQUIRE(m.row_stride() == specdec::words_per_row(n));
    // Full check for small n, sampled rows for large n (O(n^2) brute force stays cheap).
    const int step = n > 300 ? 7 : 1;
    for (int i = 0; i < n; i += step) {
      for (int j = 0; j < n; ++j) REQUIRE(m.test(i, j) == brute_ancestor_or_self(t, j, i));
      // bits past n in the last word are zero
      const int w = specdec::words_per_row(n);
      if (n % 64 != 0) REQUIRE((m.row(i)[w - 1] >> (n % 64)) == 0u);
    }
    for (int i = 0; i < n; i += step) {
      const auto p = t.path(i);
      REQUIRE(static_cast<int>(p.size()) == t.depth(i) + 1);
      REQUIRE(p.back() == i);
      REQUIRE(t.parent(p.front()) == -1);
      float s = 0.0f;
      for (std::size_t k = 0; k < p.size(); ++k) {
        if (k > 0) REQUIRE(t.parent(p[k]) == p[k - 1]);
        s += t.logprob(p[k]);
      }
      REQUIRE(t.score(i) == Approx(s).margin(1e-4));
    }
    // leaves = nodes that are nobody's parent; children lists partition the nodes
    std::set<int> parents_set(t.parents().begin(), t.parents().end());
    std::vector<std::int32_t> want_leaves;
    for (int i = 0; i < n; ++i)
      if (!parents_set.count(i)) want_leaves.push_back(i);
    REQUIRE(t.leaves() == want_leaves);
    if (n <= 200) {
      std::size_t total = t.children(-1).size();
      for (int i = 0; i < n; ++i) total += t.children(i).size();
      REQUIRE(total == static_cast<std::size_t>(n));
    }
    // rebuild from the SoA arrays
    const std::vector<std::int32_t> tok(t.tokens().begin(), t.tokens().end());
    const std::vector<std::int32_t> par(t.parents().begin(), t.parents().end());
    const std::vector<std::int32_t> dep(t.depths().begin(), t.depths().end());
    const std::vector<float> lp(t.logprobs().begin(), t.logprobs().end());
    REQUIRE(token_tree::from_arrays(tok, par, dep, lp) == t);
  }
}

TEST_CASE("token_tree_batch: ragged flattening, positions and back-to-back masks", "[tree]") {
  std::vector<token_tree> trees{random_tree(5, 1), token_tree{}, random_tree(70, 2), random_tree(1024, 3)};
  const std::vector<std::int32_t> committed{10, 1, 300, 7};
  const token_tree_batch b(trees, committed);
  REQUIRE(b.num_requests() == 4);
  REQUIRE(b.total_nodes() == 5 + 0 + 70 + 1024);
  const auto v = b.view();
  REQUIRE(v.num_requests == 4);
  CHECK(std::vector<std::int32_t>(v.node_indptr, v.node_indptr + 5) == std::vector<std::int32_t>{0, 5, 5, 75, 1099});
  std::int64_t off = 0;
  for (int r = 0; r < 4; ++r) {
    const auto& t = trees[static_cast<std::size_t>(r)];
    const int n = t.size();
    REQUIRE(v.mask_indptr[r] == off);
    off += static_cast<std::int64_t>(n) * specdec::words_per_row(n);
    REQUIRE(v.num_nodes(r) == n);
    const auto m = t.ancestor_mask();
    const auto rm = v.request_mask(r);
    REQUIRE(rm.rows == n);
    REQUIRE(rm.row_stride == specdec::words_per_row(n));
    for (int i = 0; i < n; ++i) {
      const int g = v.node_indptr[r] + i;
      REQUIRE(v.tokens[g] == t.token(i));
      REQUIRE(v.parents[g] == t.parent(i));
      REQUIRE(v.depths[g] == t.depth(i));
      REQUIRE(v.positions[g] == committed[static_cast<std::size_t>(r)] + t.depth(i));
      for (int w = 0; w < specdec::words_per_row(n); ++w) REQUIRE(rm.row(i)[w] == m.row(i)[w]);
    }
  }
  REQUIRE(v.total_mask_words == off);
  REQUIRE_NOTHROW(specdec::validate_tree_batch("test", v));
}

TEST_CASE("token_tree_batch: validation of constructor arguments and hand-assembled views", "[tree][validation]") {
  using Catch::Contains;
  std::vector<token_tree> trees{random_tree(3, 1)};
  REQUIRE_THROWS_WITH(token_tree_batch(trees, std::vector<std::int32_t>{}), Contains("committed_lengths.size()"));
  REQUIRE_THROWS_WITH(token_tree_batch(trees, std::vector<std::int32_t>{0}), Contains("committed_lengths[0]"));
  token_tree_batch b;
  REQUIRE_THROWS_WITH(b.push_back(trees[0], -3), Contains("committed_length"));
  REQUIRE_THROWS_WITH(b.num_nodes(0), Contains("'r'"));

  // Corrupt copies of a valid batch's arrays.
  const std::vector<token_tree> two{random_tree(4, 5), random_tree(66, 6)};
  const token_tree_batch good(two, std::vector<std::int32_t>{3, 4});
  auto v = good.view();
  std::vector<std::int32_t> par(good.parents().begin(), good.parents().end());
  std::vector<std::int32_t> dep(good.depths().begin(), good.depths().end());
  std::vector<std::int64_t> mip(good.mask_indptr().begin(), good.mask_indptr().end());
  std::vector<specdec::mask_word> mask(good.mask().begin(), good.mask().end());
  {
    auto p2 = par;
    p2[4 + 10] = 10;  // request 1, node 10 points at itself
    v.parents = p2.data();
    REQUIRE_THROWS_WITH(specdec::validate_tree_batch("my_fn", v), Contains("my_fn") && Contains("parents[10]"));
    v.parents = par.data();
  }
  {
    auto d2 = dep;
    d2[2] += 1;
    v.depths = d2.data();
    REQUIRE_THROWS_WITH(specdec::validate_tree_batch("my_fn", v), Contains("depths[2]"));
    v.depths = dep.data();
  }
  {
    auto m2 = mip;
    m2[1] += 1;
    v.mask_indptr = m2.data();
    REQUIRE_THROWS_WITH(specdec::validate_tree_batch("my_fn", v), Contains("mask_indptr[1]"));
    v.mask_indptr = mip.data();
  }
  {
    auto k2 = mask;
    k2.back() ^= 1u;
    v.mask = k2.data();
    REQUIRE_THROWS_WITH(specdec::validate_tree_batch("my_fn", v), Contains("mask (request 1)"));
    REQUIRE_NOTHROW(specdec::validate_tree_batch("my_fn", v, /*check_masks=*/false));
    v.mask = mask.data();
  }
  REQUIRE_NOTHROW(specdec::validate_tree_batch("my_fn", v));
}

TEST_CASE("bit_matrix: negative sizes are rejected before any storage is sized; words_per_row never overflows",
          "[tree][core][bitmask][validation]") {
  using Catch::Contains;
  // The storage used to be sized first: (size_t)-1 words threw std::length_error.
  REQUIRE_THROWS_WITH(specdec::bit_matrix(-1, 5), Contains("specdec::bit_matrix") && Contains("'rows'") && Contains("got -1"));
  REQUIRE_THROWS_WITH(specdec::bit_matrix(5, -1), Contains("'cols'"));
  REQUIRE_THROWS_AS(specdec::bit_matrix(std::numeric_limits<int>::min(), 1), specdec::invalid_argument);
  const specdec::bit_matrix empty(0, std::numeric_limits<int>::max());  // 0 rows: nothing to allocate
  CHECK(empty.row_stride() == (1 << 25));
  // (cols + 63) / 64 overflowed int for cols > INT_MAX - 63.
  volatile int big = std::numeric_limits<int>::max();
  CHECK(specdec::words_per_row(big) == (1 << 25));
  CHECK(specdec::words_per_row(0) == 0);
  CHECK(specdec::words_per_row(1) == 1);
  CHECK(specdec::words_per_row(64) == 1);
  CHECK(specdec::words_per_row(65) == 2);
}

TEST_CASE("token_tree: positions near INT32_MAX are rejected instead of overflowing", "[tree][validation]") {
  using Catch::Contains;
  constexpr std::int32_t imax = std::numeric_limits<std::int32_t>::max();
  token_tree t;  // depths 0, 1, 2
  t.add(1, -1), t.add(2, 0), t.add(3, 1);
  CHECK(t.positions(imax - 2) == std::vector<std::int32_t>{imax - 2, imax - 1, imax});
  REQUIRE_THROWS_WITH(t.positions(imax - 1), Contains("token_tree::positions") && Contains("committed_length") &&
                                                 Contains("INT32_MAX - max_depth() = 2147483645"));
  REQUIRE_THROWS_WITH(t.positions(imax), Contains("committed_length"));
  CHECK(token_tree{}.positions(imax).empty());  // no node, no position

  token_tree_batch b;
  REQUIRE_THROWS_WITH(b.push_back(t, imax - 1), Contains("token_tree_batch::push_back") && Contains("committed_length"));
  CHECK(b.num_requests() == 0);  // nothing half-appended
  CHECK(b.total_nodes() == 0);
  b.push_back(t, imax - 2);
  CHECK(b.positions().back() == imax);
  const std::vector<token_tree> trees{t, t};
  REQUIRE_THROWS_WITH(token_tree_batch(trees, std::vector<std::int32_t>{5, imax}), Contains("committed_lengths[1]"));
}

TEST_CASE("token_tree: NaN and +inf log-probs are rejected naming the node; -inf means impossible", "[tree][validation]") {
  using Catch::Contains;
  constexpr float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  token_tree t;
  t.add(1, -1, -0.5f);
  REQUIRE_THROWS_WITH(t.add(2, 0, nan), Contains("token_tree::add") && Contains("logprob (node 1)") && Contains("nan"));
  REQUIRE_THROWS_WITH(t.add(2, 0, inf), Contains("logprob (node 1)") && Contains("inf"));
  CHECK(t.size() == 1);  // a rejected node is not stored
  // -inf is a legal score ("impossible"), and stays -inf down the path.
  CHECK(t.add(2, 0, -inf) == 1);
  CHECK(t.add(3, 1, -1.0f) == 2);
  CHECK(t.score(2) == -inf);
  // Finite log-probs whose sum overflows to +inf would make a later -inf child NaN: rejected too.
  token_tree big;
  big.add(1, -1, 3e38f);
  REQUIRE_THROWS_WITH(big.add(2, 0, 3e38f), Contains("logprob (node 1)") && Contains("score"));
  // Bulk construction names the array element.
  const std::vector<std::int32_t> tok{1, 2, 3}, par{-1, 0, 1};
  REQUIRE_THROWS_WITH(token_tree::from_parents(tok, par, std::vector<float>{-1.0f, nan, -1.0f}),
                      Contains("from_parents") && Contains("logprobs[1]"));
  REQUIRE_THROWS_WITH(token_tree::from_arrays(tok, par, std::vector<std::int32_t>{0, 1, 2}, std::vector<float>{0, 0, inf}),
                      Contains("from_arrays") && Contains("logprobs[2]"));
}

TEST_CASE("validate_tree_batch: indptr differences are computed without overflow", "[tree][validation]") {
  using Catch::Contains;
  const std::vector<token_tree> one{random_tree(3, 9)};
  const token_tree_batch good(one, std::vector<std::int32_t>{4});
  auto v = good.view();
  // node_indptr[1] - node_indptr[0] is fine; a request whose end lies below its start by more than
  // INT_MAX used to overflow int before the "non-decreasing" check.
  std::vector<std::int32_t> indptr{0, 3, std::numeric_limits<std::int32_t>::min()};
  std::vector<std::int64_t> mip{good.mask_indptr()[0], good.mask_indptr()[1], good.mask_indptr()[1]};
  v.num_requests = 2;
  v.node_indptr = indptr.data();
  v.mask_indptr = mip.data();
  REQUIRE_THROWS_WITH(specdec::validate_tree_batch("my_fn", v),
                      Contains("my_fn") && Contains("non-decreasing node_indptr") && Contains("node_indptr[1] = 3"));
}
