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
//!                         lowest token id; verify/greedy.cuh). When a request applies a penalty
//!                         (which can move the argmax), the penalized form of verify_greedy_batch
//!                         reads each row's penalized argmax from the target's logits in place
//!                         (penalized_argmax_batch: the argmax of the row the sampled verifier's
//!                         processing below would make, without a copy or a [N + B, V] buffer);
//!                         where the device cannot hold that kernel's V-bit bitmap in one block's
//!                         shared memory (V > 2^20, or past ~790K tokens before sm_90), the rows are
//!                         copied and processed first, as the sampled verifier does.
//!
//!   cuda_sample_and_match_verifier
//!                         sample_and_match_verifier plus verify_batch: the rows processed and turned
//!                         into probabilities on the device, either every row at once
//!                         (process_logits_batch, logits_to_probs_batch in a buffer of the verifier's)
//!                         then verify_sample_and_match_batch(cuda), or only the rows the walk visits
//!                         (its logits form, one workspace row per request); sampled_rows says which.
//!
//! Processing on the device (detail::device_step_rows) applies each request's whole chain: the
//! repetition and contextual penalties over its committed tokens and each row's root path, through a
//! penalty_context built on the host each step (the seven arrays go up with the trees): from
//! batch_verify_input::histories when given (a copy of each request's pairs), else from
//! batch_verify_input::committed (a pass over each request's tokens, O(committed + V / 64)), then
//! temperature, top-k, top-p, min-p and eta. Greedy verification needs nothing else:
//! at temperature 0 (speculative_batch requires it) the processed row is one-hot at the penalized
//! argmax whatever top-k, top-p, min-p and eta say.
//!
//!   cuda_chain_speculative_verifier
//!                         chain_speculative_verifier plus verify_batch: each request's draft rows
//!                         (chain_q(): the drafter's own buffer in any memory space, or one-hot rows at
//!                         the drafted tokens when it has none) gathered into a [N + B, V] buffer of
//!                         the verifier's, then verify_chain_speculative_batch(cuda), on rows
//!                         processed as above (every row, or only those its walk reaches: its logits
//!                         form; sampled_rows says which).
//!
//!   cuda_multi_draft_verifier
//!                         multi_draft_verifier plus verify_batch: the same, with each request's draft
//!                         rows assigned by the host verifier's rule (several drafts per request), then
//!                         verify_multi_draft_batch(cuda) (every row, or its logits form).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/device_status.hpp"
#include "specdec/core/device_types.cuh"
#include "specdec/decoder/concepts.hpp"
#include "specdec/decoder/verifiers.hpp"
#include "specdec/sampling/logits_processor.cuh"
#include "specdec/sampling/penalty_context.hpp"
#include "specdec/verify/greedy.cuh"
#include "specdec/verify/multi_draft.cuh"
#include "specdec/verify/sample_and_match.cuh"
#include "specdec/verify/speculative_sampling.cuh"

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

//! The host-side checks of a step's sampling entries (invalid_argument naming `fn`): one per request
//! of the step, none null, each valid as process_logits checks it (validate_sampling_params).
inline void check_step_sampling(const batch_verify_input& in, std::string_view fn) {
  require_equal(fn, "sampling.size()", in.node_indptr.size() - 1, in.sampling.size());
  for (std::size_t b = 0; b < in.sampling.size(); ++b) {
    require(in.sampling[b] != nullptr, fn, "sampling", "an entry for every request (null at " + std::to_string(b) + ")",
            "nullptr");
    validate_sampling_params(*in.sampling[b], fn);
  }
}

//! Refuses a request that is not greedy (the greedy verifier's rows must come out one-hot), after
//! check_step_sampling.
inline void require_greedy(std::span<const sampling_params* const> sampling, std::string_view fn) {
  for (std::size_t b = 0; b < sampling.size(); ++b)
    require(sampling[b]->temperature == 0.0f, fn,
            "sampling of request " + std::to_string(b) + " of the step: temperature", "0 (greedy verification)",
            sampling[b]->temperature);
}

//! The host-side checks of a step's trees (invalid_argument naming `fn`): node_indptr [B + 1] from
//! 0, non-decreasing, ending at tokens.size(); parents as long as tokens.
inline void check_step_trees(const batch_verify_input& in, std::string_view fn) {
  require(!in.node_indptr.empty(), fn, "node_indptr", "B + 1 >= 1 entries", in.node_indptr.size());
  require_equal(fn, "parents.size()", in.tokens.size(), in.parents.size());
  validate_indptr(fn, "node_indptr", "node_indptr", in.node_indptr.data(),
                  static_cast<std::int64_t>(in.node_indptr.size() - 1), static_cast<std::int64_t>(in.tokens.size()),
                  "tokens.size()");
}

//! The host-side checks of a step's logits (invalid_argument naming `fn`), after check_step_trees:
//! [N + B, V] rows in device memory, rows at least V apart; and each request's tree against them, as
//! the host verifiers check it (the trees are host arrays): parents in [-1, i) and token ids in
//! [0, V). (The device checks the tokens again, with the verification: device_error::token.)
inline void check_step_logits(const batch_verify_input& in, std::string_view fn) {
  const std::int64_t rows = static_cast<std::int64_t>(in.tokens.size() + in.node_indptr.size() - 1);
  require_shape(fn, "logits", in.logits, {rows, -1});
  detail::require_batch_rows<cuda>(fn, in.logits);
  const std::int64_t V = in.logits.extent(1);
  require(rows <= 1 || in.logits.stride(0) >= V, fn, "logits", "rows at least vocab apart", in.logits.stride(0));
  for (std::size_t b = 0; b + 1 < in.node_indptr.size(); ++b) {
    const auto lo = static_cast<std::size_t>(in.node_indptr[b]);
    const std::int64_t n = in.node_indptr[b + 1] - in.node_indptr[b];
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int32_t t = in.tokens[lo + static_cast<std::size_t>(i)], p = in.parents[lo + static_cast<std::size_t>(i)];
      require(t >= 0 && t < V, fn, "tokens", "token ids in [0, vocab) (request " + std::to_string(b) + ")", t);
      require(p >= -1 && p < i, fn, "parents", "parents[i] in [-1, i) (request " + std::to_string(b) + ")", p);
    }
  }
}

//! The device verifiers' processing of a step's rows (see the file comment): a copy of the target's
//! logits in a buffer of its own, processed in place by process_logits_batch on the device, with a
//! penalty_context when some request applies a penalty. Host-side checks of the step's arrays first
//! (invalid_argument naming `fn`); enqueued on `stream`, no synchronisation; the device's report goes
//! to `status` (3 int32, device memory). Buffers grow as needed and are kept.
class device_step_rows {
 public:
  //! The host half, before any CUDA call: checks the step's arrays and sampling_params
  //! (invalid_argument naming `fn`), and builds the row-to-entry map and the penalty context.
  void prepare(const batch_verify_input& in, std::string_view fn) {
    check_step_trees(in, fn);
    const auto B = in.node_indptr.size() - 1;
    check_step_sampling(in, fn);
    bool penalties = false;
    for (const sampling_params* p : in.sampling) penalties = penalties || applies_penalty(*p);
    if (penalties) {
      if (in.histories.empty()) {
        require_equal(fn, "committed.size() (a request applies a penalty)", B, in.committed.size());
      } else {
        require_equal(fn, "histories.size()", B, in.histories.size());
        if (!in.committed.empty()) require_equal(fn, "committed.size()", B, in.committed.size());
        for (std::size_t b = 0; b < B; ++b) {
          if (!applies_penalty(*in.sampling[b])) continue;
          const penalty_history* h = in.histories[b];
          require(h != nullptr, fn, "histories", "a history for each request that applies a penalty (null at " +
                                                      std::to_string(b) + ")", "null");
          if (!in.committed.empty())
            require(h->length() == static_cast<std::int64_t>(in.committed[b].size()), fn, "histories",
                    "each history as long as its request's committed tokens (" + std::to_string(in.committed[b].size()) +
                        " at " + std::to_string(b) + ")",
                    h->length());
        }
      }
    }
    check_step_logits(in, fn);
    const std::int64_t rows = static_cast<std::int64_t>(in.tokens.size() + B), V = in.logits.extent(1);
    // which sampling entry each row takes: request b's rows are node_indptr[b] + b .. node_indptr[b + 1] + b
    // (in range: node_indptr was checked above)
    row_params_.assign(static_cast<std::size_t>(rows), 0);
    for (std::size_t b = 0; b < B; ++b)
      std::fill(row_params_.begin() + in.node_indptr[b] + static_cast<std::ptrdiff_t>(b),
                row_params_.begin() + in.node_indptr[b + 1] + static_cast<std::ptrdiff_t>(b) + 1,
                static_cast<std::int32_t>(b));
    if (penalties) {  // each request's committed tokens and its rows' root paths (process_tree_logits' contexts)
      if (!builder_ || builder_->vocab() != V) builder_.emplace(static_cast<std::int32_t>(V));
      builder_->clear();
      delegate_call(fn, [&] {
        for (std::size_t b = 0; b < B; ++b) {
          const auto lo = static_cast<std::size_t>(in.node_indptr[b]), hi = static_cast<std::size_t>(in.node_indptr[b + 1]);
          const auto tokens = in.tokens.subspan(lo, hi - lo), parents = in.parents.subspan(lo, hi - lo);
          if (applies_penalty(*in.sampling[b])) {
            const auto c = in.histories.empty() ? builder_->add_context(in.committed[b])
                                                : builder_->add_context(*in.histories[b]);
            builder_->add_tree_rows(c, tokens, parents);
          } else {
            for (std::size_t r = 0; r <= hi - lo; ++r) builder_->add_row(-1, {});
          }
        }
      });
    }
    penalties_ = penalties, rows_count_ = rows, vocab_ = V;
  }

  //! The step's arrays in device memory: its sampling entries, row-to-entry map and, with penalties,
  //! its penalty context (empty views without).
  struct step_arrays {
    strided_view<const sampling_params, 1> params;
    strided_view<const std::int32_t, 1> row_params;
    penalty_context context;
  };
  //! Enqueues the uploads of the step prepare() saw on `stream`; the arrays stay valid until the next call.
  step_arrays upload(const batch_verify_input& in, cudaStream_t stream) {
    const auto B = in.sampling.size();
    auto& d = *ints_;
    const auto up = [&](void* to, const void* from, std::size_t bytes) {
      if (bytes > 0) SPECDEC_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyHostToDevice, stream));
    };
    const auto up_ints = [&](std::size_t i, std::span<const std::int32_t> h) {
      std::int32_t* p = d.get(i, h.size());
      up(p, h.data(), h.size_bytes());
      return make_view<1>(static_cast<const std::int32_t*>(p), {static_cast<std::int64_t>(h.size())}, memory_space::device);
    };
    step_arrays out;
    out.row_params = up_ints(0, row_params_);
    sampling_params* params = params_->get(0, B);
    params_host_.clear();
    for (const sampling_params* sp : in.sampling) params_host_.push_back(*sp);
    up(params, params_host_.data(), params_host_.size() * sizeof(sampling_params));
    out.params = make_view<1>(static_cast<const sampling_params*>(params), {static_cast<std::int64_t>(B)}, memory_space::device);
    if (penalties_)
      out.context = {up_ints(1, builder_->distinct()),       up_ints(2, builder_->last()),
                     up_ints(3, builder_->context_indptr()), up_ints(4, builder_->context_length()),
                     up_ints(5, builder_->row_context()),    up_ints(6, builder_->path_indptr()),
                     up_ints(7, builder_->path())};
    return out;
  }


  //! Whether the step prepare() saw applies a penalty (its arrays carry a penalty_context).
  [[nodiscard]] bool penalties() const noexcept { return penalties_; }

  //! A device buffer of [rows, V] floats for the step prepare() saw (V: its vocabulary), the one
  //! process() copies the rows into; valid until the next call.
  strided_view<float, 2> buffer(std::int64_t rows) {
    float* buf = rows_->get(0, static_cast<std::size_t>(rows * vocab_));
    return make_view<2>(buf, {rows, vocab_}, memory_space::device);
  }

  //! The device half for the step prepare() saw: the processed rows [N + B, V] (device memory, valid
  //! until the next call).
  strided_view<float, 2> process(const batch_verify_input& in, cudaStream_t stream, std::int32_t* status) {
    const std::int64_t rows = rows_count_, V = vocab_;
    const step_arrays up = upload(in, stream);
    const auto lg = buffer(rows);
    float* buf = lg.data();
    // One row: its stride is never stepped and may be anything (check_step_logits allows it), but
    // cudaMemcpy2D refuses a source pitch below the row's width.
    const std::int64_t pitch = rows == 1 ? V : in.logits.stride(0);
    if (rows > 0)
      SPECDEC_CUDA_CHECK(cudaMemcpy2DAsync(buf, static_cast<std::size_t>(V) * sizeof(float), in.logits.data(),
                                           static_cast<std::size_t>(pitch) * sizeof(float),
                                           static_cast<std::size_t>(V) * sizeof(float), static_cast<std::size_t>(rows),
                                           cudaMemcpyDeviceToDevice, stream));
    const auto st = make_view<1>(status, {3}, memory_space::device);
    const cuda policy{.stream = stream};
    if (penalties_)
      process_logits_batch(policy, lg, up.params, up.row_params, up.context, st);
    else
      process_logits_batch(policy, lg, up.params, up.row_params, st);
    return lg;
  }

 private:
  std::unique_ptr<device_int32_arrays> ints_ = std::make_unique<device_int32_arrays>(8);
  std::unique_ptr<device_arrays<sampling_params>> params_ = std::make_unique<device_arrays<sampling_params>>(1);
  std::unique_ptr<device_arrays<float>> rows_ = std::make_unique<device_arrays<float>>(1);
  std::optional<penalty_context_builder> builder_;
  bool penalties_ = false;
  std::int64_t rows_count_ = 0, vocab_ = 0;
  std::vector<std::int32_t> row_params_;
  std::vector<sampling_params> params_host_;
};

//! The array-form verifiers' side of a device verifier's step: the trees (node_indptr, tokens,
//! parents) and, for the stochastic verifiers, the Philox seeds and streams uploaded; the outputs
//! (accepted, num_accepted, bonus, emitted) and three status triples (slot 0: processing, 1:
//! probabilities, 2: verification) in device memory; then the results copied down with one stream
//! synchronisation, the statuses thrown in slot order, and verify_batch_result filled. Arrays grow as
//! needed and are kept.
class device_verify_io {
 public:
  enum slot : int { processing = 0, probabilities = 1, verification = 2 };

  //! The host-side checks of what upload() reads (invalid_argument naming `fn`): the tree arrays'
  //! sizes and offsets, and the seeds' and streams' sizes when `words`. A verifier calls it before
  //! any CUDA call.
  static void check(const batch_verify_input& in, bool words, std::string_view fn) {
    check_step_trees(in, fn);
    if (words) {
      require_equal(fn, "seeds.size()", in.node_indptr.size() - 1, in.seeds.size());
      require_equal(fn, "streams.size()", in.node_indptr.size() - 1, in.streams.size());
      // the sampled walks draw from the device's blocked CDF (verify_*_batch refuse a larger
      // vocabulary too, but only after the rows were uploaded and processed)
      require(in.logits.extent(1) <= device_cdf_max_vocab, fn, "logits",
              "a vocabulary (extent 1) of at most device_cdf_max_vocab = " + std::to_string(device_cdf_max_vocab) +
                  " tokens (the sampled device verifiers)",
              in.logits.extent(1));
    }
  }

  //! Enqueues the uploads on `stream` (the seeds and streams when `words`) of a step that passed
  //! check(); B and N from `in`.
  void upload(const batch_verify_input& in, cudaStream_t stream, bool words) {
    B_ = in.node_indptr.size() - 1, N_ = in.tokens.size();
    const std::size_t sizes[count] = {B_ + 1, N_, N_, N_, B_, B_, N_ + B_, 9};
    for (std::size_t i = 0; i < count; ++i) p_[i] = ints_->get(i, sizes[i]), n_[i] = sizes[i];
    const auto up = [&](void* to, const void* from, std::size_t bytes) {
      if (bytes > 0) SPECDEC_CUDA_CHECK(cudaMemcpyAsync(to, from, bytes, cudaMemcpyHostToDevice, stream));
    };
    up(p_[indptr_], in.node_indptr.data(), in.node_indptr.size_bytes());
    up(p_[tokens_], in.tokens.data(), in.tokens.size_bytes());
    up(p_[parents_], in.parents.data(), in.parents.size_bytes());
    if (words) {
      seeds_ = words_->get(0, B_), streams_ = words_->get(1, B_);
      up(seeds_, in.seeds.data(), in.seeds.size_bytes());
      up(streams_, in.streams.data(), in.streams.size_bytes());
    }
  }

  [[nodiscard]] strided_view<std::int32_t, 1> indptr() const { return v(indptr_); }
  [[nodiscard]] strided_view<std::int32_t, 1> tokens() const { return v(tokens_); }
  [[nodiscard]] strided_view<std::int32_t, 1> parents() const { return v(parents_); }
  [[nodiscard]] strided_view<std::int32_t, 1> accepted() const { return v(accepted_); }
  [[nodiscard]] strided_view<std::int32_t, 1> num_accepted() const { return v(num_); }
  [[nodiscard]] strided_view<std::int32_t, 1> bonus() const { return v(bonus_); }
  [[nodiscard]] strided_view<std::int32_t, 1> emitted() const { return v(emitted_); }
  [[nodiscard]] strided_view<std::uint64_t, 1> seeds() const { return w(seeds_); }
  [[nodiscard]] strided_view<std::uint64_t, 1> streams() const { return w(streams_); }
  //! Status triple `s` (device memory).
  [[nodiscard]] std::int32_t* status(slot s) const { return p_[status_] + 3 * static_cast<int>(s); }
  [[nodiscard]] strided_view<std::int32_t, 1> status_view(slot s) const {
    return make_view<1>(status(s), {3}, memory_space::device);
  }

  //! The status triples a verifier wrote, for finish(): bit s for slot s.
  [[nodiscard]] static constexpr unsigned bit(slot s) noexcept { return 1u << static_cast<int>(s); }
  static constexpr unsigned all_slots = 7u;

  //! Copies the results and the status triples in `used` (bit(slot) | ...) down, synchronises
  //! `stream`, throws the first that reports (in slot order: processing, probabilities, verification)
  //! as invalid_argument naming `fn`, and fills `out`.
  void finish(const batch_verify_input& in, cudaStream_t stream, std::string_view fn, unsigned used,
              verify_batch_result& out) {
    host_.resize(9 + N_ + 2 * B_);
    std::int32_t* h = host_.data();
    const auto down = [&](std::int32_t* to, const std::int32_t* from, std::size_t n) {
      if (n > 0) SPECDEC_CUDA_CHECK(cudaMemcpyAsync(to, from, n * sizeof(std::int32_t), cudaMemcpyDeviceToHost, stream));
    };
    for (int s = 0; s < 3; ++s)
      if (used & (1u << s)) down(h + 3 * s, p_[status_] + 3 * s, 3);
    down(h + 9, p_[num_], B_), down(h + 9 + B_, p_[bonus_], B_), down(h + 9 + 2 * B_, p_[accepted_], N_);
    SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (int s = 0; s < 3; ++s)
      if (used & (1u << s)) device_status::from(std::span<const std::int32_t, 3>(h + 3 * s, 3)).throw_if_error(fn);
    out = {};
    for (std::size_t b = 0; b < B_; ++b) {
      const std::int32_t* first = h + 9 + 2 * B_ + in.node_indptr[b];
      out.push_back(verify_result{std::vector<std::int32_t>(first, first + h[9 + b]), h[9 + B_ + b]});
    }
  }

 private:
  enum : std::size_t { indptr_, tokens_, parents_, accepted_, num_, bonus_, emitted_, status_, count };
  [[nodiscard]] strided_view<std::int32_t, 1> v(std::size_t i) const {
    return make_view<1>(p_[i], {static_cast<std::int64_t>(n_[i])}, memory_space::device);
  }
  [[nodiscard]] strided_view<std::uint64_t, 1> w(std::uint64_t* x) const {
    return make_view<1>(x, {static_cast<std::int64_t>(B_)}, memory_space::device);
  }
  std::unique_ptr<device_int32_arrays> ints_ = std::make_unique<device_int32_arrays>(count);
  std::unique_ptr<device_arrays<std::uint64_t>> words_ = std::make_unique<device_arrays<std::uint64_t>>(2);
  std::int32_t* p_[count] = {};
  std::size_t n_[count] = {};
  std::uint64_t *seeds_ = nullptr, *streams_ = nullptr;
  std::size_t B_ = 0, N_ = 0;
  std::vector<std::int32_t> host_;
};

//! Runs `enqueue` (a verifier's work on `stream`, which may copy from the caller's memory); when it
//! throws, waits for what it had enqueued before rethrowing, so no copy from memory the caller may
//! free or reuse is left pending.
template <class F>
void drain_on_throw(cudaStream_t stream, F&& enqueue) {
  try {
    enqueue();
  } catch (...) {
    (void)cudaStreamSynchronize(stream);
    throw;
  }
}

//! q[at[i]] = 1 for i in [0, n): the one-hot draft rows of drafters without q rows.
__global__ void scatter_ones_kernel(float* q, const std::int64_t* at, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    q[at[i]] = 1.0f;
}

//! The draft rows [N + B, V] of a device verifier's step, gathered into a buffer of its own: rows
//! copied from the drafters' q rows wherever they live (host, device or managed memory: one
//! cudaMemcpy2DAsync per run of consecutive rows), one-hot rows set by a scatter kernel, every other
//! row 0 (a row no draft provides is never read). Planned on the host (clear, copy_rows, one_hot),
//! then enqueued.
class device_draft_rows {
 public:
  void clear(std::int64_t vocab) { vocab_ = vocab, runs_.clear(), at_host_.clear(); }
  //! Rows dst .. dst + count - 1 := src rows 0 .. count - 1 (`stride` floats apart, unit inner stride).
  void copy_rows(std::int64_t dst, const float* src, std::int64_t stride, std::int64_t count) {
    if (count <= 0) return;
    if (count == 1) stride = vocab_;  // one row: its stride is never stepped (and may be anything)
    if (!runs_.empty()) {  // extends the previous run when it continues it
      run& r = runs_.back();
      const auto end = reinterpret_cast<std::uintptr_t>(r.src) +
                       static_cast<std::uintptr_t>(r.count * stride) * sizeof(float);  // no pointer past its array
      if (r.stride == stride && r.dst + r.count == dst && end == reinterpret_cast<std::uintptr_t>(src)) {
        r.count += count;
        return;
      }
    }
    runs_.push_back({dst, src, stride, count});
  }
  //! Row dst := one-hot at `token`.
  void one_hot(std::int64_t dst, std::int32_t token) { at_host_.push_back(dst * vocab_ + token); }

  //! Enqueues the gather into a [rows, V] buffer of this object's on `stream`; returns it (device memory).
  strided_view<const float, 2> enqueue(std::int64_t rows, cudaStream_t stream) {
    const std::int64_t V = vocab_;
    float* q = q_->get(0, static_cast<std::size_t>(rows * V));
    SPECDEC_CUDA_CHECK(cudaMemsetAsync(q, 0, static_cast<std::size_t>(rows * V) * sizeof(float), stream));
    for (const run& r : runs_)
      SPECDEC_CUDA_CHECK(cudaMemcpy2DAsync(q + r.dst * V, static_cast<std::size_t>(V) * sizeof(float), r.src,
                                           static_cast<std::size_t>(r.stride) * sizeof(float),
                                           static_cast<std::size_t>(V) * sizeof(float), static_cast<std::size_t>(r.count),
                                           cudaMemcpyDefault, stream));
    if (!at_host_.empty()) {
      std::int64_t* at = at_->get(0, at_host_.size());
      SPECDEC_CUDA_CHECK(cudaMemcpyAsync(at, at_host_.data(), at_host_.size() * sizeof(std::int64_t),
                                         cudaMemcpyHostToDevice, stream));
      const auto n = static_cast<std::int64_t>(at_host_.size());
      scatter_ones_kernel<<<static_cast<unsigned>(n / 256 + 1 < 1024 ? n / 256 + 1 : 1024), 256, 0, stream>>>(q, at, n);
      cuda_check(cudaGetLastError(), "scatter_ones_kernel");
    }
    return make_view<2>(static_cast<const float*>(q), {rows, V}, memory_space::device);
  }

 private:
  struct run {
    std::int64_t dst;
    const float* src;
    std::int64_t stride, count;
  };
  std::int64_t vocab_ = 0;
  std::vector<run> runs_;
  std::vector<std::int64_t> at_host_;
  std::unique_ptr<device_arrays<std::int64_t>> at_ = std::make_unique<device_arrays<std::int64_t>>(1);
  std::unique_ptr<device_arrays<float>> q_ = std::make_unique<device_arrays<float>>(1);
};

//! What every device verifier holds: its stream and its device buffers. A copy shares the stream and
//! gets buffers of its own (allocated on first use), so copies may verify on different threads.
struct device_verifier_state {
  explicit device_verifier_state(cudaStream_t s) : stream(s) {}
  device_verifier_state(const device_verifier_state& o) : stream(o.stream) {}
  device_verifier_state& operator=(const device_verifier_state& o) {
    if (this != &o) *this = device_verifier_state(o.stream);
    return *this;
  }
  device_verifier_state(device_verifier_state&&) noexcept = default;
  device_verifier_state& operator=(device_verifier_state&&) noexcept = default;
  ~device_verifier_state() = default;

  cudaStream_t stream = nullptr;
  std::unique_ptr<device_verify_io> io = std::make_unique<device_verify_io>();
  std::unique_ptr<device_step_rows> rows = std::make_unique<device_step_rows>();
  std::unique_ptr<device_draft_rows> q = std::make_unique<device_draft_rows>();
};

//! The host half of the verifiers that read drafts, before any CUDA call: the step's checks
//! (device_verify_io::check, drafts.size(), device_step_rows::prepare), d.q cleared for the step's
//! vocabulary, then plan(b, lo, n, draft) for each request b with a tree (lo: its first node, n its
//! node count, draft: its draft_candidates; a missing draft is refused), which adds the request's
//! rows to d.q.
template <class Plan>
void plan_draft_rows(device_verifier_state& d, const batch_verify_input& in, std::string_view fn, Plan&& plan) {
  device_verify_io::check(in, true, fn);  // the trees, seeds and streams
  const auto B = in.node_indptr.size() - 1;
  require_equal(fn, "drafts.size()", B, in.drafts.size());
  d.rows->prepare(in, fn);  // the step's arrays and sampling_params
  d.q->clear(in.logits.extent(1));
  for (std::size_t b = 0; b < B; ++b) {
    const std::int64_t lo = in.node_indptr[b], n = in.node_indptr[b + 1] - lo;
    if (n == 0) continue;
    require(in.drafts[b] != nullptr, fn, "drafts", "a draft for every request with a tree (entry " + std::to_string(b) + ")",
            "nullptr");
    plan(b, lo, n, *in.drafts[b]);
  }
}

//! The device half of a stochastic verifier's step that passed its host checks (device_verify_io::check
//! with words, device_step_rows::prepare, the caller's draft plan): the trees and words
//! up, the rows processed (device_step_rows) and turned into probabilities in place, the draft rows
//! gathered when `drafts` (device_draft_rows, planned by the caller), then verify(policy, io, probs,
//! draft) enqueues the verification into io's verification slot; the results come down with one
//! synchronisation (device_verify_io::finish). Work that throws is drained first (drain_on_throw).
template <class Verify>
void run_stochastic_step(device_verifier_state& d, const batch_verify_input& in, verify_batch_result& out,
                         std::string_view fn, bool drafts, Verify&& verify) {
  drain_on_throw(d.stream, [&] {
    auto& io = *d.io;
    io.upload(in, d.stream, true);
    const auto probs = d.rows->process(in, d.stream, io.status(io.processing));
    const auto draft = drafts ? d.q->enqueue(probs.extent(0), d.stream) : strided_view<const float, 2>{};
    const cuda policy{.stream = d.stream};
    logits_to_probs_batch(policy, probs, probs, io.status_view(io.probabilities));
    verify(policy, io, probs, draft);
    io.finish(in, d.stream, fn, device_verify_io::all_slots, out);
  });
}

//! The device half of a stochastic verifier's step from logits (the logits forms of the verify/
//! functions: each request's walk processes the rows it reaches in its workspace row), after the host
//! checks as for run_stochastic_step: the trees and words up, the step's sampling arrays up
//! (device_step_rows::upload), a [B, V] workspace, the draft rows gathered when `drafts`, then
//! verify(policy, io, up, work, draft, context...) enqueues the verification into io's verification
//! slot, `context...` being up.context when a request applies a penalty and nothing otherwise (the
//! logits forms' two overloads); one synchronisation. Work that throws is drained first.
template <class Verify>
void run_logits_step(device_verifier_state& d, const batch_verify_input& in, verify_batch_result& out,
                     std::string_view fn, bool drafts, Verify&& verify) {
  drain_on_throw(d.stream, [&] {
    auto& io = *d.io;
    io.upload(in, d.stream, true);
    const auto up = d.rows->upload(in, d.stream);
    const auto work = d.rows->buffer(static_cast<std::int64_t>(in.node_indptr.size()) - 1);
    const auto draft = drafts ? d.q->enqueue(in.logits.extent(0), d.stream) : strided_view<const float, 2>{};
    if (d.rows->penalties())
      verify(cuda{.stream = d.stream}, io, up, work, draft, up.context);
    else
      verify(cuda{.stream = d.stream}, io, up, work, draft);
    io.finish(in, d.stream, fn, device_verify_io::bit(device_verify_io::verification), out);
  });
}

}  // namespace detail

//! greedy_verifier with verify_batch on a CUDA device (see the file comment). `stream` must be the
//! stream the target's forward_batch enqueued its logits on (or one ordered after it): the uploads,
//! launches and copies go there, and nothing else orders them after the forward (the legacy default
//! stream, nullptr, does not wait for non-blocking streams such as PyTorch's). A copy gets its own
//! device buffers, allocated on its first verify_batch, so copies may verify on different threads.
class cuda_greedy_verifier : public greedy_verifier {
 public:
  explicit cuda_greedy_verifier(cudaStream_t stream) : d_(stream) {}

  void verify_batch(const batch_verify_input& in, verify_batch_result& out) {
    constexpr std::string_view fn = "specdec::cuda_greedy_verifier::verify_batch";
    detail::device_verify_io::check(in, false, fn);  // the trees
    detail::check_step_sampling(in, fn);
    detail::require_greedy(in.sampling, fn);
    detail::check_step_logits(in, fn);
    bool penalties = false;
    for (const sampling_params* sp : in.sampling) penalties = penalties || detail::applies_penalty(*sp);
    if (penalties) d_.rows->prepare(in, fn);
    // a penalty can move the argmax: each row's penalized argmax read in place, where the device holds
    // the kernel's bitmap (every V <= 2^20 on sm_90); else the rows copied and processed first
    const std::int64_t V = in.logits.extent(1);
    const bool in_place = penalties && V <= detail::penalized_argmax_max_vocab && detail::penalized_argmax_fits(V);
    detail::drain_on_throw(d_.stream, [&] {
      auto& io = *d_.io;
      io.upload(in, d_.stream, false);
      const cuda policy{.stream = d_.stream};
      using io_t = detail::device_verify_io;
      if (in_place) {
        const auto up = d_.rows->upload(in, d_.stream);
        verify_greedy_batch(policy, io.indptr(), io.tokens(), io.parents(), in.logits, up.params, up.row_params,
                            up.context, io.accepted(), io.num_accepted(), io.bonus(), io.emitted(),
                            io.status_view(io.verification));
      } else {
        strided_view<const float, 2> logits = in.logits;
        if (penalties) logits = d_.rows->process(in, d_.stream, io.status(io.processing));
        verify_greedy_batch(policy, io.indptr(), io.tokens(), io.parents(), logits, io.accepted(), io.num_accepted(),
                            io.bonus(), io.emitted(), io.status_view(io.verification));
      }
      const bool processed = penalties && !in_place;
      io.finish(in, d_.stream, fn, (processed ? io_t::bit(io_t::processing) : 0u) | io_t::bit(io_t::verification), out);
    });
  }

 private:
  detail::device_verifier_state d_;
};
static_assert(check_verifier<cuda_greedy_verifier>() && verifier_has_verify_batch<cuda_greedy_verifier>);

//! Which rows the sampled device verifiers (cuda_sample_and_match_verifier,
//! cuda_chain_speculative_verifier, cuda_multi_draft_verifier) process on the device:
//!   every_row     a copy of the step's [N + B, V] logits processed (process_logits_batch, a block per
//!                 row, all rows at once over the SMs) and turned into probabilities, then the walk
//!                 (the verify function's probabilities form);
//!   visited_rows  only the rows the walk reaches (the root's and one per accepted node), each
//!                 processed when it is reached in its request's workspace row (the logits form: one
//!                 block per request, [B, V] of device memory); a request's rows are processed one
//!                 after another;
//!   automatic     visited_rows when the step has more than visited_rows_factor rows per SM, else
//!                 every_row (few rows fit the SMs in one wave, and then processing them all at once
//!                 costs about one row's time). The factor is a guess not yet measured on a GPU:
//!                 bench_cuda_step's BM_sampled_step_batch (path 0 / 1) measures it for
//!                 sample-and-match. Each verifier's default: automatic for sample-and-match;
//!                 every_row for chain and multi-draft (their visited-rows kernels are unmeasured:
//!                 BM_chain_step_batch, BM_multi_draft_step_batch; the multi-draft walk also makes a
//!                 residual pass over the vocabulary per rejected child in the same block, which
//!                 moves the crossover).
//! Where every row is valid the results are the same bits either way. The refusals differ:
//! every_row refuses a step with a bad value (a NaN or +inf logit, a row the penalties empty) in
//! any row, as the host verifiers do, visited_rows only in a row its walk reads, so under automatic
//! whether such a step throws depends on its size and the device's SM count. Pass every_row to refuse
//! every bad row always.
enum class sampled_rows { automatic, every_row, visited_rows };
inline constexpr std::int64_t visited_rows_factor = 4;

namespace detail {
//! Whether a step of `rows` rows processes the visited rows only under `choice` (sampled_rows).
[[nodiscard]] inline bool processes_visited_rows(sampled_rows choice, std::int64_t rows) {
  if (choice != sampled_rows::automatic) return choice == sampled_rows::visited_rows;
  int device = 0, sms = 0;
  SPECDEC_CUDA_CHECK(cudaGetDevice(&device));
  SPECDEC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return rows > visited_rows_factor * sms;
}
}  // namespace detail

//! sample_and_match_verifier (host logits: the same per-request path) plus verify_batch on a CUDA
//! device: each request's rows processed on the device (each request's penalties over its committed
//! tokens and each row's root path, temperature, top-k, top-p, min-p, eta) and turned into
//! probabilities, every row at once or only the rows the walk visits (sampled_rows above), and the
//! walk of verify_sample_and_match_batch decides every request from its seed and stream; N + 2B
//! int32 come back, one stream synchronisation. The results equal sample_and_match_verifier's on the
//! host's processed rows bit for bit under process_logits_batch's conditions (the host at an
//! FMA-capable level, IEEE denormals and division on the device; min-p's and eta's cuts from the
//! device's log and exp, within 1 ulp). `stream` as for cuda_greedy_verifier. Device memory: a
//! [N + B, V] (every_row) or [B, V] (visited_rows) float buffer (the target's logits are left as
//! they are) and the step's arrays, grown as needed and kept.
class cuda_sample_and_match_verifier : public sample_and_match_verifier {
 public:
  explicit cuda_sample_and_match_verifier(cudaStream_t stream, sampled_rows rows = sampled_rows::automatic)
      : d_(stream), rows_(rows) {}

  void verify_batch(const batch_verify_input& in, verify_batch_result& out) {
    constexpr std::string_view fn = "specdec::cuda_sample_and_match_verifier::verify_batch";
    detail::device_verify_io::check(in, true, fn);  // the trees, seeds and streams
    d_.rows->prepare(in, fn);  // every host-side check before any CUDA call
    if (!detail::processes_visited_rows(rows_, in.logits.extent(0))) {
      detail::run_stochastic_step(d_, in, out, fn, false, [&](const cuda& policy, const detail::device_verify_io& io,
                                                              const auto& probs, const auto&) {
        verify_sample_and_match_batch(policy, io.indptr(), io.tokens(), io.parents(), probs, io.seeds(), io.streams(),
                                      io.accepted(), io.num_accepted(), io.bonus(), io.emitted(),
                                      io.status_view(io.verification));
      });
      return;
    }
    // the logits form: the visited rows in a [B, V] workspace
    detail::run_logits_step(d_, in, out, fn, false, [&](const cuda& policy, const detail::device_verify_io& io,
                                                        const auto& up, const auto& work, const auto&,
                                                        const auto&... context) {
      verify_sample_and_match_batch(policy, io.indptr(), io.tokens(), io.parents(), in.logits, up.params,
                                    up.row_params, context..., io.seeds(), io.streams(), work, io.accepted(),
                                    io.num_accepted(), io.bonus(), io.emitted(), io.status_view(io.verification));
    });
  }

 private:
  detail::device_verifier_state d_;
  sampled_rows rows_ = sampled_rows::automatic;
};
static_assert(check_verifier<cuda_sample_and_match_verifier>() &&
              verifier_has_verify_batch<cuda_sample_and_match_verifier>);

//! chain_speculative_verifier (host logits: the same per-request path) plus verify_batch on a CUDA
//! device: the rows processed and turned into probabilities as cuda_sample_and_match_verifier does,
//! each request's draft rows gathered into a buffer of the verifier's (its drafter's q rows,
//! draft_candidates::chain_q(), copied from wherever they live: host, device or managed memory; one-hot
//! rows at the drafted tokens for a drafter without them, as the host verifier does), then
//! verify_chain_speculative_batch decides every request from its seed and stream. The results equal
//! chain_speculative_verifier's on the host's processed rows bit for bit under process_logits_batch's
//! conditions. The step's drafts (batch_verify_input::drafts) are required; a request's q rows must be
//! [>= its chain, V] with unit inner stride (checked before any CUDA call). `rows` (sampled_rows;
//! default every_row): every target row processed, or only those the walk reaches (rows 0..k of a
//! request that accepts k nodes; verify_chain_speculative_batch's logits form), which refuses a bad
//! value only in a row it reads. `stream` as for cuda_greedy_verifier. Device memory:
//! two [N + B, V] float buffers (every_row) or one and a [B, V] workspace (visited_rows), and the
//! step's arrays.
class cuda_chain_speculative_verifier : public chain_speculative_verifier {
 public:
  explicit cuda_chain_speculative_verifier(cudaStream_t stream, sampled_rows rows = sampled_rows::every_row)
      : d_(stream), rows_(rows) {}

  void verify_batch(const batch_verify_input& in, verify_batch_result& out) {
    constexpr std::string_view fn = "specdec::cuda_chain_speculative_verifier::verify_batch";
    const std::int64_t V = in.logits.extent(1);
    auto& q = *d_.q;
    // each request's draft rows: its drafter's q rows, or one-hot rows at its tokens (every check first)
    detail::plan_draft_rows(d_, in, fn, [&](std::size_t b, std::int64_t lo, std::int64_t n, const draft_candidates& d) {
      const std::int64_t row = lo + static_cast<std::int64_t>(b);
      // a chain, as chain_speculative_verifier requires (the device walk reads node i's row as depth i)
      detail::check_chain_speculative(in.tokens.subspan(static_cast<std::size_t>(lo), static_cast<std::size_t>(n)),
                                      in.parents.subspan(static_cast<std::size_t>(lo), static_cast<std::size_t>(n)),
                                      nullptr, nullptr, fn, static_cast<std::int64_t>(b));
      const auto dq = d.chain_q();
      if (dq.extent(0) > 0) {
        if (!(dq.extent(1) == V && dq.extent(0) >= n)) [[unlikely]]
          throw_invalid_argument(fn, "draft.q_rows of request " + std::to_string(b),
                                 "[>= " + std::to_string(n) + " (the chain), " + std::to_string(V) + " (the vocabulary)]",
                                 shape_string(dq));
        require_unit_inner_stride(fn, "draft.q_rows of request " + std::to_string(b), dq);
        require(dq.data() != nullptr && (n <= 1 || dq.stride(0) >= V), fn, "draft.q_rows of request " + std::to_string(b),
                "non-null rows at least vocab apart", dq.stride(0));
        q.copy_rows(row, dq.data(), dq.stride(0), n);
      } else {
        for (std::int64_t i = 0; i < n; ++i)  // tokens in [0, V): checked by plan_draft_rows (check_step_logits)
          q.one_hot(row + i, in.tokens[static_cast<std::size_t>(lo + i)]);
      }
    });
    if (!detail::processes_visited_rows(rows_, in.logits.extent(0))) {
      detail::run_stochastic_step(d_, in, out, fn, true, [&](const cuda& policy, const detail::device_verify_io& io,
                                                             const auto& probs, const auto& draft) {
        verify_chain_speculative_batch(policy, io.indptr(), io.tokens(), io.parents(), probs, draft, io.seeds(),
                                       io.streams(), io.accepted(), io.num_accepted(), io.bonus(), io.emitted(),
                                       io.status_view(io.verification));
      });
      return;
    }
    detail::run_logits_step(d_, in, out, fn, true, [&](const cuda& policy, const detail::device_verify_io& io,
                                                       const auto& up, const auto& work, const auto& draft,
                                                       const auto&... context) {
      verify_chain_speculative_batch(policy, io.indptr(), io.tokens(), io.parents(), in.logits, draft, up.params,
                                     up.row_params, context..., io.seeds(), io.streams(), work, io.accepted(),
                                     io.num_accepted(), io.bonus(), io.emitted(), io.status_view(io.verification));
    });
  }

 private:
  detail::device_verifier_state d_;
  sampled_rows rows_ = sampled_rows::every_row;
};
static_assert(check_verifier<cuda_chain_speculative_verifier>() &&
              verifier_has_verify_batch<cuda_chain_speculative_verifier>);

//! multi_draft_verifier (host logits: the same per-request path) plus verify_batch on a CUDA device:
//! the rows processed and turned into probabilities as cuda_sample_and_match_verifier does, each
//! request's draft rows assigned by multi_draft_verifier's own rule (detail::assign_multi_draft_rows:
//! row i + 1 = q at depth(i) + 1 of a draft whose path is node i's, from host, device or managed
//! memory, or one-hot rows for drafts without q rows) and gathered into a buffer of the verifier's,
//! then verify_multi_draft_batch decides every request from its seed and stream. The results equal
//! multi_draft_verifier's on the host's processed rows bit for bit under process_logits_batch's
//! conditions (and verify_multi_draft_batch's: the host at an FMA-capable level). The step's drafts
//! (batch_verify_input::drafts) are required, and its requests must share one draft_sampling mode
//! (draft_candidates::sampled_as; one drafter's requests do): a step that mixes them is refused.
//! `rows` (sampled_rows; default every_row): every target row processed, or only those the walk
//! reaches (the root's and one per accepted node; verify_multi_draft_batch's logits form), which
//! refuses a bad value only in a row it reads. `stream` as for cuda_greedy_verifier. Device memory:
//! two [N + B, V] float buffers (every_row) or one and a [B, V] workspace (visited_rows), and the
//! step's arrays.
class cuda_multi_draft_verifier : public multi_draft_verifier {
 public:
  explicit cuda_multi_draft_verifier(cudaStream_t stream, sampled_rows rows = sampled_rows::every_row)
      : d_(stream), rows_(rows) {}

  void verify_batch(const batch_verify_input& in, verify_batch_result& out) {
    constexpr std::string_view fn = "specdec::cuda_multi_draft_verifier::verify_batch";
    const std::int64_t V = in.logits.extent(1);
    auto& q = *d_.q;
    std::optional<draft_sampling> mode;
    detail::plan_draft_rows(d_, in, fn, [&](std::size_t b, std::int64_t lo, std::int64_t n, const draft_candidates& d) {
      const std::int64_t first = lo + static_cast<std::int64_t>(b);
      const draft_sampling m = d.sampled_as.value_or(draft_sampling::with_replacement);
      require(!mode || *mode == m, fn, "drafts",
              "one draft_sampling mode for the step's requests (request " + std::to_string(b) + " differs)",
              m == draft_sampling::with_replacement ? "with_replacement" : "without_replacement");
      mode = m;
      // the assignment reads the tree: checked by plan_draft_rows (check_step_logits)
      const auto tokens = in.tokens.subspan(static_cast<std::size_t>(lo), static_cast<std::size_t>(n));
      const auto parents = in.parents.subspan(static_cast<std::size_t>(lo), static_cast<std::size_t>(n));
      detail::assign_multi_draft_rows(
          tokens, parents, d, V, false, fn, scratch_,
          [&](std::int64_t row, const strided_view<const float, 2>& rows_q, std::int64_t depth) {
            q.copy_rows(first + row, rows_q.data() + depth * rows_q.stride(0), rows_q.stride(0), 1);
          },
          [&](std::int64_t row, std::int32_t token) { q.one_hot(first + row, token); });
    });
    const draft_sampling m = mode.value_or(draft_sampling::with_replacement);
    if (!detail::processes_visited_rows(rows_, in.logits.extent(0))) {
      detail::run_stochastic_step(d_, in, out, fn, true, [&](const cuda& policy, const detail::device_verify_io& io,
                                                             const auto& probs, const auto& draft) {
        verify_multi_draft_batch(policy, io.indptr(), io.tokens(), io.parents(), probs, draft, m, io.seeds(),
                                 io.streams(), io.accepted(), io.num_accepted(), io.bonus(), io.emitted(),
                                 io.status_view(io.verification));
      });
      return;
    }
    detail::run_logits_step(d_, in, out, fn, true, [&](const cuda& policy, const detail::device_verify_io& io,
                                                       const auto& up, const auto& work, const auto& draft,
                                                       const auto&... context) {
      verify_multi_draft_batch(policy, io.indptr(), io.tokens(), io.parents(), in.logits, draft, m, up.params,
                               up.row_params, context..., io.seeds(), io.streams(), work, io.accepted(),
                               io.num_accepted(), io.bonus(), io.emitted(), io.status_view(io.verification));
    });
  }

 private:
  detail::device_verifier_state d_;
  detail::multi_draft_rows_scratch scratch_;
  sampled_rows rows_ = sampled_rows::every_row;
};
static_assert(check_verifier<cuda_multi_draft_verifier>() && verifier_has_verify_batch<cuda_multi_draft_verifier>);

}  // namespace specdec
