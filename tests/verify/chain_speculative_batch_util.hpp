#pragma once
// Random ragged batches of chains for the array form of verify_chain_speculative_batch (host:
// tests/verify/test_chain_speculative_arrays.cpp, CUDA: tests/cuda/test_verify_chain_speculative.cu).
// Each request is a chain whose tokens are drawn from its draft rows q_i; the target row p_i is q_i
// itself for about 2/5 of the nodes (always accepted), q / 2 for 1/5 (an unnormalised row accepted half
// the time whose residual max(0, p - q) is zero: the draw falls back to p) and independent otherwise
// (mostly rejected, so the residual is drawn), with zero entries in some rows. The expected result is
// verify_chain_speculative on each request with philox_stream(seeds[r], streams[r]).
#include <cstdint>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/sampling/sampler.hpp"
#include "specdec/verify/speculative_sampling.hpp"
#include "verify/tree_arrays_util.hpp"

namespace specdec_test {

struct chain_batch_case {
  std::vector<std::int32_t> node_indptr{0}, tokens, parents;
  std::vector<float> p, q;  // [N + R, V] each
  std::vector<std::uint64_t> seeds, streams;
  std::int64_t vocab = 0;
  specdec::verify_batch_result expected;

  [[nodiscard]] int requests() const { return static_cast<int>(node_indptr.size()) - 1; }
  [[nodiscard]] int nodes() const { return static_cast<int>(tokens.size()); }

  //! verify_chain_speculative per request (the reference for both backends).
  void finish() {
    expected = per_request(node_indptr, tokens, parents, [&](const specdec::token_tree& t, int r, std::int64_t first, std::int64_t n) {
      specdec::philox_stream rng(seeds[r], streams[r]);
      return specdec::verify_chain_speculative(t, specdec::make_view<2>(p.data() + first * vocab, {n, vocab}),
                                               specdec::make_view<2>(q.data() + first * vocab, {n, vocab}), rng);
    });
  }
};

inline chain_batch_case random_chain_batch(int R, int max_nodes, std::int64_t V, std::uint64_t seed) {
  specdec::philox_stream rng(seed, 4);
  chain_batch_case c;
  c.vocab = V;
  auto random_row = [&](std::vector<float>& row) {
    const bool sparse = rng.below(4) == 0;
    for (auto& x : row) x = sparse && rng.below(2) == 0 ? 0.0f : rng.uniform();
    row[rng.below(static_cast<std::uint32_t>(V))] += 0.5f;  // never all zero
  };
  for (int r = 0; r < R; ++r) {
    const int n = rng.below(8) == 0 ? 0 : 1 + static_cast<int>(rng.below(static_cast<std::uint32_t>(max_nodes)));
    const auto b = static_cast<std::int32_t>(c.tokens.size());
    for (int s = 0; s <= n; ++s) {
      std::vector<float> q(static_cast<std::size_t>(V)), p(static_cast<std::size_t>(V));
      random_row(q);
      switch (rng.below(5)) {
        case 0: case 1: p = q; break;                    // always accepted
        case 2: for (std::size_t i = 0; i < p.size(); ++i) p[i] = 0.5f * q[i]; break;  // rejected half the time, zero residual
        default: random_row(p);
      }
      if (s < n) {
        c.tokens.push_back(specdec::sample_from_probs(q, rng));
        c.parents.push_back(s - 1);
      }
      c.q.insert(c.q.end(), q.begin(), q.end());
      c.p.insert(c.p.end(), p.begin(), p.end());
    }
    c.node_indptr.push_back(b + n);
    c.seeds.push_back(seed * 31 + 1);
    c.streams.push_back(specdec::stream_id(static_cast<std::uint32_t>(r), 3));
  }
  c.finish();
  return c;
}

}  // namespace specdec_test
