#pragma once
//! \file tile.cuh
//! Level 1 of the CUDA attention backend (see launch.cuh for the whole call): the tile geometry
//! per head_dim, the partial kernel's params, the 16-bit storage helpers of the tiles and the walk
//! of a cache part's key tiles (shared with host code).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/detail/cuda_common.cuh"
#include "specdec/core/bitmask.hpp"
#include "specdec/core/config.hpp"

namespace specdec::detail {

//! Tile geometry per head_dim: 64 query rows per CTA (16 per warp), BN keys per K/V tile, shared
//! rows padded by 8 elements (16 bytes) so the fragment loads and ldmatrix are bank-conflict free.
//! BN divides 64, so a key tile of the tree never straddles a mask word.
template <int D>
struct attention_tile {
  static constexpr int bm = 64;
  static constexpr int bn = D == 256 ? 32 : 64;
  static constexpr int lds = D + 8;
  static constexpr int threads = 128;
  static constexpr std::size_t smem_bytes = static_cast<std::size_t>(bm + 4 * bn) * lds * 2;
};

//! Stand-in layout type of tree_attention (no cache part); never dereferenced.
struct no_cuda_cache {};

//! Everything one launch of the partial kernel needs, by value. DT = __half or __nv_bfloat16. The
//! io and tree params are the validated host params converted once (to_device_params).
template <class DT, class Layout>
struct cuda_attention_kernel_params {
  //! The layout is copied in (a user layout need not be default-constructible).
  explicit cuda_attention_kernel_params(const Layout& c) : cache(c) {}
  attention_io_params<DT> io;  //!< q, q_indptr and the sizes (out and lse are the merge's)
  int group = 1;               //!< Hq / Hkv
  float scale_log2 = 0.0f;     //!< softmax scale * log2(e): logits are exponentiated in base 2
  Layout cache;
  tree_kv_params<DT> tree;     //!< the tree tokens' K/V and mask (tree and hybrid attention)
  int num_chunks = 0;     //!< C: cache parts (CTAs per row tile and kv head over the cache)
  int kv_split_size = 0;  //!< 0 = ceil(L / C) rounded up to the key tile, per request
  int num_parts = 0;      //!< C + (tree ? 1 : 0)
  float* o_part = nullptr;    //!< [num_parts, total_tokens, Hq, D] normalised partial outputs
  float* lse_part = nullptr;  //!< [num_parts, total_tokens, Hq] natural-log partial LSEs
};

//! Exponent bits of the 16-bit storage type: all set = NaN or infinity (see nonfinite_bits).
template <class DT>
__device__ __forceinline__ constexpr unsigned short nonfinite_exponent_mask() {
  if constexpr (std::is_same_v<DT, __nv_bfloat16>) return 0x7f80;
  else return 0x7c00;
}

__device__ __forceinline__ std::uint32_t ld_shared_u32(const void* p) {
  return *static_cast<const std::uint32_t*>(p);
}

//! The key tiles that cache part `part` (of C) walks for a request with `length` cached tokens:
//! chunks part, part + C, part + 2C, ... of `split` tokens (user_split > 0, or else ceil(length / C)
//! rounded up to the key tile, so each part gets at most one chunk), each cut into tpc tiles of at
//! most bn keys; a tile past its chunk's end is empty (kb = ke = 0). Host and device code share it
//! (tests/cuda/test_attention_validation.cu checks on the host that the tiles of all parts cover
//! [0, length) exactly once).
struct cache_chunk_walk {
  long long length = 0, split = 1, num_chunks = 1, part = 0;
  int tpc = 1, n_iter = 0;
  cache_chunk_walk() = default;
  SPECDEC_HOST_DEVICE cache_chunk_walk(int length_, int num_chunks_, int user_split, int part_, int bn)
      : length(length_), num_chunks(num_chunks_), part(part_) {
    if (user_split > 0) {
      split = user_split;
    } else {
      const long long per = (length + num_chunks - 1) / num_chunks;
      const long long rounded = (per + bn - 1) / bn * bn;
      split = rounded > bn ? rounded : bn;
    }
    const long long nchunks = length > 0 ? (length + split - 1) / split : 0;
    const long long count = part < nchunks ? (nchunks - 1 - part) / num_chunks + 1 : 0;
    // A chunk never holds more than `length` keys: bound the tiles per chunk by it, not by a huge split.
    const long long span = split < length ? split : length;
    tpc = span > 0 ? static_cast<int>((span + bn - 1) / bn) : 1;
    n_iter = static_cast<int>(count * tpc);
  }
  //! Keys [kb, ke) of iteration `it` (0 <= it < n_iter).
  SPECDEC_HOST_DEVICE void range(int it, int bn, int& kb, int& ke) const {
    const long long c = part + static_cast<long long>(it / tpc) * num_chunks;
    const long long b = c * split + static_cast<long long>(it % tpc) * bn;
    const long long chunk_end = (c + 1) * split < length ? (c + 1) * split : length;
    if (b >= chunk_end) {
      kb = ke = 0;
    } else {
      kb = static_cast<int>(b);
      ke = static_cast<int>(b + bn < chunk_end ? b + bn : chunk_end);
    }
  }
};

}  // namespace specdec::detail
