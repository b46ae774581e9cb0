#pragma once
//! \file greedy.hpp
//! Greedy tree verification (speculative *decoding* in GLIDE §3's terms: Leviathan et al.'s
//! acceptance rule at temperature 0). The accepted path is the longest root-to-node path whose every
//! token equals the target argmax at its parent; the bonus token is the target argmax at the last
//! accepted node (at the root when nothing matches). Output equals the target's own greedy decoding
//! token for token. Argmax ties resolve to the lowest token id, as specdec::greedy_token does; when
//! siblings repeat a token the lowest-index sibling is followed.

#include <cstdint>
#include <span>

#include "specdec/core/execution.hpp"
#include "specdec/sampling/sampler.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/detail/batch.hpp"
#include "specdec/verify/verify_result.hpp"

namespace specdec {

namespace detail {
inline verify_result greedy_walk(std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                                 const prob_rows& rows) {
  const child_index ch(parents);
  verify_result res;
  std::int32_t cur = -1;
  for (;;) {
    const std::int32_t best = greedy_token(rows.row(cur + 1));
    std::int32_t next = -1;
    for (auto c : ch.of(cur))
      if (tokens[static_cast<std::size_t>(c)] == best) {
        next = c;
        break;
      }
    if (next < 0) {
      res.bonus = best;
      return res;
    }
    res.accepted.push_back(next);
    cur = next;
  }
}
}  // namespace detail

//! Greedy verification of one tree against the target's logits (or probabilities: only the argmax
//! matters), float [n+1, V] with the row convention of verify_result.hpp.
//! Preconditions: tree tokens in [0, V); each visited row has a value above -inf.
//! Complexity: O(n + (accepted + 1) * V): only rows on the accepted path are read.
template <tensor_like Logits>
[[nodiscard]] verify_result verify_greedy(const token_tree& tree, const Logits& target_logits) {
  constexpr std::string_view fn = "specdec::verify_greedy";
  const auto rows = detail::to_rows(target_logits, tree.size() + 1, fn, "target_logits");
  detail::check_tokens_in_vocab(tree.tokens(), rows.vocab, fn);
  return detail::greedy_walk(tree.tokens(), tree.parents(), rows);
}

//! Greedy verification of a ragged batch: request r's rows are target_logits[node_indptr[r] + r ..
//! node_indptr[r+1] + r] (n_r + 1 rows each, back to back). Requests run in parallel on `policy`.
template <tensor_like Logits>
[[nodiscard]] verify_batch_result verify_greedy_batch(const host& policy, const token_tree_batch& batch,
                                                      const Logits& target_logits) {
  constexpr std::string_view fn = "specdec::verify_greedy_batch";
  const auto rows = detail::to_rows(target_logits, batch.total_nodes() + batch.num_requests(), fn, "target_logits");
  detail::check_tokens_in_vocab(batch.tokens(), rows.vocab, fn);
  return detail::run_batch(policy, batch.num_requests(), [&](int r) {
    const auto t = detail::batch_request(batch, r);
    return detail::greedy_walk(t.tokens, t.parents, detail::batch_rows(rows, batch, r));
  });
}

}  // namespace specdec
