#pragma once
//! \file topk_batch.cuh
//! CUDA backend of topk_batch (core/topk_batch.hpp): topk_batch_backend<cuda>. One kernel on
//! policy.stream, a block of 512 threads per row (grid-stride over rows):
//!  1. radix select: four passes over the row, each a 256-bin shared histogram of one byte of
//!     topk_key (most significant first) among the keys that match the bytes chosen so far; one
//!     thread picks the byte of the k-th largest key (topk_digit_pick). The result is the k-th key T
//!     and `need`, how many entries equal to T are among the k best;
//!  2. gather, in index order chunk by chunk: every entry with key > T (fewer than k, appended to a
//!     shared list by an atomic counter) and the first `need` entries with key == T (their rank among
//!     the ties from a CUB block scan, so the lowest indices win: topk's tie rule);
//!  3. a CUB block radix sort of the k gathered (key << 32 | ~index) words, descending: value order,
//!     then lower index first; the outputs are written from it.
//! The result equals the host backend's (topk per row) exactly: the selection is by keys and indices
//! only, no arithmetic on the values.

#include <cuda_runtime_api.h>

#include <cstdint>

#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>

#include "specdec/core/device_types.cuh"
#include "specdec/core/topk_batch.hpp"

namespace specdec {
namespace detail {

inline constexpr int topk_batch_threads = 512;
inline constexpr int topk_batch_items = topk_batch_max_k_device / topk_batch_threads;  // keys per thread in the sort

__global__ void __launch_bounds__(topk_batch_threads) topk_batch_kernel(const topk_batch_args a) {
  using scan_t = cub::BlockScan<std::int32_t, topk_batch_threads>;
  using sort_t = cub::BlockRadixSort<std::uint64_t, topk_batch_threads, topk_batch_items>;
  __shared__ union {
    typename scan_t::TempStorage scan;
    typename sort_t::TempStorage sort;
  } tmp;
  __shared__ std::int32_t hist[256];
  __shared__ std::uint64_t chosen[topk_batch_max_k_device];
  __shared__ std::uint32_t prefix_s;
  __shared__ std::int32_t need_s, above_s, ties_s;
  const int t = static_cast<int>(threadIdx.x);
  for (std::int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const float* row = a.values + r * a.value_stride;
    // 1. The k-th largest key, a byte per pass.
    if (t == 0) prefix_s = 0u, need_s = a.k;
    for (int pass = 0; pass < 4; ++pass) {
      const int shift = 24 - 8 * pass;
      for (int d = t; d < 256; d += topk_batch_threads) hist[d] = 0;
      __syncthreads();  // hist cleared, prefix_s and need_s written
      const std::uint32_t prefix = prefix_s;
      for (std::int64_t i = t; i < a.n; i += topk_batch_threads) {
        const std::uint32_t key = topk_key(__ldg(row + i));
        if (pass == 0 || (key >> (shift + 8)) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1);
      }
      __syncthreads();
      if (t == 0) {
        std::int32_t need = need_s;
        const int d = topk_digit_pick(hist, need);
        need_s = need;
        prefix_s = (prefix << 8) | static_cast<std::uint32_t>(d);
      }
      __syncthreads();  // every thread has read hist and the old prefix before the next pass
    }
    const std::uint32_t kth = prefix_s;
    const std::int32_t need = need_s;  // entries equal to kth among the k best (>= 1)
    const std::int32_t above = a.k - need;
    // 2. Gather: keys above kth anywhere in [0, above), the first `need` ties in [above, k).
    if (t == 0) above_s = 0, ties_s = 0;
    __syncthreads();
    for (std::int64_t base = 0; base < a.n; base += topk_batch_threads) {  // uniform trip count
      const std::int64_t i = base + t;
      const std::uint32_t key = i < a.n ? topk_key(__ldg(row + i)) : 0u;
      const bool live = i < a.n;
      const std::uint64_t word = (static_cast<std::uint64_t>(key) << 32) | static_cast<std::uint32_t>(~static_cast<std::uint32_t>(i));
      if (live && key > kth) chosen[atomicAdd(&above_s, 1)] = word;
      std::int32_t rank, tied;
      scan_t(tmp.scan).ExclusiveSum(live && key == kth ? 1 : 0, rank, tied);
      const std::int32_t before = ties_s;
      if (live && key == kth && before + rank < need) chosen[above + before + rank] = word;
      __syncthreads();  // every thread has read ties_s (and the scan storage is free again)
      if (t == 0) ties_s = before + tied;
      __syncthreads();
      if (ties_s >= need && above_s >= above) break;  // uniform: both are shared
    }
    // 3. Sort the k words, descending; padding (0) sorts last.
    std::uint64_t keys[topk_batch_items];
#pragma unroll
    for (int j = 0; j < topk_batch_items; ++j) {
      const int slot = t * topk_batch_items + j;
      keys[j] = slot < a.k ? chosen[slot] : 0u;
    }
    __syncthreads();  // the scan storage (shared with the sort's) is no longer read
    sort_t(tmp.sort).SortDescendingBlockedToStriped(keys);
#pragma unroll
    for (int j = 0; j < topk_batch_items; ++j) {
      const int slot = j * topk_batch_threads + t;  // striped: slot j * threads + t
      if (slot < a.k) {
        const auto idx = static_cast<std::int32_t>(~static_cast<std::uint32_t>(keys[j]));
        a.out_indices[r * a.index_stride + slot] = idx;
        a.out_values[r * a.out_value_stride + slot] = row[idx];
      }
    }
    __syncthreads();  // chosen, hist and the sort storage are free for the next row
  }
}

//! The cuda backend (the seam in topk_batch.hpp): the entry point has checked shapes, strides, memory
//! spaces and k. Launches the kernel on policy.stream; no synchronisation. A failed launch throws
//! cuda_error.
template <>
struct topk_batch_backend<cuda> {
  static void run(const cuda& policy, const topk_batch_args& a) {
    launch_per_request<topk_batch_threads>(topk_batch_kernel, a.rows, policy.stream, "topk_batch_kernel", a);
  }
};

}  // namespace detail
}  // namespace specdec
