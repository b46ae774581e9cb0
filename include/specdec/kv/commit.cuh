#pragma once
//! \file commit.cuh
//! CUDA backend of the array forms of kv_commit_in_place_batch and kv_commit_from_buffer_batch
//! (kv/commit.hpp): commit_batch_backend<cuda>.
//! On policy.stream, after a memset that clears `status`, over groups of commit_group_layers<L>
//! layers (32 layers of the shipped layouts per group, passed as a kernel parameter):
//!  1. one check kernel per group (a thread per request): the first group checks node_indptr,
//!     committed lengths, num_accepted and the accepted paths; every group checks committed + tree
//!     size (in place) or + num_accepted (from a buffer) against each of its layers' capacity(r) (the
//!     mapping's, called on the device). All check kernels are enqueued before any copy, so a value
//!     error leaves every cache untouched. Which of several bad values is reported is unspecified.
//!  2. one copy kernel per group (a block per (request, KV head, layer), threads over the head_dim
//!     columns): returns at once unless status is clear; copies accepted node a_j to committed + j,
//!     each thread its own columns of K and V, from the spec buffers' row node_indptr[r] + a_j
//!     (from-buffer commit) or from cache position committed + a_j (in place), commit_rows_in_flight
//!     rows at a time (all loads of a batch, then its stores). The result is the host's
//!     (detail::move_accepted, j ascending): a destination committed + j is below every later source
//!     committed + a_i (paths increase strictly, so a_i >= i > j), and no two threads touch the same
//!     element. The first layer's copy writes new_lengths.
//! Rows are copied element by element as stored (value bits unchanged, NaN included).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>

#include "specdec/core/device_types.cuh"
#include "specdec/core/error.hpp"
#include "specdec/kv/commit.hpp"

namespace specdec {
namespace detail {

inline constexpr int commit_check_threads = 128;
inline constexpr int commit_copy_threads = 128;

//! Up to G layers (and their spec buffers) of one launch, passed by value as a kernel parameter:
//! layers [first, first + count) of the call. Slots past `count` repeat the last layer (so a layout
//! without a default constructor fits) and are never read.
template <class L, int G>
struct commit_layer_group {
  L layers[G];
  commit_spec<typename L::value_type> specs[G];
  int first = 0, count = 0;
};

//! Layers per launch: as many as fit in 3840 bytes of kernel parameters (the portable limit is 4 KB,
//! with commit_batch_args beside the group), 1 to 32: 32 for the shipped layouts (48-72 bytes each
//! plus a 48-byte commit_spec).
template <class L>
inline constexpr int commit_group_layers = static_cast<int>(
    std::clamp<std::size_t>(3840 / (sizeof(L) + sizeof(commit_spec<typename L::value_type>)), 1, 32));

template <class L, int G, std::size_t... I>
commit_layer_group<L, G> make_commit_group(std::span<const L> layers,
                                           std::span<const commit_spec<typename L::value_type>> specs,
                                           std::size_t first, std::index_sequence<I...>) {
  const std::size_t last = std::min(first + G, layers.size()) - 1;
  const auto at = [&](std::size_t i) { return std::min(first + i, last); };
  return {{layers[at(I)]...},
          {(specs.empty() ? commit_spec<typename L::value_type>{} : specs[at(I)])...},
          static_cast<int>(first),
          static_cast<int>(last - first + 1)};
}

template <class L, int G>
__global__ void __launch_bounds__(commit_check_threads)
    commit_check_kernel(const commit_layer_group<L, G> g, const commit_batch_args a) {
  const std::int32_t r0 = static_cast<std::int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  const bool first_group = g.first == 0;
  if (first_group && r0 == 0) {
    if (a.node_indptr[0] != 0) device_report(a.status, device_error::node_indptr, 0, -1);
    if (a.node_indptr[a.requests] != a.nodes) device_report(a.status, device_error::node_indptr, a.requests, -1);
  }
  // 64-bit steps: r + the grid's threads passes INT32_MAX for a request count within a grid of it
  for (std::int64_t r64 = r0; r64 < a.requests; r64 += std::int64_t{gridDim.x} * blockDim.x) {
    const auto r = static_cast<std::int32_t>(r64);
    const std::int32_t b = a.node_indptr[r], e = a.node_indptr[r + 1], c = a.committed[r];
    if (first_group) {
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
    // checked by the first group; a bad one only makes this bound meaningless, never an access).
    const long long need = a.from_buffer ? static_cast<long long>(a.num_accepted[r]) : static_cast<long long>(e) - b;
    if (c >= 0 && b >= 0 && e >= b)
      for (int l = 0; l < g.count; ++l)
        if (static_cast<long long>(c) + need > g.layers[l].capacity(r))
          device_report(a.status, device_error::capacity, r, g.first + l);
  }
}

//! A block per (request, KV head, layer of the group), threads over the head_dim columns; each
//! thread runs commit_copy_columns (kv/commit.hpp: commit_rows_in_flight rows loaded before they are
//! stored, the host's result) on its own columns.
template <class L, int G>
__global__ void __launch_bounds__(commit_copy_threads)
    commit_copy_kernel(const commit_layer_group<L, G> g, const commit_batch_args a) {
  __shared__ int failed;
  const int t = static_cast<int>(threadIdx.x);
  if (t == 0) failed = a.status[0] != 0;  // every check kernel ran before this one on the stream
  __syncthreads();
  if (failed) return;
  const int h = static_cast<int>(blockIdx.y), l = static_cast<int>(blockIdx.z);
  for (std::int64_t r64 = blockIdx.x; r64 < a.requests; r64 += gridDim.x) {  // 64-bit: no wrap near INT32_MAX
    const auto r = static_cast<std::int32_t>(r64);
    commit_copy_columns(g.layers[l], g.specs[l], a, r, h, t, commit_copy_threads);
    if (l == 0 && g.first == 0 && h == 0 && t == 0) a.new_lengths[r] = a.committed[r] + a.num_accepted[r];
  }
}

//! The cuda backend (the seam in commit.hpp): the entry point has checked shapes, memory spaces and
//! the layers' geometry. Clears status, enqueues the check kernels, then the copy kernels, on
//! policy.stream, each over commit_group_layers<L> layers at once (2 launches for 32 layers of the
//! shipped layouts, where a launch per layer and kind took 64); no synchronisation. A failed launch
//! throws cuda_error.
template <>
struct commit_batch_backend<cuda> {
  template <class L>
  static void run(const cuda& policy, std::span<const L> layers, const commit_batch_args& a,
                  std::span<const commit_spec<typename L::value_type>> specs) {
    constexpr int G = commit_group_layers<L>;
    static_assert(G == 1 || sizeof(commit_layer_group<L, G>) + sizeof(commit_batch_args) <= 4096,
                  "the layer group must fit the 4 KB kernel-parameter limit");
    cudaStream_t stream = policy.stream;
    clear_device_status(a.status, stream);
    const auto group = [&](std::size_t first) {
      return make_commit_group<L, G>(layers, specs, first, std::make_index_sequence<G>{});
    };
    const int check_blocks = static_cast<int>(  // in 64 bits: requests may be up to INT32_MAX
        a.requests < 1 ? 1 : (std::int64_t{a.requests} + commit_check_threads - 1) / commit_check_threads);
    for (std::size_t l = 0; l < layers.size(); l += G) {
      commit_check_kernel<L, G><<<check_blocks < 1024 ? check_blocks : 1024, commit_check_threads, 0, stream>>>(
          group(l), a);
      SPECDEC_CUDA_CHECK(cudaGetLastError());
    }
    if (a.requests == 0) return;
    // validate_kv_layout guarantees num_kv_heads() > 0 and equal geometry across layers.
    for (std::size_t l = 0; l < layers.size(); l += G) {
      const auto g = group(l);
      const dim3 grid(static_cast<unsigned>(a.requests < 65535 ? a.requests : 65535),
                      static_cast<unsigned>(layers[0].num_kv_heads()), static_cast<unsigned>(g.count));
      commit_copy_kernel<L, G><<<grid, commit_copy_threads, 0, stream>>>(g, a);
      SPECDEC_CUDA_CHECK(cudaGetLastError());
    }
  }
};

}  // namespace detail
}  // namespace specdec
