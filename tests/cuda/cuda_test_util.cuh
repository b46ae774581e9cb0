#pragma once
// Small helpers for CUDA tests: an owning device buffer with host copies. Errors throw
// specdec::cuda_error (Catch2 reports them as test failures).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "specdec/core/device_types.cuh"
#include "specdec/core/tensor.hpp"
#include "specdec/sampling/penalty_context.hpp"

namespace specdec_test {

//! Owning device array of n elements of T (cudaMalloc / cudaFree).
template <class T>
class device_buffer {
 public:
  explicit device_buffer(std::size_t n) : n_(n) {
    if (n_ > 0) SPECDEC_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p_), n_ * sizeof(T)));
  }
  explicit device_buffer(const std::vector<T>& host) : device_buffer(host.size()) { upload(host); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() {
    if (p_) cudaFree(p_);
  }
  T* data() const noexcept { return p_; }
  std::size_t size() const noexcept { return n_; }
  void upload(const std::vector<T>& host) {
    SPECDEC_CUDA_CHECK(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_ > 0) SPECDEC_CUDA_CHECK(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

//! A device buffer as a 1-D view marked device memory.
template <class T>
specdec::strided_view<T, 1> dv(const device_buffer<T>& b) {
  return specdec::make_view<1>(b.data(), {static_cast<std::int64_t>(b.size())}, specdec::memory_space::device);
}

//! True when SPECDEC_CUDA_TEST_SMALL is set (and not "0"): benchmarks/cuda/gpu_session.sh sets it
//! for its compute-sanitizer step, where racecheck runs shared-memory-heavy kernels orders of
//! magnitude slower; the tests that can then skip their largest shapes (vocabularies of 128K+, trees
//! of 1024 nodes, rows of 128K+), which the plain run covers, and keep every small case.
inline bool sanitizer_sized() {
  const char* e = std::getenv("SPECDEC_CUDA_TEST_SMALL");
  return e != nullptr && *e != '\0' && !(e[0] == '0' && e[1] == '\0');
}

//! Row-major [rows, cols] host data re-laid with `stride` elements between rows, the gaps filled with
//! `fill` (a value that would show if a kernel read past a row): the input of a padded-stride test.
inline std::vector<float> padded_rows(const std::vector<float>& x, std::int64_t rows, std::int64_t cols,
                                      std::int64_t stride, float fill) {
  std::vector<float> h(static_cast<std::size_t>(rows * stride), fill);
  for (std::int64_t r = 0; r < rows; ++r)
    std::copy_n(x.begin() + r * cols, cols, h.begin() + r * stride);
  return h;
}

//! Checks the last kernel launch and waits for it to finish.
inline void sync_check(const char* what) {
  SPECDEC_CUDA_CHECK(cudaGetLastError());
  specdec::cuda_check(cudaDeviceSynchronize(), what);
}

//! Captures launch(stream) in a CUDA graph on a new non-blocking stream and replays it `reps` times:
//! before each replay reset() re-uploads inputs, then the device is synchronised (a pageable
//! cudaMemcpy on the legacy stream may return before its DMA lands, and it does not order a
//! non-blocking stream: seen under compute-sanitizer, where the replay ran first); after each
//! replay, check().
template <class Launch, class Reset, class Check>
void replay_in_graph(int reps, Launch&& launch, Reset&& reset, Check&& check) {
  cudaStream_t s;
  SPECDEC_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t e;
  SPECDEC_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  launch(s);
  SPECDEC_CUDA_CHECK(cudaStreamEndCapture(s, &g));
  SPECDEC_CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
  for (int rep = 0; rep < reps; ++rep) {
    reset();
    SPECDEC_CUDA_CHECK(cudaDeviceSynchronize());
    SPECDEC_CUDA_CHECK(cudaGraphLaunch(e, s));
    SPECDEC_CUDA_CHECK(cudaStreamSynchronize(s));
    check();
  }
  SPECDEC_CUDA_CHECK(cudaGraphExecDestroy(e));
  SPECDEC_CUDA_CHECK(cudaGraphDestroy(g));
  SPECDEC_CUDA_CHECK(cudaStreamDestroy(s));
}

//! A penalty_context_builder's seven arrays on the device (sampling and greedy verification tests).
struct device_penalty_context {
  device_buffer<std::int32_t> distinct, last, indptr, length, row_context, path_indptr, path;
  explicit device_penalty_context(const specdec::penalty_context_builder& b)
      : distinct(vec(b.distinct())), last(vec(b.last())), indptr(vec(b.context_indptr())), length(vec(b.context_length())),
        row_context(vec(b.row_context())), path_indptr(vec(b.path_indptr())), path(vec(b.path())) {}
  static std::vector<std::int32_t> vec(std::span<const std::int32_t> s) { return {s.begin(), s.end()}; }
  [[nodiscard]] specdec::penalty_context view() const {
    return {dv(distinct), dv(last), dv(indptr), dv(length), dv(row_context), dv(path_indptr), dv(path)};
  }
};

//! A user's KV layout in managed memory (so the host can read its mapping) over `tokens` packed rows
//! of one request: token `hole`'s K and V rows are null. The cuda entry points must refuse it on the
//! host, as the host passes do, before a kernel dereferences the null row. Its rows are never read.
template <class T>
struct holed_layout {
  using value_type = T;
  T* rows = nullptr;
  int tokens = 3, hole = 1, kv_heads = 1, dim = 64;
  specdec::memory_space where = specdec::memory_space::managed;
  SPECDEC_HOST_DEVICE int num_requests() const { return 1; }
  SPECDEC_HOST_DEVICE int num_kv_heads() const { return kv_heads; }
  SPECDEC_HOST_DEVICE int head_dim() const { return dim; }
  SPECDEC_HOST_DEVICE int length(int) const { return tokens; }
  SPECDEC_HOST_DEVICE int capacity(int) const { return tokens; }
  SPECDEC_HOST_DEVICE T* k_row(int, int t, int h) const {
    return t == hole ? nullptr : rows + (static_cast<std::ptrdiff_t>(t) * kv_heads + h) * dim;
  }
  SPECDEC_HOST_DEVICE T* v_row(int r, int t, int h) const { return k_row(r, t, h); }
  specdec::memory_space space() const { return where; }
};

}  // namespace specdec_test
