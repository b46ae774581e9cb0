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
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/core/config.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/sampling/draft_sampling.hpp"
#include "specdec/sampling/sampler.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/detail/batch.hpp"
#include "specdec/verify/detail/logits_walk.hpp"
#include "specdec/verify/detail/stochastic.hpp"
#include "specdec/verify/detail/tree_arrays.hpp"
#include "specdec/verify/verify_result.hpp"

namespace specdec {

namespace detail {

//! The up-front checks of verify_multi_draft: every child's token has q > 0 in its parent's draft row
//! (draft_at(row, token): that entry, checked under the non-finite policy), p there admissible when
//! `p` is given (the probabilities forms), and, without replacement, siblings carry distinct tokens.
template <class DraftAt>
void validate_multi_draft_by(std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                             const prob_rows* p, DraftAt&& draft_at, draft_sampling mode, std::string_view fn) {
  require_draft_sampling(fn, "mode", mode);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const float qx = draft_at(parents[i] + 1, tokens[i]);
    if (!(qx > 0.0f)) [[unlikely]]
      throw_invalid_argument(fn, "draft_probs",
                             "q > 0 at the parent's draft row for every child's token (node " + std::to_string(i) +
                                 ", token " + std::to_string(tokens[i]) + ")",
                             qx);
    if (p != nullptr) checked_prob(*p, parents[i] + 1, tokens[i], fn, "target_probs");
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

inline void validate_multi_draft(std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                                 const prob_rows& p, const prob_rows& q, draft_sampling mode, std::string_view fn) {
  validate_multi_draft_by(
      tokens, parents, &p, [&](std::int64_t row, std::int32_t t) { return checked_prob(q, row, t, fn, "draft_probs"); },
      mode, fn);
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

//! The walk of verify_multi_draft after its up-front checks, over rows from callables: target(r,
//! decide) and draft(r, decide) return local row r of the target and of the draft (walk_row), each
//! checked in full when `decide` (the node has children: its rows decide). A node's two rows are
//! fetched once when the walk reaches it and must stay valid until it moves on.
template <class TargetRow, class DraftRow>
verify_result multi_draft_walk_by(std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                                  draft_sampling mode, philox_stream& rng, multi_draft_scratch& s,
                                  TargetRow&& target, DraftRow&& draft) {
  const child_index ch(parents);
  verify_result res;
  std::int32_t cur = -1;
  for (;;) {
    const bool decide = !ch.of(cur).empty();  // rows the node's decisions use, in full (q only where drafts were drawn)
    const walk_row p = target(static_cast<std::int64_t>(cur) + 1, decide);
    const walk_row q = draft(static_cast<std::int64_t>(cur) + 1, decide);
    const auto prow = p.v;
    const auto qrow = q.v;
    const row_ref& at_p = p.at;
    const row_ref& at_q = q.at;
    const auto v = prow.size();
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

inline verify_result multi_draft_walk(std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                                      const prob_rows& p, const prob_rows& q, draft_sampling mode,
                                      philox_stream& rng, multi_draft_scratch& s, std::string_view fn) {
  return multi_draft_walk_by(
      tokens, parents, mode, rng, s,
      [&](std::int64_t r, bool decide) {
        if (decide) check_prob_row(p, r, fn, "target_probs");
        return walk_row{p.row(r), p.ref(fn, "target_probs", r)};
      },
      [&](std::int64_t r, bool decide) {
        if (decide) check_prob_row(q, r, fn, "draft_probs");
        return walk_row{q.row(r), q.ref(fn, "draft_probs", r)};
      });
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

namespace detail {

//! Length of the CUDA kernel's residual_ops lists (in shared memory, 17 KiB): the updates since the
//! residual last restarted from p or q, and the rejected tokens without replacement. A tree of up
//! to 1024 nodes never fills them; a node that would is reported as device_error::fanout.
inline constexpr int multi_draft_max_rejections = 1024;

//! One update of a node's residual (multi_draft_walk's residual_update and its zero-residual reset).
enum class residual_op : std::uint8_t {
  sub_p,  //!< w = max(0, p - c q), drawn tokens keep p (a rejection while p' = p)
  sub_w,  //!< w = max(0, w - c q), drawn tokens keep w
  reset   //!< w = q / remain, drawn tokens 0 (a rejection that left w all zero while p' = w)
};

//! A node's residual p' kept as the list of updates made to p since the walk reached the node,
//! instead of multi_draft_walk's [V] vector of doubles: weight(i) applies them to p(i), q(i) in
//! order, each as the host's residual_block_kernel computes it (base - c q with one rounding: the
//! FMA the host uses at its FMA levels; see verify_multi_draft_batch), so the weights are the same
//! doubles. The CUDA kernel keeps it in shared memory (no global scratch per request); its host twin
//! in tests/verify/test_multi_draft_arrays.cpp runs the same code. An aggregate without
//! initialisers (a __shared__ variable cannot have a constructor): start_node() first.
struct residual_ops {
  double coef[multi_draft_max_rejections];  //!< sub_p / sub_w: c = total / remain; reset: remain
  std::int32_t ndrawn[multi_draft_max_rejections];  //!< op o applies to the tokens drawn[0, ndrawn[o]) as drawn
  residual_op kind[multi_draft_max_rejections];
  std::int32_t drawn[multi_draft_max_rejections];  //!< without replacement: the node's rejected tokens, in order
  int begin, end, count_drawn;                     //!< the residual is ops [begin, end)

  SPECDEC_HOST_DEVICE void start_node() noexcept { begin = end = count_drawn = 0; }
  //! Whether another rejection would overflow the lists.
  [[nodiscard]] SPECDEC_HOST_DEVICE bool full() const noexcept {
    return end >= multi_draft_max_rejections || count_drawn >= multi_draft_max_rejections;
  }
  //! A rejection's update w <- max(0, base - c q): base = w when `from_w`, else p (the earlier ops
  //! are then void).
  SPECDEC_HOST_DEVICE void push_update(bool from_w, double c) noexcept {
    if (!from_w) begin = end = 0;
    kind[end] = from_w ? residual_op::sub_w : residual_op::sub_p;
    coef[end] = c;
    ndrawn[end] = count_drawn;
    ++end;
  }
  //! A rejection left w all zero while p' = w: p' becomes q / remain with the drawn tokens at 0.
  SPECDEC_HOST_DEVICE void reset_to_q(double remain) noexcept {
    begin = 0, end = 1;
    kind[0] = residual_op::reset;
    coef[0] = remain;
    ndrawn[0] = count_drawn;
  }
  SPECDEC_HOST_DEVICE void add_drawn(std::int32_t token) noexcept { drawn[count_drawn++] = token; }
  //! The residual weight of token i (p, q: the node's target and draft rows).
  [[nodiscard]] SPECDEC_HOST_DEVICE double weight(const float* p, const float* q, std::int64_t i) const noexcept {
    return weight_of(p[i], q[i], i);
  }
  //! The same from token i's entries p_i = p[i], q_i = q[i], already loaded (the kernel loads a batch
  //! of tokens' entries before it weighs any: cdf_device.cuh's split_weight).
  [[nodiscard]] SPECDEC_HOST_DEVICE double weight_of(float p_i, float q_i, std::int64_t i) const noexcept {
    int k = -1;  // position of i among the drawn tokens (distinct: without replacement only)
    for (int j = 0; j < count_drawn; ++j)
      if (drawn[j] == i) {
        k = j;
        break;
      }
    const double qi = static_cast<double>(q_i);
    double w = 0.0;
    for (int o = begin; o < end; ++o) {
      const bool keep = k >= 0 && k < ndrawn[o];
      switch (kind[o]) {
        case residual_op::sub_p: {
          const double base = static_cast<double>(p_i);
          const double d = fma(-coef[o], qi, base);
          w = keep ? base : d > 0.0 ? d : 0.0;
          break;
        }
        case residual_op::sub_w: {
          const double d = fma(-coef[o], qi, w);
          w = keep ? w : d > 0.0 ? d : 0.0;
          break;
        }
        case residual_op::reset: w = keep ? 0.0 : qi / coef[o]; break;
      }
    }
    return w;
  }
};

//! The array form's arguments: the tree arrays (rows = the target's), the draft's rows with the same
//! row numbering, each request's Philox seed and stream, and how the children were drawn.
struct multi_draft_args : draft_verify_arrays {
  draft_sampling mode = draft_sampling::with_replacement;
};

//! The arguments of the logits form: the walk's (tree.rows = the target's logits, only read) and the
//! rows (logits_walk.hpp).
struct multi_draft_logits_args {
  multi_draft_args walk;
  logits_walk_rows logits;
};

//! The seam between the array forms of verify_multi_draft_batch and their backends:
//!   static void run(const Policy&, const multi_draft_args&);         the probabilities form
//!   static void run(const Policy&, const multi_draft_logits_args&);  the logits form
//! The host backend is below, the cuda one in verify/multi_draft.cuh.
SPECDEC_BACKEND_SEAM(multi_draft_backend, "verify_multi_draft_batch", "specdec/verify/multi_draft.cuh");

template <>
struct multi_draft_backend<host> {
  static void run(const host& policy, const multi_draft_args& a) {
    constexpr std::string_view fn = "specdec::verify_multi_draft_batch";
    run_tree_verify_host(policy, a.tree, fn, [&](int r, auto tokens, auto parents, const prob_rows& p) {
      const prob_rows q = draft_rows_of(a, p);
      validate_multi_draft(tokens, parents, p, q, a.mode, fn);
      philox_stream rng(a.seeds[r], a.streams[r]);
      multi_draft_scratch s;
      return multi_draft_walk(tokens, parents, p, q, a.mode, rng, s, fn);
    });
  }
  //! The logits form: the tree checked first (run_tree_verify_host), then per request on the
  //! policy's threads the draft checks (every child's q > 0 at its parent's row; siblings distinct
  //! without replacement), and the walk, each target row it reaches checked as process_logits_batch
  //! checks it, processed and turned into probabilities in the request's workspace row
  //! (processed_probs_row_host); the outputs are written once every request is done.
  static void run(const host& policy, const multi_draft_logits_args& a) {
    constexpr std::string_view fn = "specdec::verify_multi_draft_batch";
    run_tree_verify_host(policy, a.walk.tree, fn, [&](int r, auto tokens, auto parents, const prob_rows& lg) {
      const prob_rows q = draft_rows_of(a.walk, lg);
      validate_multi_draft_by(
          tokens, parents, nullptr, [&](std::int64_t row, std::int32_t t) { return checked_prob(q, row, t, fn, "draft_probs"); },
          a.walk.mode, fn);
      philox_stream rng(a.walk.seeds[r], a.walk.streams[r]);
      multi_draft_scratch s;
      return multi_draft_walk_by(
          tokens, parents, a.walk.mode, rng, s,
          [&](std::int64_t k, bool) {
            const std::int64_t i = lg.first_row + k;
            return walk_row{processed_probs_row_host(a.logits, r, i, fn), row_ref{fn, "target_logits", i, r, k}};
          },
          [&](std::int64_t k, bool decide) {
            if (decide) check_prob_row(q, k, fn, "draft_probs");
            return walk_row{q.row(k), q.ref(fn, "draft_probs", k)};
          });
    });
  }
};

//! The logits form's checks (named verify_multi_draft_batch) and arguments: the mode, then
//! draft_logits_walk_of's (the tree arrays, draft_probs, seeds, streams and outputs as the
//! probabilities form's; target_logits, params, row_params, the context when given, the workspace;
//! everything written disjoint from everything read).
template <class Policy, class NI, class TO, class PA, class LG, class QR, class Pa, class RP, class SE, class SR,
          class WS, class AC, class NA, class BO, class EM, class ST>
[[nodiscard]] multi_draft_logits_args multi_draft_logits_args_of(
    const NI& node_indptr, const TO& tokens, const PA& parents, const LG& target_logits, const QR& draft_probs,
    draft_sampling mode, const Pa& params, const RP& row_params, const penalty_context* context, const SE& seeds,
    const SR& streams, const WS& workspace, const AC& accepted, const NA& num_accepted, const BO& bonus,
    const EM& emitted, const ST& status) {
  constexpr std::string_view fn = "specdec::verify_multi_draft_batch";
  static_assert(LG::rank == 2 && std::is_same_v<std::remove_cv_t<typename LG::element_type>, float>,
                "specdec::verify_multi_draft_batch: target_logits must be a rank-2 tensor of float [rows, vocab]");
  static_assert(QR::rank == 2 && std::is_same_v<std::remove_cv_t<typename QR::element_type>, float>,
                "specdec::verify_multi_draft_batch: draft_probs must be a rank-2 tensor of float [rows, vocab]");
  static_assert(WS::rank == 2 && std::is_same_v<typename WS::element_type, float>,
                "specdec::verify_multi_draft_batch: workspace must be a writable rank-2 tensor of float [requests, vocab]");
  require_draft_sampling(fn, "mode", mode);
  multi_draft_logits_args a;
  auto [walk, logits] = draft_logits_walk_of<Policy>(fn, node_indptr, tokens, parents, target_logits, draft_probs,
                                                     params, row_params, context, seeds, streams, workspace, accepted,
                                                     num_accepted, bonus, emitted, status);
  static_cast<draft_verify_arrays&>(a.walk) = walk;
  a.walk.mode = mode;
  a.logits = logits;
  return a;
}

}  // namespace detail

//! Multi-draft speculative sampling over a ragged batch given as arrays (the form a GPU engine
//! holds), with the walk of verify_multi_draft per request. The tree arrays and outputs are those of
//! verify_greedy_batch's array form (node_indptr, tokens, parents; accepted, num_accepted, bonus,
//! emitted, status), and
//!   target_probs float [N + R, V]  request r's n_r + 1 target rows from row node_indptr[r] + r
//!                                  (row 0 = the root's distribution, row i + 1 = after node i)
//!   draft_probs  float [N + R, V]  its draft rows, numbered the same (node i was drawn from draft row
//!                                  parents[i] + 1)
//!   mode                           how every node's children were drawn from its draft row
//!   seeds, streams uint64 [R]      request r draws from philox_stream(seeds[r], streams[r])
//! Both tensors: unit inner stride, rows that do not overlap, V <= 2,097,152. Results equal
//! verify_multi_draft per request with that stream, bit for bit wherever the host evaluates the
//! residual update max(0, w - c q) with a fused multiply-add, as it does at every FMA-capable level
//! (AVX2, AVX-512, aarch64: GCC's default -ffp-contract=fast contracts it) and the device always does; the portable x86-64 level
//! rounds c q first, so there a residual weight can differ in its last bit and a draw that lands
//! within that of a boundary (about one in 10^15) can pick the neighbouring token.
//!   specdec::host: host-accessible memory; values checked as the token_tree form checks them
//!     (invalid_argument, outputs untouched); status {0, -1, -1}.
//!   specdec::cuda (needs verify/multi_draft.cuh and nvcc): device-accessible memory; shapes checked
//!     on the host, values on the device into `status` (device_error::node_indptr, parent, token,
//!     draft_prob, row, draft_row, sibling; a request with a bad value gets unspecified outputs). One
//!     block per request; a node whose residual would need more than 1024 updates, or (without
//!     replacement) more than 1024 rejected tokens, is reported as device_error::fanout (e.g. a
//!     2000-node tree whose root rejects 1500 children). Enqueued on policy.stream without
//!     synchronisation, graph-capturable.
//! Complexity: host O(n log n) validation per request, O(V) per rejected child and for the bonus.
//! Device: the residual is re-derived per token from its update list, so the j-th rejection at a
//! node costs O(V x j) (and O(V x j) more without replacement, for the drawn-token lookup): a node
//! rejecting k children costs O(V k^2), against O(V k) on the host; fine for the few children per
//! node of drafted trees (bench_cuda_step's BM_verify_multi_draft_batch measures 1-16). The sibling
//! check without replacement is O(n^2) per request (each node against its earlier siblings).
template <execution_policy Policy, class NI, class TO, class PA, class PR, class QR, class SE, class SR, class AC,
          class NA, class BO, class EM, class ST>
  requires(detail::int32_array<NI> && detail::int32_array<TO> && detail::int32_array<PA> && tensor_like<PR> &&
           tensor_like<QR> && detail::uint64_array<SE> && detail::uint64_array<SR> && detail::int32_output<AC> &&
           detail::int32_output<NA> && detail::int32_output<BO> && detail::int32_output<EM> &&
           detail::int32_output<ST>)
void verify_multi_draft_batch(const Policy& policy, const NI& node_indptr, const TO& tokens, const PA& parents,
                              const PR& target_probs, const QR& draft_probs_in, draft_sampling mode, const SE& seeds_in,
                              const SR& streams_in, const AC& accepted, const NA& num_accepted, const BO& bonus,
                              const EM& emitted, const ST& status) {
  constexpr std::string_view fn = "specdec::verify_multi_draft_batch";
  static_assert(PR::rank == 2 && std::is_same_v<std::remove_cv_t<typename PR::element_type>, float>,
                "specdec::verify_multi_draft_batch: target_probs must be a rank-2 tensor of float [rows, vocab]");
  static_assert(QR::rank == 2 && std::is_same_v<std::remove_cv_t<typename QR::element_type>, float>,
                "specdec::verify_multi_draft_batch: draft_probs must be a rank-2 tensor of float [rows, vocab]");
  require_draft_sampling(fn, "mode", mode);
  detail::multi_draft_args a;
  static_cast<detail::draft_verify_arrays&>(a) = detail::draft_verify_arrays_of<Policy>(
      fn, "target_probs", detail::device_cdf_max_vocab, node_indptr, tokens, parents, target_probs, draft_probs_in, seeds_in,
      streams_in, accepted, num_accepted, bonus, emitted, status);
  a.mode = mode;
  detail::multi_draft_backend<Policy>::run(policy, a);
}

//! verify_multi_draft_batch from the target's logits: each target row the walk reaches (the root's,
//! then one per accepted node) is processed (params[row_params[i]]: temperature, top-k, top-p, min-p,
//! eta; with a penalty_context also the repetition and contextual penalties), turned into
//! probabilities in the request's workspace row and used there for every decision at that node and
//! the bonus draw; rows the walk does not reach are never read. No [N + R, V] probability buffer. The
//! result equals process_logits_batch(target_logits copy, params, row_params[, context]),
//! logits_to_probs_batch, then the probabilities form, bit for bit (the same row functions on both
//! backends; on cuda under process_logits_batch's conditions for bit-identity and the probabilities
//! form's, an FMA-capable host level).
//!   target_logits float [N + R, V]  request r's n_r + 1 rows from row node_indptr[r] + r; unit inner
//!                                   stride; V <= 2,097,152; only read
//!   draft_probs   float [N + R, V]  as the probabilities form's (node i drawn from row parents[i] + 1)
//!   mode                            as the probabilities form's
//!   params        sampling_params [P]; row_params int32 [N + R], entries in [0, P)
//!   context       (penalty form) as process_logits_batch's, row i's context and suffix
//!   seeds, streams uint64 [R]       as the probabilities form's
//!   workspace     float [R, V]      scratch: request r's processed rows, one after another; its
//!                                   contents afterwards are unspecified
//!   other arguments and outputs     as the probabilities form's
//! What the call writes (outputs, workspace) must be disjoint from what it reads. Checked: every
//! child's q > 0 at its parent's draft row and distinct siblings without replacement, up front (p at
//! a child's token cannot be known before its row is processed); the q rows a node's decisions read,
//! in full; each target row the walk reaches as process_logits_batch checks it.
//!   specdec::host: invalid_argument naming the row, the outputs untouched; requests on the policy's
//!     threads.
//!   specdec::cuda (needs verify/multi_draft.cuh and nvcc): device-accessible memory;
//!     process_logits_batch's reports in `status` (device_error::params, ::context, ::row with the
//!     row of target_logits), the rest as the probabilities form's (fanout included); a request with
//!     a bad value gets unspecified outputs. One block per request. Enqueued on policy.stream without
//!     synchronisation, graph-capturable.
template <execution_policy Policy, class NI, class TO, class PA, class LG, class QR, tensor_like Pa, class RP,
          class SE, class SR, tensor_like WS, class AC, class NA, class BO, class EM, class ST>
  requires(detail::int32_array<NI> && detail::int32_array<TO> && detail::int32_array<PA> && tensor_like<LG> &&
           tensor_like<QR> && detail::int32_array<RP> && detail::uint64_array<SE> && detail::uint64_array<SR> &&
           detail::int32_output<AC> && detail::int32_output<NA> && detail::int32_output<BO> &&
           detail::int32_output<EM> && detail::int32_output<ST>)
void verify_multi_draft_batch(const Policy& policy, const NI& node_indptr, const TO& tokens, const PA& parents,
                              const LG& target_logits, const QR& draft_probs, draft_sampling mode, const Pa& params,
                              const RP& row_params, const SE& seeds, const SR& streams, const WS& workspace,
                              const AC& accepted, const NA& num_accepted, const BO& bonus, const EM& emitted,
                              const ST& status) {
  detail::multi_draft_backend<Policy>::run(
      policy, detail::multi_draft_logits_args_of<Policy>(node_indptr, tokens, parents, target_logits, draft_probs, mode,
                                                         params, row_params, nullptr, seeds, streams, workspace,
                                                         accepted, num_accepted, bonus, emitted, status));
}

//! The logits form with each request's repetition and contextual penalties (a penalty_context, as
//! process_logits_batch's six-argument form takes it).
template <execution_policy Policy, class NI, class TO, class PA, class LG, class QR, tensor_like Pa, class RP,
          class SE, class SR, tensor_like WS, class AC, class NA, class BO, class EM, class ST>
  requires(detail::int32_array<NI> && detail::int32_array<TO> && detail::int32_array<PA> && tensor_like<LG> &&
           tensor_like<QR> && detail::int32_array<RP> && detail::uint64_array<SE> && detail::uint64_array<SR> &&
           detail::int32_output<AC> && detail::int32_output<NA> && detail::int32_output<BO> &&
           detail::int32_output<EM> && detail::int32_output<ST>)
void verify_multi_draft_batch(const Policy& policy, const NI& node_indptr, const TO& tokens, const PA& parents,
                              const LG& target_logits, const QR& draft_probs, draft_sampling mode, const Pa& params,
                              const RP& row_params, const penalty_context& context, const SE& seeds,
                              const SR& streams, const WS& workspace, const AC& accepted, const NA& num_accepted,
                              const BO& bonus, const EM& emitted, const ST& status) {
  detail::multi_draft_backend<Policy>::run(
      policy, detail::multi_draft_logits_args_of<Policy>(node_indptr, tokens, parents, target_logits, draft_probs, mode,
                                                         params, row_params, &context, seeds, streams, workspace,
                                                         accepted, num_accepted, bonus, emitted, status));
}

}  // namespace specdec
