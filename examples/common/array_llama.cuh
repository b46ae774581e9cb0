#pragma once
//! \file array_llama.cuh
//! cuda_ops: array_llama's backend on a CUDA device (nvcc). Weights, caches, activations and logits
//! in device memory; the matmuls through cuBLAS (fp32, pedantic math: no TF32), RMSNorm, SwiGLU, the
//! embedding gather, the K/V row scatter and the conversions to and from the cache's type (half:
//! the CUDA attention runs on tensor cores) as small kernels; the library's primitives under
//! specdec::cuda{stream}. Everything is enqueued on one stream; the host waits only where
//! array_llama reads the step's status words back (commit_batch), and the verifier reads its results.
//!
//! Batch invariance (array_llama.hpp's file comment): cuBLAS chooses its kernel by the matrix shape,
//! so a row's product could change in the last bits with the number of rows beside it. Every matmul
//! therefore runs over `bucket_rows` rows (the activations are allocated that tall; rows past the
//! step's are computed and ignored), one shape for every step up to that size. The attention's split
//! of the cache is fixed by array_llama (options.kv_split_size and kv_chunks: without the second the
//! CUDA backend would size its parts from the step's query rows). examples/gpu_decode.cu checks
//! greedy speculative output against greedy autoregressive output token for token.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "array_llama.hpp"
#include "specdec/attention/hybrid_tree_attention.cuh"
#include "specdec/core/device_types.cuh"
#include "specdec/kv/commit.cuh"
#include "specdec/position/rope.cuh"
#include "specdec/tree/tree_batch.cuh"

namespace specdec::examples {

//! An owning device array (cudaMalloc'd; moves, no copies).
template <class T>
class device_array {
 public:
  using value_type = T;
  device_array() = default;
  //! n elements, zeroed (rows past a step's are read by the padded matmuls: never uninitialised).
  explicit device_array(std::size_t n) : n_(n) {
    if (n > 0) {
      SPECDEC_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), n * sizeof(T)));
      SPECDEC_CUDA_CHECK(cudaMemset(p_, 0, n * sizeof(T)));
      SPECDEC_CUDA_CHECK(cudaDeviceSynchronize());  // zeroed before any stream (blocking or not) uses it
    }
  }
  device_array(device_array&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  device_array& operator=(device_array&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr), n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  device_array(const device_array&) = delete;
  device_array& operator=(const device_array&) = delete;
  ~device_array() { release(); }
  [[nodiscard]] T* data() noexcept { return p_; }
  [[nodiscard]] const T* data() const noexcept { return p_; }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }

 private:
  void release() noexcept {
    if (p_ != nullptr) cudaFree(p_);
    p_ = nullptr;
  }
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

namespace detail {

__global__ void array_llama_embed(const std::int32_t* tokens, int m, const float* table, int hidden, float* x) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < std::int64_t{m} * hidden;
       i += std::int64_t{gridDim.x} * blockDim.x)
    x[i] = table[std::int64_t{tokens[i / hidden]} * hidden + i % hidden];
}

// One block per row: y = x / sqrt(mean(x^2) + eps) * w, the sum of squares by a block reduction.
__global__ void array_llama_rms_norm(const float* x, const float* w, float* y, int hidden, float eps) {
  __shared__ float part[32];
  const float* xr = x + std::int64_t{blockIdx.x} * hidden;
  float s = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < hidden; i += static_cast<int>(blockDim.x)) s = fmaf(xr[i], xr[i], s);
  for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    s = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x == 0) part[0] = s;
  }
  __syncthreads();
  const float inv = rsqrtf(part[0] / static_cast<float>(hidden) + eps);
  for (int i = static_cast<int>(threadIdx.x); i < hidden; i += static_cast<int>(blockDim.x))
    y[std::int64_t{blockIdx.x} * hidden + i] = xr[i] * inv * w[i];
}

__global__ void array_llama_silu_mul(float* g, const float* u, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x)
    g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

template <class To, class From>
__global__ void array_llama_convert(const From* from, To* to, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += std::int64_t{gridDim.x} * blockDim.x)
    to[i] = static_cast<To>(from[i]);
}

__global__ void array_llama_scatter_rows(const half* k_src, const half* v_src, half* k_cache, half* v_cache,
                                         const std::int64_t* rows, int m, int width) {
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < std::int64_t{m} * width;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t t = i / width, c = i % width, to = rows[t] * width + c;
    k_cache[to] = k_src[i];
    v_cache[to] = v_src[i];
  }
}

inline void cublas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) throw cuda_error(static_cast<int>(s), std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}

}  // namespace detail

//! array_llama's CUDA backend (see the file comment). Not copyable (it owns a cuBLAS handle).
class cuda_ops {
 public:
  using policy_type = cuda;
  using kv_type = half;  //!< the CUDA attention's operand type (tensor cores)
  static constexpr memory_space space = memory_space::device;
  template <class T>
  using array = device_array<T>;

  //! Work on `stream`; matmuls over `bucket_rows` rows at a time (the largest step's rows: at most
  //! max_requests * (tree nodes + 1), and 64 for the prefill's chains).
  cuda_ops() : cuda_ops(nullptr, 256) {}
  explicit cuda_ops(cudaStream_t stream, int bucket_rows = 256) : stream_(stream), bucket_(bucket_rows) {
    require(bucket_rows >= 64, "specdec::examples::cuda_ops", "bucket_rows", ">= 64 (the prefill's chains)", bucket_rows);
    detail::cublas_check(cublasCreate(&blas_), "cublasCreate");
    detail::cublas_check(cublasSetStream(blas_, stream_), "cublasSetStream");
    detail::cublas_check(cublasSetMathMode(blas_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
  }
  cuda_ops(cuda_ops&& o) noexcept : stream_(o.stream_), bucket_(o.bucket_), blas_(std::exchange(o.blas_, nullptr)) {}
  cuda_ops& operator=(cuda_ops&&) = delete;
  cuda_ops(const cuda_ops&) = delete;
  ~cuda_ops() {
    if (blas_ != nullptr) cublasDestroy(blas_);
  }

  template <class T>
  static array<T> make(std::size_t n) {
    return array<T>(n);
  }
  template <class T>
  void upload(array<T>& to, std::span<const T> from) {
    require(from.size() <= to.size(), "specdec::examples::cuda_ops::upload", "from.size()", "<= the array's", from.size());
    if (!from.empty())
      SPECDEC_CUDA_CHECK(cudaMemcpyAsync(to.data(), from.data(), from.size_bytes(), cudaMemcpyHostToDevice, stream_));
  }
  template <class T>
  void download(const array<T>& from, std::span<T> to) {
    if (!to.empty())
      SPECDEC_CUDA_CHECK(cudaMemcpyAsync(to.data(), from.data(), to.size_bytes(), cudaMemcpyDeviceToHost, stream_));
    synchronize();
  }
  [[nodiscard]] policy_type policy() const noexcept { return cuda{.stream = stream_}; }
  void synchronize() { SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream_)); }
  //! Rows an activation of m rows is allocated with (every matmul runs over this many).
  [[nodiscard]] std::size_t padded_rows(int m) const noexcept {
    return static_cast<std::size_t>((m + bucket_ - 1) / bucket_ * bucket_);
  }

  void embed(const std::int32_t* tokens, int m, const float* table, int hidden, float* x) {
    if (m == 0) return;
    detail::array_llama_embed<<<grid(std::int64_t{m} * hidden), 256, 0, stream_>>>(tokens, m, table, hidden, x);
    SPECDEC_CUDA_CHECK(cudaGetLastError());
  }
  void rms_norm(const float* x, const float* w, float* y, int m, int hidden, double eps) {
    if (m == 0) return;
    detail::array_llama_rms_norm<<<m, 256, 0, stream_>>>(x, w, y, hidden, static_cast<float>(eps));
    SPECDEC_CUDA_CHECK(cudaGetLastError());
  }
  //! y[m, out] = x[m, in] W[out, in]^T (+= when add) over padded_rows(m) rows (x and y that tall).
  void matmul_nt(const float* x, const float* W, float* y, int m, int out, int in, bool add) {
    if (m == 0) return;
    const float one = 1.0f, beta = add ? 1.0f : 0.0f;
    // column-major: y^T [out, M] = W^T... i.e. the row-major W [out, in] read transposed, x as is
    detail::cublas_check(cublasSgemm(blas_, CUBLAS_OP_T, CUBLAS_OP_N, out, static_cast<int>(padded_rows(m)), in, &one, W,
                                     in, x, in, &beta, y, out),
                         "cublasSgemm");
  }
  void silu_mul(float* g, const float* u, std::size_t n) {
    if (n == 0) return;
    detail::array_llama_silu_mul<<<grid(static_cast<std::int64_t>(n)), 256, 0, stream_>>>(g, u, static_cast<std::int64_t>(n));
    SPECDEC_CUDA_CHECK(cudaGetLastError());
  }
  void to_kv(const float* from, half* to, std::size_t n) { convert(from, to, n); }
  void from_kv(const half* from, float* to, std::size_t n) { convert(from, to, n); }
  void scatter_rows(const half* k_src, const half* v_src, half* k_cache, half* v_cache, const std::int64_t* rows,
                    int m, int width) {
    if (m == 0) return;
    detail::array_llama_scatter_rows<<<grid(std::int64_t{m} * width), 256, 0, stream_>>>(k_src, v_src, k_cache, v_cache,
                                                                                        rows, m, width);
    SPECDEC_CUDA_CHECK(cudaGetLastError());
  }

 private:
  template <class From, class To>
  void convert(const From* from, To* to, std::size_t n) {
    if (n == 0) return;
    detail::array_llama_convert<<<grid(static_cast<std::int64_t>(n)), 256, 0, stream_>>>(from, to, static_cast<std::int64_t>(n));
    SPECDEC_CUDA_CHECK(cudaGetLastError());
  }
  static int grid(std::int64_t n) { return static_cast<int>(std::min<std::int64_t>((n + 255) / 256, 4096)); }
  cudaStream_t stream_;
  int bucket_;
  cublasHandle_t blas_ = nullptr;
};

static_assert(check_target_model<array_llama<cuda_ops>>() && target_has_commit_batch<array_llama<cuda_ops>>);

}  // namespace specdec::examples
