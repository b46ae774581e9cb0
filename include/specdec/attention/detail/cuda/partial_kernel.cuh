#pragma once
//! \file partial_kernel.cuh
//! Level 2 of the CUDA attention backend (see launch.cuh): the partial kernel, one CTA per (row
//! tile, part, kv head), tensor-core QK^T and PV over cp.async double-buffered K/V tiles with an
//! online softmax; each part writes a normalised fp32 partial (O, natural-log LSE).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "specdec/attention/detail/cuda/tile.cuh"
#include "specdec/attention/detail/cuda_common.cuh"
#include "specdec/attention/detail/merge_state.hpp"
#include "specdec/core/bitmask.hpp"
#include "specdec/core/config.hpp"

namespace specdec::detail {

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
    for (int r0 = 0; r0 < p.io.num_requests; r0 += 32) {
      const int r = r0 + lane;
      long long n = 0;
      if (r < p.io.num_requests) {  // offsets out of order or past q (a precondition the host checks
        // only for host data): no tiles, so no read or write leaves q, the tree inputs or the workspace
        const long long b = p.io.q_indptr[r], e = p.io.q_indptr[r + 1];
        if (b >= 0 && e >= b && e <= p.io.total_tokens) n = e - b;
      }
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
      if (r < p.io.num_requests && nt > 0 && z >= first && z < first + nt) {
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
  const int tok0 = p.io.q_indptr[r];
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
          ksrc = p.tree.k + tok * p.tree.k_stride_token + h * p.tree.k_stride_head + col;
          vsrc = p.tree.v + tok * p.tree.v_stride_token + h * p.tree.v_stride_head + col;
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
        cp_async_16(dst, p.io.q + tok * p.io.q_stride_token + qh * p.io.q_stride_head + col);
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
    if (is_tree && fa < rows) mrow_a = p.tree.mask + s_mask_off + static_cast<long long>(fa / group) * wpr;
    if (is_tree && fb < rows) mrow_b = p.tree.mask + s_mask_off + static_cast<long long>(fb / group) * wpr;
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
    // the host twin zero_nonfinite_rows / add_visible_nonfinite in host/tile.hpp.
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
    // Warps whose 16 rows are all padding (decode: warps 1-3) skip the math but reach the one barrier
    // below with the others (an aligned barrier must be the same instruction for the whole block).
    if (warp_active) {
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
                const DT* const vsrc = p.tree.v + (tok0 + key) * p.tree.v_stride_token + h * p.tree.v_stride_head;
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
    const long long idx = (static_cast<long long>(part) * p.io.total_tokens + tok) * p.io.num_qo_heads + qh;
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

}  // namespace specdec::detail
