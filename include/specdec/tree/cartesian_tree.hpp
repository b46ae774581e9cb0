#pragma once
//! \file cartesian_tree.hpp
//! Trees from per-head candidates of a multi-token (Medusa / TokenSwift) drafter.
//!
//! TokenSwift (Appendix E): head k proposes its top-s_k tokens for depth k; the tree is the Cartesian
//! product of the heads' predictions, C = prod_k s_k branches, and each token attends only to its
//! predecessors (= token_tree::ancestor_mask()). TokenSwift uses s = [1, 3, 3, 3] (§4.4.1, Table 7;
//! Appendix B.2's "ternary full tree" under the target model's own top-1): 1 + 3 + 9 + 27 = 40 nodes,
//! 27 branches. Medusa-style sparse trees keep only the listed paths ("choices"), each path a list of
//! per-depth candidate ranks.
//!
//! Node order: breadth first (by depth), and within a depth lexicographic by rank path, so node
//! indices are topological and a node's children appear in rank order. A node's log-prob is its
//! head's log-prob for that token, so score() is the sum over the branch (heads treated as
//! independent, as the heads are).

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/topk.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! One head's candidates for its depth, best first: tokens[r] with log-prob logprobs[r] (rank r).
struct head_candidates {
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs;  //!< empty = all 0
};

//! TokenSwift's default widths s_k (Appendix E, §4.4.1).
inline std::vector<int> tokenswift_tree_widths() { return {1, 3, 3, 3}; }

//! Selects each head's top-s_k tokens from `logprobs` (K rows of `vocab_size` values, row-major; the
//! values are ranked as given, so logits work too and are stored as the node log-probs). widths
//! size K, each in [1, vocab_size]; values finite or -inf (NaN / +inf throw naming the row: top-k
//! would rank a NaN last and still hand it to a node when s_k exceeds the numbers). O(K V).
inline std::vector<head_candidates> heads_topk(std::span<const float> logprobs, int vocab_size,
                                               std::span<const int> widths) {
  constexpr std::string_view fn = "specdec::heads_topk";
  require(vocab_size >= 1, fn, "vocab_size", ">= 1", vocab_size);
  require_equal(fn, "logprobs.size()", widths.size() * static_cast<std::size_t>(vocab_size), logprobs.size());
  for (std::size_t k = 0; k < widths.size(); ++k)
    require_in_range(fn, "widths[" + std::to_string(k) + "]", widths[k], 1, vocab_size);
  for (std::size_t k = 0; k < widths.size(); ++k) {
    const auto row = logprobs.subspan(k * static_cast<std::size_t>(vocab_size), static_cast<std::size_t>(vocab_size));
    for (std::size_t v = 0; v < row.size(); ++v)
      if (!(row[v] < std::numeric_limits<float>::infinity())) [[unlikely]]
        throw_invalid_argument(fn, "logprobs (row " + std::to_string(k) + ")", "finite or -inf values (no NaN, no +inf)",
                               "token " + std::to_string(v) + " = " + std::to_string(row[v]));
  }
  std::vector<head_candidates> heads(widths.size());
  topk_workspace<float> ws;
  for (std::size_t k = 0; k < widths.size(); ++k) {
    auto& h = heads[k];
    h.tokens.resize(static_cast<std::size_t>(widths[k]));
    h.logprobs.resize(static_cast<std::size_t>(widths[k]));
    topk<float>(logprobs.subspan(k * static_cast<std::size_t>(vocab_size), static_cast<std::size_t>(vocab_size)),
                widths[k], h.tokens, h.logprobs, ws);
  }
  return heads;
}

namespace detail {
inline void validate_heads(std::string_view fn, std::span<const head_candidates> heads) {
  for (std::size_t k = 0; k < heads.size(); ++k) {
    const auto& h = heads[k];
    const std::string ks = std::to_string(k);
    require(!h.tokens.empty(), fn, "heads[" + ks + "].tokens", "non-empty", "empty");
    if (!h.logprobs.empty()) require_equal(fn, "heads[" + ks + "].logprobs.size()", h.tokens.size(), h.logprobs.size());
    for (std::size_t r = 0; r < h.tokens.size(); ++r)
      require(h.tokens[r] >= 0, fn, "heads[" + ks + "].tokens[" + std::to_string(r) + "]", "a token id >= 0", h.tokens[r]);
    for (std::size_t r = 0; r < h.logprobs.size(); ++r)  // token_tree's score rule, named here
      if (!(h.logprobs[r] < std::numeric_limits<float>::infinity())) [[unlikely]]
        throw_invalid_argument(fn, "heads[" + ks + "].logprobs[" + std::to_string(r) + "]",
                               "a log-probability that is not NaN or +inf (-inf = impossible)", h.logprobs[r]);
    std::vector<std::int32_t> s(h.tokens);
    std::sort(s.begin(), s.end());
    const auto dup = std::adjacent_find(s.begin(), s.end());
    // Duplicates would create identical sibling branches.
    require(dup == s.end(), fn, "heads[" + ks + "].tokens", "distinct tokens", dup == s.end() ? 0 : *dup);
  }
}
inline float head_lp(const head_candidates& h, std::size_t r) { return h.logprobs.empty() ? 0.0f : h.logprobs[r]; }
//! t.add(token, parent, logprob of heads[d] rank r), naming `fn`'s heads[d].logprobs[r] when the
//! cumulative score overflows to +inf (validate_heads checks each log-prob, not their sums).
inline std::int32_t add_head_node(token_tree& t, std::string_view fn, std::span<const head_candidates> heads,
                                  std::size_t d, std::size_t r, std::int32_t parent) {
  return t.add(heads[d].tokens[r], parent, head_lp(heads[d], r), fn, [d, r] {
    std::string arg("heads[");
    arg += std::to_string(d), arg += "].logprobs[", arg += std::to_string(r), arg += "]";
    return arg;
  });
}
}  // namespace detail

//! The full Cartesian-product tree (TokenSwift Appendix E): depth k holds every combination of the
//! first k+1 heads' candidates. Nodes = sum_k prod_{j<=k} s_j; the product must not exceed
//! `max_nodes` (default max_builder_nodes = 2^20) to catch accidental huge trees. Each head's tokens
//! must be distinct (a repeat would make equal siblings). O(nodes).
inline token_tree cartesian_tree(std::span<const head_candidates> heads, int max_nodes = max_builder_nodes) {
  constexpr std::string_view fn = "specdec::cartesian_tree";
  detail::validate_heads(fn, heads);
  long long total = 0, level = 1;
  for (const auto& h : heads) {
    level *= static_cast<long long>(h.tokens.size());
    total += level;
    require(total <= max_nodes, fn, "heads", "a product tree of at most max_nodes = " + std::to_string(max_nodes) + " nodes",
            total);
  }
  token_tree t;
  t.reserve(static_cast<int>(total));
  std::vector<std::int32_t> prev{-1}, cur;
  for (std::size_t d = 0; d < heads.size(); ++d) {
    cur.clear();
    for (const std::int32_t p : prev)
      for (std::size_t r = 0; r < heads[d].tokens.size(); ++r) cur.push_back(detail::add_head_node(t, fn, heads, d, r, p));
    prev.swap(cur);
  }
  return t;
}

//! Convenience: heads_topk + cartesian_tree (default widths [1, 3, 3, 3]).
inline token_tree cartesian_tree(std::span<const float> logprobs, int vocab_size,
                                 std::span<const int> widths = {}) {
  const auto dflt = tokenswift_tree_widths();
  return cartesian_tree(heads_topk(logprobs, vocab_size, widths.empty() ? std::span<const int>(dflt) : widths));
}

//! A Medusa-style sparse tree: `choices` lists paths of per-depth ranks (path {0, 2} = head 0's best
//! token, then head 1's third). Every prefix of a listed path is included (added if missing);
//! duplicates are merged. Rank d of a path must be < heads[d].tokens.size(). O(P L log P) for P
//! paths of length <= L.
inline token_tree sparse_tree(std::span<const head_candidates> heads, const std::vector<std::vector<int>>& choices) {
  constexpr std::string_view fn = "specdec::sparse_tree";
  detail::validate_heads(fn, heads);
  std::vector<std::vector<int>> all;
  for (std::size_t c = 0; c < choices.size(); ++c) {
    const auto& path = choices[c];
    const std::string cs = "choices[" + std::to_string(c) + "]";
    require(!path.empty(), fn, cs, "a non-empty path", "empty");
    require(path.size() <= heads.size(), fn, cs + ".size()", "<= number of heads = " + std::to_string(heads.size()),
            path.size());
    for (std::size_t d = 0; d < path.size(); ++d) {
      require(path[d] >= 0 && static_cast<std::size_t>(path[d]) < heads[d].tokens.size(), fn,
              cs + "[" + std::to_string(d) + "]",
              "a rank in [0, " + std::to_string(heads[d].tokens.size()) + ") (candidates of head " + std::to_string(d) + ")",
              path[d]);
    }
    for (std::size_t len = 1; len <= path.size(); ++len) all.emplace_back(path.begin(), path.begin() + static_cast<std::ptrdiff_t>(len));
  }
  // Medusa's order: by length, then lexicographically; then drop duplicates.
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.size() != b.size() ? a.size() < b.size() : a < b; });
  all.erase(std::unique(all.begin(), all.end()), all.end());
  token_tree t;
  t.reserve(static_cast<int>(all.size()));
  // Parents are found by binary search among the (sorted) shorter paths.
  for (const auto& path : all) {
    std::int32_t parent = -1;
    if (path.size() > 1) {
      const std::vector<int> pre(path.begin(), path.end() - 1);
      const auto it = std::lower_bound(all.begin(), all.end(), pre, [](const auto& a, const auto& b) {
        return a.size() != b.size() ? a.size() < b.size() : a < b;
      });
      parent = static_cast<std::int32_t>(it - all.begin());
    }
    detail::add_head_node(t, fn, heads, path.size() - 1, static_cast<std::size_t>(path.back()), parent);
  }
  return t;
}

}  // namespace specdec
