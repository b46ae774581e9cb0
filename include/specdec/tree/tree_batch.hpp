#pragma once
//! \file tree_batch.hpp
//! build_tree_batch: the derived arrays of a ragged batch of token trees -- depths, positions, the
//! word offsets of the per-request masks and the ancestor masks themselves -- computed from the
//! batch's parents arrays, on the host or (with tree/tree_batch.cuh and nvcc) on a CUDA device
//! (issue #23 item 1: a GPU engine's drafter leaves its trees in device memory, and the masks the
//! attention kernels read must be built there, without a round trip through the host).
//!
//! The layout is token_tree_batch's (tree/token_tree.hpp), which hybrid_tree_attention consumes:
//! request r owns nodes [node_indptr[r], node_indptr[r+1]); parents are local (-1 = child of the
//! root, otherwise an earlier node of the same request); depth(i) = 0 for a child of the root, else
//! depth(parent) + 1; position(i) = committed_lengths[r] + depth(i); request r's n_r x n_r ancestor
//! mask (row i has bit j iff j == i or j is an ancestor of i) starts at word mask_indptr[r], with
//! words_per_row(n_r) words per row, the requests' masks back to back. So build_tree_batch's outputs
//! equal token_tree_batch's arrays for the same trees, bit for bit (tested).
//! With tree_batch_rows::root_and_nodes each request's rows start with its root (the layout of a
//! step's verification rows and of the forward that computes them: request r's n_r + 1 rows from
//! node_indptr[r] + r), built from the same plain trees: what an engine feeds hybrid_tree_attention
//! when the root is one of the step's queries, without augmenting the trees itself.
//!
//! Validation. Shapes, memory spaces and strides are checked on the host before anything runs, for
//! both policies. The VALUES of node_indptr, parents and committed_lengths live in device memory
//! under specdec::cuda and are not read on the host (no synchronisation inside a primitive): the
//! kernels check them and report the first problem they meet in `status`, three int32 values
//! [error, request, index] (core/device_status.hpp; device_status decodes them). The host backend checks
//! the same rules and throws specdec::invalid_argument instead, writing {0, -1, -1} to `status` on
//! success. On a device error the outputs are unspecified but every access stayed in bounds: a bad
//! node_indptr stops the per-request pass before it reads anything, a parent outside [-1, i) ends
//! every ancestor walk that meets it, and the masks are written only when they fit `mask`.

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "specdec/core/bitmask.hpp"
#include "specdec/core/config.hpp"
#include "specdec/core/device_status.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! The rows build_tree_batch lays out (a named parameter, the algorithm's variant):
enum class tree_batch_rows : std::uint8_t {
  //! one row per node: request r's n_r rows from node_indptr[r] (token_tree_batch's arrays)
  nodes,
  //! the root, then one row per node: request r's n_r + 1 rows from node_indptr[r] + r, as the
  //! verification rows of a step (verify_greedy_batch's logits, speculative_batch's target rows) and
  //! the queries of the forward that makes them. The root's depth is -1 and its position
  //! committed_lengths[r] - 1 (the last committed token, not yet in the cache), its mask row itself
  //! only; node i's depth and position are as in `nodes`, its mask row has the root's bit (column 0)
  //! and its ancestors' (columns shifted by one): the (n_r + 1)-node tree of rooted_parents.
  root_and_nodes,
};

namespace detail {

template <class V, class T>
concept tree_batch_array = tensor_like<V> && (V::rank == 1) && std::is_same_v<std::remove_cv_t<typename V::element_type>, T>;
template <class V, class T>
concept tree_batch_output = tree_batch_array<V, T> && !std::is_const_v<typename V::element_type>;

//! The seam between build_tree_batch and its backends (like rope_backend, position/rope.hpp):
//!   static void run(const Policy&, tree_batch_rows rows, std::int32_t R, std::int32_t N,
//!                   const std::int32_t* node_indptr, const std::int32_t* parents,
//!                   const std::int32_t* committed, std::int32_t* depths, std::int32_t* positions,
//!                   std::int64_t* mask_indptr, mask_word* mask, std::int64_t mask_capacity,
//!                   std::int32_t* status);
//! The host backend is below, the cuda one in tree/tree_batch.cuh.
SPECDEC_BACKEND_SEAM(tree_batch_backend, "build_tree_batch", "specdec/tree/tree_batch.cuh");

template <>
struct tree_batch_backend<host> {
  static void run(const host&, tree_batch_rows rows, std::int32_t R, std::int32_t N, const std::int32_t* node_indptr,
                  const std::int32_t* parents, const std::int32_t* committed, std::int32_t* depths,
                  std::int32_t* positions, std::int64_t* mask_indptr, mask_word* mask, std::int64_t mask_capacity,
                  std::int32_t* status) {
    constexpr std::string_view fn = "specdec::build_tree_batch";
    const std::int32_t extra = rows == tree_batch_rows::root_and_nodes ? 1 : 0;  // the root's row
    validate_indptr(fn, "node_indptr", "node_indptr", node_indptr, R, N, "parents.extent(0)");
    // Every check before the first write: a rejected call leaves the outputs untouched.
    std::int64_t words = 0;
    for (std::int32_t r = 0; r < R; ++r) {
      const std::int32_t b = node_indptr[r], n = node_indptr[r + 1] - b;
      const std::int32_t c = committed[r];
      if (c < 1) [[unlikely]]
        throw_invalid_argument(fn, "committed_lengths[" + std::to_string(r) + "]",
                               ">= 1 (the root is the last committed token)", c);
      for (std::int32_t i = 0; i < n; ++i) {
        const std::int32_t p = parents[b + i];
        if (p < -1 || p >= i) [[unlikely]]
          throw_invalid_argument(fn, "parents[" + std::to_string(b + i) + "] (request " + std::to_string(r) + ")",
                                 "a local parent in [-1, " + std::to_string(i) + ") (topological order: parent before node)",
                                 p);
      }
      // Positions c + depth must fit int32. A node's depth is at most its index, so only a request
      // with c > INT32_MAX - (n - 1) can overflow; its exact depths decide, in scratch (not `depths`).
      if (n > 0 && c > std::numeric_limits<std::int32_t>::max() - (n - 1)) [[unlikely]] {
        std::vector<std::int32_t> d(static_cast<std::size_t>(n));
        for (std::int32_t i = 0; i < n; ++i) {
          const std::int32_t p = parents[b + i];
          d[static_cast<std::size_t>(i)] = p < 0 ? 0 : d[static_cast<std::size_t>(p)] + 1;
          if (c > std::numeric_limits<std::int32_t>::max() - d[static_cast<std::size_t>(i)])
            throw_invalid_argument(fn, "committed_lengths[" + std::to_string(r) + "]",
                                   "<= INT32_MAX - " + std::to_string(d[static_cast<std::size_t>(i)]) +
                                       " (the depth of its node " + std::to_string(i) + "; positions are int32)",
                                   c);
        }
      }
      words += static_cast<std::int64_t>(n + extra) * words_per_row(n + extra);
    }
    if (words > mask_capacity) [[unlikely]]
      throw_invalid_argument(fn, "mask", "extent(0) >= " + std::to_string(words) + " (the ancestor masks' words)",
                             mask_capacity);
    // Depths in one forward pass (parents come first); request r's rows start at b + r * extra.
    for (std::int32_t r = 0; r < R; ++r) {
      const std::int32_t b = node_indptr[r], n = node_indptr[r + 1] - b, o = b + r * extra;
      if (extra) depths[o] = -1;
      for (std::int32_t i = 0; i < n; ++i) {
        const std::int32_t p = parents[b + i];
        depths[o + extra + i] = p < 0 ? 0 : depths[o + extra + p] + 1;
      }
    }
    mask_indptr[0] = 0;
    std::vector<std::int32_t> rooted;
    for (std::int32_t r = 0; r < R; ++r) {
      const std::int32_t b = node_indptr[r], n = node_indptr[r + 1] - b, m = n + extra, o = b + r * extra;
      for (std::int32_t i = 0; i < m; ++i) positions[o + i] = committed[r] + depths[o + i];
      const int w = words_per_row(m);
      const std::int32_t* par = parents + b;
      if (extra) {  // the tree with its root as node 0
        rooted.resize(static_cast<std::size_t>(m));
        for (std::int32_t j = 0; j < m; ++j) rooted[static_cast<std::size_t>(j)] = rooted_parents{par}[j];
        par = rooted.data();
      }
      write_ancestor_rows(par, m, mask + mask_indptr[r], w);
      mask_indptr[r + 1] = mask_indptr[r] + static_cast<std::int64_t>(m) * w;
    }
    status[0] = 0, status[1] = -1, status[2] = -1;
  }
};

}  // namespace detail

//! Builds the arrays of a ragged batch of R token trees with N nodes in all from their parents:
//!   node_indptr       int32 [R + 1]  request r owns nodes [node_indptr[r], node_indptr[r+1])
//!   parents           int32 [N]      local parent of each node, -1 for a child of the root
//!   committed_lengths int32 [R]      >= 1; positions are committed_lengths[r] + depth
//!   depths            int32 [N]      out (N + R with root_and_nodes)
//!   positions         int32 [N]      out (N + R with root_and_nodes)
//!   mask_indptr       int64 [R + 1]  out: word offset of request r's mask in `mask`
//!   mask              mask_word [>= sum_r m_r * words_per_row(m_r)]  out: the ancestor masks, m_r = n_r
//!                                    (n_r + 1 with root_and_nodes)
//!   status            int32 [3]      out: [error, request, index] (device_status)
//!   rows              tree_batch_rows: one row per node (default), or the root's row first
//! (the file comment gives the layout). Every array 1-D with unit stride; the outputs apart from each
//! other and from the inputs (invalid_argument otherwise).
//!   specdec::host: host-accessible memory; every value checked first, specdec::invalid_argument on
//!     a bad one (outputs then untouched), status {0, -1, -1} on success. O(N + mask words).
//!   specdec::cuda (needs tree/tree_batch.cuh and nvcc): device-accessible memory; shapes checked on
//!     the host, values on the device into `status` (file comment); two kernels enqueued on
//!     policy.stream without synchronisation, graph-capturable. O(R) + O(sum over nodes and mask
//!     words of the ancestors walked).
template <execution_policy Policy, class NI, class PA, class CL, class DE, class PO, class MI, class MA, class ST>
  requires(detail::tree_batch_array<NI, std::int32_t> && detail::tree_batch_array<PA, std::int32_t> &&
           detail::tree_batch_array<CL, std::int32_t> && detail::tree_batch_output<DE, std::int32_t> &&
           detail::tree_batch_output<PO, std::int32_t> && detail::tree_batch_output<MI, std::int64_t> &&
           detail::tree_batch_output<MA, mask_word> && detail::tree_batch_output<ST, std::int32_t>)
void build_tree_batch(const Policy& policy, const NI& node_indptr_in, const PA& parents_in,
                      const CL& committed_lengths_in, const DE& depths_in, const PO& positions_in,
                      const MI& mask_indptr_in, const MA& mask_in, const ST& status_in,
                      tree_batch_rows rows = tree_batch_rows::nodes) {
  constexpr std::string_view fn = "specdec::build_tree_batch";
  const auto node_indptr = as_view(node_indptr_in);
  const auto parents = as_view(parents_in);
  const auto committed_lengths = as_view(committed_lengths_in);
  const auto depths = as_view(depths_in);
  const auto positions = as_view(positions_in);
  const auto mask_indptr = as_view(mask_indptr_in);
  const auto mask = as_view(mask_in);
  const auto status = as_view(status_in);
  const auto [R, N] = require_batch_counts(fn, "committed_lengths", committed_lengths, "parents", parents);
  require_policy_array<Policy>(fn, "node_indptr", node_indptr, R + 1);
  require_policy_array<Policy>(fn, "parents", parents, N);
  require_policy_array<Policy>(fn, "committed_lengths", committed_lengths, R);
  require(rows == tree_batch_rows::nodes || rows == tree_batch_rows::root_and_nodes, fn, "rows",
          "tree_batch_rows::nodes or root_and_nodes", static_cast<int>(rows));
  const std::int64_t out_rows = rows == tree_batch_rows::root_and_nodes ? N + R : N;
  require(out_rows <= std::numeric_limits<std::int32_t>::max(), fn, "parents", "at most INT32_MAX rows in all (nodes and roots)",
          out_rows);
  require_policy_array<Policy>(fn, "depths", depths, out_rows);
  require_policy_array<Policy>(fn, "positions", positions, out_rows);
  require_policy_array<Policy>(fn, "mask_indptr", mask_indptr, R + 1);
  require_policy_array<Policy>(fn, "mask", mask, -1);
  require_policy_array<Policy>(fn, "status", status, 3);
  // the host writes positions before it reads a request's parents again (for its mask)
  require_outputs_apart(fn,
                        std::forward_as_tuple("depths", depths, "positions", positions, "mask_indptr", mask_indptr,
                                              "mask", mask, "status", status),
                        std::forward_as_tuple("node_indptr", node_indptr, "parents", parents, "committed_lengths",
                                              committed_lengths));
  detail::tree_batch_backend<Policy>::run(
      policy, rows, static_cast<std::int32_t>(R), static_cast<std::int32_t>(N), node_indptr.data(), parents.data(),
      committed_lengths.data(), depths.data(), positions.data(), mask_indptr.data(), mask.data(), mask.extent(0),
      status.data());
}

}  // namespace specdec
