#pragma once
//! \file tree_arrays.hpp
//! The array form shared by the ragged-batch tree verifiers that a GPU engine calls
//! (verify_greedy_batch, verify_sample_and_match_batch): one set of arguments, checked once on the
//! host before any backend runs (tree_verify_arrays_of), and on the host backend one validate ->
//! walk every request -> write the outputs sequence (run_tree_verify_host).

#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "specdec/core/config.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/detail/batch.hpp"
#include "specdec/verify/verify_result.hpp"

namespace specdec::detail {

//! The arrays of one array-form tree verification, as raw pointers (a kernel parameter):
//!   node_indptr int32 [R + 1], tokens and parents int32 [N] (parents local, -1 = root child),
//!   rows        float [N + R, V], row stride row_stride: request r's n_r + 1 rows (logits for
//!               greedy, probabilities for the stochastic verifiers) from row node_indptr[r] + r,
//!   accepted int32 [N], num_accepted and bonus int32 [R], emitted int32 [N + R], status int32 [3]
//!   (the meaning of each is documented at verify_greedy_batch's array form).
struct tree_verify_arrays {
  std::int32_t requests = 0, nodes = 0;
  std::int64_t vocab = 0, row_stride = 0;
  const std::int32_t* node_indptr = nullptr;
  const std::int32_t* tokens = nullptr;
  const std::int32_t* parents = nullptr;
  const float* rows = nullptr;
  std::int32_t* accepted = nullptr;
  std::int32_t* num_accepted = nullptr;
  std::int32_t* bonus = nullptr;
  std::int32_t* emitted = nullptr;
  std::int32_t* status = nullptr;

  // Where request r's answer goes (b = node_indptr[r]); the one writer of the outputs for the host
  // and every cuda verifier kernel. Node v (local) accepted at depth j, with its token:
  SPECDEC_HOST_DEVICE void put_accepted(std::int32_t r, std::int32_t b, std::int32_t j, std::int32_t v,
                                        std::int32_t token) const {
    accepted[b + j] = v;
    emitted[b + r + j] = token;
  }
  // k nodes accepted, then the bonus token y (emitted after them):
  SPECDEC_HOST_DEVICE void put_bonus(std::int32_t r, std::int32_t b, std::int32_t k, std::int32_t y) const {
    emitted[b + r + k] = y;
    num_accepted[r] = k;
    bonus[r] = y;
  }
};

//! The checks of a float [rows, vocab] tensor of an array-form verification under Policy: memory the
//! policy can dereference, extent(0) == rows, extent(1) == vocab (-1: any, in [1, max_vocab]), unit
//! inner stride, rows that do not overlap, a non-null pointer when non-empty.
template <class Policy, class V>
void require_row_tensor(std::string_view fn, std::string_view name, const V& t, std::int64_t rows, std::int64_t vocab,
                        std::int64_t max_vocab) {
  require_policy_memory<Policy>(fn, name, t);
  require_shape(fn, name, t, {rows, vocab});
  require(t.extent(1) >= 1 && t.extent(1) <= max_vocab, fn, name,
          "vocab (extent 1) in [1, " + std::to_string(max_vocab) + "]", t.extent(1));
  require_unit_inner_stride(fn, name, t);
  require(t.stride(0) >= t.extent(1) || t.extent(0) <= 1, fn, name, "row stride >= vocab (rows do not overlap)",
          t.stride(0));
}

//! require_outputs_apart (core/tensor.hpp) over the outputs of an array-form verification (accepted,
//! num_accepted, bonus, emitted, status) and the (name, view) input pairs.
template <class AC, class NA, class BO, class EM, class ST, class... In>
void for_each_input_apart_from_outputs(std::string_view fn, const AC& accepted, const NA& num_accepted,
                                       const BO& bonus, const EM& emitted, const ST& status, const In&... inputs) {
  require_outputs_apart(fn,
                        std::forward_as_tuple("accepted", accepted, "num_accepted", num_accepted, "bonus", bonus,
                                              "emitted", emitted, "status", status),
                        std::forward_as_tuple(inputs...));
}

//! Every host-side check of an array-form tree verification under Policy (shapes, strides, memory
//! spaces, int32 limits, vocab <= max_vocab); returns the pointers. `rows_name` names the float
//! tensor in messages ("target_logits", "target_probs").
template <class Policy, class NI, class TO, class PA, class RW, class AC, class NA, class BO, class EM, class ST>
[[nodiscard]] tree_verify_arrays tree_verify_arrays_of(std::string_view fn, std::string_view rows_name,
                                                       std::int64_t max_vocab, const NI& node_indptr_in,
                                                       const TO& tokens_in, const PA& parents_in, const RW& rows_in,
                                                       const AC& accepted_in, const NA& num_accepted_in,
                                                       const BO& bonus_in, const EM& emitted_in,
                                                       const ST& status_in) {
  const auto node_indptr = as_view(node_indptr_in);
  const auto tokens = as_view(tokens_in);
  const auto parents = as_view(parents_in);
  const auto rows = as_view(rows_in);
  const auto accepted = as_view(accepted_in);
  const auto num_accepted = as_view(num_accepted_in);
  const auto bonus = as_view(bonus_in);
  const auto emitted = as_view(emitted_in);
  const auto status = as_view(status_in);
  const auto [R, N] = require_batch_counts(fn, "bonus", bonus, "tokens", tokens, /*plus_requests=*/true);
  require_policy_array<Policy>(fn, "node_indptr", node_indptr, R + 1);
  require_policy_array<Policy>(fn, "tokens", tokens, N);
  require_policy_array<Policy>(fn, "parents", parents, N);
  require_policy_array<Policy>(fn, "accepted", accepted, N);
  require_policy_array<Policy>(fn, "num_accepted", num_accepted, R);
  require_policy_array<Policy>(fn, "bonus", bonus, R);
  require_policy_array<Policy>(fn, "emitted", emitted, N + R);
  require_policy_array<Policy>(fn, "status", status, 3);
  require_row_tensor<Policy>(fn, rows_name, rows, N + R, -1, max_vocab);
  // The outputs are written while the trees are still read (a bonus written into node_indptr would
  // move the next request's rows): each disjoint from the others and from every input.
  for_each_input_apart_from_outputs(fn, accepted, num_accepted, bonus, emitted, status, "node_indptr", node_indptr,
                                    "tokens", tokens, "parents", parents, rows_name, rows);
  tree_verify_arrays a;
  a.requests = static_cast<std::int32_t>(R), a.nodes = static_cast<std::int32_t>(N);
  a.vocab = rows.extent(1), a.row_stride = rows.stride(0);
  a.node_indptr = node_indptr.data(), a.tokens = tokens.data(), a.parents = parents.data(), a.rows = rows.data();
  a.accepted = accepted.data(), a.num_accepted = num_accepted.data(), a.bonus = bonus.data();
  a.emitted = emitted.data(), a.status = status.data();
  return a;
}

//! The arrays of an array-form verification that also reads the draft's rows and draws from
//! per-request Philox streams (chain speculative sampling, multi-draft): the tree arrays (rows = the
//! target's probabilities), the draft's rows with the same row numbering, and each request's seed
//! and stream.
struct draft_verify_arrays {
  tree_verify_arrays tree;
  const float* draft_rows = nullptr;
  std::int64_t draft_stride = 0;
  const std::uint64_t* seeds = nullptr;
  const std::uint64_t* streams = nullptr;
};

//! A request's draft rows, numbered as its target rows `p` (run_tree_verify_host's) are.
inline prob_rows draft_rows_of(const draft_verify_arrays& a, const prob_rows& p) {
  prob_rows q = p;
  q.data = a.draft_rows + p.first_row * a.draft_stride;
  q.row_stride = a.draft_stride;
  return q;
}

//! tree_verify_arrays_of for the target's rows (target_probs, or target_logits: `rows_name`), then
//! the same checks for draft_probs (its rows numbered as the target's) and for seeds and streams ([R]
//! each); returns the pointers.
template <class Policy, class NI, class TO, class PA, class PR, class QR, class SE, class SR, class AC, class NA,
          class BO, class EM, class ST>
[[nodiscard]] draft_verify_arrays draft_verify_arrays_of(std::string_view fn, std::string_view rows_name,
                                                         std::int64_t max_vocab, const NI& node_indptr,
                                                         const TO& tokens, const PA& parents, const PR& target_probs,
                                                         const QR& draft_probs_in, const SE& seeds_in,
                                                         const SR& streams_in, const AC& accepted,
                                                         const NA& num_accepted, const BO& bonus, const EM& emitted,
                                                         const ST& status) {
  draft_verify_arrays a;
  a.tree = tree_verify_arrays_of<Policy>(fn, rows_name, max_vocab, node_indptr, tokens, parents, target_probs,
                                         accepted, num_accepted, bonus, emitted, status);
  const auto q = as_view(draft_probs_in);
  require_row_tensor<Policy>(fn, "draft_probs", q, static_cast<std::int64_t>(a.tree.nodes) + a.tree.requests,
                             a.tree.vocab, max_vocab);
  const auto seeds = as_view(seeds_in);
  const auto streams = as_view(streams_in);
  require_policy_array<Policy>(fn, "seeds", seeds, a.tree.requests);
  require_policy_array<Policy>(fn, "streams", streams, a.tree.requests);
  for_each_input_apart_from_outputs(fn, as_view(accepted), as_view(num_accepted), as_view(bonus), as_view(emitted),
                                    as_view(status), "draft_probs", q, "seeds", seeds, "streams", streams);
  a.draft_rows = q.data(), a.draft_stride = q.stride(0);
  a.seeds = seeds.data(), a.streams = streams.data();
  return a;
}

//! The host backend of an array-form tree verification: checks the values (offsets, parents, tokens)
//! as the token_tree forms do, runs walk(r, tokens, parents, rows) -> verify_result for every request
//! on the policy's threads, and only then writes the outputs, so a call that throws leaves them
//! untouched. status = {0, -1, -1} on success.
template <class Walk>
void run_tree_verify_host(const host& policy, const tree_verify_arrays& a, std::string_view fn, Walk&& walk) {
  validate_indptr(fn, "node_indptr", "node_indptr", a.node_indptr, a.requests, a.nodes, "tokens.extent(0)");
  for (std::int32_t r = 0; r < a.requests; ++r) {
    const std::int32_t b = a.node_indptr[r], n = a.node_indptr[r + 1] - b;
    validate_tree_arrays(fn, {a.tokens + b, static_cast<std::size_t>(n)}, {a.parents + b, static_cast<std::size_t>(n)});
  }
  check_tokens_in_vocab({a.tokens, static_cast<std::size_t>(a.nodes)}, a.vocab, fn);
  const verify_batch_result res = run_batch(policy, a.requests, [&](int r) {
    const std::int32_t b = a.node_indptr[r], n = a.node_indptr[r + 1] - b;
    const prob_rows rows{a.rows + (static_cast<std::int64_t>(b) + r) * a.row_stride, a.row_stride, n + 1, a.vocab,
                         r, static_cast<std::int64_t>(b) + r};
    return walk(r, std::span<const std::int32_t>(a.tokens + b, static_cast<std::size_t>(n)),
                std::span<const std::int32_t>(a.parents + b, static_cast<std::size_t>(n)), rows);
  });
  for (std::int32_t r = 0; r < a.requests; ++r) {
    const std::int32_t b = a.node_indptr[r];
    const auto acc = res.accepted_nodes(r);
    const auto k = static_cast<std::int32_t>(acc.size());
    for (std::int32_t j = 0; j < k; ++j) {
      const std::int32_t v = acc[static_cast<std::size_t>(j)];
      a.put_accepted(r, b, j, v, a.tokens[b + v]);
    }
    a.put_bonus(r, b, k, res.bonus[static_cast<std::size_t>(r)]);
  }
  a.status[0] = 0, a.status[1] = -1, a.status[2] = -1;
}

}  // namespace specdec::detail
