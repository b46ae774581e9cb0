#pragma once
//! \file greedy.cuh
//! CUDA backend of the array form of verify_greedy_batch (verify/greedy.hpp): greedy_batch_backend<cuda>.
//! Two kernels on policy.stream after a memset that clears `status`:
//!  1. argmax (a block per row, grid-stride over the N + R rows): each thread scans its strided
//!     share of the row (16-byte loads, four in flight, when the row is aligned) keeping the first
//!     maximum, a CUB
//!     block reduction combines the threads (larger value wins, the lower token id on a tie: the
//!     host's rule, greedy_token), and __syncthreads_or flags a row holding NaN or +inf. The row's
//!     argmax, or -1 for a row the host would reject if it read it (NaN, +inf, or nothing above
//!     -inf), goes to the row's slot of `emitted`, which serves as scratch until the walk writes it.
//!     This reads the logits once: the floor of greedy verification on a GPU.
//!  2. walk (a block per request, grid-stride over requests): checks the request's offsets, parents
//!     and tokens in parallel; copies parents, tokens and the request's row argmaxes to shared memory
//!     when they fit; then one thread runs the host's walk (detail::greedy_walk: node i reachable iff
//!     its parent is and tokens[i] equals the parent row's argmax; deepest reachable node, lowest
//!     index on ties) and writes accepted nodes, emitted tokens, num_accepted and bonus. A row the
//!     walk reads that the argmax pass flagged is reported as device_error::row with its local row,
//!     as the host would throw for it; rows the walk does not read are never an error.
//! The result equals the host's bit for bit: argmax over float is exact, and the walk is the same.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <limits>

#include "specdec/core/device_types.cuh"
#include "specdec/core/error.hpp"
#include "specdec/sampling/logits_processor.cuh"
#include "specdec/verify/greedy.hpp"

namespace specdec {
namespace detail {

//! A block per row must keep enough bytes in flight to stream its row near one SM's share of the
//! bandwidth when only a few rows (a small batch) occupy a few SMs: 1024 threads x 4 float4 loads
//! = 64 KiB per block (256 threads with one load each gave 12 GB/s per SM at 17 rows; RESULTS.md).
inline constexpr int greedy_argmax_threads = 1024;
inline constexpr int greedy_argmax_unroll = 4;
inline constexpr int greedy_walk_threads = 128;
//! Requests with at most this many nodes walk from shared memory (4 int32 arrays: 32 KiB).
inline constexpr int greedy_walk_smem_nodes = 2048;

struct greedy_argmax_pair {
  float v;
  std::int32_t i;
};
//! Larger value wins; on equal values the lower token id (greedy_token's rule).
struct greedy_argmax_op {
  __device__ greedy_argmax_pair operator()(const greedy_argmax_pair& a, const greedy_argmax_pair& b) const {
    return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
  }
};

__global__ void __launch_bounds__(greedy_argmax_threads)
    greedy_argmax_kernel(const float* logits, std::int64_t row_stride, std::int64_t rows, std::int32_t vocab,
                         std::int32_t* out) {
  using reduce = cub::BlockReduce<greedy_argmax_pair, greedy_argmax_threads>;
  __shared__ typename reduce::TempStorage temp;
  const int t = static_cast<int>(threadIdx.x);
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* x = logits + row * row_stride;
    greedy_argmax_pair best{-std::numeric_limits<float>::infinity(), std::numeric_limits<std::int32_t>::max()};
    bool bad = false;
    auto see = [&](float v, std::int32_t i) {  // indices rise within a thread: '>' keeps the first maximum
      bad |= (v != v) || v == std::numeric_limits<float>::infinity();
      if (v > best.v || (v == best.v && i < best.i)) best = {v, i};
    };
    std::int32_t vec_end = 0;
    if ((reinterpret_cast<std::uintptr_t>(x) & 15u) == 0) {
      vec_end = vocab & ~3;
      const float4* x4 = reinterpret_cast<const float4*>(x);
      const std::int32_t n4 = vec_end / 4;
      constexpr int T = greedy_argmax_threads, U = greedy_argmax_unroll;
      const auto see4 = [&](const float4& q, std::int32_t k) {
        see(q.x, 4 * k), see(q.y, 4 * k + 1), see(q.z, 4 * k + 2), see(q.w, 4 * k + 3);
      };
      std::int32_t k = t;
      for (; k + (U - 1) * T < n4; k += U * T) {  // U loads in flight before any is compared
        float4 q[U];
#pragma unroll
        for (int u = 0; u < U; ++u) q[u] = __ldg(x4 + k + u * T);
#pragma unroll
        for (int u = 0; u < U; ++u) see4(q[u], k + u * T);
      }
      for (; k < n4; k += T) see4(__ldg(x4 + k), k);
    }
    // 64-bit: k + threads passes INT32_MAX for a vocabulary within a block of it
    for (std::int64_t k = std::int64_t{vec_end} + t; k < vocab; k += greedy_argmax_threads)
      see(__ldg(x + k), static_cast<std::int32_t>(k));
    const bool row_bad = __syncthreads_or(bad) != 0;
    const greedy_argmax_pair r = reduce(temp).Reduce(best, greedy_argmax_op{});
    if (t == 0) out[row] = (row_bad || !(r.v > -std::numeric_limits<float>::infinity())) ? -1 : r.i;
    __syncthreads();  // temp is reused by the next row
  }
}

__global__ void __launch_bounds__(greedy_walk_threads) greedy_walk_kernel(const tree_verify_arrays a) {
  __shared__ std::int32_t par_s[greedy_walk_smem_nodes], tok_s[greedy_walk_smem_nodes],
      reach_s[greedy_walk_smem_nodes], arg_s[greedy_walk_smem_nodes + 1];
  const int t = static_cast<int>(threadIdx.x);
  device_check_indptr_ends(a.node_indptr, a.requests, a.nodes, a.status);
  for (std::int64_t r64 = blockIdx.x; r64 < a.requests; r64 += gridDim.x) {  // 64-bit: no wrap near INT32_MAX
    const auto r = static_cast<std::int32_t>(r64);
    std::int32_t b, e;
    if (!device_request_range(a.node_indptr, r, a.nodes, a.status, b, e)) continue;  // uniform
    const std::int32_t n = e - b;
    const bool in_smem = n <= greedy_walk_smem_nodes;
    std::int32_t* const argmax = a.emitted + b + r;  // the argmax pass's results for this request's rows
    __syncthreads();  // the previous request's walk is done with the shared arrays
    bool bad = false;
    for (std::int32_t i = t; i < n; i += greedy_walk_threads) {
      const std::int32_t p = a.parents[b + i], tok = a.tokens[b + i];
      if (p < -1 || p >= i) device_report(a.status, device_error::parent, r, i), bad = true;
      if (tok < 0 || tok >= a.vocab) device_report(a.status, device_error::token, r, i), bad = true;
      if (in_smem) par_s[i] = p, tok_s[i] = tok;
    }
    if (in_smem)
      for (std::int32_t s = t; s <= n; s += greedy_walk_threads) arg_s[s] = argmax[s];
    if (__syncthreads_or(bad) != 0 || t != 0) continue;
    const std::int32_t* par = in_smem ? par_s : a.parents + b;
    const std::int32_t* tok = in_smem ? tok_s : a.tokens + b;
    const std::int32_t* arg = in_smem ? arg_s : argmax;
    // rch[i]: depth of node i when reachable, else -1. A large request keeps it in its own accepted
    // slots, which the walk rewrites with the path afterwards.
    std::int32_t* const rch = in_smem ? reach_s : a.accepted + b;
    std::int32_t best = -1, best_depth = -1;
    bool fail = false;
    for (std::int32_t i = 0; i < n; ++i) {
      const std::int32_t p = par[i];
      rch[i] = -1;
      if (p >= 0 && rch[p] < 0) continue;
      const std::int32_t am = arg[p + 1];
      if (am < 0) {
        device_report(a.status, device_error::row, r, p + 1);
        fail = true;
        break;
      }
      if (tok[i] != am) continue;
      rch[i] = p < 0 ? 0 : rch[p] + 1;
      if (rch[i] > best_depth) best = i, best_depth = rch[i];
    }
    if (fail) continue;
    const std::int32_t bonus = arg[best + 1];
    if (bonus < 0) {
      device_report(a.status, device_error::row, r, best + 1);
      continue;
    }
    // The accepted path, bottom up: emitted slot k of this request is written after every argmax
    // slot the walk read (arg[] is shared memory or was read above), and only slots 0..best_depth+1.
    // k >= 0: best's depth is best_depth unless another request's range overlapped this one (a bad
    // node_indptr, reported by that request's block) and wrote its scratch here; every write stays
    // inside this request's slots even then.
    for (std::int32_t v = best, k = best_depth; v >= 0 && k >= 0; v = par[v], --k) a.put_accepted(r, b, k, v, tok[v]);
    a.put_bonus(r, b, best_depth + 1, bonus);
  }
}

//! Enqueues the walk kernel alone on `stream` over row argmaxes already in a.emitted (row s of the
//! batch at emitted[s]: a token, or -1 for a row the walk reports if it reads it), e.g. from
//! penalized_argmax_batch (the CUDA greedy verifier's penalized step). a.status is not cleared.
inline void launch_greedy_walk(cudaStream_t stream, const tree_verify_arrays& a) {
  launch_per_request<greedy_walk_threads>(greedy_walk_kernel, a.requests, stream, "greedy_walk_kernel", a);
}

//! The cuda backend (the seam in greedy.hpp): the entry point has checked shapes, strides and
//! memory spaces. Clears status, launches the argmax and walk kernels on policy.stream; no
//! synchronisation. A failed launch throws cuda_error.
template <>
struct greedy_batch_backend<cuda> {
  static void run(const cuda& policy, const tree_verify_arrays& a) {
    cudaStream_t stream = policy.stream;
    clear_device_status(a.status, stream);
    const std::int64_t rows = static_cast<std::int64_t>(a.nodes) + a.requests;
    if (rows > 0) {
      const int argmax_blocks = static_cast<int>(rows < 65535 ? rows : 65535);
      greedy_argmax_kernel<<<argmax_blocks, greedy_argmax_threads, 0, stream>>>(
          a.rows, a.row_stride, rows, static_cast<std::int32_t>(a.vocab), a.emitted);
      SPECDEC_CUDA_CHECK(cudaGetLastError());
    }
    launch_greedy_walk(stream, a);  // also for 0 requests: its block 0 checks node_indptr's ends, as the host does
  }
};

//! The cuda backend of verify_greedy_batch's penalized form (the seam in greedy.hpp): the entry
//! point has checked shapes, strides, memory spaces and V <= 2^20. Clears status, launches
//! penalized_argmax_kernel (every row's penalized argmax into emitted) and the walk on
//! policy.stream; no synchronisation. A failed launch throws cuda_error.
template <>
struct greedy_penalized_backend<cuda> {
  static void run(const cuda& policy, const tree_verify_arrays& a, const penalized_argmax_args& p) {
    penalized_argmax_backend<cuda>::run(policy, p);  // clears status (p.rows.status is a.status)
    launch_greedy_walk(policy.stream, a);  // also for 0 requests (node_indptr's ends checked)
  }
};

}  // namespace detail
}  // namespace specdec
