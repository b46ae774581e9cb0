#pragma once
//! \file tree_builders.hpp
//! Tree-builder policies: turn a drafter's draft_candidates into the token_tree the target verifies.
//!  - chain_tree_builder:     the drafted chain (a path), up to max_depth nodes;
//!  - cartesian_tree_builder: TokenSwift's Cartesian product (Appendix E) of per-depth candidates
//!                            (draft_candidates::alternatives) with widths s_k, default [1, 3, 3, 3];
//!  - tokenswift_tree_builder: the Cartesian tree and the n-gram candidates (sequences) merged into
//!                            one trie (TokenSwift Algorithm 1, line 11);
//!  - trie_tree_builder:      the chain and every extra sequence (n-gram matches, beams) merged into one
//!                            prefix trie (tree/trie_merge.hpp), so shared prefixes are verified once;
//!                            optional node budget and depth limit.
//!  - multi_draft_tree_builder: k independent drafts (multi-draft drafters) as k separate branches of
//!                            the root, unmerged, in draw order (what multi_draft_verifier requires);
//!  - cape_tree_builder:      GLIDE's CAPE (§4.2): the chain plus, at each depth, an expansion set of
//!                            S(p) runner-up siblings sized by the draft's confidence p in the chain token.
//! Each declares the shape it builds (`produces`, decoder/pairing.hpp), so a verifier that needs a chain
//! or i.i.d. drafts refuses the others at compile time.
//! LongSpec's dynamic beam tree is built by the drafter itself (longspec_drafter with beam widths, via
//! tree/beam_tree_builder.hpp) and arrives as sequences, so trie_tree_builder rebuilds it exactly.
//! Duplicate siblings: every builder here except multi_draft_tree_builder merges equal tokens under
//! one node (they share one context, so verifying both is wasted); multi-draft trees keep them
//! because the multi-draft verifier's law depends on the k i.i.d. draws as drawn.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/decoder/concepts.hpp"
#include "specdec/tree/cape.hpp"
#include "specdec/tree/cartesian_tree.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/tree/trie_merge.hpp"

namespace specdec {

//! A path of the drafted chain's first max_depth tokens (0 = all). O(depth).
struct chain_tree_builder {
  static constexpr tree_shape produces = tree_shape::chain;
  int max_depth = 0;
  void build(const draft_candidates& c, token_tree& out) const {
    require(max_depth >= 0, "specdec::chain_tree_builder::build", "max_depth", ">= 0", max_depth);
    out.clear();
    const std::size_t n = max_depth > 0 ? std::min(c.chain.size(), static_cast<std::size_t>(max_depth)) : c.chain.size();
    for (std::size_t i = 0; i < n; ++i) out.add(c.chain[i].token, static_cast<std::int32_t>(i) - 1, c.chain[i].logprob);
  }
};
static_assert(check_tree_builder<chain_tree_builder>());

//! Cartesian product of per-depth candidates (TokenSwift Appendix E). Depth k uses the first widths[k]
//! distinct tokens of alternatives[k] in rank order (or chain[k] alone when a drafter gave no
//! alternatives there); a token listed twice is taken once with the better log-prob, since equal
//! siblings would be one context verified twice. Nodes = sum_k prod_{j<=k} s_j.
//! Every log-prob the builder reads (all of alternatives[k], or chain[k] where it stands in) must not
//! be NaN or +inf (-inf = impossible): checked before merging, so the result does not depend on the
//! order of the repeats (std::max would keep or drop a NaN depending on it).
//! Depth k's candidates hang under every depth k-1 node although a model drafter ranked them after
//! chain[0..k-1] only (TokenSwift's heads likewise rank each depth independently of the path). With a
//! sampled chain this starts at the root: the argmax at depth 0 carries depth-1 candidates drafted
//! after the sampled chain[0] (draft_candidates.hpp). Anchoring depth k on chain[k] instead was
//! measured and is worse (tests/decoder's 6-token model, T = 0.9: tau 1.45 vs 1.58 for [1, 3, 3, 3]):
//! the draft's mode matches the target's draw more often than the draft's own draw does.
//! O(nodes + sum_k |alternatives[k]| s_k).
struct cartesian_tree_builder {
  static constexpr tree_shape produces = tree_shape::tree;  // a chain only when every width is 1
  std::vector<int> widths = tokenswift_tree_widths();
  cartesian_tree_builder() = default;
  explicit cartesian_tree_builder(std::vector<int> w) : widths(std::move(w)) {}
  void build(const draft_candidates& c, token_tree& out) {
    constexpr std::string_view fn = "specdec::cartesian_tree_builder::build";
    heads_.clear();
    // every width, not only those this draft reaches: {1, 0} was refused only once a draft went two deep
    for (std::size_t k = 0; k < widths.size(); ++k)
      if (widths[k] < 1) [[unlikely]]
        throw_invalid_argument(fn, "widths[" + std::to_string(k) + "]", ">= 1", widths[k]);
    const std::size_t depth = std::min(widths.size(), std::max(c.alternatives.size(), c.chain.size()));
    for (std::size_t k = 0; k < depth; ++k) {
      head_candidates h;
      const auto width = static_cast<std::size_t>(widths[k]);
      // token_tree's score rule (the one cartesian_tree states), checked before a repeat is merged
      auto check = [&](const draft_token& d, auto&& name) {
        if (!(d.logprob < std::numeric_limits<float>::infinity())) [[unlikely]]  // the name is built only on failure
          throw_invalid_argument(fn, name(), "a log-probability that is not NaN or +inf (-inf = impossible)", d.logprob);
      };
      auto take = [&](const draft_token& d) {  // merge a repeated token, else append while there is room
        for (std::size_t j = 0; j < h.tokens.size(); ++j)
          if (h.tokens[j] == d.token) {
            h.logprobs[j] = std::max(h.logprobs[j], d.logprob);
            return;
          }
        if (h.tokens.size() < width) h.tokens.push_back(d.token), h.logprobs.push_back(d.logprob);
      };
      if (k < c.alternatives.size() && !c.alternatives[k].empty()) {
        const auto& alts = c.alternatives[k];
        for (std::size_t j = 0; j < alts.size(); ++j)
          check(alts[j], [&] { return "alternatives[" + std::to_string(k) + "][" + std::to_string(j) + "].logprob"; });
        for (const auto& a : alts) take(a);
      } else if (k < c.chain.size()) {
        check(c.chain[k], [&] { return "chain[" + std::to_string(k) + "].logprob"; });
        take(c.chain[k]);
      }
      if (h.tokens.empty()) break;
      heads_.push_back(std::move(h));
    }
    out = heads_.empty() ? token_tree{} : cartesian_tree(heads_);
  }

 private:
  std::vector<head_candidates> heads_;
};
static_assert(check_tree_builder<cartesian_tree_builder>());

//! TokenSwift's verification set (Algorithm 1, line 11: {d} = {a^i} U {x^i}): the Cartesian tree of
//! the per-depth candidates (cartesian_tree_builder, widths default [1, 3, 3, 3]) merged with the
//! n-gram candidates (draft_candidates::sequences, best first) into one prefix trie, so a path the
//! heads and an n-gram share is verified once. Model nodes come first under the budget, then
//! n-grams (trie_merger's rule: earlier candidates win; a later one that does not fit is truncated).
//! Node sources (sources()): 0 = residual heads, 1 = n-gram (TokenSwift's beta attribution).
//! max_nodes = 0: no budget. O(nodes) expected.
class tokenswift_tree_builder {
 public:
  static constexpr tree_shape produces = tree_shape::tree;
  tokenswift_tree_builder() : tokenswift_tree_builder(tokenswift_tree_widths()) {}
  explicit tokenswift_tree_builder(std::vector<int> widths, int max_nodes = 0)
      : cartesian_(std::move(widths)), merger_(max_nodes) {}
  void build(const draft_candidates& c, token_tree& out) {
    cartesian_.build(c, heads_tree_);
    merger_.clear();
    merger_.add_tree(heads_tree_, 0);
    for (const auto& s : c.sequences) {
      tokens_.resize(s.size());
      logprobs_.resize(s.size());
      for (std::size_t i = 0; i < s.size(); ++i) tokens_[i] = s[i].token, logprobs_[i] = s[i].logprob;
      merger_.add_sequence(tokens_, logprobs_, 1);
    }
    out = merger_.tree();
  }
  //! Source of each node of the last built tree (0 = heads' Cartesian tree, 1 = n-gram).
  [[nodiscard]] std::span<const std::int32_t> sources() const noexcept { return merger_.sources(); }

 private:
  cartesian_tree_builder cartesian_;
  trie_merger merger_;
  token_tree heads_tree_;
  std::vector<std::int32_t> tokens_;
  std::vector<float> logprobs_;
};
static_assert(check_tree_builder<tokenswift_tree_builder>());

//! Prefix trie of the chain and all sequences, merged by tree/trie_merge.hpp's trie_merger (first
//! occurrence wins; children in insertion order; node log-prob from the sequence that created it).
//! max_nodes > 0: trie_merger's budget rule (earlier sequences win, a sequence that does not fit is
//! truncated); max_depth > 0 truncates every sequence to that many tokens. O(total tokens) expected.
class trie_tree_builder {
 public:
  static constexpr tree_shape produces = tree_shape::tree;
  trie_tree_builder() : trie_tree_builder(0, 0) {}
  //! max_nodes = 0 / max_depth = 0: no limit.
  explicit trie_tree_builder(int max_nodes, int max_depth = 0) : merger_(max_nodes), max_depth_(max_depth) {
    require(max_depth >= 0, "specdec::trie_tree_builder", "max_depth", ">= 0 (0 = no limit)", max_depth);
  }
  void build(const draft_candidates& c, token_tree& out) {
    merger_.clear();
    insert(c.chain);
    for (const auto& s : c.sequences) insert(s);
    out = merger_.tree();
  }

 private:
  void insert(const std::vector<draft_token>& seq) {
    const std::size_t n = max_depth_ > 0 ? std::min(seq.size(), static_cast<std::size_t>(max_depth_)) : seq.size();
    tokens_.resize(n);
    logprobs_.resize(n);
    for (std::size_t i = 0; i < n; ++i) tokens_[i] = seq[i].token, logprobs_[i] = seq[i].logprob;
    merger_.add_sequence(tokens_, logprobs_);
  }
  trie_merger merger_;
  int max_depth_;
  std::vector<std::int32_t> tokens_;
  std::vector<float> logprobs_;
};
static_assert(check_tree_builder<trie_tree_builder>());

//! The chain and each sequence as its own branch under the root (chain first, then sequences in
//! order; each branch's nodes consecutive), with no prefix merging. Multi-draft speculative sampling
//! (verify/multi_draft.hpp) needs every node's children to be exactly the draws from its draft row in
//! draw (index) order: merging equal prefixes, as the trie does, would turn k i.i.d. draws into the
//! set of distinct ones and change their law. Sibling tokens may therefore repeat (drafts drawn with
//! replacement). max_depth > 0 truncates each draft. Nodes = total draft tokens; O(nodes).
struct multi_draft_tree_builder {
  //! i.i.d. drafts when the drafter draws them (check_policy_pairing asks multi_draft_verifier's drafter
  //! to be able to); any other drafter's sequences give a tree with repeated siblings.
  static constexpr tree_shape produces = tree_shape::iid_drafts;
  int max_depth = 0;  //!< 0 = no limit
  void build(const draft_candidates& c, token_tree& out) const {
    require(max_depth >= 0, "specdec::multi_draft_tree_builder::build", "max_depth", ">= 0 (0 = no limit)", max_depth);
    out.clear();
    auto add = [&](const std::vector<draft_token>& seq) {
      const std::size_t n = max_depth > 0 ? std::min(seq.size(), static_cast<std::size_t>(max_depth)) : seq.size();
      std::int32_t parent = -1;
      for (std::size_t d = 0; d < n; ++d) parent = out.add(seq[d].token, parent, seq[d].logprob);
    };
    add(c.chain);
    for (const auto& s : c.sequences) add(s);
  }
};
static_assert(check_tree_builder<multi_draft_tree_builder>());

//! GLIDE's confidence-aware proposal expansion (§4.2, tree/cape.hpp) as a tree-builder policy: the
//! drafted chain plus, at each depth d, the first S(p_d) entries of alternatives[d] other than the
//! chain token, p_d = exp(chain[d].logprob) (the draft's confidence), in CAPE's linearized node order
//! (so the tree's ancestor mask is Mask_CAPE). Drafters keep draft_request::width alternatives per
//! depth: ask for width >= max S + 1 (8 for the §4.2 bins) to get full expansion sets; with fewer, each
//! set is what the drafter gave. max_tokens > 0 caps the tree (GLIDE verifies at most 32 tokens),
//! dropping the deepest expansions first. O(nodes); no allocation in steady state.
class cape_tree_builder {
 public:
  static constexpr tree_shape produces = tree_shape::tree;
  cape_tree_builder() = default;
  //! max_tokens: cap on tree nodes (0 = none); schedule: S(p) (GLIDE §4.2 bins by default).
  explicit cape_tree_builder(int max_tokens, cape_schedule schedule = cape_schedule::glide_bins())
      : schedule_(std::move(schedule)), max_tokens_(max_tokens) {
    require(max_tokens >= 0, "specdec::cape_tree_builder", "max_tokens", ">= 0 (0 = no cap)", max_tokens);
  }
  void build(const draft_candidates& c, token_tree& out) {
    std::span<const draft_token> chain(c.chain);
    if (max_tokens_ > 0 && chain.size() > static_cast<std::size_t>(max_tokens_)) chain = chain.first(static_cast<std::size_t>(max_tokens_));
    cape_expand_ranked<draft_token>(chain, c.alternatives, schedule_, max_tokens_, proposal_);
    proposal_.tree(out);
  }

 private:
  cape_schedule schedule_ = cape_schedule::glide_bins();
  int max_tokens_ = 0;
  cape_proposal proposal_;
};
static_assert(check_tree_builder<cape_tree_builder>());

}  // namespace specdec
