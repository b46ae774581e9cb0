#pragma once
//! \file rope.cuh
//! CUDA backend of apply_rope (rope.hpp): rope_backend<cuda>, so apply_rope(specdec::cuda{}, ...)
//! takes the same parameters as on the host and keeps the same numerics -- angles pos * inv_freq
//! and their cos/sin in double, rounded to float once, rotation in fp32 (double storage rotates in
//! double) -- so results match the host to within one rounding of cos/sin (CUDA's double sin/cos
//! are not bit-identical to the host libm's).

#include <cuda_runtime_api.h>

#include <algorithm>
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

//! The cuda backend of apply_rope (the seam: rope_backend in rope.hpp). apply_rope has validated
//! the parameters and the tensors under the cuda rules (device-accessible memory, unit inner stride,
//! one position per token; positions >= 0 is a precondition, device memory is not read here).
//! Adds the kernel's own limit (rotary dimension <= 512), then launches one grid on policy.stream
//! without synchronisation; a failed launch throws cuda_error. O(tokens * (R/2 sincos + heads * R)).
template <>
struct rope_backend<cuda> {
  template <class T, class PV>
  static void run(std::string_view fn, const cuda& policy, const rope_params& params, int rotary,
                  const strided_view<T, 3>& x, const PV& positions) {
    require(rotary <= rope_cuda_max_rotary, fn, "params.rotary_dim",
            "a rotary dimension of at most " + std::to_string(rope_cuda_max_rotary) + " on the cuda backend", rotary);
    if (x.extent(0) == 0 || x.extent(1) == 0) return;
    using S = std::remove_cv_t<T>;
    const std::vector<double> inv = rope_inv_frequencies(params, static_cast<int>(x.extent(2)));
    rope_cuda_params<S> kp;
    static_assert(sizeof(kp) <= 4096, "kernel parameters must fit the classic 4 KiB limit");
    kp.x = const_cast<S*>(x.data());
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
    rope_kernel<<<blocks, 128, 0, policy.stream>>>(kp);
    cuda_check(cudaGetLastError(), "rope_kernel launch");
  }
};

}  // namespace detail
}  // namespace specdec
