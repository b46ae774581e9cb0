#pragma once
//! \file commit.hpp
//! KV commit after verification: the accepted tree tokens' K/V rows (every layer, every KV head) move
//! to the contiguous positions right after the committed prefix, and the rest of the tree is dropped.
//!
//! Where the tree tokens' K/V live before the commit (both supported):
//!  - in place (kv_commit_in_place): the engine appended the n tree tokens to the same cache, node i at
//!    position committed_length + i, for the target's tree forward. Accepted node a_j moves from
//!    committed_length + a_j to committed_length + j. Because a root path's indices strictly increase
//!    (a_j >= j), moving in order j = 0, 1, ... never overwrites a row still to be read, so no scratch
//!    is needed; rows already in place (a_j == j) are not touched.
//!  - in a separate speculative buffer (kv_commit_from_buffer): per layer K and V tensors [n, Hkv, D]
//!    (node i in row i), e.g. what hybrid tree attention reads as "spec_k/spec_v". Accepted node a_j is
//!    copied to cache position committed_length + j.
//! The cache's own length array is NOT modified (layouts hold it by const pointer; the engine owns
//! it): every function returns the new length committed_length + accepted.size() for the caller to
//! store. Rows past the new length are left as they were (they are garbage by definition).
//!
//! Guarantees: everything is validated before the first write (layouts, with validate_kv_layout's
//! generic checks for a user's layout too; capacity; request indices and node counts checked in 64
//! bits; indptr arrays starting at 0, non-decreasing and ending at the size of the array they index;
//! spec-buffer shapes; accepted indices forming a root path of the tree; in a batch on host layouts, no
//! row reached by two requests' commits: detail::require_requests_apart), so a failed commit leaves
//! every cache bit-identical; a full rejection (no accepted node) writes nothing either. Rows are
//! copied bit for bit: their values (NaN included) are not inspected.
//! The draft's ring cache (kv/ring_kv.hpp, LongSpec §3.1 sliding window) keeps only a window and never
//! holds a tree in place, so it gets its own two forms: kv_commit_ring (tree drafting: append the
//! accepted path from the spec buffers the draft used) and kv_commit_ring_pending (chain drafting with
//! append_speculative: keep the oldest `accepted` pending tokens).
//! Works with any writable_kv_layout (contiguous_kv NHD/HND, paged_kv: rows are reached through
//! k_row/v_row, so a paged commit writes into the request's own pages, within capacity(r)).

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/core/config.hpp"
#include "specdec/core/detail/tree_path.hpp"
#include "specdec/core/device_status.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/kv/kv_cache.hpp"
#include "specdec/kv/kv_layout.hpp"
#include "specdec/kv/ring_kv.hpp"

namespace specdec {

namespace detail {

//! Every layer valid, host-accessible, same geometry, and holding requests [0, requests). `requests`
//! is 64-bit so that a caller's request + 1 cannot overflow.
template <class L, class Policy = host>
void validate_commit_layers(std::span<const L> layers, std::int64_t requests, std::string_view fn) {
  require(!layers.empty(), fn, "layers", "at least one layer", layers.size());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const std::string name = "layers[" + std::to_string(l) + "]";
    validate_kv_layout(layers[l], fn, name);
    require_policy_memory<Policy>(fn, name, layers[l]);
    require(layers[l].num_requests() >= requests, fn, name + ".num_requests()",
            ">= " + std::to_string(requests), layers[l].num_requests());
    require_equal(fn, name + ".num_kv_heads()", layers[0].num_kv_heads(), layers[l].num_kv_heads());
    require_equal(fn, name + ".head_dim()", layers[0].head_dim(), layers[l].head_dim());
  }
}

//! The rows a commit reads or writes in place, tokens [first, last) of `request` in every layer and
//! kv head, exist: a user's layout may return null for rows it has no storage for (validate_kv_layout
//! checks only the corners of each request); and no two layers share them. Host-accessible layouts
//! only: a device layout's row addresses may come from tables in device memory.
template <class L>
void require_commit_rows(std::span<const L> layers, int request, std::int64_t first, std::int64_t last,
                         std::string_view fn) {
  for (std::size_t l = 0; l < layers.size(); ++l)
    if (host_accessible(layers[l].space()))
      require_kv_rows(layers[l], request, static_cast<int>(first), static_cast<int>(last), 0, layers[l].num_kv_heads(),
                      kv_rows_read::keys_and_values, fn, "layers[" + std::to_string(l) + "]");
  // Layers must not share rows: the commit moves (or writes) one layer after another, and a layer
  // over rows an earlier one has already moved would move them again (a layer listed twice, or one
  // buffer under two layers). Compared at the first row the commit touches: the K and V rows of
  // every layer, sorted, O(layers log layers).
  if (last <= first) return;
  struct row_at {
    const void* p;
    std::size_t layer;
    bool v;
  };
  thread_local std::vector<row_at> rows;  // kept between commits: no allocation per call
  rows.clear();
  for (std::size_t l = 0; l < layers.size(); ++l)
    if (host_accessible(layers[l].space())) {
      rows.push_back({layers[l].k_row(request, static_cast<int>(first), 0), l, false});
      rows.push_back({layers[l].v_row(request, static_cast<int>(first), 0), l, true});
    }
  std::sort(rows.begin(), rows.end(), [](const row_at& a, const row_at& b) {
    return std::less<const void*>{}(a.p, b.p) || (a.p == b.p && a.layer < b.layer);
  });
  for (std::size_t i = 1; i < rows.size(); ++i)
    if (rows[i].p == rows[i - 1].p && rows[i].layer != rows[i - 1].layer) [[unlikely]]
      throw_invalid_argument(fn, "layers[" + std::to_string(rows[i].layer) + "]",
                             "rows apart from every other layer's (layers[" + std::to_string(rows[i - 1].layer) +
                                 "] has the same " + (rows[i - 1].v ? "V" : "K") + " row)",
                             "a layer sharing its storage");
}

//! A caller's index array as a vector: the commits read their own copies, so arrays a caller keeps
//! inside the cache's rows (a user's layout can put its rows anywhere) cannot change under the row
//! moves after they were checked.
[[nodiscard]] inline std::vector<std::int32_t> copy_indices(std::span<const std::int32_t> a) {
  return std::vector<std::int32_t>(a.begin(), a.end());
}

//! The byte ranges of a from-buffer commit's spec buffers, sorted and merged into disjoint ranges.
[[nodiscard]] inline std::vector<std::pair<std::uintptr_t, std::uintptr_t>> merged_ranges(
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> r) {
  std::sort(r.begin(), r.end());
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> out;
  for (const auto& x : r)
    if (!out.empty() && x.first <= out.back().second) out.back().second = std::max(out.back().second, x.second);
    else out.push_back(x);
  return out;
}

//! The rows a from-buffer commit writes, tokens [committed, committed + accepted) of `request` in
//! every layer and kv head, lie apart from every spec buffer (`spans`: merged_ranges of their bytes):
//! the copies run layer after layer and node after node, so a row written over a spec row that a
//! later copy reads would commit the wrong K/V. Rows inside the buffers are the in-place commit's
//! case (kv_commit_in_place). Host-accessible layouts; O(layers accepted Hkv log spans).
template <class L>
void require_rows_outside_specs(std::span<const L> layers, int request, std::int64_t committed, std::int64_t accepted,
                                const std::vector<std::pair<std::uintptr_t, std::uintptr_t>>& spans,
                                std::string_view fn) {
  using T = typename L::value_type;
  if (spans.empty()) return;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    if (!host_accessible(layers[l].space())) continue;
    const auto row_bytes = static_cast<std::uintptr_t>(layers[l].head_dim()) * sizeof(T);
    for (std::int64_t j = 0; j < accepted; ++j)
      for (int h = 0; h < layers[l].num_kv_heads(); ++h)
        for (const T* row : {layers[l].k_row(request, static_cast<int>(committed + j), h),
                             layers[l].v_row(request, static_cast<int>(committed + j), h)}) {
          const auto lo = reinterpret_cast<std::uintptr_t>(row), hi = lo + (row_bytes - 1);
          // the first merged range ending at or after lo: the only one that can hold [lo, hi]
          const auto it = std::lower_bound(spans.begin(), spans.end(), lo,
                                           [](const auto& s, std::uintptr_t x) { return s.second < x; });
          if (it != spans.end() && it->first <= hi) [[unlikely]]
            throw_invalid_argument(fn, "spec_k / spec_v",
                                   "buffers apart from the rows the commit writes (layers[" + std::to_string(l) +
                                       "], request " + std::to_string(request) + ", token " +
                                       std::to_string(committed + j) + ", kv head " + std::to_string(h) +
                                       "; for trees stored in the cache itself use kv_commit_in_place)",
                                   "a buffer over that row");
        }
  }
}

//! Tokens [first, last) of `request`: the rows one request of a batch commit reads or writes.
struct touched_tokens {
  int request;
  std::int64_t first, last;
};

//! No row a batch commit touches belongs to two requests. The requests are committed one after
//! another, so with a page under two requests' tables (a prefix-sharing engine that left the page a
//! step writes shared, or one table listing a page twice) one request's moves would overwrite rows the
//! other still reads, and both caches would come out wrong with no error. `touched`: each request's
//! tokens (in place: from the committed length up to the last accepted node; from a buffer: the
//! path's destinations). Compared by the K row of kv head 0 in layer 0 (every layer's tables are
//! expected to map the requests alike, as an engine's block table does; the layers' own storage is
//! compared by require_commit_rows). Pages shared for reading, below the committed lengths, are not
//! touched and stay allowed. Host-accessible layouts; O(T log T), T = the touched tokens.
template <class L>
void require_requests_apart(const L& layer, std::span<const touched_tokens> touched, std::string_view fn) {
  if (touched.size() < 2 || !host_accessible(layer.space())) return;
  struct row_of {
    const void* p;
    int request;
    std::int64_t token;
  };
  thread_local std::vector<row_of> rows;  // kept between commits: no allocation per call
  rows.clear();
  for (const auto& t : touched)
    for (std::int64_t i = t.first; i < t.last; ++i)
      rows.push_back({layer.k_row(t.request, static_cast<int>(i), 0), t.request, i});
  std::sort(rows.begin(), rows.end(), [](const row_of& a, const row_of& b) {
    return std::less<const void*>{}(a.p, b.p) || (a.p == b.p && a.request < b.request);
  });
  for (std::size_t i = 1; i < rows.size(); ++i)
    if (rows[i].p == rows[i - 1].p && rows[i].request != rows[i - 1].request) [[unlikely]]
      throw_invalid_argument(fn, "layers[0]",
                             "rows of one request each where the commit reads or writes (request " +
                                 std::to_string(rows[i - 1].request) + " token " + std::to_string(rows[i - 1].token) +
                                 " and request " + std::to_string(rows[i].request) + " token " +
                                 std::to_string(rows[i].token) + " reach the same K row)",
                             "a row shared between requests");
}

template <class L>
void copy_row(const L& l, typename L::value_type* dst, const typename L::value_type* src) {
  std::copy_n(src, l.head_dim(), dst);
}

//! The in-place move itself (inputs already validated): a_j -> committed + j, j ascending.
template <class L>
void move_accepted(std::span<const L> layers, int request, int committed_length, std::span<const std::int32_t> accepted) {
  for (const auto& layer : layers)
    for (std::size_t j = 0; j < accepted.size(); ++j) {
      const int src = committed_length + accepted[j], dst = committed_length + static_cast<int>(j);
      if (src == dst) continue;  // already in place: not even rewritten
      for (int h = 0; h < layer.num_kv_heads(); ++h) {
        copy_row(layer, layer.k_row(request, dst, h), layer.k_row(request, src, h));
        copy_row(layer, layer.v_row(request, dst, h), layer.v_row(request, src, h));
      }
    }
}

}  // namespace detail

//! In-place commit for one request: the tree's n tokens sit at positions [committed_length,
//! committed_length + n) of every layer's cache; moves accepted node a_j to committed_length + j in
//! every layer and KV head. `parents` (optional, the tree's parent array, e.g. tree.parents()) lets the
//! commit check that `accepted` is a root path; without it, strictly increasing indices are required.
//! Returns the new length committed_length + accepted.size().
//! Preconditions (checked): committed_length >= 0; committed_length + tree_size <= capacity(request) in
//! every layer; host-accessible layouts with equal geometry. Complexity: O(layers * accepted * Hkv * D).
//! `layers` is a span of layouts (std::span(my_layers); const or not), one per layer.
template <class LayerT, std::size_t E>
int kv_commit_in_place(std::span<LayerT, E> layer_span, int request, int committed_length, int tree_size,
                       std::span<const std::int32_t> accepted_in, std::span<const std::int32_t> parents_in = {}) {
  using L = std::remove_const_t<LayerT>;
  // L is unconstrained so that these messages are what a non-layout gets (not an overload failure).
  static_assert(check_writable_kv_layout<L>());
  if constexpr (writable_kv_layout<L>) {
    const std::span<const L> layers(layer_span.data(), layer_span.size());
    constexpr std::string_view fn = "specdec::kv_commit_in_place";
    // Checked and used as copies (detail::copy_indices): arrays inside the moved rows stay valid.
    const std::vector<std::int32_t> accepted_copy = detail::copy_indices(accepted_in),
                                    parents_copy = detail::copy_indices(parents_in);
    const std::span<const std::int32_t> accepted(accepted_copy), parents(parents_copy);
    require(request >= 0, fn, "request", ">= 0", request);
    detail::validate_commit_layers(layers, std::int64_t{request} + 1, fn);
    require(committed_length >= 0, fn, "committed_length", ">= 0", committed_length);
    require(tree_size >= 0, fn, "tree_size", ">= 0", tree_size);
    for (std::size_t l = 0; l < layers.size(); ++l)
      require(static_cast<std::int64_t>(committed_length) + tree_size <= layers[l].capacity(request), fn,
              "committed_length + tree_size",
              "<= capacity(request) = " + std::to_string(layers[l].capacity(request)) + " (layer " + std::to_string(l) + ")",
              static_cast<std::int64_t>(committed_length) + tree_size);
    detail::validate_accepted_path(accepted, tree_size, parents, fn);
    if (!accepted.empty())  // sources and destinations: rows up to the last accepted node
      detail::require_commit_rows(layers, request, committed_length, std::int64_t{committed_length} + accepted.back() + 1, fn);
    detail::move_accepted(layers, request, committed_length, accepted);
    return committed_length + static_cast<int>(accepted.size());
  } else {
    return 0;
  }
}

namespace detail {
//! The spec-buffer checks of both from-buffer commits: one spec_k / spec_v per layer, each
//! [n, Hkv, D] of its layer, in memory Policy reaches, unit inner stride, non-null when n > 0.
//! Calls use(l, k, v) with layer l's checked views.
template <class Policy, class L, class SpecT, std::size_t EK, std::size_t EV, class F>
void check_spec_buffers(std::string_view fn, std::span<const L> layers, std::span<SpecT, EK> spec_k,
                        std::span<SpecT, EV> spec_v, std::int64_t n, F&& use) {
  require_equal(fn, "spec_k.size()", layers.size(), spec_k.size());
  require_equal(fn, "spec_v.size()", layers.size(), spec_v.size());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const auto check = [&](const auto& t, const char* what) {
      const auto v = as_view(t);
      const std::string name = std::string(what) + "[" + std::to_string(l) + "]";
      require_policy_memory<Policy>(fn, name, v);
      require_shape(fn, name, v, {n, layers[l].num_kv_heads(), layers[l].head_dim()});
      require_unit_inner_stride(fn, name, v);
      return v;
    };
    const auto k = check(spec_k[l], "spec_k");
    const auto v = check(spec_v[l], "spec_v");
    use(l, k, v);
  }
}
}  // namespace detail

//! Commit for one request from separate speculative buffers: spec_k[l], spec_v[l] are layer l's tree
//! K/V, [tree_size, Hkv, D] (any rank-3 tensor_like of the cache's element type, unit inner stride,
//! host-accessible). Copies node a_j's rows to position committed_length + j of layer l's cache.
//! Returns committed_length + accepted.size(). Preconditions (checked): one spec_k/spec_v per layer,
//! shapes [n, Hkv, D] with n = tree_size; committed_length + accepted.size() <= capacity(request);
//! no spec buffer over a row the commit writes (a tree kept in the cache itself is
//! kv_commit_in_place's case).
//! Complexity: O(layers * accepted * Hkv * D).
template <class LayerT, std::size_t E, class SpecT, std::size_t EK, std::size_t EV>
  requires tensor_like<std::remove_const_t<SpecT>>
int kv_commit_from_buffer(std::span<LayerT, E> layer_span, int request, int committed_length,
                          std::span<SpecT, EK> spec_k, std::span<SpecT, EV> spec_v,
                          std::span<const std::int32_t> accepted_in, std::span<const std::int32_t> parents_in = {}) {
  using L = std::remove_const_t<LayerT>;
  using Spec = std::remove_const_t<SpecT>;
  // L is unconstrained so that these messages are what a non-layout gets (not an overload failure).
  static_assert(check_writable_kv_layout<L>());
  static_assert(Spec::rank == 3, "specdec::kv_commit_from_buffer: spec buffers must be rank 3 [n, kv_heads, head_dim]");
  if constexpr (writable_kv_layout<L>) {
    static_assert(std::is_same_v<std::remove_cv_t<typename Spec::element_type>, typename L::value_type>,
                  "specdec::kv_commit_from_buffer: spec buffer element type must equal the cache's value_type");
    const std::span<const L> layers(layer_span.data(), layer_span.size());
    constexpr std::string_view fn = "specdec::kv_commit_from_buffer";
    const std::vector<std::int32_t> accepted_copy = detail::copy_indices(accepted_in),
                                    parents_copy = detail::copy_indices(parents_in);
    const std::span<const std::int32_t> accepted(accepted_copy), parents(parents_copy);
    require(request >= 0, fn, "request", ">= 0", request);
    detail::validate_commit_layers(layers, std::int64_t{request} + 1, fn);
    require(committed_length >= 0, fn, "committed_length", ">= 0", committed_length);
    require_equal(fn, "spec_k.size()", layers.size(), spec_k.size());
    const std::int64_t n = static_cast<std::int64_t>(spec_k[0].extent(0));
    // node indices are int32 (accepted, parents): a larger buffer could not be addressed by them
    require(n <= INT32_MAX, fn, "spec_k[0]", "at most 2^31 - 1 tree nodes (extent 0)", n);
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> spec_spans;
    detail::check_spec_buffers<host>(fn, layers, spec_k, spec_v, n, [&](std::size_t, const auto& k, const auto& v) {
      if (n > 0) spec_spans.insert(spec_spans.end(), {detail::view_byte_span(k), detail::view_byte_span(v)});
    });
    for (std::size_t l = 0; l < layers.size(); ++l) {
      require(static_cast<std::int64_t>(committed_length) + static_cast<std::int64_t>(accepted.size()) <=
                  layers[l].capacity(request),
              fn, "committed_length + accepted.size()",
              "<= capacity(request) = " + std::to_string(layers[l].capacity(request)) + " (layer " + std::to_string(l) + ")",
              static_cast<std::int64_t>(committed_length) + static_cast<std::int64_t>(accepted.size()));
    }
    detail::validate_accepted_path(accepted, static_cast<int>(n), parents, fn);
    detail::require_commit_rows(layers, request, committed_length,
                                std::int64_t{committed_length} + static_cast<std::int64_t>(accepted.size()), fn);
    detail::require_rows_outside_specs(layers, request, committed_length, static_cast<std::int64_t>(accepted.size()),
                                       detail::merged_ranges(std::move(spec_spans)), fn);
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const auto& layer = layers[l];
      const auto sk = as_view(spec_k[l]);
      const auto sv = as_view(spec_v[l]);
      for (std::size_t j = 0; j < accepted.size(); ++j) {
        const int dst = committed_length + static_cast<int>(j);
        for (int h = 0; h < layer.num_kv_heads(); ++h) {
          detail::copy_row(layer, layer.k_row(request, dst, h), &sk(accepted[j], h, 0));
          detail::copy_row(layer, layer.v_row(request, dst, h), &sv(accepted[j], h, 0));
        }
      }
    }
    return committed_length + static_cast<int>(accepted.size());
  } else {
    return 0;
  }
}

//! Ragged-batch in-place commit: request r's tree has tree_sizes[r] nodes appended after
//! committed_lengths[r]; its accepted nodes are accepted[accepted_indptr[r] .. accepted_indptr[r+1])
//! (verify_batch_result's layout; `node_parents`/`node_indptr` optional, e.g. token_tree_batch's
//! parents() and node_indptr(), to check root paths). Validates every request before writing any:
//! accepted_indptr and node_indptr start at 0 and are non-decreasing, accepted_indptr ends at
//! accepted.size() and node_indptr (when node_parents is given, which needs node_indptr) at
//! node_parents.size(), and node_indptr's differences equal tree_sizes.
//! Returns the new lengths. Complexity: O(layers * sum accepted * Hkv * D).
template <class LayerT, std::size_t E>
std::vector<std::int32_t> kv_commit_in_place_batch(std::span<LayerT, E> layer_span,
                                                   std::span<const std::int32_t> committed_lengths_in,
                                                   std::span<const std::int32_t> tree_sizes_in,
                                                   std::span<const std::int32_t> accepted_indptr_in,
                                                   std::span<const std::int32_t> accepted_in,
                                                   std::span<const std::int32_t> node_indptr_in = {},
                                                   std::span<const std::int32_t> node_parents_in = {}) {
  using L = std::remove_const_t<LayerT>;
  // L is unconstrained so that these messages are what a non-layout gets (not an overload failure).
  static_assert(check_writable_kv_layout<L>());
  if constexpr (writable_kv_layout<L>) {
    const std::span<const L> layers(layer_span.data(), layer_span.size());
    constexpr std::string_view fn = "specdec::kv_commit_in_place_batch";
    // Checked and used as copies (detail::copy_indices): arrays inside the moved rows stay valid.
    const std::vector<std::int32_t> committed_copy = detail::copy_indices(committed_lengths_in),
                                    sizes_copy = detail::copy_indices(tree_sizes_in),
                                    acc_indptr_copy = detail::copy_indices(accepted_indptr_in),
                                    accepted_copy = detail::copy_indices(accepted_in),
                                    node_indptr_copy = detail::copy_indices(node_indptr_in),
                                    parents_copy = detail::copy_indices(node_parents_in);
    const std::span<const std::int32_t> committed_lengths(committed_copy), tree_sizes(sizes_copy),
        accepted_indptr(acc_indptr_copy), accepted(accepted_copy), node_indptr(node_indptr_copy),
        node_parents(parents_copy);
    const std::size_t requests = committed_lengths.size();
    require(requests <= static_cast<std::size_t>(INT32_MAX), fn, "committed_lengths.size()", "at most 2^31 - 1 requests", requests);
    require_equal(fn, "tree_sizes.size()", requests, tree_sizes.size());
    require_equal(fn, "accepted_indptr.size()", requests + 1, accepted_indptr.size());
    detail::validate_indptr(fn, "accepted_indptr", "accepted_indptr", accepted_indptr.data(),
                            static_cast<std::int64_t>(requests), static_cast<std::int64_t>(accepted.size()),
                            "accepted.size()");
    require(node_indptr.empty() || node_indptr.size() == requests + 1, fn, "node_indptr.size()",
            "0 or requests + 1 = " + std::to_string(requests + 1), node_indptr.size());
    // node_parents is split by node_indptr: without it the parents would be silently ignored
    require(node_parents.empty() || !node_indptr.empty(), fn, "node_indptr",
            "node_indptr when node_parents is given; node_indptr.size()", node_indptr.size());
    if (!node_indptr.empty()) {
      detail::validate_indptr(fn, "node_indptr", "node_indptr", node_indptr.data(), static_cast<std::int64_t>(requests),
                              node_parents.empty() ? -1 : static_cast<std::int64_t>(node_parents.size()),
                              "node_parents.size()");
      for (std::size_t r = 0; r < requests; ++r)
        require_equal(fn, "tree_sizes[" + std::to_string(r) + "]", node_indptr[r + 1] - node_indptr[r], tree_sizes[r]);
    }
    // validate everything first (same checks as the single-request form, without writing)
    detail::validate_commit_layers(layers, static_cast<std::int64_t>(requests), fn);
    std::vector<detail::touched_tokens> touched;
    for (std::size_t r = 0; r < requests; ++r) {
      require(committed_lengths[r] >= 0 && tree_sizes[r] >= 0, fn, "committed_lengths/tree_sizes", ">= 0",
              std::min(committed_lengths[r], tree_sizes[r]));
      for (std::size_t l = 0; l < layers.size(); ++l)
        require(static_cast<std::int64_t>(committed_lengths[r]) + tree_sizes[r] <= layers[l].capacity(static_cast<int>(r)), fn,
                "committed_lengths[" + std::to_string(r) + "] + tree_sizes[" + std::to_string(r) + "]",
                "<= capacity = " + std::to_string(layers[l].capacity(static_cast<int>(r))),
                static_cast<std::int64_t>(committed_lengths[r]) + tree_sizes[r]);
      const auto acc = accepted.subspan(static_cast<std::size_t>(accepted_indptr[r]),
                                        static_cast<std::size_t>(accepted_indptr[r + 1] - accepted_indptr[r]));
      std::span<const std::int32_t> par;
      if (!node_parents.empty())
        par = node_parents.subspan(static_cast<std::size_t>(node_indptr[r]), static_cast<std::size_t>(tree_sizes[r]));
      detail::validate_accepted_path(acc, tree_sizes[r], par, fn);
      if (!acc.empty()) {
        const std::int64_t last = std::int64_t{committed_lengths[r]} + acc.back() + 1;
        detail::require_commit_rows(layers, static_cast<int>(r), committed_lengths[r], last, fn);
        touched.push_back({static_cast<int>(r), committed_lengths[r], last});
      }
    }
    detail::require_requests_apart(layers[0], std::span<const detail::touched_tokens>(touched), fn);
    // Appended, not sized up front: GCC 12 at -O3 warned (-Warray-bounds, a false positive) on the
    // zero-fill of a vector of `requests` elements once the row checks above were inlined.
    std::vector<std::int32_t> out;
    out.reserve(requests);
    for (std::size_t r = 0; r < requests; ++r) {
      const auto acc = accepted.subspan(static_cast<std::size_t>(accepted_indptr[r]),
                                        static_cast<std::size_t>(accepted_indptr[r + 1] - accepted_indptr[r]));
      detail::move_accepted(layers, static_cast<int>(r), committed_lengths[r], acc);
      out.push_back(committed_lengths[r] + static_cast<std::int32_t>(acc.size()));
    }
    return out;
  } else {
    return {};
  }
}

//! Ring-cache commit for tree drafting (LongSpec): the tree tokens' draft K/V were spec buffers
//! spec_k, spec_v [n, Hkv, D] (never written to the ring); appends the accepted path's rows, in path
//! order, as committed tokens of `request`. `parents` (optional, the tree's parents) checks that
//! `accepted` is a root path. A full rejection appends nothing (the ring stays bit-identical).
//! Preconditions (checked before writing): as ring_kv_cache::append_rows (no pending tokens, shapes)
//! plus the path check. Complexity: O(accepted * Hkv * D).
template <class T, tensor_like K, tensor_like V>
void kv_commit_ring(ring_kv_cache<T>& cache, int request, const K& spec_k, const V& spec_v,
                    std::span<const std::int32_t> accepted, std::span<const std::int32_t> parents = {}) {
  constexpr std::string_view fn = "specdec::kv_commit_ring";
  static_assert(K::rank == 3 && V::rank == 3, "specdec::kv_commit_ring: spec buffers must be rank 3 [n, kv_heads, head_dim]");
  require_in_range(fn, "request", request, 0, cache.num_requests() - 1);
  require_equal(fn, "spec_v.extent(0)", static_cast<std::int64_t>(spec_k.extent(0)), static_cast<std::int64_t>(spec_v.extent(0)));
  // node indices are int32 (accepted, parents): a larger buffer could not be addressed by them
  require(spec_k.extent(0) <= INT32_MAX, fn, "spec_k", "at most 2^31 - 1 tree nodes (extent 0)", spec_k.extent(0));
  detail::validate_accepted_path(accepted, static_cast<int>(spec_k.extent(0)), parents, fn);
  // also for a full rejection: append_rows checks the shapes and the pending tokens (what the
  // preconditions above promise), and writes nothing for no rows
  cache.append_rows(request, spec_k, spec_v, accepted);
}

//! Ring-cache commit for chain drafting: the drafted tokens were appended with append_speculative();
//! keeps the oldest `accepted` of them as committed and rolls the rest back (ring_kv_cache::commit).
//! O(1).
template <class T>
void kv_commit_ring_pending(ring_kv_cache<T>& cache, int request, int accepted) {
  constexpr std::string_view fn = "specdec::kv_commit_ring_pending";
  require_in_range(fn, "request", request, 0, cache.num_requests() - 1);
  require_in_range(fn, "accepted", accepted, 0, cache.pending(request));
  cache.commit(request, accepted);
}

namespace detail {

//! The arrays of the array-form batched commit (verify_greedy_batch's output layout), as raw pointers.
struct commit_batch_args {
  std::int32_t requests = 0, nodes = 0;
  const std::int32_t* committed = nullptr;     //!< [R]
  const std::int32_t* node_indptr = nullptr;   //!< [R + 1]
  const std::int32_t* accepted = nullptr;      //!< [N]: request r's at node_indptr[r] + j
  const std::int32_t* num_accepted = nullptr;  //!< [R]
  std::int32_t* new_lengths = nullptr;         //!< [R] out
  std::int32_t* status = nullptr;              //!< [3] out
  bool from_buffer = false;                    //!< sources in spec buffers (capacity bound: committed + accepted)
};

//! One layer's speculative K/V buffers [N, Hkv, D] for the from-buffer commit (unit inner stride):
//! node i of the batch (request r's local node a at i = node_indptr[r] + a) is row i. Empty (k ==
//! nullptr) for the in-place commit.
template <class T>
struct commit_spec {
  const T* k = nullptr;
  const T* v = nullptr;
  std::int64_t k_stride_node = 0, k_stride_head = 0, v_stride_node = 0, v_stride_head = 0;
  SPECDEC_HOST_DEVICE const T* k_row(std::int64_t node, int h) const { return k + node * k_stride_node + h * k_stride_head; }
  SPECDEC_HOST_DEVICE const T* v_row(std::int64_t node, int h) const { return v + node * v_stride_node + h * v_stride_head; }
};

//! Accepted rows a CUDA copy thread loads before it stores them (commit_copy_columns).
inline constexpr int commit_rows_in_flight = 8;

//! The CUDA copy kernel's work (kv/commit.cuh) for request r, one layer, KV head h and the columns
//! d = first, first + step, ... of head_dim: accepted node a_j to committed + j, from the layer
//! itself (in place) or from `spec` (from a buffer), commit_rows_in_flight rows at a time, every load
//! of a batch before its stores. Each thread owns its columns, so running the threads one after
//! another (the host twin in tests/kv/test_commit_arrays.cpp) gives what the kernel gives. In place
//! this equals detail::move_accepted's j-ascending order: a destination committed + j lies below
//! every later source committed + a_i (i > j, a_i >= i: the path increases strictly), so no load
//! reads what an earlier store wrote, and a store over a source of its own batch follows that load.
//! An accepted node already in place (a_j == j) is not rewritten, as on the host. Inputs validated.
template <class L>
SPECDEC_HOST_DEVICE void commit_copy_columns(const L& layer, const commit_spec<typename L::value_type>& spec,
                                             const commit_batch_args& a, std::int32_t r, int h, int first, int step) {
  using T = typename L::value_type;
  constexpr int W = commit_rows_in_flight;
  const std::int32_t b = a.node_indptr[r], c = a.committed[r], k = a.num_accepted[r];
  const int dim = layer.head_dim();
  for (std::int32_t j0 = 0; j0 < k; j0 += W) {
    const T* ks[W] = {};
    const T* vs[W] = {};
    T* kd[W] = {};
    T* vd[W] = {};
    bool move[W] = {};
    for (int u = 0; u < W; ++u) {
      const std::int32_t j = j0 + u;
      const std::int32_t node = j < k ? a.accepted[b + j] : j;
      move[u] = j < k && (a.from_buffer || node != j);
      if (!move[u]) continue;
      ks[u] = a.from_buffer ? spec.k_row(static_cast<std::int64_t>(b) + node, h) : layer.k_row(r, c + node, h);
      vs[u] = a.from_buffer ? spec.v_row(static_cast<std::int64_t>(b) + node, h) : layer.v_row(r, c + node, h);
      kd[u] = layer.k_row(r, c + j, h);
      vd[u] = layer.v_row(r, c + j, h);
    }
    for (int d = first; d < dim; d += step) {
      T kx[W], vx[W];
      for (int u = 0; u < W; ++u)
        if (move[u]) kx[u] = ks[u][d], vx[u] = vs[u][d];
      for (int u = 0; u < W; ++u)
        if (move[u]) kd[u][d] = kx[u], vd[u][d] = vx[u];
    }
  }
}

//! The seam between the array forms of the batched commits (in place, from buffer) and their backends:
//!   template <class L> static void run(const Policy&, std::span<const L> layers, const commit_batch_args&,
//!                                      std::span<const commit_spec<typename L::value_type>> specs);
//! (specs empty for the in-place commit, one per layer from a buffer). The host backend is below, the
//! cuda one in kv/commit.cuh.
SPECDEC_BACKEND_SEAM(commit_batch_backend, "batched KV commit", "specdec/kv/commit.cuh");

//! new_lengths and status are written after the rows, so neither may lie inside a row the commit
//! writes, tokens [committed, committed + accepted) of request r in any layer and kv head (a user's
//! layout can put its rows anywhere, the caller's arrays among them): the commit would then leave a
//! length where a key was. O(layers accepted Hkv) address compares, against the copies' O(... D).
template <class L>
void require_lengths_outside_rows(std::span<const L> layers, std::int32_t request, std::int32_t committed,
                                  std::int32_t accepted, const commit_batch_args& a, std::string_view fn) {
  using T = typename L::value_type;
  const auto span_of = [](const std::int32_t* p, std::int64_t n) {
    return view_byte_span(strided_view<const std::int32_t, 1>(p, {n}, {1}));
  };
  const std::pair<std::uintptr_t, std::uintptr_t> outs[2] = {span_of(a.new_lengths, a.requests), span_of(a.status, 3)};
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const auto row_bytes = static_cast<std::uintptr_t>(layers[l].head_dim()) * sizeof(T);
    for (std::int32_t j = 0; j < accepted; ++j)
      for (int h = 0; h < layers[l].num_kv_heads(); ++h)
        for (const T* row : {layers[l].k_row(request, committed + j, h), layers[l].v_row(request, committed + j, h)}) {
          const auto lo = reinterpret_cast<std::uintptr_t>(row), hi = lo + (row_bytes - 1);
          for (int o = 0; o < 2; ++o)
            if (outs[o].first <= hi && lo <= outs[o].second) [[unlikely]]
              throw_invalid_argument(fn, o == 0 ? "new_lengths" : "status",
                                     "memory apart from the rows the commit writes (layers[" + std::to_string(l) +
                                         "], request " + std::to_string(request) + ", token " +
                                         std::to_string(committed + j) + ", kv head " + std::to_string(h) + ")",
                                     "an array inside that row");
        }
  }
}

//! The device commit's memory checks that need no per-request value (those live in device memory,
//! where the check kernels read them): no two layers over K or V memory that starts at the same
//! address (a layer listed twice, or one buffer under two layers: the copy kernels run a group's
//! layers concurrently), and
//! every array of the call apart from every layer's K and V (the rows written are known only on the
//! device, so the arrays are kept out of the whole pools; the host backend compares them row by row:
//! require_commit_rows, require_lengths_outside_rows). `arrays` are name, view pairs. A layout whose
//! mapping does not report required_span_size (kv_cache::visit_memory) is not compared. O(layers log
//! layers + layers * arrays).
template <class L, class... Arrays>
void require_device_commit_memory(std::span<const L> layers, std::string_view fn, const Arrays&... arrays) {
  struct pool {
    std::uintptr_t lo, hi;
    std::size_t layer;
    bool v;
  };
  std::vector<pool> pools;
  for (std::size_t l = 0; l < layers.size(); ++l)
    if constexpr (requires { layers[l].visit_memory([](std::string_view, const auto&) {}); })
      layers[l].visit_memory([&](std::string_view name, const auto& view) {
        if (name != "cache.k" && name != "cache.v") return;  // the mapping's own arrays: read, not written
        const std::string where = "layers[" + std::to_string(l) + "]." + std::string(name.substr(6));
        [&]<std::size_t... I>(std::index_sequence<I...>) {
          const auto named = std::forward_as_tuple(arrays...);
          (require_disjoint(fn, where, view, std::get<2 * I>(named), std::get<2 * I + 1>(named)), ...);
        }(std::make_index_sequence<sizeof...(Arrays) / 2>{});
        const auto [lo, hi] = view_byte_span(view);
        pools.push_back({lo, hi, l, name == "cache.v"});
      });
  std::sort(pools.begin(), pools.end(), [](const pool& a, const pool& b) {
    return std::tie(a.lo, a.layer, a.hi) < std::tie(b.lo, b.layer, b.hi);
  });
  // Pools of two layers that start at one address share rows whatever their ends (one buffer under
  // two layers of different request counts or capacities): sorted by start, they are neighbours.
  for (std::size_t i = 1; i < pools.size(); ++i)
    if (pools[i].lo == pools[i - 1].lo && pools[i].layer != pools[i - 1].layer) [[unlikely]]
      throw_invalid_argument(fn, "layers[" + std::to_string(pools[i].layer) + "]",
                             "K and V memory apart from every other layer's (layers[" +
                                 std::to_string(pools[i - 1].layer) + "] has the same " +
                                 (pools[i - 1].v ? "V" : "K") + " memory)",
                             "a layer sharing its storage");
}

//! The device from-buffer commit's spec buffers of layer `l` apart from every layer's K and V memory
//! (for layouts that report it, kv_cache::visit_memory): the rows the copy blocks write are known only
//! on the device, and the blocks of every layer run at once. O(layers).
template <class L, class K, class V>
void require_spec_apart_from_layers(std::span<const L> layers, std::string_view fn, std::size_t l, const K& k,
                                    const V& v) {
  const std::string kname = "spec_k[" + std::to_string(l) + "]", vname = "spec_v[" + std::to_string(l) + "]";
  for (std::size_t m = 0; m < layers.size(); ++m)
    if constexpr (requires { layers[m].visit_memory([](std::string_view, const auto&) {}); })
      layers[m].visit_memory([&](std::string_view name, const auto& pool) {
        if (name != "cache.k" && name != "cache.v") return;
        const std::string where = "layers[" + std::to_string(m) + "]." + std::string(name.substr(6));
        require_disjoint(fn, where, pool, kname, k, vname, v);
      });
}

template <>
struct commit_batch_backend<host> {
  template <class L>
  static void run(const host&, std::span<const L> layers, const commit_batch_args& in,
                  std::span<const commit_spec<typename L::value_type>> specs) {
    const std::string_view fn = in.from_buffer ? "specdec::kv_commit_from_buffer_batch" : "specdec::kv_commit_in_place_batch";
    // The index arrays are copied first and only the copies are checked and used: arrays that a
    // caller keeps inside the cache's own rows (a user's layout can put them anywhere) would
    // otherwise change under the row moves, after they were checked.
    const auto copy = [](const std::int32_t* p, std::int64_t n) {
      return std::vector<std::int32_t>(p, p + std::max<std::int64_t>(n, 0));
    };
    const std::vector<std::int32_t> indptr = copy(in.node_indptr, std::int64_t{in.requests} + 1),
                                    committed = copy(in.committed, in.requests), accepted = copy(in.accepted, in.nodes),
                                    num_accepted = copy(in.num_accepted, in.requests);
    commit_batch_args a = in;
    a.node_indptr = indptr.data(), a.committed = committed.data(), a.accepted = accepted.data();
    a.num_accepted = num_accepted.data();
    validate_indptr(fn, "node_indptr", "node_indptr", a.node_indptr, a.requests, a.nodes, "accepted.extent(0)");
    std::vector<std::pair<std::uintptr_t, std::uintptr_t>> spec_spans;
    if (a.from_buffer && a.nodes > 0)
      for (std::size_t l = 0; l < specs.size(); ++l) {
        const std::int64_t hkv = layers[l].num_kv_heads(), d = layers[l].head_dim();
        using T = typename L::value_type;
        spec_spans.push_back(view_byte_span(strided_view<const T, 3>(specs[l].k, {a.nodes, hkv, d},
                                                                      {specs[l].k_stride_node, specs[l].k_stride_head, 1})));
        spec_spans.push_back(view_byte_span(strided_view<const T, 3>(specs[l].v, {a.nodes, hkv, d},
                                                                      {specs[l].v_stride_node, specs[l].v_stride_head, 1})));
      }
    spec_spans = merged_ranges(std::move(spec_spans));
    std::vector<touched_tokens> touched;
    for (std::int32_t r = 0; r < a.requests; ++r) {  // everything before the first write
      const std::int32_t b = a.node_indptr[r], n = a.node_indptr[r + 1] - b, c = a.committed[r], k = a.num_accepted[r];
      require(c >= 0, fn, "committed_lengths[" + std::to_string(r) + "]", ">= 0", c);
      require(k >= 0 && k <= n, fn, "num_accepted[" + std::to_string(r) + "]",
              "in [0, " + std::to_string(n) + "] (the request's tree size)", k);
      const std::int32_t need = a.from_buffer ? k : n;  // slots written: the path, or the whole tree in place
      for (std::size_t l = 0; l < layers.size(); ++l)
        require(static_cast<std::int64_t>(c) + need <= layers[l].capacity(r), fn,
                "committed_lengths[" + std::to_string(r) + (a.from_buffer ? "] + num_accepted" : "] + tree size"),
                "<= capacity = " + std::to_string(layers[l].capacity(r)) + " (layer " + std::to_string(l) + ")",
                static_cast<std::int64_t>(c) + need);
      validate_accepted_path({a.accepted + b, static_cast<std::size_t>(k)}, n, {}, fn);
      if (k > 0) {  // from a buffer: the path's destinations; in place: up to the last accepted node
        const std::int64_t last = std::int64_t{c} + (a.from_buffer ? k : a.accepted[b + k - 1] + 1);
        require_commit_rows(layers, r, c, last, fn);
        touched.push_back({r, c, last});
      }
      require_lengths_outside_rows(layers, r, c, k, a, fn);
      if (a.from_buffer) require_rows_outside_specs(layers, r, c, k, spec_spans, fn);
    }
    if (!layers.empty()) require_requests_apart(layers[0], std::span<const touched_tokens>(touched), fn);
    for (std::int32_t r = 0; r < a.requests; ++r) {
      const std::int32_t b = a.node_indptr[r], k = a.num_accepted[r], c = a.committed[r];
      if (!a.from_buffer) {
        move_accepted(layers, r, c, {a.accepted + b, static_cast<std::size_t>(k)});
      } else {
        for (std::size_t l = 0; l < layers.size(); ++l)
          for (std::int32_t j = 0; j < k; ++j)
            for (int h = 0; h < layers[l].num_kv_heads(); ++h) {
              copy_row(layers[l], layers[l].k_row(r, c + j, h), specs[l].k_row(b + a.accepted[b + j], h));
              copy_row(layers[l], layers[l].v_row(r, c + j, h), specs[l].v_row(b + a.accepted[b + j], h));
            }
      }
    }
    for (std::int32_t r = 0; r < a.requests; ++r) a.new_lengths[r] = a.committed[r] + a.num_accepted[r];
    a.status[0] = 0, a.status[1] = -1, a.status[2] = -1;
  }
};

//! The argument checks both array-form batched commits share (every array 1-D int32 with unit
//! stride in memory the policy reaches, extents from R = committed_lengths.extent(0) and N =
//! accepted.extent(0); the layers' geometry), returning the arrays as commit_batch_args.
template <class Policy, class L, class CL, class NI, class AC, class NA, class NL, class ST>
commit_batch_args commit_batch_arrays(std::string_view fn, std::span<const L> layers, const CL& committed_lengths_in,
                                      const NI& node_indptr_in, const AC& accepted_in, const NA& num_accepted_in,
                                      const NL& new_lengths_in, const ST& status_in) {
  const auto committed_lengths = as_view(committed_lengths_in);
  const auto node_indptr = as_view(node_indptr_in);
  const auto accepted = as_view(accepted_in);
  const auto num_accepted = as_view(num_accepted_in);
  const auto new_lengths = as_view(new_lengths_in);
  const auto status = as_view(status_in);
  const auto [R, N] = require_batch_counts(fn, "committed_lengths", committed_lengths, "accepted", accepted);
  require_policy_array<Policy>(fn, "committed_lengths", committed_lengths, R);
  require_policy_array<Policy>(fn, "node_indptr", node_indptr, R + 1);
  require_policy_array<Policy>(fn, "accepted", accepted, N);
  require_policy_array<Policy>(fn, "num_accepted", num_accepted, R);
  require_policy_array<Policy>(fn, "new_lengths", new_lengths, R);
  require_policy_array<Policy>(fn, "status", status, 3);
  // The outputs are written while the inputs are still read (the device clears status first, and a
  // request's new length is written while other blocks read its committed length): each apart from
  // the other and from every input, new_lengths over committed_lengths included.
  require_outputs_apart(fn, std::forward_as_tuple("new_lengths", new_lengths, "status", status),
                        std::forward_as_tuple("committed_lengths", committed_lengths, "node_indptr", node_indptr,
                                              "accepted", accepted, "num_accepted", num_accepted));
  validate_commit_layers<L, Policy>(layers, R, fn);
  if constexpr (on_device_v<Policy>) {  // the copy kernel's grid has a y block per kv head
    require(layers.empty() || layers[0].num_kv_heads() <= 65535, fn, "layers[0].num_kv_heads()",
            "at most 65535 (cuda grid limit)", layers.empty() ? 0 : layers[0].num_kv_heads());
    require_device_commit_memory(layers, fn, "committed_lengths", committed_lengths, "node_indptr", node_indptr,
                                 "accepted", accepted, "num_accepted", num_accepted, "new_lengths", new_lengths,
                                 "status", status);
    // new_lengths is written while other blocks (and the next group's launch) still read the
    // layouts' tables through k_row and capacity; not their lengths, which may take the new ones
    for (std::size_t l = 0; l < layers.size(); ++l)
      require_outputs_apart_from_mapping(layers[l], false, fn, "new_lengths", new_lengths, "status", status);
  }
  commit_batch_args a;
  a.requests = static_cast<std::int32_t>(R), a.nodes = static_cast<std::int32_t>(N);
  a.committed = committed_lengths.data(), a.node_indptr = node_indptr.data(), a.accepted = accepted.data();
  a.num_accepted = num_accepted.data(), a.new_lengths = new_lengths.data(), a.status = status.data();
  return a;
}

}  // namespace detail

//! In-place commit of a ragged batch given as arrays in verify_greedy_batch's output layout (the form
//! a GPU engine holds after verifying on the device): request r's tree of n_r = node_indptr[r+1] -
//! node_indptr[r] tokens sits at positions [committed_lengths[r], + n_r) of every layer; its
//! num_accepted[r] accepted nodes are accepted[node_indptr[r] .. + num_accepted[r]) (strictly
//! increasing local indices, a root path); each accepted node a_j moves to committed_lengths[r] + j
//! in every layer and KV head, as kv_commit_in_place does. new_lengths[r] = committed_lengths[r] +
//! num_accepted[r] (the layouts' own lengths are the caller's to update). Arrays 1-D int32, unit
//! stride: committed_lengths, num_accepted, new_lengths [R], node_indptr [R + 1], accepted [N],
//! status [3] (core/device_status.hpp); new_lengths and status apart from each other and from every
//! input (new_lengths over committed_lengths too: the device writes it while other blocks read it).
//! Everything is checked before the first write, so a rejected commit leaves every cache untouched:
//!   specdec::host: host-accessible layouts and arrays; invalid_argument on a bad value (new_lengths
//!     or status inside a row the commit writes included); status {0, -1, -1} on success.
//!     O(layers * sum accepted * Hkv * D).
//!   specdec::cuda (needs kv/commit.cuh and nvcc): device-accessible layouts (mappings callable on the
//!     device) and arrays; shapes and geometry checked on the host, values (offsets, committed
//!     lengths, accepted paths, capacities) by check kernels (one per group of up to 32 layers), all
//!     enqueued before the first copy kernel, into `status`; the copies run only when status is
//!     clear, the layers of a group concurrently, so layers must not share rows (the host copies
//!     them one after another). Checked on the host, for layouts that report their span (kv_cache::
//!     visit_memory): no two layers over K or V memory starting at the same address, every array
//!     apart from the layers' K and V memory (not only from the rows written, as on the host: those
//!     are known only on the device), and new_lengths and status apart from the layouts' tables
//!     (page tables: read by the copy blocks while new lengths are written; a layout's own lengths
//!     array may take the new lengths). Page ids in device memory are read only by the kernels: a page id
//!     outside the pool is the caller's error there, as for the attention calls. Enqueued on
//!     policy.stream without synchronisation, graph-capturable.
template <execution_policy Policy, class LayerT, std::size_t E, class CL, class NI, class AC, class NA, class NL,
          class ST>
  requires(detail::int32_array<CL> && detail::int32_array<NI> && detail::int32_array<AC> && detail::int32_array<NA> &&
           detail::int32_output<NL> && detail::int32_output<ST>)
void kv_commit_in_place_batch(const Policy& policy, std::span<LayerT, E> layer_span, const CL& committed_lengths_in,
                              const NI& node_indptr_in, const AC& accepted_in, const NA& num_accepted_in,
                              const NL& new_lengths_in, const ST& status_in) {
  using L = std::remove_const_t<LayerT>;
  static_assert(check_writable_kv_layout<L>());
  if constexpr (writable_kv_layout<L>) {
    constexpr std::string_view fn = "specdec::kv_commit_in_place_batch";
    const std::span<const L> layers(layer_span.data(), layer_span.size());
    const detail::commit_batch_args a = detail::commit_batch_arrays<Policy>(
        fn, layers, committed_lengths_in, node_indptr_in, accepted_in, num_accepted_in, new_lengths_in, status_in);
    detail::commit_batch_backend<Policy>::run(policy, layers, a,
                                              std::span<const detail::commit_spec<typename L::value_type>>{});
  }
}

//! From-buffer commit of a ragged batch in verify_greedy_batch's output layout: the tree tokens' K/V
//! are per-layer buffers spec_k[l], spec_v[l] [N, Hkv, D] (what hybrid_tree_attention reads as its
//! spec K/V: node i of the batch in row i, request r's local node a in row node_indptr[r] + a);
//! accepted node a_j of request r is copied to cache position committed_lengths[r] + j in every
//! layer and KV head, as kv_commit_from_buffer does for one request. The cache needs room for the
//! accepted path only (committed + num_accepted <= capacity). Other arguments, checks, the status
//! array and the host / cuda behaviour as kv_commit_in_place_batch's array form; the host also
//! refuses a spec buffer over a row it writes (kv_commit_from_buffer's rule), and the cuda form, where
//! the rows written are known only to the kernels, a spec buffer over any layer's K or V memory (for
//! layouts that report it, kv_cache::visit_memory).
template <execution_policy Policy, class LayerT, std::size_t E, class SpecT, std::size_t EK, std::size_t EV, class CL,
          class NI, class AC, class NA, class NL, class ST>
  requires(tensor_like<std::remove_const_t<SpecT>> && detail::int32_array<CL> && detail::int32_array<NI> &&
           detail::int32_array<AC> && detail::int32_array<NA> && detail::int32_output<NL> && detail::int32_output<ST>)
void kv_commit_from_buffer_batch(const Policy& policy, std::span<LayerT, E> layer_span, std::span<SpecT, EK> spec_k,
                                 std::span<SpecT, EV> spec_v, const CL& committed_lengths_in, const NI& node_indptr_in,
                                 const AC& accepted_in, const NA& num_accepted_in, const NL& new_lengths_in,
                                 const ST& status_in) {
  using L = std::remove_const_t<LayerT>;
  using Spec = std::remove_const_t<SpecT>;
  static_assert(check_writable_kv_layout<L>());
  static_assert(Spec::rank == 3, "specdec::kv_commit_from_buffer_batch: spec buffers must be rank 3 [N, kv_heads, head_dim]");
  if constexpr (writable_kv_layout<L>) {
    static_assert(std::is_same_v<std::remove_cv_t<typename Spec::element_type>, typename L::value_type>,
                  "specdec::kv_commit_from_buffer_batch: spec buffer element type must equal the cache's value_type");
    using T = typename L::value_type;
    constexpr std::string_view fn = "specdec::kv_commit_from_buffer_batch";
    const std::span<const L> layers(layer_span.data(), layer_span.size());
    detail::commit_batch_args a = detail::commit_batch_arrays<Policy>(
        fn, layers, committed_lengths_in, node_indptr_in, accepted_in, num_accepted_in, new_lengths_in, status_in);
    a.from_buffer = true;
    const std::int64_t N = a.nodes;
    std::vector<detail::commit_spec<T>> specs(layers.size());
    // new_lengths and status are written while the spec buffers are read (on the device by other
    // blocks): apart from every layer's buffers, as from the index arrays (commit_batch_arrays).
    const strided_view<const std::int32_t, 1> new_lengths(a.new_lengths, {a.requests}, {1}), status(a.status, {3}, {1});
    detail::check_spec_buffers<Policy>(fn, layers, spec_k, spec_v, N, [&](std::size_t l, const auto& k, const auto& v) {
      require_outputs_apart(fn, std::forward_as_tuple("new_lengths", new_lengths, "status", status),
                            std::forward_as_tuple("spec_k", k, "spec_v", v));
      // On the device the rows written are known only to the kernels, and copy blocks of every layer
      // run at once: the spec buffers apart from every layer's K and V memory (the host compares
      // them with the rows it writes, require_rows_outside_specs).
      if constexpr (on_device_v<Policy>) detail::require_spec_apart_from_layers(layers, fn, l, k, v);
      specs[l] = {k.data(), v.data(), k.stride(0), k.stride(1), v.stride(0), v.stride(1)};
    });
    detail::commit_batch_backend<Policy>::run(policy, layers, a, std::span<const detail::commit_spec<T>>(specs));
  }
}

}  // namespace specdec
