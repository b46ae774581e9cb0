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
#include <span>
#include <string>

#include "specdec/core/philox.hpp"
#include "specdec/sampling/sampler.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/detail/stochastic.hpp"
#include "specdec/verify/verify_result.hpp"

namespace specdec {

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
  const auto tok = tree.tokens();
  const auto par = tree.parents();
  for (int i = 0; i < n; ++i) {
    if (par[static_cast<std::size_t>(i)] != i - 1) [[unlikely]]
      throw_invalid_argument(fn, "tree", "a chain (parent(i) == i - 1) at node " + std::to_string(i),
                             par[static_cast<std::size_t>(i)]);
    const float qx = detail::checked_prob(q, i, tok[static_cast<std::size_t>(i)], fn, "draft_probs");
    if (!(qx > 0.0f)) [[unlikely]]
      throw_invalid_argument(fn, "draft_probs", "q_i(x_i) > 0 for every drafted token (node " + std::to_string(i) + ")",
                             qx);
    detail::checked_prob(p, i, tok[static_cast<std::size_t>(i)], fn, "target_probs");
  }
  verify_result res;
  for (int i = 0; i < n; ++i) {
    const auto x = tok[static_cast<std::size_t>(i)];
    detail::check_prob_row(p, i, fn, "target_probs");  // the rows this step decides on, in full
    detail::check_prob_row(q, i, fn, "draft_probs");
    const double px = p.at(i, x), qx = q.at(i, x);
    const double u = rng.uniform_double();
    if (u * qx < px) {  // u < p/q with u in [0, 1): probability min(1, p/q)
      res.accepted.push_back(i);
      continue;
    }
    res.bonus = detail::sample_residual(p.row(i), q.row(i), rng, p.ref(fn, "target_probs", i), q.ref(fn, "draft_probs", i));
    return res;
  }
  res.bonus = detail::draw_from_probs(p.row(n), rng, p.ref(fn, "target_probs", n));
  return res;
}

}  // namespace specdec
