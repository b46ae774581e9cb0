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
//! Logits processing does not run on the device yet (issue #23 item 2). Greedy verification needs
//! none of it except the penalties: a greedy verifier runs at temperature 0 (speculative_batch
//! requires it), where the processed row is one-hot at the argmax of the penalized logits whatever
//! top-k, top-p, min-p and eta say, and only a repetition or contextual penalty can move that argmax.
//! So a request with a penalty is refused with invalid_argument naming the field, before anything is
//! launched. Sampled verification (sample_and_match, chain, multi-draft: their array
//! forms exist on the device) needs the processed probabilities on the device and is not offered here.

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
#include "specdec/verify/greedy.cuh"

namespace specdec {

namespace detail {

//! Grow-only device int32 arrays of a device verifier (allocated on first use, freed with it).
class device_int32_arrays {
 public:
  explicit device_int32_arrays(std::size_t count) : ptr_(count, nullptr), cap_(count, 0) {}
  device_int32_arrays(const device_int32_arrays&) = delete;
  device_int32_arrays& operator=(const device_int32_arrays&) = delete;
  ~device_int32_arrays() {
    for (auto* p : ptr_)
      if (p != nullptr) (void)cudaFree(p);  // no throw from a destructor
  }
  //! Array i with room for at least n values (reallocated, contents lost, when it has less).
  std::int32_t* get(std::size_t i, std::size_t n) {
    if (cap_[i] < n || ptr_[i] == nullptr) {
      if (ptr_[i] != nullptr) SPECDEC_CUDA_CHECK(cudaFree(ptr_[i]));
      ptr_[i] = nullptr, cap_[i] = 0;
      const std::size_t want = n < 64 ? 64 : n;
      void* p = nullptr;
      SPECDEC_CUDA_CHECK(cudaMalloc(&p, want * sizeof(std::int32_t)));
      ptr_[i] = static_cast<std::int32_t*>(p), cap_[i] = want;
    }
    return ptr_[i];
  }

 private:
  std::vector<std::int32_t*> ptr_;
  std::vector<std::size_t> cap_;
};

//! Refuses a request whose processing could move the argmax (see the file comment).
inline void require_argmax_preserving(std::span<const sampling_params* const> sampling, std::string_view fn) {
  for (std::size_t b = 0; b < sampling.size(); ++b) {
    const sampling_params& p = *sampling[b];
    const std::string field = "sampling of request " + std::to_string(b) + " of the step: ";
    require(p.repetition_penalty == 1.0f, fn, field + "repetition_penalty",
            "1 (device verification applies no logits processing yet; penalties move the argmax)",
            p.repetition_penalty);
    require(p.contextual_penalty == 1.0f || p.penalty_window == 0, fn, field + "contextual_penalty",
            "1 or a penalty_window of 0 (device verification applies no logits processing yet; penalties move "
            "the argmax)",
            p.contextual_penalty);
    require(p.temperature == 0.0f, fn, field + "temperature", "0 (greedy verification)", p.temperature);
  }
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

}  // namespace specdec
