#pragma once
//! \file partial_kv.cuh
//! CUDA backends of kv/partial_kv.hpp's batch forms: kv_importance_backend<cuda>,
//! partial_kv_select_backend<cuda> and partial_kv_append_backend<cuda>.
//!
//! kv_importance_batch: after the status reset, one kernel on policy.stream over (request, chunk of
//! 256 tokens) work items, grid-stride:
//!  1. the item's request length from the layout (device_error::length when it is negative or above
//!     the scores' columns: that request writes nothing);
//!  2. the summed queries of every kv head into shared memory (detail::importance_qsum: the host's
//!     floats);
//!  3. a warp per importance_rows_per_warp adjacent (token, kv head) rows, loaded together: lanes
//!     stride over head_dim, a shuffle reduction per row, lane 0 writes the scores. Rows of one
//!     token's heads are adjacent in NHD and paged layouts, so a warp reads consecutive memory.
//!
//! partial_kv_append_batch: after the status reset, a thread per request checks its state and walks
//! its new tokens with the host's partial_kv_place.
//!
//! partial_kv_select_batch: after the status reset, one kernel on policy.stream, a block of 512
//! threads per (request, ranked kv head) (every kv head, or head 0 alone when the selection is shared),
//! grid-stride:
//!  1. the request's length from the layout (device_error::length when it is negative or above the
//!     scores' columns: nothing of that request is written);
//!  2. the threshold: the rest-th largest ranking key (topk_key of the score; block_radix_select,
//!     core/topk_batch.cuh, shared with topk_batch) and how many of the keys equal to it are taken;
//!  3. the ordered gather: the tokens in index order, a chunk of 512 at a time, two CUB block scans
//!     (the rank among the tied keys, then the slot among the taken tokens), so the taken tokens
//!     land in token order in their slots and the lowest indices win the ties;
//!  4. the eviction order: the taken tokens' (partial_kv_rank_key, slot) pairs in a CUB block radix
//!     sort, ascending, after the free slots.
//! The lists equal the host backend's: the same keys, the same rule, no arithmetic on the scores but
//! the shared mode's sum (partial_kv_shared_score: the same float, with IEEE denormals).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>

#include "specdec/core/device_types.cuh"
#include "specdec/core/topk_batch.cuh"
#include "specdec/kv/partial_kv.hpp"

namespace specdec {
namespace detail {

inline constexpr int importance_threads = 256;
inline constexpr int importance_chunk = 256;  //!< tokens per work item
inline constexpr int importance_rows_per_warp = 8;  //!< (token, kv head) rows a warp reads at once

template <class QT, class L>
__global__ void __launch_bounds__(importance_threads) kv_importance_kernel(const kv_importance_batch_args<QT, L> a,
                                                                           std::int64_t chunks) {
  extern __shared__ float qsum[];  // [Hkv][D]
  const L& cache = a.cache;
  const int hkv = cache.num_kv_heads(), d = cache.head_dim(), group = a.hq / hkv;
  const int t = static_cast<int>(threadIdx.x), lane = t % 32, warp = t / 32;
  constexpr int warps = importance_threads / 32;
  const std::int64_t items = static_cast<std::int64_t>(cache.num_requests()) * chunks;
  for (std::int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const auto r = static_cast<int>(item / chunks);
    const std::int64_t t0 = (item % chunks) * importance_chunk;
    const int len = cache.length(r);
    if (len < 0 || len > a.columns) {  // uniform over the block
      if (t0 == 0 && t == 0) device_report(a.status, device_error::length, r, -1);
      continue;
    }
    if (t0 >= len) continue;  // uniform
    const QT* q = a.q + r * a.q_stride_request;
    __syncthreads();  // the previous item is done with qsum
    for (int x = t; x < hkv * d; x += importance_threads)
      qsum[x] = importance_qsum(q, a.q_stride_head, group, x / d, x % d);
    __syncthreads();
    const std::int64_t t1 = std::min<std::int64_t>(len, t0 + importance_chunk);
    float* out = a.scores + r * a.s_stride_request;
    // A warp takes importance_rows_per_warp adjacent rows at once, the rows inside the column loop,
    // so their loads are in flight together (one row at a time left one 256-byte load per warp in
    // flight: 180 GB/s at batch 1 on the H100, session 31). Each row's sum is the same as one at a
    // time: its lane adds its columns in order, then the same shuffle tree.
    constexpr int RW = importance_rows_per_warp;
    const std::int64_t rows = (t1 - t0) * hkv;
    for (std::int64_t row0 = static_cast<std::int64_t>(warp) * RW; row0 < rows; row0 += warps * RW) {
      decltype(cache.k_row(r, 0, 0)) k[RW];
      const float* qs[RW];
      float acc[RW];
#pragma unroll
      for (int u = 0; u < RW; ++u) {
        const std::int64_t row = row0 + u < rows ? row0 + u : row0;  // past the end: a copy of row0, not written
        k[u] = cache.k_row(r, static_cast<int>(t0 + row / hkv), static_cast<int>(row % hkv));
        qs[u] = qsum + static_cast<int>(row % hkv) * d;
        acc[u] = 0.0f;
      }
      for (int c = lane; c < d; c += 32) {
#pragma unroll
        for (int u = 0; u < RW; ++u) acc[u] += qs[u][c] * to_float(k[u][c]);
      }
#pragma unroll
      for (int u = 0; u < RW; ++u) {
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc[u] += __shfl_xor_sync(0xffffffffu, acc[u], off);
        const std::int64_t row = row0 + u;
        if (lane == 0 && row < rows)
          out[static_cast<int>(row % hkv) * a.s_stride_head + static_cast<int>(t0 + row / hkv)] = acc[u];
      }
    }
  }
}

inline constexpr int select_threads = 512;
inline constexpr int select_items = partial_kv_select_max_device / select_threads;  // keys per thread in the sort

template <class L>
__global__ void __launch_bounds__(select_threads) partial_kv_select_kernel(const partial_kv_select_args<L> a) {
  using scan_t = cub::BlockScan<std::int32_t, select_threads>;
  using sort_t = cub::BlockRadixSort<std::uint64_t, select_threads, select_items, std::int32_t>;
  __shared__ union {
    typename scan_t::TempStorage scan;
    typename sort_t::TempStorage sort;
  } tmp;
  __shared__ radix_select_shared select;
  __shared__ std::int32_t taken_s, ties_s;
  const L& cache = a.cache;
  const int hkv = cache.num_kv_heads(), ranked = a.shared ? 1 : hkv, n = a.budget - a.sink;
  const int t = static_cast<int>(threadIdx.x);
  const std::int64_t rows = static_cast<std::int64_t>(cache.num_requests()) * ranked;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const auto r = static_cast<int>(row / ranked);
    const auto h = static_cast<int>(row % ranked);
    const int len = cache.length(r);
    if (len < 0 || len > a.columns) {  // uniform over the block
      if (h == 0 && t == 0) device_report(a.status, device_error::length, r, -1);
      continue;
    }
    const int keep = len < a.sink ? len : a.sink, shown = partial_kv_shown(len, a.sink, a.budget);
    const int rest = shown - keep, olen = len - keep;
    const float* s = a.scores + r * a.s_stride_request;
    const auto key_of = [&](std::int64_t tok) {
      const float v = a.shared ? partial_kv_shared_score(s, a.s_stride_head, hkv, tok) : s[h * a.s_stride_head + tok];
      return topk_key(v);
    };
    // The lists this block writes: its own head's, or every head's when the selection is shared.
    const int h_end = a.shared ? hkv : h + 1;
    std::int32_t* const index = a.index + r * a.i_stride_request;
    std::int32_t* const evict = a.evict + r * a.e_stride_request;
    const auto put_slot = [&](int slot, std::int32_t tok) {
      for (int g = h; g < h_end; ++g) index[g * a.i_stride_head + slot] = tok;
    };
    for (int i = t; i < keep; i += select_threads) put_slot(i, i);
    // 2-3. Threshold and ordered gather (every token of [keep, len) is taken when rest == olen).
    if (rest == olen) {
      for (std::int64_t i = t; i < olen; i += select_threads) put_slot(keep + static_cast<int>(i), keep + static_cast<int>(i));
    } else if (rest > 0) {
      const radix_select_result sel = block_radix_select<select_threads>(
          [&](const auto& visit) {
            constexpr int batch = 8;  // keys loaded before any is counted: the loads are in flight together
            std::int64_t i = t;  // 64-bit: i + 7 x 512 must not overflow near INT32_MAX
            for (; i + (batch - 1) * select_threads < olen; i += batch * select_threads) {
              std::uint32_t k[batch];
#pragma unroll
              for (int u = 0; u < batch; ++u) k[u] = key_of(keep + i + u * select_threads);
#pragma unroll
              for (int u = 0; u < batch; ++u) visit(k[u]);
            }
            for (; i < olen; i += select_threads) visit(key_of(keep + i));
          },
          rest, select);
      if (t == 0) taken_s = 0, ties_s = 0;
      __syncthreads();
      for (std::int64_t base = 0; base < olen; base += select_threads) {  // uniform trip count
        const std::int64_t i = base + t;
        const bool live = i < olen;
        const std::uint32_t key = live ? key_of(keep + i) : 0u;
        const bool tie = live && key == sel.kth;
        std::int32_t tie_rank, tied, slot_rank, taken;
        scan_t(tmp.scan).ExclusiveSum(tie ? 1 : 0, tie_rank, tied);
        const std::int32_t ties_before = ties_s, taken_before = taken_s;
        const bool take = (live && key > sel.kth) || (tie && ties_before + tie_rank < sel.need);
        __syncthreads();  // the scan storage is read by every thread before it is reused
        scan_t(tmp.scan).ExclusiveSum(take ? 1 : 0, slot_rank, taken);
        if (take && taken_before + slot_rank < rest) put_slot(keep + taken_before + slot_rank, keep + static_cast<int>(i));
        __syncthreads();  // every thread has read ties_s and taken_s, and the scan storage is free
        if (t == 0) ties_s = ties_before + tied, taken_s = taken_before + taken;
        if (taken_before + taken == rest) break;  // uniform: every thread has the same sums
        __syncthreads();  // the new counts are written
      }
    }
    // 4. The eviction order: the free slots, then the taken tokens' slots, least important first.
    const int free_slots = a.budget - (shown > a.sink ? shown : a.sink);
    for (int i = t; i < free_slots; i += select_threads)
      for (int g = h; g < h_end; ++g) evict[g * a.e_stride_head + i] = a.budget - 1 - i;
    if (rest > 0) {
      __syncthreads();  // the block's slot writes are visible to every thread
      std::uint64_t keys[select_items];
      std::int32_t slots[select_items];
#pragma unroll
      for (int j = 0; j < select_items; ++j) {
        const int p = t * select_items + j;  // blocked: position t * items + j
        slots[j] = keep + p;
        if (p < rest) {
          const std::int32_t tok = index[h * a.i_stride_head + keep + p];
          const float v = a.shared ? partial_kv_shared_score(s, a.s_stride_head, hkv, tok) : s[h * a.s_stride_head + tok];
          keys[j] = partial_kv_rank_key(v, tok);
        } else {
          keys[j] = ~std::uint64_t{0};  // padding sorts after every key (a stable sort keeps it there on a tie)
        }
      }
      sort_t(tmp.sort).SortBlockedToStriped(keys, slots);
#pragma unroll
      for (int j = 0; j < select_items; ++j) {
        const int p = j * select_threads + t;  // striped: position j * threads + t
        if (p < rest)
          for (int g = h; g < h_end; ++g) evict[g * a.e_stride_head + free_slots + p] = slots[j];
      }
    }
    if (h == 0 && t == 0) a.sizes[r] = shown, a.seen[r] = len, a.placed[r] = 0;
    __syncthreads();  // the select state, the counts and the scan and sort storage are free for the next row
  }
}

//! The cuda backend (the seam in partial_kv.hpp): the entry point has checked shapes, strides, memory
//! spaces and the shared-memory bound. Clears status and launches the kernel on policy.stream; no
//! synchronisation. A failed launch throws cuda_error.
template <>
struct kv_importance_backend<cuda> {
  template <class QT, class L>
  static void run(const cuda& policy, const kv_importance_batch_args<QT, L>& a) {
    // a user layout the host can read (managed memory): every key row the kernel reads checked
    // first, as the host backend does (a device-resident one's mapping is not read on the host)
    if (host_accessible(a.cache.space()))
      for (int r = 0; r < a.cache.num_requests(); ++r)
        require_kv_rows(a.cache, r, 0, a.cache.length(r), 0, a.cache.num_kv_heads(), kv_rows_read::keys,
                        "specdec::kv_importance_batch", "cache");
    clear_device_status(a.status, policy.stream);
    const std::int64_t chunks = std::max<std::int64_t>(1, (a.columns + importance_chunk - 1) / importance_chunk);
    const std::int64_t items = static_cast<std::int64_t>(a.cache.num_requests()) * chunks;
    if (items == 0) return;
    const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(items, 65535));
    const std::size_t smem = static_cast<std::size_t>(a.cache.num_kv_heads()) * a.cache.head_dim() * sizeof(float);
    kv_importance_kernel<QT, L><<<blocks, importance_threads, smem, policy.stream>>>(a, chunks);
    cuda_check(cudaGetLastError(), "kv_importance_kernel");
  }
};

inline constexpr int append_threads = 128;

//! partial_kv_append_batch: a thread per request (the state check, then partial_kv_place, the host's
//! walk), grid-stride.
template <class L>
__global__ void __launch_bounds__(append_threads) partial_kv_append_kernel(const partial_kv_append_args<L> a) {
  const L& cache = a.cache;
  const int R = cache.num_requests(), hkv = cache.num_kv_heads();
  for (std::int64_t r = blockIdx.x * static_cast<std::int64_t>(append_threads) + threadIdx.x; r < R;
       r += static_cast<std::int64_t>(gridDim.x) * append_threads) {
    const int len = cache.length(static_cast<int>(r));
    std::int32_t size = a.sizes[r], seen = a.seen[r], placed = a.placed[r];
    if (!partial_kv_state_ok(len, size, seen, placed, a.budget, a.sink)) {
      device_report(a.status, device_error::partial_state, static_cast<std::int32_t>(r), -1);
      continue;
    }
    if (!partial_kv_place(len, hkv, a.budget, a.sink, a.index + r * a.i_stride_request, a.i_stride_head,
                          a.evict + r * a.e_stride_request, a.e_stride_head, size, seen, placed)) {
      device_report(a.status, device_error::partial_state, static_cast<std::int32_t>(r), -1);
      continue;
    }
    a.sizes[r] = size, a.seen[r] = seen, a.placed[r] = placed;
  }
}

//! The cuda backend of partial_kv_select_batch (the seam in partial_kv.hpp): the entry point has
//! checked shapes, strides, memory spaces and |B| - |S|. Clears status and launches the kernel on
//! policy.stream; no synchronisation. A failed launch throws cuda_error.
template <>
struct partial_kv_select_backend<cuda> {
  template <class L>
  static void run(const cuda& policy, const partial_kv_select_args<L>& a) {
    clear_device_status(a.status, policy.stream);
    const std::int64_t rows = static_cast<std::int64_t>(a.cache.num_requests()) * (a.shared ? 1 : a.cache.num_kv_heads());
    if (rows == 0) return;
    launch_per_request<select_threads>(partial_kv_select_kernel<L>, rows, policy.stream, "partial_kv_select_kernel", a);
  }
};

//! The cuda backend of partial_kv_append_batch (the seam in partial_kv.hpp): the entry point has
//! checked shapes, strides and memory spaces. Clears status and launches the kernel on
//! policy.stream; no synchronisation. A failed launch throws cuda_error.
template <>
struct partial_kv_append_backend<cuda> {
  template <class L>
  static void run(const cuda& policy, const partial_kv_append_args<L>& a) {
    clear_device_status(a.status, policy.stream);
    const int R = a.cache.num_requests();
    if (R == 0) return;
    const auto blocks = static_cast<unsigned>(  // in 64 bits: R may be up to INT32_MAX
        std::min<std::int64_t>(65535, (std::int64_t{R} + append_threads - 1) / append_threads));
    partial_kv_append_kernel<L><<<blocks, append_threads, 0, policy.stream>>>(a);
    cuda_check(cudaGetLastError(), "partial_kv_append_kernel");
  }
};

}  // namespace detail
}  // namespace specdec
