#pragma once
// A vLLM-style block-table pool holding the same logical rows as a contiguous cache, for the host
// (tests/kv/test_block_table_kv.cpp) and CUDA (tests/cuda/test_attention_hybrid.cu) block-table tests.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "specdec/core/numeric.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/kv/block_table_kv.hpp"

namespace kv_test {

//! A block-table pool holding the same logical rows as a contiguous NHD cache [R, cap, H, D]: blocks
//! drawn from a random permutation of a pool with spare blocks, rows padded with -1 past the
//! allocated entries (so a read of padding would be out of range), unused pool slots filled with NaN
//! (so a read of a wrong slot shows in the output).
template <class T>
struct block_pool {
  int requests = 0, hkv = 0, d = 0, block_size = 0, max_blocks = 0, num_blocks = 0;
  std::vector<std::int32_t> table, allocated;
  std::vector<T> k, v;

  block_pool(specdec::philox_stream& rng, const std::vector<std::int32_t>& lens, int capacity, int hkv_, int d_,
             int bs)
      : requests(static_cast<int>(lens.size())), hkv(hkv_), d(d_), block_size(bs) {
    max_blocks = (capacity + bs - 1) / bs + 1;
    for (int r = 0; r < requests; ++r) {
      const int need = (lens[static_cast<std::size_t>(r)] + bs - 1) / bs;
      allocated.push_back(std::min(max_blocks, need + static_cast<int>(rng.below(3))));
    }
    const int used = std::accumulate(allocated.begin(), allocated.end(), 0);
    num_blocks = used + 1 + static_cast<int>(rng.below(4));
    std::vector<std::int32_t> perm(static_cast<std::size_t>(num_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    for (int i = num_blocks - 1; i > 0; --i)
      std::swap(perm[static_cast<std::size_t>(i)], perm[rng.below(static_cast<std::uint32_t>(i + 1))]);
    table.assign(static_cast<std::size_t>(requests) * max_blocks, -1);
    std::size_t next = 0;
    for (int r = 0; r < requests; ++r)
      for (int b = 0; b < allocated[static_cast<std::size_t>(r)]; ++b)
        table[static_cast<std::size_t>(r) * max_blocks + b] = perm[next++];
    const std::size_t elems = static_cast<std::size_t>(num_blocks) * bs * hkv * d;
    k.assign(elems, specdec::from_float<T>(std::numeric_limits<float>::quiet_NaN()));
    v.assign(elems, specdec::from_float<T>(std::numeric_limits<float>::quiet_NaN()));
  }
  specdec::block_table_kv<T> layout(const std::int32_t* lens) {
    return {k.data(), v.data(), {table.data(), lens, max_blocks, block_size, num_blocks, allocated.data()},
            requests, hkv, d};
  }
  //! Copies rows [0, count) of request r from a contiguous layout.
  template <class L>
  void fill_from(const L& src, const std::int32_t* lens, int r, int count) {
    const auto dst = layout(lens);
    for (int t = 0; t < count; ++t)
      for (int h = 0; h < hkv; ++h) {
        std::copy_n(src.k_row(r, t, h), d, dst.k_row(r, t, h));
        std::copy_n(src.v_row(r, t, h), d, dst.v_row(r, t, h));
      }
  }
};

}  // namespace kv_test
