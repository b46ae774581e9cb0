#pragma once
//! \file sample_and_match.cuh
//! CUDA backend of the array form of verify_sample_and_match_batch (verify/sample_and_match.hpp):
//! sample_and_match_backend<cuda>. After the status reset, one kernel on policy.stream, a block per
//! request (grid-stride over requests), which walks the request's tree as the host does
//! (detail::sample_and_match_walk) and reads only the rows it visits:
//!  1. checks the request's offsets, parents and tokens in parallel (device_error::node_indptr,
//!     parent, token), copies parents and tokens to shared memory when they fit, and clears the
//!     per-node class marks;
//!  2. per visited row: the block sums of the blocked inverse CDF in the host's order, every entry
//!     checked on the way (sampling/detail/cdf_device.cuh's cdf_block_sums: the same doubles);
//!  3. one thread adds the block sums in order and draws u (two words of the request's Philox
//!     stream, as the host draws them); the block is searched by a warp (cdf_draw_block): the host's
//!     token;
//!  4. the next class, in parallel: nodes carrying the draw whose parent is in the current class
//!     (marks hold the depth + 1 at which a node joined, so no clearing between levels), the lowest
//!     of them named by an atomicMin; none: the draw is the bonus token.
//! The accepted path is the root path of the last class's lowest node; outputs as the greedy
//! backend writes them. A visited row that is not a distribution (a bad entry, or no positive entry)
//! is reported as device_error::row with its local row; rows the walk does not visit are never read.
//!
//! The logits form (sample_and_match_logits_kernel) walks the same way; before step 2 each visited
//! row is copied from the logits into the request's workspace row, processed there
//! (block_process_row: process_logits_batch's steps and its reports, device_error::params / context
//! / row with the row's number in target_logits) and turned into probabilities (block_probs_row).
//! The workspace is read with plain loads (the kernel writes it), the probabilities form's rows
//! through the read-only cache.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>

#include "specdec/core/device_types.cuh"
#include "specdec/core/error.hpp"
#include "specdec/sampling/detail/cdf_device.cuh"
#include "specdec/sampling/logits_processor.cuh"
#include "specdec/verify/detail/logits_walk.cuh"
#include "specdec/verify/sample_and_match.hpp"

namespace specdec {
namespace detail {

inline constexpr int sample_and_match_threads = 512;
//! Requests with at most this many nodes keep tokens, parents and class marks in shared memory
//! (12 KiB); larger ones read them from global memory and keep the marks in their accepted slots.
inline constexpr int sample_and_match_smem_nodes = 1024;
//! Node chunk of the class step: each thread records its matches of one chunk in a 32-bit mask
//! before any mark is written, so no thread reads a mark another thread is writing.
inline constexpr int sample_and_match_chunk = 32 * sample_and_match_threads;

//! The walks of the file comment, a request per block (grid-stride). row_of(r, i, local_row) gives the
//! processed target distribution of request r's local row (i: its row in the tensor) for the draw,
//! or nullptr after reporting why it has none; every thread calls it, and its result is uniform.
//! ReadOnly: the rows are read through the read-only cache (__ldg), which only rows this kernel never
//! writes allow.
template <bool ReadOnly, class RowOf>
__device__ void sample_and_match_walks(const sample_and_match_args& args, cdf_walk_shared& cdf, RowOf&& row_of) {
  double* const bs = cdf.bs;
  cdf_draw_shared& draw = cdf.draw;
  __shared__ std::int32_t par_s[sample_and_match_smem_nodes], tok_s[sample_and_match_smem_nodes],
      mark_s[sample_and_match_smem_nodes];
  __shared__ std::int32_t next_rep;
  const tree_verify_arrays& a = args.tree;
  const int t = static_cast<int>(threadIdx.x);
  device_check_indptr_ends(a.node_indptr, a.requests, a.nodes, a.status);
  const std::int64_t nb = (a.vocab + static_cast<std::int64_t>(cdf_block) - 1) / static_cast<std::int64_t>(cdf_block);
  for (std::int64_t r64 = blockIdx.x; r64 < a.requests; r64 += gridDim.x) {  // 64-bit: no wrap near INT32_MAX
    const auto r = static_cast<std::int32_t>(r64);
    std::int32_t b, e;
    if (!device_request_range(a.node_indptr, r, a.nodes, a.status, b, e)) continue;  // uniform
    const std::int32_t n = e - b;
    const bool in_smem = n <= sample_and_match_smem_nodes;
    std::int32_t* const mark = in_smem ? mark_s : a.accepted + b;
    __syncthreads();  // the previous request is done with the shared arrays
    bool bad = false;
    for (std::int64_t i64 = t; i64 < n; i64 += sample_and_match_threads) {
      const auto i = static_cast<std::int32_t>(i64);
      const std::int32_t p = a.parents[b + i], tok = a.tokens[b + i];
      if (p < -1 || p >= i) device_report(a.status, device_error::parent, r, i), bad = true;
      if (tok < 0 || tok >= a.vocab) device_report(a.status, device_error::token, r, i), bad = true;
      if (in_smem) par_s[i] = p, tok_s[i] = tok;
      mark[i] = 0;
    }
    if (__syncthreads_or(bad) != 0) continue;
    const std::int32_t* par = in_smem ? par_s : a.parents + b;
    const std::int32_t* tok = in_smem ? tok_s : a.tokens + b;
    philox_stream rng(args.seeds[r], args.streams[r]);  // drawn from by thread 0 only (cdf_draw_block)
    std::int64_t y = -1;               // the last draw
    std::int32_t rep = -1, level = 0;  // the current class's lowest node (-1: the root) and its depth + 1
    bool fail = false;
    for (;;) {
      const std::int32_t local_row = rep + 1;
      const float* row = row_of(r, static_cast<std::int64_t>(b) + r + local_row, local_row);
      if (row == nullptr) {
        fail = true;
        break;
      }
      if (cdf_block_sums<sample_and_match_threads>(
              [row](std::int64_t i) {
                if constexpr (ReadOnly) return prob_entry(__ldg(row + i));
                else return prob_entry(row[i]);
              },
                                                  a.vocab, nb, bs)) {
        if (t == 0) device_report(a.status, device_error::row, r, local_row);
        fail = true;
        break;
      }
      y = cdf_draw_block(bs, nb, a.vocab, rng, [row](std::int64_t i) { return static_cast<double>(row[i]); }, draw);
      if (t == 0) {
        if (y < 0) device_report(a.status, device_error::row, r, local_row);
        next_rep = std::numeric_limits<std::int32_t>::max();
      }
      __syncthreads();  // next_rep is reset before the class step
      if (y < 0) {
        fail = true;
        break;
      }
      // Children of the class (all have indices above rep) that carry y; marks of depth `level`
      // nodes equal level, the root's class is level 0.
      for (std::int64_t c0 = rep + 1; c0 < n; c0 += sample_and_match_chunk) {
        std::uint32_t hits = 0;
        for (int it = 0; it < 32; ++it) {
          const std::int64_t i = c0 + it * sample_and_match_threads + t;
          if (i < n && joins_class(tok, par, mark, i, y, level)) hits |= 1u << it;
        }
        __syncthreads();  // every mark of this chunk's parents is read before any is written
        for (int it = 0; it < 32; ++it)
          if ((hits >> it) & 1u) {
            const auto i = static_cast<std::int32_t>(c0 + it * sample_and_match_threads + t);
            mark[i] = level + 1;
            atomicMin(&next_rep, i);
          }
        __syncthreads();
      }
      const std::int32_t next = next_rep;
      if (next == std::numeric_limits<std::int32_t>::max()) break;  // y is the bonus token
      rep = next, ++level;
      __syncthreads();  // every thread has read next_rep before thread 0 resets it
    }
    if (fail || t != 0) continue;
    // The root path of rep, bottom up (the marks in a large request's accepted slots are not read
    // any more). rep's depth is level - 1 unless another request's range overlapped this one (a bad
    // node_indptr, reported by the other request's block) and wrote marks here: k >= 0 keeps every
    // write inside the request's slots even then.
    for (std::int32_t v = rep, k = level - 1; v >= 0 && k >= 0; v = par[v], --k) a.put_accepted(r, b, k, v, tok[v]);
    a.put_bonus(r, b, level, static_cast<std::int32_t>(y));
  }
}

__global__ void __launch_bounds__(sample_and_match_threads) sample_and_match_kernel(const sample_and_match_args args) {
  __shared__ cdf_walk_shared cdf;
  sample_and_match_walks<true>(args, cdf, [&args](std::int32_t, std::int64_t i, std::int32_t) {
    return args.tree.rows + i * args.tree.row_stride;
  });
}

static_assert(sample_and_match_threads == process_threads, "the logits form runs process_logits_batch's row functions");

//! The logits form: each visited row copied into the request's workspace row, processed there
//! (block_process_row: process_logits_batch's reports), turned into probabilities in place
//! (block_probs_row), then drawn from as above.
__global__ void __launch_bounds__(sample_and_match_threads, 1) sample_and_match_logits_kernel(
    const sample_and_match_logits_args args) {
  __shared__ logits_walk_shared sh;
  sample_and_match_walks<false>(args.walk, sh.cdf, [&](std::int32_t r, std::int64_t i, std::int32_t) {
    return block_logits_walk_row(args.logits, r, i, sh);
  });
}

//! The cuda backend (the seam in sample_and_match.hpp): the entry point has checked shapes, strides,
//! memory spaces and the vocabulary limit. Clears status and launches the kernel on policy.stream;
//! no synchronisation. A failed launch throws cuda_error.
template <>
struct sample_and_match_backend<cuda> {
  static void run(const cuda& policy, const sample_and_match_args& a) {
    clear_device_status(a.tree.status, policy.stream);
    launch_per_request<sample_and_match_threads>(sample_and_match_kernel, a.tree.requests, policy.stream,
                                                 "sample_and_match_kernel", a);
  }
  static void run(const cuda& policy, const sample_and_match_logits_args& a) {
    clear_device_status(a.walk.tree.status, policy.stream);
    launch_per_request<sample_and_match_threads>(sample_and_match_logits_kernel, a.walk.tree.requests, policy.stream,
                                                 "sample_and_match_logits_kernel", a);
  }
};

}  // namespace detail
}  // namespace specdec
