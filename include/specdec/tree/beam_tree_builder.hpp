#pragma once
//! \file beam_tree_builder.hpp
//! LongSpec's dynamic beam-search draft tree (LongSpec, Appendix B of the first version / Appendix D
//! of the "Lossless" version).
//!
//! The paper: traditional beam search discards, at every step, the sequences that fall outside the
//! top-k, which forces KV-cache movement; in speculative decoding draft sequences need not have equal
//! lengths, so LongSpec instead "halt[s] the computation of descendant nodes for low-likelihood
//! branches without removing them", with beam widths [4, 16, 16, 16, 16] per speculation step
//! (the reference code calls this list the `tree_shape`, "a list of tree size").
//!
//! What this builder does, step k = 0, 1, ..., K-1 (K = beam_widths.size()):
//!   F_0 = {root}. The drafter scores every node of the frontier F_k in ONE call (the frontier nodes
//!   are exactly the tokens the draft model has to run at that step, so a real model batches them
//!   as one forward pass over the tree). Among all children (f, v), f in F_k, v in the vocabulary,
//!   the w_k best by cumulative log-prob score(f) + log p(v | f) are added to the tree as nodes of
//!   depth k and form F_{k+1}. Frontier nodes none of whose children made the cut stay in the tree
//!   as leaves (kept, not expanded, nothing is moved). So the tree has at most sum(w_k) nodes
//!   (68 for the defaults) and depth K.
//!   Because at most w_k children of one node can be among the global best w_k, each frontier row
//!   only needs its own top-w_k: the builder does that O(V) selection per row (dense callback) or
//!   the drafter returns top-w_k candidates itself (candidate callback).
//!   Optional node budget (max_nodes > 0): the final tree keeps the best max_nodes nodes by
//!   cumulative score, ancestor-closed (keep_best_nodes). Since log-probs are <= 0 a step whose best
//!   candidate cannot enter the top max_nodes ends the build early; the result is identical.
//!
//! Ties (deterministic): higher score first, then earlier frontier position, then higher log-prob (as
//! the drafter gave it, before log-probs in (0, 1e-3] are read as 0), then lower token id. Within a
//! row the score never falls as the log-prob rises, so this order restricted to one row is the row's
//! top-k order (log-prob descending, lower id on ties) even where rounding makes base + lp equal for
//! different lp: the per-row cut above stays exact.
//! New nodes of a step are appended best first. Candidates with log-prob -inf are never added.
//! No node gets two children with the same token (equal siblings would be one context verified
//! twice): a row's top-k is distinct, and a candidate callback listing a token twice for one row is
//! rejected. Limits (checked when the builder is made): each w_k <= beam_tree_params::max_width and
//! sum w_k <= max_builder_nodes.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/topk.hpp"
#include "specdec/tree/prune.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! Parameters of beam_tree_builder (LongSpec Appendix B/D).
struct beam_tree_params {
  //! Largest w_k: a step holds up to w_{k-1} * w_k candidates (2^24 at this bound, ~400 MB of scratch),
  //! far beyond any useful beam (LongSpec uses 16).
  static constexpr int max_width = 4096;
  //! w_k: nodes added at speculation step k, each in [1, max_width], summing to at most
  //! max_builder_nodes (2^20); the paper's default.
  std::vector<int> beam_widths{4, 16, 16, 16, 16};
  //! Node budget: 0 = none; otherwise the tree keeps its best max_nodes nodes (ancestor-closed).
  int max_nodes = 0;
};

//! Builds LongSpec's dynamic beam tree by driving a drafter callback once per speculation step.
//! Holds scratch buffers, so repeated builds do not reallocate. Not thread-safe (one per thread).
//!
//! Two callback shapes (pick with the build function):
//!  - dense, build_from_logprobs(vocab, fn): fn(const token_tree& tree, std::span<const int32_t>
//!    frontier, std::span<float> rows) fills rows[r * vocab + v] = log p(v | path to frontier[r]) for
//!    every frontier row r (frontier[r] == -1 means the root, i.e. the committed context);
//!  - candidates, build_from_candidates(fn): fn(tree, frontier, int k, std::span<int32_t> tokens,
//!    std::span<float> logprobs) writes, for each row r, k candidates at [r * k, (r + 1) * k) (any
//!    order; pad with token -1 when a row has fewer). This lets a drafter do its own top-k on the
//!    device and ship only frontier.size() * k pairs back.
//! The tree passed to fn is the tree built so far (its nodes, positions and ancestor mask are what a
//! model needs to run the frontier tokens with tree attention).
//! Log-probs must not be NaN and must be <= 0 (values in (0, 1e-3] are rounding and read as 0).
class beam_tree_builder {
 public:
  explicit beam_tree_builder(beam_tree_params params = {}) : params_(std::move(params)) {
    constexpr std::string_view fn = "specdec::beam_tree_builder";
    require(!params_.beam_widths.empty(), fn, "params.beam_widths", "non-empty", "empty");
    // Bounded before anything is sized from them: widths that could not be allocated are a
    // configuration error (invalid_argument), not a std::bad_alloc in the middle of a build.
    long long total = 0;
    for (std::size_t k = 0; k < params_.beam_widths.size(); ++k) {
      const int w = params_.beam_widths[k];
      if (!(w >= 1 && w <= beam_tree_params::max_width)) [[unlikely]]
        throw_invalid_argument(fn, "params.beam_widths[" + std::to_string(k) + "]",
                               ">= 1 and <= " + std::to_string(beam_tree_params::max_width) + " (beam_tree_params::max_width)", w);
      total += w;
    }
    require(total <= max_builder_nodes, fn, "params.beam_widths",
            "widths summing to at most max_builder_nodes = " + std::to_string(max_builder_nodes) + " nodes", total);
    require(params_.max_nodes >= 0, fn, "params.max_nodes", ">= 0 (0 = no budget)", params_.max_nodes);
  }

  [[nodiscard]] const beam_tree_params& params() const noexcept { return params_; }
  //! Most nodes a build can produce: sum of the widths, capped by max_nodes.
  [[nodiscard]] int max_tree_size() const noexcept {
    long long s = 0;
    for (int w : params_.beam_widths) s += w;
    if (params_.max_nodes > 0) s = std::min<long long>(s, params_.max_nodes);
    return static_cast<int>(std::min<long long>(s, std::numeric_limits<int>::max()));
  }

  //! Dense drafter: the builder selects each row's top-w_k in O(V). Calls fn at most K times.
  //! Cost per step: the callback + O(|F| V) selection + O(|F| w log) merging.
  template <class Fn>
  token_tree build_from_logprobs(int vocab_size, Fn&& fn) {
    constexpr std::string_view name = "specdec::beam_tree_builder::build_from_logprobs";
    require(vocab_size >= 1, name, "vocab_size", ">= 1", vocab_size);
    return build(name, [&](const token_tree& tree, std::span<const std::int32_t> frontier, int k) {
      const std::size_t v = static_cast<std::size_t>(vocab_size);
      rows_.resize(frontier.size() * v);
      fn(tree, frontier, std::span<float>(rows_));
      const int kk = std::min(k, vocab_size);
      cand_tokens_.assign(frontier.size() * static_cast<std::size_t>(k), -1);
      cand_logprobs_.assign(frontier.size() * static_cast<std::size_t>(k), -std::numeric_limits<float>::infinity());
      for (std::size_t r = 0; r < frontier.size(); ++r) {
        const std::span<const float> row(rows_.data() + r * v, v);
        // top-k ranks NaN last, so look for it explicitly (core/topk.hpp; dispatched, vectorized).
        if (detail::any_nan(row.data(), row.size())) [[unlikely]]
          throw_invalid_argument(name, "rows (row " + std::to_string(r) + ")", "log-probabilities, no NaN", "NaN");
        const std::size_t o = r * static_cast<std::size_t>(k);
        topk<float>(row, kk, std::span<std::int32_t>(cand_tokens_).subspan(o, static_cast<std::size_t>(kk)),
                    std::span<float>(cand_logprobs_).subspan(o, static_cast<std::size_t>(kk)), topk_ws_);
      }
    }, vocab_size);
  }

  //! Candidate drafter: fn returns each row's top-k itself (k = w_k of the step).
  template <class Fn>
  token_tree build_from_candidates(Fn&& fn) {
    constexpr std::string_view name = "specdec::beam_tree_builder::build_from_candidates";
    return build(name, [&](const token_tree& tree, std::span<const std::int32_t> frontier, int k) {
      cand_tokens_.assign(frontier.size() * static_cast<std::size_t>(k), -1);
      cand_logprobs_.assign(frontier.size() * static_cast<std::size_t>(k), -std::numeric_limits<float>::infinity());
      fn(tree, frontier, k, std::span<std::int32_t>(cand_tokens_), std::span<float>(cand_logprobs_));
      // A token listed twice for one node would become two identical siblings: reject it.
      for (std::size_t r = 0; r < frontier.size(); ++r) {
        dup_.assign(cand_tokens_.begin() + static_cast<std::ptrdiff_t>(r * static_cast<std::size_t>(k)),
                    cand_tokens_.begin() + static_cast<std::ptrdiff_t>((r + 1) * static_cast<std::size_t>(k)));
        std::sort(dup_.begin(), dup_.end());
        for (std::size_t j = 1; j < dup_.size(); ++j) {
          if (dup_[j] == dup_[j - 1] && dup_[j] != -1) [[unlikely]]
            throw_invalid_argument(name, "candidate tokens (row " + std::to_string(r) + ")", "distinct tokens per row",
                                   "token " + std::to_string(dup_[j]) + " twice");
        }
      }
    }, 0);
  }

 private:
  struct candidate {
    float score;
    std::int32_t row;
    std::int32_t token;
    float logprob;  // clamped to <= 0: the node's log-prob
    float given;    // as the drafter gave it: the tie-break after the row
  };

  template <class Fill>
  token_tree build(std::string_view name, Fill&& fill, int vocab_size) {
    token_tree tree;
    tree.reserve(max_tree_size());
    frontier_.assign(1, -1);
    const int budget = params_.max_nodes;
    for (std::size_t step = 0; step < params_.beam_widths.size() && !frontier_.empty(); ++step) {
      const int w = params_.beam_widths[step];
      fill(tree, std::span<const std::int32_t>(frontier_), w);
      // gather and validate the candidates
      cands_.clear();
      for (std::size_t r = 0; r < frontier_.size(); ++r) {
        const float base = frontier_[r] < 0 ? 0.0f : tree.score(frontier_[r]);
        for (int j = 0; j < w; ++j) {
          const std::size_t e = r * static_cast<std::size_t>(w) + static_cast<std::size_t>(j);
          const std::int32_t tok = cand_tokens_[e];
          float lp = cand_logprobs_[e];
          if (tok == -1) continue;  // padding
          if (tok < -1 || (vocab_size > 0 && tok >= vocab_size)) [[unlikely]] {
            throw_invalid_argument(name, "candidate token (row " + std::to_string(r) + ")",
                                   vocab_size > 0 ? "a token in [0, " + std::to_string(vocab_size) + ")"
                                                  : std::string("a token >= 0 or -1 (padding)"),
                                   tok);
          }
          if (!(lp <= 1e-3f)) [[unlikely]] {  // also catches NaN
            throw_invalid_argument(name, "log-prob of token " + std::to_string(tok) + " (row " + std::to_string(r) + ")",
                                   "a log-probability <= 0 (not NaN)", lp);
          }
          const float given = lp;
          lp = std::min(lp, 0.0f);
          if (lp == -std::numeric_limits<float>::infinity()) continue;
          cands_.push_back({base + lp, static_cast<std::int32_t>(r), tok, lp, given});
        }
      }
      if (cands_.empty()) break;
      const auto better = [](const candidate& a, const candidate& b) {
        if (a.score != b.score) return a.score > b.score;
        if (a.row != b.row) return a.row < b.row;
        if (a.given != b.given) return a.given > b.given;  // the row's top-k order (file comment)
        return a.token < b.token;
      };
      const std::size_t take = std::min(cands_.size(), static_cast<std::size_t>(w));
      std::partial_sort(cands_.begin(), cands_.begin() + static_cast<std::ptrdiff_t>(take), cands_.end(), better);
      // Exact early stop under a budget: nothing from this step (or below it) can enter the top N.
      if (budget > 0 && tree.size() >= budget) {
        nth_.assign(tree.scores().begin(), tree.scores().end());
        std::nth_element(nth_.begin(), nth_.begin() + (budget - 1), nth_.end(), std::greater<float>());
        if (cands_.front().score <= nth_[static_cast<std::size_t>(budget - 1)]) break;
      }
      next_.clear();
      for (std::size_t j = 0; j < take; ++j) {
        const candidate& c = cands_[j];
        next_.push_back(tree.add(c.token, frontier_[static_cast<std::size_t>(c.row)], c.logprob));
      }
      frontier_.swap(next_);
    }
    if (budget > 0 && tree.size() > budget) return keep_best_nodes(tree, budget);
    return tree;
  }

  beam_tree_params params_;
  std::vector<float> rows_, cand_logprobs_, nth_;
  std::vector<std::int32_t> cand_tokens_, frontier_, next_, dup_;
  std::vector<candidate> cands_;
  topk_workspace<float> topk_ws_;
};

}  // namespace specdec
