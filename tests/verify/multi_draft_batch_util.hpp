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
#include <limits>
#include <memory>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/sampling/detail/cdf_search.hpp"
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

//! The CUDA kernel's walk (verify/multi_draft.cuh) written serially with the same shared pieces: the
//! residual as residual_ops (its updates, weight()), block sums by lanes (lane_partial /
//! lane_combine, as the kernel's groups of 16 threads compute them), cdf_total and cdf_search. The
//! request's rows start at p / q (stride V); returns what the kernel writes, and counts the walk's
//! branches into `seen` (a residual in force after a rejection; a rejection that left a zero residual
//! while p' = p; the reset to q / remain). Kept next to the generator so that the CUDA test can show
//! which branches its own cases take.
struct multi_draft_branches {
  int residual = 0, zero_from_p = 0, reset = 0;
};
inline specdec::verify_result multi_draft_kernel_twin(multi_draft_branches& seen, const std::int32_t* tok,
                                                     const std::int32_t* par, std::int32_t n, const float* p_rows,
                                                     const float* q_rows, std::int64_t V, specdec::draft_sampling mode,
                                                     std::uint64_t seed, std::uint64_t stream) {
  namespace d = specdec::detail;
  const std::int64_t nb = (V + 1023) / 1024;
  std::vector<double> bs(static_cast<std::size_t>(nb));
  const auto block_sums = [&](const auto& w) {
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::int64_t lo = b * 1024, hi = std::min(V, lo + 1024);
      double partial[d::lanes];
      for (int j = 0; j < d::lanes; ++j) partial[j] = d::lane_partial(w, lo, hi, j);
      bs[static_cast<std::size_t>(b)] = d::lane_combine(w, lo, hi, partial);
    }
    return d::cdf_total(bs.data(), nb);
  };
  const bool wor = mode == specdec::draft_sampling::without_replacement;
  auto ops = std::make_unique<d::residual_ops>();
  specdec::philox_stream rng(seed, stream);
  specdec::verify_result res;
  std::int32_t cur = -1;
  for (;;) {
    const float* p = p_rows + (cur + 1) * V;
    const float* q = q_rows + (cur + 1) * V;
    const auto w = [&](std::int64_t i) { return ops->weight(p, q, i); };
    ops->start_node();
    bool residual = false;
    double total = 1.0, drawn_mass = 0.0;
    std::int32_t next = -1;
    for (std::int32_t c = cur + 1; c < n; ++c) {
      if (par[c] != cur) continue;
      const std::int32_t x = tok[c];
      const double qx = q[x];
      const double remain = wor ? (1.0 - drawn_mass < qx ? qx : 1.0 - drawn_mass) : 1.0;
      const double pj = residual ? ops->weight(p, q, x) / total : static_cast<double>(p[x]);
      if (rng.uniform_double() * (qx / remain) < pj) {
        next = c;
        break;
      }
      REQUIRE_FALSE(ops->full());
      ops->push_update(residual, total / remain);
      const double tt = block_sums(w);
      if (tt > 0.0) {
        residual = true;
        total = tt;
        ++seen.residual;
      } else if (residual) {
        ops->reset_to_q(remain);
        total = block_sums(w);
        ++seen.reset;
      } else {
        ++seen.zero_from_p;
      }
      if (wor) {
        drawn_mass += qx;
        ops->add_drawn(x);
      }
    }
    if (next < 0) {
      if (residual) {
        res.bonus = static_cast<std::int32_t>(d::cdf_search(bs.data(), nb, V, rng.uniform_double() * total, w));
      } else {
        const auto pw = [p](std::int64_t i) { return static_cast<double>(p[i]); };
        const double pt = block_sums(pw);
        res.bonus = static_cast<std::int32_t>(d::cdf_search(bs.data(), nb, V, rng.uniform_double() * pt, pw));
      }
      return res;
    }
    res.accepted.push_back(next);
    cur = next;
  }
}

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

//! A token of request 0's local row `row` that no child of that row's node carries (validation reads
//! p and q at the children's tokens), or the vocabulary size when every token is carried.
inline std::int64_t uncarried_token(const multi_draft_batch_case& c, int row) {
  const int n0 = c.node_indptr[1];
  for (std::int64_t x = 0; x < c.vocab; ++x) {
    bool carried = false;
    for (int i = 0; i < n0; ++i) carried |= c.parents[static_cast<std::size_t>(i)] == row - 1 && c.tokens[static_cast<std::size_t>(i)] == x;
    if (!carried) return x;
  }
  return c.vocab;
}

//! Spoils every row of request 0 that its walk (c.expected) does not visit: NaN in p and -1 in q at an
//! uncarried token, values the walk would reject if it read them. Returns how many rows; c.expected
//! is unchanged (a verifier that reads only the rows it visits still gives it).
inline int spoil_unvisited_rows(multi_draft_batch_case& c) {
  const auto want = c.expected.request(0);
  const int n0 = c.node_indptr[1];
  std::vector<bool> visited(static_cast<std::size_t>(n0 + 1), false);
  visited[0] = true;  // the root's row
  for (const auto v : want.accepted) visited[static_cast<std::size_t>(v + 1)] = true;
  int spoiled = 0;
  for (int row = 0; row <= n0; ++row) {
    if (visited[static_cast<std::size_t>(row)]) continue;
    const std::int64_t x = uncarried_token(c, row);
    REQUIRE(x < c.vocab);
    c.p[static_cast<std::size_t>(row * c.vocab + x)] = std::numeric_limits<float>::quiet_NaN();
    c.q[static_cast<std::size_t>(row * c.vocab + x)] = -1.0f;
    ++spoiled;
  }
  return spoiled;
}

}  // namespace specdec_test
