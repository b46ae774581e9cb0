#pragma once
//! \file cdf_device.cuh
//! The blocked inverse-CDF draw (sampling/sampler.hpp) in a CUDA thread block, with the host's
//! arithmetic (sampling/detail/cdf_search.hpp), so the same Philox words give the same token as on
//! the host. Used by the stochastic verifiers' kernels (verify/sample_and_match.cuh,
//! verify/speculative_sampling.cuh), one block per request.
//!  - cdf_block_sums: the block sums of a row's weights, each 1024-token block by a group of `lanes`
//!    consecutive threads of one warp, thread j adding tokens j, j + lanes, ... of the block (the
//!    host's lane j), the group's first thread adding the tail and the lanes' sums in lane order;
//!    every entry's admissibility is checked on the way;
//!  - cdf_draw: the row total and the search, by one thread; cdf_draw_block: the same result with the
//!    one-block scan done by a warp (the serial scan only where rounding could matter).
//! Bit-identity with the host needs IEEE denormals on the device, nvcc's default: code built with
//! -ftz=true or --use_fast_math flushes denormal probabilities (in the float -> double conversions and
//! the comparisons), so rows whose mass is denormal would sum and validate differently.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>

#include "specdec/core/device_types.cuh"
#include "specdec/core/philox.hpp"
#include "specdec/sampling/detail/cdf_search.hpp"

namespace specdec::detail {

//! What one token contributes to a block sum, and whether its inputs break the non-finite policy.
struct cdf_entry {
  double weight;
  bool bad;
};

//! Loads in flight per thread in cdf_block_sums' lane loop (a 1024-token block gives each of its 16
//! lanes 64 tokens: four batches).
inline constexpr int cdf_sum_batch = 16;

//! A weight (or entry) function in two parts: load(i) reads token i's inputs from memory, and
//! weigh(loaded, i) computes from them what operator()(i) returns. cdf_block_sums and cdf_draw_block
//! load a whole batch before they weigh any, so the loads are in flight together even when the
//! weighing has loops and branches (the multi-draft residual) that keep the compiler from hoisting the
//! next token's loads above them. Same values as operator(): only the schedule differs.
template <class W>
concept split_weight = requires(const W& w, std::int64_t i) { w.weigh(w.load(i), i); };

//! entry(i + u * stride) for u in [0, N) into x, the loads first when the entry is a split_weight.
template <int N, class Entry, class Out>
__device__ inline void load_batch(const Entry& entry, std::int64_t i, std::int64_t stride, Out (&x)[N]) {
  if constexpr (split_weight<Entry>) {
    decltype(entry.load(i)) v[N];
#pragma unroll
    for (int u = 0; u < N; ++u) v[u] = entry.load(i + u * stride);
#pragma unroll
    for (int u = 0; u < N; ++u) x[u] = entry.weigh(v[u], i + u * stride);
  } else {
#pragma unroll
    for (int u = 0; u < N; ++u) x[u] = entry(i + u * stride);
  }
}

//! Block sums of the weights entry(i).weight over [0, vocab) into bs[0, nb) by the whole thread block
//! (Threads threads, a multiple of 32), in the host's order. Returns, to every thread, whether some
//! entry was bad. Contains __syncthreads: call from every thread of the block.
template <int Threads, class Entry>
__device__ bool cdf_block_sums(const Entry& entry, std::int64_t vocab, std::int64_t nb, double* bs) {
  static_assert(Threads % 32 == 0 && 32 % lanes == 0, "a group of `lanes` threads must sit inside one warp");
  const int t = static_cast<int>(threadIdx.x);
  const int j = t % lanes;
  const int group_first = (t % 32) - j;  // warp lane of this group's lane 0
  constexpr auto block = static_cast<std::int64_t>(cdf_block);
  bool bad = false;
  // Uniform trip count across the block: every thread takes part in every shuffle.
  for (std::int64_t k0 = 0; k0 < nb * lanes; k0 += Threads) {
    const std::int64_t blk = (k0 + t) / lanes;
    const bool live = blk < nb;
    const std::int64_t lo = blk * block;
    const std::int64_t hi = !live ? lo : vocab - lo < block ? vocab : lo + block;
    double part = 0.0;
    if (live) {
      // The lane's tokens in the host's order, loaded cdf_sum_batch at a time before they are added:
      // the adds stay in order (the same double), and a thread keeps cdf_sum_batch loads in flight
      // instead of one (a block per row reads the row at about 15 GB/s with one).
      const std::int64_t e = lane_body_end(lo, hi);
      std::int64_t i = lo + j;
      for (; i + (cdf_sum_batch - 1) * lanes < e; i += cdf_sum_batch * lanes) {
        cdf_entry x[cdf_sum_batch];
        load_batch(entry, i, lanes, x);
#pragma unroll
        for (int u = 0; u < cdf_sum_batch; ++u) bad |= x[u].bad, part += x[u].weight;
      }
      for (; i < e; i += lanes) {
        const cdf_entry x = entry(i);
        bad |= x.bad;
        part += x.weight;
      }
    }
    double partial[lanes];
#pragma unroll
    for (int q = 0; q < lanes; ++q) partial[q] = __shfl_sync(0xffffffffu, part, group_first + q);
    if (live && j == 0) {
      for (std::int64_t i = lane_body_end(lo, hi); i < hi; ++i) bad |= entry(i).bad;
      bs[blk] = lane_combine([&](std::int64_t i) { return entry(i).weight; }, lo, hi, partial);
    }
  }
  return __syncthreads_or(bad) != 0;
}

//! One thread's draw from block sums bs (as sampler.hpp's cdf_blocks::draw): -1 without drawing when
//! the total is not positive and finite; otherwise two words of rng scale the total and cdf_search
//! returns the token (-1 if no weight is positive after all).
template <class Weight>
__device__ std::int64_t cdf_draw(const double* bs, std::int64_t nb, std::int64_t vocab, philox_stream& rng,
                                 const Weight& weight) {
  const double total = cdf_total(bs, nb);
  if (!(total > 0.0 && total <= std::numeric_limits<double>::max())) return -1;
  return cdf_search(bs, nb, vocab, rng.uniform_double() * total, weight);
}

//! Shared state of cdf_draw_block (one per thread block).
//! `result` is written by thread 0 alone, before the first barrier and after the second; warp 0's
//! scan reports in `scan`, a word nobody else touches in between. (Keeping the two apart is what
//! makes the scan race-free: the compiler may load `result` in every thread of the block ahead of
//! the `t < 32` test, so no warp may write `result` while the others could be reading it.)
struct cdf_draw_shared {
  double u, c_start;
  std::int64_t block, result, scan;
};

//! cdf_draw by the whole thread block, with the same result: thread 0 draws u (two words of its rng),
//! walks the block sums to the chosen block as cdf_search does (so c_start, the running sum before
//! that block, is the serial scan's bit for bit), then warp 0 scans the block in parallel: lane l sums
//! its 32 consecutive tokens, a warp scan gives each lane its starting prefix, and the lane holding
//! the first token whose prefix passes u reports it. That token is returned when cdf_prefix_safe
//! proves the serial scan returns it too (u farther than cdf_search_margin from both prefixes: all
//! but about one draw in 10^12); otherwise, and when rounding puts u past every prefix, thread 0 runs
//! the serial cdf_search. Returns the token to every thread, -1 when the total is not positive and
//! finite (no word drawn) or no weight is positive. Contains __syncthreads: call from every thread.
template <class Weight>
__device__ std::int64_t cdf_draw_block(const double* bs, std::int64_t nb, std::int64_t vocab, philox_stream& rng,
                                       const Weight& weight, cdf_draw_shared& sh) {
  constexpr std::int64_t pending = -2, serial = -3;
  const int t = static_cast<int>(threadIdx.x);
  if (t == 0) {
    sh.result = pending;
    const double total = cdf_total(bs, nb);
    if (!(total > 0.0 && total <= std::numeric_limits<double>::max())) {
      sh.result = -1;
    } else {
      const double u = rng.uniform_double() * total;
      double c = 0.0;
      std::int64_t chosen = -1;
      for (std::int64_t b = 0; b < nb; ++b) {  // cdf_search's block walk
        if (bs[b] > 0.0 && c + bs[b] > u) {
          chosen = b;
          break;
        }
        c += bs[b];
      }
      sh.u = u, sh.c_start = c, sh.block = chosen;
      if (chosen < 0) sh.result = serial;  // rounding put u past the last block: the serial rule
    }
  }
  __syncthreads();
  if (t < 32 && sh.result == pending) {
    constexpr auto block = static_cast<std::int64_t>(cdf_block);
    const std::int64_t lo = sh.block * block, hi = vocab - lo < block ? vocab : lo + block;
    const std::int64_t mine = lo + 32 * static_cast<std::int64_t>(t), end = mine + 32 < hi ? mine + 32 : hi;
    // The lane's 32 weights, loaded together (independent loads in flight) and kept for both passes.
    double w[32];
    if (end - mine == 32) {
      load_batch(weight, mine, 1, w);
    } else {
#pragma unroll
      for (int k = 0; k < 32; ++k) w[k] = mine + k < end ? weight(mine + k) : 0.0;
    }
    double s = 0.0;
#pragma unroll
    for (int k = 0; k < 32; ++k)
      if (mine + k < end) s += w[k];
    double incl = s;  // inclusive warp scan of the lanes' sums
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const double o = __shfl_up_sync(0xffffffffu, incl, d);
      if (t >= d) incl += o;
    }
    const double u = sh.u;
    double at = sh.c_start + (incl - s), before = at;
    std::int64_t found = -1;
#pragma unroll
    for (int k = 0; k < 32; ++k) {
      if (found < 0 && mine + k < end && w[k] > 0.0) {
        before = at;
        at += w[k];
        if (u < at) found = mine + k;
      }
    }
    const unsigned hits = __ballot_sync(0xffffffffu, found >= 0);
    if (hits == 0) {
      if (t == 0) sh.scan = serial;
    } else if (t == __ffs(hits) - 1) {
      const double margin = cdf_search_margin(sh.c_start + bs[sh.block]);
      sh.scan = cdf_prefix_safe(u, before, at, margin) ? found : serial;
    }
  }
  __syncthreads();
  if (t == 0) {
    if (sh.result == pending) sh.result = sh.scan;
    if (sh.result == serial) sh.result = cdf_search(bs, nb, vocab, sh.u, weight);
  }
  __syncthreads();
  return sh.result;
}

//! cdf_entry of a probability row: the value as the weight; bad unless finite and >= 0.
__device__ inline cdf_entry prob_entry(float v) {
  return {static_cast<double>(v), !(v >= 0.0f && v <= std::numeric_limits<float>::max())};
}

//! Whether some entry of row[0, vocab) is not an admissible probability, to every thread of the block
//! (a row the stochastic verifiers decide on is checked in full first). Contains __syncthreads_or.
__device__ inline bool block_row_inadmissible(const float* row, std::int64_t vocab) {
  bool bad = false;
  for_each_strided(row, vocab, threadIdx.x, blockDim.x, [&](float v, std::int64_t) { bad |= prob_entry(v).bad; });
  return __syncthreads_or(bad) != 0;
}

//! cdf_entry of the speculative-sampling residual max(0, p - q) (stochastic.hpp's residual_block_sum):
//! bad unless both entries are finite and >= 0.
__device__ inline cdf_entry residual_entry(float p, float q) {
  const double d = static_cast<double>(p) - static_cast<double>(q);
  return {d > 0.0 ? d : 0.0, prob_entry(p).bad || prob_entry(q).bad};
}

}  // namespace specdec::detail
