#pragma once
//! \file tree_batch.cuh
//! CUDA backend of build_tree_batch (tree/tree_batch.hpp): tree_batch_backend<cuda>. Two kernels on
//! policy.stream, after a memset that clears `status`:
//!  1. plan (one block): checks node_indptr and committed_lengths, and turns the per-request mask
//!     sizes n_r * words_per_row(n_r) into mask_indptr with a CUB block scan (chunks of the block
//!     size, a running carry between chunks); checks the total against mask's capacity.
//!  2. build (a block per request, grid-stride over requests): returns at once unless the plan
//!     found nothing wrong; copies the request's parents to shared memory when they fit, then
//!     computes each node's depth and position and each (row, word) of its ancestor mask
//!     independently (detail::tree_node_depth, detail::ancestor_mask_word: the functions the host
//!     twin test checks against the host's row-copy construction; with root_and_nodes the mask
//!     words walk detail::rooted_parents over the same parents). Consecutive threads write
//!     consecutive words of the mask, so the stores are coalesced.
//! Values are checked on the device (tree_batch.hpp's file comment); the first error found wins
//! the status word by atomicCAS.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cub/block/block_scan.cuh>
#include <limits>

#include "specdec/core/device_types.cuh"
#include "specdec/core/error.hpp"
#include "specdec/tree/tree_batch.hpp"

namespace specdec {
namespace detail {

inline constexpr int tree_batch_threads = 256;
//! Requests whose parents fit here (16 KiB) are walked from shared memory, larger ones from global.
inline constexpr int tree_batch_smem_nodes = 4096;

__global__ void __launch_bounds__(tree_batch_threads)
    tree_batch_plan_kernel(std::int32_t extra, std::int32_t R, std::int32_t N, const std::int32_t* node_indptr,
                           const std::int32_t* committed, std::int64_t* mask_indptr, std::int64_t mask_capacity,
                           std::int32_t* status) {
  using scan = cub::BlockScan<long long, tree_batch_threads>;
  __shared__ typename scan::TempStorage temp;
  __shared__ long long carry_s;
  if (threadIdx.x == 0) {
    carry_s = 0;
    if (node_indptr[0] != 0) device_report(status, device_error::node_indptr, 0, -1);
    if (node_indptr[R] != N) device_report(status, device_error::node_indptr, R, -1);
  }
  __syncthreads();
  // 64-bit steps here and below: a count within a step of INT32_MAX must not wrap the index
  for (std::int64_t base = 0; base < R; base += tree_batch_threads) {
    const bool in = base + threadIdx.x < R;
    const std::int32_t r = in ? static_cast<std::int32_t>(base + threadIdx.x) : 0;
    long long words = 0;
    if (in) {
      const std::int32_t n = node_indptr[r + 1] - node_indptr[r];
      if (n < 0) device_report(status, device_error::node_indptr, r, -1);
      if (committed[r] < 1) device_report(status, device_error::committed_length, r, -1);
      if (n + extra > 0) words = static_cast<long long>(n + extra) * words_per_row(n + extra);
    }
    long long offset, chunk_total;
    scan(temp).ExclusiveSum(words, offset, chunk_total);
    const long long carry = carry_s;
    if (in) mask_indptr[r] = carry + offset;
    __syncthreads();  // every thread has read carry_s and temp before they are reused
    if (threadIdx.x == 0) carry_s = carry + chunk_total;
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    mask_indptr[R] = carry_s;
    if (carry_s > mask_capacity) device_report(status, device_error::mask_capacity, -1, -1);
  }
  __syncthreads();  // every report of this kernel is in
  if (threadIdx.x == 0 && status[0] == 0) status[1] = status[2] = -1;  // the host backend's "no error"
}

__global__ void __launch_bounds__(tree_batch_threads)
    tree_batch_build_kernel(std::int32_t extra, std::int32_t R, const std::int32_t* node_indptr, const std::int32_t* parents,
                            const std::int32_t* committed, std::int32_t* depths, std::int32_t* positions,
                            const std::int64_t* mask_indptr, mask_word* mask, std::int32_t* status) {
  __shared__ std::int32_t par_s[tree_batch_smem_nodes];
  // The plan kernel ran before this one on the stream: its verdict is final and visible. One thread
  // reads it for the block (other blocks of this kernel may report meanwhile, and the block must
  // decide as one because of the barriers below).
  __shared__ int plan_failed;
  const int t = static_cast<int>(threadIdx.x);
  if (t == 0) plan_failed = status[0] != 0;
  __syncthreads();
  if (plan_failed) return;
  for (std::int64_t r64 = blockIdx.x; r64 < R; r64 += gridDim.x) {
    const auto r = static_cast<std::int32_t>(r64);
    const std::int32_t b = node_indptr[r], n = node_indptr[r + 1] - b;
    const std::int32_t* par = parents + b;
    __syncthreads();  // the previous request's walks are done with par_s
    if (n <= tree_batch_smem_nodes) {
      for (int i = t; i < n; i += tree_batch_threads) par_s[i] = par[i];
      __syncthreads();
      par = par_s;
    }
    const std::int32_t c = committed[r], o = b + r * extra;  // request r's first output row
    if (extra && t == 0) depths[o] = -1, positions[o] = c - 1;  // the root (root_and_nodes)
    for (std::int64_t i64 = t; i64 < n; i64 += tree_batch_threads) {
      const auto i = static_cast<std::int32_t>(i64);
      const std::int32_t p = par[i];
      if (p < -1 || p >= i) device_report(status, device_error::parent, r, i);
      const std::int32_t d = tree_node_depth(par, i);
      if (c > std::numeric_limits<std::int32_t>::max() - d)
        device_report(status, device_error::position_overflow, r, i);
      depths[o + extra + i] = d;
      positions[o + extra + i] = c + d;  // wraps only when the overflow was just reported
    }
    const std::int32_t m = n + extra;
    const int w = words_per_row(m);
    const std::int64_t words = static_cast<std::int64_t>(m) * w;
    mask_word* mk = mask + mask_indptr[r];
    const rooted_parents rooted{par};
    for (std::int64_t k = t; k < words; k += tree_batch_threads) {
      const auto row = static_cast<std::int32_t>(k / w), word = static_cast<std::int32_t>(k % w);
      mk[k] = extra ? ancestor_mask_word(rooted, row, word) : ancestor_mask_word(par, row, word);
    }
  }
}

//! The cuda backend (the seam in tree_batch.hpp): build_tree_batch has checked shapes, strides and
//! memory spaces. Clears status, then launches the plan and build kernels on policy.stream; no
//! synchronisation. A failed launch throws cuda_error.
template <>
struct tree_batch_backend<cuda> {
  static void run(const cuda& policy, tree_batch_rows rows, std::int32_t R, std::int32_t N, const std::int32_t* node_indptr,
                  const std::int32_t* parents, const std::int32_t* committed, std::int32_t* depths,
                  std::int32_t* positions, std::int64_t* mask_indptr, mask_word* mask, std::int64_t mask_capacity,
                  std::int32_t* status) {
    cudaStream_t stream = policy.stream;
    SPECDEC_CUDA_CHECK(cudaMemsetAsync(status, 0, 3 * sizeof(std::int32_t), stream));
    const std::int32_t extra = rows == tree_batch_rows::root_and_nodes ? 1 : 0;
    tree_batch_plan_kernel<<<1, tree_batch_threads, 0, stream>>>(extra, R, N, node_indptr, committed, mask_indptr,
                                                                 mask_capacity, status);
    SPECDEC_CUDA_CHECK(cudaGetLastError());
    if (R == 0) return;
    const int blocks = static_cast<int>(R < 65535 ? R : 65535);
    tree_batch_build_kernel<<<blocks, tree_batch_threads, 0, stream>>>(extra, R, node_indptr, parents, committed, depths,
                                                                       positions, mask_indptr, mask, status);
    SPECDEC_CUDA_CHECK(cudaGetLastError());
  }
};

}  // namespace detail
}  // namespace specdec
