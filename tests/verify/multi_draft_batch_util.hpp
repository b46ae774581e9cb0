#pragma once
// Random ragged batches of drawn trees for the array form of verify_multi_draft_batch (host:
// tests/verify/test_multi_draft_arrays.cpp, CUDA: tests/cuda/test_verify_multi_draft.cu). Every
// node's children are drawn from its draft row q, in index order (breadth first), with or without
// replacement. Each row's target p is, by kind:
//   q itself (children always accepted);
//   q / 2 (an unnormalised row: the first rejection leaves a zero residual, so p' stays p);
//   q / 2 but for q's largest entry (>= 1), raised by 0.25 (a rejection leaves a residual on that one
//   token, and the next rejection zeroes it: the walk's reset to q / remain);
//   an independent row (mostly rejected: the residual is drawn).
// Rows hold zeros in some cases (sparse rows). The expected result is verify_multi_draft on each
// request with philox_stream(seeds[r], streams[r]).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/sampling/sampler.hpp"
#include "specdec/verify/multi_draft.hpp"
#include "verify/tree_arrays_util.hpp"

namespace specdec_test {

struct multi_draft_batch_case {
  std::vector<std::int32_t> node_indptr{0}, tokens, parents;
  std::vector<float> p, q;  // [N + R, V] each
  std::vector<std::uint64_t> seeds, streams;
  std::int64_t vocab = 0;
  specdec::draft_sampling mode = specdec::draft_sampling::with_replacement;
  specdec::verify_batch_result expected;

  [[nodiscard]] int requests() const { return static_cast<int>(node_indptr.size()) - 1; }
  [[nodiscard]] int nodes() const { return static_cast<int>(tokens.size()); }

  //! verify_multi_draft per request (the reference for both backends).
  void finish() {
    expected = per_request(node_indptr, tokens, parents, [&](const specdec::token_tree& t, int r, std::int64_t first, std::int64_t n) {
      specdec::philox_stream rng(seeds[r], streams[r]);
      return specdec::verify_multi_draft(t, specdec::make_view<2>(p.data() + first * vocab, {n, vocab}),
                                         specdec::make_view<2>(q.data() + first * vocab, {n, vocab}), mode, rng);
    });
  }
};

//! R requests of up to max_nodes nodes each (about one in eight empty), at most max_children children
//! per node (the root takes up to max_children, other nodes up to 3).
inline multi_draft_batch_case random_multi_draft_batch(int R, int max_nodes, std::int64_t V, specdec::draft_sampling mode,
                                                       std::uint64_t seed, int max_children = 6) {
  specdec::philox_stream rng(seed, 5);
  multi_draft_batch_case c;
  c.vocab = V;
  c.mode = mode;
  const bool wor = mode == specdec::draft_sampling::without_replacement;
  const auto vz = static_cast<std::size_t>(V);
  auto random_row = [&](std::vector<float>& row) {
    const bool sparse = rng.below(4) == 0;
    for (auto& x : row) x = sparse && rng.below(2) == 0 ? 0.0f : rng.uniform();
    row[rng.below(static_cast<std::uint32_t>(V))] += 1.0f;  // never all zero; the largest entry >= 1
  };
  for (int r = 0; r < R; ++r) {
    const int want = rng.below(8) == 0 ? 0 : 1 + static_cast<int>(rng.below(static_cast<std::uint32_t>(max_nodes)));
    std::vector<std::vector<float>> ps, qs;  // rows 0 .. want (row i + 1 = after node i)
    for (int s = 0; s <= want; ++s) {
      std::vector<float> q(vz), p(vz);
      random_row(q);
      switch (rng.below(6)) {
        case 0: case 1: p = q; break;
        case 2: for (std::size_t i = 0; i < vz; ++i) p[i] = 0.5f * q[i]; break;
        case 3: {
          const auto a = static_cast<std::size_t>(std::max_element(q.begin(), q.end()) - q.begin());
          for (std::size_t i = 0; i < vz; ++i) p[i] = 0.5f * q[i];
          p[a] = q[a] + 0.25f;
          break;
        }
        default: random_row(p);
      }
      ps.push_back(std::move(p));
      qs.push_back(std::move(q));
    }
    // Breadth first from the root: each open node draws its children from its draft row.
    std::vector<std::int32_t> tok, par;
    std::vector<std::int32_t> open{-1};
    for (std::size_t o = 0; o < open.size() && static_cast<int>(tok.size()) < want; ++o) {
      const std::int32_t node = open[o];
      const int k = static_cast<int>(rng.below(static_cast<std::uint32_t>(node < 0 ? max_children : 4))) + (node < 0);
      std::vector<float> row = qs[static_cast<std::size_t>(node + 1)];
      for (int j = 0; j < k && static_cast<int>(tok.size()) < want; ++j) {
        if (wor && std::none_of(row.begin(), row.end(), [](float x) { return x > 0.0f; })) break;
        const std::int32_t x = specdec::sample_from_probs(row, rng);
        if (wor) row[static_cast<std::size_t>(x)] = 0.0f;
        open.push_back(static_cast<std::int32_t>(tok.size()));
        tok.push_back(x);
        par.push_back(node);
      }
    }
    const auto n = static_cast<std::int32_t>(tok.size());
    for (std::int32_t s = 0; s <= n; ++s) {
      c.p.insert(c.p.end(), ps[static_cast<std::size_t>(s)].begin(), ps[static_cast<std::size_t>(s)].end());
      c.q.insert(c.q.end(), qs[static_cast<std::size_t>(s)].begin(), qs[static_cast<std::size_t>(s)].end());
    }
    c.tokens.insert(c.tokens.end(), tok.begin(), tok.end());
    c.parents.insert(c.parents.end(), par.begin(), par.end());
    c.node_indptr.push_back(c.node_indptr.back() + n);
    c.seeds.push_back(seed * 29 + 3);
    c.streams.push_back(specdec::stream_id(static_cast<std::uint32_t>(r), 5));
  }
  c.finish();
  return c;
}

}  // namespace specdec_test
