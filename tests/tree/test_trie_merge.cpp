#include <catch2/catch.hpp>

#include <set>

#include "specdec/core/philox.hpp"
#include "specdec/tree/cartesian_tree.hpp"
#include "specdec/tree/trie_merge.hpp"

using specdec::token_tree;
using specdec::trie_merger;
using V = std::vector<std::int32_t>;

namespace {
std::set<V> all_paths(const token_tree& t) {
  std::set<V> s;
  for (int i = 0; i < t.size(); ++i) s.insert(t.path_tokens(i));
  return s;
}
}  // namespace

TEST_CASE("trie_merge: shared prefixes are deduplicated, sources recorded", "[tree][trie]") {
  token_tree base;
  base.add(5, -1, -0.1f);  // 0: [5]
  base.add(6, 0, -0.2f);   // 1: [5 6]
  base.add(7, 0, -0.3f);   // 2: [5 7]
  trie_merger m;
  REQUIRE(m.add_tree(base, 0) == 3);
  REQUIRE(m.add_sequence(V{5, 6, 8, 9}, {}, 1) == 2);  // [5 6] shared, 8 and 9 new
  REQUIRE(m.add_sequence(V{5, 7}, {}, 2) == 0);        // already there
  REQUIRE(m.add_sequence(V{4}, std::vector<float>{-2.0f}, 2) == 1);
  const auto& t = m.tree();
  CHECK(V(t.tokens().begin(), t.tokens().end()) == V{5, 6, 7, 8, 9, 4});
  CHECK(V(t.parents().begin(), t.parents().end()) == V{-1, 0, 0, 1, 3, -1});
  CHECK(V(m.sources().begin(), m.sources().end()) == V{0, 0, 0, 1, 1, 2});
  CHECK(t.logprob(1) == -0.2f);  // the model tree's node keeps its log-prob
  CHECK(t.logprob(5) == -2.0f);
  CHECK(m.find(V{5, 6, 8}) == 3);
  CHECK(m.find(V{5, 8}) == -1);
}

TEST_CASE("trie_merge: union equals the set of all prefixes (brute force), with budget truncation", "[tree][trie]") {
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    specdec::philox_stream rng(seed, 5);
    // model tree: [1,3,3,3] product over a 6-token vocabulary
    std::vector<specdec::head_candidates> heads;
    for (int k = 0; k < 4; ++k) {
      specdec::head_candidates h;
      const int w = k == 0 ? 1 : 3;
      for (int r = 0; r < w; ++r) h.tokens.push_back((static_cast<std::int32_t>(rng.below(2)) + r * 2) % 6), h.logprobs.push_back(-1.0f);
      std::sort(h.tokens.begin(), h.tokens.end());
      h.tokens.erase(std::unique(h.tokens.begin(), h.tokens.end()), h.tokens.end());
      h.logprobs.resize(h.tokens.size());
      heads.push_back(h);
    }
    const auto base = specdec::cartesian_tree(heads);
    std::vector<V> seqs;
    for (int i = 0; i < 20; ++i) {
      V s{heads[0].tokens[0]};
      const int len = 1 + static_cast<int>(rng.below(4));
      while (static_cast<int>(s.size()) < len) s.push_back(static_cast<std::int32_t>(rng.below(6)));
      seqs.push_back(s);
    }
    // no budget: node set = all base paths U all prefixes of all sequences
    const auto t = specdec::trie_merge(base, seqs);
    std::set<V> want = all_paths(base);
    for (const auto& s : seqs)
      for (std::size_t l = 1; l <= s.size(); ++l) want.insert(V(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(l)));
    REQUIRE(all_paths(t) == want);
    REQUIRE(static_cast<std::size_t>(t.size()) == want.size());  // no duplicate (parent, token)
    // budget: brute-force first-come allocation of distinct prefixes
    for (int budget : {1, 10, 40, 45, 60}) {
      std::set<V> taken;
      std::vector<V> order;
      for (int i = 0; i < base.size(); ++i) order.push_back(base.path_tokens(i));
      for (const auto& s : seqs)
        for (std::size_t l = 1; l <= s.size(); ++l) order.push_back(V(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(l)));
      for (const auto& p : order) {
        if (taken.count(p)) continue;
        const V parent(p.begin(), p.end() - 1);
        if (!parent.empty() && !taken.count(parent)) continue;  // ancestor was cut
        if (static_cast<int>(taken.size()) >= budget) continue;
        taken.insert(p);
      }
      const auto tb = specdec::trie_merge(base, seqs, budget);
      REQUIRE(tb.size() <= budget);
      REQUIRE(all_paths(tb) == taken);
    }
  }
}

TEST_CASE("trie_merge: validation", "[tree][trie][validation]") {
  using Catch::Contains;
  REQUIRE_THROWS_WITH(trie_merger(-1), Contains("max_nodes"));
  trie_merger m;
  REQUIRE_THROWS_WITH(m.add_sequence(V{1, 2}, std::vector<float>{0.0f}), Contains("logprobs.size()"));
  m.add_sequence(V{1, 2});
  m.clear();
  REQUIRE(m.tree().empty());
  REQUIRE(m.find(V{1}) == -1);
}

TEST_CASE("trie_merge: NaN / +inf log-probs are rejected before anything is merged", "[tree][trie][validation]") {
  using Catch::Contains;
  trie_merger m;
  m.add_sequence(V{1, 2}, std::vector<float>{-1.0f, -1.0f});
  const auto before = m.tree();
  REQUIRE_THROWS_WITH(m.add_sequence(V{1, 3, 4}, std::vector<float>{-1.0f, -0.5f, std::nanf("")}),
                      Contains("trie_merger::add_sequence") && Contains("logprobs[2]"));
  REQUIRE_THROWS_WITH(m.add_sequence(V{5}, std::vector<float>{std::numeric_limits<float>::infinity()}),
                      Contains("logprobs[0]"));
  CHECK(m.tree() == before);  // the rejected sequences left no node behind (3 was not added)
  CHECK(m.sources().size() == 2);
  // A cumulative score that would overflow to +inf is caught before the sequence is merged, too.
  REQUIRE_THROWS_WITH(m.add_sequence(V{6, 7}, std::vector<float>{3e38f, 3e38f}), Contains("logprobs[1]"));
  CHECK(m.tree() == before);
  REQUIRE(m.find(V{6}) == -1);
  // -inf is legal (an impossible candidate still gets a node, scored -inf).
  m.add_sequence(V{9}, std::vector<float>{-std::numeric_limits<float>::infinity()});
  CHECK(m.tree().score(m.find(V{9})) == -std::numeric_limits<float>::infinity());
}

TEST_CASE("trie_merge: a tree with duplicate siblings is merged (subtrees united, first log-prob kept)", "[tree][trie]") {
  // 0:'5' -> 2:'6';  1:'5' -> 3:'7', 4:'6' -> 5:'8'
  const auto t = token_tree::from_parents(V{5, 5, 6, 7, 6, 8}, V{-1, -1, 0, 1, 1, 4},
                                          std::vector<float>{-1.0f, -0.5f, -1.0f, -1.0f, -2.0f, -1.0f});
  trie_merger m;
  REQUIRE(m.add_tree(t) == 4);
  const auto& u = m.tree();
  CHECK(V(u.tokens().begin(), u.tokens().end()) == V{5, 6, 7, 8});
  CHECK(V(u.parents().begin(), u.parents().end()) == V{-1, 0, 0, 1});
  CHECK(all_paths(u) == all_paths(t));
  CHECK(u.logprob(0) == -1.0f);
}

TEST_CASE("trie_merge: add_tree that fails part way merges nothing", "[tree][trie][validation]") {
  trie_merger m;
  m.add_sequence(V{1}, std::vector<float>{3e38f});  // node [1] scores 3e38 (first log-prob wins)
  const auto before = m.tree();
  // Valid on its own (scores 0, -3e38, 0), but merged under the existing [1] the node [1 2] would score
  // 3e38 + 3e38 = +inf; [5] was merged before that and must go again.
  const auto t = token_tree::from_parents(V{5, 1, 2}, V{-1, -1, 1}, std::vector<float>{0.0f, -3e38f, 3e38f});
  REQUIRE_THROWS_WITH(m.add_tree(t, 3), Catch::Contains("trie_merger::add_tree") && Catch::Contains("tree.logprobs()[2]"));
  CHECK(m.tree() == before);
  CHECK(m.sources().size() == 1);
  CHECK(m.find(V{5}) == -1);
  REQUIRE(m.add_sequence(V{5, 6}) == 2);  // the index was rolled back with the nodes
  CHECK(m.find(V{5, 6}) == 2);
}

TEST_CASE("trie_merge: add_sequence over the merger's own arrays reads a copy", "[tree][trie]") {
  // Four root children (tokens 1..4), then their own token array as a sequence: the first new node
  // reallocated the array the span viewed, and the rest was read from freed memory (ASan). Likewise
  // the log-probs and the sources.
  trie_merger m;
  for (std::int32_t t = 1; t <= 4; ++t) m.add_sequence(V{t}, std::vector<float>{-0.5f * static_cast<float>(t)}, t);
  REQUIRE(m.add_sequence(m.tree().tokens(), m.tree().logprobs(), 9) == 3);  // [1] exists; [1 2], [1 2 3], [1 2 3 4] new
  CHECK(m.find(V{1, 2, 3, 4}) == 6);
  CHECK(m.tree().logprob(6) == -2.0f);
  CHECK(m.tree().score(6) == Approx(-5.0f));
  REQUIRE(m.add_sequence(m.sources()) == 3);  // sources 1, 2, 3, 4, 9, 9, 9: [1 2 3 4] exists, then 9, 9, 9 new
  CHECK(m.find(V{1, 2, 3, 4, 9, 9, 9}) == 9);
}
