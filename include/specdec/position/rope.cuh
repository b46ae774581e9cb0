#pragma once
//! \file rope.cuh
//! CUDA backend of apply_rope (rope.hpp): the specdec::cuda overload, same parameters and the same
//! numerics -- angles pos * inv_freq and their cos/sin in double, rounded to float once, rotation
//! in fp32 (double storage rotates in double) -- so results match the host to within one rounding
//! of cos/sin (CUDA's double sin/cos are not bit-identical to the host libm's).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "specdec/core/device_types.cuh"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/numeric.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/position/rope.hpp"

namespace specdec {
namespace detail {

//! Largest rotary dimension of the cuda kernel: the inverse frequencies travel in the kernel
//! parameters (R/2 doubles, 2 KiB at R = 512).
inline constexpr int rope_cuda_max_rotary = 512;

template <class T>
struct rope_cuda_params {
  T* x = nullptr;
  std::int64_t stride_token = 0, stride_head = 0;
  std::int64_t tokens = 0, heads = 0;
  const std::int32_t* positions = nullptr;
  std::int64_t positions_stride = 1;
  int half_rotary = 0;
  rope_style style = rope_style::rotate_half;
  double inv_freq[rope_cuda_max_rotary / 2] = {};
};

//! Grid-stride over tokens (one block per token at a time); thread i owns pair i of every head, so
//! each (cos, sin) is computed once per token and the loads of a head row are coalesced.
template <class T>
__global__ void __launch_bounds__(128) rope_kernel(const rope_cuda_params<T> p) {
  using A = accum_t<T>;
  for (std::int64_t t = blockIdx.x; t < p.tokens; t += gridDim.x) {
    const double pos = p.positions[t * p.positions_stride];
    for (int i = static_cast<int>(threadIdx.x); i < p.half_rotary; i += static_cast<int>(blockDim.x)) {
      double sd, cd;
      sincos(pos * p.inv_freq[i], &sd, &cd);
      const float cs = static_cast<float>(cd), sn = static_cast<float>(sd);
      for (std::int64_t h = 0; h < p.heads; ++h) {
        T* x = p.x + t * p.stride_token + h * p.stride_head;
        const int ia = p.style == rope_style::rotate_half ? i : 2 * i;
        const int ib = p.style == rope_style::rotate_half ? i + p.half_rotary : 2 * i + 1;
        const A a = static_cast<A>(to_float(x[ia])), b = static_cast<A>(to_float(x[ib]));
        if constexpr (std::is_same_v<T, double>) {
          x[ia] = a * cs - b * sn;
          x[ib] = b * cs + a * sn;
        } else {
          x[ia] = from_float<T>(a * cs - b * sn);
          x[ib] = from_float<T>(b * cs + a * sn);
        }
      }
    }
  }
}

}  // namespace detail

//! Applies RoPE in place on a CUDA device, enqueued on policy.stream (no synchronisation): x = Q or
//! K rows [tokens, heads, head_dim] (float, half, bfloat16 or double; unit inner stride; device or
//! managed memory) at per-token int32 `positions` [tokens] (device or managed). Same parameters and
//! conventions as apply_rope(host, ...); rotary dimension at most 512. Positions >= 0 is a
//! precondition here (device memory is not read on the host). Throws invalid_argument on bad
//! arguments, cuda_error on a failed launch. O(tokens * (R/2 sincos + heads * R)).
template <class X, class P>
  requires(detail::rope_target_tensor<std::remove_cvref_t<X>> && detail::int32_positions_tensor<std::remove_cvref_t<P>>)
void apply_rope(const cuda& policy, const rope_params& params, const X& x_in, const P& positions_in) {
  constexpr std::string_view fn = "specdec::apply_rope";
  const auto x = as_view(x_in);
  const auto positions = as_view(positions_in);
  using T = std::remove_cv_t<typename std::remove_cvref_t<X>::element_type>;
  const int rotary = detail::validate_rope_params(params, x.extent(2), fn);
  require(rotary <= detail::rope_cuda_max_rotary, fn, "params.rotary_dim",
          "a rotary dimension of at most " + std::to_string(detail::rope_cuda_max_rotary) + " on the cuda backend",
          rotary);
  require(device_accessible(x.space()), fn, "x", "device-accessible memory (device or managed)", x.space());
  require(device_accessible(positions.space()), fn, "positions", "device-accessible memory (device or managed)",
          positions.space());
  require_unit_inner_stride(fn, "x", x);
  if (!(positions.extent(0) == x.extent(0))) [[unlikely]]
    throw_invalid_argument(fn, "positions",
                           "extent(0) == x.extent(0) = " + std::to_string(x.extent(0)) + " (one position per token)",
                           positions.extent(0));
  require(x.extent(0) == 0 || x.extent(1) == 0 || x.data() != nullptr, fn, "x", "a non-null data pointer", "nullptr");
  require(positions.extent(0) == 0 || positions.data() != nullptr, fn, "positions", "a non-null data pointer",
          "nullptr");
  if (x.extent(0) == 0 || x.extent(1) == 0) return;
  const std::vector<double> inv = rope_inv_frequencies(params, static_cast<int>(x.extent(2)));
  detail::rope_cuda_params<T> kp;
  static_assert(sizeof(kp) <= 4096, "kernel parameters must fit the classic 4 KiB limit");
  kp.x = const_cast<T*>(x.data());
  kp.stride_token = x.stride(0);
  kp.stride_head = x.stride(1);
  kp.tokens = x.extent(0);
  kp.heads = x.extent(1);
  kp.positions = positions.data();
  kp.positions_stride = positions.stride(0);
  kp.half_rotary = rotary / 2;
  kp.style = params.style;
  for (int i = 0; i < rotary / 2; ++i) kp.inv_freq[i] = inv[static_cast<std::size_t>(i)];
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>(x.extent(0), 65535));
  detail::rope_kernel<<<blocks, 128, 0, policy.stream>>>(kp);
  cuda_check(cudaGetLastError(), "rope_kernel launch");
}

}  // namespace specdec
