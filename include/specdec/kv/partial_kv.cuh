#pragma once
//! \file partial_kv.cuh
//! CUDA backend of kv_importance_batch (kv/partial_kv.hpp): kv_importance_backend<cuda>. After the
//! status reset, one kernel on policy.stream over (request, chunk of 256 tokens) work items,
//! grid-stride:
//!  1. the item's request length from the layout (device_error::length when it is negative or above
//!     the scores' columns: that request writes nothing);
//!  2. the summed queries of every kv head into shared memory (detail::importance_qsum: the host's
//!     floats);
//!  3. a warp per importance_rows_per_warp adjacent (token, kv head) rows, loaded together: lanes
//!     stride over head_dim, a shuffle reduction per row, lane 0 writes the scores. Rows of one
//!     token's heads are adjacent in NHD and paged layouts, so a warp reads consecutive memory.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "specdec/core/device_types.cuh"
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

//! The cuda backend (the seam in partial_kv.hpp): the entry point has checked shapes, strides, memory
//! spaces and the shared-memory bound. Clears status and launches the kernel on policy.stream; no
//! synchronisation. A failed launch throws cuda_error.
template <>
struct kv_importance_backend<cuda> {
  template <class QT, class L>
  static void run(const cuda& policy, const kv_importance_batch_args<QT, L>& a) {
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

}  // namespace detail
}  // namespace specdec
