#pragma once
//! \file multi_draft.hpp
//! Multi-draft (tree) speculative sampling for trees whose children were DRAWN from the draft
//! distribution: the "multi-round"/"recursive" rejection sampling of SpecInfer (Miao et al. 2024,
//! Algorithm "multi-step speculative sampling") and, for sibling sets drawn without replacement,
//! Jeon et al. 2024 (Recursive Speculative Decoding). GLIDE §3's speculative sampling is the k = 1 case.
//!
//! At a node with children x_1..x_k (in index order = draw order) and target p, draft q (rows of that
//! node), with p'_1 = p:
//!   step j: proposal q_j = q (with replacement) or q with x_1..x_{j-1} removed and renormalised
//!   (without replacement); accept x_j with probability min(1, p'_j(x_j) / q_j(x_j)) and descend into
//!   it; otherwise p'_{j+1} = norm(max(0, p'_j - q_j)).
//!   If all k are rejected, emit the bonus token drawn from p'_{k+1} and stop.
//! Exactness. Let H_j be the history (x_1..x_{j-1} and their rejections). Claim: given H_j, the token
//! emitted at this node is distributed as p'_j. For j = k+1 it is drawn from p'_{k+1}. For j <= k,
//! x_j | H_j ~ q_j, independent of the uniforms; p'_j and q_j are functions of H_j, and so is p'_{j+1}
//! (it does not depend on x_j). Hence P(emit y | H_j) = q_j(y) min(1, p'_j(y)/q_j(y)) +
//! P(reject | H_j) p'_{j+1}(y) = min(p'_j, q_j)(y) + (1 - sum min(p'_j, q_j)) max(0, p'_j - q_j)(y) /
//! (1 - sum min(p'_j, q_j)) = p'_j(y) (the speculative-sampling identity, TokenSwift Appendix A). With
//! j = 1 the emitted token ~ p. After accepting x_j the walk continues at node x_j, whose children
//! were drawn from the draft given the prefix ending in x_j independently of everything above, so the
//! same argument gives the next token ~ p(. | prefix, x_j): the joint law of the emitted tokens is the
//! target's. (tests/verify check the joint law of the first 3 tokens by chi-square.)
//!
//! Preconditions (checked): each child's token has q > 0 in its parent's draft row (it was drawn from
//! it); without replacement, siblings carry distinct tokens. Unchecked: rows are probability
//! distributions (sums 1 up to rounding) and the children really were drawn from q in index order; a
//! deterministic top-k tree breaks that assumption: use sample_and_match for those.
//!
//! Non-finite policy (verify_result.hpp): p and q at every child's token are checked up front, the
//! full p and q rows of every node the walk decides on before its first draw there (check_prob_row:
//! no accept / reject on a row that is not a distribution), a bonus row in its draw;
//! NaN, +-inf and negative entries and an all-zero row to draw from throw invalid_argument naming the
//! tensor, row (and request) and token.
//!
//! Numerics of the residual. p'_j is kept unnormalised, p'_j = w / T (T = 1 and w = p before the first
//! rejection at a node), so a rejection updates w <- max(0, w - T q_j) with no division of the
//! vocabulary and no 1/T that could overflow after many tiny residuals; the same pass sums w per
//! 1024-token block, which is all the bonus draw needs besides one block scan. If the updated residual
//! is exactly zero (p'_j <= q_j everywhere, i.e. p'_j == q_j as distributions: that rejection had
//! probability zero) p'_{j+1} = p'_j is kept, the law the proof above requires of the emitted token
//! (see detail::sample_residual for what vLLM and FlashInfer do there). Every draw is from a row with
//! a positive total and returns a token of positive weight, so the bonus is always in [0, V).

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/core/execution.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/sampling/draft_sampling.hpp"
#include "specdec/sampling/sampler.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/detail/batch.hpp"
#include "specdec/verify/detail/stochastic.hpp"
#include "specdec/verify/verify_result.hpp"

namespace specdec {

namespace detail {

inline void validate_multi_draft(std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                                 const prob_rows& p, const prob_rows& q, draft_sampling mode, std::string_view fn) {
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const float qx = checked_prob(q, parents[i] + 1, tokens[i], fn, "draft_probs");
    if (!(qx > 0.0f)) [[unlikely]]
      throw_invalid_argument(fn, "draft_probs",
                             "q > 0 at the parent's draft row for every child's token (node " + std::to_string(i) +
                                 ", token " + std::to_string(tokens[i]) + ")",
                             qx);
    checked_prob(p, parents[i] + 1, tokens[i], fn, "target_probs");
  }
  if (mode == draft_sampling::without_replacement) {
    std::vector<std::pair<std::int32_t, std::int32_t>> sib(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) sib[i] = {parents[i], tokens[i]};
    std::sort(sib.begin(), sib.end());
    const auto dup = std::adjacent_find(sib.begin(), sib.end());
    if (dup != sib.end()) [[unlikely]]
      throw_invalid_argument(fn, "tree", "distinct sibling tokens (draft_sampling::without_replacement)",
                             "token " + std::to_string(dup->second) + " twice under parent " +
                                 std::to_string(dup->first));
  }
}

//! Per-call scratch: the unnormalised residual over the vocabulary and its block sums.
struct multi_draft_scratch {
  std::vector<double> w;
  cdf_blocks blocks;
  std::vector<double> keep;
  std::vector<std::int32_t> drawn;
};

//! One rejection's update (see the file comment): w <- max(0, base - c q) with base = p (first
//! rejection at the node: `prow` is read and checked here) or w, block sums into s.blocks; tokens in
//! s.drawn keep their base weight (q_j is 0 there). Returns the new total.
inline double residual_update(std::span<const float> prow, std::span<const float> qrow, bool from_p, double c,
                              multi_draft_scratch& s, const row_ref& at_p, const row_ref& at_q) {
  const std::size_t v = prow.size();
  if (s.w.size() != v) s.w.resize(v);
  double* w = s.w.data();
  const float* pr = prow.data();
  const float* qr = qrow.data();
  s.keep.clear();
  for (auto d : s.drawn) s.keep.push_back(from_p ? static_cast<double>(pr[d]) : w[d]);
  double* bs = s.blocks.reset(v);
  for (std::size_t b = 0; b < s.blocks.count(); ++b) {
    const std::size_t lo = b * cdf_block, hi = std::min(v, lo + cdf_block);
    const double sum = residual_block(from_p ? pr : nullptr, w, qr, lo, hi, c);
    if (from_p && (any_inadmissible_prob(pr + lo, hi - lo) || any_inadmissible_prob(qr + lo, hi - lo))) [[unlikely]] {
      const std::size_t ip = lo + first_inadmissible_prob(pr + lo, hi - lo);
      if (ip < hi) throw_bad_entry(at_p, bad_prob_text, static_cast<std::int64_t>(ip), pr[ip]);
      const std::size_t iq = lo + first_inadmissible_prob(qr + lo, hi - lo);
      throw_bad_entry(at_q, bad_prob_text, static_cast<std::int64_t>(iq), qr[iq]);
    }
    bs[b] = sum;
  }
  if (!s.drawn.empty()) {
    for (std::size_t k = 0; k < s.drawn.size(); ++k) w[static_cast<std::size_t>(s.drawn[k])] = s.keep[k];
    // the blocks holding drawn tokens are summed again, so every block sum is the sum of its weights
    for (std::size_t k = 0; k < s.drawn.size(); ++k) {
      const std::size_t lo = static_cast<std::size_t>(s.drawn[k]) / cdf_block * cdf_block;
      bs[lo / cdf_block] = lane_sum(w + lo, std::min(v, lo + cdf_block) - lo);
    }
  }
  s.blocks.sum_up();
  return s.blocks.total();
}

inline verify_result multi_draft_walk(std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                                      const prob_rows& p, const prob_rows& q, draft_sampling mode,
                                      philox_stream& rng, multi_draft_scratch& s, std::string_view fn) {
  const child_index ch(parents);
  const auto v = static_cast<std::size_t>(p.vocab);
  verify_result res;
  std::int32_t cur = -1;
  for (;;) {
    const auto prow = p.row(cur + 1);
    const auto qrow = q.row(cur + 1);
    const row_ref at_p = p.ref(fn, "target_probs", cur + 1), at_q = q.ref(fn, "draft_probs", cur + 1);
    if (!ch.of(cur).empty()) {  // rows the node's decisions use, in full (q only where drafts were drawn)
      check_prob_row(p, cur + 1, fn, "target_probs");
      check_prob_row(q, cur + 1, fn, "draft_probs");
    }
    bool residual = false;    // false: p' = prow; true: p' = s.w / total
    double total = 1.0;
    double drawn_mass = 0.0;  // without replacement: q mass of earlier siblings' tokens
    s.drawn.clear();
    std::int32_t next = -1;
    for (auto c : ch.of(cur)) {
      const auto x = static_cast<std::size_t>(tokens[static_cast<std::size_t>(c)]);
      double remain = 1.0;
      if (mode == draft_sampling::without_replacement) remain = std::max(1.0 - drawn_mass, static_cast<double>(qrow[x]));
      const double qj = static_cast<double>(qrow[x]) / remain;
      const double pj = residual ? s.w[x] / total : static_cast<double>(prow[x]);
      const double u = rng.uniform_double();
      if (u * qj < pj) {
        next = c;
        break;
      }
      // rejected: p'_{j+1} = norm(max(0, p'_j - q_j)); q_j = q / remain, and 0 on tokens already drawn
      const double t = residual_update(prow, qrow, !residual, total / remain, s, at_p, at_q);
      if (t > 0.0) {
        residual = true;
        total = t;
      } else if (residual) {
        // p'_j == q_j: keep p'_j. s.w was overwritten, so rebuild it from q_j (equal to p'_j here).
        for (std::size_t i = 0; i < v; ++i) s.w[i] = static_cast<double>(qrow[i]) / remain;
        for (auto d : s.drawn) s.w[static_cast<std::size_t>(d)] = 0.0;
        s.blocks.compute(v, [&](std::size_t lo, std::size_t hi) { return lane_sum(s.w.data() + lo, hi - lo); });
        total = s.blocks.total();
      }  // else p'_j = prow is kept as it is
      if (mode == draft_sampling::without_replacement) {
        s.drawn.push_back(static_cast<std::int32_t>(x));
        drawn_mass += static_cast<double>(qrow[x]);
      }
    }
    if (next < 0) {
      res.bonus = residual ? s.blocks.draw([&](std::size_t i) { return s.w[i]; }, rng, at_p)
                           : draw_from_probs(prow, rng, at_p);
      return res;
    }
    res.accepted.push_back(next);
    cur = next;
  }
}

}  // namespace detail

//! Multi-draft speculative sampling on one tree (see the file comment for the algorithm and proof).
//! `target_probs`, `draft_probs`: float [n+1, V] probability rows (row 0 = root, row i+1 = after node
//! i). Children of every node must have been drawn from that node's draft row, in index order,
//! `mode` saying with or without replacement. Draws two Philox words per checked child plus two for
//! the bonus. Complexity: O(n log n) validation; O(V) per rejected child plus O(V) for the bonus.
template <tensor_like TargetProbs, tensor_like DraftProbs>
[[nodiscard]] verify_result verify_multi_draft(const token_tree& tree, const TargetProbs& target_probs,
                                               const DraftProbs& draft_probs, draft_sampling mode,
                                               philox_stream& rng) {
  constexpr std::string_view fn = "specdec::verify_multi_draft";
  const auto p = detail::to_rows(target_probs, tree.size() + 1, fn, "target_probs");
  const auto q = detail::to_rows(draft_probs, tree.size() + 1, fn, "draft_probs");
  require_equal(fn, "draft_probs vocab (extent 1)", p.vocab, q.vocab);
  detail::check_tokens_in_vocab(tree.tokens(), p.vocab, fn);
  detail::validate_multi_draft(tree.tokens(), tree.parents(), p, q, mode, fn);
  detail::multi_draft_scratch s;
  return detail::multi_draft_walk(tree.tokens(), tree.parents(), p, q, mode, rng, s, fn);
}

//! Ragged-batch multi-draft verification: request r's rows start at node_indptr[r] + r in both
//! tensors; its stream is philox_stream(seed, stream_id(request_ids[r] (or r), step)).
template <tensor_like TargetProbs, tensor_like DraftProbs>
[[nodiscard]] verify_batch_result verify_multi_draft_batch(const host& policy, const token_tree_batch& batch,
                                                           const TargetProbs& target_probs,
                                                           const DraftProbs& draft_probs, draft_sampling mode,
                                                           std::uint64_t seed, std::uint32_t step,
                                                           std::span<const std::uint32_t> request_ids = {}) {
  constexpr std::string_view fn = "specdec::verify_multi_draft_batch";
  const std::int64_t rows = batch.total_nodes() + batch.num_requests();
  const auto p = detail::to_rows(target_probs, rows, fn, "target_probs");
  const auto q = detail::to_rows(draft_probs, rows, fn, "draft_probs");
  require_equal(fn, "draft_probs vocab (extent 1)", p.vocab, q.vocab);
  detail::check_tokens_in_vocab(batch.tokens(), p.vocab, fn);
  detail::check_request_ids(request_ids, batch.num_requests(), fn);
  for (int r = 0; r < batch.num_requests(); ++r) {
    const auto t = detail::batch_request(batch, r);
    detail::validate_multi_draft(t.tokens, t.parents, detail::batch_rows(p, batch, r), detail::batch_rows(q, batch, r),
                                 mode, fn);
  }
  return detail::run_batch(policy, batch.num_requests(), [&](int r) {
    auto rng = detail::request_stream(seed, step, request_ids, r);
    const auto t = detail::batch_request(batch, r);
    detail::multi_draft_scratch s;
    return detail::multi_draft_walk(t.tokens, t.parents, detail::batch_rows(p, batch, r),
                                    detail::batch_rows(q, batch, r), mode, rng, s, fn);
  });
}

}  // namespace specdec
