#pragma once
//! \file ring_append.hpp
//! ring_append_batch: after verification, append each request's accepted draft-tree tokens to the
//! draft's ring-buffer cache (LongSpec §3.1; kv/ring_kv.hpp's tree-drafting mode (a): the tree tokens'
//! K/V went to sliding_window_attention as spec_k / spec_v and only the accepted path enters the
//! ring), for a whole batch, from the verifier's own outputs and in the memory the policy runs in.
//! It is ring_kv_cache::append_rows for every request at once over arrays an engine keeps on the
//! device: token number n of request r (0-based count of all tokens ever appended) goes to slot
//! n % slots, and the view becomes the newest min(appended, window) tokens:
//!   lengths[r] = min(appended[r], window),  starts[r] = (appended[r] - lengths[r]) % slots.
//! Only committed appends: the ring's speculative (pending) tokens of chain drafting stay with the
//! host's ring_kv_cache.

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/kv/ring_kv.hpp"

namespace specdec {
namespace detail {

//! The arrays of one ring_append_batch call, as raw pointers (a kernel parameter).
template <class T>
struct ring_append_args {
  ring_kv<T> ring;
  std::int32_t requests = 0, nodes = 0;
  const std::int32_t* node_indptr = nullptr;
  const std::int32_t* accepted = nullptr;
  const std::int32_t* num_accepted = nullptr;
  const T* spec_k = nullptr;
  const T* spec_v = nullptr;
  std::int64_t k_stride = 0, v_stride = 0;  //!< elements between consecutive tokens; head rows are dim apart
  std::int64_t* appended = nullptr;
  std::int32_t* starts = nullptr;
  std::int32_t* lengths = nullptr;
  std::int32_t* status = nullptr;
};

//! Request r's new view after `total` tokens were ever appended (ring_kv_cache's update_view).
SPECDEC_HOST_DEVICE inline void ring_view_after(std::int64_t total, int window, int slots, std::int32_t& start,
                                                std::int32_t& length) noexcept {
  const std::int64_t len = total < window ? total : window;
  length = static_cast<std::int32_t>(len);
  start = static_cast<std::int32_t>((total - len) % slots);
}

SPECDEC_BACKEND_SEAM(ring_append_backend, "ring_append_batch", "specdec/kv/ring_append.cuh");

template <>
struct ring_append_backend<host> {
  template <class T>
  static void run(const host& policy, const ring_append_args<T>& a) {
    (void)policy;  // the copies are a few rows per request
    constexpr std::string_view fn = "specdec::ring_append_batch";
    validate_indptr(fn, "node_indptr", "node_indptr", a.node_indptr, a.requests, a.nodes, "accepted.extent(0)");
    for (std::int32_t r = 0; r < a.requests; ++r) {  // every check before any write
      const std::int32_t b = a.node_indptr[r], n = a.node_indptr[r + 1] - b, k = a.num_accepted[r];
      if (!(k >= 0 && k <= n)) [[unlikely]]
        throw_invalid_argument(fn, "num_accepted",
                               "num_accepted[" + std::to_string(r) + "] in [0, tree size " + std::to_string(n) + "]", k);
      for (std::int32_t j = 0; j < k; ++j) {
        const std::int32_t v = a.accepted[b + j];
        if (!(v >= 0 && v < n && (j == 0 || v > a.accepted[b + j - 1]))) [[unlikely]]
          throw_invalid_argument(fn, "accepted",
                                 "strictly increasing node indices in [0, " + std::to_string(n) + ") for request " +
                                     std::to_string(r) + " (position " + std::to_string(j) + ")",
                                 v);
      }
      if (!(a.appended[r] >= 0 && a.appended[r] <= std::numeric_limits<std::int64_t>::max() - n)) [[unlikely]]
        throw_invalid_argument(fn, "appended", "appended[" + std::to_string(r) + "] >= 0 (tokens ever appended)",
                               a.appended[r]);
    }
    const kv_geometry g = a.ring.geometry();
    const int slots = a.ring.mapping.slots;
    for (std::int32_t r = 0; r < a.requests; ++r) {
      const std::int32_t b = a.node_indptr[r], k = a.num_accepted[r];
      const std::int64_t base = a.appended[r];
      for (std::int32_t i = k > slots ? k - slots : 0; i < k; ++i) {  // older ones would be overwritten here
        const int slot = static_cast<int>((base + i) % slots);
        const std::int64_t src = b + a.accepted[b + i];
        for (int h = 0; h < g.num_kv_heads; ++h) {
          const std::int64_t dst = a.ring.mapping.slot_offset(r, slot, h, g);
          for (int e = 0; e < g.head_dim; ++e) {
            a.ring.k[dst + e] = a.spec_k[src * a.k_stride + static_cast<std::int64_t>(h) * g.head_dim + e];
            a.ring.v[dst + e] = a.spec_v[src * a.v_stride + static_cast<std::int64_t>(h) * g.head_dim + e];
          }
        }
      }
      a.appended[r] = base + k;
      ring_view_after(a.appended[r], a.ring.mapping.window, slots, a.starts[r], a.lengths[r]);
    }
    a.status[0] = 0, a.status[1] = -1, a.status[2] = -1;
  }
};

}  // namespace detail

//! Appends every request's accepted path to the draft's ring (see the file comment):
//!   ring          ring_kv<T> of R requests (writable rows), its starts / lengths arrays being the
//!                 `starts` / `lengths` arguments below
//!   node_indptr   int32 [R + 1]   the verified trees' offsets (the verifier's node_indptr)
//!   accepted      int32 [N]       request r's accepted local nodes at accepted[node_indptr[r] ..],
//!   num_accepted  int32 [R]       num_accepted[r] of them (verify_*_batch's outputs, unchanged)
//!   spec_k/spec_v [N, kv_heads, head_dim] of T: the tree tokens' K/V (RoPE applied), unit inner
//!                 stride and packed heads (stride(1) == head_dim)
//!   appended      int64 [R]       in/out: tokens ever appended to each request
//!   starts, lengths int32 [R]     out: the ring's view arrays, updated
//!   status        int32 [3]       out: [error, request, index] (core/device_status.hpp)
//! Validation as the verifiers': shapes, strides and memory on the host; under specdec::host the
//! values too (invalid_argument, nothing written), under specdec::cuda the values on the device into
//! status (node_indptr, accepted, committed_length for a negative appended; that request is not
//! written). specdec::cuda needs kv/ring_append.cuh and nvcc; one block per request, enqueued on
//! policy.stream without synchronisation, graph-capturable. O(sum_r min(k_r, slots) * kv_heads * head_dim).
template <execution_policy Policy, class T, class NI, class AC, class NA, tensor_like K, tensor_like V, class AP,
          class SA, class LE, class ST>
  requires(!std::is_const_v<T> && detail::int32_array<NI> && detail::int32_array<AC> && detail::int32_array<NA> &&
           detail::int64_output<AP> && detail::int32_output<SA> && detail::int32_output<LE> &&
           detail::int32_output<ST>)
void ring_append_batch(const Policy& policy, const ring_kv<T>& ring, const NI& node_indptr_in, const AC& accepted_in,
                       const NA& num_accepted_in, const K& spec_k_in, const V& spec_v_in, const AP& appended_in,
                       const SA& starts_in, const LE& lengths_in, const ST& status_in) {
  constexpr std::string_view fn = "specdec::ring_append_batch";
  static_assert(K::rank == 3 && V::rank == 3, "specdec::ring_append_batch: spec_k and spec_v must be rank-3 [N, kv_heads, head_dim]");
  static_assert(std::is_same_v<std::remove_cv_t<typename K::element_type>, T> &&
                    std::is_same_v<std::remove_cv_t<typename V::element_type>, T>,
                "specdec::ring_append_batch: spec_k and spec_v must have the ring's element type");
  validate_kv_layout(ring, fn, "ring");
  require_policy_memory<Policy>(fn, "ring", ring);
  const auto node_indptr = as_view(node_indptr_in);
  const auto accepted = as_view(accepted_in);
  const auto num_accepted = as_view(num_accepted_in);
  const auto spec_k = as_view(spec_k_in);
  const auto spec_v = as_view(spec_v_in);
  const auto appended = as_view(appended_in);
  const auto starts = as_view(starts_in);
  const auto lengths = as_view(lengths_in);
  const auto status = as_view(status_in);
  const auto [R, N] = require_batch_counts(fn, "num_accepted", num_accepted, "accepted", accepted);
  require_equal(fn, "num_accepted.extent(0) (one per ring request)", R, static_cast<std::int64_t>(ring.num_requests()));
  // The layout's own check lets a ring whose requests all have length 0 go without buffers (it holds
  // no rows to read); an append writes slots whatever the lengths.
  require(R == 0 || (ring.k != nullptr && ring.v != nullptr), fn, "ring",
          "non-null k and v buffers (an append writes the ring's slots)", "nullptr");
  require_policy_array<Policy>(fn, "node_indptr", node_indptr, R + 1);
  require_policy_array<Policy>(fn, "accepted", accepted, N);
  require_policy_array<Policy>(fn, "num_accepted", num_accepted, R);
  require_policy_array<Policy>(fn, "appended", appended, R);
  require_policy_array<Policy>(fn, "starts", starts, R);
  require_policy_array<Policy>(fn, "lengths", lengths, R);
  require_policy_array<Policy>(fn, "status", status, 3);
  require(R == 0 || (starts.data() == ring.mapping.starts && lengths.data() == ring.mapping.lengths), fn, "starts",
          "the ring's own starts and lengths arrays (the view they update)", "other arrays");
  for (const auto* t : {&spec_k, &spec_v}) {
    const std::string_view name = t == &spec_k ? "spec_k" : "spec_v";
    require_policy_memory<Policy>(fn, name, *t);
    require_shape(fn, name, *t, {N, ring.num_kv_heads(), ring.head_dim()});
    require_unit_inner_stride(fn, name, *t);
    require(t->extent(1) <= 1 || t->stride(1) == t->extent(2), fn, name, "packed heads (stride(1) == head_dim)",
            t->stride(1));
    require(N == 0 || t->data() != nullptr, fn, name, "a non-null data pointer", "nullptr");
  }
  // The outputs, the ring's K/V slots among them, are written while the inputs are still read (the
  // device clears status first; an index or count kept in a slot would change under the copies):
  // each apart from the others and from every input.
  const std::int64_t ring_elems =
      checked_size_product(fn, "ring", {R, ring.mapping.slots, ring.num_kv_heads(), ring.head_dim()});
  const strided_view<const T, 1> ring_k(ring.k, {ring_elems}, {1}, ring.where), ring_v(ring.v, {ring_elems}, {1}, ring.where);
  require_outputs_apart(fn,
                        std::forward_as_tuple("ring.k", ring_k, "ring.v", ring_v, "appended", appended, "starts", starts,
                                              "lengths", lengths, "status", status),
                        std::forward_as_tuple("node_indptr", node_indptr, "accepted", accepted, "num_accepted",
                                              num_accepted, "spec_k", spec_k, "spec_v", spec_v));
  detail::ring_append_args<T> a;
  a.ring = ring;
  a.requests = static_cast<std::int32_t>(R), a.nodes = static_cast<std::int32_t>(N);
  a.node_indptr = node_indptr.data(), a.accepted = accepted.data(), a.num_accepted = num_accepted.data();
  a.spec_k = spec_k.data(), a.spec_v = spec_v.data(), a.k_stride = spec_k.stride(0), a.v_stride = spec_v.stride(0);
  a.appended = appended.data(), a.starts = starts.data(), a.lengths = lengths.data(), a.status = status.data();
  detail::ring_append_backend<Policy>::run(policy, a);
}

}  // namespace specdec
