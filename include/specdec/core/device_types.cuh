#pragma once
//! \file device_types.cuh
//! CUDA-side helpers of the core layer: mapping specdec's storage types to CUDA's (__half,
//! __nv_bfloat16) and turning CUDA runtime errors into specdec::cuda_error. Needs nvcc.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "specdec/core/bfloat16.hpp"
#include "specdec/core/device_status.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/half.hpp"

namespace specdec {

//! The CUDA type with the same size, alignment and bit layout as storage type T:
//! half -> __half, bfloat16 -> __nv_bfloat16, anything else -> T (cv-qualifiers kept).
template <class T>
struct device_type {
  using type = T;
};
template <>
struct device_type<half> {
  using type = __half;
};
template <>
struct device_type<bfloat16> {
  using type = __nv_bfloat16;
};
template <class T>
struct device_type<const T> {
  using type = const typename device_type<T>::type;
};
//! Shorthand for device_type<T>::type.
template <class T>
using device_type_t = typename device_type<T>::type;

static_assert(sizeof(__half) == sizeof(half) && alignof(__half) == alignof(half));
static_assert(sizeof(__nv_bfloat16) == sizeof(bfloat16) && alignof(__nv_bfloat16) == alignof(bfloat16));

//! Reinterprets a buffer of specdec storage type T as the matching CUDA type (no copy). O(1).
template <class T>
SPECDEC_HOST_DEVICE device_type_t<T>* to_device_type(T* p) noexcept {
  return reinterpret_cast<device_type_t<T>*>(p);
}

//! Throws specdec::cuda_error carrying the CUDA error name and string and `what` (the call that failed)
//! when `status` is not cudaSuccess. Host only; device code never throws.
inline void cuda_check(cudaError_t status, std::string_view what) {
  if (status != cudaSuccess) [[unlikely]] {
    std::string msg(what);
    msg += ": ";
    msg += cudaGetErrorName(status);
    msg += " (";
    msg += cudaGetErrorString(status);
    msg += ")";
    throw cuda_error(static_cast<int>(status), msg);
  }
}

//! Records a device-side check's finding in a status array [error, request, index]
//! (core/device_status.hpp) unless one is already recorded: the first writer wins the error word by
//! atomicCAS and then writes where. Status arrays start at {0, ...} (the primitive clears them).
__device__ inline void device_report(std::int32_t* status, device_error e, std::int32_t request, std::int32_t index) {
  if (atomicCAS(reinterpret_cast<int*>(status), 0, static_cast<int>(e)) == 0) {
    status[1] = request;
    status[2] = index;
  }
}

//! Grid of a kernel with one block per request (grid-stride beyond 65535 requests): at least one
//! block, so block 0 can check an offsets array's ends even when there are no requests.
inline int per_request_blocks(std::int64_t requests) noexcept {
  return requests < 1 ? 1 : requests < 65535 ? static_cast<int>(requests) : 65535;
}

//! Launches kernel<<<per_request_blocks(requests), Threads, 0, stream>>>(args...): the launch of
//! every kernel with one block per request (the verifiers' walks, ring_append). Host only; throws
//! cuda_error naming `what` when the launch fails. No synchronisation.
template <int Threads, class... Params, class... Args>
void launch_per_request(void (*kernel)(Params...), std::int64_t requests, cudaStream_t stream, std::string_view what,
                        const Args&... args) {
  kernel<<<per_request_blocks(requests), Threads, 0, stream>>>(args...);
  cuda_check(cudaGetLastError(), what);
}

//! f(row[i], i) for i = first, first + step, ... < n (one thread's share of a block-strided row
//! scan), in ascending i, with Batch loads in flight: each batch of the thread's entries is loaded
//! before f sees any of it. One load at a time, a block read a row at about 14 GB/s on the H100
//! (session 31), one SM's latency-bound share. ReadOnly: the loads go through the read-only data
//! cache (__ldg), for rows nothing writes while the kernel runs; false (plain loads) for a row the
//! kernel itself has written (after a barrier), which that cache need not see.
template <int Batch = 8, bool ReadOnly = true, class F>
__device__ inline void for_each_strided(const float* row, std::int64_t n, std::int64_t first, std::int64_t step,
                                        const F& f) {
  const auto load = [row](std::int64_t i) {
    if constexpr (ReadOnly)
      return __ldg(row + i);
    else
      return row[i];
  };
  std::int64_t i = first;
  for (; i + (Batch - 1) * step < n; i += Batch * step) {
    float v[Batch];
#pragma unroll
    for (int u = 0; u < Batch; ++u) v[u] = load(i + u * step);
#pragma unroll
    for (int u = 0; u < Batch; ++u) f(v[u], i + u * step);
  }
  for (; i < n; i += step) f(load(i), i);
}

//! Block 0, thread 0: reports (device_error::node_indptr) an offsets array [requests + 1] whose first
//! entry is not 0 or whose last is not `nodes`.
__device__ inline void device_check_indptr_ends(const std::int32_t* indptr, std::int32_t requests, std::int32_t nodes,
                                                std::int32_t* status) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  if (indptr[0] != 0) device_report(status, device_error::node_indptr, 0, -1);
  if (indptr[requests] != nodes) device_report(status, device_error::node_indptr, requests, -1);
}

//! Request r's node range [b, e) of an offsets array. True when 0 <= b <= e <= nodes, the condition
//! under which every access a per-request kernel makes for r (its nodes, its rows b + r .. e + r of
//! N + R, its emitted slots) stays in bounds; otherwise thread 0 reports device_error::node_indptr
//! and the caller skips the request (the answer is the same for every thread: uniform).
__device__ inline bool device_request_range(const std::int32_t* indptr, std::int32_t r, std::int32_t nodes,
                                            std::int32_t* status, std::int32_t& b, std::int32_t& e) {
  b = indptr[r], e = indptr[r + 1];
  if (b >= 0 && e >= b && e <= nodes) return true;
  if (threadIdx.x == 0) device_report(status, device_error::node_indptr, r, -1);
  return false;
}

//! Enqueues the reset of a status array to {0, -1, -1} (no error; request and index not applicable)
//! on `stream`: what a primitive does before its kernels may report. Host only; throws cuda_error
//! when the memset cannot be enqueued.
inline void clear_device_status(std::int32_t* status, cudaStream_t stream) {
  cuda_check(cudaMemsetAsync(status, 0, sizeof(std::int32_t), stream), "cudaMemsetAsync(status[0] = 0)");
  cuda_check(cudaMemsetAsync(status + 1, 0xff, 2 * sizeof(std::int32_t), stream), "cudaMemsetAsync(status[1..2] = -1)");
}

}  // namespace specdec

//! Evaluates a CUDA runtime call and throws specdec::cuda_error naming the call on failure.
#define SPECDEC_CUDA_CHECK(call) ::specdec::cuda_check((call), #call)
