#pragma once
//! \file speculative_sampling.hpp
//! Chain speculative sampling (Leviathan et al. 2023; GLIDE §3; TokenSwift Appendix A): the draft
//! proposed x_1..x_n, each x_i drawn from its draft distribution q_i. For i = 1..n accept x_i with
//! probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection emit a token drawn from
//! norm(max(0, p_i - q_i)) and stop; if all are accepted emit a bonus token drawn from p_{n+1}.
//! Exactness (Appendix A): P(emit x) = q(x) min(1, p/q) + (1 - sum_y min(p, q)) max(0, p - q)(x) /
//! (1 - sum_y min(p, q)) = min(p, q)(x) + max(0, p - q)(x) = p(x), and by induction every prefix of the
//! emitted tokens has the target's joint distribution. The per-token acceptance probability is
//! sum_x min(p(x), q(x)) (GLIDE §5.1's alpha; tests check it against this closed form).

#include <cstdint>
#include <limits>
#include <type_traits>
#include <span>
#include <string>

#include "specdec/core/philox.hpp"
#include "specdec/sampling/sampler.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/detail/logits_walk.hpp"
#include "specdec/verify/detail/stochastic.hpp"
#include "specdec/verify/detail/tree_arrays.hpp"
#include "specdec/verify/verify_result.hpp"

namespace specdec {

namespace detail {
//! The up-front checks of verify_chain_speculative: the tree is a chain, and q_i(x_i) of every node
//! is admissible and > 0 (q null: one-hot draft rows at the drafted tokens, q_i(x_i) = 1) and, when
//! `p` is given (the probabilities forms), p_i(x_i) admissible. `request` (-1: none) is for messages.
inline void check_chain_speculative(std::span<const std::int32_t> tok, std::span<const std::int32_t> par,
                                    const prob_rows* p, const prob_rows* q, std::string_view fn,
                                    std::int64_t request = -1) {
  const auto n = static_cast<std::int64_t>(tok.size());
  const auto where = [&] { return request >= 0 ? " of request " + std::to_string(request) : std::string(); };
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    if (par[k] != i - 1) [[unlikely]]
      throw_invalid_argument(fn, "tree", "a chain (parent(i) == i - 1) at node " + std::to_string(i) + where(), par[k]);
    if (q != nullptr) {
      const float qx = checked_prob(*q, i, tok[k], fn, "draft_probs");
      if (!(qx > 0.0f)) [[unlikely]]
        throw_invalid_argument(fn, "draft_probs",
                               "q_i(x_i) > 0 for every drafted token (node " + std::to_string(i) + where() + ")", qx);
    }
    if (p != nullptr) checked_prob(*p, i, tok[k], fn, "target_probs");
  }
}

//! The walk of verify_chain_speculative after its up-front checks, over rows from callables:
//! target(i, decide) returns the target's row i and draft(i) the draft's (walk_row), each checked in
//! full when `decide` / always (the rows a decision is taken on; the bonus row is checked by its
//! draw). Row i's span need stay valid only until the next call of the same callable.
template <class TargetRow, class DraftRow>
verify_result chain_speculative_walk_by(std::span<const std::int32_t> tok, philox_stream& rng, TargetRow&& target,
                                        DraftRow&& draft) {
  const auto n = static_cast<std::int64_t>(tok.size());
  verify_result res;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto x = static_cast<std::size_t>(tok[static_cast<std::size_t>(i)]);
    const walk_row p = target(i, true);  // the rows this step decides on, in full
    const walk_row q = draft(i);
    const double px = p.v[x], qx = q.v[x];
    const double u = rng.uniform_double();
    if (u * qx < px) {  // u < p/q with u in [0, 1): probability min(1, p/q)
      res.accepted.push_back(static_cast<std::int32_t>(i));
      continue;
    }
    res.bonus = sample_residual(p.v, q.v, rng, p.at, q.at);
    return res;
  }
  const walk_row p = target(n, false);
  res.bonus = draw_from_probs(p.v, rng, p.at);
  return res;
}

//! The walk of verify_chain_speculative over one request's rows (p, q: its target and draft rows),
//! checks included; shared by the token_tree form and the host backend of the array form.
inline verify_result chain_speculative_walk(std::span<const std::int32_t> tok, std::span<const std::int32_t> par,
                                            const prob_rows& p, const prob_rows& q, philox_stream& rng,
                                            std::string_view fn) {
  check_chain_speculative(tok, par, &p, &q, fn, p.request);
  return chain_speculative_walk_by(
      tok, rng,
      [&](std::int64_t i, bool decide) {
        if (decide) check_prob_row(p, i, fn, "target_probs");
        return walk_row{p.row(i), p.ref(fn, "target_probs", i)};
      },
      [&](std::int64_t i) {
        check_prob_row(q, i, fn, "draft_probs");
        return walk_row{q.row(i), q.ref(fn, "draft_probs", i)};
      });
}
}  // namespace detail

//! Chain speculative sampling over a chain-shaped tree (node i's parent is i - 1). `target_probs` and
//! `draft_probs` are float [n+1, V] probability rows with the row convention of verify_result.hpp:
//! node i is checked with p = target row i and q = draft row i (both "after node i-1"); draft row n
//! is not read. Preconditions: tree is a chain; tokens in [0, V); q_i(x_i) > 0 (x_i was drawn from
//! q_i); rows are probability distributions (the ratio p/q uses the values as given). Non-finite
//! policy (verify_result.hpp): p_i(x_i) and q_i(x_i) of every node are checked up front, and each row
//! the walk uses (p_i and q_i of every node it decides on, the bonus row) in full before its draw, so
//! no decision is taken on a row that is not a distribution; rows after the first rejection are not
//! read. NaN, +-inf, negative entries and an all-zero row to draw from throw invalid_argument naming
//! the tensor, row and token. Draws two Philox words per checked node plus two for the emitted
//! residual/bonus draw. Complexity: O(n) to validate, O((accepted + 1) * V) to verify.
template <tensor_like TargetProbs, tensor_like DraftProbs>
[[nodiscard]] verify_result verify_chain_speculative(const token_tree& tree, const TargetProbs& target_probs,
                                                     const DraftProbs& draft_probs, philox_stream& rng) {
  constexpr std::string_view fn = "specdec::verify_chain_speculative";
  const int n = tree.size();
  const auto p = detail::to_rows(target_probs, n + 1, fn, "target_probs");
  const auto q = detail::to_rows(draft_probs, n + 1, fn, "draft_probs");
  require_equal(fn, "draft_probs vocab (extent 1)", p.vocab, q.vocab);
  detail::check_tokens_in_vocab(tree.tokens(), p.vocab, fn);
  return detail::chain_speculative_walk(tree.tokens(), tree.parents(), p, q, rng, fn);
}

namespace detail {

//! The array form's arguments: the tree arrays (rows = the target's), the draft's rows with the same
//! row numbering, and each request's Philox seed and stream.
using chain_speculative_args = draft_verify_arrays;

//! The arguments of the logits form: the walk's (tree.rows = the target's logits, only read) and the
//! rows (logits_walk.hpp).
struct chain_speculative_logits_args {
  chain_speculative_args walk;
  logits_walk_rows logits;
};

//! The seam between the array forms of verify_chain_speculative_batch and their backends:
//!   static void run(const Policy&, const chain_speculative_args&);         the probabilities form
//!   static void run(const Policy&, const chain_speculative_logits_args&);  the logits form
//! The host backend is below, the cuda one in verify/speculative_sampling.cuh.
SPECDEC_BACKEND_SEAM(chain_speculative_backend, "verify_chain_speculative_batch",
                     "specdec/verify/speculative_sampling.cuh");

template <>
struct chain_speculative_backend<host> {
  static void run(const host& policy, const chain_speculative_args& a) {
    constexpr std::string_view fn = "specdec::verify_chain_speculative_batch";
    run_tree_verify_host(policy, a.tree, fn, [&](int r, auto tokens, auto parents, const prob_rows& p) {
      philox_stream rng(a.seeds[r], a.streams[r]);
      return chain_speculative_walk(tokens, parents, p, draft_rows_of(a, p), rng, fn);
    });
  }
  //! The logits form: the tree checked first (run_tree_verify_host), then per request on the
  //! policy's threads the chain and q_i(x_i) checks, and the walk, each target row it reaches checked
  //! as process_logits_batch checks it, processed and turned into probabilities in the request's
  //! workspace row (processed_probs_row_host); the outputs are written once every request is done.
  static void run(const host& policy, const chain_speculative_logits_args& a) {
    constexpr std::string_view fn = "specdec::verify_chain_speculative_batch";
    run_tree_verify_host(policy, a.walk.tree, fn, [&](int r, auto tokens, auto parents, const prob_rows& lg) {
      const prob_rows q = draft_rows_of(a.walk, lg);
      check_chain_speculative(tokens, parents, nullptr, &q, fn, r);
      philox_stream rng(a.walk.seeds[r], a.walk.streams[r]);
      return chain_speculative_walk_by(
          tokens, rng,
          [&](std::int64_t s, bool) {
            const std::int64_t i = lg.first_row + s;
            return walk_row{processed_probs_row_host(a.logits, r, i, fn), row_ref{fn, "target_logits", i, r, s}};
          },
          [&](std::int64_t s) {
            check_prob_row(q, s, fn, "draft_probs");
            return walk_row{q.row(s), q.ref(fn, "draft_probs", s)};
          });
    });
  }
};

//! The logits form's checks (named verify_chain_speculative_batch) and arguments (draft_logits_walk_of:
//! the tree arrays, draft_probs, seeds, streams and outputs as the probabilities form's; target_logits,
//! params, row_params, the context when given, the workspace; everything written disjoint from
//! everything read).
template <class Policy, class NI, class TO, class PA, class LG, class QR, class Pa, class RP, class SE, class SR,
          class WS, class AC, class NA, class BO, class EM, class ST>
[[nodiscard]] chain_speculative_logits_args chain_speculative_logits_args_of(
    const NI& node_indptr, const TO& tokens, const PA& parents, const LG& target_logits, const QR& draft_probs,
    const Pa& params, const RP& row_params, const penalty_context* context, const SE& seeds, const SR& streams,
    const WS& workspace, const AC& accepted, const NA& num_accepted, const BO& bonus, const EM& emitted,
    const ST& status) {
  constexpr std::string_view fn = "specdec::verify_chain_speculative_batch";
  static_assert(LG::rank == 2 && std::is_same_v<std::remove_cv_t<typename LG::element_type>, float>,
                "specdec::verify_chain_speculative_batch: target_logits must be a rank-2 tensor of float [rows, vocab]");
  static_assert(QR::rank == 2 && std::is_same_v<std::remove_cv_t<typename QR::element_type>, float>,
                "specdec::verify_chain_speculative_batch: draft_probs must be a rank-2 tensor of float [rows, vocab]");
  static_assert(WS::rank == 2 && std::is_same_v<typename WS::element_type, float>,
                "specdec::verify_chain_speculative_batch: workspace must be a writable rank-2 tensor of float [requests, vocab]");
  auto [walk, logits] = draft_logits_walk_of<Policy>(fn, node_indptr, tokens, parents, target_logits, draft_probs,
                                                     params, row_params, context, seeds, streams, workspace, accepted,
                                                     num_accepted, bonus, emitted, status);
  return {walk, logits};
}

}  // namespace detail

//! Chain speculative sampling over a ragged batch given as arrays (the form a GPU engine holds), with
//! the walk of verify_chain_speculative per request. The tree arrays and outputs are those of
//! verify_greedy_batch's array form (node_indptr, tokens, parents; accepted, num_accepted, bonus,
//! emitted, status); every request's tree must be a chain (parents[i] == i - 1), and
//!   target_probs float [N + R, V]  request r's n_r + 1 target rows from row node_indptr[r] + r
//!   draft_probs  float [N + R, V]  its draft rows, numbered the same (row i = q_i, the distribution
//!                                  node i was drawn from; the last row of each request is not read)
//!   seeds, streams uint64 [R]      request r draws from philox_stream(seeds[r], streams[r]) (as
//!                                  verify_sample_and_match_batch's array form)
//! Both tensors: unit inner stride, rows that do not overlap, V <= 2,097,152. Results equal
//! verify_chain_speculative per request with that stream, bit for bit (the residual's block sums
//! in the host's order, the host's search: sampling/detail/cdf_search.hpp).
//!   specdec::host: host-accessible memory; values checked as the token_tree form checks them
//!     (invalid_argument, outputs untouched); status {0, -1, -1}.
//!   specdec::cuda (needs verify/speculative_sampling.cuh and nvcc): device-accessible memory; shapes
//!     checked on the host, values on the device into `status` (device_error::chain, token,
//!     draft_prob, row, draft_row, ...; a request with a bad value gets unspecified outputs). One
//!     block per request. Enqueued on policy.stream without synchronisation, graph-capturable.
template <execution_policy Policy, class NI, class TO, class PA, class PR, class QR, class SE, class SR, class AC,
          class NA, class BO, class EM, class ST>
  requires(detail::int32_array<NI> && detail::int32_array<TO> && detail::int32_array<PA> && tensor_like<PR> &&
           tensor_like<QR> && detail::uint64_array<SE> && detail::uint64_array<SR> && detail::int32_output<AC> &&
           detail::int32_output<NA> && detail::int32_output<BO> && detail::int32_output<EM> &&
           detail::int32_output<ST>)
void verify_chain_speculative_batch(const Policy& policy, const NI& node_indptr, const TO& tokens, const PA& parents,
                                    const PR& target_probs, const QR& draft_probs_in, const SE& seeds_in,
                                    const SR& streams_in, const AC& accepted, const NA& num_accepted, const BO& bonus,
                                    const EM& emitted, const ST& status) {
  constexpr std::string_view fn = "specdec::verify_chain_speculative_batch";
  static_assert(PR::rank == 2 && std::is_same_v<std::remove_cv_t<typename PR::element_type>, float>,
                "specdec::verify_chain_speculative_batch: target_probs must be a rank-2 tensor of float [rows, vocab]");
  static_assert(QR::rank == 2 && std::is_same_v<std::remove_cv_t<typename QR::element_type>, float>,
                "specdec::verify_chain_speculative_batch: draft_probs must be a rank-2 tensor of float [rows, vocab]");
  const detail::chain_speculative_args a = detail::draft_verify_arrays_of<Policy>(
      fn, "target_probs", detail::device_cdf_max_vocab, node_indptr, tokens, parents, target_probs, draft_probs_in, seeds_in,
      streams_in, accepted, num_accepted, bonus, emitted, status);
  detail::chain_speculative_backend<Policy>::run(policy, a);
}

//! verify_chain_speculative_batch from the target's logits: each target row the walk reaches (rows
//! 0..k of a request that accepts k nodes) is processed (params[row_params[i]]: temperature, top-k,
//! top-p, min-p, eta; with a penalty_context also the repetition and contextual penalties), turned
//! into probabilities in the request's workspace row and used there; rows after the first rejection
//! are never read. No [N + R, V] probability buffer. The result equals process_logits_batch(
//! target_logits copy, params, row_params[, context]), logits_to_probs_batch, then the
//! probabilities form, bit for bit (the same row functions on both backends: host, and cuda under
//! process_logits_batch's conditions for bit-identity).
//!   target_logits float [N + R, V]  request r's n_r + 1 rows from row node_indptr[r] + r; unit inner
//!                                   stride; V <= 2,097,152; only read
//!   draft_probs   float [N + R, V]  as the probabilities form's (row i = q_i)
//!   params        sampling_params [P]; row_params int32 [N + R], entries in [0, P)
//!   context       (penalty form) as process_logits_batch's, row i's context and suffix
//!   seeds, streams uint64 [R]       as the probabilities form's
//!   workspace     float [R, V]      scratch: request r's processed rows, one after another; its
//!                                   contents afterwards are unspecified
//!   other arguments and outputs     as the probabilities form's
//! What the call writes (outputs, workspace) must be disjoint from what it reads. Checked: the chain
//! shape and q_i(x_i) > 0 of every node up front (p_i(x_i) cannot be known before its row is
//! processed), each q row a decision reads in full, and each target row the walk reaches as
//! process_logits_batch checks it (its entry, context and suffix, its logits).
//!   specdec::host: invalid_argument naming the row, the outputs untouched; requests on the policy's
//!     threads.
//!   specdec::cuda (needs verify/speculative_sampling.cuh and nvcc): device-accessible memory;
//!     process_logits_batch's reports in `status` (device_error::params, ::context, ::row with the
//!     row of target_logits), the rest as the probabilities form's; a request with a bad value gets
//!     unspecified outputs. One block per request. Enqueued on policy.stream without
//!     synchronisation, graph-capturable.
template <execution_policy Policy, class NI, class TO, class PA, class LG, class QR, tensor_like Pa, class RP,
          class SE, class SR, tensor_like WS, class AC, class NA, class BO, class EM, class ST>
  requires(detail::int32_array<NI> && detail::int32_array<TO> && detail::int32_array<PA> && tensor_like<LG> &&
           tensor_like<QR> && detail::int32_array<RP> && detail::uint64_array<SE> && detail::uint64_array<SR> &&
           detail::int32_output<AC> && detail::int32_output<NA> && detail::int32_output<BO> &&
           detail::int32_output<EM> && detail::int32_output<ST>)
void verify_chain_speculative_batch(const Policy& policy, const NI& node_indptr, const TO& tokens, const PA& parents,
                                    const LG& target_logits, const QR& draft_probs, const Pa& params,
                                    const RP& row_params, const SE& seeds, const SR& streams, const WS& workspace,
                                    const AC& accepted, const NA& num_accepted, const BO& bonus, const EM& emitted,
                                    const ST& status) {
  detail::chain_speculative_backend<Policy>::run(
      policy, detail::chain_speculative_logits_args_of<Policy>(node_indptr, tokens, parents, target_logits, draft_probs,
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
void verify_chain_speculative_batch(const Policy& policy, const NI& node_indptr, const TO& tokens, const PA& parents,
                                    const LG& target_logits, const QR& draft_probs, const Pa& params,
                                    const RP& row_params, const penalty_context& context, const SE& seeds,
                                    const SR& streams, const WS& workspace, const AC& accepted,
                                    const NA& num_accepted, const BO& bonus, const EM& emitted, const ST& status) {
  detail::chain_speculative_backend<Policy>::run(
      policy, detail::chain_speculative_logits_args_of<Policy>(node_indptr, tokens, parents, target_logits, draft_probs,
                                                               params, row_params, &context, seeds, streams, workspace,
                                                               accepted, num_accepted, bonus, emitted, status));
}

}  // namespace specdec
