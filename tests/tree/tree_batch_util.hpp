#pragma once
// Random ragged tree batches for build_tree_batch's tests (host: tests/tree/test_tree_batch.cpp,
// CUDA: tests/cuda/test_tree_batch.cu). The expected arrays come from token_tree_batch, the host
// class the attention kernels' callers already use, built tree by tree.
#include <cstdint>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec_test {

//! Parents of one request-local tree of n nodes in one of four shapes: 0 = parent uniform in
//! [-1, i), 1 = a chain, 2 = a star under the root, 3 = bushy (parent among the last 8 nodes, the
//! shape of a beam tree's levels).
inline std::vector<std::int32_t> random_parents(int n, int shape, specdec::philox_stream& rng) {
  std::vector<std::int32_t> p(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    switch (shape) {
      case 0: p[i] = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(i + 1))) - 1; break;
      case 1: p[i] = i - 1; break;
      case 2: p[i] = -1; break;
      default: {
        const int lo = i < 8 ? -1 : i - 8;
        p[i] = lo + static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(i - lo)));
      }
    }
  }
  return p;
}

//! A ragged batch: node_indptr, parents (local), committed lengths, and the arrays
//! token_tree_batch computes for the same trees (the expected outputs).
struct tree_batch_case {
  std::vector<std::int32_t> node_indptr{0}, parents, committed;
  std::vector<std::int32_t> depths, positions;
  std::vector<std::int64_t> mask_indptr;
  std::vector<specdec::mask_word> mask;

  void add(const std::vector<std::int32_t>& par, std::int32_t committed_length) {
    parents.insert(parents.end(), par.begin(), par.end());
    node_indptr.push_back(node_indptr.back() + static_cast<std::int32_t>(par.size()));
    committed.push_back(committed_length);
  }
  //! Fills the expected arrays from token_tree_batch.
  void finish() {
    specdec::token_tree_batch b;
    for (std::size_t r = 0; r + 1 < node_indptr.size(); ++r) {
      const std::vector<std::int32_t> par(parents.begin() + node_indptr[r], parents.begin() + node_indptr[r + 1]);
      const std::vector<std::int32_t> tok(par.size(), 7);
      b.push_back(specdec::token_tree::from_parents(tok, par), committed[r]);
    }
    depths.assign(b.depths().begin(), b.depths().end());
    positions.assign(b.positions().begin(), b.positions().end());
    mask_indptr.assign(b.mask_indptr().begin(), b.mask_indptr().end());
    mask.assign(b.mask().begin(), b.mask().end());
  }
};

//! The arrays build_tree_batch gives a batch with tree_batch_rows::root_and_nodes, from token_tree_batch
//! over each tree with its root made node 0 (parents -1, then p + 1), independently of
//! detail::rooted_parents: the same masks; depths and positions one less than that batch's (its
//! node 0 is a child of a virtual root, at committed_lengths[r]).
struct rooted_arrays {
  std::vector<std::int32_t> depths, positions;
  std::vector<std::int64_t> mask_indptr;
  std::vector<specdec::mask_word> mask;
};
inline rooted_arrays expected_rooted(const tree_batch_case& c) {
  specdec::token_tree_batch b;
  for (std::size_t r = 0; r + 1 < c.node_indptr.size(); ++r) {
    std::vector<std::int32_t> par{-1};
    for (auto i = c.node_indptr[r]; i < c.node_indptr[r + 1]; ++i) par.push_back(c.parents[i] < 0 ? 0 : c.parents[i] + 1);
    b.push_back(specdec::token_tree::from_parents(std::vector<std::int32_t>(par.size(), 7), par), c.committed[r]);
  }
  rooted_arrays a{{b.depths().begin(), b.depths().end()}, {b.positions().begin(), b.positions().end()},
                  {b.mask_indptr().begin(), b.mask_indptr().end()}, {b.mask().begin(), b.mask().end()}};
  for (auto& d : a.depths) --d;
  for (auto& p : a.positions) --p;
  return a;
}

//! R requests of random sizes up to max_nodes (some empty), random shapes and committed lengths.
inline tree_batch_case random_tree_batch(int R, int max_nodes, std::uint64_t seed) {
  specdec::philox_stream rng(seed, 1);
  tree_batch_case c;
  for (int r = 0; r < R; ++r) {
    const int n = rng.below(8) == 0 ? 0 : 1 + static_cast<int>(rng.below(static_cast<std::uint32_t>(max_nodes)));
    c.add(random_parents(n, static_cast<int>(rng.below(4)), rng), 1 + static_cast<std::int32_t>(rng.below(1u << 20)));
  }
  c.finish();
  return c;
}

}  // namespace specdec_test
