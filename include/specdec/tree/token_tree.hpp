#pragma once
//! \file token_tree.hpp
//! A draft token tree (host) and its ragged-batch form, in the layout every tree consumer shares.
//!
//! Conventions (design brief, "Conventions the maths depends on"):
//! - nodes are stored in topological order: parent(i) < i; parent -1 means "child of the root";
//! - the root is the last committed token and is NOT a node; depth 0 = a child of the root;
//! - position(i) = committed_length + depth(i) (the root sits at committed_length - 1);
//! - score(i) = sum of logprob over the path root..i (the cumulative draft log-probability);
//! - the ancestor ("tree attention") mask is a bit_matrix: row i has bit j iff j == i or j is an
//!   ancestor of i (LSB first, words_per_row(n) 64-bit words per row).
//! There is no small size limit: everything is O(n) or O(n^2 / 64) in the number of nodes.
//!
//! Scores (the library's non-finite-number policy for token-producing code): a log-probability may
//! be any finite value or -inf ("impossible"; the node's score is then -inf too). NaN and +inf are
//! rejected with specdec::invalid_argument naming the node, and so is a finite log-probability whose
//! cumulative score would overflow to +inf (a -inf child would then score NaN). So every stored score
//! is a number or -inf, and ordering nodes by score (keep_best_nodes, the builders) is a strict weak
//! order. Positions are int32: committed_length + depth must fit (checked where positions are made).
//!
//! Duplicate siblings (two children of one node with the same token) are legal in a token_tree: they
//! have the same context, so any verifier treats them as one node with the union of their subtrees
//! (verify_greedy searches all of them), and sampled multi-draft trees need them (k i.i.d. drafts may
//! repeat a token; verify/multi_draft.hpp). The deterministic builders (beam, Cartesian, CAPE, trie
//! merge) never emit them; trie_merger::add_tree merges them in any tree.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "specdec/core/bitmask.hpp"
#include "specdec/core/error.hpp"

namespace specdec {

//! The largest tree the shipped builders (beam_tree_builder, cartesian_tree) construct by default:
//! 2^20 nodes. Its ancestor mask alone would take 2^40 / 64 words = 128 GiB, so a configuration that
//! asks for more is an error to report up front, not a tree anyone could verify.
inline constexpr int max_builder_nodes = 1 << 20;

namespace detail {
//! Positions are committed_length + depth in int32 (design brief): checks committed_length >= 1 (the
//! root is a committed token) and committed_length + max_depth <= INT32_MAX (max_depth = -1: no node).
inline void check_committed_length(std::string_view function, std::string_view argument, std::int32_t committed_length,
                                   int max_depth) {
  require(committed_length >= 1, function, argument, ">= 1 (the root is the last committed token)", committed_length);
  if (max_depth >= 0 && committed_length > std::numeric_limits<std::int32_t>::max() - max_depth) [[unlikely]]
    throw_invalid_argument(function, argument,
                           "<= INT32_MAX - max_depth() = " +
                               std::to_string(std::numeric_limits<std::int32_t>::max() - max_depth) +
                               " (positions committed_length + depth are int32)",
                           committed_length);
}

//! Depth of node i (0 = child of the root) by walking its parents. A parent outside [-1, v) ends
//! the walk (the caller reports it), so the loop always terminates: O(depth(i)).
//! `parents` is an int32 pointer or any object whose operator[] gives the parent (rooted_parents).
template <class Parents>
SPECDEC_HOST_DEVICE inline std::int32_t tree_node_depth(const Parents& parents, std::int32_t i) noexcept {
  std::int32_t d = 0;
  for (std::int32_t v = i;;) {
    const std::int32_t p = parents[v];
    if (p < 0 || p >= v) return d;
    v = p;
    ++d;
  }
}

//! Word w of node i's ancestor-mask row: bit (v - 64 w) for i and each ancestor v of i with
//! 64 w <= v < 64 (w + 1). Walks from i while v >= 64 w (ancestors have smaller indices), so the
//! cost is the number of ancestors at or above column 64 w; a parent outside [-1, v) ends the walk.
//! The device kernel computes each (i, w) independently with this; the host writes whole rows by
//! copying the parent's row (write_ancestor_rows), and a test checks the two agree.
template <class Parents>
SPECDEC_HOST_DEVICE inline mask_word ancestor_mask_word(const Parents& parents, std::int32_t i, std::int32_t w) noexcept {
  const std::int32_t lo = 64 * w;
  mask_word acc = 0;
  for (std::int32_t v = i; v >= lo;) {
    if (v < lo + 64) acc |= mask_word{1} << (v - lo);
    const std::int32_t p = parents[v];
    if (p >= v) break;
    v = p;  // -1 (root) or below: the loop ends
  }
  return acc;
}

//! A tree's parents with its root made node 0 (build_tree_batch's tree_batch_rows::root_and_nodes):
//! node 0 is the root (parent -1), node j > 0 is the tree's node j - 1, its parent p becoming p + 1
//! (the root's children get 0). An invalid parent p >= j - 1 reads as j, so the walks above stop
//! on it as on the tree's own; one below -1 reads as the root's child.
struct rooted_parents {
  const std::int32_t* parents = nullptr;  //!< the tree's own (local, -1 = child of the root)
  SPECDEC_HOST_DEVICE std::int32_t operator[](std::int32_t j) const noexcept {
    if (j == 0) return -1;
    const std::int32_t p = parents[j - 1];
    if (p < 0) return 0;
    return p >= j - 1 ? j : p + 1;  // an invalid parent reads as j (no overflow at INT32_MAX)
  }
};

//! Writes the ancestor mask of the n-node tree `parents` (validated: parents[i] in [-1, i)) into
//! `rows` (n rows of `row_stride` >= words_per_row(n) words; the first words_per_row(n) words of
//! each row are overwritten). Row i = row(parent(i)) | bit i: O(n^2 / 64).
inline void write_ancestor_rows(const std::int32_t* parents, int n, mask_word* rows, std::int64_t row_stride) noexcept {
  const int w = words_per_row(n);
  for (int i = 0; i < n; ++i) {
    mask_word* r = rows + i * row_stride;
    const std::int32_t p = parents[i];
    if (p >= 0) {
      const mask_word* pr = rows + p * row_stride;
      for (int k = 0; k < w; ++k) r[k] = pr[k];  // ancestors of i = ancestors of parent (bits >= i are zero there)
    } else {
      for (int k = 0; k < w; ++k) r[k] = 0;
    }
    set_bit(r, i);
  }
}

//! The score rule of the file comment: throws unless logprob is a number or -inf and the cumulative
//! score (parent score + logprob) is below +inf. `argument` names the node for the message.
[[noreturn]] inline void throw_bad_score(std::string_view function, std::string_view argument, float logprob, float score) {
  std::ostringstream got;
  got << logprob;
  if (logprob < std::numeric_limits<float>::infinity()) got << " (cumulative score " << score << ")";
  throw_invalid_argument(function, argument,
                         "a log-probability that is not NaN or +inf (-inf = impossible) and a cumulative score below +inf",
                         got.str());
}
//! True iff (logprob, resulting score) satisfy the score rule: two compares on the builders' hot path.
[[nodiscard]] inline bool score_ok(float logprob, float score) noexcept {
  constexpr float inf = std::numeric_limits<float>::infinity();
  return logprob < inf && score < inf;  // false for NaN (either) and +inf
}
}  // namespace detail

//! Validates raw tree arrays as a user (or another component) may hand them to specdec: equal lengths,
//! parent in [-1, i) for every node i (topological order), and, when `depths` is non-empty,
//! depths[i] == (parents[i] < 0 ? 0 : depths[parents[i]] + 1). Throws specdec::invalid_argument whose
//! message names `function` and the offending argument element (e.g. "parents[3]"). O(n).
inline void validate_tree_arrays(std::string_view function, std::span<const std::int32_t> tokens,
                                 std::span<const std::int32_t> parents, std::span<const std::int32_t> depths = {}) {
  require_equal(function, "parents.size()", tokens.size(), parents.size());
  if (!depths.empty()) require_equal(function, "depths.size()", tokens.size(), depths.size());
  require(tokens.size() <= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()), function,
          "tokens.size()", "<= INT32_MAX", tokens.size());
  const auto n = static_cast<std::int32_t>(tokens.size());
  for (std::int32_t i = 0; i < n; ++i) {
    const std::int32_t p = parents[i];
    if (p < -1 || p >= i) [[unlikely]] {
      throw_invalid_argument(function, "parents[" + std::to_string(i) + "]",
                             "a parent in [-1, " + std::to_string(i) + ") (topological order: parent before node)",
                             p);
    }
    if (!depths.empty()) {
      const std::int32_t want = p < 0 ? 0 : depths[p] + 1;
      if (depths[i] != want) [[unlikely]] {
        throw_invalid_argument(function, "depths[" + std::to_string(i) + "]",
                               std::to_string(want) + " (= depth of parent " + std::to_string(p) + " + 1)",
                               depths[i]);
      }
    }
  }
}

//! A draft token tree on the host, stored as structure-of-arrays in topological order.
//! Each node has a token id, parent (-1 = child of the root), depth, its own draft log-probability
//! and the cumulative score (sum of log-probabilities along its root path). The root (the last
//! committed token) is implicit. Copyable value type; add() is amortized O(1).
class token_tree {
 public:
  token_tree() = default;

  //! Appends a node under `parent` (-1 = the root) and returns its index. Precondition: parent in
  //! [-1, size()). depth = parent < 0 ? 0 : depth(parent) + 1; score = score(parent) + logprob
  //! (score(root) = 0). logprob: a number or -inf; NaN, +inf, or a score overflowing to +inf throws
  //! (file comment) and leaves the tree unchanged. Amortized O(1).
  int add(std::int32_t token, std::int32_t parent, float logprob = 0.0f) {
    return add(token, parent, logprob, "specdec::token_tree::add", [this] { return "logprob (node " + std::to_string(size()) + ")"; });
  }

  //! add() for a builder that takes the log-probs from its own arguments: a bad parent or a log-prob
  //! that breaks the score rule throws naming `function` and `argument()` (a callable returning the
  //! argument's text, e.g. "logprobs[3]"; called only on failure), and leaves the tree unchanged.
  template <class ArgumentName>
  int add(std::int32_t token, std::int32_t parent, float logprob, std::string_view function, ArgumentName&& argument) {
    // Messages are formatted only on failure: add() is the builders' hot path.
    if (parent < -1 || parent >= size()) [[unlikely]]
      throw_invalid_argument(function, "parent", "a node index in [-1, " + std::to_string(size()) + ")", parent);
    require(size() < std::numeric_limits<std::int32_t>::max(), function, "size()", "< INT32_MAX", size());
    const float score = (parent < 0 ? 0.0f : scores_[parent]) + logprob;
    if (!detail::score_ok(logprob, score)) [[unlikely]]
      detail::throw_bad_score(function, argument(), logprob, score);
    push(token, parent, logprob, score);
    return size() - 1;
  }

  //! Builds a tree from parallel arrays; logprobs may be empty (all 0). Validates sizes, topological
  //! order (parents[i] in [-1, i)) and the score rule (file comment; the message names logprobs[i]). O(n).
  static token_tree from_parents(std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                                 std::span<const float> logprobs = {}) {
    constexpr std::string_view fn = "specdec::token_tree::from_parents";
    validate_tree_arrays(fn, tokens, parents);
    if (!logprobs.empty()) require_equal(fn, "logprobs.size()", tokens.size(), logprobs.size());
    return build(fn, tokens, parents, logprobs);
  }

  //! Like from_parents, but also takes the depths the caller believes the nodes have and rejects
  //! them if they disagree with the parent structure (a common bug in hand-built trees). O(n).
  static token_tree from_arrays(std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                                std::span<const std::int32_t> depths, std::span<const float> logprobs = {}) {
    constexpr std::string_view fn = "specdec::token_tree::from_arrays";
    require_equal(fn, "depths.size()", tokens.size(), depths.size());
    validate_tree_arrays(fn, tokens, parents, depths);
    if (!logprobs.empty()) require_equal(fn, "logprobs.size()", tokens.size(), logprobs.size());
    return build(fn, tokens, parents, logprobs);
  }

  //! Reserves storage for n nodes.
  void reserve(int n) {
    require(n >= 0, "specdec::token_tree::reserve", "n", ">= 0", n);
    const auto un = static_cast<std::size_t>(n);
    tokens_.reserve(un), parents_.reserve(un), depths_.reserve(un), logprobs_.reserve(un), scores_.reserve(un);
  }

  [[nodiscard]] int size() const noexcept { return static_cast<int>(tokens_.size()); }
  [[nodiscard]] bool empty() const noexcept { return tokens_.empty(); }
  void clear() noexcept {
    tokens_.clear(), parents_.clear(), depths_.clear(), logprobs_.clear(), scores_.clear();
  }
  //! Drops the nodes with index >= n (the rest stays a tree: parents come before their children), so
  //! an incremental builder can undo a failed step. n in [0, size()]. O(1), keeps capacity.
  void truncate(int n) {
    require_in_range("specdec::token_tree::truncate", "n", n, 0, size());
    const auto un = static_cast<std::size_t>(n);
    tokens_.resize(un), parents_.resize(un), depths_.resize(un), logprobs_.resize(un), scores_.resize(un);
  }

  //! Element accessors; i is checked (throws invalid_argument when out of [0, size())).
  [[nodiscard]] std::int32_t token(int i) const { return tokens_[check(i, "token")]; }
  [[nodiscard]] std::int32_t parent(int i) const { return parents_[check(i, "parent")]; }
  [[nodiscard]] std::int32_t depth(int i) const { return depths_[check(i, "depth")]; }
  [[nodiscard]] float logprob(int i) const { return logprobs_[check(i, "logprob")]; }
  [[nodiscard]] float score(int i) const { return scores_[check(i, "score")]; }

  //! The SoA arrays (length size()), for handing to kernels without copying.
  [[nodiscard]] std::span<const std::int32_t> tokens() const noexcept { return tokens_; }
  [[nodiscard]] std::span<const std::int32_t> parents() const noexcept { return parents_; }
  [[nodiscard]] std::span<const std::int32_t> depths() const noexcept { return depths_; }
  [[nodiscard]] std::span<const float> logprobs() const noexcept { return logprobs_; }
  [[nodiscard]] std::span<const float> scores() const noexcept { return scores_; }

  //! Children of node i in index order; i = -1 gives the root's children. O(n) scan (nodes after i).
  [[nodiscard]] std::vector<std::int32_t> children(int i) const {
    if (i < -1 || i >= size()) [[unlikely]]
      throw_invalid_argument("specdec::token_tree::children", "i", "a node index in [-1, " + std::to_string(size()) + ")", i);
    std::vector<std::int32_t> out;
    for (int j = i + 1; j < size(); ++j)
      if (parents_[j] == i) out.push_back(j);
    return out;
  }

  //! The child of `parent` (-1 = root) carrying `token`, or -1 if none; the first in index order when
  //! siblings repeat the token (file comment). O(n).
  [[nodiscard]] std::int32_t find_child(std::int32_t parent, std::int32_t token) const {
    if (parent < -1 || parent >= size()) [[unlikely]]
      throw_invalid_argument("specdec::token_tree::find_child", "parent",
                             "a node index in [-1, " + std::to_string(size()) + ")", parent);
    for (int j = parent + 1; j < size(); ++j)
      if (parents_[j] == parent && tokens_[j] == token) return j;
    return -1;
  }

  //! Deepest depth, -1 for an empty tree. O(n).
  [[nodiscard]] int max_depth() const noexcept {
    int d = -1;
    for (auto v : depths_) d = std::max(d, static_cast<int>(v));
    return d;
  }

  //! Node indices from the root's child down to i (inclusive); length depth(i) + 1. O(depth).
  [[nodiscard]] std::vector<std::int32_t> path(int i) const {
    check(i, "path");
    std::vector<std::int32_t> out(static_cast<std::size_t>(depths_[i]) + 1);
    for (std::int32_t v = i, k = depths_[i]; v >= 0; v = parents_[v], --k) out[static_cast<std::size_t>(k)] = v;
    return out;
  }

  //! The tokens along path(i). O(depth).
  [[nodiscard]] std::vector<std::int32_t> path_tokens(int i) const {
    auto p = path(i);
    for (auto& v : p) v = tokens_[v];
    return p;
  }

  //! Nodes without children, in index order. O(n).
  [[nodiscard]] std::vector<std::int32_t> leaves() const {
    std::vector<char> has_child(tokens_.size(), 0);
    for (auto p : parents_)
      if (p >= 0) has_child[p] = 1;
    std::vector<std::int32_t> out;
    for (int i = 0; i < size(); ++i)
      if (!has_child[i]) out.push_back(i);
    return out;
  }

  //! Position ids: committed_length + depth(i). Preconditions (checked): committed_length >= 1 (the
  //! root is a committed token) and committed_length + max_depth() <= INT32_MAX. O(n).
  [[nodiscard]] std::vector<std::int32_t> positions(std::int32_t committed_length) const {
    detail::check_committed_length("specdec::token_tree::positions", "committed_length", committed_length, max_depth());
    std::vector<std::int32_t> out(tokens_.size());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = committed_length + depths_[i];
    return out;
  }

  //! Writes the ancestor mask of this tree into `rows` (size() rows, each `row_stride` >=
  //! words_per_row(size()) words, rows zeroed here). Row i = row(parent(i)) | bit i, so O(n^2 / 64).
  void write_ancestor_mask(mask_word* rows, int row_stride) const {
    const int n = size();
    const int w = words_per_row(n);
    if (row_stride < w) [[unlikely]]
      throw_invalid_argument("specdec::token_tree::write_ancestor_mask", "row_stride",
                             ">= words_per_row(size()) = " + std::to_string(w), row_stride);
    if (n > 0 && rows == nullptr) [[unlikely]]
      throw_invalid_argument("specdec::token_tree::write_ancestor_mask", "rows", "a non-null pointer (size() > 0)",
                             "nullptr");
    detail::write_ancestor_rows(parents_.data(), n, rows, row_stride);
  }

  //! The n x n ancestor mask: row i has bit j iff j == i or j is an ancestor of i. O(n^2 / 64).
  [[nodiscard]] bit_matrix ancestor_mask() const {
    bit_matrix m(size(), size());
    if (!empty()) write_ancestor_mask(m.row(0), m.row_stride());
    return m;
  }

  //! True iff a is an ancestor of b or a == b. O(depth(b)).
  [[nodiscard]] bool is_ancestor_or_self(int a, int b) const {
    check(a, "is_ancestor_or_self");
    check(b, "is_ancestor_or_self");
    for (std::int32_t v = b; v >= a; v = parents_[v])
      if (v == a) return true;
    return false;
  }

  friend bool operator==(const token_tree&, const token_tree&) = default;

 private:
  // Arrays already validated except for the scores, which are checked here naming logprobs[i].
  static token_tree build(std::string_view fn, std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                          std::span<const float> logprobs) {
    token_tree t;
    t.reserve(static_cast<int>(tokens.size()));
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const std::int32_t p = parents[i];
      const float lp = logprobs.empty() ? 0.0f : logprobs[i];
      const float score = (p < 0 ? 0.0f : t.scores_[static_cast<std::size_t>(p)]) + lp;
      if (!detail::score_ok(lp, score)) [[unlikely]]
        detail::throw_bad_score(fn, "logprobs[" + std::to_string(i) + "]", lp, score);
      t.push(tokens[i], p, lp, score);
    }
    return t;
  }
  void push(std::int32_t token, std::int32_t parent, float logprob, float score) {
    tokens_.push_back(token);
    parents_.push_back(parent);
    depths_.push_back(parent < 0 ? 0 : depths_[static_cast<std::size_t>(parent)] + 1);
    logprobs_.push_back(logprob);
    scores_.push_back(score);
  }
  std::size_t check(int i, const char* what) const {
    if (i < 0 || i >= size()) [[unlikely]]
      throw_invalid_argument(std::string("specdec::token_tree::") + what, "i",
                             "a node index in [0, " + std::to_string(size()) + ")", i);
    return static_cast<std::size_t>(i);
  }

  std::vector<std::int32_t> tokens_, parents_, depths_;
  std::vector<float> logprobs_, scores_;
};

//! Flat, device-ready view of a ragged batch of token trees (plain pointers + sizes, trivially
//! copyable, so it can be passed by value to a kernel once the arrays live in device memory).
//! Request r owns nodes [node_indptr[r], node_indptr[r+1]) of the flat arrays; parents are LOCAL
//! (-1 = root, otherwise an index within the request's own nodes). Its n_r x n_r ancestor mask
//! starts at word mask_indptr[r] of `mask` and has n_r rows of words_per_row(n_r) words, i.e. the
//! per-request masks are packed back to back (mask_indptr[r+1] - mask_indptr[r] = n_r *
//! words_per_row(n_r)). This is the format attention's hybrid_tree_attention consumes.
struct token_tree_batch_view {
  int num_requests = 0;
  int total_nodes = 0;                       //!< node_indptr[num_requests]
  std::int64_t total_mask_words = 0;         //!< mask_indptr[num_requests]
  const std::int32_t* node_indptr = nullptr;  //!< [num_requests + 1]
  const std::int32_t* tokens = nullptr;       //!< [total_nodes]
  const std::int32_t* parents = nullptr;      //!< [total_nodes], local to the request
  const std::int32_t* depths = nullptr;       //!< [total_nodes]
  const std::int32_t* positions = nullptr;    //!< [total_nodes], committed_length[r] + depth
  const std::int64_t* mask_indptr = nullptr;  //!< [num_requests + 1], word offsets into mask
  const mask_word* mask = nullptr;            //!< [total_mask_words]

  //! Number of nodes of request r.
  SPECDEC_HOST_DEVICE int num_nodes(int r) const noexcept { return node_indptr[r + 1] - node_indptr[r]; }
  //! Request r's mask as a bitmask_view (rows and columns local to the request).
  SPECDEC_HOST_DEVICE bitmask_view request_mask(int r) const noexcept {
    const int n = num_nodes(r);
    return {mask + mask_indptr[r], n, n, words_per_row(n)};
  }
};

//! A ragged batch of token trees flattened into the layout of token_tree_batch_view (host storage).
//! Build with push_back(tree, committed_length) per request (or from a span of trees); view()
//! returns the pointer view. Cost: O(sum n_r + sum n_r^2 / 64) for the masks.
class token_tree_batch {
 public:
  token_tree_batch() { node_indptr_.push_back(0), mask_indptr_.push_back(0); }

  //! Builds a batch from trees and per-request committed lengths (equal counts, each >= 1).
  token_tree_batch(std::span<const token_tree> trees, std::span<const std::int32_t> committed_lengths)
      : token_tree_batch() {
    require_equal("specdec::token_tree_batch", "committed_lengths.size()", trees.size(), committed_lengths.size());
    for (std::size_t r = 0; r < trees.size(); ++r) {
      detail::check_committed_length("specdec::token_tree_batch", "committed_lengths[" + std::to_string(r) + "]",
                                     committed_lengths[r], trees[r].max_depth());
    }
    for (std::size_t r = 0; r < trees.size(); ++r) push_back(trees[r], committed_lengths[r]);
  }

  //! Appends one request's tree. committed_length >= 1 and committed_length + tree.max_depth() <=
  //! INT32_MAX (positions = committed_length + depth); on error the batch is unchanged.
  void push_back(const token_tree& tree, std::int32_t committed_length) {
    detail::check_committed_length("specdec::token_tree_batch::push_back", "committed_length", committed_length,
                                   tree.max_depth());
    require(static_cast<std::int64_t>(node_indptr_.back()) + tree.size() <= std::numeric_limits<std::int32_t>::max(),
            "specdec::token_tree_batch::push_back", "tree.size()", "total nodes <= INT32_MAX", tree.size());
    const int n = tree.size();
    tokens_.insert(tokens_.end(), tree.tokens().begin(), tree.tokens().end());
    parents_.insert(parents_.end(), tree.parents().begin(), tree.parents().end());
    depths_.insert(depths_.end(), tree.depths().begin(), tree.depths().end());
    for (auto d : tree.depths()) positions_.push_back(committed_length + d);
    committed_.push_back(committed_length);
    const std::int64_t base = mask_indptr_.back();
    const std::int64_t words = static_cast<std::int64_t>(n) * words_per_row(n);
    mask_.resize(static_cast<std::size_t>(base + words));
    if (n > 0) tree.write_ancestor_mask(mask_.data() + base, words_per_row(n));
    node_indptr_.push_back(node_indptr_.back() + n);
    mask_indptr_.push_back(base + words);
  }

  [[nodiscard]] int num_requests() const noexcept { return static_cast<int>(node_indptr_.size()) - 1; }
  [[nodiscard]] int total_nodes() const noexcept { return node_indptr_.back(); }
  [[nodiscard]] int num_nodes(int r) const {
    require(r >= 0 && r < num_requests(), "specdec::token_tree_batch::num_nodes", "r",
            "a request in [0, " + std::to_string(num_requests()) + ")", r);
    return node_indptr_[static_cast<std::size_t>(r) + 1] - node_indptr_[static_cast<std::size_t>(r)];
  }
  [[nodiscard]] std::int32_t committed_length(int r) const {
    (void)num_nodes(r);  // validates r
    return committed_[static_cast<std::size_t>(r)];
  }

  [[nodiscard]] std::span<const std::int32_t> node_indptr() const noexcept { return node_indptr_; }
  [[nodiscard]] std::span<const std::int32_t> tokens() const noexcept { return tokens_; }
  [[nodiscard]] std::span<const std::int32_t> parents() const noexcept { return parents_; }
  [[nodiscard]] std::span<const std::int32_t> depths() const noexcept { return depths_; }
  [[nodiscard]] std::span<const std::int32_t> positions() const noexcept { return positions_; }
  [[nodiscard]] std::span<const std::int64_t> mask_indptr() const noexcept { return mask_indptr_; }
  [[nodiscard]] std::span<const mask_word> mask() const noexcept { return mask_; }

  //! Request r's mask as a bitmask_view.
  [[nodiscard]] bitmask_view request_mask(int r) const {
    const int n = num_nodes(r);
    return {mask_.data() + mask_indptr_[static_cast<std::size_t>(r)], n, n, words_per_row(n)};
  }

  //! The flat pointer view (valid while this batch is alive and unmodified).
  [[nodiscard]] token_tree_batch_view view() const noexcept {
    return {num_requests(),       total_nodes(),   mask_indptr_.back(), node_indptr_.data(), tokens_.data(),
            parents_.data(),      depths_.data(),  positions_.data(),   mask_indptr_.data(), mask_.data()};
  }

  void clear() noexcept {
    node_indptr_.assign(1, 0), mask_indptr_.assign(1, 0);
    tokens_.clear(), parents_.clear(), depths_.clear(), positions_.clear(), committed_.clear(), mask_.clear();
  }

 private:
  std::vector<std::int32_t> node_indptr_, tokens_, parents_, depths_, positions_, committed_;
  std::vector<std::int64_t> mask_indptr_;
  std::vector<mask_word> mask_;
};

//! Validates a token_tree_batch_view a caller assembled by hand (host memory): indptrs start at 0
//! and are non-decreasing, mask_indptr matches n_r * words_per_row(n_r), every request's parents and
//! depths form a valid tree, and (when `check_masks`) each mask equals the ancestor mask. O(total
//! nodes + total mask words). Throws specdec::invalid_argument naming `function`.
inline void validate_tree_batch(std::string_view function, const token_tree_batch_view& v, bool check_masks = true) {
  require(v.num_requests >= 0, function, "num_requests", ">= 0", v.num_requests);
  detail::validate_indptr(function, "node_indptr", "node_indptr", v.node_indptr, v.num_requests);
  if (v.num_requests > 0) require(v.mask_indptr != nullptr, function, "mask_indptr", "non-null", "nullptr");
  if (v.mask_indptr != nullptr) require_equal(function, "mask_indptr[0]", std::int64_t{0}, v.mask_indptr[0]);
  for (int r = 0; r < v.num_requests; ++r) {
    const std::int64_t n = std::int64_t{v.node_indptr[r + 1]} - v.node_indptr[r];  // >= 0: validated above
    const std::int64_t words = n * words_per_row(static_cast<int>(n));
    require_equal(function, "mask_indptr[" + std::to_string(r + 1) + "]", v.mask_indptr[r] + words,
                  v.mask_indptr[r + 1]);
  }
  require_equal(function, "total_nodes", v.node_indptr[v.num_requests], v.total_nodes);
  if (v.num_requests > 0) require_equal(function, "total_mask_words", v.mask_indptr[v.num_requests], v.total_mask_words);
  if (v.total_nodes > 0) {
    require(v.tokens && v.parents && v.depths, function, "tokens/parents/depths", "non-null", "nullptr");
  }
  std::vector<mask_word> scratch;
  for (int r = 0; r < v.num_requests; ++r) {
    const int n = v.num_nodes(r);
    const std::size_t b = static_cast<std::size_t>(v.node_indptr[r]);
    const std::span<const std::int32_t> tok(v.tokens + b, static_cast<std::size_t>(n));
    const std::span<const std::int32_t> par(v.parents + b, static_cast<std::size_t>(n));
    const std::span<const std::int32_t> dep(v.depths + b, static_cast<std::size_t>(n));
    validate_tree_arrays(function, tok, par, dep);
    if (check_masks && n > 0) {
      require(v.mask != nullptr, function, "mask", "non-null", "nullptr");
      token_tree t = token_tree::from_parents(tok, par);
      const int w = words_per_row(n);
      scratch.assign(static_cast<std::size_t>(n) * w, 0);
      t.write_ancestor_mask(scratch.data(), w);
      if (!std::equal(scratch.begin(), scratch.end(), v.mask + v.mask_indptr[r])) [[unlikely]]
        throw_invalid_argument(function, "mask (request " + std::to_string(r) + ")",
                               "the ancestor mask of the request's parents", "a different bit pattern");
    }
  }
}

}  // namespace specdec
