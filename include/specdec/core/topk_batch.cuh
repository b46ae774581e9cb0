#pragma once
//! \file topk_batch.cuh
//! CUDA backend of topk_batch (core/topk_batch.hpp): topk_batch_backend<cuda>. One kernel on
//! policy.stream, a block of 512 threads per row (grid-stride over rows):
//!  1. radix select: four passes over the row, each a 256-bin shared histogram of one byte of
//!     topk_key (most significant first) among the keys that match the bytes chosen so far; one
//!     thread picks the byte of the k-th largest key (topk_digit_pick). The result is the k-th key T
//!     and `need`, how many entries equal to T are among the k best;
//!  2. gather: when every entry equal to T is among the k best (distinct values: the usual case),
//!     every entry with key >= T, appended to a shared list by an atomic counter; otherwise, in index
//!     order chunk by chunk, every entry with key > T (the counter) and the first `need` entries with
//!     key == T (their rank among the ties from a CUB block scan, so the lowest indices win: topk's
//!     tie rule);
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

//! Block-shared state of block_radix_select.
struct radix_select_shared {
  std::int32_t hist[256];
  std::uint32_t prefix;
  std::int32_t need, kth_count;
};

//! What block_radix_select returns to every thread: the k-th largest key, how many entries equal to
//! it are among the k largest (>= 1), and how many entries equal it in all.
struct radix_select_result {
  std::uint32_t kth;
  std::int32_t need, kth_count;
};

//! The k-th largest of the uint32 keys a block's threads visit (1 <= k <= their number), a byte per
//! pass, most significant first: each pass a 256-bin shared histogram of one byte among the keys
//! that match the bytes chosen so far, then one thread picks the byte (topk_digit_pick, shared with
//! the host twins). for_each_key(visit) calls visit(key) for each of the calling thread's entries,
//! the same ones in every pass; it is called four times. Contains __syncthreads: call from every
//! thread of the block; `sh` may be reused only after a further barrier.
template <int Threads, class ForEachKey>
__device__ radix_select_result block_radix_select(const ForEachKey& for_each_key, std::int32_t k, radix_select_shared& sh) {
  const int t = static_cast<int>(threadIdx.x);
  if (t == 0) sh.prefix = 0u, sh.need = k;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    for (int d = t; d < 256; d += Threads) sh.hist[d] = 0;
    __syncthreads();  // hist cleared, prefix and need written
    const std::uint32_t prefix = sh.prefix;
    for_each_key([&](std::uint32_t key) {
      if (pass == 0 || (key >> (shift + 8)) == prefix) atomicAdd(&sh.hist[(key >> shift) & 255u], 1);
    });
    __syncthreads();
    if (t == 0) {
      std::int32_t need = sh.need;
      const int d = topk_digit_pick(sh.hist, need);
      sh.need = need;
      sh.prefix = (prefix << 8) | static_cast<std::uint32_t>(d);
      if (pass == 3) sh.kth_count = sh.hist[d];  // entries equal to the k-th key, in all
    }
    __syncthreads();  // every thread has read hist and the old prefix before the next pass
  }
  return {sh.prefix, sh.need, sh.kth_count};
}

__global__ void __launch_bounds__(topk_batch_threads) topk_batch_kernel(const topk_batch_args a) {
  using scan_t = cub::BlockScan<std::int32_t, topk_batch_threads>;
  using sort_t = cub::BlockRadixSort<std::uint64_t, topk_batch_threads, topk_batch_items>;
  __shared__ union {
    typename scan_t::TempStorage scan;
    typename sort_t::TempStorage sort;
  } tmp;
  __shared__ radix_select_shared select;
  __shared__ std::uint64_t chosen[topk_batch_max_k_device];
  __shared__ std::int32_t above_s, ties_s;
  const int t = static_cast<int>(threadIdx.x);
  for (std::int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const float* row = a.values + r * a.value_stride;
    // 1. The k-th largest key, a byte per pass.
    const radix_select_result sel = block_radix_select<topk_batch_threads>(
        [&](const auto& visit) {
          for_each_strided(row, a.n, t, topk_batch_threads, [&](float v, std::int64_t) { visit(topk_key(v)); });
        },
        a.k, select);
    const std::uint32_t kth = sel.kth;
    const std::int32_t need = sel.need;  // entries equal to kth among the k best (>= 1)
    const std::int32_t above = a.k - need;
    const bool all_ties = sel.kth_count == need;
    const auto word_of = [](std::uint32_t key, std::int64_t i) {
      return (static_cast<std::uint64_t>(key) << 32) | static_cast<std::uint32_t>(~static_cast<std::uint32_t>(i));
    };
    // 2. Gather: keys above kth anywhere in [0, above), the first `need` ties in [above, k).
    if (t == 0) above_s = 0, ties_s = 0;
    __syncthreads();
    if (all_ties) {
      // Every entry equal to kth is among the k best (the usual case for distinct values): no rank
      // among the ties is needed, so every key >= kth is appended in any order (the sort orders them).
      for_each_strided(row, a.n, t, topk_batch_threads, [&](float v, std::int64_t i) {
        const std::uint32_t key = topk_key(v);
        if (key >= kth) chosen[atomicAdd(&above_s, 1)] = word_of(key, i);
      });
    } else {
      for (std::int64_t base = 0; base < a.n; base += topk_batch_threads) {  // uniform trip count
        const std::int64_t i = base + t;
        const bool live = i < a.n;
        const std::uint32_t key = live ? topk_key(__ldg(row + i)) : 0u;
        if (live && key > kth) chosen[atomicAdd(&above_s, 1)] = word_of(key, i);
        std::int32_t rank, tied;
        scan_t(tmp.scan).ExclusiveSum(live && key == kth ? 1 : 0, rank, tied);
        const std::int32_t before = ties_s;
        if (live && key == kth && before + rank < need) chosen[above + before + rank] = word_of(key, i);
        __syncthreads();  // this chunk's atomics are done and every thread has read ties_s
        // Decided here, in registers: after the next barrier another warp's next chunk may already
        // be adding to above_s, so a read of it there could differ between threads.
        const bool done = before + tied >= need && above_s >= above;
        if (t == 0) ties_s = before + tied;
        __syncthreads();  // (the scan storage is free again)
        if (done) break;
      }
    }
    // Every slot of chosen is written (the all-ties path ends without a barrier of its own: without
    // this one a thread read slots another warp had not written yet, found on the H100 in session
    // 31), and the scan storage, shared with the sort's, is no longer read.
    __syncthreads();
    // 3. Sort the k words, descending; padding (0) sorts last.
    std::uint64_t keys[topk_batch_items];
#pragma unroll
    for (int j = 0; j < topk_batch_items; ++j) {
      const int slot = t * topk_batch_items + j;
      keys[j] = slot < a.k ? chosen[slot] : 0u;
    }
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
    __syncthreads();  // chosen, the select state and the sort storage are free for the next row
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
