#pragma once
//! \file cuda_common.cuh
//! Building blocks of the CUDA attention backend: tensor-core (mma.sync m16n8k16) and cp.async
//! wrappers, the per-device SM count and workspace acquisition. Argument validation is shared with
//! the host backend (detail/validate.hpp, policy specdec::cuda). Needs nvcc; device code needs sm_80 or newer (the project builds for sm_90).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <array>
#include <bit>
#include <cmath>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/detail/validate.hpp"
#include "specdec/core/device_types.cuh"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/tensor.hpp"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "specdec's CUDA attention kernels need sm_80 or newer (mma.sync m16n8k16 bf16, cp.async)"
#endif

namespace specdec::detail {

// ---------------------------------------------------------------------------------------------
// Host -> device params
// ---------------------------------------------------------------------------------------------

//! The one host -> device conversion of a params struct: P<T...> over specdec's storage types
//! (float, half, bfloat16) becomes P<device_type_t<T>...> over CUDA's (__half, __nv_bfloat16: same
//! size and bits), so the validated host params (attention_io_params, tree_kv_params,
//! lse_merge_params, merge_parts, merge_out) reach the kernels as they are, only the pointer types
//! change. O(1).
template <template <class...> class P, class... T>
[[nodiscard]] P<device_type_t<T>...> to_device_params(const P<T...>& p) noexcept {
  static_assert(sizeof(P<T...>) == sizeof(P<device_type_t<T>...>) && std::is_trivially_copyable_v<P<T...>>,
                "to_device_params: the host and device params must have one layout");
  return std::bit_cast<P<device_type_t<T>...>>(p);
}

// ---------------------------------------------------------------------------------------------
// Device helpers
// ---------------------------------------------------------------------------------------------

//! Storage value <-> fp32 (float, __half, __nv_bfloat16).
template <class DT>
__device__ __forceinline__ float to_f(DT x) {
  if constexpr (std::is_same_v<DT, __nv_bfloat16>) return __bfloat162float(x);
  else if constexpr (std::is_same_v<DT, __half>) return __half2float(x);
  else return static_cast<float>(x);
}
template <class DT>
__device__ __forceinline__ DT from_f(float x) {
  if constexpr (std::is_same_v<DT, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else if constexpr (std::is_same_v<DT, __half>) return __float2half_rn(x);
  else return static_cast<DT>(x);
}

//! Two fp32 values packed as one 32-bit register of two 16-bit storage values (lo = lower column).
template <class DT>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  std::uint32_t r;
  if constexpr (std::is_same_v<DT, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    r = *reinterpret_cast<std::uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    r = *reinterpret_cast<std::uint32_t*>(&v);
  }
  return r;
}

//! D(16x8, fp32) += A(16x16, row) * B(16x8, col) on the tensor cores; DT = __half or __nv_bfloat16.
//! Fragment layouts (PTX ISA, mma.m16n8k16): lane = 4*g + t; A regs {(g, 2t..), (g+8, 2t..),
//! (g, 2t+8..), (g+8, 2t+8..)}; B regs {(k=2t.., n=g), (k=2t+8.., n=g)}; C {(g, 2t), (g, 2t+1),
//! (g+8, 2t), (g+8, 2t+1)}.
template <class DT>
__device__ __forceinline__ void mma_16816(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                          std::uint32_t b1) {
  if constexpr (std::is_same_v<DT, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

//! ldmatrix.x4: four 8x8 16-bit matrices whose row addresses lanes 8i..8i+7 give (matrix i); lane
//! 4g+t receives elements 2t and 2t+1 of row g of each matrix, i.e. the B fragment of a [n][k]
//! row-major tile (used for K in Q.K^T: two key n-tiles x two k halves in one instruction).
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* smem_row) {
  const auto a = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

//! ldmatrix.x4.trans: four 8x8 16-bit matrices whose row addresses lanes 8i..8i+7 give (matrix i);
//! lane 4g+t receives rows 2t and 2t+1 of column g of each matrix, i.e. a B fragment of a row-major
//! [k][n] tile (used for V in P.V).
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* smem_row) {
  const auto a = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

//! 16-byte asynchronous global -> shared copy (L2 only: K/V are streamed once).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
  const auto s = static_cast<std::uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ---------------------------------------------------------------------------------------------
// Host helpers
// ---------------------------------------------------------------------------------------------

//! Multiprocessor count of the current device, read once per device and cached (no synchronisation,
//! legal during stream capture).
inline int cuda_sm_count() {
  static std::array<std::atomic<int>, 64> cache{};
  int dev = 0;
  cuda_check(cudaGetDevice(&dev), "cudaGetDevice");
  if (dev >= 0 && dev < static_cast<int>(cache.size())) {
    if (const int c = cache[static_cast<std::size_t>(dev)].load(std::memory_order_relaxed); c > 0) return c;
  }
  int n = 0;
  cuda_check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute(SM count)");
  if (dev >= 0 && dev < static_cast<int>(cache.size()))
    cache[static_cast<std::size_t>(dev)].store(n, std::memory_order_relaxed);
  return n > 0 ? n : 1;
}

//! Scratch for one call: the caller's workspace (checked for space and size) or, without one, a
//! stream-ordered allocation (cudaMallocAsync; capturable in a CUDA graph) freed after the call.
class cuda_scratch {
 public:
  cuda_scratch(std::string_view fn, attention_workspace* ws, std::size_t bytes, cudaStream_t stream)
      : stream_(stream) {
    if (ws != nullptr) {
      require(device_accessible(ws->space()), fn, "options.workspace",
              "device-accessible memory (wrap a cudaMalloc'd buffer: attention_workspace(ptr, bytes, "
              "memory_space::device))",
              ws->space());
      require(ws->size_bytes() >= bytes, fn, "options.workspace",
              "at least " + std::to_string(bytes) + " bytes (the matching *_workspace_bytes(cuda, ...))",
              ws->size_bytes());
      require(bytes == 0 || ws->data() != nullptr, fn, "options.workspace", "non-null data", "nullptr");
      require(reinterpret_cast<std::uintptr_t>(ws->data()) % 16 == 0, fn, "options.workspace",
              "16-byte aligned memory", "misaligned");
      p_ = ws->data();
    } else if (bytes > 0) {
      cuda_check(cudaMallocAsync(&p_, bytes, stream_), "cudaMallocAsync(attention scratch)");
      owned_ = true;
    }
  }
  cuda_scratch(const cuda_scratch&) = delete;
  cuda_scratch& operator=(const cuda_scratch&) = delete;
  ~cuda_scratch() {
    if (owned_) (void)cudaFreeAsync(p_, stream_);  // destructor: cannot throw; errors surface on the stream
  }
  [[nodiscard]] void* data() const noexcept { return p_; }

 private:
  void* p_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool owned_ = false;
};

}  // namespace specdec::detail
