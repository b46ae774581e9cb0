#pragma once
//! \file trie_merge.hpp
//! Union of draft candidates as one token tree (a trie over the committed root): the model's tree,
//! n-gram candidates (TokenSwift §3.2 token reutilization; Algorithm 1 line 11 verifies
//! {a^i} U {x^i} together) and prompt-lookup continuations. Shared prefixes become shared nodes, so
//! each distinct (path, token) is verified once.
//!
//! Budget rule (max_nodes > 0): candidates are merged in the order they are added, and each takes
//! as many of its leading tokens as still fit; a prefix already in the trie costs nothing. So
//! EARLIER candidates win (add the model tree first, then n-grams best first, then lookup, or any
//! priority the caller prefers), a candidate that does not fit is truncated rather than dropped, and
//! the result is always ancestor-closed. Within add_tree, nodes are taken in index (topological)
//! order. A node's log-prob comes from the candidate that created it; later duplicates keep it.
//! Each node also records the `source` tag of that candidate (e.g. 0 = model, 1 = n-gram, 2 =
//! lookup), so acceptance can be attributed (TokenSwift's n-gram acceptance rate beta).
//! Cost: O(1) expected per candidate token (open-addressing hash on (parent, token)).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/detail/hash_slots.hpp"
#include "specdec/core/error.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! Incremental trie merge under a node budget (see file comment). Reusable via clear().
class trie_merger {
 public:
  //! max_nodes = 0: no budget.
  explicit trie_merger(int max_nodes = 0) : max_nodes_(max_nodes) {
    require(max_nodes >= 0, "specdec::trie_merger", "max_nodes", ">= 0 (0 = no budget)", max_nodes);
  }

  //! Adds one candidate sequence starting at depth 0 (a child of the root). `logprobs` empty or of
  //! the same length. Returns the number of new nodes. O(tokens.size()) expected.
  int add_sequence(std::span<const std::int32_t> tokens, std::span<const float> logprobs = {}, std::int32_t source = 0) {
    constexpr std::string_view fn = "specdec::trie_merger::add_sequence";
    if (!logprobs.empty()) require_equal(fn, "logprobs.size()", tokens.size(), logprobs.size());
    int added = 0;
    std::int32_t parent = -1;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::int32_t node = child(parent, tokens[i], logprobs.empty() ? 0.0f : logprobs[i], source, added);
      if (node < 0) break;  // budget exhausted: the rest of this candidate is dropped
      parent = node;
    }
    return added;
  }

  //! Adds every node of `tree` (merged by (parent, token)), in index order. Returns new nodes.
  int add_tree(const token_tree& tree, std::int32_t source = 0) {
    int added = 0;
    remap_.assign(static_cast<std::size_t>(tree.size()), -1);
    for (int i = 0; i < tree.size(); ++i) {
      const std::int32_t p = tree.parents()[i];
      const std::int32_t mp = p < 0 ? -1 : remap_[static_cast<std::size_t>(p)];
      if (p >= 0 && mp < 0) continue;  // parent did not fit
      remap_[static_cast<std::size_t>(i)] = child(mp, tree.tokens()[i], tree.logprobs()[i], source, added);
    }
    return added;
  }

  //! The merged tree so far.
  [[nodiscard]] const token_tree& tree() const noexcept { return tree_; }
  //! source tag of each node (the candidate that created it).
  [[nodiscard]] std::span<const std::int32_t> sources() const noexcept { return sources_; }
  [[nodiscard]] bool full() const noexcept { return max_nodes_ > 0 && tree_.size() >= max_nodes_; }
  //! Node reached by `tokens` from the root, or -1 if the path is not in the trie. O(len) expected.
  [[nodiscard]] std::int32_t find(std::span<const std::int32_t> tokens) const {
    std::int32_t v = -1;
    for (auto t : tokens) {
      v = lookup(v, t);
      if (v < 0) return -1;
    }
    return v;
  }

  void clear() {
    tree_.clear();
    sources_.clear();
    index_.clear();
  }

 private:
  static std::uint64_t key(std::int32_t parent, std::int32_t token) {
    std::uint64_t h = (static_cast<std::uint64_t>(static_cast<std::uint32_t>(parent + 1)) << 32) | static_cast<std::uint32_t>(token);
    h *= 0x9E3779B97F4A7C15ull;  // spread both halves into the low bits the table indexes with
    return h ^ (h >> 29);
  }
  std::int32_t lookup(std::int32_t parent, std::int32_t token) const {
    return index_.find(key(parent, token), [&](std::int32_t id) {
      return tree_.parents()[id] == parent && tree_.tokens()[id] == token;
    });
  }
  // Existing child or a new one; -1 when a new one is needed but the budget is exhausted.
  std::int32_t child(std::int32_t parent, std::int32_t token, float logprob, std::int32_t source, int& added) {
    const std::int32_t found = lookup(parent, token);
    if (found >= 0) return found;
    if (full()) return -1;
    const std::int32_t id = tree_.add(token, parent, logprob);
    index_.insert(key(parent, token), id);
    sources_.push_back(source);
    ++added;
    return id;
  }

  int max_nodes_;
  token_tree tree_;
  std::vector<std::int32_t> sources_, remap_;
  detail::hash_slots index_;
};

//! One-shot merge: `base` first (if non-empty), then `sequences` in order, under `max_nodes` (0 =
//! none). See the file comment for the budget rule.
inline token_tree trie_merge(const token_tree& base, std::span<const std::vector<std::int32_t>> sequences,
                             int max_nodes = 0) {
  trie_merger m(max_nodes);
  m.add_tree(base, 0);
  for (const auto& s : sequences) m.add_sequence(s, {}, 1);
  return m.tree();
}

}  // namespace specdec
