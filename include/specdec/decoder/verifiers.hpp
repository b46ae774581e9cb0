#pragma once
//! \file verifiers.hpp
//! Verifier policies for speculative_decoder, thin adapters over verify/:
//!  - greedy_verifier           verify_greedy: output = the target's greedy output (temperature 0 only);
//!  - sample_and_match_verifier verify_sample_and_match: lossless sampling for ANY tree (one target draw
//!                              per visited node, walk down while a child matches);
//!  - chain_speculative_verifier verify_chain_speculative (Leviathan et al.; GLIDE §3) on chain trees,
//!                              with the draft's q rows, or one-hot q at the drafted tokens when the
//!                              drafter was deterministic (then min(1, p/q) = p(x): still exact).
//! All take the processed target logits (verify_input::logits) and convert them to probabilities.

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/decoder/concepts.hpp"
#include "specdec/verify/greedy.hpp"
#include "specdec/verify/sample_and_match.hpp"
#include "specdec/verify/speculative_sampling.hpp"

namespace specdec {

namespace detail {
//! Softmax of each row of processed logits into `probs` (-inf -> 0). O(rows V).
inline void softmax_rows(const strided_view<const float, 2>& logits, std::vector<float>& probs) {
  const auto rows = logits.extent(0), V = logits.extent(1);
  probs.resize(static_cast<std::size_t>(rows * V));
  for (std::int64_t r = 0; r < rows; ++r) {
    float mx = -std::numeric_limits<float>::infinity();
    for (std::int64_t v = 0; v < V; ++v) mx = std::max(mx, logits(r, v));
    double sum = 0;
    float* out = probs.data() + r * V;
    for (std::int64_t v = 0; v < V; ++v) {
      const float l = logits(r, v);
      out[v] = std::isinf(l) && l < 0 ? 0.0f : static_cast<float>(std::exp(static_cast<double>(l) - mx));
      sum += out[v];
    }
    for (std::int64_t v = 0; v < V; ++v) out[v] = static_cast<float>(out[v] / sum);
  }
}
}  // namespace detail

//! Greedy tree verification: longest path whose tokens equal the target argmax; bonus = argmax after it.
//! Only valid at temperature 0 (is_lossless_for_sampling = false: the decoder rejects temperature > 0).
//! O(n + (accepted + 1) V).
struct greedy_verifier {
  static constexpr bool is_lossless_for_sampling = false;
  void verify(const verify_input& in, verify_result& out) const { out = verify_greedy(in.tree, in.logits); }
};
static_assert(check_verifier<greedy_verifier>());

//! Lossless stochastic verification of any tree (see verify/sample_and_match.hpp). At temperature 0
//! the processed rows are one-hot, so it reduces to greedy verification. O(n + rows V).
struct sample_and_match_verifier {
  static constexpr bool is_lossless_for_sampling = true;
  void verify(const verify_input& in, verify_result& out) {
    detail::softmax_rows(in.logits, probs_);
    const auto p = make_view<2>(static_cast<const float*>(probs_.data()), {in.logits.extent(0), in.logits.extent(1)});
    out = verify_sample_and_match(in.tree, p, in.rng);
  }

 private:
  std::vector<float> probs_;
};
static_assert(check_verifier<sample_and_match_verifier>());

//! Chain speculative sampling. Precondition: the tree is a chain (use chain_tree_builder). Uses the
//! draft's q rows when the drafter sampled its chain (draft.q non-empty), else one-hot q at the drafted
//! tokens. O(rows V).
struct chain_speculative_verifier {
  static constexpr bool is_lossless_for_sampling = true;
  void verify(const verify_input& in, verify_result& out) {
    const auto rows = in.logits.extent(0), V = in.logits.extent(1);
    detail::softmax_rows(in.logits, probs_);
    q_.assign(static_cast<std::size_t>(rows * V), 0.0f);
    const int n = in.tree.size();
    const bool have_q = !in.draft.q.empty() && in.draft.vocab == V &&
                        in.draft.q.size() >= static_cast<std::size_t>(n) * static_cast<std::size_t>(V);
    for (int i = 0; i < n; ++i) {
      float* row = q_.data() + static_cast<std::ptrdiff_t>(i) * V;
      if (have_q) std::copy_n(in.draft.q.begin() + static_cast<std::ptrdiff_t>(i) * V, V, row);
      else row[in.tree.token(i)] = 1.0f;
    }
    q_[static_cast<std::size_t>(n * V)] = 1.0f;  // row n is not read; keep it a distribution
    const auto p = make_view<2>(static_cast<const float*>(probs_.data()), {rows, V});
    const auto q = make_view<2>(static_cast<const float*>(q_.data()), {rows, V});
    out = verify_chain_speculative(in.tree, p, q, in.rng);
  }

 private:
  std::vector<float> probs_, q_;
};
static_assert(check_verifier<chain_speculative_verifier>());

}  // namespace specdec
