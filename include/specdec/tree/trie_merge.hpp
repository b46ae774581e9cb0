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
//! order. Each node also records the `source` tag of that candidate (e.g. 0 = model, 1 = n-gram, 2 =
//! lookup), so acceptance can be attributed (TokenSwift's n-gram acceptance rate beta).
//!
//! Merging: nodes are keyed by (parent, token), so the trie never has two siblings with the same
//! token; that includes duplicate siblings inside a tree given to add_tree, which become one node
//! with the union of their subtrees (equal siblings share one context, so verifying both is wasted).
//! A node's log-prob (hence its score) comes from the candidate that created it, and later duplicates
//! keep it: the first candidate is the caller's priority, log-probs of different sources are not
//! comparable (model-free candidates carry 0), and changing a node would re-score its whole subtree.
//! Scores follow token_tree's rule (a number or -inf): a NaN or +inf log-prob, or a new node whose
//! score would overflow to +inf, throws specdec::invalid_argument and the call merges nothing.
//! Cost: O(1) expected per candidate token (open-addressing hash on (parent, token)).

#include <cstdint>
#include <limits>
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
  //! the same length, each a number or -inf (NaN / +inf throw naming logprobs[i], also on a prefix
  //! already in the trie). Returns the number of new nodes. On error nothing is merged.
  //! O(tokens.size()) expected.
  int add_sequence(std::span<const std::int32_t> tokens, std::span<const float> logprobs = {}, std::int32_t source = 0) {
    constexpr std::string_view fn = "specdec::trie_merger::add_sequence";
    if (!logprobs.empty()) require_equal(fn, "logprobs.size()", tokens.size(), logprobs.size());
    for (std::size_t i = 0; i < logprobs.size(); ++i)
      if (!(logprobs[i] < std::numeric_limits<float>::infinity())) [[unlikely]]
        detail::throw_bad_score(fn, "logprobs[" + std::to_string(i) + "]", logprobs[i], logprobs[i]);
    // Read from copies: a span over the merger's own arrays (tree().tokens(), tree().logprobs(),
    // sources()) was read after a new node had reallocated them (a use-after-free under ASan).
    seq_tokens_.assign(tokens.begin(), tokens.end());
    seq_logprobs_.assign(logprobs.begin(), logprobs.end());
    return transaction([&](int& added) {
      std::int32_t parent = -1;
      for (std::size_t i = 0; i < seq_tokens_.size(); ++i) {
        const std::int32_t node = child(parent, seq_tokens_[i], seq_logprobs_.empty() ? 0.0f : seq_logprobs_[i],
                                        source, added, fn, "logprobs", i);
        if (node < 0) break;  // budget exhausted: the rest of this candidate is dropped
        parent = node;
      }
    });
  }

  //! Adds every node of `tree` (merged by (parent, token), duplicate siblings of `tree` included), in
  //! index order. Returns new nodes. On error (a merged score overflowing to +inf) nothing is merged.
  int add_tree(const token_tree& tree, std::int32_t source = 0) {
    return transaction([&](int& added) {
      remap_.assign(static_cast<std::size_t>(tree.size()), -1);
      for (int i = 0; i < tree.size(); ++i) {
        const std::int32_t p = tree.parents()[i];
        const std::int32_t mp = p < 0 ? -1 : remap_[static_cast<std::size_t>(p)];
        if (p >= 0 && mp < 0) continue;  // parent did not fit
        remap_[static_cast<std::size_t>(i)] = child(mp, tree.tokens()[i], tree.logprobs()[i], source, added,
                                                    "specdec::trie_merger::add_tree", "tree.logprobs()",
                                                    static_cast<std::size_t>(i));
      }
    });
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
  // Runs body(added) and returns added; if body throws, the nodes it created are removed again.
  template <class Body>
  int transaction(Body&& body) {
    const int before = tree_.size();
    int added = 0;
    try {
      body(added);
    } catch (...) {
      for (int id = tree_.size() - 1; id >= before; --id) index_.erase(key(tree_.parents()[id], tree_.tokens()[id]), id);
      tree_.truncate(before);
      sources_.resize(static_cast<std::size_t>(before));
      throw;
    }
    return added;
  }
  // Existing child or a new one; -1 when a new one is needed but the budget is exhausted. A new node's
  // score is checked here so the message names the caller's argument (`array`[i]).
  std::int32_t child(std::int32_t parent, std::int32_t token, float logprob, std::int32_t source, int& added,
                     std::string_view fn, std::string_view array, std::size_t i) {
    const std::int32_t found = lookup(parent, token);
    if (found >= 0) return found;
    if (full()) return -1;
    const std::int32_t id =
        tree_.add(token, parent, logprob, fn, [array, i] { return std::string(array) + "[" + std::to_string(i) + "]"; });
    index_.insert(key(parent, token), id);
    sources_.push_back(source);
    ++added;
    return id;
  }

  int max_nodes_;
  token_tree tree_;
  std::vector<std::int32_t> sources_, remap_, seq_tokens_;
  std::vector<float> seq_logprobs_;
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
