#pragma once
//! \file cuda_attention.cuh
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
//! from q.extent(0), Hq/Hkv and the SM count (enough CTAs to fill every SM twice); on the device a
//! request with L cached tokens is cut into chunks of ceil(L / C) tokens rounded up to the key tile
//! (or options.kv_split_size tokens when given: CTA c then processes chunks c, c + C, ...). The row
//! tiles of a ragged batch are found on the device by a warp scan over q_indptr; the grid has
//! ceil(T * group / 64) + R row tiles, an upper bound of sum_r ceil(n_r * group / 64).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/detail/backend.hpp"
#include "specdec/attention/detail/cuda_common.cuh"
#include "specdec/attention/detail/merge_state.hpp"
#include "specdec/core/bitmask.hpp"
#include "specdec/core/config.hpp"
#include "specdec/core/device_types.cuh"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"

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

//! Everything one launch of the attention kernels needs, by value. DT = __half or __nv_bfloat16.
template <class DT, class Layout>
struct cuda_attention_kernel_params {
  //! The layout is copied in (a user layout need not be default-constructible).
  explicit cuda_attention_kernel_params(const Layout& c) : cache(c) {}
  const DT* q = nullptr;
  std::int64_t q_stride_token = 0, q_stride_head = 0;
  const std::int32_t* q_indptr = nullptr;
  int num_requests = 0, total_tokens = 0, num_qo_heads = 0, num_kv_heads = 0, group = 1;
  float scale_log2 = 0.0f;  //!< softmax scale * log2(e): logits are exponentiated in base 2
  Layout cache;
  const DT* tree_k = nullptr;
  std::int64_t tree_k_stride_token = 0, tree_k_stride_head = 0;
  const DT* tree_v = nullptr;
  std::int64_t tree_v_stride_token = 0, tree_v_stride_head = 0;
  const mask_word* mask = nullptr;
  int num_chunks = 0;     //!< C: cache parts (CTAs per row tile and kv head over the cache)
  int kv_split_size = 0;  //!< 0 = ceil(L / C) rounded up to the key tile, per request
  int num_parts = 0;      //!< C + (tree ? 1 : 0)
  float* o_part = nullptr;    //!< [num_parts, total_tokens, Hq, D] normalised partial outputs
  float* lse_part = nullptr;  //!< [num_parts, total_tokens, Hq] natural-log partial LSEs
};

template <class DT>
__device__ __forceinline__ float to_f(DT x) {
  if constexpr (std::is_same_v<DT, __nv_bfloat16>) return __bfloat162float(x);
  else if constexpr (std::is_same_v<DT, __half>) return __half2float(x);
  else return static_cast<float>(x);
}
template <class DT>
__device__ __forceinline__ DT from_f(float x) {
  if constexpr (std::is_same_v<DT, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else if constexpr (std::is_same_v<DT, __half>) return __float2half_rn(x);
  else return static_cast<DT>(x);
}

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

//! Partial attention of one (row tile, part, kv head). See the file comment for the decomposition.
template <class DT, int D, class Layout, bool HasCache, bool HasTree>
__global__ void __launch_bounds__(attention_tile<D>::threads)
    attention_partial_kernel(const cuda_attention_kernel_params<DT, Layout> p) {
  using tile = attention_tile<D>;
  constexpr int BM = tile::bm, BN = tile::bn, LDS = tile::lds, NT = tile::threads;
  constexpr int CPR = D / 8;  // 16-byte chunks per row
  constexpr float neg_inf = -INFINITY;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  DT* const qs = reinterpret_cast<DT*>(smem_raw);  // [BM][LDS]
  DT* const ks = qs + BM * LDS;                    // [2][BN][LDS]
  DT* const vs = ks + 2 * BN * LDS;                // [2][BN][LDS]
  __shared__ int s_req, s_tile, s_n;
  __shared__ long long s_mask_off;
  // Tree tiles: keys of the tile whose V row held NaN/Inf (bit = key - kb), double-buffered by tile.
  __shared__ unsigned long long s_bad_v[2];

  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int part = static_cast<int>(blockIdx.y), h = static_cast<int>(blockIdx.z);
  const long long z = blockIdx.x;
  const int group = p.group;

  // Which request and which of its row tiles is blockIdx.x: warp 0 scans q_indptr 32 requests at
  // a time (inclusive scans of the tile counts and mask word counts).
  if (tid == 0) s_bad_v[0] = s_bad_v[1] = 0ull;
  if (warp == 0) {
    if (lane == 0) s_req = -1;
    __syncwarp();
    long long tile_base = 0, mask_base = 0;
    for (int r0 = 0; r0 < p.num_requests; r0 += 32) {
      const int r = r0 + lane;
      long long n = 0;
      if (r < p.num_requests) n = p.q_indptr[r + 1] - p.q_indptr[r];
      const long long nt = (n * group + BM - 1) / BM;
      const long long mw = n * ((n + 63) / 64);
      long long ti = nt, mi = mw;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const long long a = __shfl_up_sync(0xffffffffu, ti, o);
        const long long b = __shfl_up_sync(0xffffffffu, mi, o);
        if (lane >= o) {
          ti += a;
          mi += b;
        }
      }
      const long long first = tile_base + ti - nt;
      if (r < p.num_requests && nt > 0 && z >= first && z < first + nt) {
        s_req = r;
        s_tile = static_cast<int>(z - first);
        s_n = static_cast<int>(n);
        s_mask_off = mask_base + mi - mw;
      }
      tile_base += __shfl_sync(0xffffffffu, ti, 31);
      mask_base += __shfl_sync(0xffffffffu, mi, 31);
      if (tile_base > z) break;  // warp-uniform
    }
  }
  __syncthreads();
  const int r = s_req;
  if (r < 0) return;  // block-uniform: a spare tile of the upper-bound grid
  const int n = s_n;
  const int rows = n * group;
  const int row0 = s_tile * BM;
  const int tok0 = p.q_indptr[r];
  const bool is_tree = HasTree && (!HasCache || part == p.num_chunks);

  // Key tiles of this part. Cache: chunks part, part + C, ... of `split` tokens, each cut into
  // ceil(split / BN) tiles (a tile past its chunk's end is empty). Tree: keys 0 .. (last token of
  // this row tile) -- later tree tokens are never ancestors (topological order), so skip them.
  int n_iter = 0, tree_keys = 0;
  cache_chunk_walk walk;
  if (is_tree) {
    const int last_row = min(rows, row0 + BM) - 1;
    tree_keys = last_row / group + 1;
    n_iter = (tree_keys + BN - 1) / BN;
  } else {
    if constexpr (HasCache) {
      walk = cache_chunk_walk(p.cache.length(r), p.num_chunks, p.kv_split_size, part, BN);
      n_iter = walk.n_iter;
    }
  }
  auto key_range = [&](int it, int& kb, int& ke) {
    if (is_tree) {
      kb = it * BN;
      ke = min(tree_keys, kb + BN);
    } else {
      walk.range(it, BN, kb, ke);
    }
  };

  auto load_kv = [&](int it, int buf) {
    int kb, ke;
    key_range(it, kb, ke);
    DT* const kd = ks + buf * BN * LDS;
    DT* const vd = vs + buf * BN * LDS;
    for (int c = tid; c < BN * CPR; c += NT) {
      const int row = c / CPR, col = (c % CPR) * 8;
      const int key = kb + row;
      DT* const kdst = kd + row * LDS + col;
      DT* const vdst = vd + row * LDS + col;
      if (key < ke) {
        const void* ksrc = nullptr;
        const void* vsrc = nullptr;
        if (HasTree && is_tree) {
          const long long tok = tok0 + key;
          ksrc = p.tree_k + tok * p.tree_k_stride_token + h * p.tree_k_stride_head + col;
          vsrc = p.tree_v + tok * p.tree_v_stride_token + h * p.tree_v_stride_head + col;
        } else {
          if constexpr (HasCache) {
            ksrc = reinterpret_cast<const DT*>(p.cache.k_row(r, key, h)) + col;
            vsrc = reinterpret_cast<const DT*>(p.cache.v_row(r, key, h)) + col;
          }
        }
        cp_async_16(kdst, ksrc);
        cp_async_16(vdst, vsrc);
      } else {
        // Zero rows: their probabilities are 0, and 0 * (stale bits, possibly NaN) must not leak.
        *reinterpret_cast<uint4*>(kdst) = make_uint4(0u, 0u, 0u, 0u);
        *reinterpret_cast<uint4*>(vdst) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  };

  if (n_iter > 0) {
    for (int c = tid; c < BM * CPR; c += NT) {
      const int row = c / CPR, col = (c % CPR) * 8;
      const int f = row0 + row;
      DT* const dst = qs + row * LDS + col;
      if (f < rows) {
        const long long tok = tok0 + f / group;
        const long long qh = static_cast<long long>(h) * group + f % group;
        cp_async_16(dst, p.q + tok * p.q_stride_token + qh * p.q_stride_head + col);
      } else {
        *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
      }
    }
  }
  cp_async_commit();  // group: Q
  if (n_iter > 0) load_kv(0, 0);
  cp_async_commit();  // group: key tile 0

  // This thread's two rows (fragment rows g and g + 8 of its warp) and their mask rows.
  const int fa = row0 + warp * 16 + g, fb = fa + 8;
  const mask_word* mrow_a = nullptr;
  const mask_word* mrow_b = nullptr;
  if constexpr (HasTree) {
    const long long wpr = (n + 63) / 64;
    if (is_tree && fa < rows) mrow_a = p.mask + s_mask_off + static_cast<long long>(fa / group) * wpr;
    if (is_tree && fb < rows) mrow_b = p.mask + s_mask_off + static_cast<long long>(fb / group) * wpr;
  }

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_run[2] = {neg_inf, neg_inf};
  float l_run[2] = {0.0f, 0.0f};  // per-thread partial row sums; reduced over the quad at the end
  const DT* const qw = qs + warp * 16 * LDS;

  // A warp whose 16 rows are all padding (e.g. decode: one token x group heads in a 64-row tile)
  // only helps with the loads; warp-uniform, so the shuffles below stay converged.
  const bool warp_active = row0 + warp * 16 < rows;

  // Q's A fragments stay in registers for the whole key loop when they fit (D <= 128: 32 registers);
  // at D = 256 they are re-read from shared memory per key tile.
  constexpr bool q_in_regs = D <= 128;
  constexpr int QF = q_in_regs ? D / 16 : 1;
  std::uint32_t qf[QF][4];
  cp_async_wait<1>();  // Q has landed (key tile 0 may still be in flight)
  __syncthreads();
  auto q_fragment = [&](int kk, std::uint32_t (&a)[4]) {
    a[0] = ld_shared_u32(qw + g * LDS + kk * 16 + t * 2);
    a[1] = ld_shared_u32(qw + (g + 8) * LDS + kk * 16 + t * 2);
    a[2] = ld_shared_u32(qw + g * LDS + kk * 16 + 8 + t * 2);
    a[3] = ld_shared_u32(qw + (g + 8) * LDS + kk * 16 + 8 + t * 2);
  };
  if constexpr (q_in_regs) {
#pragma unroll
    for (int kk = 0; kk < QF; ++kk) q_fragment(kk, qf[kk]);
  }

  for (int it = 0; it < n_iter; ++it) {
    if (it + 1 < n_iter) load_kv(it + 1, (it + 1) & 1);
    cp_async_commit();
    cp_async_wait<1>();  // everything but the newest group: tile `it` (and Q) has landed
    __syncthreads();
    // Tree tiles: a masked key's weight is 0, but the tensor-core PV computes 0 x V, and 0 x NaN =
    // NaN. So NaN/Inf values are zeroed in shared memory here (each thread checks the chunks it
    // copied) and added back after the PV MMA for exactly the (row, key) pairs the mask shows; see
    // the host twin zero_nonfinite_rows / add_visible_nonfinite in host_attention.hpp.
    unsigned long long bad_v = 0ull;
    if (HasTree && is_tree) {  // block-uniform
      DT* const vt_w = vs + (it & 1) * BN * LDS;
      for (int c = tid; c < BN * CPR; c += NT) {
        uint4* const chunk = reinterpret_cast<uint4*>(vt_w + (c / CPR) * LDS + (c % CPR) * 8);
        uint4 x = *chunk;
        unsigned w[4] = {x.x, x.y, x.z, x.w};
        bool any = false;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
#pragma unroll
          for (int half_i = 0; half_i < 2; ++half_i) {
            const unsigned short b = static_cast<unsigned short>(w[k] >> (16 * half_i));
            if (nonfinite_bits<unsigned short>(b, nonfinite_exponent_mask<DT>())) {
              w[k] &= half_i == 0 ? 0xffff0000u : 0x0000ffffu;
              any = true;
            }
          }
        }
        if (any) {
          *chunk = make_uint4(w[0], w[1], w[2], w[3]);
          atomicOr(&s_bad_v[it & 1], 1ull << (c / CPR));
        }
      }
      __syncthreads();
      bad_v = s_bad_v[it & 1];
      if (tid == 0) s_bad_v[(it + 1) & 1] = 0ull;  // read in iteration it - 1, before this tile's first barrier
    }
    if (!warp_active) {
      __syncthreads();
      continue;
    }
    const DT* const kt = ks + (it & 1) * BN * LDS;
    const DT* const vt = vs + (it & 1) * BN * LDS;

    // S = Q K^T for this warp's 16 rows x BN keys.
    float s[BN / 8][4];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
    // K's B fragments: one ldmatrix.x4 gives two key n-tiles x both k halves (lane l addresses key
    // row (l & 7) + 8 * (l >> 4) of the pair, d offset 8 * ((l >> 3) & 1)).
    const DT* const krow = kt + ((lane & 7) + ((lane >> 4) & 1) * 8) * LDS + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      std::uint32_t a_mem[4];
      if constexpr (!q_in_regs) q_fragment(kk, a_mem);
      const std::uint32_t(&a)[4] = q_in_regs ? qf[q_in_regs ? kk : 0] : a_mem;
#pragma unroll
      for (int nt = 0; nt < BN / 8; nt += 2) {
        std::uint32_t b[4];
        ldmatrix_x4(b, krow + nt * 8 * LDS + kk * 16);
        mma_16816<DT>(s[nt], a, b[0], b[1]);
        mma_16816<DT>(s[nt + 1], a, b[2], b[3]);
      }
    }

    // Scale into base 2 and mask: keys past the range, and (tree part) keys not on the row's path.
    // A full cache tile (every tile of a chunk but its last) needs no per-key test.
    int kb, ke;
    key_range(it, kb, ke);
    mask_word wa = ~mask_word{0}, wb = ~mask_word{0};
    if (!is_tree && ke - kb == BN) {  // block-uniform
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] *= p.scale_log2;
      }
    } else {
      if constexpr (HasTree) {
        if (mrow_a) wa = mrow_a[kb >> 6];
        if (mrow_b) wb = mrow_b[kb >> 6];
      }
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = kb + nt * 8 + t * 2 + (e & 1);
          const mask_word w = e < 2 ? wa : wb;
          const bool visible = key < ke && ((w >> (key & 63)) & 1u) != 0;
          s[nt][e] = visible ? s[nt][e] * p.scale_log2 : neg_inf;
        }
      }
    }

    // Online softmax (base 2). A row that has seen no visible key keeps m = -inf; using 0 as the
    // reference then gives p = 0 and alpha = 0 instead of NaN.
    float m_use[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float tm = neg_inf;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) tm = fmaxf(tm, fmaxf(s[nt][2 * i], s[nt][2 * i + 1]));
      tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 1));
      tm = fmaxf(tm, __shfl_xor_sync(0xffffffffu, tm, 2));
      const float m_new = fmaxf(m_run[i], tm);
      m_use[i] = m_new == neg_inf ? 0.0f : m_new;
      const float alpha = exp2f(m_run[i] - m_use[i]);
      m_run[i] = m_new;
      l_run[i] *= alpha;
#pragma unroll
      for (int nd = 0; nd < D / 8; ++nd) {
        o[nd][2 * i] *= alpha;
        o[nd][2 * i + 1] *= alpha;
      }
    }
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = exp2f(s[nt][e] - m_use[e >> 1]);
      l_run[0] += s[nt][0] + s[nt][1];
      l_run[1] += s[nt][2] + s[nt][3];
    }

    // O += P V: the S accumulators of key columns 16k..16k+15 are exactly the A fragment of k-step k.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      const std::uint32_t a[4] = {pack2<DT>(s[2 * kk][0], s[2 * kk][1]), pack2<DT>(s[2 * kk][2], s[2 * kk][3]),
                                  pack2<DT>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                  pack2<DT>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      const DT* const vrow = vt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LDS + ((lane >> 4) & 1) * 8;
#pragma unroll
      for (int nd = 0; nd < D / 16; ++nd) {
        std::uint32_t b[4];
        ldmatrix_x4_trans(b, vrow + nd * 16);
        mma_16816<DT>(o[2 * nd], a, b[0], b[1]);
        mma_16816<DT>(o[2 * nd + 1], a, b[2], b[3]);
      }
    }
    if constexpr (HasTree) {
      if (bad_v != 0ull) {  // block-uniform, rare: add P x V back for the NaN/Inf values rows can see
        // Key nt * 8 + 2 * tt + e0 of this tile: its weights for rows g and g + 8 are s[nt][e0] and
        // s[nt][2 + e0] of lane 4 g + tt (the m16n8 accumulator layout), fetched with shuffles.
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
          for (int tt = 0; tt < 4; ++tt) {
#pragma unroll
            for (int e0 = 0; e0 < 2; ++e0) {
              const int kk = nt * 8 + tt * 2 + e0;
              if (((bad_v >> kk) & 1ull) == 0ull) continue;  // warp-uniform
              const float pa = __shfl_sync(0xffffffffu, s[nt][e0], (lane & ~3) | tt);
              const float pb = __shfl_sync(0xffffffffu, s[nt][2 + e0], (lane & ~3) | tt);
              const int key = kb + kk;
              const bool see_a = ((wa >> (key & 63)) & 1u) != 0, see_b = ((wb >> (key & 63)) & 1u) != 0;
              const DT* const vsrc = p.tree_v + (tok0 + key) * p.tree_v_stride_token + h * p.tree_v_stride_head;
#pragma unroll
              for (int nd = 0; nd < D / 8; ++nd) {
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                  const float v = to_f<DT>(vsrc[nd * 8 + t * 2 + c]);
                  if (isfinite(v)) continue;
                  if (see_a) o[nd][c] += pa * v;
                  if (see_b) o[nd][2 + c] += pb * v;
                }
              }
            }
          }
        }
      }
    }
    __syncthreads();  // the next iteration's loads overwrite this buffer
  }
  cp_async_wait<0>();

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], 1);
    l_run[i] += __shfl_xor_sync(0xffffffffu, l_run[i], 2);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int f = i == 0 ? fa : fb;
    if (f >= rows) continue;
    const long long tok = tok0 + f / group;
    const long long qh = static_cast<long long>(h) * group + f % group;
    const long long idx = (static_cast<long long>(part) * p.total_tokens + tok) * p.num_qo_heads + qh;
    // Keys this row may see: a tree part always has the row's own token; a cache part has keys
    // when its walk has any (every chunk it visits holds at least one).
    const softmax_part_end end = end_softmax_base2(m_run[i], l_run[i], n_iter > 0);
    float* const dst = p.o_part + idx * D;
#pragma unroll
    for (int nd = 0; nd < D / 8; ++nd)
      *reinterpret_cast<float2*>(dst + nd * 8 + t * 2) =
          end.empty ? make_float2(0.0f, 0.0f) : make_float2(o[nd][2 * i] * end.inv_l, o[nd][2 * i + 1] * end.inv_l);
    if (t == 0) p.lse_part[idx] = end.lse;
  }
}

//! Params of the merge pass: fp32 partials -> storage-type out and fp32 lse.
template <class DT>
struct cuda_partial_merge_params {
  const float* o_part = nullptr;
  const float* lse_part = nullptr;
  int num_parts = 0, total_tokens = 0, num_qo_heads = 0;
  DT* o = nullptr;
  std::int64_t o_stride_token = 0, o_stride_head = 0;
  float* lse = nullptr;
  std::int64_t lse_stride_token = 0, lse_stride_head = 0;
};

//! One warp per (token, query head): LSE-merges the parts (Proposition A.1, n-way) with the rules
//! of lse_merge_weights: -inf parts get weight 0; all -inf gives out = 0, lse = -inf; NaN propagates. The lanes read the parts' LSEs side by side (32 at a
//! time) and reduce them with shuffles, so the pass costs a few dependent loads however many parts
//! there are; the weighted sum of the partial O rows then walks the parts with the weight broadcast
//! from the lane that computed it, eight parts' loads in flight at a time. (A serial walk cost
//! 10-17 us at 34 parts on an H100, a sixth to a quarter of a 32K-token decode step; ncu, 2026-11-24.)
template <class DT, int D>
__global__ void __launch_bounds__(128) attention_merge_kernel(const cuda_partial_merge_params<DT> p) {
  constexpr int E = D / 32;
  constexpr unsigned full = 0xffffffffu;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const long long row = static_cast<long long>(blockIdx.x) * 4 + (threadIdx.x >> 5);
  const long long nrows = static_cast<long long>(p.total_tokens) * p.num_qo_heads;
  if (row >= nrows) return;  // warp-uniform
  const long long tok = row / p.num_qo_heads, qh = row % p.num_qo_heads;
  const int parts = p.num_parts;
  const float* const lse_row = p.lse_part + row;
  // lse_merge_weights (merge_state.hpp) with its two passes split over the lanes: each lane
  // observes / adds its parts, the max and the sum are reduced with shuffles (NaN-propagating max).
  lse_merge_weights w;
  for (int q = lane; q < parts; q += 32) w.observe(lse_row[q * nrows]);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) w.max = nan_max(w.max, __shfl_xor_sync(full, w.max, o));
  float acc[E];
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = 0.0f;
  if (!w.empty()) {  // warp-uniform after the reduction
    for (int q = lane; q < parts; q += 32) w.add(lse_row[q * nrows]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) w.sum += __shfl_xor_sync(full, w.sum, o);
    w.finish();
    for (int q0 = 0; q0 < parts; q0 += 32) {
      const int q = q0 + lane;
      const float lse_q = q < parts ? lse_row[q * nrows] : -INFINITY;
      const float mine = w.weight(lse_q);
      const int count = min(32, parts - q0);
      // Eight parts' rows are loaded before any is used, so eight L2 round trips overlap. Every part
      // row of a real (token, head) is written by the partial kernel (an empty part writes O = 0,
      // LSE = -inf), so the loads are always in bounds; a zero weight still contributes nothing.
      for (int j0 = 0; j0 < count; j0 += 8) {
        float2 v[8][E / 2];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (j0 + j < count) {
            const float* src = p.o_part + ((q0 + j0 + j) * nrows + row) * D + lane * E;
#pragma unroll
            for (int e = 0; e < E / 2; ++e) v[j][e] = reinterpret_cast<const float2*>(src)[e];
          }
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float wj = __shfl_sync(full, mine, (j0 + j) & 31);
          const bool keys = __shfl_sync(full, lse_q, (j0 + j) & 31) != -INFINITY;
          if (j0 + j < count && keys) {  // warp-uniform; a part without keys is selected out, not multiplied
#pragma unroll
            for (int e = 0; e < E / 2; ++e) {
              acc[2 * e] += wj * v[j][e].x;
              acc[2 * e + 1] += wj * v[j][e].y;
            }
          }
        }
      }
    }
  }
  const float lse = w.lse();
  DT* const out = p.o + tok * p.o_stride_token + qh * p.o_stride_head + lane * E;
#pragma unroll
  for (int e = 0; e < E; ++e) out[e] = from_f<DT>(acc[e]);
  if (lane == 0) p.lse[tok * p.lse_stride_token + qh * p.lse_stride_head] = lse;
}

//! Host-side launch plan shared by the *_workspace_bytes(cuda, ...) functions and the calls, so
//! both always agree. Depends only on host-known sizes and the device's SM count.
struct cuda_attention_plan {
  int num_chunks = 0;
  int num_parts = 0;
  long long row_tiles = 0;
  std::size_t o_bytes = 0, lse_bytes = 0;
  [[nodiscard]] std::size_t bytes() const noexcept { return o_bytes + lse_bytes; }
};

[[nodiscard]] inline cuda_attention_plan plan_cuda_attention(std::string_view fn, bool has_cache, bool has_tree,
                                                             long long tokens, int num_requests, int hq, int hkv,
                                                             int head_dim) {
  cuda_attention_plan pl;
  if (tokens == 0) return pl;
  const long long group = hq / hkv;
  // Row tiles actually used: sum_r ceil(n_r * group / 64), between these bounds.
  const long long tiles_min = std::max<long long>((tokens * group + 63) / 64, std::min<long long>(num_requests, tokens));
  pl.row_tiles = (tokens * group + 63) / 64 + num_requests;
  require(pl.row_tiles <= INT32_MAX, fn, "q", "fewer than 2^31 row tiles (cuda grid limit)", pl.row_tiles);
  if (has_cache) {
    // One full wave at two CTAs per SM: C chunks x Hkv heads x row tiles <= 2 x SMs (rounding C
    // down, not up: a second, nearly empty wave would halve the achieved bandwidth).
    const long long want = 2LL * cuda_sm_count();
    const long long per_chunk = static_cast<long long>(hkv) * tiles_min;
    pl.num_chunks = static_cast<int>(std::min<long long>(std::max<long long>(want / per_chunk, 1), 1024));
  }
  pl.num_parts = pl.num_chunks + (has_tree ? 1 : 0);
  const auto round256 = [](std::size_t b) { return (b + 255) / 256 * 256; };
  const std::size_t rows = static_cast<std::size_t>(pl.num_parts) * static_cast<std::size_t>(tokens) *
                           static_cast<std::size_t>(hq);
  pl.o_bytes = round256(rows * static_cast<std::size_t>(head_dim) * sizeof(float));
  pl.lse_bytes = round256(rows * sizeof(float));
  return pl;
}

template <class DT, int D, class Layout, bool HasCache, bool HasTree>
void launch_cuda_attention(const cuda_attention_kernel_params<DT, Layout>& kp, const cuda_partial_merge_params<DT>& mp,
                           const cuda_attention_plan& pl, cudaStream_t stream) {
  using tile = attention_tile<D>;
  auto* kernel = &attention_partial_kernel<DT, D, Layout, HasCache, HasTree>;
  // Per call (cheap, not a stream operation): correct on every device of a multi-GPU process.
  cuda_check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(tile::smem_bytes)),
             "cudaFuncSetAttribute(attention_partial_kernel, max dynamic shared memory)");
  const dim3 grid(static_cast<unsigned>(pl.row_tiles), static_cast<unsigned>(pl.num_parts),
                  static_cast<unsigned>(kp.num_kv_heads));
  kernel<<<grid, tile::threads, tile::smem_bytes, stream>>>(kp);
  cuda_check(cudaGetLastError(), "attention_partial_kernel launch");
  const long long rows = static_cast<long long>(mp.total_tokens) * mp.num_qo_heads;
  attention_merge_kernel<DT, D><<<static_cast<unsigned>((rows + 3) / 4), 128, 0, stream>>>(mp);
  cuda_check(cudaGetLastError(), "attention_merge_kernel launch");
}

template <bool HasCache, class Layout>
auto kernel_cache(const Layout& cache) {
  if constexpr (HasCache) return cache;
  else return no_cuda_cache{};
}

//! Runs a validated call: plans, takes the scratch, fills the params and launches for the head_dim.
//! T is specdec's storage type (half or bfloat16).
template <bool HasCache, bool HasTree, class T, class Layout>
void run_cuda_attention(std::string_view fn, const cuda& policy, const attention_io_params<T>& io, const Layout& cache,
                        const tree_kv_params<T>* tree, const attention_options& options) {
  using DT = device_type_t<T>;
  require(options.kv_split_size >= 0, fn, "options.kv_split_size", ">= 0 (0 = automatic)", options.kv_split_size);
  const auto pl = plan_cuda_attention(fn, HasCache, HasTree, io.total_tokens, io.num_requests, io.num_qo_heads,
                                      io.num_kv_heads, io.head_dim);
  require(pl.num_parts <= 65535, fn, "options", "at most 65535 parts (cuda grid limit)", pl.num_parts);
  cudaStream_t stream = policy.stream;
  cuda_scratch scratch(fn, options.workspace, pl.bytes(), stream);
  if (io.total_tokens == 0) return;

  using KL = std::conditional_t<HasCache, Layout, no_cuda_cache>;
  cuda_attention_kernel_params<DT, KL> kp(kernel_cache<HasCache>(cache));
  kp.q = reinterpret_cast<const DT*>(io.q);
  kp.q_stride_token = io.q_stride_token;
  kp.q_stride_head = io.q_stride_head;
  kp.q_indptr = io.q_indptr;
  kp.num_requests = io.num_requests;
  kp.total_tokens = io.total_tokens;
  kp.num_qo_heads = io.num_qo_heads;
  kp.num_kv_heads = io.num_kv_heads;
  kp.group = io.num_qo_heads / io.num_kv_heads;
  kp.scale_log2 = io.scale * 1.4426950408889634f;
  if constexpr (HasTree) {
    kp.tree_k = reinterpret_cast<const DT*>(tree->k);
    kp.tree_k_stride_token = tree->k_stride_token;
    kp.tree_k_stride_head = tree->k_stride_head;
    kp.tree_v = reinterpret_cast<const DT*>(tree->v);
    kp.tree_v_stride_token = tree->v_stride_token;
    kp.tree_v_stride_head = tree->v_stride_head;
    kp.mask = tree->mask;
  }
  kp.num_chunks = pl.num_chunks;
  kp.kv_split_size = options.kv_split_size;
  kp.num_parts = pl.num_parts;
  auto* base = static_cast<unsigned char*>(scratch.data());
  kp.o_part = reinterpret_cast<float*>(base);
  kp.lse_part = reinterpret_cast<float*>(base + pl.o_bytes);

  cuda_partial_merge_params<DT> mp;
  mp.o_part = kp.o_part;
  mp.lse_part = kp.lse_part;
  mp.num_parts = pl.num_parts;
  mp.total_tokens = io.total_tokens;
  mp.num_qo_heads = io.num_qo_heads;
  mp.o = reinterpret_cast<DT*>(io.o);
  mp.o_stride_token = io.o_stride_token;
  mp.o_stride_head = io.o_stride_head;
  mp.lse = io.lse;
  mp.lse_stride_token = io.lse_stride_token;
  mp.lse_stride_head = io.lse_stride_head;

  switch (io.head_dim) {
    case 64: launch_cuda_attention<DT, 64, KL, HasCache, HasTree>(kp, mp, pl, stream); break;
    case 128: launch_cuda_attention<DT, 128, KL, HasCache, HasTree>(kp, mp, pl, stream); break;
    case 256: launch_cuda_attention<DT, 256, KL, HasCache, HasTree>(kp, mp, pl, stream); break;
    default: throw_invalid_argument(fn, "q", "head_dim (extent 2) of 64, 128 or 256", io.head_dim);
  }
}

//! The cuda backend of the attention entry points (see backend.hpp). The workspace depends only on
//! shapes and the SM count, never on device data.
template <>
struct attention_backend<cuda> {
  template <bool HasCache, bool HasTree, class T, class L>
  [[nodiscard]] static std::size_t workspace_bytes(std::string_view fn, const cuda&, const attention_io_params<T>& io,
                                                   const L&, const attention_options&) {
    return plan_cuda_attention(fn, HasCache, HasTree, io.total_tokens, io.num_requests, io.num_qo_heads,
                               io.num_kv_heads, io.head_dim)
        .bytes();
  }

  template <bool HasCache, bool HasTree, class T, class L>
  static void run(std::string_view fn, const cuda& policy, const attention_io_params<T>& io, const L& cache,
                  const tree_kv_params<T>* tree, const attention_options& options) {
    run_cuda_attention<HasCache, HasTree, T>(fn, policy, io, cache, tree, options);
  }
};

}  // namespace specdec::detail
