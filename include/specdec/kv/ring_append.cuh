#pragma once
//! \file ring_append.cuh
//! CUDA backend of ring_append_batch (kv/ring_append.hpp): ring_append_backend<cuda>. After the status
//! reset, one kernel on policy.stream, a block per request (grid-stride over requests):
//!  1. checks the request's offsets, num_accepted, accepted path (strictly increasing, in the tree)
//!     and appended counter in parallel (device_error::node_indptr / accepted / committed_length); a
//!     request that fails is not written;
//!  2. copies the newest min(k, slots) accepted rows of spec_k / spec_v to slots
//!     (appended + i) % slots (kv_heads * head_dim elements each, spread over the block);
//!  3. thread 0 advances appended and rewrites the request's starts / lengths (ring_view_after).
//! The result equals the host backend's bit for bit (copies only).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>

#include "specdec/core/device_types.cuh"
#include "specdec/kv/ring_append.hpp"

namespace specdec {
namespace detail {

inline constexpr int ring_append_threads = 256;

template <class T>
__global__ void __launch_bounds__(ring_append_threads) ring_append_kernel(const ring_append_args<T> a) {
  const int t = static_cast<int>(threadIdx.x);
  device_check_indptr_ends(a.node_indptr, a.requests, a.nodes, a.status);
  const kv_geometry g = a.ring.geometry();
  const int slots = a.ring.mapping.slots;
  for (std::int64_t r64 = blockIdx.x; r64 < a.requests; r64 += gridDim.x) {
    const auto r = static_cast<std::int32_t>(r64);
    std::int32_t b, e;
    if (!device_request_range(a.node_indptr, r, a.nodes, a.status, b, e)) continue;  // uniform
    const std::int32_t n = e - b, k = a.num_accepted[r];
    const std::int64_t base = a.appended[r];
    bool bad = false;
    if (t == 0) {
      if (!(k >= 0 && k <= n)) device_report(a.status, device_error::accepted, r, -1), bad = true;
      if (!(base >= 0 && base <= std::numeric_limits<std::int64_t>::max() - n))
        device_report(a.status, device_error::committed_length, r, -1), bad = true;
    }
    if (k >= 0 && k <= n)
      for (std::int32_t j = t; j < k; j += ring_append_threads) {
        const std::int32_t v = a.accepted[b + j];
        if (!(v >= 0 && v < n && (j == 0 || v > a.accepted[b + j - 1])))
          device_report(a.status, device_error::accepted, r, j), bad = true;
      }
    if (__syncthreads_or(bad) != 0) continue;
    const std::int32_t first = k > slots ? k - slots : 0;  // older ones would be overwritten in this call
    const std::int64_t row = static_cast<std::int64_t>(g.num_kv_heads) * g.head_dim;
    const std::int64_t total = (k - first) * row;
    for (std::int64_t x = t; x < total; x += ring_append_threads) {
      const auto i = static_cast<std::int32_t>(first + x / row);
      const std::int64_t within = x % row;
      const auto h = static_cast<int>(within / g.head_dim);
      const auto c = static_cast<int>(within % g.head_dim);
      const int slot = static_cast<int>((base + i) % slots);
      const std::int64_t src = b + a.accepted[b + i];
      const std::int64_t dst = a.ring.mapping.slot_offset(r, slot, h, g) + c;
      a.ring.k[dst] = a.spec_k[src * a.k_stride + within];
      a.ring.v[dst] = a.spec_v[src * a.v_stride + within];
    }
    if (t == 0) {
      a.appended[r] = base + k;
      ring_view_after(base + k, a.ring.mapping.window, slots, a.starts[r], a.lengths[r]);
    }
  }
}

//! The cuda backend (the seam in ring_append.hpp): the entry point has checked shapes, strides and
//! memory spaces. Clears status and launches the kernel on policy.stream; no synchronisation.
template <>
struct ring_append_backend<cuda> {
  template <class T>
  static void run(const cuda& policy, const ring_append_args<T>& a) {
    clear_device_status(a.status, policy.stream);
    launch_per_request<ring_append_threads>(ring_append_kernel<T>, a.requests, policy.stream, "ring_append_kernel", a);
  }
};

}  // namespace detail
}  // namespace specdec
