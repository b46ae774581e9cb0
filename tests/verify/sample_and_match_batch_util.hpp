#pragma once
// Random ragged batches for the array form of verify_sample_and_match_batch (host: tests/verify/
// test_sample_and_match_arrays.cpp, CUDA: tests/cuda/test_verify_sample_and_match.cu). Trees from
// tree_batch_util's shapes with tokens from a small alphabet (so duplicate siblings occur), and
// probability rows that put most of their mass on one of the row's children's tokens, so paths of
// every length are accepted; some rows have zero entries (a top-k / top-p row) and none is
// normalised. The expected result is verify_sample_and_match on each request's token_tree with the
// request's philox_stream(seeds[r], streams[r]).
#include <cstdint>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/verify/sample_and_match.hpp"
#include "tree/tree_batch_util.hpp"
#include "verify/tree_arrays_util.hpp"

namespace specdec_test {

struct sample_and_match_case {
  std::vector<std::int32_t> node_indptr{0}, tokens, parents;
  std::vector<float> probs;  // [N + R, V]
  std::vector<std::uint64_t> seeds, streams;
  std::int64_t vocab = 0;
  specdec::verify_batch_result expected;

  [[nodiscard]] int requests() const { return static_cast<int>(node_indptr.size()) - 1; }
  [[nodiscard]] int nodes() const { return static_cast<int>(tokens.size()); }

  //! verify_sample_and_match per request (the reference for both backends).
  void finish() {
    expected = per_request(node_indptr, tokens, parents, [&](const specdec::token_tree& t, int r, std::int64_t first, std::int64_t n) {
      specdec::philox_stream rng(seeds[r], streams[r]);
      return specdec::verify_sample_and_match(t, specdec::make_view<2>(probs.data() + first * vocab, {n, vocab}), rng);
    });
  }
};

//! R requests of up to max_nodes nodes over a vocabulary of V, tokens from the first `alphabet` ids.
//! Row s (after node s - 1) gets uniform weights in [0, 1) (a quarter of the rows with about half of
//! them zeroed), then a weight of V on a random child's token with probability 3/4. Seeds and
//! streams per request as an engine would set them (one seed, stream_id(request id, step)).
inline sample_and_match_case random_sample_and_match_batch(int R, int max_nodes, std::int64_t V, int alphabet,
                                                           std::uint64_t seed) {
  specdec::philox_stream rng(seed, 3);
  sample_and_match_case c;
  c.vocab = V;
  for (int r = 0; r < R; ++r) {
    const int n = rng.below(8) == 0 ? 0 : 1 + static_cast<int>(rng.below(static_cast<std::uint32_t>(max_nodes)));
    const auto par = random_parents(n, static_cast<int>(rng.below(4)), rng);
    const auto b = static_cast<std::int32_t>(c.tokens.size());
    for (int i = 0; i < n; ++i) {
      c.parents.push_back(par[i]);
      c.tokens.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(alphabet))));
    }
    c.node_indptr.push_back(b + n);
    for (int s = 0; s <= n; ++s) {
      std::vector<float> row(static_cast<std::size_t>(V));
      const bool sparse = rng.below(4) == 0;
      for (auto& x : row) x = sparse && rng.below(2) == 0 ? 0.0f : rng.uniform();
      std::vector<std::int32_t> kids;
      for (int i = s; i < n; ++i)
        if (par[i] == s - 1) kids.push_back(c.tokens[b + i]);
      if (!kids.empty() && rng.below(4) != 0) row[kids[rng.below(static_cast<std::uint32_t>(kids.size()))]] = static_cast<float>(V);
      row[rng.below(static_cast<std::uint32_t>(V))] += 0.5f;  // no row is all zero
      c.probs.insert(c.probs.end(), row.begin(), row.end());
    }
    c.seeds.push_back(seed ^ 0x5eedull);
    c.streams.push_back(specdec::stream_id(static_cast<std::uint32_t>(100 + r), 7));
  }
  c.finish();
  return c;
}

}  // namespace specdec_test
