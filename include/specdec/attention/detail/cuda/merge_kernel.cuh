#pragma once
//! \file merge_kernel.cuh
//! The CUDA merge of split partials (LongSpec Appendix A, Proposition A.1, n-way), the one kernel
//! behind both the attention backend's merge pass (fp32 partials in the workspace -> storage-type
//! out) and the public lse_merge (storage-type parts -> out). It reads the parts through
//! merge_parts and applies lse_merge_weights (merge_state.hpp), the rules every merge shares: -inf
//! parts get weight 0 by selection, all -inf gives out = 0 and lse = -inf, NaN propagates.

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "specdec/attention/detail/cuda_common.cuh"
#include "specdec/attention/detail/merge_state.hpp"
#include "specdec/attention/lse_merge.hpp"
#include "specdec/core/error.hpp"

namespace specdec::detail {

//! Loads lane's E consecutive values of a part row as fp32: float2 loads when Vec2 (fp32 parts
//! whose rows and strides keep 8-byte alignment, e.g. the attention workspace), else one load per
//! value.
template <class InT, int E, bool Vec2>
__device__ __forceinline__ void load_part_values(const InT* src, float (&v)[E]) {
  if constexpr (Vec2) {
#pragma unroll
    for (int e = 0; e < E / 2; ++e) {
      const float2 x = reinterpret_cast<const float2*>(src)[e];
      v[2 * e] = x.x;
      v[2 * e + 1] = x.y;
    }
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) v[e] = to_f<InT>(src[e]);
  }
}

//! One warp per (token, head) row, E = head_dim / 32 values per lane. The lanes read the parts'
//! LSEs side by side (32 at a time; the first 64 stay in registers, so the three passes over them
//! read memory once) and reduce them with shuffles (NaN-propagating max), so the weights cost a few
//! dependent loads however many parts there are; the weighted sum of the part rows then walks the
//! parts with each weight broadcast from the lane that computed it, eight parts' loads in flight at
//! a time, the row addressed once (merge_parts::at) and the parts with keys known from one ballot
//! per 32 parts. (A serial walk cost 10-17 us at 34 parts on an H100, a sixth to a quarter of a
//! 32K-token decode step; ncu, 2026-11-24. Per-part address arithmetic, three LSE reads and a
//! second shuffle per part cost 1.7 us at 512 rows x 34 parts; ncu, 2026-11-26.)
//! Aliasing: each lane writes only the values it has read from every part, and lane 0 writes the
//! LSE after a __syncwarp that follows every lane's last LSE read, so out / lse_out may alias part 0
//! or part 1 (the public two-way merge allows it). Any number of parts, no scratch.
template <class InT, class OutT, int E, bool Vec2>
__global__ void __launch_bounds__(128) lse_merge_kernel(const lse_merge_params<InT, OutT> p) {
  constexpr unsigned full = 0xffffffffu;
  constexpr int kCached = 2;  // groups of 32 parts whose LSEs stay in registers
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const long long row = static_cast<long long>(blockIdx.x) * 4 + (threadIdx.x >> 5);
  const long long nrows = static_cast<long long>(p.tokens) * p.heads;
  if (row >= nrows) return;  // warp-uniform
  const long long t = row / p.heads, h = row % p.heads;
  const int parts = p.in.count;
  const auto rc = p.in.at(t, h);
  const auto lse_at = [&](long long q) { return q < parts ? rc.lse(static_cast<int>(q)) : -INFINITY; };
  float cached[kCached];
  lse_merge_weights w;
#pragma unroll
  for (int c = 0; c < kCached; ++c) w.observe(cached[c] = lse_at(c * 32 + lane));
  // Part counters are 64-bit: a stride of 32 from q < parts overflowed int for counts near INT32_MAX
  // (a stride-0 part dimension allows any count up to it).
  for (long long q = kCached * 32 + lane; q < parts; q += 32) w.observe(rc.lse(static_cast<int>(q)));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) w.max = nan_max(w.max, __shfl_xor_sync(full, w.max, o));
  float acc[E];
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = 0.0f;
  // Adds parts q0 .. q0 + 31 (those below `parts`), lane l holding part q0 + l's LSE.
  const auto add_group = [&](int q0, float lse_q) {
    const float mine = w.weight(lse_q);
    const unsigned keys = __ballot_sync(full, lse_q != -INFINITY);  // a part without keys is selected out
    const int count = min(32, parts - q0);
    // Eight parts' rows are loaded before any is used, so eight round trips overlap. Every part row
    // of a real (token, head) exists (an empty part holds O = 0, LSE = -inf), so the loads are in
    // bounds; a zero weight of a part with keys still multiplies (0 x NaN must stay NaN).
    for (int j0 = 0; j0 < count; j0 += 8) {
      float v[8][E];
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (j0 + j < count) load_part_values<InT, E, Vec2>(rc.row(q0 + j0 + j) + lane * E, v[j]);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float wj = __shfl_sync(full, mine, j0 + j);
        if (j0 + j < count && ((keys >> (j0 + j)) & 1u) != 0u) {  // warp-uniform
#pragma unroll
          for (int e = 0; e < E; ++e) acc[e] += wj * v[j][e];
        }
      }
    }
  };
  if (!w.empty()) {  // warp-uniform after the reduction
#pragma unroll
    for (int c = 0; c < kCached; ++c) w.add(cached[c]);
    for (long long q = kCached * 32 + lane; q < parts; q += 32) w.add(rc.lse(static_cast<int>(q)));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) w.sum += __shfl_xor_sync(full, w.sum, o);
    w.finish();
#pragma unroll
    for (int c = 0; c < kCached; ++c)
      if (c * 32 < parts) add_group(c * 32, cached[c]);
    for (long long q0 = kCached * 32; q0 < parts; q0 += 32)
      add_group(static_cast<int>(q0), lse_at(q0 + lane));
  }
  const float lse = w.lse();
  OutT* const out = p.out.row(t, h) + lane * E;
#pragma unroll
  for (int e = 0; e < E; ++e) out[e] = from_f<OutT>(acc[e]);
  __syncwarp();
  if (lane == 0) *p.out.lse_at(t, h) = lse;
}

//! Whether every part row of p starts 8-byte aligned (fp32 parts only), so the kernel may load
//! them as float2.
template <class InT, class OutT>
[[nodiscard]] bool merge_parts_vec2(const lse_merge_params<InT, OutT>& p) noexcept {
  if constexpr (!std::is_same_v<std::remove_cv_t<InT>, float>) {
    return false;
  } else {
    const auto even = [](std::int64_t s) { return s % 2 == 0; };
    const auto aligned = [](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr) % 8 == 0; };
    return aligned(p.in.o) && even(p.in.o_stride_part) && even(p.in.o_stride_token) && even(p.in.o_stride_head) &&
           (p.in.o_b == nullptr || (aligned(p.in.o_b) && even(p.in.o_b_stride_token) && even(p.in.o_b_stride_head)));
  }
}

//! Enqueues lse_merge_kernel for validated device params (head_dim 64, 128 or 256) on `stream`.
template <class InT, class OutT>
void launch_lse_merge(const lse_merge_params<InT, OutT>& p, cudaStream_t stream) {
  const long long rows = static_cast<long long>(p.tokens) * p.heads;
  if (rows == 0) return;
  const unsigned blocks = static_cast<unsigned>((rows + 3) / 4);
  const bool vec2 = merge_parts_vec2(p);
  auto go = [&]<int E>() {
    if constexpr (std::is_same_v<std::remove_cv_t<InT>, float>) {
      if (vec2) {
        lse_merge_kernel<InT, OutT, E, true><<<blocks, 128, 0, stream>>>(p);
        return;
      }
    }
    lse_merge_kernel<InT, OutT, E, false><<<blocks, 128, 0, stream>>>(p);
  };
  switch (p.head_dim) {
    case 64: go.template operator()<2>(); break;
    case 128: go.template operator()<4>(); break;
    case 256: go.template operator()<8>(); break;
    default: throw_invalid_argument("specdec::detail::launch_lse_merge", "head_dim", "64, 128 or 256", p.head_dim);
  }
  cuda_check(cudaGetLastError(), "lse_merge_kernel launch");
}

}  // namespace specdec::detail
