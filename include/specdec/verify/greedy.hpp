#pragma once
//! \file greedy.hpp
//! Greedy tree verification (speculative *decoding* in GLIDE §3's terms: Leviathan et al.'s
//! acceptance rule at temperature 0). A node is greedy-reachable when every token on its root path
//! equals the target argmax at that token's parent; the accepted path ends at the deepest reachable
//! node (the lowest node index among equally deep ones), and the bonus token is the target argmax
//! after it (at the root when nothing matches). Output equals the target's own greedy decoding token
//! for token. Argmax ties resolve to the lowest token id, as specdec::greedy_token does.
//!
//! Duplicate siblings (two children of one node carrying the same token) have the same context, so
//! the walk treats them as one node with the union of their subtrees: every matching child is
//! followed, not just the first, and the accepted path is the longest greedy-matching path in the
//! tree whatever its shape. (Following only the first matching sibling accepted a shorter path in
//! about 2% of random small-vocabulary trees.) The single-tree, batched and decoder
//! (decoder/verifiers.hpp greedy_verifier) paths all run detail::greedy_walk.
//!
//! Non-finite numbers: a row the walk reads (the root's, each reachable node's that has children, and
//! the bonus row) must hold finite or -inf values: NaN or +inf throws specdec::invalid_argument
//! naming the request, row and token, and so does a row read that is all -inf. Rows the walk does not
//! read are never looked at.

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/execution.hpp"
#include "specdec/sampling/detail/vec.hpp"
#include "specdec/sampling/logits_processor.hpp"
#include "specdec/sampling/sampler.hpp"  // greedy_token, the rule the walk shares (kept for includers)
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/detail/batch.hpp"
#include "specdec/verify/detail/tree_arrays.hpp"
#include "specdec/verify/verify_result.hpp"

namespace specdec {

namespace detail {
//! Argmax of rows.row(r), lowest id on ties (specdec::greedy_token's rule and row kernels), after
//! checking the row: no NaN or +inf, and a value above -inf. request >= 0 names the batch request in
//! the message. O(V).
inline std::int32_t greedy_row_argmax(const prob_rows& rows, std::int64_t r, std::string_view fn, int request) {
  const auto row = rows.row(r);
  const row_ref at = request >= 0 ? row_ref{fn, "target_logits", -1, request, r} : row_ref{fn, "target_logits", r};
  const float m = checked_logit_scan(row, at).max;  // the samplers' check: one mechanism for the policy
  return static_cast<std::int32_t>(first_index_of(row.data(), row.size(), m));
}

//! The walk of the file comment in one pass over the nodes in index (topological) order: node i is
//! reachable iff its parent is (or is the root) and tokens[i] equals the argmax of the parent's row
//! (`argmax_of(s)` for row s = node + 1, slot 0 the root), asked once per parent on first use.
template <class ArgmaxOf>
verify_result greedy_walk_by(std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                             ArgmaxOf&& argmax_of) {
  const std::size_t n = tokens.size();
  // One allocation: argmax of row s (s = node + 1, slot 0 = the root; -2 = not read yet), then the
  // depth of each node when reachable (-1 when not).
  std::vector<std::int32_t> buf(2 * n + 1, -2);
  std::int32_t* const argmax = buf.data();
  std::int32_t* const reach = buf.data() + n + 1;
  std::int32_t best = -1, best_depth = -1;
  for (std::size_t i = 0; i < n; ++i) {
    const std::int32_t p = parents[i];
    reach[i] = -1;
    if (p >= 0 && reach[p] < 0) continue;
    std::int32_t& a = argmax[p + 1];
    if (a == -2) a = argmax_of(p + 1);
    if (tokens[i] != a) continue;
    reach[i] = p < 0 ? 0 : reach[p] + 1;
    if (reach[i] > best_depth) best = static_cast<std::int32_t>(i), best_depth = reach[i];
  }
  verify_result res;
  res.accepted.resize(static_cast<std::size_t>(best_depth + 1));
  for (std::int32_t v = best, k = best_depth; v >= 0; v = parents[static_cast<std::size_t>(v)], --k)
    res.accepted[static_cast<std::size_t>(k)] = v;
  const std::int32_t b = argmax[best + 1];
  res.bonus = b != -2 ? b : argmax_of(best + 1);
  return res;
}

//! greedy_walk_by over the rows' argmaxes (greedy_row_argmax: each row read checked). O(n + (rows
//! read) * V).
inline verify_result greedy_walk(std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                                 const prob_rows& rows, std::string_view fn, int request = -1) {
  return greedy_walk_by(tokens, parents, [&](std::int64_t s) { return greedy_row_argmax(rows, s, fn, request); });
}
}  // namespace detail

//! Greedy verification of one tree against the target's logits (or probabilities: only the argmax
//! matters), float [n+1, V] with the row convention of verify_result.hpp. Any valid tree, duplicate
//! siblings included: the accepted path is the longest greedy-matching one (file comment).
//! Preconditions: tree tokens in [0, V) (checked); each row read holds a value above -inf and no NaN
//! or +inf (checked). Complexity: O(n + (r + 1) * V) for the r reachable nodes with children (r =
//! accepted.size() without duplicate siblings: only rows on the accepted path are read).
template <tensor_like Logits>
[[nodiscard]] verify_result verify_greedy(const token_tree& tree, const Logits& target_logits) {
  constexpr std::string_view fn = "specdec::verify_greedy";
  const auto rows = detail::to_rows(target_logits, tree.size() + 1, fn, "target_logits");
  detail::check_tokens_in_vocab(tree.tokens(), rows.vocab, fn);
  return detail::greedy_walk(tree.tokens(), tree.parents(), rows, fn);
}

//! Greedy verification of a ragged batch: request r's rows are target_logits[node_indptr[r] + r ..
//! node_indptr[r+1] + r] (n_r + 1 rows each, back to back), verified as verify_greedy does (row
//! numbers in messages are local to the request). Requests run in parallel on `policy`.
template <tensor_like Logits>
[[nodiscard]] verify_batch_result verify_greedy_batch(const host& policy, const token_tree_batch& batch,
                                                      const Logits& target_logits) {
  constexpr std::string_view fn = "specdec::verify_greedy_batch";
  const auto rows = detail::to_rows(target_logits, batch.total_nodes() + batch.num_requests(), fn, "target_logits");
  detail::check_tokens_in_vocab(batch.tokens(), rows.vocab, fn);
  return detail::run_batch(policy, batch.num_requests(), [&](int r) {
    const auto t = detail::batch_request(batch, r);
    return detail::greedy_walk(t.tokens, t.parents, detail::batch_rows(rows, batch, r), fn, r);
  });
}

namespace detail {

//! The seam between the array form of verify_greedy_batch and its backends (like rope_backend):
//!   static void run(const Policy&, const tree_verify_arrays&);
//! The host backend is below, the cuda one in verify/greedy.cuh.
SPECDEC_BACKEND_SEAM(greedy_batch_backend, "verify_greedy_batch", "specdec/verify/greedy.cuh");

template <>
struct greedy_batch_backend<host> {
  static void run(const host& policy, const tree_verify_arrays& a) {
    constexpr std::string_view fn = "specdec::verify_greedy_batch";
    run_tree_verify_host(policy, a, fn, [&](int r, auto tokens, auto parents, const prob_rows& rows) {
      return greedy_walk(tokens, parents, rows, fn, r);
    });
  }
};

//! The seam between verify_greedy_batch's penalized form and its backends:
//!   static void run(const Policy&, const tree_verify_arrays&, const penalized_argmax_args&);
//! (the argmax output is the tree arrays' emitted). The host backend is below, the cuda one in
//! verify/greedy.cuh.
SPECDEC_BACKEND_SEAM(greedy_penalized_backend, "verify_greedy_batch (penalties)", "specdec/verify/greedy.cuh");

template <>
struct greedy_penalized_backend<host> {
  static void run(const host& policy, const tree_verify_arrays& a, const penalized_argmax_args& p) {
    constexpr std::string_view fn = "specdec::verify_greedy_batch";
    std::vector<std::int32_t> argmax(static_cast<std::size_t>(p.rows.rows));
    std::int32_t status[3];
    penalized_argmax_args local = p;  // its outputs here: the call's own are written by the walk alone
    local.argmax = argmax.data(), local.rows.status = status;
    penalized_argmax_host(policy, local);  // every row checked (named as p says); nothing written on a throw
    run_tree_verify_host(policy, a, fn, [&](int r, auto tokens, auto parents, const prob_rows&) {
      const std::int32_t* am = argmax.data() + a.node_indptr[r] + r;
      return greedy_walk_by(tokens, parents, [am](std::int64_t s) { return am[s]; });
    });
  }
};

//! The array forms' checks of the trees, logits and outputs (tree_verify_arrays_of, named
//! verify_greedy_batch) and their pointers.
template <class Policy, class NI, class TO, class PA, class LG, class AC, class NA, class BO, class EM, class ST>
[[nodiscard]] tree_verify_arrays greedy_arrays_of(const NI& node_indptr, const TO& tokens, const PA& parents,
                                                  const LG& target_logits, const AC& accepted, const NA& num_accepted,
                                                  const BO& bonus, const EM& emitted, const ST& status) {
  static_assert(LG::rank == 2 && std::is_same_v<std::remove_cv_t<typename LG::element_type>, float>,
                "specdec::verify_greedy_batch: target_logits must be a rank-2 tensor of float [rows, vocab]");
  return tree_verify_arrays_of<Policy>("specdec::verify_greedy_batch", "target_logits",
                                       std::numeric_limits<std::int32_t>::max(), node_indptr, tokens, parents,
                                       target_logits, accepted, num_accepted, bonus, emitted, status);
}

}  // namespace detail

//! Greedy verification of a ragged batch given as arrays, the form a GPU engine holds (its drafter
//! and target leave trees and logits in device memory), with the same walk as verify_greedy:
//!   node_indptr   int32 [R + 1]      request r owns nodes [node_indptr[r], node_indptr[r+1])
//!   tokens        int32 [N]          each in [0, V)
//!   parents       int32 [N]          local, -1 = child of the root, otherwise in [-1, i)
//!   target_logits float [N + R, V]   request r's n_r + 1 rows from row node_indptr[r] + r (row 0 =
//!                                    the root; verify_result.hpp's convention); unit inner stride
//!   accepted      int32 [N]      out request r's accepted local nodes, root child first, at
//!                                    accepted[node_indptr[r] .. + num_accepted[r]); the rest of its
//!                                    slots are unspecified (the device backend uses them as scratch)
//!   num_accepted  int32 [R]      out
//!   bonus         int32 [R]      out the target's argmax after the last accepted node
//!   emitted       int32 [N + R]  out request r's emitted tokens (accepted tokens, then bonus) at
//!                                    emitted[node_indptr[r] + r .. + num_accepted[r] + 1): the
//!                                    only array an engine must copy back to continue
//!   status        int32 [3]      out [error, request, index] (core/device_status.hpp)
//! Results equal verify_greedy on each request's tree, bit for bit (argmax ties: lowest token id).
//!   specdec::host: host-accessible memory; values checked as verify_greedy_batch checks them (a bad
//!     offset, parent, token or read row throws invalid_argument and leaves the outputs untouched);
//!     status {0, -1, -1} on success. Requests in parallel on the policy's threads. O(N + rows read * V).
//!   specdec::cuda (needs verify/greedy.cuh and nvcc): device-accessible memory; shapes checked on the
//!     host, values on the device into `status` (a request with a bad value gets unspecified
//!     outputs); the argmax of every row is computed (one read of the logits), then one walk per
//!     request. Enqueued on policy.stream without synchronisation, graph-capturable.
template <execution_policy Policy, class NI, class TO, class PA, class LG, class AC, class NA, class BO, class EM,
          class ST>
  requires(detail::int32_array<NI> && detail::int32_array<TO> && detail::int32_array<PA> && tensor_like<LG> &&
           detail::int32_output<AC> && detail::int32_output<NA> && detail::int32_output<BO> &&
           detail::int32_output<EM> && detail::int32_output<ST>)
void verify_greedy_batch(const Policy& policy, const NI& node_indptr_in, const TO& tokens_in, const PA& parents_in,
                         const LG& target_logits_in, const AC& accepted_in, const NA& num_accepted_in,
                         const BO& bonus_in, const EM& emitted_in, const ST& status_in) {
  const auto a = detail::greedy_arrays_of<Policy>(node_indptr_in, tokens_in, parents_in, target_logits_in, accepted_in,
                                                  num_accepted_in, bonus_in, emitted_in, status_in);
  detail::greedy_batch_backend<Policy>::run(policy, a);
}

//! verify_greedy_batch with each request's repetition and contextual penalties: the walk above over
//! each row's penalized argmax (penalized_argmax_batch, sampling/logits_processor.hpp), read from
//! the logits in place: the result of process_logits_batch(..., context, ...) at temperature 0 and
//! then verify_greedy_batch on the processed rows, without writing or copying the rows.
//!   params, row_params, context   as penalized_argmax_batch's (row_params [N + R]; context per row)
//!   emitted                       also the rows' argmaxes in between (the device backend's scratch)
//! Every row is checked as process_logits_batch checks it (host: invalid_argument, nothing written;
//! cuda: the row's report in `status` (device_error::params, ::context, ::row) even when the walk
//! does not read it, then the walk's own reports; the first report stays). Cost: one read of every
//! row, not of the rows the walk visits only (a penalty can move any row's argmax). cuda: V as
//! penalized_argmax_batch allows it (its bitmap in one block's shared memory: every V <= 2^20 on
//! sm_90), two kernels on policy.stream, no synchronisation, graph-capturable.
template <execution_policy Policy, class NI, class TO, class PA, class LG, tensor_like Pa, class RP, class AC, class NA,
          class BO, class EM, class ST>
  requires(detail::int32_array<NI> && detail::int32_array<TO> && detail::int32_array<PA> && tensor_like<LG> &&
           detail::int32_array<RP> && detail::int32_output<AC> && detail::int32_output<NA> &&
           detail::int32_output<BO> && detail::int32_output<EM> && detail::int32_output<ST>)
void verify_greedy_batch(const Policy& policy, const NI& node_indptr_in, const TO& tokens_in, const PA& parents_in,
                         const LG& target_logits_in, const Pa& params_in, const RP& row_params_in,
                         const penalty_context& context, const AC& accepted_in, const NA& num_accepted_in,
                         const BO& bonus_in, const EM& emitted_in, const ST& status_in) {
  constexpr std::string_view fn = "specdec::verify_greedy_batch";
  const auto a = detail::greedy_arrays_of<Policy>(node_indptr_in, tokens_in, parents_in, target_logits_in, accepted_in,
                                                  num_accepted_in, bonus_in, emitted_in, status_in);
  const auto p = detail::penalized_argmax_args_of<Policy>("specdec::verify_greedy_batch", target_logits_in, params_in,
                                                          row_params_in, context,
                                                          emitted_in, status_in, "emitted", "target_logits");
  // what the argmax pass reads must not share memory with the walk's outputs either (a graph replay
  // would read them changed)
  const auto acc = as_view(accepted_in);
  const auto nacc = as_view(num_accepted_in);
  const auto bon = as_view(bonus_in);
  for (const auto& [name, array] : {std::pair<const char*, strided_view<const std::int32_t, 1>>{"row_params", as_view(row_params_in)},
                                     {"context.distinct", context.distinct},
                                     {"context.last", context.last}, {"context.context_indptr", context.context_indptr},
                                     {"context.context_length", context.context_length},
                                     {"context.row_context", context.row_context},
                                     {"context.path_indptr", context.path_indptr}, {"context.path", context.path}})
    require_disjoint(fn, "accepted", acc, "num_accepted", nacc, "bonus", bon, name, array);
  require_disjoint(fn, "accepted", acc, "num_accepted", nacc, "bonus", bon, "params", as_view(params_in));
  detail::greedy_penalized_backend<Policy>::run(policy, a, p);
}

}  // namespace specdec
