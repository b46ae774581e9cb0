#pragma once
// Random ragged commits for the array form of kv_commit_in_place_batch (host:
// tests/kv/test_commit_arrays.cpp, CUDA: tests/cuda/test_kv_commit.cu): per request a tree size, a
// committed length and an accepted root path of a random tree, laid out as verify_greedy_batch
// writes them (accepted at node_indptr[r] + j, num_accepted[r]); the expected caches come from the
// span form of kv_commit_in_place_batch applied to a copy.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "specdec/core/philox.hpp"
#include "tree/tree_batch_util.hpp"

namespace kv_test {

//! n cache values uniform in [-2, 2) (as T) from rng: K/V contents for the commit tests.
template <class T>
std::vector<T> random_rows(std::size_t n, specdec::philox_stream& rng) {
  std::vector<T> x(n);
  for (auto& e : x) e = T(rng.uniform() * 4.0f - 2.0f);
  return x;
}

struct commit_batch_case {
  std::vector<std::int32_t> committed, node_indptr{0}, accepted, num_accepted;
  std::vector<std::int32_t> tree_sizes, accepted_indptr{0}, accepted_packed, parents;  // the span form's inputs

  [[nodiscard]] int requests() const { return static_cast<int>(committed.size()); }
};

//! R requests with trees of up to max_nodes nodes whose tree tokens fit in `capacity` after a random
//! committed prefix.
inline commit_batch_case random_commit_batch(int R, int max_nodes, int capacity, std::uint64_t seed) {
  specdec::philox_stream rng(seed, 3);
  commit_batch_case c;
  for (int r = 0; r < R; ++r) {
    const int n = static_cast<int>(rng.below(static_cast<std::uint32_t>(max_nodes + 1)));
    const int cmax = capacity - n;
    c.committed.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(cmax + 1))));
    const auto par = specdec_test::random_parents(n, static_cast<int>(rng.below(4)), rng);
    // a root path: from a random node (or none) up to the root, reversed
    std::vector<std::int32_t> path;
    if (n > 0 && rng.below(5) != 0)
      for (std::int32_t v = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(n))); v >= 0; v = par[v])
        path.insert(path.begin(), v);
    c.parents.insert(c.parents.end(), par.begin(), par.end());
    c.tree_sizes.push_back(n);
    for (int j = 0; j < n; ++j) c.accepted.push_back(j < static_cast<int>(path.size()) ? path[j] : -77);
    c.node_indptr.push_back(c.node_indptr.back() + n);
    c.num_accepted.push_back(static_cast<std::int32_t>(path.size()));
    c.accepted_packed.insert(c.accepted_packed.end(), path.begin(), path.end());
    c.accepted_indptr.push_back(static_cast<std::int32_t>(c.accepted_packed.size()));
  }
  return c;
}

}  // namespace kv_test
