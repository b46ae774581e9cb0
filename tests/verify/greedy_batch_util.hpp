#pragma once
// Random ragged batches for the array form of verify_greedy_batch (host: tests/verify/
// test_greedy_arrays.cpp, CUDA: tests/cuda/test_verify_greedy.cu). Trees from tree_batch_util's
// shapes with tokens from a small alphabet, and logits whose row argmax is often one of the row's
// children's tokens, so that paths of every length get accepted; the expected result is
// verify_greedy on each request's token_tree.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/sampling/logits_processor.hpp"
#include "specdec/sampling/penalty_context.hpp"
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

//! A random_greedy_batch with repetition and contextual penalties (the penalized form of
//! verify_greedy_batch): each request's sampling_params (temperature 0; a repetition and a contextual
//! penalty with every other step, sign-aware or not, windows 1-8 or 1024) and a committed context of
//! up to 20 tokens from the trees' alphabet, so the penalties often move a row's argmax off a
//! child's token (the tests check that some requests' results differ from their unpenalized ones,
//! moved()). The expected result is the composition the form replaces: process_logits_batch
//! with the context on a copy of the rows (one-hot at each penalized argmax), then the plain array
//! form on those rows.
struct penalized_greedy_case {
  greedy_batch_case c;
  std::vector<specdec::sampling_params> params;
  std::vector<std::int32_t> row_params;
  specdec::penalty_context_builder b;
  specdec::verify_batch_result expected;
  penalized_greedy_case(int R, int max_nodes, std::int64_t V, int alphabet, std::uint64_t seed)
      : c(random_greedy_batch(R, max_nodes, V, alphabet, seed)), b(static_cast<std::int32_t>(V)) {
    specdec::philox_stream rng(seed, 5);
    std::vector<std::int32_t> committed;
    for (int r = 0; r < R; ++r) {
      specdec::sampling_params p;
      p.temperature = 0.0f;
      if (rng.below(3) != 0) p.repetition_penalty = 1.0f + 3.0f * rng.uniform();
      if (rng.below(3) != 0) p.contextual_penalty = 1.0f + 3.0f * rng.uniform();
      p.penalty_window = rng.below(4) == 0 ? 1024 : 1 + static_cast<int>(rng.below(8));
      p.contextual_sign_aware = rng.below(2) == 0;
      params.push_back(p);
      committed.clear();
      for (std::uint32_t j = 0, n = rng.below(21); j < n; ++j)
        committed.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(alphabet))));
      const auto lo = static_cast<std::size_t>(c.node_indptr[static_cast<std::size_t>(r)]),
                 n = static_cast<std::size_t>(c.node_indptr[static_cast<std::size_t>(r) + 1]) - lo;
      b.add_tree_rows(b.add_context(committed), std::span(c.tokens).subspan(lo, n), std::span(c.parents).subspan(lo, n));
      for (std::size_t s = 0; s <= n; ++s) row_params.push_back(r);
    }
    const std::int64_t rows = c.nodes() + c.requests();
    auto processed = c.logits;
    std::vector<std::int32_t> st(3);
    specdec::process_logits_batch(specdec::host{}, specdec::make_view<2>(processed.data(), {rows, V}),
                                  specdec::make_view<1>(params.data(), {R}), specdec::make_view<1>(row_params.data(), {rows}),
                                  b.view(), specdec::make_view<1>(st.data(), {3}));
    tree_outputs o(static_cast<std::size_t>(R), c.tokens.size());
    const auto v1 = [](auto& a) { return specdec::make_view<1>(a.data(), {static_cast<std::int64_t>(a.size())}); };
    specdec::verify_greedy_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens), v1(c.parents),
                                 specdec::make_view<2>(processed.data(), {rows, V}), v1(o.accepted), v1(o.num_accepted),
                                 v1(o.bonus), v1(o.emitted), v1(o.status));
    for (int r = 0; r < R; ++r) {
      const std::int32_t* first = o.accepted.data() + c.node_indptr[static_cast<std::size_t>(r)];
      expected.push_back(specdec::verify_result{std::vector<std::int32_t>(first, first + o.num_accepted[static_cast<std::size_t>(r)]),
                                                o.bonus[static_cast<std::size_t>(r)]});
    }
  }
  //! Requests whose result differs from the unpenalized one (c.expected).
  [[nodiscard]] int moved() const {
    int n = 0;
    for (int r = 0; r < c.requests(); ++r) {
      const auto a = expected.request(r), u = c.expected.request(r);
      n += !(a.bonus == u.bonus && std::equal(a.accepted.begin(), a.accepted.end(), u.accepted.begin(), u.accepted.end()));
    }
    return n;
  }
};

}  // namespace specdec_test
