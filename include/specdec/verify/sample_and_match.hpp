#pragma once
//! \file sample_and_match.hpp
//! Lossless stochastic verification for ANY draft tree, including deterministic top-k trees (beam,
//! CAPE, Cartesian, n-gram): at the root draw one token y from the processed target distribution;
//! if some child of the current node carries y, accept it and repeat from there; otherwise y is the
//! bonus token and the step ends. Every emitted token is a fresh draw from the target distribution
//! conditioned on exactly the tokens emitted before it, so the output is distributed as the target's
//! autoregressive sampling whatever the tree (the tree only decides how many draws one target forward
//! pays for). Exactly one target sample per visited node.
//!
//! This is NOT TokenSwift's Algorithm 1 (lines 12-13), which draws target tokens independently for
//! every candidate group and keeps the longest match: picking the best of several independent
//! draws biases the output towards tokens the tree covers (tests/verify show the bias).

#include <algorithm>
#include <limits>
#include <type_traits>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "specdec/core/execution.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/sampling/logits_processor.hpp"
#include "specdec/sampling/penalty_context.hpp"
#include "specdec/sampling/sampler.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/detail/batch.hpp"
#include "specdec/verify/detail/logits_walk.hpp"
#include "specdec/verify/detail/tree_arrays.hpp"
#include "specdec/verify/detail/stochastic.hpp"
#include "specdec/verify/verify_result.hpp"

namespace specdec {

namespace detail {
//! The walk of the file comment over equivalence classes of nodes: duplicate siblings (children of
//! equivalent nodes carrying one token) have the same context, so the walk keeps every node whose
//! root path equals the tokens emitted so far (`cur`), draws the next token from the row of the
//! first of them (the lowest index; all have the same target distribution) and moves to every child
//! of any of them that carries the draw. The draws, and so the output law, are those of a walk over
//! a tree with the duplicates merged; the accepted path is the root path of the first node of the
//! last class, a path of the given tree. Following only the first matching child instead lost
//! acceptance on trees with duplicate siblings, never exactness.
//! `draw(row)` draws the next token from the processed target distribution of local row `row` (0:
//! the root's; i + 1: after node i), however it gets that row.
template <class Draw>
verify_result sample_and_match_walk_by(std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                                       Draw&& draw) {
  const child_index ch(parents);
  std::vector<std::int32_t> cur{-1}, next;
  verify_result res;
  for (;;) {
    const std::int32_t y = draw(static_cast<std::int64_t>(cur.front()) + 1);
    next.clear();
    for (const std::int32_t node : cur)
      for (const std::int32_t c : ch.of(node))
        if (tokens[static_cast<std::size_t>(c)] == y) next.push_back(c);
    if (next.empty()) {
      res.bonus = y;
      break;
    }
    std::sort(next.begin(), next.end());  // the class's row: its lowest node index
    cur.swap(next);
  }
  for (std::int32_t v = cur.front(); v >= 0; v = parents[static_cast<std::size_t>(v)]) res.accepted.push_back(v);
  std::reverse(res.accepted.begin(), res.accepted.end());
  return res;
}

//! The walk over probability rows.
inline verify_result sample_and_match_walk(std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                                           const prob_rows& rows, philox_stream& rng, std::string_view fn) {
  return sample_and_match_walk_by(tokens, parents, [&](std::int64_t s) {
    return draw_from_probs(rows.row(s), rng, rows.ref(fn, "target_probs", s));
  });
}
}  // namespace detail

//! sample_and_match on one tree. `target_probs` is float [n+1, V] (processed target distributions,
//! rows non-negative; each visited row is normalised by its own sum). Draws from `rng` (seed it per
//! request and step: philox_stream(seed, stream_id(request, step))), two words per visited node.
//! Preconditions: tree tokens in [0, V). Non-finite policy (verify_result.hpp): each visited row is
//! checked in its draw's block-sum pass (NaN, +-inf, negative entries, an all-zero row throw
//! invalid_argument naming the row and token); rows the walk does not visit are not read.
//! Complexity: O(n + (accepted + 1) * V).
template <tensor_like Probs>
[[nodiscard]] verify_result verify_sample_and_match(const token_tree& tree, const Probs& target_probs,
                                                    philox_stream& rng) {
  constexpr std::string_view fn = "specdec::verify_sample_and_match";
  const auto rows = detail::to_rows(target_probs, tree.size() + 1, fn, "target_probs");
  detail::check_tokens_in_vocab(tree.tokens(), rows.vocab, fn);
  return detail::sample_and_match_walk(tree.tokens(), tree.parents(), rows, rng, fn);
}

//! Ragged-batch sample_and_match: request r's rows are target_probs[node_indptr[r] + r ..] (n_r + 1
//! rows) and it draws from philox_stream(seed, stream_id(request_ids[r] (or r), step)), so the
//! result does not depend on the thread count. Requests run in parallel on `policy`. Errors name the
//! request and its row (when several requests fail, the one reported depends on the thread timing).
template <tensor_like Probs>
[[nodiscard]] verify_batch_result verify_sample_and_match_batch(const host& policy, const token_tree_batch& batch,
                                                                const Probs& target_probs, std::uint64_t seed,
                                                                std::uint32_t step,
                                                                std::span<const std::uint32_t> request_ids = {}) {
  constexpr std::string_view fn = "specdec::verify_sample_and_match_batch";
  const auto rows = detail::to_rows(target_probs, batch.total_nodes() + batch.num_requests(), fn, "target_probs");
  detail::check_tokens_in_vocab(batch.tokens(), rows.vocab, fn);
  detail::check_request_ids(request_ids, batch.num_requests(), fn);
  return detail::run_batch(policy, batch.num_requests(), [&](int r) {
    auto rng = detail::request_stream(seed, step, request_ids, r);
    const auto t = detail::batch_request(batch, r);
    return detail::sample_and_match_walk(t.tokens, t.parents, detail::batch_rows(rows, batch, r), rng, fn);
  });
}

namespace detail {

//! The class step of the CUDA walk (verify/sample_and_match.cuh), which keeps classes as marks:
//! mark[i] = depth(i) + 1 once node i has joined a class, 0 before. After drawing y from the class
//! at `level` (level 0: the root's; level k > 0: the nodes marked k), node i joins the next class
//! iff it carries y and its parent is in the current class. Shared with the serial host twin the
//! tests run (tests/verify/test_sample_and_match_arrays.cpp).
SPECDEC_HOST_DEVICE inline bool joins_class(const std::int32_t* tokens, const std::int32_t* parents,
                                            const std::int32_t* mark, std::int32_t i, std::int64_t y,
                                            std::int32_t level) noexcept {
  if (tokens[i] != y) return false;
  const std::int32_t p = parents[i];
  return p < 0 ? level == 0 : (level > 0 && mark[p] == level);
}

//! The array form's arguments: the tree arrays plus each request's Philox seed and stream.
struct sample_and_match_args {
  tree_verify_arrays tree;
  const std::uint64_t* seeds = nullptr;
  const std::uint64_t* streams = nullptr;
};

//! The seam between the array forms of verify_sample_and_match_batch and their backends:
//!   static void run(const Policy&, const sample_and_match_args&);         the probabilities form
//!   static void run(const Policy&, const sample_and_match_logits_args&);  the logits form
//! The host backend is below, the cuda one in verify/sample_and_match.cuh.
SPECDEC_BACKEND_SEAM(sample_and_match_backend, "verify_sample_and_match_batch", "specdec/verify/sample_and_match.cuh");

//! The arguments of the logits form: the walk's (tree.rows = the target's logits, only read) and the
//! rows (logits_walk.hpp).
struct sample_and_match_logits_args {
  sample_and_match_args walk;
  logits_walk_rows logits;
};

//! The host form of the logits form (its backend): the tree checked first (run_tree_verify_host),
//! then each request's walk on the policy's threads, each visited row checked as
//! process_logits_batch checks it, processed and turned into probabilities in the request's workspace
//! row (processed_probs_row_host, invalid_argument naming target_logits and the row) and drawn from;
//! the outputs are written once every request is done.
inline void sample_and_match_logits_host(const host& policy, const sample_and_match_logits_args& a) {
  constexpr std::string_view fn = "specdec::verify_sample_and_match_batch";
  const tree_verify_arrays& t = a.walk.tree;
  run_tree_verify_host(policy, t, fn, [&](int r, auto tokens, auto parents, const prob_rows&) {
    philox_stream rng(a.walk.seeds[r], a.walk.streams[r]);
    const std::int64_t first = static_cast<std::int64_t>(t.node_indptr[r]) + r;
    return sample_and_match_walk_by(tokens, parents, [&](std::int64_t s) {
      const std::int64_t i = first + s;
      return draw_from_probs(processed_probs_row_host(a.logits, r, i, fn), rng, row_ref{fn, "target_logits", i, r, s});
    });
  });
}

template <>
struct sample_and_match_backend<host> {
  static void run(const host& policy, const sample_and_match_args& a) {
    constexpr std::string_view fn = "specdec::verify_sample_and_match_batch";
    run_tree_verify_host(policy, a.tree, fn, [&](int r, auto tokens, auto parents, const prob_rows& rows) {
      philox_stream rng(a.seeds[r], a.streams[r]);
      return sample_and_match_walk(tokens, parents, rows, rng, fn);
    });
  }
  static void run(const host& policy, const sample_and_match_logits_args& a) { sample_and_match_logits_host(policy, a); }
};

//! The logits form's checks (named verify_sample_and_match_batch) and arguments: the tree arrays
//! and outputs as the probabilities form's, target_logits [N + R, V] (V <= 2^21) with its entries
//! and (when given) context as process_logits_batch's, seeds and streams [R], the workspace
//! float [R, V] (unit inner stride, rows that do not overlap); everything the call writes (outputs,
//! workspace) disjoint from everything it reads and from each other.
template <class Policy, class NI, class TO, class PA, class LG, class Pa, class RP, class SE, class SR, class WS,
          class AC, class NA, class BO, class EM, class ST>
[[nodiscard]] sample_and_match_logits_args sample_and_match_logits_args_of(
    const NI& node_indptr, const TO& tokens, const PA& parents, const LG& target_logits, const Pa& params,
    const RP& row_params, const penalty_context* context, const SE& seeds_in, const SR& streams_in,
    const WS& workspace_in, const AC& accepted_in, const NA& num_accepted_in, const BO& bonus_in,
    const EM& emitted_in, const ST& status_in) {
  constexpr std::string_view fn = "specdec::verify_sample_and_match_batch";
  static_assert(LG::rank == 2 && std::is_same_v<std::remove_cv_t<typename LG::element_type>, float>,
                "specdec::verify_sample_and_match_batch: target_logits must be a rank-2 tensor of float [rows, vocab]");
  static_assert(WS::rank == 2 && std::is_same_v<typename WS::element_type, float>,
                "specdec::verify_sample_and_match_batch: workspace must be a writable rank-2 tensor of float [requests, vocab]");
  sample_and_match_logits_args a;
  a.walk.tree = tree_verify_arrays_of<Policy>(fn, "target_logits", device_cdf_max_vocab, node_indptr, tokens, parents,
                                              target_logits, accepted_in, num_accepted_in, bonus_in, emitted_in,
                                              status_in);
  const auto seeds = as_view(seeds_in);
  const auto streams = as_view(streams_in);
  // the rows' checks before the seeds' and streams' (this form's order since session 47)
  a.logits = logits_walk_rows_of<Policy>(fn, a.walk.tree, target_logits, params, row_params, context, workspace_in,
                                         accepted_in, num_accepted_in, bonus_in, emitted_in, status_in,
                                         named_read{"seeds", seeds}, named_read{"streams", streams},
                                         named_read{"node_indptr", node_indptr}, named_read{"tokens", tokens},
                                         named_read{"parents", parents});
  require_policy_array<Policy>(fn, "seeds", seeds, a.walk.tree.requests);
  require_policy_array<Policy>(fn, "streams", streams, a.walk.tree.requests);
  a.walk.seeds = seeds.data(), a.walk.streams = streams.data();
  return a;
}

}  // namespace detail

//! sample_and_match over a ragged batch given as arrays, the form a GPU engine holds (trees and
//! processed target probabilities in device memory, a CUDA graph replaying the step), with the walk of
//! verify_sample_and_match. The tree arrays and outputs are those of verify_greedy_batch's array form
//! (node_indptr, tokens, parents; accepted, num_accepted, bonus, emitted, status), and
//!   target_probs float [N + R, V]  request r's n_r + 1 rows from row node_indptr[r] + r, rows
//!                                  non-negative (each visited row normalised by its own sum);
//!                                  unit inner stride; V <= 2,097,152
//!   seeds        uint64 [R]        request r draws from philox_stream(seeds[r], streams[r]), two words
//!   streams      uint64 [R]        per visited node: with streams[r] = stream_id(request id, step) the
//!                                  draws are verify_sample_and_match_batch's (the token_tree form).
//!                                  Device arrays, so a captured graph draws fresh numbers each step
//!                                  when the engine updates them.
//! Results equal verify_sample_and_match on each request's tree with that stream, bit for bit: the
//! block sums are added in the host's order and the search is the host's (sampling/detail/
//! cdf_search.hpp), so the same words pick the same token on a CPU and a GPU.
//!   specdec::host: host-accessible memory; values checked as the token_tree form checks them (a bad
//!     offset, parent or token, or a visited row with a NaN, an infinity, a negative entry or no
//!     positive entry, throws invalid_argument and leaves the outputs untouched); status {0, -1, -1}.
//!   specdec::cuda (needs verify/sample_and_match.cuh and nvcc): device-accessible memory; shapes
//!     checked on the host, values on the device into `status` (device_error::row for a visited row
//!     that is not a distribution; a request with a bad value gets unspecified outputs). One block per
//!     request walks its tree, reading only the rows it visits. Enqueued on policy.stream without
//!     synchronisation, graph-capturable.
template <execution_policy Policy, class NI, class TO, class PA, class PR, class SE, class SR, class AC, class NA,
          class BO, class EM, class ST>
  requires(detail::int32_array<NI> && detail::int32_array<TO> && detail::int32_array<PA> && tensor_like<PR> &&
           detail::uint64_array<SE> && detail::uint64_array<SR> && detail::int32_output<AC> &&
           detail::int32_output<NA> && detail::int32_output<BO> && detail::int32_output<EM> &&
           detail::int32_output<ST>)
void verify_sample_and_match_batch(const Policy& policy, const NI& node_indptr, const TO& tokens, const PA& parents,
                                   const PR& target_probs, const SE& seeds_in, const SR& streams_in, const AC& accepted,
                                   const NA& num_accepted, const BO& bonus, const EM& emitted, const ST& status) {
  constexpr std::string_view fn = "specdec::verify_sample_and_match_batch";
  static_assert(PR::rank == 2 && std::is_same_v<std::remove_cv_t<typename PR::element_type>, float>,
                "specdec::verify_sample_and_match_batch: target_probs must be a rank-2 tensor of float [rows, vocab]");
  detail::sample_and_match_args a;
  a.tree = detail::tree_verify_arrays_of<Policy>(fn, "target_probs", detail::device_cdf_max_vocab, node_indptr,
                                                 tokens, parents, target_probs, accepted, num_accepted, bonus, emitted,
                                                 status);
  const auto seeds = as_view(seeds_in);
  const auto streams = as_view(streams_in);
  require_policy_array<Policy>(fn, "seeds", seeds, a.tree.requests);
  require_policy_array<Policy>(fn, "streams", streams, a.tree.requests);
  detail::for_each_input_apart_from_outputs(fn, as_view(accepted), as_view(num_accepted), as_view(bonus),
                                            as_view(emitted), as_view(status), "seeds", seeds, "streams", streams);
  a.seeds = seeds.data(), a.streams = streams.data();
  detail::sample_and_match_backend<Policy>::run(policy, a);
}

//! verify_sample_and_match_batch from the target's logits: each row the walk visits is processed
//! (params[row_params[i]]: temperature, top-k, top-p, min-p, eta; with a penalty_context also the
//! repetition and contextual penalties), turned into probabilities and drawn from, in the request's
//! workspace row; rows the walk does not visit are never read. No [N + R, V] buffer: a step with a
//! 64-node tree and 3 accepted nodes processes 4 rows per request instead of 65. The result equals
//! process_logits_batch(target_logits copy, params, row_params[, context]), logits_to_probs_batch,
//! then the probabilities form, bit for bit (the same row functions on both backends: host, and cuda
//! under process_logits_batch's conditions for bit-identity).
//!   target_logits float [N + R, V]  request r's n_r + 1 rows from row node_indptr[r] + r; unit inner
//!                                   stride; V <= 2,097,152; only read
//!   params        sampling_params [P]; row_params int32 [N + R], entries in [0, P)
//!   context       (penalty form) as process_logits_batch's, row i's context and suffix
//!   seeds, streams uint64 [R]       as the probabilities form's (two words per visited row)
//!   workspace     float [R, V]      scratch: request r's processed rows, one after another; its
//!                                   contents afterwards are unspecified
//!   other arguments and outputs     as the probabilities form's
//! What the call writes (outputs, workspace) must be disjoint from what it reads. Values are
//! checked for the rows the walk visits: the row's entry, its context and suffix, its logits (NaN,
//! +inf, no logit above -inf, or none left by the penalties), as process_logits_batch checks them.
//!   specdec::host: invalid_argument naming the row, the outputs untouched; requests on the policy's
//!     threads (when several requests fail, the one reported depends on the thread timing).
//!   specdec::cuda (needs verify/sample_and_match.cuh and nvcc): device-accessible memory; the same
//!     reports as process_logits_batch's in `status` (device_error::params, ::context, ::row with the
//!     row of target_logits), the tree's as the probabilities form's; a request with a bad value gets
//!     unspecified outputs. One block per request walks its tree and processes each visited row in
//!     its workspace row. Enqueued on policy.stream without synchronisation, graph-capturable.
template <execution_policy Policy, class NI, class TO, class PA, class LG, tensor_like Pa, class RP, class SE, class SR,
          tensor_like WS, class AC, class NA, class BO, class EM, class ST>
  requires(detail::int32_array<NI> && detail::int32_array<TO> && detail::int32_array<PA> && tensor_like<LG> &&
           detail::int32_array<RP> && detail::uint64_array<SE> && detail::uint64_array<SR> &&
           detail::int32_output<AC> && detail::int32_output<NA> && detail::int32_output<BO> &&
           detail::int32_output<EM> && detail::int32_output<ST>)
void verify_sample_and_match_batch(const Policy& policy, const NI& node_indptr, const TO& tokens, const PA& parents,
                                   const LG& target_logits, const Pa& params, const RP& row_params, const SE& seeds,
                                   const SR& streams, const WS& workspace, const AC& accepted, const NA& num_accepted,
                                   const BO& bonus, const EM& emitted, const ST& status) {
  detail::sample_and_match_backend<Policy>::run(
      policy, detail::sample_and_match_logits_args_of<Policy>(node_indptr, tokens, parents, target_logits, params,
                                                              row_params, nullptr, seeds, streams, workspace, accepted,
                                                              num_accepted, bonus, emitted, status));
}

//! The logits form with each request's repetition and contextual penalties (a penalty_context, as
//! process_logits_batch's six-argument form takes it).
template <execution_policy Policy, class NI, class TO, class PA, class LG, tensor_like Pa, class RP, class SE, class SR,
          tensor_like WS, class AC, class NA, class BO, class EM, class ST>
  requires(detail::int32_array<NI> && detail::int32_array<TO> && detail::int32_array<PA> && tensor_like<LG> &&
           detail::int32_array<RP> && detail::uint64_array<SE> && detail::uint64_array<SR> &&
           detail::int32_output<AC> && detail::int32_output<NA> && detail::int32_output<BO> &&
           detail::int32_output<EM> && detail::int32_output<ST>)
void verify_sample_and_match_batch(const Policy& policy, const NI& node_indptr, const TO& tokens, const PA& parents,
                                   const LG& target_logits, const Pa& params, const RP& row_params,
                                   const penalty_context& context, const SE& seeds, const SR& streams,
                                   const WS& workspace, const AC& accepted, const NA& num_accepted, const BO& bonus,
                                   const EM& emitted, const ST& status) {
  detail::sample_and_match_backend<Policy>::run(
      policy, detail::sample_and_match_logits_args_of<Policy>(node_indptr, tokens, parents, target_logits, params,
                                                              row_params, &context, seeds, streams, workspace, accepted,
                                                              num_accepted, bonus, emitted, status));
}

}  // namespace specdec
