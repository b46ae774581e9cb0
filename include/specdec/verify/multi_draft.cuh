#pragma once
//! \file multi_draft.cuh
//! CUDA backend of the array form of verify_multi_draft_batch (verify/multi_draft.hpp):
//! multi_draft_backend<cuda>. After the status reset, one kernel on policy.stream, a block per request
//! (grid-stride over requests), which runs the host's walk (detail::multi_draft_walk) with the same
//! Philox words:
//!  1. checks every node in parallel: parent in [-1, i) (device_error::parent), token in [0, V)
//!     (token), q > 0 and finite at the child's token in its parent's draft row (draft_prob), p
//!     admissible there (row), and, without replacement, no earlier sibling with the same token
//!     (sibling);
//!  2. from the root: a node's target and draft rows in full when it has children (row / draft_row),
//!     then its children in index order: thread 0 draws u (two words) and accepts child x_j when
//!     u q_j(x_j) < p'_j(x_j), as the host does;
//!  3. a rejection updates the residual p'. The host keeps it as a [V] vector of doubles; here it is
//!     the list of the node's updates since p (residual_ops: w <- max(0, base - c q) from p or from w,
//!     or the reset to q / remain with the drawn tokens zeroed), kept in shared memory and applied per
//!     token wherever a weight is read (residual_ops::weight, as a split_weight: the p and q entries
//!     of a batch of tokens are loaded before any is weighed), so the kernel needs no global scratch. Each
//!     update is the host's expression in the host's order, so the weights are the same doubles, and
//!     their block sums (sampling/detail/cdf_device.cuh, the host's order) and total (cdf_total) too;
//!  4. the bonus after the last rejection at a node: from the residual's block sums, or from p when no
//!     residual is in force (no child, or every rejection left a zero residual: see multi_draft.hpp).
//! Rows of nodes the walk does not visit are never read. Outputs as the greedy backend writes them.
//!
//! The logits form (multi_draft_logits_kernel) walks the same way without step 1's p checks; the
//! target row of each node it reaches is copied from the logits into the request's workspace row,
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
#include "specdec/verify/multi_draft.hpp"

namespace specdec {
namespace detail {

inline constexpr int multi_draft_threads = 512;

//! The walk's state at the node being decided, in shared memory: the residual (multi_draft.hpp's
//! residual_ops) and two words the block exchanges.
struct multi_draft_shared {
  residual_ops ops;
  int child;   //!< next_child's reduction
  int accept;  //!< thread 0's decision, to the block
};

//! The residual's weights (residual_ops::weight) as a split_weight (sampling/detail/cdf_device.cuh):
//! a batch of tokens' p and q entries is loaded before any is weighed. Entry = true: the cdf_entry
//! form cdf_block_sums takes (the rows were checked in full before, so never bad). ReadOnlyP: p read
//! through the read-only cache (the caller's probabilities; not a row the kernel writes).
template <bool Entry, bool ReadOnlyP = true>
struct residual_weight {
  const residual_ops* ops;
  const float* p;
  const float* q;
  struct pq {
    float p, q;
  };
  __device__ pq load(std::int64_t i) const {
    if constexpr (ReadOnlyP) return {__ldg(p + i), __ldg(q + i)};
    else return {p[i], __ldg(q + i)};  // p in a workspace this kernel writes: plain loads
  }
  __device__ auto weigh(pq v, std::int64_t i) const {
    const double w = ops->weight_of(v.p, v.q, i);
    if constexpr (Entry)
      return cdf_entry{w, false};
    else
      return w;
  }
  __device__ auto operator()(std::int64_t i) const { return weigh(load(i), i); }
};

//! The lowest child of `node` (-1: the root) with index above `after`, or -1, to every thread.
//! Contains __syncthreads: call from every thread of the block.
__device__ inline std::int32_t next_child(const std::int32_t* par, std::int32_t n, std::int32_t node,
                                          std::int32_t after, multi_draft_shared& s) {
  if (threadIdx.x == 0) s.child = std::numeric_limits<std::int32_t>::max();
  __syncthreads();
  for (std::int64_t i = static_cast<std::int64_t>(after) + 1 + threadIdx.x; i < n; i += blockDim.x)
    if (par[i] == node) {
      atomicMin(&s.child, static_cast<std::int32_t>(i));  // a thread's first match is its lowest
      break;
    }
  __syncthreads();
  const std::int32_t c = s.child;
  __syncthreads();  // every thread has read s.child before thread 0 resets it
  return c == std::numeric_limits<std::int32_t>::max() ? -1 : c;
}

//! The walks of the file comment, a request per block (grid-stride). row_of(r, i, k) gives the target
//! distribution of request r's local row k (i: its row in the tensor), or nullptr after reporting why
//! it has none; every thread calls it, and its result is uniform. FromLogits: the rows are processed
//! from logits into a workspace this kernel writes (plain loads; p at a child's token is not known
//! before its row is processed, and a processed row is a distribution: no p checks); otherwise they
//! are the caller's probabilities (read through the read-only cache, checked).
template <bool FromLogits, class RowOf>
__device__ void multi_draft_walks(const multi_draft_args& args, cdf_walk_shared& cdf, RowOf&& row_of) {
  double* const bs = cdf.bs;
  cdf_draw_shared& draw = cdf.draw;
  __shared__ multi_draft_shared s;
  const tree_verify_arrays& a = args.tree;
  const int t = static_cast<int>(threadIdx.x);
  const bool wor = args.mode == draft_sampling::without_replacement;
  device_check_indptr_ends(a.node_indptr, a.requests, a.nodes, a.status);
  const std::int64_t nb = (a.vocab + static_cast<std::int64_t>(cdf_block) - 1) / static_cast<std::int64_t>(cdf_block);
  for (std::int64_t r64 = blockIdx.x; r64 < a.requests; r64 += gridDim.x) {  // 64-bit: no wrap near INT32_MAX
    const auto r = static_cast<std::int32_t>(r64);
    std::int32_t b, e;
    if (!device_request_range(a.node_indptr, r, a.nodes, a.status, b, e)) continue;  // uniform
    const std::int32_t n = e - b;
    const std::int32_t* par = a.parents + b;
    const std::int32_t* tok = a.tokens + b;
    const std::int64_t first_row = static_cast<std::int64_t>(b) + r;
    const auto q_row = [&](std::int32_t i) { return args.draft_rows + (first_row + i) * args.draft_stride; };
    bool bad = false;
    for (std::int64_t i64 = t; i64 < n; i64 += multi_draft_threads) {
      const auto i = static_cast<std::int32_t>(i64);
      const std::int32_t pi = par[i], x = tok[i];
      if (pi < -1 || pi >= i) {
        device_report(a.status, device_error::parent, r, i), bad = true;
        continue;
      }
      if (x < 0 || x >= a.vocab) {
        device_report(a.status, device_error::token, r, i), bad = true;
        continue;
      }
      const float qx = q_row(pi + 1)[x];
      if (prob_entry(qx).bad || !(qx > 0.0f)) device_report(a.status, device_error::draft_prob, r, i), bad = true;
      if constexpr (!FromLogits)
        if (prob_entry(a.rows[(first_row + pi + 1) * a.row_stride + x]).bad)
          device_report(a.status, device_error::row, r, pi + 1), bad = true;
      if (wor)
        for (std::int32_t j = pi + 1; j < i; ++j)
          if (par[j] == pi && tok[j] == x) {
            device_report(a.status, device_error::sibling, r, i), bad = true;
            break;
          }
    }
    if (__syncthreads_or(bad) != 0) continue;
    philox_stream rng(args.seeds[r], args.streams[r]);  // drawn from by thread 0 only
    std::int32_t cur = -1, depth = 0;
    for (;;) {
      const float* p = row_of(r, first_row + cur + 1, cur + 1);
      if (p == nullptr) break;
      const float* q = q_row(cur + 1);
      std::int32_t c = next_child(par, n, cur, cur, s);
      if (c >= 0) {  // the rows this node's decisions use, in full
        const bool bad_p = !FromLogits && block_row_inadmissible(p, a.vocab);
        const bool bad_q = block_row_inadmissible(q, a.vocab);
        if (bad_p || bad_q) {
          if (t == 0) device_report(a.status, bad_p ? device_error::row : device_error::draft_row, r, cur + 1);
          break;
        }
      }
      if (t == 0) s.ops.start_node();
      // The walk's scalars, the same in every thread (computed from the same shared values).
      bool residual = false;    // false: p' = p; true: p' = the ops' weights / total
      double total = 1.0;
      double drawn_mass = 0.0;  // without replacement: q mass of the rejected siblings' tokens
      std::int32_t next = -1;
      bool fail = false;
      __syncthreads();
      while (c >= 0) {
        const std::int32_t x = tok[c];
        const double qx = static_cast<double>(q[x]);
        const double remain = wor ? (1.0 - drawn_mass < qx ? qx : 1.0 - drawn_mass) : 1.0;
        if (t == 0) {
          const double qj = qx / remain;
          const double pj = residual ? s.ops.weight(p, q, x) / total : static_cast<double>(p[x]);
          s.accept = rng.uniform_double() * qj < pj;
        }
        __syncthreads();
        if (s.accept != 0) {
          next = c;
          break;
        }
        if (s.ops.full()) {
          if (t == 0) device_report(a.status, device_error::fanout, r, cur);
          fail = true;
          break;
        }
        __syncthreads();  // every thread has read s before thread 0 changes it
        if (t == 0) s.ops.push_update(residual, total / remain);
        __syncthreads();
        const residual_weight<true, !FromLogits> weight{&s.ops, p, q};
        (void)cdf_block_sums<multi_draft_threads>(weight, a.vocab, nb, bs);  // both rows checked above
        const double tt = cdf_total(bs, nb);
        if (tt > 0.0) {
          residual = true;
          total = tt;
        } else if (residual) {
          // p'_j == q_j: keep p'_j, which is q_j = q / remain with the drawn tokens at 0
          __syncthreads();  // every thread has read bs and s
          if (t == 0) s.ops.reset_to_q(remain);
          __syncthreads();
          (void)cdf_block_sums<multi_draft_threads>(weight, a.vocab, nb, bs);
          total = cdf_total(bs, nb);
        }  // else p' = p is kept as it is (the ops are void: the next update starts from p)
        if (wor) drawn_mass += qx;
        __syncthreads();  // every thread has read bs and s
        if (t == 0 && wor) s.ops.add_drawn(x);
        c = next_child(par, n, cur, c, s);  // its first barrier publishes the drawn token
      }
      if (fail) break;
      if (next < 0) {
        std::int64_t y;
        if (residual) {
          y = cdf_draw_block(bs, nb, a.vocab, rng, residual_weight<false, !FromLogits>{&s.ops, p, q}, draw);
        } else {
          if (cdf_block_sums<multi_draft_threads>(
                  [p](std::int64_t i) {
                    if constexpr (FromLogits) return prob_entry(p[i]);
                    else return prob_entry(__ldg(p + i));
                  },
                  a.vocab, nb, bs)) {
            if (t == 0) device_report(a.status, device_error::row, r, cur + 1);
            break;
          }
          y = cdf_draw_block(bs, nb, a.vocab, rng, [p](std::int64_t i) { return static_cast<double>(p[i]); }, draw);
        }
        if (y < 0) {
          if (t == 0) device_report(a.status, device_error::row, r, cur + 1);
          break;
        }
        if (t == 0) a.put_bonus(r, b, depth, static_cast<std::int32_t>(y));
        break;
      }
      if (t == 0) a.put_accepted(r, b, depth, next, tok[next]);
      ++depth;
      cur = next;
      __syncthreads();  // every thread has read s.accept and s before the next node resets them
    }
  }
}

__global__ void __launch_bounds__(multi_draft_threads) multi_draft_kernel(const multi_draft_args args) {
  __shared__ cdf_walk_shared cdf;
  multi_draft_walks<false>(args, cdf, [&args](std::int32_t, std::int64_t i, std::int32_t) {
    return args.tree.rows + i * args.tree.row_stride;
  });
}

static_assert(multi_draft_threads == process_threads, "the logits form runs process_logits_batch's row functions");

//! The logits form: each target row the walk reaches made in the request's workspace row
//! (block_logits_walk_row), then used for the node's decisions and the bonus as above.
__global__ void __launch_bounds__(multi_draft_threads, 1) multi_draft_logits_kernel(const multi_draft_logits_args args) {
  __shared__ logits_walk_shared sh;
  multi_draft_walks<true>(args.walk, sh.cdf, [&](std::int32_t r, std::int64_t i, std::int32_t) {
    return block_logits_walk_row(args.logits, r, i, sh);
  });
}

//! The cuda backend (the seam in multi_draft.hpp): the entry point has checked shapes, strides,
//! memory spaces, the mode and the vocabulary limit. Clears status and launches the kernel on
//! policy.stream; no synchronisation. A failed launch throws cuda_error.
template <>
struct multi_draft_backend<cuda> {
  static void run(const cuda& policy, const multi_draft_args& a) {
    clear_device_status(a.tree.status, policy.stream);
    launch_per_request<multi_draft_threads>(multi_draft_kernel, a.tree.requests, policy.stream, "multi_draft_kernel", a);
  }
  static void run(const cuda& policy, const multi_draft_logits_args& a) {
    clear_device_status(a.walk.tree.status, policy.stream);
    launch_per_request<multi_draft_threads>(multi_draft_logits_kernel, a.walk.tree.requests, policy.stream,
                                            "multi_draft_logits_kernel", a);
  }
};

}  // namespace detail
}  // namespace specdec
