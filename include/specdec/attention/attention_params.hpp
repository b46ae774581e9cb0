#pragma once
//! \file attention_params.hpp
//! Shared vocabulary of the attention primitives: the options every call takes, the caller-owned
//! workspace, and the params structs (raw pointers, strides, sizes) that backends consume.
//!
//! Layering of every attention entry point (lse_merge, decode_attention, tree_attention,
//! hybrid_tree_attention):
//!   public function (tensor_like / kv_layout arguments)
//!     -> host-side validation (detail::validate_*; throws specdec::invalid_argument)
//!     -> params structs of raw pointers/strides/sizes (this header: attention_io_params and
//!        tree_kv_params; the cache stays the caller's kv_layout)
//!     -> backend: attention_backend<policy> (detail/backend.hpp): the host backend in
//!        detail/host/, the CUDA backend in detail/cuda/ (converting the same structs once with
//!        to_device_params).
//!
//! Conventions (design brief): Q/O are [total_tokens, Hq, D] with unit inner stride; LSE is fp32
//! [total_tokens, Hq], natural log of the softmax denominator of the *scaled* logits, -inf when a
//! query saw no key. GQA: query head h uses kv head h / (Hq / Hkv).

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>

#include "specdec/core/bitmask.hpp"
#include "specdec/core/dtype.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/tensor.hpp"

namespace specdec {

class attention_workspace;

//! Which kernel runs the cache parts of an attention call (the tree part of tree and hybrid
//! attention always runs the masked tile kernel). Pinning one is for tests and benchmarks; the
//! default picks per request.
enum class attention_kernel {
  //! host: for the cache of a request with at most 8 query rows per kv head (tokens x Hq / Hkv: a
  //! decode step, a small tree) the rows kernel, with 9-16 the lanes kernel, with 17-32 the lanes
  //! kernel at the avx512 SIMD level (active_simd_level) and the tile kernel below it, else the
  //! tile kernel (tree tokens always run the tile kernel); cuda: its tile kernel.
  automatic,
  //! The host rows kernel (vectorised along head_dim, one dot product per key and query row). Needs at
  //! most 8 query rows per kv head in every request; host only.
  rows,
  //! The tile kernel (vectorised over query rows: 64-key tiles through score and PV microkernels).
  tiles,
  //! The host lanes kernel (a request's query rows in the lanes of one or two vectors, K/V rows read
  //! in place in 32-key blocks). Needs at most 32 query rows per kv head in every request; host only.
  lanes,
};

//! Options shared by decode_attention, tree_attention and hybrid_tree_attention.
//! Designated-initialiser friendly: `{.scale = 0.1f, .workspace = &ws}`.
struct attention_options {
  //! Softmax scale applied to q.k; 0 selects the default 1/sqrt(head_dim). Must be finite.
  float scale = 0.0f;
  //! KV tokens per split-KV chunk (flash-decoding); 0 selects the heuristic documented at
  //! detail::choose_kv_split. Any positive value is honoured as given.
  int kv_split_size = 0;
  //! CUDA: the number of parts a request's cache is split across (CTA c takes chunks c, c + C, ...
  //! of kv_split_size tokens, one online softmax over them, then the parts are merged); 0 selects
  //! enough parts to fill the GPU twice, from the call's query rows and kv heads. In [0, 1024]. The
  //! automatic count changes with the number of query rows, and with it the order a row's cache is
  //! summed in: fixing both kv_split_size and kv_chunks makes each row's result independent of the
  //! other rows and requests of the call (batch invariance: the same request gives the same bits
  //! alone or in any batch, and a greedy speculative step the same tokens as an autoregressive one).
  //! The host backend splits the cache by kv_split_size alone (a fixed value makes it batch
  //! invariant) and checks this value's range only.
  int kv_chunks = 0;
  //! Caller-owned scratch memory. When set, the call performs no heap allocation and throws
  //! invalid_argument if the workspace is smaller than the matching *_workspace_bytes(...) result.
  //! When null the call allocates its scratch internally. Host: the size includes one staging slot
  //! per thread the policy lets a call use (2 x 64 x head_dim floats each: the kernels' K/V tiles,
  //! kept off the stack so that every kernel runs on a thread with a 128 KiB stack), so size it with
  //! the policy (num_threads) of the calls or one allowing more threads.
  attention_workspace* workspace = nullptr;
  //! The kernel for the cache parts; automatic unless a test or benchmark pins one.
  attention_kernel kernel = attention_kernel::automatic;
};

//! Scratch memory for the attention primitives, sized once and reused across calls so that the
//! hot path never allocates. Either owns host memory (constructor with a byte count, or reserve())
//! or wraps caller memory (e.g. a CUDA allocation for the cuda backend).
//! Typical use: `ws.reserve(hybrid_tree_attention_workspace_bytes(host{}, q, cache, q_indptr));`
//! once for the largest shapes, then pass `{.workspace = &ws}` to every call.
class attention_workspace {
 public:
  attention_workspace() = default;
  //! Owns `bytes` bytes of host memory (64-byte aligned).
  explicit attention_workspace(std::size_t bytes) { reserve(bytes); }
  //! Wraps caller memory; the caller keeps it alive and the workspace never grows it.
  attention_workspace(void* data, std::size_t bytes, memory_space space = memory_space::host) noexcept
      : data_(data), bytes_(bytes), space_(space) {}

  //! Grows owned host memory to at least `bytes` (no-op when already large enough). Throws
  //! invalid_argument on a workspace that wraps caller memory and is too small.
  void reserve(std::size_t bytes) {
    if (bytes <= bytes_) return;
    require(owned_ != nullptr || data_ == nullptr, "specdec::attention_workspace::reserve", "bytes",
            "at most the size of the wrapped caller memory (" + std::to_string(bytes_) + " bytes)", bytes);
    require(bytes <= std::numeric_limits<std::size_t>::max() - 63, "specdec::attention_workspace::reserve", "bytes",
            "at most SIZE_MAX - 63 (rounded up to 64 bytes)", bytes);
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    owned_.reset(static_cast<std::byte*>(::operator new(rounded, std::align_val_t{64})));
    data_ = owned_.get();
    bytes_ = rounded;
    space_ = memory_space::host;
  }
  [[nodiscard]] void* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size_bytes() const noexcept { return bytes_; }
  [[nodiscard]] memory_space space() const noexcept { return space_; }

 private:
  struct aligned_delete {
    void operator()(std::byte* p) const noexcept { ::operator delete(p, std::align_val_t{64}); }
  };
  std::unique_ptr<std::byte, aligned_delete> owned_;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  memory_space space_ = memory_space::host;
};

//! Q/O/LSE geometry and pointers shared by all attention params structs. Strides in elements.
template <class T>
struct attention_io_params {
  const T* q = nullptr;                 //!< [total_tokens, num_qo_heads, head_dim]
  std::int64_t q_stride_token = 0, q_stride_head = 0;
  T* o = nullptr;                       //!< same shape as q
  std::int64_t o_stride_token = 0, o_stride_head = 0;
  float* lse = nullptr;                 //!< [total_tokens, num_qo_heads], natural log
  std::int64_t lse_stride_token = 0, lse_stride_head = 0;
  const std::int32_t* q_indptr = nullptr;  //!< [num_requests + 1]; request r owns tokens [q_indptr[r], q_indptr[r+1])
  int num_requests = 0;
  int total_tokens = 0;
  int num_qo_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  float scale = 0.0f;  //!< resolved softmax scale (never 0 here)
};

//! The speculative (tree) tokens' own K/V and their bit-packed ancestor mask. spec_k/spec_v are
//! [total_tokens, num_kv_heads, head_dim] indexed like q (token i of request r is row q_indptr[r] + i).
//! mask: per request an n_r x n_r matrix, rows words_per_row(n_r) words, LSB first, requests packed
//! back to back (offset of request r = sum over r' < r of n_r' * words_per_row(n_r')).
template <class T>
struct tree_kv_params {
  const T* k = nullptr;
  std::int64_t k_stride_token = 0, k_stride_head = 0;
  const T* v = nullptr;
  std::int64_t v_stride_token = 0, v_stride_head = 0;
  const mask_word* mask = nullptr;
};

//! Head dimensions the attention kernels are instantiated for.
[[nodiscard]] constexpr bool supported_head_dim(std::int64_t d) noexcept { return d == 64 || d == 128 || d == 256; }

inline namespace SPECDEC_HOST_ISA {  // the answer depends on the file's SPECDEC_HOST_HEAD_DIMS
//! Whether this translation unit compiles the host attention kernels for head_dim `d`: one of 64,
//! 128 and 256 that SPECDEC_HOST_HEAD_DIMS (core/isa.hpp) keeps, all three when it is not defined.
//! A host call at another supported head_dim throws invalid_argument naming the macro.
[[nodiscard]] constexpr bool host_head_dim_compiled(std::int64_t d) noexcept {
  return (d == 64 && (SPECDEC_HOST_HEAD_DIM_MASK & 1) != 0) || (d == 128 && (SPECDEC_HOST_HEAD_DIM_MASK & 2) != 0) ||
         (d == 256 && (SPECDEC_HOST_HEAD_DIM_MASK & 4) != 0);
}
}  // namespace SPECDEC_HOST_ISA

}  // namespace specdec
