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
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "specdec/core/execution.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/sampling/sampler.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/detail/batch.hpp"
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
inline verify_result sample_and_match_walk(std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                                           const prob_rows& rows, philox_stream& rng, std::string_view fn) {
  const child_index ch(parents);
  std::vector<std::int32_t> cur{-1}, next;
  verify_result res;
  for (;;) {
    const std::int32_t y = draw_from_probs(rows.row(cur.front() + 1), rng, rows.ref(fn, "target_probs", cur.front() + 1));
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

}  // namespace specdec
