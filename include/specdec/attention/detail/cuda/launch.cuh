#pragma once
//! \file launch.cuh
//! The CUDA attention kernels behind decode_attention, tree_attention and hybrid_tree_attention
//! (specdec::cuda overloads). One kernel template covers all three:
//!
//!   grid = (row tile, part, kv head), 128 threads = 4 warps, each warp owns 16 query rows.
//!   A "row" is a (query token, query head of this kv head) pair, so the Hq/Hkv query heads that
//!   share a kv head sit in one tile and every K/V row is read once per tile (GQA).
//!   Parts 0..C-1 are split-KV chunks of the cache (flash-decoding, LongSpec §3.3 Flash_Decoding),
//!   part C (hybrid) or 0 (tree only) is the tree: the tree tokens' own K/V under the bit-packed
//!   ancestor mask (LongSpec §3.3 fused_mask_attn) -- the mask is applied to the tree part only.
//!   QK^T and PV run on the tensor cores (mma.sync m16n8k16, fp32 accumulate); K/V tiles are
//!   double-buffered with cp.async; the softmax is online, in base 2, with -inf-safe rescaling.
//!   Each part writes a normalised fp32 partial (O, natural-log LSE) into the workspace; a light
//!   second kernel merges the parts by log-sum-exp (LongSpec Appendix A, Proposition A.1) and
//!   writes out/lse. Both kernels are enqueued on the caller's stream; the host never reads
//!   device data (q_indptr, cache lengths) and never synchronises, so a step can be graph-captured.
//!
//! Work planning without reading device data: the number of cache chunks C is fixed on the host
//! from q.extent(0), Hq/Hkv and the SM count (enough CTAs to fill every SM twice), or is
//! options.kv_chunks when given (then a row's result does not depend on the call's other rows,
//! with kv_split_size given too); on the device a
//! request with L cached tokens is cut into chunks of ceil(L / C) tokens rounded up to the key tile
//! (or options.kv_split_size tokens when given: CTA c then processes chunks c, c + C, ...). The row
//! tiles of a ragged batch are found on the device by a warp scan over q_indptr; the grid has
//!
//! The backend by level (attention/detail/cuda/): tile.cuh (tile geometry, kernel params, key-tile
//! walk), partial_kernel.cuh (the partial kernel), merge_kernel.cuh (the merge kernel, shared with
//! the public lse_merge), plan.cuh (the launch plan), this file (one call: params, scratch,
//! launches, and the attention_backend<cuda> the entry points call).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/detail/backend.hpp"
#include "specdec/attention/detail/cuda/merge_kernel.cuh"
#include "specdec/attention/detail/cuda/partial_kernel.cuh"
#include "specdec/attention/detail/cuda/plan.cuh"
#include "specdec/attention/detail/cuda/tile.cuh"
#include "specdec/attention/detail/cuda_common.cuh"
#include "specdec/core/device_types.cuh"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/attention/lse_merge.hpp"

namespace specdec::detail {

template <class DT, int D, class Layout, bool HasCache, bool HasTree>
void launch_cuda_attention(std::string_view fn, const cuda_attention_kernel_params<DT, Layout>& kp,
                           const lse_merge_params<float, DT>& mp, const cuda_attention_plan& pl, cudaStream_t stream) {
  using tile = attention_tile<D>;
  auto* kernel = &attention_partial_kernel<DT, D, Layout, HasCache, HasTree>;
  // Per call (cheap, not a stream operation): correct on every device of a multi-GPU process.
  if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(tile::smem_bytes));
      e != cudaSuccess) [[unlikely]] {
    (void)cudaGetLastError();  // not sticky: leave no error for a later launch check to find
    // The tiles of head_dim 256 (99 KB with the kernel's static variables) exceed the 99 KB per
    // block of sm_86 / sm_89 / sm_120 devices: say so rather than pass on a bare CUDA error.
    int dev = 0, optin = 0;
    cudaFuncAttributes fa{};
    if (cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess &&
        cudaFuncGetAttributes(&fa, kernel) == cudaSuccess && tile::smem_bytes + fa.sharedSizeBytes > static_cast<std::size_t>(optin))
      throw_invalid_argument(fn, "q",
                             "a head_dim whose key/value tiles fit this device's shared memory per block (head_dim " +
                                 std::to_string(D) + " needs " + std::to_string(tile::smem_bytes + fa.sharedSizeBytes) +
                                 " bytes, device " + std::to_string(dev) + " allows " + std::to_string(optin) + ")",
                             D);
    (void)cudaGetLastError();
    cuda_check(e, "cudaFuncSetAttribute(attention_partial_kernel, max dynamic shared memory)");
  }
  const dim3 grid(static_cast<unsigned>(pl.row_tiles), static_cast<unsigned>(pl.num_parts),
                  static_cast<unsigned>(kp.io.num_kv_heads));
  kernel<<<grid, tile::threads, tile::smem_bytes, stream>>>(kp);
  cuda_check(cudaGetLastError(), "attention_partial_kernel launch");
  launch_lse_merge(mp, stream);
}

template <bool HasCache, class Layout>
auto kernel_cache(const Layout& cache) {
  if constexpr (HasCache) return cache;
  else return no_cuda_cache{};
}

//! Runs a validated call: plans, takes the scratch, converts the params once and launches the
//! partial kernel for the head_dim and the merge kernel. T is specdec's storage type (half or
//! bfloat16).
template <bool HasCache, bool HasTree, class T, class Layout>
void run_cuda_attention(std::string_view fn, const cuda& policy, const attention_io_params<T>& io, const Layout& cache,
                        const tree_kv_params<T>* tree, const attention_options& options) {
  using DT = device_type_t<T>;
  require(options.kv_split_size >= 0, fn, "options.kv_split_size", ">= 0 (0 = automatic)", options.kv_split_size);
  require(options.kernel == attention_kernel::automatic || options.kernel == attention_kernel::tiles, fn,
          "options.kernel", "automatic or tiles (the cuda backend's one kernel; rows and lanes are host only)",
          static_cast<int>(options.kernel));
  const auto pl = plan_cuda_attention(fn, HasCache, HasTree, io.total_tokens, io.num_requests, io.num_qo_heads,
                                      io.num_kv_heads, io.head_dim, options.kv_chunks);
  require(pl.num_parts <= 65535, fn, "options", "at most 65535 parts (cuda grid limit)", pl.num_parts);
  cudaStream_t stream = policy.stream;
  cuda_scratch scratch(fn, options.workspace, pl.bytes(), stream);
  if (io.total_tokens == 0) return;

  using KL = std::conditional_t<HasCache, Layout, no_cuda_cache>;
  cuda_attention_kernel_params<DT, KL> kp(kernel_cache<HasCache>(cache));
  kp.io = to_device_params(io);
  kp.group = io.num_qo_heads / io.num_kv_heads;
  kp.scale_log2 = io.scale * 1.4426950408889634f;
  if constexpr (HasTree) kp.tree = to_device_params(*tree);
  kp.num_chunks = pl.num_chunks;
  kp.kv_split_size = options.kv_split_size;
  kp.num_parts = pl.num_parts;
  auto* base = static_cast<unsigned char*>(scratch.data());
  kp.o_part = reinterpret_cast<float*>(base);
  kp.lse_part = reinterpret_cast<float*>(base + pl.o_bytes);

  // The merge reads the parts as [part, token, head, D] (LSE [part, token, head]) and writes out/lse.
  const std::int64_t rows = static_cast<std::int64_t>(io.total_tokens) * io.num_qo_heads;
  lse_merge_params<float, DT> mp;
  mp.in.o = kp.o_part;
  mp.in.o_stride_part = rows * io.head_dim;
  mp.in.o_stride_token = static_cast<std::int64_t>(io.num_qo_heads) * io.head_dim;
  mp.in.o_stride_head = io.head_dim;
  mp.in.lse = kp.lse_part;
  mp.in.lse_stride_part = rows;
  mp.in.lse_stride_token = io.num_qo_heads;
  mp.in.lse_stride_head = 1;
  mp.in.count = pl.num_parts;
  mp.out = {kp.io.o, io.o_stride_token, io.o_stride_head, io.lse, io.lse_stride_token, io.lse_stride_head};
  mp.tokens = io.total_tokens;
  mp.heads = io.num_qo_heads;
  mp.head_dim = io.head_dim;

  switch (io.head_dim) {
    case 64: launch_cuda_attention<DT, 64, KL, HasCache, HasTree>(fn, kp, mp, pl, stream); break;
    case 128: launch_cuda_attention<DT, 128, KL, HasCache, HasTree>(fn, kp, mp, pl, stream); break;
    case 256: launch_cuda_attention<DT, 256, KL, HasCache, HasTree>(fn, kp, mp, pl, stream); break;
    default: throw_invalid_argument(fn, "q", "head_dim (extent 2) of 64, 128 or 256", io.head_dim);
  }
}

//! The cuda backend of the attention entry points (see backend.hpp). The workspace depends only on
//! shapes and the SM count, never on device data.
template <>
struct attention_backend<cuda> {
  template <bool HasCache, bool HasTree, class T, class L>
  [[nodiscard]] static std::size_t workspace_bytes(std::string_view fn, const cuda&, const attention_io_params<T>& io,
                                                   const L&, const attention_options& options) {
    return plan_cuda_attention(fn, HasCache, HasTree, io.total_tokens, io.num_requests, io.num_qo_heads,
                               io.num_kv_heads, io.head_dim, options.kv_chunks)
        .bytes();
  }

  template <bool HasCache, bool HasTree, class T, class L>
  static void run(std::string_view fn, const cuda& policy, const attention_io_params<T>& io, const L& cache,
                  const tree_kv_params<T>* tree, const attention_options& options) {
    run_cuda_attention<HasCache, HasTree, T>(fn, policy, io, cache, tree, options);
  }
};

}  // namespace specdec::detail
