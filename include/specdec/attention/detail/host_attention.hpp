#pragma once
//! \file host_attention.hpp
//! Host backend of decode_attention, tree_attention and hybrid_tree_attention.
//!
//! One call = three parallel_for passes over a plan laid out in the workspace:
//!  1. prepare: per (request, kv head) the G = Hq/Hkv query heads of every query token of the request
//!     are gathered into one transposed, pre-scaled block Qt[d][row] (row = token * G + head-in-group),
//!     so each K/V row is read once for all query heads that share it (GQA grouping).
//!  2. attend: one work item per (request, kv-head group, part), a part being one split-KV chunk of
//!     the cache (flash-decoding) or the request's tree tokens under their ancestor mask (LongSpec
//!     §3.3). The head group is all Hkv heads for decode-like calls (<= 32 query rows per request:
//!     memory-bound, so each token's rows of all heads are read together) and one head otherwise
//!     (compute-bound: that head's accumulators stay in L2); see heads_per_item.
//!     The item streams KV tiles of 64 tokens (staged and widened to fp32 once) and runs an online
//!     softmax over row blocks of 16/32 query rows: S^T = K_tile Qt_block (broadcast-FMA
//!     microkernel, 8 keys x 1-2 row vectors), masking, exp2, then O_block += P^T V_tile (4 rows x 64
//!     columns microkernel). The item writes a normalised partial (O, LSE) into the workspace.
//!     A cache part of a request with at most max_dot_rows (8) query rows per kv head (a decode
//!     step: one token x the GQA group) runs attend_part_rows instead, which vectorises along
//!     head_dim (a dot product per key and row) rather than over rows, and streams K token-major.
//!  3. merge: every (request, kv head) combines its parts by log-sum-exp (LongSpec Appendix A,
//!     Proposition A.1, applied n-way) and writes O (storage type) and LSE (natural log).
//! Nothing is allocated in passes 1-3; the only allocation is the workspace when none is passed.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/detail/merge_state.hpp"
#include "specdec/core/detail/simd.hpp"
#include "specdec/core/bitmask.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/numeric.hpp"
#include "specdec/core/thread_pool.hpp"


namespace specdec::detail {
inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

inline constexpr int kv_tile = 64;        //!< KV tokens per staged tile (one mask word per tree tile)
inline constexpr int min_kv_split = 256;  //!< smallest automatic split-KV chunk
inline constexpr float log2e_f = 1.4426950408889634f;

//! Threads a host policy will use (the caller plus pool workers, capped by num_threads).
[[nodiscard]] inline int host_threads(const host& policy) {
  const int avail = thread_pool::global().workers() + 1;
  return policy.num_threads > 0 ? std::min(policy.num_threads, avail) : avail;
}

//! Split-KV heuristic (flash-decoding). Aim for about 4 work items per thread so ragged requests
//! balance, spread evenly over all cached tokens of the batch:
//!   split = roundup64(max(256, ceil(total_cache_tokens * head_groups / (4 * threads))))
//! where head_groups is the number of items one chunk gives (Hkv, or 1 when an item covers all kv
//! heads: see heads_per_item).
//! The 256-token floor keeps each item's fixed cost (writing an M x D partial and merging it) small
//! next to streaming its K/V. A request with L cached tokens gets ceil(L / split) chunks.
[[nodiscard]] inline int choose_kv_split(std::int64_t total_cache_tokens, int head_groups, int threads) {
  const std::int64_t want = 4 * static_cast<std::int64_t>(std::max(threads, 1));
  std::int64_t s = (total_cache_tokens * head_groups + want - 1) / want;
  s = std::max<std::int64_t>(s, min_kv_split);
  s = (s + kv_tile - 1) / kv_tile * kv_tile;
  return static_cast<int>(std::min<std::int64_t>(s, 1 << 30));
}

//! Kv heads one work item processes together: all of them when every request has at most one
//! 32-row panel of query rows (n_r * Hq / Hkv <= 32: decode-like, memory-bound, so read each
//! token's K/V rows of all heads together), else one (compute-bound: keep one head's accumulators
//! cache-resident).
template <class T>
[[nodiscard]] int heads_per_item(const attention_io_params<T>& io) noexcept {
  const int group = io.num_qo_heads / io.num_kv_heads;
  for (int r = 0; r < io.num_requests; ++r)
    if (static_cast<std::int64_t>(io.q_indptr[r + 1] - io.q_indptr[r]) * group > 2 * vlanes) return 1;
  return io.num_kv_heads;
}

//! Resolves options.kv_split_size (0 = heuristic) for a call over `cache`.
template <class L>
int resolve_kv_split(std::string_view fn, const L& cache, int num_requests, int head_groups, int threads, int requested) {
  require(requested >= 0, fn, "options.kv_split_size", ">= 0 (0 = automatic)", requested);
  if (requested > 0) return requested;
  std::int64_t total = 0;
  for (int r = 0; r < num_requests; ++r) total += cache.length(r);
  return choose_kv_split(total, head_groups, threads);
}

[[nodiscard]] constexpr std::int64_t round_up(std::int64_t x, std::int64_t m) noexcept { return (x + m - 1) / m * m; }

//! Layout of one call's scratch: four int64 arrays of per-request offsets, then the float areas.
struct host_plan {
  int num_requests = 0, hkv = 0, group = 0, head_dim = 0, split = 1;
  int heads_per_item = 1;  //!< kv heads one work item processes together (1 or hkv)
  bool has_cache = false, has_tree = false;
  std::int64_t* item_begin = nullptr;  //!< [R+1] first work item of each request
  std::int64_t* qt_off = nullptr;      //!< [R] float offset of the request's Qt blocks (Hkv of them)
  std::int64_t* part_off = nullptr;    //!< [R] float offset of its partials (Hkv * parts)
  std::int64_t* mask_off = nullptr;    //!< [R] word offset of its mask
  float* floats = nullptr;
  std::int64_t total_items = 0;

  [[nodiscard]] int tokens(const std::int32_t* ip, int r) const noexcept { return ip[r + 1] - ip[r]; }
  //! Rows rounded up to whole 32-row panels (the score microkernel's widest block).
  [[nodiscard]] static int mpad(int rows) noexcept { return static_cast<int>(round_up(rows, 2 * vlanes)); }
};

//! Bytes of scratch a call needs; with `ws` non-null also lays the plan out in it.
template <class LengthFn>
std::size_t plan_host_attention(host_plan& p, const std::int32_t* q_indptr, LengthFn&& cache_length, void* ws) {
  const int R = p.num_requests;
  const std::int64_t header = round_up((static_cast<std::int64_t>(R) * 4 + 1) * 8, 64);
  std::int64_t floats = 0, items = 0;
  auto* base = static_cast<std::byte*>(ws);
  if (ws) {
    auto* h = reinterpret_cast<std::int64_t*>(base);
    p.item_begin = h;
    p.qt_off = h + R + 1;
    p.part_off = h + 2 * R + 1;
    p.mask_off = h + 3 * R + 1;
    p.floats = reinterpret_cast<float*>(base + header);
  }
  std::int64_t mask_words = 0;
  for (int r = 0; r < R; ++r) {
    const int n = q_indptr[r + 1] - q_indptr[r];
    const int mp = host_plan::mpad(n * p.group);
    int parts = 0;
    if (n > 0) {
      if (p.has_cache) {
        const int len = cache_length(r);
        parts += (len + p.split - 1) / p.split;
      }
      if (p.has_tree) parts += 1;
    }
    if (ws) {
      p.item_begin[r] = items;
      p.qt_off[r] = floats;
      p.part_off[r] = floats + static_cast<std::int64_t>(p.hkv) * p.head_dim * mp;
      p.mask_off[r] = mask_words;
    }
    mask_words += static_cast<std::int64_t>(n) * words_per_row(n);
    floats += static_cast<std::int64_t>(p.hkv) * mp * (p.head_dim + static_cast<std::int64_t>(parts) * (p.head_dim + 2));
    items += static_cast<std::int64_t>(p.hkv / p.heads_per_item) * parts;
  }
  if (ws) p.item_begin[R] = items;
  p.total_items = items;
  return static_cast<std::size_t>(header + floats * 4);
}

//! Number of parts of request r (derived from the plan's item counts).
[[nodiscard]] inline int plan_parts(const host_plan& p, int r) noexcept {
  return static_cast<int>((p.item_begin[r + 1] - p.item_begin[r]) / (p.hkv / p.heads_per_item));
}

//! S^T[j][lane] = sum_d Kf[j][d] * Qt_panel[d][lane] for j < roundup(nb, 8), RV row vectors.
//! The panel is [D][32] contiguous floats (GEMM-style packing), so its 16 KB stream through L1 without
//! the set conflicts a [D][Mpad] layout with a power-of-two row stride would cause. Keys per
//! register block: 8 with AVX-512 (8 x RV accumulators), fewer where the register file is smaller.
template <int D, int RV>
SPECDEC_FORCEINLINE void score_tile(const float* __restrict qt, const float* __restrict kf, int nb,
                                    float* __restrict s) noexcept {
  constexpr int KB = fit_block(RV, RV + 1, 8);  // keys per block; divides the 8-row staging pad
  for (int j0 = 0; j0 < nb; j0 += KB) {
    vf16 acc[KB][RV];
    for (int jj = 0; jj < KB; ++jj)
      for (int r = 0; r < RV; ++r) acc[jj][r] = vf16{};
    const float* kb = kf + j0 * D;
    for (int d = 0; d < D; ++d) {
      vf16 qv[RV];
      for (int r = 0; r < RV; ++r) qv[r] = vload(qt + d * (2 * vlanes) + r * vlanes);
      for (int jj = 0; jj < KB; ++jj) {
        const vf16 kk = vbroadcast(kb[jj * D + d]);
        for (int r = 0; r < RV; ++r) acc[jj][r] += kk * qv[r];
      }
    }
    for (int jj = 0; jj < KB; ++jj)
      for (int r = 0; r < RV; ++r) vstore(s + (j0 + jj) * (2 * vlanes) + r * vlanes, acc[jj][r]);
  }
}

//! O[row0 + i][:] = alpha[i] * O[row0 + i][:] + sum_j P[j][i] * Vf[j][:] for i < rows (multiple of 4).
template <int D>
SPECDEC_FORCEINLINE void pv_tile(float* __restrict o, const float* __restrict alpha, const float* __restrict pt,
                                 const float* __restrict vf, int nb, int rows) noexcept {
  // Column slices outer: one CW-vector (64 columns with AVX-512) slice of the V tile stays in L1
  // while every 4-row group of the block consumes it. CW: 4 with AVX-512 (4 x 4 accumulators),
  // fewer where the register file is smaller.
  constexpr int CW = fit_block(4 + 1, 1, 4);
  for (int c0 = 0; c0 < D; c0 += CW * vlanes) {
    for (int i0 = 0; i0 < rows; i0 += 4) {
      vf16 acc[4][CW];
      for (int ii = 0; ii < 4; ++ii) {
        const vf16 a = vbroadcast(alpha[i0 + ii]);
        for (int c = 0; c < CW; ++c) acc[ii][c] = vload(o + (i0 + ii) * D + c0 + c * vlanes) * a;
      }
      for (int j = 0; j < nb; ++j) {
        vf16 vv[CW];
        for (int c = 0; c < CW; ++c) vv[c] = vload(vf + j * D + c0 + c * vlanes);
        for (int ii = 0; ii < 4; ++ii) {
          const vf16 p = vbroadcast(pt[j * (2 * vlanes) + i0 + ii]);
          for (int c = 0; c < CW; ++c) acc[ii][c] += p * vv[c];
        }
      }
      for (int ii = 0; ii < 4; ++ii)
        for (int c = 0; c < CW; ++c) vstore(o + (i0 + ii) * D + c0 + c * vlanes, acc[ii][c]);
    }
  }
}

//! Software-prefetches one K or V row (D elements), a 64-byte line at a time, with
//! __builtin_prefetch locality `Locality`: 2 = prefetcht1 (into L2), the hint every kernel here
//! uses for rows it reads a tile or a block later (see stage_rows and kpf_dist for why not L1).
template <int D, int Locality = 2, class T>
SPECDEC_FORCEINLINE void prefetch_row(const T* row) noexcept {
  constexpr int line_elems = 64 / static_cast<int>(sizeof(T));
  for (int c = 0; c < D; c += line_elems) __builtin_prefetch(row + c, 0, Locality);
}

//! Stages rows [k, k + nb) widened to fp32 into dst[kv_tile][D]; rows nb..roundup(nb, 8) are zeroed
//! so the 8-key score microkernel never reads garbage. While staging row j it prefetches row j of
//! the next tile (`pf_nb` rows starting at k + kv_tile) into L2: cache rows of one kv head are
//! usually a page apart (NHD, paged), which the hardware streamer does not follow across 4 KB pages.
//! L2, not L1: the tile is consumed only after a whole tile of compute, and 64 KB of prefetched
//! fp32 K/V would evict the staged tile and the query panel from the 48 KB L1 (measured +2-5
//! points of FMA peak over prefetcht0 on the compute-bound cells).
template <int D, class T, class RowFn>
SPECDEC_FORCEINLINE void stage_rows(RowFn&& row, int k, int nb, int pf_nb, float* __restrict dst) noexcept {
  for (int j = 0; j < nb; ++j) {
    if (j < pf_nb) prefetch_row<D>(row(k + kv_tile + j));
    const T* src = row(k + j);
    if constexpr (std::is_same_v<T, float>) std::memcpy(dst + j * D, src, sizeof(float) * D);
    else widen_row(src, dst + j * D, D);
  }
  const int pad = static_cast<int>(round_up(nb, 8));
  if (pad > nb) std::memset(dst + nb * D, 0, sizeof(float) * D * (pad - nb));
}

//! Masked tiles only: zeroes the NaN/Inf entries of the staged value rows [0, nb) and returns a
//! bitmap of the rows that had any (bit j = row j). The PV microkernel multiplies every staged row
//! by each query row's weight, and a masked key's weight is 0, but 0 x NaN = NaN: a value a row
//! cannot see must not reach it. add_visible_nonfinite then adds those entries back for exactly
//! the (row, key) pairs the mask shows. One vector compare per 16 values and a rare slow path, so
//! the clean case costs about 1% of the tile's FMAs.
template <int D>
SPECDEC_FORCEINLINE std::uint64_t zero_nonfinite_rows(float* __restrict vf, int nb) noexcept {
  std::uint64_t bad = 0;
  for (int j = 0; j < nb; ++j) {
    vi16 any{};
    for (int c = 0; c < D; c += vlanes)
      any = any | ((vbitcast<vu16>(vload(vf + j * D + c)) & 0x7f800000u) == 0x7f800000u);
    if (vhsum(vcvt_f32(any)) != 0.0f) bad |= std::uint64_t{1} << j;
  }
  for (std::uint64_t b = bad; b != 0; b &= b - 1) {
    float* row = vf + std::countr_zero(b) * D;
    for (int c = 0; c < D; ++c)
      if (!std::isfinite(row[c])) row[c] = 0.0f;
  }
  return bad;
}

//! The other half of zero_nonfinite_rows: for each value row of the tile at key k + j (bit j of
//! `bad`) and each query row `row0 + i` (i < rows) whose mask row shows that key, adds
//! P[j][i] x V for the row's NaN/Inf entries (read again from the cache, in storage type), so a
//! row that sees such a value gets the IEEE result (NaN or +-inf) and a row that cannot see it is
//! bit-identical to a run with clean values. `o` is the block's first O row.
template <int D, class VRowFn>
void add_visible_nonfinite(float* __restrict o, const float* __restrict pt, int row0, int rows, int group,
                           std::uint64_t bad, int k, VRowFn&& vrow, const mask_word* mask, int wpr) noexcept {
  for (; bad != 0; bad &= bad - 1) {
    const int j = std::countr_zero(bad), key = k + j;
    const auto* src = vrow(key);
    for (int i = 0; i < rows; ++i) {
      const mask_word w = mask[static_cast<std::int64_t>((row0 + i) / group) * wpr + (key >> 6)];
      if (((w >> (key & 63)) & 1u) == 0) continue;
      const float p = pt[j * (2 * vlanes) + i];
      for (int c = 0; c < D; ++c) {
        const float v = to_float(src[c]);
        if (!std::isfinite(v)) o[static_cast<std::int64_t>(i) * D + c] += p * v;
      }
    }
  }
}

//! Online-softmax attention of M query rows over keys [k_begin, k_end), for `nheads` kv heads at
//! once: head hh has its transposed query panels at qt_of(hh), its K/V rows at krow(t, hh) /
//! vrow(t, hh) and its partial at part_of(hh). Tiles are the outer loop and heads the inner one, so
//! with nheads = Hkv a token's rows of all heads (adjacent in NHD and paged layouts) are read
//! together, which the hardware prefetchers follow; with nheads = 1 the item is one (request, kv
//! head), which keeps a large tree's accumulators in L2. Optionally under the tree mask (`mask` =
//! the request's n x n mask, rows `wpr` words; key index = tree token index, query row i is tree
//! token i / group). Writes each head's normalised partial O [Mpad][D] and LSE (natural log; -inf
//! when a row saw no key).
template <int D, class T, bool Masked, class QtFn, class PartFn, class KRow, class VRow>
void attend_part(int nheads, QtFn&& qt_of, PartFn&& part_of, int m_rows, int group, KRow&& krow, VRow&& vrow,
                 int k_begin, int k_end, const mask_word* mask, int wpr) noexcept {
  const int mp = host_plan::mpad(m_rows);
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  for (int hh = 0; hh < nheads; ++hh) {
    float* o = part_of(hh);
    float* m = o + static_cast<std::int64_t>(mp) * D;
    std::fill(o, o + static_cast<std::int64_t>(mp) * D, 0.0f);
    std::fill(m, m + mp, ninf);
    std::fill(m + mp, m + 2 * mp, 0.0f);
  }

  alignas(64) float kf[kv_tile * D];
  alignas(64) float vf[kv_tile * D];
  alignas(64) float st[kv_tile * 2 * vlanes];
  alignas(64) float alpha[2 * vlanes];

  for (int k = k_begin; k < k_end; k += kv_tile) {
    const int nb = std::min(kv_tile, k_end - k);
    // Software prefetch of the next tile only for single-head items; with all heads per item the
    // rows of a token are read back to back and the hardware streamer covers them (measured: the
    // explicit prefetches then only add stalls).
    const int pf_nb = nheads > 1 ? 0 : std::max(0, std::min(kv_tile, k_end - k - kv_tile));
    for (int hh = 0; hh < nheads; ++hh) {
      const float* qt = qt_of(hh);
      float* o = part_of(hh);
      float* m = o + static_cast<std::int64_t>(mp) * D;
      float* l = m + mp;
      if (nheads > 1) {
        // Token-major prefetch of a slice of the next tile (all heads of each token, which are
        // adjacent in NHD/paged layouts): spread over the heads loop, and sequential within each
        // token's rows so the L2 streamer picks it up.
        const int per = (kv_tile + nheads - 1) / nheads;
        const int j_end = std::min(k_end, k + kv_tile + (hh + 1) * per);
        for (int t = k + kv_tile + hh * per; t < j_end; ++t)
          for (int h2 = 0; h2 < nheads; ++h2) {
            prefetch_row<D, 1>(krow(t, h2));
            prefetch_row<D, 1>(vrow(t, h2));
          }
      }
      stage_rows<D, T>([&](int t) { return krow(t, hh); }, k, nb, pf_nb, kf);
      stage_rows<D, T>([&](int t) { return vrow(t, hh); }, k, nb, pf_nb, vf);
      // Masked keys: a NaN/Inf score is replaced by -inf below (selected, not multiplied); a
      // NaN/Inf value needs zero_nonfinite_rows + add_visible_nonfinite (see there).
      std::uint64_t bad_v = 0;
      if constexpr (Masked) bad_v = zero_nonfinite_rows<D>(vf, nb);
      for (int row0 = 0; row0 < m_rows; row0 += 2 * vlanes) {
        const int rv = m_rows - row0 > vlanes ? 2 : 1;
        const int rows = std::min(rv * vlanes, m_rows - row0);
        if constexpr (Masked) {
          // Keys are tree tokens: token t sees only keys <= t, so a tile past the block's last token
          // is fully masked and contributes nothing.
          if (k > (row0 + rows - 1) / group) continue;
        }
        const float* panel = qt + static_cast<std::int64_t>(row0) * D;  // panel row0 / 32
        if (rv == 2) score_tile<D, 2>(panel, kf, nb, st);
        else score_tile<D, 1>(panel, kf, nb, st);

        for (int r = 0; r < rv; ++r) {
          if constexpr (Masked) {
            // One mask word per lane covers the 64-key tile (tiles start at multiples of 64).
            vu16 lo{}, hi{};
            for (int lane = 0; lane < vlanes; ++lane) {
              const int i = row0 + r * vlanes + lane;
              const mask_word w = i < m_rows ? mask[static_cast<std::int64_t>(i / group) * wpr + (k >> 6)] : 0;
              lo[lane] = static_cast<std::uint32_t>(w);
              hi[lane] = static_cast<std::uint32_t>(w >> 32);
            }
            for (int j = 0; j < nb; ++j) {
              const vu16 bit = j < 32 ? ((lo >> j) & 1u) : ((hi >> (j - 32)) & 1u);
              float* sp = st + j * (2 * vlanes) + r * vlanes;
              vstore(sp, vselect(bit != 0u, vload(sp), vbroadcast(ninf)));
            }
          }
          vf16 mold = vload(m + row0 + r * vlanes);
          vf16 mx = mold;
          for (int j = 0; j < nb; ++j) mx = vmax(mx, vload(st + j * (2 * vlanes) + r * vlanes));
          const vf16 mref = vselect(mx == ninf, vf16{}, mx);
          vstore(alpha + r * vlanes, vexp2(mold - mref));
          vf16 sum{};
          for (int j = 0; j < nb; ++j) {
            float* sp = st + j * (2 * vlanes) + r * vlanes;
            const vf16 pj = vexp2(vload(sp) - mref);
            vstore(sp, pj);
            sum += pj;
          }
          float* lp = l + row0 + r * vlanes;
          vstore(lp, vload(lp) * vload(alpha + r * vlanes) + sum);
          vstore(m + row0 + r * vlanes, mx);
        }
        pv_tile<D>(o + static_cast<std::int64_t>(row0) * D, alpha, st, vf, nb, static_cast<int>(round_up(rows, 4)));
        if constexpr (Masked) {
          if (bad_v != 0)
            add_visible_nonfinite<D>(o + static_cast<std::int64_t>(row0) * D, st, row0, rows, group, bad_v, k,
                                     [&](int t) { return vrow(t, hh); }, mask, wpr);
        }
      }
    }
  }
  // Normalise: O /= l, LSE = ln(2) * (m + log2 l) (scores are in base 2: Qt carries log2(e)).
  for (int hh = 0; hh < nheads; ++hh) {
    float* o = part_of(hh);
    float* m = o + static_cast<std::int64_t>(mp) * D;
    float* l = m + mp;
    for (int i = 0; i < mp; ++i) {
      float* oi = o + static_cast<std::int64_t>(i) * D;
      const softmax_part_end e = end_softmax_base2(m[i], l[i], k_end > k_begin && i < m_rows);
      if (e.empty) std::fill(oi, oi + D, 0.0f);
      else for (int c = 0; c < D; c += vlanes) vstore(oi + c, vload(oi + c) * vbroadcast(e.inv_l));
      m[i] = e.lse;
    }
  }
}

//! Query rows per kv head up to which a cache part runs the dot-product kernel (attend_part_rows)
//! instead of the tile kernel: a decode step (one token, GQA group 4) has 4 rows per kv head, and
//! the tile kernel vectorises over rows, so it would leave 12 of 16 lanes idle.
inline constexpr int max_dot_rows = 8;
//! Whether the cache parts of a request with `rows` query rows per kv head (tokens x Hq / Hkv) run
//! attend_part_rows (true) or the tile kernel attend_part.
[[nodiscard]] constexpr bool uses_row_kernel(int rows) noexcept { return rows <= max_dot_rows; }
//! Keys per online-softmax block of attend_part_rows (two score vectors per row).
inline constexpr int dot_block = 32;
//! Kv heads attend_part_rows keeps in flight together (their queries and scores stay in L1).
inline constexpr int dot_heads = 8;
//! Tokens ahead at which attend_part_rows software-prefetches K rows into L2 (the next block's).
//! Measured (benchmarks/RESULTS.md, Attention (host)): on a Sapphire Rapids class box this
//! prefetch (then into L1) took fp16 decode at 32K from 57% to ~67% of the read roofline; 8 and 64
//! were no better, and prefetching V ahead as well was slower for fp32. On a Zen 4 (EPYC) box the
//! L1 form ran 30-40% slower at 32K than no K prefetch at all (probably because a far prefetcht0
//! holds one of the few L1 miss buffers for a whole DRAM round trip), while the L2 form
//! (prefetcht1, the hint the tile kernel and V already use) matched or beat both, so K now goes
//! to L2 too.
inline constexpr int kpf_dist = 32;

//! Unmasked online-softmax attention of m_rows <= RB (4 or 8) query rows per kv head over keys
//! [k_begin, k_end), vectorised along head_dim: each K row is loaded once (widened to fp32 in
//! registers) and dotted with every query row by 16-lane FMAs, then reduced horizontally; V rows
//! are accumulated into RB x (column slice) register blocks. Same interface and partial format as
//! attend_part (normalised O [Mpad][D], LSE natural log; scores in base 2).
//!
//! Memory order: per block of dot_block keys, the score pass walks token-major over up to
//! dot_heads heads, so in NHD and paged layouts (a token's rows of all heads adjacent) K streams
//! sequentially and the hardware prefetcher follows it; on the way it software-prefetches the same
//! rows of V into L2, and the PV pass then reads them per head from L2. Rows m_rows..RB-1 have zero
//! queries and are computed but never written out (fixed-size register blocks).
//!
//! Memory schedule: the PV pass also prefetches the *next* block's V rows into L2, a column slice
//! per (head, slice, key) step, so DRAM requests are issued through both passes (K ahead during
//! the score pass, V ahead during the PV pass). Without it every request of a block was issued in
//! the score pass and the PV pass ran with the memory idle: one core's time was compute plus
//! memory rather than the larger of the two. Measured on a Zen 4 core (benchmarks/RESULTS.md,
//! "Spreading the prefetches over both passes"): fp32 32K decode 15.7-17.7 -> 21.7-24.0 GB/s.
//! The same-token V prefetch is kept (redundant after the first block, but it measured 1-2 GB/s
//! better than dropping it).
template <int D, class T, int RB, class QtFn, class PartFn, class KRow, class VRow>
void attend_part_rows(int nheads, QtFn&& qt_of, PartFn&& part_of, int m_rows, KRow&& krow, VRow&& vrow,
                      int k_begin, int k_end) noexcept {
  static_assert(RB == 4 || RB == 8, "attend_part_rows: 4 or 8 rows");
  static_assert(D % (2 * vlanes) == 0, "attend_part_rows: head_dim a multiple of 32");
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  constexpr int dv = D / vlanes;                       // vectors per row
  constexpr int cw = fit_block(RB + 1, 1, 4);          // PV column slice, in vectors (AVX-512: 4 / 2)
  constexpr int qs = fit_block(RB + 1, 0, 2);          // QK^T accumulator sets per row (AVX-512: 2)
  // Keys per score step. 2 (each query vector loaded once for two K rows) for 8 rows where 2 x 8
  // accumulators, two K vectors and a query vector fit in the register file (AVX-512): a two-token
  // tree step at 32K took 22 ms instead of 27-30 on a Zen 4 core (RESULTS.md, session 12). For 4
  // rows GCC 12 turns the two-key loop into query vectors held in registers with K as the memory
  // operand, plus spills, and a decode step got 25% slower in cache; so 1 there, with qs
  // accumulator sets per row.
  constexpr int kt = RB == 8 && 2 * RB + 3 <= vregs16 ? 2 : 1;
  alignas(64) float qb[dot_heads][RB][D];
  alignas(64) float sb[dot_heads][RB][dot_block];
  float mrow[dot_heads][RB], lrow[dot_heads][RB], alpha[dot_heads][RB];
  const T* vp[dot_heads][dot_block];
  const T* vn[dot_heads][dot_block];  // the next block's V rows, prefetched during this block's PV pass
  constexpr int slice_elems = cw * vlanes;
  constexpr int line_elems = 64 / static_cast<int>(sizeof(T));

  for (int h0 = 0; h0 < nheads; h0 += dot_heads) {
    const int hc = std::min(dot_heads, nheads - h0);
    for (int hh = 0; hh < hc; ++hh) {
      // Query rows from the transposed panel (row i at qt[d * 32 + i] for i < 32).
      const float* qt = qt_of(h0 + hh);
      for (int i = 0; i < RB; ++i)
        for (int d = 0; d < D; ++d) qb[hh][i][d] = i < m_rows ? qt[d * (2 * vlanes) + i] : 0.0f;
      float* o = part_of(h0 + hh);
      std::fill(o, o + RB * D, 0.0f);
      for (int i = 0; i < RB; ++i) {
        mrow[hh][i] = ninf;
        lrow[hh][i] = 0.0f;
      }
    }
    for (int b = k_begin; b < k_end; b += dot_block) {
      const int nb = std::min(dot_block, k_end - b);
      const int nnb = std::clamp(k_end - (b + dot_block), 0, dot_block);  // rows of the next block
      // Scores, token-major (kt tokens per step, then the heads), prefetching K kpf_dist tokens
      // ahead into L2 and this block's V rows into L2 for the PV pass.
      for (int j = 0; j < nb; j += kt) {
        const int nt = std::min(kt, nb - j);
        for (int hh = 0; hh < hc; ++hh) {
          const T* kr[kt];
          for (int t = 0; t < kt; ++t) {
            // A missing last token of an odd block repeats the one before (its scores are dropped).
            kr[t] = krow(b + j + std::min(t, nt - 1), h0 + hh);
            if (t >= nt) continue;
            const T* vr = vrow(b + j + t, h0 + hh);
            vp[hh][j + t] = vr;
            if (j + t < nnb) vn[hh][j + t] = vrow(b + dot_block + j + t, h0 + hh);
            prefetch_row<D>(vr);
            if (b + j + t + kpf_dist < k_end) prefetch_row<D>(krow(b + j + t + kpf_dist, h0 + hh));
          }
          if constexpr (kt == 2) {
            // Two keys per step: each query vector is loaded once for both (the score pass is
            // bound by L1 loads otherwise: one per FMA). RB accumulators per key.
            vf16 a0[RB], a1[RB];
            for (int i = 0; i < RB; ++i) a0[i] = a1[i] = vf16{};
            for (int c = 0; c < dv; ++c) {
              const vf16 k0 = vload_as_float(kr[0] + c * vlanes), k1 = vload_as_float(kr[1] + c * vlanes);
              for (int i = 0; i < RB; ++i) {
                const vf16 q = vload(&qb[hh][i][c * vlanes]);
                a0[i] += k0 * q;
                a1[i] += k1 * q;
              }
            }
            for (int i = 0; i < RB; ++i) sb[hh][i][j] = vhsum(a0[i]);
            if (nt == 2)
              for (int i = 0; i < RB; ++i) sb[hh][i][j + 1] = vhsum(a1[i]);
          } else {
            vf16 acc[qs][RB];
            for (int u = 0; u < qs; ++u)
              for (int i = 0; i < RB; ++i) acc[u][i] = vf16{};
            for (int c = 0; c < dv; c += qs) {
              vf16 kv[qs];
              for (int u = 0; u < qs; ++u) kv[u] = vload_as_float(kr[0] + (c + u) * vlanes);
              for (int i = 0; i < RB; ++i)
                for (int u = 0; u < qs; ++u) acc[u][i] += kv[u] * vload(&qb[hh][i][(c + u) * vlanes]);
            }
            for (int i = 0; i < RB; ++i) {
              vf16 sum = acc[0][i];
              for (int u = 1; u < qs; ++u) sum += acc[u][i];
              sb[hh][i][j] = vhsum(sum);
            }
          }
        }
      }
      // Online softmax over the block (keys past nb count as -inf).
      for (int hh = 0; hh < hc; ++hh)
        for (int i = 0; i < RB; ++i) {
          float* s = sb[hh][i];
          for (int j = nb; j < dot_block; ++j) s[j] = ninf;
          const vf16 s0 = vload(s), s1 = vload(s + vlanes);
          const float mold = mrow[hh][i], mx = std::max(mold, vhmax(vmax(s0, s1)));
          const float mref = mx == ninf ? 0.0f : mx;
          const vf16 p0 = vexp2(s0 - mref), p1 = vexp2(s1 - mref);
          vstore(s, p0);
          vstore(s + vlanes, p1);
          const float a = std::exp2(mold - mref);
          alpha[hh][i] = a;
          lrow[hh][i] = lrow[hh][i] * a + vhsum(p0 + p1);
          mrow[hh][i] = mx;
        }
      // O = alpha O + P V, per head, RB x cw register blocks; V rows now come from L2.
      for (int hh = 0; hh < hc; ++hh) {
        float* o = part_of(h0 + hh);
        for (int c0 = 0; c0 < dv; c0 += cw) {
          vf16 acc[RB][cw];
          for (int i = 0; i < RB; ++i) {
            const vf16 a = vbroadcast(alpha[hh][i]);
            for (int c = 0; c < cw; ++c) acc[i][c] = vload(o + i * D + (c0 + c) * vlanes) * a;
          }
          for (int j = 0; j < nb; ++j) {
            if (j < nnb)
              for (int e = 0; e < slice_elems; e += line_elems) __builtin_prefetch(vn[hh][j] + c0 * vlanes + e, 0, 2);
            vf16 v[cw];
            for (int c = 0; c < cw; ++c) v[c] = vload_as_float(vp[hh][j] + (c0 + c) * vlanes);
            for (int i = 0; i < RB; ++i) {
              const vf16 pij = vbroadcast(sb[hh][i][j]);
              for (int c = 0; c < cw; ++c) acc[i][c] += pij * v[c];
            }
          }
          for (int i = 0; i < RB; ++i)
            for (int c = 0; c < cw; ++c) vstore(o + i * D + (c0 + c) * vlanes, acc[i][c]);
        }
      }
    }
    // Normalise and write the LSE (natural log) where attend_part puts it: after Mpad rows of O.
    const int mp = host_plan::mpad(m_rows);
    for (int hh = 0; hh < hc; ++hh) {
      float* o = part_of(h0 + hh);
      float* m = o + static_cast<std::int64_t>(mp) * D;
      for (int i = 0; i < m_rows; ++i) {
        float* oi = o + i * D;
        const softmax_part_end e = end_softmax_base2(mrow[hh][i], lrow[hh][i], k_end > k_begin);
        if (e.empty) std::fill(oi, oi + D, 0.0f);
        else for (int c = 0; c < D; c += vlanes) vstore(oi + c, vload(oi + c) * vbroadcast(e.inv_l));
        m[i] = e.lse;
      }
    }
  }
}

//! n-way log-sum-exp merge of normalised partials (LongSpec Appendix A, Proposition A.1, n-way),
//! with the rules of lse_merge_weights: LSE = log sum_p exp(LSE_p), O = sum_p exp(LSE_p - LSE) O_p;
//! parts with LSE = -inf are skipped (never 0 * NaN), every part -inf gives O = 0 and LSE = -inf,
//! a NaN LSE gives NaN. `part_row(p)` points at part p's d contiguous values (float, half, bfloat16).
template <class OutT, class RowFn>
SPECDEC_FORCEINLINE void merge_row(int nparts, const float* lse_parts, RowFn&& part_row, int d, OutT* out,
                                   float* lse_out) noexcept {
  lse_merge_weights w;
  for (int p = 0; p < nparts; ++p) w.observe(lse_parts[p]);
  if (w.empty()) {
    for (int c = 0; c < d; ++c) out[c] = from_float<OutT>(0.0f);
    *lse_out = w.lse();
    return;
  }
  for (int p = 0; p < nparts; ++p) w.add(lse_parts[p]);
  w.finish();
  for (int c0 = 0; c0 < d; c0 += vlanes) {
    vf16 acc{};
    for (int p = 0; p < nparts; ++p) {
      if (lse_parts[p] == -std::numeric_limits<float>::infinity()) continue;
      acc += w.weight(lse_parts[p]) * vload_as_float(part_row(p) + c0);
    }
    vstore_as(out + c0, acc);
  }
  *lse_out = w.lse();
}

struct no_cache {};

//! The three passes of a host attention call (see the file comment). `cache` is a kv_layout or
//! no_cache; `tree` may be null when HasTree is false.
template <int D, bool HasCache, bool HasTree, class T, class Layout>
void run_host_attention_d(const host& policy, const attention_io_params<T>& io, const Layout& cache,
                          const tree_kv_params<T>* tree, int split, void* ws) {
  host_plan p;
  p.num_requests = io.num_requests;
  p.hkv = io.num_kv_heads;
  p.group = io.num_qo_heads / io.num_kv_heads;
  p.head_dim = D;
  p.split = split;
  p.has_cache = HasCache;
  p.has_tree = HasTree;
  p.heads_per_item = heads_per_item(io);
  plan_host_attention(p, io.q_indptr, [&](int r) {
    if constexpr (HasCache) return static_cast<int>(cache.length(r));
    else return 0 * r;
  }, ws);
  const int R = io.num_requests, hkv = p.hkv, G = p.group;
  const float qscale = io.scale * log2e_f;

  // Pass 1: transposed, scaled query blocks per (request, kv head).
  parallel_for(policy, static_cast<std::int64_t>(R) * hkv, [&](std::int64_t idx) {
    const int r = static_cast<int>(idx / hkv), g = static_cast<int>(idx % hkv);
    const int n = p.tokens(io.q_indptr, r), rows = n * G, mp = host_plan::mpad(rows);
    if (n == 0) return;
    float* qt = p.floats + p.qt_off[r] + static_cast<std::int64_t>(g) * D * mp;
    // Panels of 32 rows: row i lives at qt[(i / 32) * D * 32 + d * 32 + i % 32].
    for (int i = 0; i < mp; ++i) {
      float* dst = qt + static_cast<std::int64_t>(i / (2 * vlanes)) * D * (2 * vlanes) + i % (2 * vlanes);
      if (i >= rows) {
        for (int d = 0; d < D; ++d) dst[d * (2 * vlanes)] = 0.0f;
        continue;
      }
      const int t = io.q_indptr[r] + i / G, h = g * G + i % G;
      const T* qrow = io.q + t * io.q_stride_token + h * io.q_stride_head;
      for (int d0 = 0; d0 < D; d0 += vlanes) {
        const vf16 x = vload_as_float(qrow + d0) * qscale;
        for (int d = 0; d < vlanes; ++d) dst[(d0 + d) * (2 * vlanes)] = x[d];
      }
    }
  });

  // Pass 2: items over (request, head group, part); parts = cache chunks, then the tree. A head group
  // is all Hkv heads when every request has at most one 32-row panel of queries (decode-like,
  // memory-bound: read each token's rows of all heads together), else a single head (compute-bound:
  // keep one head's accumulators cache-resident).
  const int hpi = p.heads_per_item;
  const int groups = hkv / hpi;
  parallel_for(policy, p.total_items, [&](std::int64_t item) {
    const int r = static_cast<int>(std::upper_bound(p.item_begin, p.item_begin + R + 1, item) - p.item_begin) - 1;
    const int parts = plan_parts(p, r);
    const std::int64_t local = item - p.item_begin[r];
    const int g0 = static_cast<int>(local / parts) * hpi, part = static_cast<int>(local % parts);
    const int n = p.tokens(io.q_indptr, r), rows = n * G, mp = host_plan::mpad(rows);
    auto qt_of = [&](int hh) { return p.floats + p.qt_off[r] + static_cast<std::int64_t>(g0 + hh) * D * mp; };
    auto part_of = [&](int hh) {
      return p.floats + p.part_off[r] + (static_cast<std::int64_t>(g0 + hh) * parts + part) * mp * (D + 2);
    };
    const int cache_parts = HasTree ? parts - 1 : parts;
    if constexpr (HasCache) {
      if (part < cache_parts) {
        const int k0 = part * split, k1 = std::min<int>(cache.length(r), k0 + split);
        auto krow = [&](int t, int hh) { return static_cast<const T*>(cache.k_row(r, t, g0 + hh)); };
        auto vrow = [&](int t, int hh) { return static_cast<const T*>(cache.v_row(r, t, g0 + hh)); };
        // Few query rows per kv head (decode steps, small trees): vectorise along head_dim.
        if (rows <= 4) attend_part_rows<D, T, 4>(hpi, qt_of, part_of, rows, krow, vrow, k0, k1);
        else if (uses_row_kernel(rows)) attend_part_rows<D, T, 8>(hpi, qt_of, part_of, rows, krow, vrow, k0, k1);
        else attend_part<D, T, false>(hpi, qt_of, part_of, rows, G, krow, vrow, k0, k1, nullptr, 0);
        return;
      }
    }
    if constexpr (HasTree) {
      const int t0 = io.q_indptr[r];
      attend_part<D, T, true>(
          hpi, qt_of, part_of, rows, G,
          [&](int t, int hh) { return tree->k + (t0 + t) * tree->k_stride_token + (g0 + hh) * tree->k_stride_head; },
          [&](int t, int hh) { return tree->v + (t0 + t) * tree->v_stride_token + (g0 + hh) * tree->v_stride_head; },
          0, n, tree->mask + p.mask_off[r], words_per_row(n));
    }
    (void)cache_parts;
    (void)groups;
  });

  // Pass 3: merge the parts of each query row into O and LSE.
  parallel_for(policy, static_cast<std::int64_t>(R) * hkv, [&](std::int64_t idx) {
    const int r = static_cast<int>(idx / hkv), g = static_cast<int>(idx % hkv);
    const int n = p.tokens(io.q_indptr, r), rows = n * G, mp = host_plan::mpad(rows);
    const int parts = n > 0 ? plan_parts(p, r) : 0;
    const float* base = p.floats + p.part_off[r] + static_cast<std::int64_t>(g) * parts * mp * (D + 2);
    constexpr int max_stack_parts = 64;
    for (int i = 0; i < rows; ++i) {
      const int t = io.q_indptr[r] + i / G, h = g * G + i % G;
      T* orow = io.o + t * io.o_stride_token + h * io.o_stride_head;
      float* lrow = io.lse + t * io.lse_stride_token + h * io.lse_stride_head;
      // LSEs of the parts, gathered in chunks so any number of splits works without allocation.
      float lse_buf[max_stack_parts];
      auto part_row = [&](int q) {
        return base + static_cast<std::int64_t>(q) * mp * (D + 2) + static_cast<std::int64_t>(i) * D;
      };
      if (parts <= max_stack_parts) {
        for (int q = 0; q < parts; ++q) lse_buf[q] = base[static_cast<std::int64_t>(q) * mp * (D + 2) + mp * D + i];
        merge_row<T>(parts, lse_buf, part_row, D, orow, lrow);
      } else {
        // Many splits: merge chunks of 64 parts, folding each chunk's result into a running fp32
        // (O, LSE) with a two-way merge (Proposition A.1 is associative).
        alignas(64) float acc[D], chunk[D];
        float acc_lse = -std::numeric_limits<float>::infinity();
        std::fill(acc, acc + D, 0.0f);
        for (int q0 = 0; q0 < parts; q0 += max_stack_parts) {
          const int cnt = std::min(max_stack_parts, parts - q0);
          for (int q = 0; q < cnt; ++q)
            lse_buf[q] = base[static_cast<std::int64_t>(q0 + q) * mp * (D + 2) + mp * D + i];
          float chunk_lse;
          merge_row<float>(cnt, lse_buf, [&](int q) { return part_row(q0 + q); }, D, chunk, &chunk_lse);
          const float two[2] = {acc_lse, chunk_lse};
          merge_row<float>(2, two, [&](int q) -> const float* { return q == 0 ? acc : chunk; }, D, acc, &acc_lse);
        }
        for (int c = 0; c < D; c += vlanes) vstore_as(orow + c, vload(acc + c));
        *lrow = acc_lse;
      }
    }
  });
}

//! Dispatch on head_dim (validated to be 64, 128 or 256).
template <bool HasCache, bool HasTree, class T, class Layout>
void run_host_attention(const host& policy, const attention_io_params<T>& io, const Layout& cache,
                        const tree_kv_params<T>* tree, int split, void* ws) {
  switch (io.head_dim) {
    case 64: run_host_attention_d<64, HasCache, HasTree>(policy, io, cache, tree, split, ws); break;
    case 128: run_host_attention_d<128, HasCache, HasTree>(policy, io, cache, tree, split, ws); break;
    default: run_host_attention_d<256, HasCache, HasTree>(policy, io, cache, tree, split, ws); break;
  }
}

//! Bytes of scratch host_attention_entry<HasCache, HasTree> needs for these io params and split:
//! the plan it builds. `cache` is a kv_layout, or no_cache when HasCache is false. O(requests).
template <bool HasCache, bool HasTree, class T, class Layout>
[[nodiscard]] std::size_t host_attention_bytes(const attention_io_params<T>& io, const Layout& cache, int split) {
  host_plan p;
  p.num_requests = io.num_requests;
  p.hkv = io.num_kv_heads;
  p.group = io.num_qo_heads / io.num_kv_heads;
  p.head_dim = io.head_dim;
  p.split = split;
  p.has_cache = HasCache;
  p.has_tree = HasTree;
  p.heads_per_item = heads_per_item(io);
  return plan_host_attention(p, io.q_indptr, [&](int r) {
    if constexpr (HasCache) return static_cast<int>(cache.length(r));
    else return 0 * r;
  }, nullptr);
}

//! Sizes/obtains the workspace for a call and runs it. With a caller workspace: checks its size and
//! memory space (no allocation); otherwise allocates one internally.
template <bool HasCache, bool HasTree, class T, class Layout>
void host_attention_entry(std::string_view fn, const host& policy, const attention_io_params<T>& io,
                          const Layout& cache, const tree_kv_params<T>* tree, int split,
                          attention_workspace* ws) {
  const std::size_t need = host_attention_bytes<HasCache, HasTree>(io, cache, split);
  if (io.total_tokens == 0) return;
  if (ws != nullptr) {
    require(host_accessible(ws->space()), fn, "options.workspace", "host-accessible memory", ws->space());
    if (ws->size_bytes() < need)
      throw_invalid_argument(fn, "options.workspace", "at least " + std::to_string(need) + " bytes (see *_workspace_bytes)",
                             ws->size_bytes());
    run_host_attention<HasCache, HasTree>(policy, io, cache, tree, split, ws->data());
  } else {
    attention_workspace local(need);
    run_host_attention<HasCache, HasTree>(policy, io, cache, tree, split, local.data());
  }
}

}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec::detail
