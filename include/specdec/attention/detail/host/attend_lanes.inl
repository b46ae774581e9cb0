// attend_lanes.inl: the body of attend_lanes.hpp (see there); no include guard, no #include, no namespace: compiled
// at the including file's flags by attend_lanes.hpp and once per dispatch level by kernels.inl
// (core/detail/isa_levels.inl).

//! Query rows per kv head the lanes kernel takes: two 16-lane row vectors (attention_kernel::lanes
//! pins it for up to this many; the same on every dispatch level, so a pinned call is valid or not
//! whatever the CPU).
inline constexpr int max_lane_rows = 2 * vlanes;
//! Query rows per kv head up to which attention_kernel::automatic runs a cache part with more than
//! max_dot_rows through the lanes kernel instead of the tile kernel: 32 (two row vectors) where a
//! row vector is one register (the avx512 level: 8-key score blocks with 16 accumulators; on a Zen 5
//! core 1.2-1.4x faster than the tile kernel at a 4K cache, RESULTS.md, session 41), else 16. At
//! 17-32 rows both kernels' score blocks hold 2 keys on AVX2, and which is faster there has not
//! been measured, so AVX2 keeps the tile kernel it had.
inline constexpr int lanes_auto_rows = vreg_parts == 1 ? 2 * vlanes : vlanes;
//! The kernel attention_kernel::automatic runs on the cache parts of a request with `rows` query
//! rows per kv head (tokens x Hq / Hkv).
[[nodiscard]] constexpr attention_kernel automatic_cache_kernel(int rows) noexcept {
  return uses_row_kernel(rows) ? attention_kernel::rows
                               : rows <= lanes_auto_rows ? attention_kernel::lanes : attention_kernel::tiles;
}
//! Keys per online-softmax block of attend_part_lanes with RV row vectors: whole score blocks, about
//! 32 keys (the rows kernel's dot_block).
[[nodiscard]] constexpr int lanes_block_for(int rv, bool widened) noexcept {
  const int kb = lanes_score_keys_for(rv, widened);
  return kb * ((dot_block + kb - 1) / kb);
}
//! Tokens ahead at which attend_part_lanes software-prefetches K rows, and the __builtin_prefetch
//! locality: at the avx512 level 16 into L1 (prefetcht0), elsewhere the rows kernel's kpf_dist (32)
//! into L2. The lanes kernel computes 2-4x longer per byte than the rows kernel, and on a Zen 5
//! core the near L1 form ran #24's fp16 grid at a 32K cache 1.27-1.36x faster than the rows
//! kernel's schedule (trees 3-8 at GQA 4, one thread; 8 tokens ahead was close, 32 into L1
//! between the two), with the 4K cells within 5% (RESULTS.md, session 41). Not measured on other
//! cores, so AVX2 and the portable levels keep the schedule their figures were taken with (on a
//! Zen 4 core the rows kernel's far L1 form was the slow one, attend_rows.inl).
inline constexpr int lanes_kpf_dist = vreg_parts == 1 ? 16 : kpf_dist;
inline constexpr int lanes_kpf_locality = vreg_parts == 1 ? 3 : 2;
//! Tokens ahead at which attend_part_lanes also prefetches K rows into L2 where the near prefetch
//! above goes to L1 (the avx512 level; 0: none). On a Zen 4 core the near prefetcht0 of a line still
//! in DRAM or L3 holds an L1 miss buffer for the whole round trip (attend_rows.inl): #24's fp16 grid
//! ran trees 3-4 at a 4K and a 32K cache 1.14-1.38x faster with this far prefetch (the near one then
//! hits L2), trees 5-8 1.01-1.17x, and the demo target's fp32 D 64 trees 5-8 1.07-1.28x (RESULTS.md,
//! session 59). 64 into L2 alone was as fast there, 32 and 128 within 5-8%, any distance into L1
//! 1.25-1.35x slower; the near L1 prefetch is kept for the Zen 5 core it was measured on (session
//! 41), where the far one is not measured.
inline constexpr int lanes_kpf_far = vreg_parts == 1 ? 64 : 0;

//! Unmasked online-softmax attention of m_rows <= 16 * RV query rows per kv head over keys
//! [k_begin, k_end) of `nheads` kv heads (automatic runs it for 9 to lanes_auto_rows rows, RV = 2
//! past 16; pinned, it takes 1-32). Why a third kernel: with 9 or more rows the rows kernel's
//! register block (8 rows x head_dim) no longer fits, and the tile kernel stages each 64-key tile
//! into an fp32 buffer before computing on it, so its memory reads stall the core instead of
//! overlapping the FMAs: on a Zen 3 core (AVX2) the demo target's 5-token verification read its
//! cache at 2.8 GB/s through the tile kernel and at 4.3 through this one (BM_hybrid_demo_shape_pinned,
//! one thread; RESULTS.md, session 34); on a Zen 5 core (AVX-512, RV = 2) #24's fp16 trees of 5-8
//! tokens at GQA 4 ran 1.2-1.4x faster than through the tile kernel (session 41).
//!
//! Per block of lanes_block_for(RV, widen) keys: scores token-major over the heads (score_keys on the K
//! rows in place, RV row vectors; fp16/bf16 rows are widened into a small L1 buffer first),
//! prefetching K lanes_kpf_dist tokens ahead (into L1 at the avx512 level, L2 elsewhere; at the
//! avx512 level also lanes_kpf_far tokens ahead into L2) and the
//! block's V rows into L2 as the rows kernel does; an online softmax per head and row vector with
//! the rows in lanes; then O += P V per head on the V rows in place, m_rows rounded up to 4
//! (pv_row_groups for fp16/bf16 rows at the avx512 level, pv_blocks elsewhere), prefetching the
//! next block's V. Score lanes m_rows..16 * RV - 1 have zero queries and are
//! computed but never written out.
template <int D, class T, int RV, class QtFn, class PartFn, class KRow, class VRow>
void attend_part_lanes_rv(int nheads, QtFn&& qt_of, PartFn&& part_of, int m_rows, KRow&& krow, VRow&& vrow,
                          int k_begin, int k_end) noexcept {
  static_assert(RV == 1 || RV == 2);  // m_rows <= 16 * RV: attend_part_lanes picks RV by the row count
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  constexpr bool widen = !std::is_same_v<T, float>;
  constexpr int KB = lanes_score_keys_for(RV, widen), LB = lanes_block_for(RV, widen), NH = dot_heads;
  constexpr int W = RV * vlanes;  // rows per score vector set
  alignas(64) float st[NH][LB][W];  // S, then P, key-major: a key's rows together
  alignas(64) float mrow[NH][W], lrow[NH][W], alpha[W];
  alignas(64) float kw[widen ? KB * D : 1];
  const T* vp[NH][LB];
  const T* vn[NH][LB];  // the next block's V rows, prefetched during this block's PV
  const int rows4 = static_cast<int>(round_up(m_rows, 4));

  for (int h0 = 0; h0 < nheads; h0 += NH) {
    const int hc = std::min(NH, nheads - h0);
    for (int hh = 0; hh < hc; ++hh) {
      float* o = part_of(h0 + hh);
      std::fill(o, o + static_cast<std::int64_t>(rows4) * D, 0.0f);
      std::fill(mrow[hh], mrow[hh] + W, ninf);
      std::fill(lrow[hh], lrow[hh] + W, 0.0f);
    }
    for (int b = k_begin; b < k_end; b += LB) {
      const int nb = std::min(LB, k_end - b);
      const int nnb = std::clamp(k_end - (b + LB), 0, LB);  // rows of the next block
      for (int j0 = 0; j0 < nb; j0 += KB) {
        for (int hh = 0; hh < hc; ++hh) {
          const float* kr[KB];
          SPECDEC_UNROLL for (int jj = 0; jj < KB; ++jj) {
            // A key past nb repeats the block's last one (its score is never read).
            const int j = std::min(j0 + jj, nb - 1);
            const T* src = krow(b + j, h0 + hh);
            if (j0 + jj < nb) {
              const T* vr = vrow(b + j, h0 + hh);
              vp[hh][j] = vr;
              if (j < nnb) vn[hh][j] = vrow(b + LB + j, h0 + hh);
              prefetch_row<D>(vr);
              if (b + j + lanes_kpf_dist < k_end) prefetch_row<D, lanes_kpf_locality>(krow(b + j + lanes_kpf_dist, h0 + hh));
              if (lanes_kpf_far > 0 && b + j + lanes_kpf_far < k_end) prefetch_row<D, 2>(krow(b + j + lanes_kpf_far, h0 + hh));
            }
            if constexpr (widen) {
              widen_row(src, kw + jj * D, D);
              kr[jj] = kw + jj * D;
            } else {
              kr[jj] = src;
            }
          }
          score_keys<D, RV, KB, W>(qt_of(h0 + hh), kr, &st[hh][j0][0]);
        }
      }
      for (int hh = 0; hh < hc; ++hh) {
        // Online softmax over the block, the rows in lanes (as attend_part's), a row vector at a time.
        SPECDEC_UNROLL for (int rv = 0; rv < RV; ++rv)
          softmax_block<W>(&st[hh][0][rv * vlanes], nb, mrow[hh] + rv * vlanes, lrow[hh] + rv * vlanes, alpha + rv * vlanes);
        // O = alpha O + P V from the V rows in place (in L2 by now), prefetching the next block's.
        const T* const* vph = vp[hh];
        const auto v_row = [vph](int j) { return vph[j]; };
        const auto prefetch_next = prefetch_next_v(vn[hh], nnb);
        // Row groups where they save widenings (fp16/bf16 V at the avx512 level). With fp32 V there is
        // nothing to save, and 4-row blocks ran slightly faster (BM_pv_step<float> on an Intel Xeon,
        // 12-32 rows: 92-96% of the FMA peak against 91-93%; RESULTS.md, session 49).
        if constexpr (vreg_parts == 1 && widen) pv_row_groups<D, W>(part_of(h0 + hh), alpha, &st[hh][0][0], v_row, nb, rows4, prefetch_next);
        else pv_blocks<D, W, lanes_pv_rows>(part_of(h0 + hh), alpha, &st[hh][0][0], v_row, nb, rows4, prefetch_next);
      }
    }
    // Normalise and write the LSE where attend_part puts it: after Mpad rows of O.
    const int mp = padded_rows(m_rows);
    for (int hh = 0; hh < hc; ++hh) {
      float* o = part_of(h0 + hh);
      finish_part<D>(o, o + static_cast<std::int64_t>(mp) * D, m_rows, k_end > k_begin ? m_rows : 0, mrow[hh], lrow[hh]);
    }
  }
}

//! attend_part_lanes_rv with one row vector for m_rows <= 16, two up to max_lane_rows (32).
template <int D, class T, class QtFn, class PartFn, class KRow, class VRow>
void attend_part_lanes(int nheads, QtFn&& qt_of, PartFn&& part_of, int m_rows, KRow&& krow, VRow&& vrow,
                       int k_begin, int k_end) noexcept {
  if (m_rows <= vlanes) attend_part_lanes_rv<D, T, 1>(nheads, qt_of, part_of, m_rows, krow, vrow, k_begin, k_end);
  else attend_part_lanes_rv<D, T, 2>(nheads, qt_of, part_of, m_rows, krow, vrow, k_begin, k_end);
}
