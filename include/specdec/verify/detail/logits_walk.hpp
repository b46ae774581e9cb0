#pragma once
//! \file logits_walk.hpp
//! What the logits forms of the stochastic array-form verifiers share (verify_sample_and_match_batch,
//! verify_chain_speculative_batch, verify_multi_draft_batch): the target's logits as
//! process_logits_batch sees them and a
//! workspace row per request, in which each row the walk reaches is processed and turned into
//! probabilities. Their checks (logits_walk_rows_of) and the host's row step
//! (processed_probs_row_host); the CUDA kernels' row step is logits_walk.cuh's.

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>

#include "specdec/core/tensor.hpp"
#include "specdec/sampling/logits_processor.hpp"
#include "specdec/sampling/penalty_context.hpp"
#include "specdec/verify/detail/tree_arrays.hpp"

namespace specdec::detail {

//! The rows of a logits form: process_logits_batch's arguments over the target's logits (only read:
//! rows.logits is never written) and request r's workspace row at workspace + r * workspace_stride.
struct logits_walk_rows {
  process_logits_batch_args rows;
  float* workspace = nullptr;
  std::int64_t workspace_stride = 0;
};

//! A read argument of a logits form, by name, for logits_walk_rows_of's disjointness checks.
template <class A>
struct named_read {
  const char* name;
  const A& array;
};
template <class A>
named_read(const char*, const A&) -> named_read<A>;  // spelled out: clang before 17 deduces no aggregate

//! The logits form's checks (named `fn`) beyond the tree's (`tree`, from tree_verify_arrays_of over
//! target_logits and the outputs): target_logits float [N + R, V], params and row_params as
//! process_logits_batch's (and the penalty context when given), the workspace float [R, V] (unit
//! inner stride, rows that do not overlap); everything the call writes (workspace and the outputs)
//! disjoint from everything it reads (target_logits, params, row_params and `reads`) and from each
//! other, since a graph replay would otherwise read changed inputs. The entry points assert the
//! element types (float logits, a writable float workspace) with their own names.
template <class Policy, class LG, class Pa, class RP, class WS, class AC, class NA, class BO, class EM, class ST,
          class... R>
[[nodiscard]] logits_walk_rows logits_walk_rows_of(std::string_view fn, const tree_verify_arrays& tree,
                                                   const LG& target_logits, const Pa& params, const RP& row_params,
                                                   const penalty_context* context, const WS& workspace_in,
                                                   const AC& accepted_in, const NA& num_accepted_in,
                                                   const BO& bonus_in, const EM& emitted_in, const ST& status_in,
                                                   const named_read<R>&... reads) {
  logits_walk_rows a;
  a.rows = process_logits_batch_of<Policy, false>(fn, target_logits, params, row_params, status_in, "target_logits");
  const auto work = as_view(workspace_in);
  require_row_tensor<Policy>(fn, "workspace", work, tree.requests, tree.vocab, device_cdf_max_vocab);
  require(work.extent(0) == 0 || work.data() != nullptr, fn, "workspace", "a non-null data pointer", "nullptr");
  a.workspace = work.data(), a.workspace_stride = work.stride(0);
  const auto acc = as_view(accepted_in);
  const auto nacc = as_view(num_accepted_in);
  const auto bon = as_view(bonus_in);
  const auto emi = as_view(emitted_in);
  const auto st = as_view(status_in);
  const auto written_apart = [&](const char* name, const auto& array) {
    require_disjoint(fn, "workspace", work, "accepted", acc, "num_accepted", nacc, "bonus", bon, "emitted", emi,
                     "status", st, name, array);
  };
  written_apart("target_logits", as_view(target_logits));
  written_apart("params", as_view(params));
  written_apart("row_params", as_view(row_params));
  (written_apart(reads.name, as_view(reads.array)), ...);
  if (context != nullptr)
    attach_penalty_context<Policy>(fn, a.rows, *context, "workspace", work, "accepted", acc, "num_accepted", nacc,
                                   "bonus", bon, "emitted", emi, "status", st);
  return a;
}

//! The checks and arguments of a logits form that also reads draft rows (verify_chain_speculative_batch,
//! verify_multi_draft_batch): draft_verify_arrays_of over target_logits (the tree, draft_probs, seeds,
//! streams, outputs), then logits_walk_rows_of with every read argument.
template <class Policy, class NI, class TO, class PA, class LG, class QR, class Pa, class RP, class SE, class SR,
          class WS, class AC, class NA, class BO, class EM, class ST>
[[nodiscard]] std::pair<draft_verify_arrays, logits_walk_rows> draft_logits_walk_of(
    std::string_view fn, const NI& node_indptr, const TO& tokens, const PA& parents, const LG& target_logits,
    const QR& draft_probs, const Pa& params, const RP& row_params, const penalty_context* context, const SE& seeds,
    const SR& streams, const WS& workspace, const AC& accepted, const NA& num_accepted, const BO& bonus,
    const EM& emitted, const ST& status) {
  const draft_verify_arrays walk =
      draft_verify_arrays_of<Policy>(fn, "target_logits", device_cdf_max_vocab, node_indptr, tokens, parents,
                                     target_logits, draft_probs, seeds, streams, accepted, num_accepted, bonus, emitted,
                                     status);
  return {walk, logits_walk_rows_of<Policy>(fn, walk.tree, target_logits, params, row_params, context, workspace,
                                            accepted, num_accepted, bonus, emitted, status,
                                            named_read{"draft_probs", draft_probs}, named_read{"seeds", seeds},
                                            named_read{"streams", streams}, named_read{"node_indptr", node_indptr},
                                            named_read{"tokens", tokens}, named_read{"parents", parents})};
}

//! The host's row step: row i of the target's logits (request r's) checked as process_logits_batch
//! checks it (check_batch_row_host: invalid_argument naming `fn`, target_logits and the row), copied
//! into request r's workspace row, processed there (process_batch_row_host) and turned into
//! probabilities (processed_row_to_probs). Returns that row; valid until the request's next row.
inline std::span<float> processed_probs_row_host(const logits_walk_rows& a, std::int32_t r, std::int64_t i,
                                                 std::string_view fn) {
  const auto v = static_cast<std::size_t>(a.rows.vocab);
  const std::span<float> work(a.workspace + r * a.workspace_stride, v);
  row_penalty rp;
  const logit_scan scan = check_batch_row_host(a.rows, i, fn, "target_logits", rp, nullptr);
  const float* row = a.rows.logits + i * a.rows.stride;
  std::copy(row, row + v, work.begin());
  thread_local sampling_workspace ws;
  process_batch_row_host(a.rows, i, work, rp, scan, ws);
  processed_row_to_probs(work);
  return work;
}

}  // namespace specdec::detail
