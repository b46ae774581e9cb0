#pragma once
//! \file lse_merge.cuh
//! The specdec::cuda backend of lse_merge (LongSpec §3.3 "Aggregation", Appendix A, Proposition
//! A.1): the merge kernel behind the two-way and n-way entry points of lse_merge.hpp, which hold
//! their documentation (natural-log LSE, -inf = no keys, out/lse_out may alias an input). Include
//! this header (compiled with nvcc) to call lse_merge with a specdec::cuda policy.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "specdec/attention/detail/cuda_attention.cuh"
#include "specdec/attention/detail/cuda_common.cuh"
#include "specdec/attention/detail/merge_state.hpp"
#include "specdec/attention/lse_merge.hpp"
#include "specdec/core/device_types.cuh"
#include "specdec/core/execution.hpp"
#include "specdec/core/tensor.hpp"

namespace specdec {
namespace detail {

//! One warp per (token, head) row. Every lane reads every part's LSE before lane 0 writes lse_out
//! (after a __syncwarp), and each output element is written by the lane that read it from every
//! part, so out/lse_out may alias part 0 or part 1. Any number of parts, no scratch.
template <class DT>
__global__ void __launch_bounds__(128) lse_merge_kernel(const lse_merge_params<DT> p) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const long long row = static_cast<long long>(blockIdx.x) * 4 + (threadIdx.x >> 5);
  if (row >= static_cast<long long>(p.tokens) * p.heads) return;
  const long long t = row / p.heads, h = row % p.heads;
  auto part_row = [&](int q) -> const DT* {
    if (p.o_b != nullptr && q == 1) return p.o_b + t * p.o_b_stride_token + h * p.o_b_stride_head;
    return p.o_parts + q * p.o_stride_part + t * p.o_stride_token + h * p.o_stride_head;
  };
  auto part_lse = [&](int q) -> float {
    if (p.lse_b != nullptr && q == 1) return p.lse_b[t * p.lse_b_stride_token + h * p.lse_b_stride_head];
    return p.lse_parts[q * p.lse_stride_part + t * p.lse_stride_token + h * p.lse_stride_head];
  };
  lse_merge_weights w;  // merge_state.hpp: the rules every merge shares
  for (int q = 0; q < p.num_parts; ++q) w.observe(part_lse(q));
  if (!w.empty()) {
    for (int q = 0; q < p.num_parts; ++q) w.add(part_lse(q));
    w.finish();
  }
  const float lse = w.lse();
  DT* const orow = p.o + t * p.out_stride_token + h * p.out_stride_head;
  for (int d = lane; d < p.head_dim; d += 32) {
    float acc = 0.0f;
    if (!w.empty())
      for (int q = 0; q < p.num_parts; ++q) {
        const float lq = part_lse(q);
        if (lq != -INFINITY) acc += w.weight(lq) * to_f<DT>(part_row(q)[d]);  // no keys: selected out
      }
    orow[d] = from_f<DT>(acc);
  }
  __syncwarp();
  if (lane == 0) p.lse[t * p.lse_out_stride_token + h * p.lse_out_stride_head] = lse;
}

template <class T>
void launch_lse_merge(const cuda& policy, const lse_merge_params<T>& hp) {
  using DT = device_type_t<T>;
  lse_merge_params<DT> p;
  p.o_parts = reinterpret_cast<const DT*>(hp.o_parts);
  p.o_stride_part = hp.o_stride_part;
  p.o_stride_token = hp.o_stride_token;
  p.o_stride_head = hp.o_stride_head;
  p.lse_parts = hp.lse_parts;
  p.lse_stride_part = hp.lse_stride_part;
  p.lse_stride_token = hp.lse_stride_token;
  p.lse_stride_head = hp.lse_stride_head;
  p.o = reinterpret_cast<DT*>(hp.o);
  p.out_stride_token = hp.out_stride_token;
  p.out_stride_head = hp.out_stride_head;
  p.lse = hp.lse;
  p.lse_out_stride_token = hp.lse_out_stride_token;
  p.lse_out_stride_head = hp.lse_out_stride_head;
  p.num_parts = hp.num_parts;
  p.tokens = hp.tokens;
  p.heads = hp.heads;
  p.head_dim = hp.head_dim;
  p.o_b = reinterpret_cast<const DT*>(hp.o_b);
  p.o_b_stride_token = hp.o_b_stride_token;
  p.o_b_stride_head = hp.o_b_stride_head;
  p.lse_b = hp.lse_b;
  p.lse_b_stride_token = hp.lse_b_stride_token;
  p.lse_b_stride_head = hp.lse_b_stride_head;
  const long long rows = static_cast<long long>(p.tokens) * p.heads;
  if (rows == 0) return;
  lse_merge_kernel<DT><<<static_cast<unsigned>((rows + 3) / 4), 128, 0, policy.stream>>>(p);
  cuda_check(cudaGetLastError(), "lse_merge_kernel launch");
}

template <>
struct merge_backend<cuda> {
  template <class T>
  static void run(const cuda& policy, const lse_merge_params<T>& p) {
    launch_lse_merge(policy, p);
  }
};

}  // namespace detail

}  // namespace specdec
