#pragma once
// Random ragged batches for the array form of verify_greedy_batch (host: tests/verify/
// test_greedy_arrays.cpp, CUDA: tests/cuda/test_verify_greedy.cu). Trees from tree_batch_util's
// shapes with tokens from a small alphabet, and logits whose row argmax is often one of the row's
// children's tokens, so that paths of every length get accepted; the expected result is
// verify_greedy on each request's token_tree.
#include <cstdint>
#include <limits>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/verify/greedy.hpp"
#include "tree/tree_batch_util.hpp"
#include "verify/tree_arrays_util.hpp"

namespace specdec_test {

struct greedy_batch_case {
  std::vector<std::int32_t> node_indptr{0}, tokens, parents;
  std::vector<float> logits;  // [N + R, V]
  std::int64_t vocab = 0;
  specdec::verify_batch_result expected;

  [[nodiscard]] int requests() const { return static_cast<int>(node_indptr.size()) - 1; }
  [[nodiscard]] int nodes() const { return static_cast<int>(tokens.size()); }

  //! verify_greedy per request (the reference for both backends).
  void finish() {
    expected = per_request(node_indptr, tokens, parents, [&](const specdec::token_tree& t, int, std::int64_t first, std::int64_t n) {
      return specdec::verify_greedy(t, specdec::make_view<2>(logits.data() + first * vocab, {n, vocab}));
    });
  }
};

//! R requests of up to max_nodes nodes over a vocabulary of V; tokens drawn from the first
//! `alphabet` ids; each row's maximum is placed on a child's token (or a random id) with
//! probability 3/4, and about one row in 16 has a tie for the maximum (lowest id must win).
inline greedy_batch_case random_greedy_batch(int R, int max_nodes, std::int64_t V, int alphabet, std::uint64_t seed) {
  specdec::philox_stream rng(seed, 2);
  greedy_batch_case c;
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
    for (int s = 0; s <= n; ++s) {  // row s = after node s - 1 (s = 0: the root)
      std::vector<float> row(static_cast<std::size_t>(V));
      for (auto& x : row) x = rng.uniform() * 4.0f - 2.0f;
      std::vector<std::int32_t> kids;
      for (int i = s; i < n; ++i)
        if (par[i] == s - 1) kids.push_back(c.tokens[b + i]);
      const std::uint32_t pick = rng.below(4);
      std::int64_t top = static_cast<std::int64_t>(rng.below(static_cast<std::uint32_t>(V)));
      if (pick != 0 && !kids.empty()) top = kids[rng.below(static_cast<std::uint32_t>(kids.size()))];
      row[static_cast<std::size_t>(top)] = 3.0f;
      if (rng.below(16) == 0) row[static_cast<std::size_t>(rng.below(static_cast<std::uint32_t>(V)))] = 3.0f;
      c.logits.insert(c.logits.end(), row.begin(), row.end());
    }
  }
  c.finish();
  return c;
}

//! A NaN in a row the walk never reads is never looked at (verify_greedy's rule): root -> {0: token
//! 1, 1: token 2}; the root row's argmax is 1, so node 0 is accepted and the row after node 1 (a
//! NaN) is not read; the row after node 0 gives the bonus (argmax 3, tied with id 4: 3 wins).
//! Expected: num_accepted 1, accepted {0}, bonus 3, emitted {1, 3}.
inline greedy_batch_case unread_nan_case() {
  greedy_batch_case h;
  h.vocab = 5;
  h.node_indptr = {0, 2};
  h.tokens = {1, 2};
  h.parents = {-1, -1};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  h.logits = {0, 9, 1, 2, 3, /**/ 0, 1, 2, 7, 7, /**/ nan, 0, 0, 0, 0};
  return h;
}

}  // namespace specdec_test
