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
//!  - cdf_draw: the row total and the search, by one thread.
//! Bit-identity with the host needs IEEE denormals on the device, nvcc's default: code built with
//! -ftz=true or --use_fast_math flushes denormal probabilities (in the float -> double conversions and
//! the comparisons), so rows whose mass is denormal would sum and validate differently.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>

#include "specdec/core/philox.hpp"
#include "specdec/sampling/detail/cdf_search.hpp"

namespace specdec::detail {

//! What one token contributes to a block sum, and whether its inputs break the non-finite policy.
struct cdf_entry {
  double weight;
  bool bad;
};

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
      for (std::int64_t i = lo + j, e = lane_body_end(lo, hi); i < e; i += lanes) {
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

//! cdf_entry of a probability row: the value as the weight; bad unless finite and >= 0.
__device__ inline cdf_entry prob_entry(float v) {
  return {static_cast<double>(v), !(v >= 0.0f && v <= std::numeric_limits<float>::max())};
}

//! cdf_entry of the speculative-sampling residual max(0, p - q) (stochastic.hpp's residual_block_sum):
//! bad unless both entries are finite and >= 0.
__device__ inline cdf_entry residual_entry(float p, float q) {
  const double d = static_cast<double>(p) - static_cast<double>(q);
  return {d > 0.0 ? d : 0.0, prob_entry(p).bad || prob_entry(q).bad};
}

}  // namespace specdec::detail
