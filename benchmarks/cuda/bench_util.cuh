#pragma once
// Helpers shared by the CUDA benchmarks (bench_attention.cu, bench_step.cu): an owning device
// allocation, a hash-based random fill, event timing of one enqueue, and the memory roof
// (device-to-device copy bandwidth, bytes read + written per second) measured in the same process
// as the cells it normalises.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "specdec/core/device_types.cuh"

namespace specdec_bench {

//! Owning device allocation (bytes).
struct dmem {
  void* p = nullptr;
  explicit dmem(std::size_t bytes) { SPECDEC_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(bytes, 16))); }
  dmem(const dmem&) = delete;
  dmem& operator=(const dmem&) = delete;
  ~dmem() { cudaFree(p); }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

//! p[i] = lo + (hi - lo) * u_i for n elements, u_i in [0, 1) on a 2^-24 grid from a hash of (i,
//! seed): reproducible inputs without a host-side generator. T: float or a CUDA 16-bit float type
//! (converted from float, round to nearest).
template <class T>
__global__ void fill_uniform_kernel(T* p, std::size_t n, std::uint32_t seed, float lo, float hi) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::uint32_t h = static_cast<std::uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = static_cast<T>(lo + (hi - lo) * (static_cast<float>(h & 0xffffffu) * 0x1p-24f));
  }
}
template <class T>
void fill_uniform(T* p, std::size_t n, std::uint32_t seed, float lo, float hi) {
  fill_uniform_kernel<<<1024, 256>>>(p, n, seed, lo, hi);
  SPECDEC_CUDA_CHECK(cudaGetLastError());
}

//! Event pair timing one enqueue; returns seconds.
template <class F>
double time_on_stream(cudaStream_t s, F&& f) {
  cudaEvent_t a, b;
  SPECDEC_CUDA_CHECK(cudaEventCreate(&a));
  SPECDEC_CUDA_CHECK(cudaEventCreate(&b));
  SPECDEC_CUDA_CHECK(cudaEventRecord(a, s));
  f();
  SPECDEC_CUDA_CHECK(cudaEventRecord(b, s));
  SPECDEC_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  SPECDEC_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  SPECDEC_CUDA_CHECK(cudaEventDestroy(a));
  SPECDEC_CUDA_CHECK(cudaEventDestroy(b));
  return ms * 1e-3;
}

constexpr std::size_t copy_bytes = std::size_t{1} << 30;

inline double measure_copy_bw(int reps) {  // bytes moved (read + write) per second
  dmem a(copy_bytes), b(copy_bytes);
  SPECDEC_CUDA_CHECK(cudaMemset(a.p, 0, copy_bytes));
  SPECDEC_CUDA_CHECK(cudaMemcpy(b.p, a.p, copy_bytes, cudaMemcpyDeviceToDevice));  // warm-up
  double best = 1e30;
  for (int i = 0; i < reps; ++i)
    best = std::min(best, time_on_stream(nullptr, [&] {
                      SPECDEC_CUDA_CHECK(cudaMemcpyAsync(b.p, a.p, copy_bytes, cudaMemcpyDeviceToDevice, nullptr));
                    }));
  return 2.0 * static_cast<double>(copy_bytes) / best;
}

//! The memory roof of every CUDA benchmark: the device-to-device copy rate (read + write bytes / s),
//! measured once per process, on first use.
inline double copy_roof() {
  static const double bw = measure_copy_bw(5);
  return bw;
}

//! How many copies of a benchmark's input (bytes_per_set each) a graph of `calls` calls rotates
//! over, so that together they span at least 3x the L2 size and each call reads from DRAM rather
//! than what an earlier call left in L2: 1 to calls.
inline int l2_rotation_sets(std::size_t bytes_per_set, int calls) {
  cudaDeviceProp prop{};
  SPECDEC_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const std::size_t l2x3 = 3 * static_cast<std::size_t>(prop.l2CacheSize);
  const std::size_t per = bytes_per_set == 0 ? 1 : bytes_per_set;
  return static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(calls), std::max<std::size_t>(1, (l2x3 + per - 1) / per)));
}

}  // namespace specdec_bench
