#pragma once
//! \file speculative_sampling.cuh
//! CUDA backend of the array form of verify_chain_speculative_batch (verify/speculative_sampling.hpp):
//! chain_speculative_backend<cuda>. After the status reset, one kernel on policy.stream, a block per
//! request (grid-stride over requests), which runs the host's walk (detail::chain_speculative_walk)
//! with the same Philox words:
//!  1. checks, for every node in parallel: the chain shape (device_error::chain), the token
//!     (token), q_i(x_i) positive and finite (draft_prob) and p_i(x_i) admissible (row);
//!  2. node by node: both rows in full (row / draft_row), then one thread draws u (two words) and
//!     accepts when u q_i(x_i) < p_i(x_i);
//!  3. at the first rejection, the residual max(0, p_i - q_i) by blocked inverse CDF (its block sums
//!     in the host's order: sampling/detail/cdf_device.cuh), or p_i when the residual is zero; after
//!     the last node, a draw from p_n.
//! Rows after the first rejection are never read. Outputs as the greedy backend writes them.
//!
//! The logits form (chain_speculative_logits_kernel) walks the same way without the p_i(x_i) checks
//! of step 1; each target row it reaches is copied from the logits into the request's workspace row,
//! processed there (block_process_row: process_logits_batch's steps and its reports,
//! device_error::params / context / row with the row's number in target_logits) and turned into
//! probabilities (block_probs_row), then read with plain loads (the kernel writes it).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>

#include "specdec/core/device_types.cuh"
#include "specdec/core/error.hpp"
#include "specdec/sampling/detail/cdf_device.cuh"
#include "specdec/sampling/logits_processor.cuh"
#include "specdec/verify/detail/logits_walk.cuh"
#include "specdec/verify/speculative_sampling.hpp"

namespace specdec {
namespace detail {

inline constexpr int chain_speculative_threads = 512;

//! The walks of the file comment, a request per block (grid-stride). row_of(r, i, k) gives the
//! target distribution of request r's local row k (i: its row in the tensor), or nullptr after
//! reporting why it has none; every thread calls it, and its result is uniform. FromLogits: the rows
//! are processed from logits into a workspace this kernel writes (plain loads; p_k(x_k) is not known
//! before row k is processed, and a processed row is a distribution: no p checks); otherwise they are
//! the caller's probabilities (read through the read-only cache, checked).
template <bool FromLogits, class RowOf>
__device__ void chain_speculative_walks(const chain_speculative_args& args, cdf_walk_shared& cdf, RowOf&& row_of) {
  double* const bs = cdf.bs;
  cdf_draw_shared& draw = cdf.draw;
  __shared__ int accepted_here;
  const tree_verify_arrays& a = args.tree;
  const int t = static_cast<int>(threadIdx.x);
  device_check_indptr_ends(a.node_indptr, a.requests, a.nodes, a.status);
  const std::int64_t nb = (a.vocab + static_cast<std::int64_t>(cdf_block) - 1) / static_cast<std::int64_t>(cdf_block);
  for (std::int64_t r64 = blockIdx.x; r64 < a.requests; r64 += gridDim.x) {  // 64-bit: no wrap near INT32_MAX
    const auto r = static_cast<std::int32_t>(r64);
    std::int32_t b, e;
    if (!device_request_range(a.node_indptr, r, a.nodes, a.status, b, e)) continue;  // uniform
    const std::int32_t n = e - b;
    const std::int64_t first_row = static_cast<std::int64_t>(b) + r;
    const auto q_row = [&](std::int32_t i) { return args.draft_rows + (first_row + i) * args.draft_stride; };
    bool bad = false;
    for (std::int64_t i64 = t; i64 < n; i64 += chain_speculative_threads) {
      const auto i = static_cast<std::int32_t>(i64);
      const std::int32_t x = a.tokens[b + i];
      if (a.parents[b + i] != i - 1) device_report(a.status, device_error::chain, r, i), bad = true;
      if (x < 0 || x >= a.vocab) {
        device_report(a.status, device_error::token, r, i), bad = true;
        continue;
      }
      const float qx = q_row(i)[x];
      if (prob_entry(qx).bad || !(qx > 0.0f)) device_report(a.status, device_error::draft_prob, r, i), bad = true;
      if constexpr (!FromLogits)
        if (prob_entry(a.rows[(first_row + i) * a.row_stride + x]).bad) device_report(a.status, device_error::row, r, i), bad = true;
    }
    if (__syncthreads_or(bad) != 0) continue;
    philox_stream rng(args.seeds[r], args.streams[r]);  // drawn from by thread 0 only (cdf_draw_block)
    std::int32_t k = 0;     // accepted nodes so far
    const float* p = nullptr;  // target row k once fetched
    bool fail = false;
    for (; k < n; ++k) {
      p = row_of(r, first_row + k, k);
      if (p == nullptr) {
        fail = true;
        break;
      }
      const float* q = q_row(k);
      const bool bad_p = !FromLogits && block_row_inadmissible(p, a.vocab);
      const bool bad_q = block_row_inadmissible(q, a.vocab);
      if (bad_p || bad_q) {
        if (t == 0) device_report(a.status, bad_p ? device_error::row : device_error::draft_row, r, k);
        fail = true;
        break;
      }
      if (t == 0) {
        const std::int32_t x = a.tokens[b + k];
        const double px = p[x], qx = q[x];
        accepted_here = rng.uniform_double() * qx < px;
      }
      __syncthreads();
      const bool accept = accepted_here != 0;
      __syncthreads();  // every thread has read accepted_here before thread 0 writes the next one
      if (!accept) break;
    }
    if (fail) continue;
    if (k == n) {  // every node accepted: the bonus row
      p = row_of(r, first_row + n, n);
      if (p == nullptr) continue;
    }
    std::int64_t y = -1;
    if (k < n) {  // rejected at node k: the residual of rows k (both already checked)
      const float* q = q_row(k);
      cdf_block_sums<chain_speculative_threads>(
          [p, q](std::int64_t i) {
            if constexpr (FromLogits) return residual_entry(p[i], __ldg(q + i));
            else return residual_entry(__ldg(p + i), __ldg(q + i));
          },
          a.vocab, nb, bs);
      y = cdf_draw_block(bs, nb, a.vocab, rng, [p, q](std::int64_t i) { return residual_entry(p[i], q[i]).weight; },
                         draw);
    }
    if (y < 0) {
      // The bonus after the last node, or p_k itself when the residual is zero (p <= q everywhere:
      // only rounding led here, and p is the law the emitted token must have: stochastic.hpp).
      if (cdf_block_sums<chain_speculative_threads>(
              [p](std::int64_t i) {
                if constexpr (FromLogits) return prob_entry(p[i]);
                else return prob_entry(__ldg(p + i));
              },
              a.vocab, nb, bs)) {
        if (t == 0) device_report(a.status, device_error::row, r, k);
        continue;
      }
      y = cdf_draw_block(bs, nb, a.vocab, rng, [p](std::int64_t i) { return static_cast<double>(p[i]); }, draw);
      if (y < 0) {
        if (t == 0) device_report(a.status, device_error::row, r, k);
        continue;
      }
    }
    if (t == 0) {
      for (std::int32_t j = 0; j < k; ++j) a.put_accepted(r, b, j, j, a.tokens[b + j]);
      a.put_bonus(r, b, k, static_cast<std::int32_t>(y));
    }
  }
}

__global__ void __launch_bounds__(chain_speculative_threads) chain_speculative_kernel(const chain_speculative_args args) {
  __shared__ cdf_walk_shared cdf;
  chain_speculative_walks<false>(args, cdf, [&args](std::int32_t, std::int64_t i, std::int32_t) {
    return args.tree.rows + i * args.tree.row_stride;
  });
}

static_assert(chain_speculative_threads == process_threads, "the logits form runs process_logits_batch's row functions");

//! The logits form: each target row the walk reaches made in the request's workspace row
//! (block_logits_walk_row), then used as above.
__global__ void __launch_bounds__(chain_speculative_threads, 1) chain_speculative_logits_kernel(
    const chain_speculative_logits_args args) {
  __shared__ logits_walk_shared sh;
  chain_speculative_walks<true>(args.walk, sh.cdf, [&](std::int32_t r, std::int64_t i, std::int32_t) {
    return block_logits_walk_row(args.logits, r, i, sh);
  });
}

//! The cuda backend (the seam in speculative_sampling.hpp): the entry point has checked shapes,
//! strides, memory spaces and the vocabulary limit. Clears status and launches the kernel on
//! policy.stream; no synchronisation. A failed launch throws cuda_error.
template <>
struct chain_speculative_backend<cuda> {
  static void run(const cuda& policy, const chain_speculative_args& a) {
    clear_device_status(a.tree.status, policy.stream);
    launch_per_request<chain_speculative_threads>(chain_speculative_kernel, a.tree.requests, policy.stream,
                                                  "chain_speculative_kernel", a);
  }
  static void run(const cuda& policy, const chain_speculative_logits_args& a) {
    clear_device_status(a.walk.tree.status, policy.stream);
    launch_per_request<chain_speculative_threads>(chain_speculative_logits_kernel, a.walk.tree.requests, policy.stream,
                                                  "chain_speculative_logits_kernel", a);
  }
};

}  // namespace detail
}  // namespace specdec
