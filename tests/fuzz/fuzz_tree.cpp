// Fuzz targets for the token-tree layer (include/specdec/tree/): token_tree from parent arrays (with
// its batch form and node-budget pruning), build_tree_batch's array form, the trie merger and the
// Cartesian / sparse trees. Each result is checked against the definitions in the headers:
// topological order, depths, paths, ancestor mask, ancestor-closed pruning, one node per distinct
// (parent, token) in a trie; build_tree_batch against token_tree_batch.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "../tree/tree_batch_util.hpp"  // tree_batch_case, expected_rooted
#include "fuzz_util.hpp"
#include "specdec/tree/cartesian_tree.hpp"
#include "specdec/tree/prune.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/tree_batch.hpp"
#include "specdec/tree/trie_merge.hpp"

namespace {
using specdec::token_tree;
using specdec_fuzz::input;

//! Everything a token_tree promises about itself, checked naively (O(n^2) for n <= ~300 nodes).
void check_tree(const token_tree& t, const std::string& who) {
  const int n = t.size();
  const auto mask = t.ancestor_mask();
  std::vector<char> has_child(static_cast<std::size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    const int p = t.parent(i);
    FUZZ_CHECK(p >= -1 && p < i, who + ": parent not in [-1, i)");
    FUZZ_CHECK(t.depth(i) == (p < 0 ? 0 : t.depth(p) + 1), who + ": depth != depth(parent) + 1");
    if (p >= 0) has_child[static_cast<std::size_t>(p)] = 1;
    if (n > 128 && i % (n / 64) != 0) continue;  // O(n^2) below: a sample of rows for big trees
    const auto path = t.path(i);
    FUZZ_CHECK(static_cast<int>(path.size()) == t.depth(i) + 1 && path.back() == i && t.parent(path.front()) == -1,
          who + ": path(i) is not root child .. i");
    for (std::size_t k = 1; k < path.size(); ++k) FUZZ_CHECK(t.parent(path[k]) == path[k - 1], who + ": path breaks");
    for (int j = 0; j < n; ++j) {
      const bool anc = std::find(path.begin(), path.end(), j) != path.end();
      FUZZ_CHECK(mask.test(i, j) == anc, who + ": ancestor_mask row " + std::to_string(i) + " bit " + std::to_string(j));
      FUZZ_CHECK(t.is_ancestor_or_self(j, i) == anc, who + ": is_ancestor_or_self");
    }
    const auto fc = t.find_child(p, t.token(i));
    FUZZ_CHECK(fc >= 0 && fc <= i && t.parent(fc) == p && t.token(fc) == t.token(i), who + ": find_child");
  }
  std::vector<std::int32_t> leaves;
  for (int i = 0; i < n; ++i)
    if (!has_child[static_cast<std::size_t>(i)]) leaves.push_back(i);
  FUZZ_CHECK(t.leaves() == leaves, who + ": leaves()");
}
}  // namespace

SPECDEC_FUZZ_TARGET(token_tree, "token_tree::from_parents/from_arrays, masks, positions, batch, keep_best_nodes") {
  input in(data, size);
  const int n = in.range(0, in.chance(5) ? 300 : 40);
  std::vector<std::int32_t> tokens = in.many(static_cast<std::size_t>(n), [&] { return in.int32(0, 50); });
  std::vector<std::int32_t> parents = in.parents(n, /*allow_invalid=*/true);
  if (in.chance(5) && n > 0) parents.pop_back();  // size mismatch
  std::vector<float> logprobs;
  if (in.coin()) logprobs = in.many(tokens.size() + (in.chance(5) ? 1 : 0), [&] { return in.logprob(); });
  token_tree t;
  if (in.coin()) {
    t = token_tree::from_parents(tokens, parents, logprobs);
  } else {
    std::vector<std::int32_t> depths(parents.size());
    for (std::size_t i = 0; i < parents.size(); ++i) {
      const auto p = parents[i];
      depths[i] = p >= 0 && static_cast<std::size_t>(p) < i ? depths[static_cast<std::size_t>(p)] + 1 : 0;
    }
    if (in.chance(10) && !depths.empty()) depths[static_cast<std::size_t>(in.range(0, static_cast<int>(depths.size()) - 1))] += in.coin() ? 1 : -1;
    t = token_tree::from_arrays(tokens, parents, depths, logprobs);
  }
  FUZZ_CHECK(t.size() == n && std::equal(tokens.begin(), tokens.end(), t.tokens().begin()) &&
            std::equal(parents.begin(), parents.end(), t.parents().begin()),
        "from_parents did not keep the arrays");
  check_tree(t, "token_tree");

  const std::int32_t committed = in.int32(1, 1000);
  // committed_length + depth must fit int32, or positions / push_back throw invalid_argument
  const auto pos = t.positions(committed);
  for (int i = 0; i < n; ++i)
    FUZZ_CHECK(std::int64_t{pos[static_cast<std::size_t>(i)]} == std::int64_t{committed} + t.depth(i), "positions()");

  specdec::token_tree_batch batch;
  batch.push_back(t, committed);
  batch.push_back(t, 1);
  specdec::validate_tree_batch("fuzz", batch.view());
  FUZZ_CHECK(batch.total_nodes() == 2 * n && batch.committed_length(0) == committed, "token_tree_batch sizes");

  const int budget = in.int32(0, n + 2);
  const auto sc = t.scores();
  const bool nan_score = std::any_of(sc.begin(), sc.end(), [](float x) { return std::isnan(x); });
  std::vector<std::int32_t> kept;
  const token_tree k = specdec::keep_best_nodes(t, budget, &kept);
  FUZZ_CHECK(k.size() == std::min(budget, n) && kept.size() == static_cast<std::size_t>(k.size()),
        "keep_best_nodes kept " + std::to_string(k.size()) + " of " + std::to_string(n) + " nodes, budget " +
            std::to_string(budget));
  for (int i = 0; i < k.size(); ++i) {
    const auto old = kept[static_cast<std::size_t>(i)];
    FUZZ_CHECK(i == 0 || old > kept[static_cast<std::size_t>(i) - 1], "keep_best_nodes: kept order");
    FUZZ_CHECK(k.token(i) == t.token(old), "keep_best_nodes: token");
    const auto p = k.parent(i);
    FUZZ_CHECK(p < 0 ? t.parent(old) == -1 : kept[static_cast<std::size_t>(p)] == t.parent(old),
          "keep_best_nodes: not ancestor-closed / parent remapped wrongly");
  }
  check_tree(k, "keep_best_nodes");
  // Policy 3 (notes: token-producing selections reject NaN scores): which nodes survive is a choice
  // by score, and NaN has no place in (score desc, index asc).
  FUZZ_CHECK(!nan_score || budget >= n || budget == 0, "keep_best_nodes chose nodes by NaN scores without rejecting them");
  // With every log-prob <= 0 scores fall along paths, so the result is exactly the global top by
  // (score desc, index asc) (prune.hpp).
  const auto lps = t.logprobs();
  if (std::all_of(lps.begin(), lps.end(), [](float x) { return x <= 0.0f; }) && budget < n) {
    std::vector<std::int32_t> order(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
    std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
      return sc[static_cast<std::size_t>(a)] != sc[static_cast<std::size_t>(b)] ? sc[static_cast<std::size_t>(a)] > sc[static_cast<std::size_t>(b)] : a < b;
    });
    order.resize(static_cast<std::size_t>(budget));
    std::sort(order.begin(), order.end());
    FUZZ_CHECK(order == kept, "keep_best_nodes is not the top " + std::to_string(budget) + " by score: kept " +
                             specdec_fuzz::list(kept) + ", expected " + specdec_fuzz::list(order));
  }
}

SPECDEC_FUZZ_TARGET(trie_merge, "trie_merger add_sequence/add_tree/find/clear under a node budget; trie_merge") {
  input in(data, size);
  const int budget = in.int32(0, 40);
  specdec::trie_merger m(budget);
  std::set<std::vector<std::int32_t>> paths;  // every candidate prefix added so far (no budget: all present)
  const int ops = in.range(1, 12);
  for (int op = 0; op < ops; ++op) {
    const int kind = in.range(0, 5);
    if (kind <= 2) {
      const auto seq = in.many(static_cast<std::size_t>(in.range(0, 12)), [&] { return in.int32(0, 4); });
      std::vector<float> lp;
      if (in.coin()) lp = in.many(seq.size() + (in.chance(5) ? 1 : 0), [&] { return in.logprob(); });
      const int before = m.tree().size();
      const int added = m.add_sequence(seq, lp, in.int32(0, 3));
      FUZZ_CHECK(added == m.tree().size() - before, "add_sequence's count != new nodes");
      for (std::size_t len = 1; len <= seq.size(); ++len) paths.emplace(seq.begin(), seq.begin() + static_cast<std::ptrdiff_t>(len));
      if (budget == 0) {
        const auto v = m.find(seq);
        FUZZ_CHECK(seq.empty() ? v == -1 : v >= 0 && m.tree().path_tokens(v) == seq, "find(added sequence)");
      }
    } else if (kind == 3) {
      const token_tree t = in.tree(12, 4);
      const int before = m.tree().size();
      const int added = m.add_tree(t, 2);
      FUZZ_CHECK(added == m.tree().size() - before, "add_tree's count != new nodes");
      for (int i = 0; i < t.size(); ++i) paths.insert(t.path_tokens(i));
    } else if (kind == 4) {
      const auto q = in.many(static_cast<std::size_t>(in.range(0, 6)), [&] { return in.int32(0, 4); });
      const auto v = m.find(q);
      if (v >= 0) FUZZ_CHECK(m.tree().path_tokens(v) == q, "find() returned a node with another path");
      else if (budget == 0 && !q.empty()) FUZZ_CHECK(!paths.count(q), "find() misses an added path");
    } else {
      m.clear();
      paths.clear();
      FUZZ_CHECK(m.tree().empty() && m.sources().empty(), "clear()");
    }
    const token_tree& t = m.tree();
    FUZZ_CHECK(budget == 0 || t.size() <= budget, "trie over budget");
    FUZZ_CHECK(m.sources().size() == static_cast<std::size_t>(t.size()), "sources().size() != nodes");
    std::set<std::pair<std::int32_t, std::int32_t>> sib;
    for (int i = 0; i < t.size(); ++i) {
      FUZZ_CHECK(sib.emplace(t.parent(i), t.token(i)).second, "two siblings carry the same token");
      FUZZ_CHECK(paths.count(t.path_tokens(i)) == 1, "a trie node whose path no candidate had");
      FUZZ_CHECK(m.find(t.path_tokens(i)) == i, "find(path of node i) != i");
    }
  }
  check_tree(m.tree(), "trie_merger");
}

SPECDEC_FUZZ_TARGET(cartesian_tree, "heads_topk, cartesian_tree and sparse_tree from per-head candidates") {
  input in(data, size);
  const int heads_n = in.range(0, 5);
  std::vector<specdec::head_candidates> heads(static_cast<std::size_t>(heads_n));
  if (in.coin()) {
    const int vocab = in.int32(1, 12);
    const auto widths = in.many(static_cast<std::size_t>(heads_n), [&] { return in.int32(1, 4); });
    const std::size_t cells = static_cast<std::size_t>(heads_n) * static_cast<std::size_t>(std::clamp(vocab, 0, 64));
    const auto lp = in.many(cells + (in.chance(5) ? 1 : 0), [&] { return in.logprob(); });
    heads = specdec::heads_topk(lp, vocab, widths);
    FUZZ_CHECK(!specdec_fuzz::any_nan_or_posinf(lp), "heads_topk ranked NaN or +inf scores without rejecting them");
    for (std::size_t k = 0; k < heads.size(); ++k) {
      FUZZ_CHECK(heads[k].tokens.size() == static_cast<std::size_t>(widths[k]), "heads_topk: width");
      for (std::size_t r = 0; r < heads[k].tokens.size(); ++r) {
        const auto tok = heads[k].tokens[r];
        FUZZ_CHECK(tok >= 0 && tok < vocab, "heads_topk: token outside the vocabulary");
        // ranked best first: no unselected token beats a selected one (NaN is never "better")
        for (int v = 0; v < vocab; ++v) {
          const bool chosen = std::find(heads[k].tokens.begin(), heads[k].tokens.end(), v) != heads[k].tokens.end();
          if (!chosen) FUZZ_CHECK(!(lp[k * static_cast<std::size_t>(vocab) + static_cast<std::size_t>(v)] > heads[k].logprobs[r]), "heads_topk: a better token was left out");
        }
      }
    }
  } else {
    for (auto& h : heads) {
      h.tokens = in.many(static_cast<std::size_t>(in.range(0, 4)), [&] { return in.int32(0, 9); });
      if (in.coin()) h.logprobs = in.many(h.tokens.size() + (in.chance(5) ? 1 : 0), [&] { return in.logprob(); });
    }
  }
  if (in.coin()) {
    const int max_nodes = in.int32(0, 200);
    const token_tree t = specdec::cartesian_tree(heads, max_nodes);
    long long want = 0, level = 1;
    for (const auto& h : heads) want += level *= static_cast<long long>(h.tokens.size());
    FUZZ_CHECK(t.size() == want && t.size() <= std::max(max_nodes, 0),
          "cartesian_tree: " + std::to_string(t.size()) + " nodes, expected " + std::to_string(want) +
              " (max_nodes " + std::to_string(max_nodes) + ")");
    for (int i = 0; i < t.size(); ++i) {
      const auto& h = heads[static_cast<std::size_t>(t.depth(i))];
      const auto it = std::find(h.tokens.begin(), h.tokens.end(), t.token(i));
      FUZZ_CHECK(it != h.tokens.end(), "cartesian_tree: a token its depth's head did not propose");
      FUZZ_CHECK(i == 0 || t.depth(i) >= t.depth(i - 1), "cartesian_tree: not breadth first");
    }
    check_tree(t, "cartesian_tree");
  } else {
    std::vector<std::vector<int>> choices(static_cast<std::size_t>(in.range(0, 8)));
    for (auto& c : choices) c = in.many(static_cast<std::size_t>(in.range(0, 5)), [&] { return in.int32(0, 3); });
    const token_tree t = specdec::sparse_tree(heads, choices);
    std::set<std::vector<int>> prefixes;
    for (const auto& c : choices)
      for (std::size_t len = 1; len <= c.size(); ++len) prefixes.emplace(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(len));
    FUZZ_CHECK(static_cast<std::size_t>(t.size()) == prefixes.size(), "sparse_tree: node count != distinct prefixes");
    std::set<std::vector<std::int32_t>> seen;
    for (const auto& pre : prefixes) {
      std::vector<std::int32_t> toks;
      for (std::size_t d = 0; d < pre.size(); ++d) toks.push_back(heads[d].tokens[static_cast<std::size_t>(pre[d])]);
      seen.insert(toks);
    }
    for (int i = 0; i < t.size(); ++i) FUZZ_CHECK(seen.count(t.path_tokens(i)) == 1, "sparse_tree: a path no choice lists");
    check_tree(t, "sparse_tree");
  }
}

SPECDEC_FUZZ_TARGET(tree_batch, "build_tree_batch (host) on raw offsets, parents and committed lengths, both row layouts") {
  // Possibly invalid arrays (offsets, parents, committed lengths down to -2 and up to INT32_MAX, masks
  // too small): a bad call throws and leaves every output as it was; a good one equals token_tree_batch
  // on the same trees (tree_batch_rows::nodes) or on the trees with their root made node 0
  // (root_and_nodes: depths and positions one less, the same masks).
  input in(data, size);
  const bool rooted = in.coin();
  const int extra = rooted ? 1 : 0;
  const int R = in.range(0, 4);
  specdec_test::tree_batch_case c;
  for (int r = 0; r < R; ++r) {
    const int n = in.chance(15) ? in.range(60, 140) : in.range(0, 8);  // across the 64-column mask word
    const auto par = in.parents(n, /*allow_invalid=*/true);
    c.add(par, in.chance(10) ? in.int32(-2, std::numeric_limits<std::int32_t>::max())
                              : static_cast<std::int32_t>(in.range(1, 5000)));
  }
  if (R > 0 && in.chance(10))  // a corrupt offset
    c.node_indptr[static_cast<std::size_t>(in.range(0, R))] = in.int32(-2, static_cast<std::int32_t>(c.parents.size()) + 2);
  const auto N = static_cast<std::int64_t>(c.parents.size());
  // validity from the final arrays, and the mask words the call needs
  bool valid = c.node_indptr.front() == 0 && c.node_indptr.back() == N;
  for (int r = 0; valid && r < R; ++r) valid = c.node_indptr[static_cast<std::size_t>(r)] <= c.node_indptr[static_cast<std::size_t>(r) + 1];
  std::int64_t words = 0;
  for (int r = 0; valid && r < R; ++r) {
    const std::int32_t lo = c.node_indptr[static_cast<std::size_t>(r)], n = c.node_indptr[static_cast<std::size_t>(r) + 1] - lo;
    const std::int32_t com = c.committed[static_cast<std::size_t>(r)];
    valid = com >= 1;
    std::vector<std::int32_t> depth(static_cast<std::size_t>(n));
    for (std::int32_t i = 0; valid && i < n; ++i) {
      const std::int32_t p = c.parents[static_cast<std::size_t>(lo + i)];
      valid = p >= -1 && p < i;
      if (!valid) break;
      depth[static_cast<std::size_t>(i)] = p < 0 ? 0 : depth[static_cast<std::size_t>(p)] + 1;
      valid = com <= std::numeric_limits<std::int32_t>::max() - depth[static_cast<std::size_t>(i)];
    }
    words += static_cast<std::int64_t>(n + extra) * specdec::words_per_row(n + extra);
  }
  const std::int64_t capacity = std::max<std::int64_t>(0, words - (in.chance(10) ? in.range(1, 3) : 0));
  valid = valid && capacity >= words;
  const auto rows = static_cast<std::size_t>(N + (rooted ? R : 0));
  std::vector<std::int32_t> depths(rows, -5), positions(rows, -5), status{7, 7, 7};
  std::vector<std::int64_t> mask_indptr(static_cast<std::size_t>(R) + 1, -5);
  std::vector<specdec::mask_word> mask(static_cast<std::size_t>(capacity), 0xABABABABABABABABull);
  const auto before = std::tuple{depths, positions, status, mask_indptr, mask};
  const auto v = [](auto& x) { return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())}); };
  bool threw = false;
  try {
    specdec::build_tree_batch(specdec::host{}, v(c.node_indptr), v(c.parents), v(c.committed), v(depths), v(positions),
                              v(mask_indptr), v(mask), v(status),
                              rooted ? specdec::tree_batch_rows::root_and_nodes : specdec::tree_batch_rows::nodes);
  } catch (const specdec::invalid_argument&) {
    threw = true;
  }
  FUZZ_CHECK(threw == !valid, valid ? "build_tree_batch refused a valid batch" : "build_tree_batch accepted an invalid batch");
  if (threw) {
    FUZZ_CHECK((std::tuple{depths, positions, status, mask_indptr, mask}) == before, "a refused build_tree_batch wrote an output");
    return;
  }
  c.finish();
  FUZZ_CHECK(status == (std::vector<std::int32_t>{0, -1, -1}), "status is not {0, -1, -1} after success");
  if (rooted) {
    const auto want = specdec_test::expected_rooted(c);
    FUZZ_CHECK(depths == want.depths && positions == want.positions && mask_indptr == want.mask_indptr &&
                   std::equal(want.mask.begin(), want.mask.end(), mask.begin()),
               "root_and_nodes differs from token_tree_batch over the rooted trees");
  } else {
    FUZZ_CHECK(depths == c.depths && positions == c.positions && mask_indptr == c.mask_indptr &&
                   std::equal(c.mask.begin(), c.mask.end(), mask.begin()),
               "build_tree_batch differs from token_tree_batch");
  }
}
