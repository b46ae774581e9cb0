#pragma once
//! \file lse_merge.cuh
//! CUDA backend of lse_merge (LongSpec §3.3 "Aggregation", Appendix A, Proposition A.1): the
//! specdec::cuda overloads of the two-way and n-way merges, same arguments and semantics as
//! lse_merge.hpp (natural-log LSE, -inf = no keys, out/lse_out may alias an input).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "specdec/attention/detail/cuda_attention.cuh"
#include "specdec/attention/detail/cuda_common.cuh"
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
  float mx = -INFINITY;
  for (int q = 0; q < p.num_parts; ++q) mx = fmaxf(mx, part_lse(q));
  float sum = 0.0f;
  if (mx != -INFINITY)
    for (int q = 0; q < p.num_parts; ++q) sum += expf(part_lse(q) - mx);
  const float inv = mx != -INFINITY ? 1.0f / sum : 0.0f;
  const float lse = mx != -INFINITY ? mx + logf(sum) : -INFINITY;
  DT* const orow = p.o + t * p.out_stride_token + h * p.out_stride_head;
  for (int d = lane; d < p.head_dim; d += 32) {
    float acc = 0.0f;
    if (mx != -INFINITY)
      for (int q = 0; q < p.num_parts; ++q) {
        const float w = expf(part_lse(q) - mx) * inv;
        if (w != 0.0f) acc += w * to_f<DT>(part_row(q)[d]);  // weight 0: a NaN in that part must not leak
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

}  // namespace detail

//! n-way merge on a CUDA device (enqueued on policy.stream, no synchronisation): o_parts [S, tokens,
//! heads, D] with lse_parts [S, tokens, heads] -> out [tokens, heads, D], lse_out [tokens, heads],
//! by Proposition A.1 of LongSpec Appendix A. Same preconditions as the host overload except: all
//! tensors device-accessible (device or managed), storage type half or bfloat16 (float too: the
//! merge needs no tensor cores), tokens * heads < 2^31. out/lse_out may alias part 0.
//! O(S * tokens * heads * D) work, one warp per (token, head).
template <tensor_like OP, tensor_like LP, tensor_like O, tensor_like L>
void lse_merge(const cuda& policy, const OP& o_parts, const LP& lse_parts, const O& out, const L& lse_out) {
  constexpr std::string_view fn = "specdec::lse_merge";
  detail::validate_merge_types<OP, LP, O, L>(fn, "o_parts", "lse_parts");
  using T = std::remove_cv_t<typename O::element_type>;
  if constexpr (detail::attention_storage_v<T> && std::is_same_v<std::remove_cv_t<typename OP::element_type>, T>) {
    detail::require_rank<OP>(fn, "o_parts", 4);
    detail::require_rank<LP>(fn, "lse_parts", 3);
    detail::require_rank<O>(fn, "out", 3);
    detail::require_rank<L>(fn, "lse_out", 2);
    detail::require_device_accessible(fn, "o_parts", o_parts);
    detail::require_device_accessible(fn, "lse_parts", lse_parts);
    detail::require_device_accessible(fn, "out", out);
    detail::require_device_accessible(fn, "lse_out", lse_out);
    const std::int64_t s = o_parts.extent(0), n = o_parts.extent(1), h = o_parts.extent(2), d = o_parts.extent(3);
    require(supported_head_dim(d), fn, "o_parts", "head_dim (extent 3) of 64, 128 or 256", d);
    require(s >= 1, fn, "o_parts", "at least one part (extent 0)", s);
    require(n * h <= INT32_MAX, fn, "o_parts", "tokens * heads below 2^31 (cuda backend)", n * h);
    require_shape(fn, "lse_parts", lse_parts, {s, n, h});
    require_shape(fn, "out", out, {n, h, d});
    require_shape(fn, "lse_out", lse_out, {n, h});
    require_unit_inner_stride(fn, "o_parts", o_parts);
    require_unit_inner_stride(fn, "out", out);
    detail::lse_merge_params<T> p;
    p.o_parts = static_cast<const T*>(o_parts.data());
    p.o_stride_part = o_parts.stride(0);
    p.o_stride_token = o_parts.stride(1);
    p.o_stride_head = o_parts.stride(2);
    p.lse_parts = static_cast<const float*>(lse_parts.data());
    p.lse_stride_part = lse_parts.stride(0);
    p.lse_stride_token = lse_parts.stride(1);
    p.lse_stride_head = lse_parts.stride(2);
    p.o = const_cast<T*>(static_cast<const T*>(out.data()));
    p.out_stride_token = out.stride(0);
    p.out_stride_head = out.stride(1);
    p.lse = const_cast<float*>(static_cast<const float*>(lse_out.data()));
    p.lse_out_stride_token = lse_out.stride(0);
    p.lse_out_stride_head = lse_out.stride(1);
    p.num_parts = static_cast<int>(s);
    p.tokens = static_cast<int>(n);
    p.heads = static_cast<int>(h);
    p.head_dim = static_cast<int>(d);
    detail::launch_lse_merge(policy, p);
  }
}

//! Two-way merge on a CUDA device (LongSpec Appendix A, Proposition A.1): (o_a, lse_a) and (o_b,
//! lse_b) -> (out, lse_out); out may alias o_a or o_b, lse_out lse_a or lse_b. Both -inf -> out = 0,
//! lse_out = -inf. Preconditions as the n-way cuda overload. O(tokens * heads * D).
template <tensor_like OA, tensor_like LA, tensor_like OB, tensor_like LB, tensor_like O, tensor_like L>
void lse_merge(const cuda& policy, const OA& o_a, const LA& lse_a, const OB& o_b, const LB& lse_b, const O& out,
               const L& lse_out) {
  constexpr std::string_view fn = "specdec::lse_merge";
  detail::validate_merge_types<OA, LA, O, L>(fn, "o_a", "lse_a");
  detail::validate_merge_types<OB, LB, O, L>(fn, "o_b", "lse_b");
  using T = std::remove_cv_t<typename O::element_type>;
  if constexpr (detail::attention_storage_v<T> && std::is_same_v<std::remove_cv_t<typename OA::element_type>, T> &&
                std::is_same_v<std::remove_cv_t<typename OB::element_type>, T>) {
    detail::require_rank<OA>(fn, "o_a", 3);
    detail::require_rank<OB>(fn, "o_b", 3);
    detail::require_rank<LA>(fn, "lse_a", 2);
    detail::require_rank<LB>(fn, "lse_b", 2);
    detail::require_rank<O>(fn, "out", 3);
    detail::require_rank<L>(fn, "lse_out", 2);
    detail::require_device_accessible(fn, "o_a", o_a);
    detail::require_device_accessible(fn, "o_b", o_b);
    detail::require_device_accessible(fn, "lse_a", lse_a);
    detail::require_device_accessible(fn, "lse_b", lse_b);
    detail::require_device_accessible(fn, "out", out);
    detail::require_device_accessible(fn, "lse_out", lse_out);
    const std::int64_t n = o_a.extent(0), h = o_a.extent(1), d = o_a.extent(2);
    require(supported_head_dim(d), fn, "o_a", "head_dim (extent 2) of 64, 128 or 256", d);
    require(n * h <= INT32_MAX, fn, "o_a", "tokens * heads below 2^31 (cuda backend)", n * h);
    require_shape(fn, "o_b", o_b, {n, h, d});
    require_shape(fn, "lse_a", lse_a, {n, h});
    require_shape(fn, "lse_b", lse_b, {n, h});
    require_shape(fn, "out", out, {n, h, d});
    require_shape(fn, "lse_out", lse_out, {n, h});
    require_unit_inner_stride(fn, "o_a", o_a);
    require_unit_inner_stride(fn, "o_b", o_b);
    require_unit_inner_stride(fn, "out", out);
    detail::lse_merge_params<T> p;
    p.o_parts = static_cast<const T*>(o_a.data());
    p.o_stride_token = o_a.stride(0);
    p.o_stride_head = o_a.stride(1);
    p.lse_parts = static_cast<const float*>(lse_a.data());
    p.lse_stride_token = lse_a.stride(0);
    p.lse_stride_head = lse_a.stride(1);
    p.o_b = static_cast<const T*>(o_b.data());
    p.o_b_stride_token = o_b.stride(0);
    p.o_b_stride_head = o_b.stride(1);
    p.lse_b = static_cast<const float*>(lse_b.data());
    p.lse_b_stride_token = lse_b.stride(0);
    p.lse_b_stride_head = lse_b.stride(1);
    p.o = const_cast<T*>(static_cast<const T*>(out.data()));
    p.out_stride_token = out.stride(0);
    p.out_stride_head = out.stride(1);
    p.lse = const_cast<float*>(static_cast<const float*>(lse_out.data()));
    p.lse_out_stride_token = lse_out.stride(0);
    p.lse_out_stride_head = lse_out.stride(1);
    p.num_parts = 2;
    p.tokens = static_cast<int>(n);
    p.heads = static_cast<int>(h);
    p.head_dim = static_cast<int>(d);
    detail::launch_lse_merge(policy, p);
  }
}

}  // namespace specdec
