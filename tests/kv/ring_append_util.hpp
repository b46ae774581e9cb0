#pragma once
// Random rounds of ring_append_batch (host: tests/kv/test_ring_append.cpp, CUDA:
// tests/cuda/test_kv_ring_append.cu): verified trees with random accepted paths over a ring small
// enough to wrap (and paths longer than the ring), and the expected ring after each round from
// ring_kv_cache::append_rows per request.
#include <cstdint>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/kv/ring_kv.hpp"

namespace specdec_test {

struct ring_round {
  std::vector<std::int32_t> node_indptr{0}, accepted, num_accepted;
  std::vector<float> spec_k, spec_v;  // [N, kv_heads, head_dim]
};

//! One round for R requests: trees of up to max_nodes nodes, accepted paths of random length
//! (strictly increasing node indices), random K/V rows.
inline ring_round random_ring_round(int R, int max_nodes, int kv_heads, int dim, specdec::philox_stream& rng) {
  ring_round w;
  for (int r = 0; r < R; ++r) {
    const int n = static_cast<int>(rng.below(static_cast<std::uint32_t>(max_nodes + 1)));
    const int b = w.node_indptr.back();
    int k = 0;
    for (int i = 0; i < n; ++i)
      if (rng.below(3) != 0) w.accepted.push_back(i), ++k;
    for (int i = k; i < n; ++i) w.accepted.push_back(-5);  // unused slots (the verifier's scratch)
    w.num_accepted.push_back(k);
    w.node_indptr.push_back(b + n);
  }
  const std::size_t elems = static_cast<std::size_t>(w.node_indptr.back()) * kv_heads * dim;
  for (std::size_t i = 0; i < elems; ++i) w.spec_k.push_back(rng.uniform()), w.spec_v.push_back(rng.uniform() - 1.0f);
  return w;
}

//! The reference: append_rows per request on an owning cache.
inline void reference_append(specdec::ring_kv_cache<float>& cache, ring_round& w, int kv_heads, int dim) {
  for (int r = 0; r + 1 < static_cast<int>(w.node_indptr.size()); ++r) {
    const int b = w.node_indptr[r], n = w.node_indptr[r + 1] - b;
    const auto k = specdec::make_view<3>(w.spec_k.data() + static_cast<std::size_t>(b) * kv_heads * dim, {n, kv_heads, dim});
    const auto v = specdec::make_view<3>(w.spec_v.data() + static_cast<std::size_t>(b) * kv_heads * dim, {n, kv_heads, dim});
    cache.append_rows(r, k, v, std::span<const std::int32_t>(w.accepted.data() + b, static_cast<std::size_t>(w.num_accepted[r])));
  }
}

}  // namespace specdec_test
