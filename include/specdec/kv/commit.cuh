#pragma once
//! \file commit.cuh
//! CUDA backend of the array forms of kv_commit_in_place_batch and kv_commit_from_buffer_batch
//! (kv/commit.hpp): commit_batch_backend<cuda>.
//! On policy.stream, after a memset that clears `status`:
//!  1. one check kernel per layer (a thread per request): layer 0 checks node_indptr, committed
//!     lengths, num_accepted and the accepted paths; every layer checks committed + tree size (in
//!     place) or + num_accepted (from a buffer) against its own capacity(r) (the mapping's, called on the device). All check kernels are enqueued
//!     before any copy, so a value error leaves every cache untouched.
//!  2. one copy kernel per layer (a block per (request, KV head), threads over the head_dim columns):
//!     returns at once unless status is clear; copies accepted node a_j to committed + j for j = 0,
//!     1, ... in order, each thread its own columns of K and V, from the spec buffers' row
//!     node_indptr[r] + a_j (from-buffer commit) or from cache position committed + a_j (in place). The
//!     order is the host's (detail::move_accepted): a destination committed + j is only ever a source
//!     a_i for some i < j (paths increase strictly, so a_i >= i), so a thread has read every element
//!     it overwrites, and no two threads touch the same element. Layer 0's copy writes new_lengths.
//! Rows are copied element by element as stored (value bits unchanged, NaN included).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "specdec/core/device_types.cuh"
#include "specdec/core/error.hpp"
#include "specdec/kv/commit.hpp"

namespace specdec {
namespace detail {

inline constexpr int commit_check_threads = 128;
inline constexpr int commit_copy_threads = 128;

template <class L>
__global__ void __launch_bounds__(commit_check_threads)
    commit_check_kernel(const L layer, int layer_index, const commit_batch_args a) {
  const std::int32_t r0 = static_cast<std::int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (layer_index == 0 && r0 == 0) {
    if (a.node_indptr[0] != 0) device_report(a.status, device_error::node_indptr, 0, -1);
    if (a.node_indptr[a.requests] != a.nodes) device_report(a.status, device_error::node_indptr, a.requests, -1);
  }
  for (std::int32_t r = r0; r < a.requests; r += static_cast<std::int32_t>(gridDim.x * blockDim.x)) {
    const std::int32_t b = a.node_indptr[r], e = a.node_indptr[r + 1], c = a.committed[r];
    if (layer_index == 0) {
      if (b < 0 || e < b || e > a.nodes) {
        device_report(a.status, device_error::node_indptr, r, -1);
        continue;
      }
      if (c < 0) device_report(a.status, device_error::committed_length, r, -1);
      const std::int32_t n = e - b, k = a.num_accepted[r];
      if (k < 0 || k > n) {
        device_report(a.status, device_error::accepted, r, -1);
        continue;
      }
      std::int32_t prev = -1;
      for (std::int32_t j = 0; j < k; ++j) {
        const std::int32_t v = a.accepted[b + j];
        if (v <= prev || v >= n) {
          device_report(a.status, device_error::accepted, r, j);
          break;
        }
        prev = v;
      }
    }
    // Slots written: the whole tree's in place, the accepted path's from a buffer (num_accepted is
    // checked by layer 0; a bad one only makes this bound meaningless, never an access).
    const long long need = a.from_buffer ? static_cast<long long>(a.num_accepted[r]) : static_cast<long long>(e) - b;
    if (c >= 0 && b >= 0 && e >= b && static_cast<long long>(c) + need > layer.capacity(r))
      device_report(a.status, device_error::capacity, r, layer_index);
  }
}

template <class L>
__global__ void __launch_bounds__(commit_copy_threads)
    commit_copy_kernel(const L layer, const commit_spec<typename L::value_type> spec, bool write_lengths,
                       const commit_batch_args a) {
  __shared__ int failed;
  const int t = static_cast<int>(threadIdx.x);
  if (t == 0) failed = a.status[0] != 0;  // the check kernels ran before this one on the stream
  __syncthreads();
  if (failed) return;
  const int h = static_cast<int>(blockIdx.y);
  const int dim = layer.head_dim();
  for (std::int32_t r = static_cast<std::int32_t>(blockIdx.x); r < a.requests; r += static_cast<std::int32_t>(gridDim.x)) {
    const std::int32_t b = a.node_indptr[r], c = a.committed[r], k = a.num_accepted[r];
    for (std::int32_t j = 0; j < k; ++j) {
      const std::int32_t node = a.accepted[b + j], dst = c + j;
      if (!a.from_buffer && node == j) continue;  // already in place: not even rewritten (the host's rule)
      const auto* ks = a.from_buffer ? spec.k_row(static_cast<std::int64_t>(b) + node, h) : layer.k_row(r, c + node, h);
      const auto* vs = a.from_buffer ? spec.v_row(static_cast<std::int64_t>(b) + node, h) : layer.v_row(r, c + node, h);
      auto* kd = layer.k_row(r, dst, h);
      auto* vd = layer.v_row(r, dst, h);
      for (int d = t; d < dim; d += commit_copy_threads) {
        kd[d] = ks[d];
        vd[d] = vs[d];
      }
    }
    if (write_lengths && h == 0 && t == 0) a.new_lengths[r] = c + k;
  }
}

//! The cuda backend (the seam in commit.hpp): the entry point has checked shapes, memory spaces and
//! the layers' geometry. Clears status, enqueues every layer's check kernel, then every layer's copy
//! kernel, on policy.stream; no synchronisation. A failed launch throws cuda_error.
template <>
struct commit_batch_backend<cuda> {
  template <class L>
  static void run(const cuda& policy, std::span<const L> layers, const commit_batch_args& a,
                  std::span<const commit_spec<typename L::value_type>> specs) {
    cudaStream_t stream = policy.stream;
    clear_device_status(a.status, stream);
    const int check_blocks = a.requests < 1 ? 1 : (a.requests + commit_check_threads - 1) / commit_check_threads;
    for (std::size_t l = 0; l < layers.size(); ++l) {
      commit_check_kernel<L><<<check_blocks < 1024 ? check_blocks : 1024, commit_check_threads, 0, stream>>>(
          layers[l], static_cast<int>(l), a);
      SPECDEC_CUDA_CHECK(cudaGetLastError());
    }
    if (a.requests == 0) return;
    // validate_kv_layout guarantees num_kv_heads() > 0 and equal geometry across layers.
    const dim3 grid(static_cast<unsigned>(a.requests < 65535 ? a.requests : 65535),
                    static_cast<unsigned>(layers[0].num_kv_heads()));
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const commit_spec<typename L::value_type> spec = a.from_buffer ? specs[l] : commit_spec<typename L::value_type>{};
      commit_copy_kernel<L><<<grid, commit_copy_threads, 0, stream>>>(layers[l], spec, l == 0, a);
      SPECDEC_CUDA_CHECK(cudaGetLastError());
    }
  }
};

}  // namespace detail
}  // namespace specdec
