#pragma once
//! \file cuda_common.cuh
//! Building blocks of the CUDA attention backend: tensor-core (mma.sync m16n8k16) and cp.async
//! wrappers, the per-device SM count, host-side validation of device tensors, and workspace
//! acquisition. Needs nvcc; device code needs sm_80 or newer (the project builds for sm_90).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <array>
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
// Device helpers
// ---------------------------------------------------------------------------------------------

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

//! Throws unless `v` lives in memory the device can dereference (device or managed).
template <class V>
void require_device_accessible(std::string_view fn, std::string_view argument, const V& v) {
  require(device_accessible(v.space()), fn, argument, "device-accessible memory (device or managed)", v.space());
}

//! The cuda kernels copy 16-byte chunks of head_dim rows: a row's start must be 16-byte aligned,
//! so the data pointer must be and the token/head strides must be multiples of 8 elements.
template <class V>
void require_rows_16b_aligned(std::string_view fn, std::string_view argument, const V& v) {
  const auto addr = reinterpret_cast<std::uintptr_t>(v.data());
  require(addr % 16 == 0, fn, argument, "a 16-byte aligned data pointer (cuda backend)",
          "address % 16 = " + std::to_string(addr % 16));
  for (int i = 0; i + 1 < V::rank; ++i)
    require(v.stride(i) % 8 == 0 || v.extent(i) <= 1, fn, argument,
            "strides in dimension " + std::to_string(i) + " that are multiples of 8 elements (16-byte rows)",
            v.stride(i));
}

//! Storage types the cuda kernels are instantiated for (tensor cores take 16-bit inputs).
template <class T>
inline constexpr bool cuda_attention_storage_v =
    std::is_same_v<std::remove_cv_t<T>, half> || std::is_same_v<std::remove_cv_t<T>, bfloat16>;

template <class T>
void require_cuda_storage(std::string_view fn, std::string_view argument) {
  if constexpr (!cuda_attention_storage_v<T>)
    throw_invalid_argument(fn, argument,
                           "element type float16 or bfloat16 (the cuda backend has no fp32 kernels; use host)",
                           attention_type_name<T>());
}

//! The cuda counterpart of detail::validate_io: the same checks except that tensors must be
//! device-accessible and 16-byte row aligned, and that q_indptr's values (device memory) are not
//! read: q_indptr[0] == 0, non-decreasing, last == q.extent(0) is a documented precondition.
template <class T, class Q, class I, class O, class LS>
attention_io_params<T> validate_io_cuda(std::string_view fn, const Q& q, const I& q_indptr, const O* out,
                                        const LS* lse, int num_requests, int num_kv_heads, float scale) {
  require_rank<Q>(fn, "q", 3);
  require_rank<O>(fn, "out", 3);
  require_rank<LS>(fn, "lse", 2);
  require_rank<I>(fn, "q_indptr", 1);
  require_device_accessible(fn, "q", q);
  if (out) require_device_accessible(fn, "out", *out);
  if (lse) require_device_accessible(fn, "lse", *lse);
  require_device_accessible(fn, "q_indptr", q_indptr);
  const std::int64_t tokens = q.extent(0), hq = q.extent(1), d = q.extent(2);
  require(supported_head_dim(d), fn, "q", "head_dim (extent 2) of 64, 128 or 256", d);
  require(hq > 0, fn, "q", "at least one query head (extent 1)", hq);
  require(num_kv_heads > 0 && hq % num_kv_heads == 0, fn, "q",
          "a number of query heads that is a multiple of the number of kv heads (" + std::to_string(num_kv_heads) +
              ")",
          hq);
  require(num_kv_heads <= 65535, fn, "q", "at most 65535 kv heads (cuda grid limit)", num_kv_heads);
  require(tokens * hq <= INT32_MAX, fn, "q", "tokens * heads below 2^31 on the cuda backend", tokens * hq);
  require_unit_inner_stride(fn, "q", q);
  if (tokens > 0) require_rows_16b_aligned(fn, "q", q);
  if (out) {
    require_shape(fn, "out", *out, {tokens, hq, d});
    require_unit_inner_stride(fn, "out", *out);
    if (tokens > 0) require_rows_16b_aligned(fn, "out", *out);
  }
  if (lse) require_shape(fn, "lse", *lse, {tokens, hq});
  if (num_requests < 0) num_requests = static_cast<int>(q_indptr.extent(0)) - 1;
  require(num_requests >= 0, fn, "q_indptr", "at least one element (num_requests + 1)", q_indptr.extent(0));
  require_shape(fn, "q_indptr", q_indptr, {static_cast<std::int64_t>(num_requests) + 1});
  require(q_indptr.stride(0) == 1 || num_requests == 0, fn, "q_indptr", "unit stride", q_indptr.stride(0));
  require(q_indptr.data() != nullptr, fn, "q_indptr", "non-null data", "nullptr");
  require(std::isfinite(scale), fn, "options.scale", "a finite value (0 = 1/sqrt(head_dim))", scale);

  attention_io_params<T> p;
  p.q = static_cast<const T*>(q.data());
  p.q_stride_token = q.stride(0);
  p.q_stride_head = q.stride(1);
  if (out) {
    p.o = const_cast<T*>(static_cast<const T*>(out->data()));
    p.o_stride_token = out->stride(0);
    p.o_stride_head = out->stride(1);
  }
  if (lse) {
    p.lse = const_cast<float*>(static_cast<const float*>(lse->data()));
    p.lse_stride_token = lse->stride(0);
    p.lse_stride_head = lse->stride(1);
  }
  p.q_indptr = static_cast<const std::int32_t*>(q_indptr.data());
  p.num_requests = num_requests;
  p.total_tokens = static_cast<int>(tokens);
  p.num_qo_heads = static_cast<int>(hq);
  p.num_kv_heads = num_kv_heads;
  p.head_dim = static_cast<int>(d);
  p.scale = scale == 0.0f ? 1.0f / std::sqrt(static_cast<float>(d)) : scale;
  require(tokens == 0 || p.q != nullptr, fn, "q", "non-null data", "nullptr");
  require(tokens == 0 || !out || p.o != nullptr, fn, "out", "non-null data", "nullptr");
  require(tokens == 0 || !lse || p.lse != nullptr, fn, "lse", "non-null data", "nullptr");
  return p;
}

//! The cuda counterpart of detail::validate_cache: layout geometry (validate_kv_layout skips the
//! per-request checks for device memory), device accessibility and a matching head_dim.
template <class L, class Q>
void validate_cache_cuda(std::string_view fn, const L& cache, const Q& q) {
  require_rank<Q>(fn, "q", 3);
  require(supported_head_dim(q.extent(2)), fn, "q", "head_dim (extent 2) of 64, 128 or 256", q.extent(2));
  validate_kv_layout(cache, fn, "cache");
  require(device_accessible(cache.space()), fn, "cache", "device-accessible memory (device or managed)",
          cache.space());
  require(cache.head_dim() == q.extent(2), fn, "cache",
          "head_dim() equal to q's head_dim " + std::to_string(q.extent(2)), cache.head_dim());
  // Layouts that expose their base pointers get the alignment the 16-byte row copies need.
  auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  if constexpr (requires { cache.k; cache.v; })
    require(aligned(cache.k) && aligned(cache.v), fn, "cache", "16-byte aligned k and v buffers (cuda backend)",
            "misaligned");
  if constexpr (requires { cache.k_pages; cache.v_pages; })
    require(aligned(cache.k_pages) && aligned(cache.v_pages), fn, "cache",
            "16-byte aligned k_pages and v_pages (cuda backend)", "misaligned");
}

//! The cuda counterpart of detail::validate_tree: shapes, strides, spaces. The mask's length and
//! contents depend on q_indptr's values (device memory) and are a documented precondition (the
//! host overload checks them).
template <class T, class K, class V, class M>
tree_kv_params<T> validate_tree_cuda(std::string_view fn, const attention_io_params<T>& io, const K& spec_k,
                                     const V& spec_v, const M& mask) {
  require_rank<K>(fn, "spec_k", 3);
  require_rank<V>(fn, "spec_v", 3);
  require_rank<M>(fn, "mask", 1);
  require_device_accessible(fn, "spec_k", spec_k);
  require_device_accessible(fn, "spec_v", spec_v);
  require_device_accessible(fn, "mask", mask);
  require_shape(fn, "spec_k", spec_k, {io.total_tokens, io.num_kv_heads, io.head_dim});
  require_shape(fn, "spec_v", spec_v, {io.total_tokens, io.num_kv_heads, io.head_dim});
  require_unit_inner_stride(fn, "spec_k", spec_k);
  require_unit_inner_stride(fn, "spec_v", spec_v);
  if (io.total_tokens > 0) {
    require_rows_16b_aligned(fn, "spec_k", spec_k);
    require_rows_16b_aligned(fn, "spec_v", spec_v);
    // At least one word per token: n_r * words_per_row(n_r) >= n_r.
    require(mask.extent(0) >= io.total_tokens, fn, "mask",
            "at least q.extent(0) = " + std::to_string(io.total_tokens) + " words (sum_r n_r * words_per_row(n_r))",
            mask.extent(0));
    require(mask.stride(0) == 1 || mask.extent(0) <= 1, fn, "mask", "unit stride", mask.stride(0));
    require(mask.data() != nullptr, fn, "mask", "non-null data", "nullptr");
  }
  tree_kv_params<T> t;
  t.k = static_cast<const T*>(spec_k.data());
  t.k_stride_token = spec_k.stride(0);
  t.k_stride_head = spec_k.stride(1);
  t.v = static_cast<const T*>(spec_v.data());
  t.v_stride_token = spec_v.stride(0);
  t.v_stride_head = spec_v.stride(1);
  t.mask = static_cast<const mask_word*>(mask.data());
  return t;
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
