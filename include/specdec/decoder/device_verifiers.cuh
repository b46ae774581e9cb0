#pragma once
//! \file device_verifiers.cuh
//! Verifier policies that decide a speculative_batch step on a CUDA device (needs nvcc): the target's
//! forward_batch returns its logits in device memory, speculative_batch hands them to verify_batch
//! (decoder/concepts.hpp, verifier_has_verify_batch), and only the accepted nodes, their counts and
//! the bonus tokens come back to the host: N + 2B int32 for N tree nodes and B requests, instead of
//! (N + B) x V logits (33 MB per request and step for a 64-node tree at V = 128K).
//!
//!   cuda_greedy_verifier  greedy_verifier (host logits: the same per-request path) plus verify_batch:
//!                         the trees go up (three int32 arrays), verify_greedy_batch(cuda) decides
//!                         every request, the results come down, one stream synchronisation. The
//!                         result equals greedy_verifier's on the same rows bit for bit (argmax ties:
//!                         lowest token id; verify/greedy.cuh).
//!
//!   cuda_sample_and_match_verifier
//!                         sample_and_match_verifier plus verify_batch: the rows processed and turned
//!                         into probabilities on the device (process_logits_batch, logits_to_probs_batch
//!                         in a buffer of the verifier's), then verify_sample_and_match_batch(cuda).
//!
//! Penalties are not applied on the device yet (issue #23 item 2): they need each row's context, so a
//! request with a repetition or contextual penalty is refused with invalid_argument naming the field,
//! before anything is launched. Greedy verification needs no other processing: it runs at temperature
//! 0 (speculative_batch requires it), where the processed row is one-hot at the argmax whatever
//! top-k, top-p, min-p and eta say. Chain and multi-draft verification on the device (their array
//! forms exist) are not offered as policies yet: they also need the draft's q rows there.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/device_status.hpp"
#include "specdec/core/device_types.cuh"
#include "specdec/decoder/concepts.hpp"
#include "specdec/decoder/verifiers.hpp"
#include "specdec/sampling/logits_processor.cuh"
#include "specdec/verify/greedy.cuh"
#include "specdec/verify/sample_and_match.cuh"

namespace specdec {

namespace detail {

//! Grow-only device arrays of T of a device verifier (allocated on first use, freed with it).
template <class T>
class device_arrays {
 public:
  explicit device_arrays(std::size_t count) : ptr_(count, nullptr), cap_(count, 0) {}
  device_arrays(const device_arrays&) = delete;
  device_arrays& operator=(const device_arrays&) = delete;
  ~device_arrays() {
    for (auto* p : ptr_)
      if (p != nullptr) (void)cudaFree(p);  // no throw from a destructor
  }
  //! Array i with room for at least n values (reallocated, contents lost, when it has less).
  T* get(std::size_t i, std::size_t n) {
    if (cap_[i] < n || ptr_[i] == nullptr) {
      if (ptr_[i] != nullptr) SPECDEC_CUDA_CHECK(cudaFree(ptr_[i]));
      ptr_[i] = nullptr, cap_[i] = 0;
      const std::size_t want = n < 64 ? 64 : n;
      void* p = nullptr;
      SPECDEC_CUDA_CHECK(cudaMalloc(&p, want * sizeof(T)));
      ptr_[i] = static_cast<T*>(p), cap_[i] = want;
    }
    return ptr_[i];
  }

 private:
  std::vector<T*> ptr_;
  std::vector<std::size_t> cap_;
};
using device_int32_arrays = device_arrays<std::int32_t>;

//! Refuses a request whose processing needs its context (a repetition or contextual penalty): the
//! device verifiers process rows without it (process_logits_batch).
inline void require_no_penalties(std::span<const sampling_params* const> sampling, std::string_view fn) {
  for (std::size_t b = 0; b < sampling.size(); ++b) {
    const sampling_params& p = *sampling[b];
    const std::string field = "sampling of request " + std::to_string(b) + " of the step: ";
    require(p.repetition_penalty == 1.0f, fn, field + "repetition_penalty",
            "1 (device verification applies no penalties yet: they need each row's context)", p.repetition_penalty);
    require(p.contextual_penalty == 1.0f || p.penalty_window == 0, fn, field + "contextual_penalty",
            "1 or a penalty_window of 0 (device verification applies no penalties yet: they need each row's context)",
            p.contextual_penalty);
  }
}

//! Refuses a request whose processing could move the argmax (see the file comment).
inline void require_argmax_preserving(std::span<const sampling_params* const> sampling, std::string_view fn) {
  require_no_penalties(sampling, fn);
  for (std::size_t b = 0; b < sampling.size(); ++b)
    require(sampling[b]->temperature == 0.0f, fn,
            "sampling of request " + std::to_string(b) + " of the step: temperature", "0 (greedy verification)",
            sampling[b]->temperature);
}

}  // namespace detail

//! greedy_verifier with verify_batch on a CUDA device (see the file comment). `stream` must be the
//! stream the target's forward_batch enqueued its logits on (or one ordered after it): the uploads,
//! launches and copies go there, and nothing else orders them after the forward (the legacy default
//! stream, nullptr, does not wait for non-blocking streams such as PyTorch's). A copy gets its own
//! device buffers, allocated on its first verify_batch, so copies may verify on different threads.
class cuda_greedy_verifier : public greedy_verifier {
 public:
  explicit cuda_greedy_verifier(cudaStream_t stream) : stream_(stream) {}
  cuda_greedy_verifier(const cuda_greedy_verifier& o) : greedy_verifier(o), stream_(o.stream_) {}
  cuda_greedy_verifier& operator=(const cuda_greedy_verifier& o) {
    if (this != &o) stream_ = o.stream_, buf_ = std::make_unique<detail::device_int32_arrays>(8), host_.clear();
    return *this;
  }
  cuda_greedy_verifier(cuda_greedy_verifier&&) noexcept = default;
  cuda_greedy_verifier& operator=(cuda_greedy_verifier&&) noexcept = default;

  void verify_batch(const batch_verify_input& in, verify_batch_result& out) {
    constexpr std::string_view fn = "specdec::cuda_greedy_verifier::verify_batch";
    require(!in.node_indptr.empty(), fn, "node_indptr", "B + 1 >= 1 entries", in.node_indptr.size());
    const auto B = in.node_indptr.size() - 1, N = in.tokens.size();
    require_equal(fn, "sampling.size()", B, in.sampling.size());
    detail::require_argmax_preserving(in.sampling, fn);
    enum : std::size_t { indptr, tokens, parents, accepted, num, bonus, emitted, status, count };
    auto& d = *buf_;
    std::int32_t* p[count];
    const std::size_t sizes[count] = {B + 1, N, N, N, B, B, N + B, 3};
    for (std::size_t i = 0; i < count; ++i) p[i] = d.get(i, sizes[i]);
    const auto up = [&](std::size_t i, std::span<const std::int32_t> h) {
      if (!h.empty())
        SPECDEC_CUDA_CHECK(cudaMemcpyAsync(p[i], h.data(), h.size_bytes(), cudaMemcpyHostToDevice, stream_));
    };
    up(indptr, in.node_indptr), up(tokens, in.tokens), up(parents, in.parents);
    const auto v = [&](std::size_t i) {
      return make_view<1>(p[i], {static_cast<std::int64_t>(sizes[i])}, memory_space::device);
    };
    verify_greedy_batch(cuda{.stream = stream_}, v(indptr), v(tokens), v(parents), in.logits, v(accepted), v(num),
                        v(bonus), v(emitted), v(status));
    host_.resize(N + 2 * B + 3);
    std::int32_t* h = host_.data();
    const auto down = [&](std::size_t i, std::int32_t* to) {
      if (sizes[i] > 0)
        SPECDEC_CUDA_CHECK(cudaMemcpyAsync(to, p[i], sizes[i] * sizeof(std::int32_t), cudaMemcpyDeviceToHost, stream_));
    };
    down(status, h), down(num, h + 3), down(bonus, h + 3 + B), down(accepted, h + 3 + 2 * B);
    SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream_));
    device_status::from(std::span<const std::int32_t, 3>(h, 3)).throw_if_error(fn);
    out = {};
    for (std::size_t b = 0; b < B; ++b) {
      const std::int32_t* first = h + 3 + 2 * B + in.node_indptr[b];
      out.push_back(verify_result{std::vector<std::int32_t>(first, first + h[3 + b]), h[3 + B + b]});
    }
  }

 private:
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<detail::device_int32_arrays> buf_ = std::make_unique<detail::device_int32_arrays>(8);
  std::vector<std::int32_t> host_;
};
static_assert(check_verifier<cuda_greedy_verifier>() && verifier_has_verify_batch<cuda_greedy_verifier>);

//! sample_and_match_verifier (host logits: the same per-request path) plus verify_batch on a CUDA
//! device: the step's logits are copied to a buffer of the verifier's on the device, processed there
//! (process_logits_batch: each request's temperature, top-k, top-p, min-p, eta), turned into
//! probabilities in place (logits_to_probs_batch), and verify_sample_and_match_batch decides every
//! request from its seed and stream; N + 2B int32 come back, one stream synchronisation. The results
//! equal sample_and_match_verifier's on the host's processed rows bit for bit under
//! process_logits_batch's conditions (the host at an FMA-capable level, IEEE denormals and division
//! on the device; min-p's and eta's cuts from the device's log and exp, within 1 ulp). A request with
//! a repetition or contextual penalty is refused (they need each row's context). `stream` as for
//! cuda_greedy_verifier. Device memory: the [N + B, V] float buffer (the target's logits are left as
//! they are) and the step's arrays, grown as needed and kept.
class cuda_sample_and_match_verifier : public sample_and_match_verifier {
 public:
  explicit cuda_sample_and_match_verifier(cudaStream_t stream) : stream_(stream) {}
  cuda_sample_and_match_verifier(const cuda_sample_and_match_verifier& o)
      : sample_and_match_verifier(o), stream_(o.stream_) {}
  cuda_sample_and_match_verifier& operator=(const cuda_sample_and_match_verifier& o) {
    if (this != &o) {
      stream_ = o.stream_;
      ints_ = std::make_unique<detail::device_int32_arrays>(int_count);
      words_ = std::make_unique<detail::device_arrays<std::uint64_t>>(2);
      params_ = std::make_unique<detail::device_arrays<sampling_params>>(1);
      rows_ = std::make_unique<detail::device_arrays<float>>(1);
      host_.clear();
    }
    return *this;
  }
  cuda_sample_and_match_verifier(cuda_sample_and_match_verifier&&) noexcept = default;
  cuda_sample_and_match_verifier& operator=(cuda_sample_and_match_verifier&&) noexcept = default;

  void verify_batch(const batch_verify_input& in, verify_batch_result& out) {
    constexpr std::string_view fn = "specdec::cuda_sample_and_match_verifier::verify_batch";
    require(!in.node_indptr.empty(), fn, "node_indptr", "B + 1 >= 1 entries", in.node_indptr.size());
    const auto B = in.node_indptr.size() - 1, N = in.tokens.size();
    require_equal(fn, "sampling.size()", B, in.sampling.size());
    require_equal(fn, "seeds.size()", B, in.seeds.size());
    require_equal(fn, "streams.size()", B, in.streams.size());
    for (const sampling_params* p : in.sampling) validate_sampling_params(*p, fn);
    detail::require_no_penalties(in.sampling, fn);
    const std::int64_t rows = static_cast<std::int64_t>(N + B), V = in.logits.extent(1);
    require_shape(fn, "logits", in.logits, {rows, -1});
    require(V >= 1 && in.logits.stride(1) == 1, fn, "logits", "rows of unit inner stride, vocab >= 1", V);
    // which sampling entry each row takes: request b's rows are node_indptr[b] + b .. node_indptr[b + 1] + b
    // (checked on the host here: the row_params must stay in range whatever the offsets hold)
    row_params_.assign(static_cast<std::size_t>(rows), 0);
    for (std::size_t b = 0; b < B; ++b) {
      const std::int64_t lo = static_cast<std::int64_t>(in.node_indptr[b]) + static_cast<std::int64_t>(b),
                         hi = static_cast<std::int64_t>(in.node_indptr[b + 1]) + static_cast<std::int64_t>(b) + 1;
      if (!(lo >= 0 && lo < hi && hi <= rows)) [[unlikely]]
        throw_invalid_argument(fn, "node_indptr", "offsets from 0, non-decreasing, ending at the node count",
                               "entry " + std::to_string(b) + " = " + std::to_string(in.node_indptr[b]));
      std::fill(row_params_.begin() + lo, row_params_.begin() + hi, static_cast<std::int32_t>(b));
    }
    enum : std::size_t { indptr, tokens, parents, accepted, num, bonus, emitted, rowp, st_proc, st_prob, st_ver, count };
    static_assert(count == int_count);
    auto& d = *ints_;
    std::int32_t* p[count];
    const std::size_t sizes[count] = {B + 1, N, N, N, B, B, N + B, static_cast<std::size_t>(rows), 3, 3, 3};
    for (std::size_t i = 0; i < count; ++i) p[i] = d.get(i, sizes[i]);
    std::uint64_t* seeds = words_->get(0, B);
    std::uint64_t* streams = words_->get(1, B);
    sampling_params* params = params_->get(0, B);
    float* buf = rows_->get(0, static_cast<std::size_t>(rows * V));
    const auto up = [&](void* to, const void* from, std::size_t bytes) {
      if (bytes > 0) SPECDEC_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyHostToDevice, stream_));
    };
    up(p[indptr], in.node_indptr.data(), in.node_indptr.size_bytes());
    up(p[tokens], in.tokens.data(), in.tokens.size_bytes());
    up(p[parents], in.parents.data(), in.parents.size_bytes());
    up(p[rowp], row_params_.data(), row_params_.size() * sizeof(std::int32_t));
    up(seeds, in.seeds.data(), in.seeds.size_bytes());
    up(streams, in.streams.data(), in.streams.size_bytes());
    params_host_.clear();
    for (const sampling_params* sp : in.sampling) params_host_.push_back(*sp);
    up(params, params_host_.data(), params_host_.size() * sizeof(sampling_params));
    SPECDEC_CUDA_CHECK(cudaMemcpy2DAsync(buf, static_cast<std::size_t>(V) * sizeof(float), in.logits.data(),
                                         static_cast<std::size_t>(in.logits.stride(0)) * sizeof(float),
                                         static_cast<std::size_t>(V) * sizeof(float), static_cast<std::size_t>(rows),
                                         cudaMemcpyDeviceToDevice, stream_));
    const auto v = [&](std::size_t i) {
      return make_view<1>(p[i], {static_cast<std::int64_t>(sizes[i])}, memory_space::device);
    };
    const auto w = [&](std::uint64_t* x) { return make_view<1>(x, {static_cast<std::int64_t>(B)}, memory_space::device); };
    const auto lg = make_view<2>(buf, {rows, V}, memory_space::device);
    const cuda policy{.stream = stream_};
    process_logits_batch(policy, lg, make_view<1>(params, {static_cast<std::int64_t>(B)}, memory_space::device), v(rowp),
                         v(st_proc));
    logits_to_probs_batch(policy, lg, lg, v(st_prob));
    verify_sample_and_match_batch(policy, v(indptr), v(tokens), v(parents), lg, w(seeds), w(streams), v(accepted),
                                  v(num), v(bonus), v(emitted), v(st_ver));
    host_.resize(N + 2 * B + 9);
    std::int32_t* h = host_.data();
    const auto down = [&](std::size_t i, std::int32_t* to) {
      if (sizes[i] > 0)
        SPECDEC_CUDA_CHECK(cudaMemcpyAsync(to, p[i], sizes[i] * sizeof(std::int32_t), cudaMemcpyDeviceToHost, stream_));
    };
    down(st_proc, h), down(st_prob, h + 3), down(st_ver, h + 6);
    down(num, h + 9), down(bonus, h + 9 + B), down(accepted, h + 9 + 2 * B);
    SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream_));
    for (int k = 0; k < 3; ++k) device_status::from(std::span<const std::int32_t, 3>(h + 3 * k, 3)).throw_if_error(fn);
    out = {};
    for (std::size_t b = 0; b < B; ++b) {
      const std::int32_t* first = h + 9 + 2 * B + in.node_indptr[b];
      out.push_back(verify_result{std::vector<std::int32_t>(first, first + h[9 + b]), h[9 + B + b]});
    }
  }

 private:
  static constexpr std::size_t int_count = 11;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<detail::device_int32_arrays> ints_ = std::make_unique<detail::device_int32_arrays>(int_count);
  std::unique_ptr<detail::device_arrays<std::uint64_t>> words_ = std::make_unique<detail::device_arrays<std::uint64_t>>(2);
  std::unique_ptr<detail::device_arrays<sampling_params>> params_ =
      std::make_unique<detail::device_arrays<sampling_params>>(1);
  std::unique_ptr<detail::device_arrays<float>> rows_ = std::make_unique<detail::device_arrays<float>>(1);
  std::vector<std::int32_t> host_, row_params_;
  std::vector<sampling_params> params_host_;
};
static_assert(check_verifier<cuda_sample_and_match_verifier>() &&
              verifier_has_verify_batch<cuda_sample_and_match_verifier>);

}  // namespace specdec
