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
//!
//! With TR (4 or 8; RV = 2, m_rows <= 16 + TR) the second row vector's rows are tail rows: the
//! broadcast step scores rows 0-15 only (one row vector, lanes_score_keys_for(1, widen) keys a step)
//! and rows 16..m_rows - 1 get dot products along head_dim from a row-major copy of their queries
//! in `scratch`, TK = 16 / TR keys x TR rows per step, their 16 sums reduced together (vhsum16), into
//! lanes 16.. of the same score block; the softmax and PV steps are those of RV = 2. The second row
//! vector costs D FMAs per key whatever the rows in it; the tail costs TR x D / 16 and a share of
//! one reduction. `scratch`: host_kernel_scratch_floats(D) floats, read only with TR.
template <int D, class T, int RV, int TR, class QtFn, class PartFn, class KRow, class VRow>
void attend_part_lanes_rv(int nheads, QtFn&& qt_of, PartFn&& part_of, int m_rows, KRow&& krow, VRow&& vrow,
                          int k_begin, int k_end, float* scratch) noexcept {
  // m_rows <= 16 * RV, or 16 + TR with tail rows: attend_part_lanes picks the form by the row count.
  static_assert((RV == 1 || RV == 2) && (TR == 0 || (RV == 2 && (TR == 4 || TR == 8))));
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  constexpr bool widen = !std::is_same_v<T, float>;
  constexpr int SRV = TR > 0 ? 1 : RV;  // row vectors the broadcast score step computes
  constexpr int KB = lanes_score_keys_for(SRV, widen), LB = lanes_block_for(SRV, widen), NH = dot_heads;
  constexpr int W = RV * vlanes;  // rows per score vector set
  constexpr int TK = TR > 0 ? vlanes / TR : 1;  // keys per tail step: TK x TR sums reduced together
  static_assert(TR == 0 || (2 * vlanes == W && KB % TK == 0 && TK * TR == vlanes));
  static_assert(TR == 0 || NH * TR * static_cast<std::size_t>(D) <= host_kernel_scratch_floats(D));
  alignas(64) float st[NH][LB][W];  // S, then P, key-major: a key's rows together
  alignas(64) float mrow[NH][W], lrow[NH][W], alpha[W];
  alignas(64) float kw[widen ? KB * D : 1];
  const T* vp[NH][LB];
  const T* vn[NH][LB];  // the next block's V rows, prefetched during this block's PV
  const int rows4 = static_cast<int>(round_up(m_rows, 4));
  // Tail rows 16..16 + TR - 1, row-major (dot products along head_dim), in the workspace slot.
  float(*const __restrict qtail)[TR > 0 ? TR : 1][D] = reinterpret_cast<float(*)[TR > 0 ? TR : 1][D]>(scratch);
  if constexpr (TR > 0) {
    // Score lanes 16 + TR..31 are never computed: zeros, so the softmax reads defined values there.
    for (int hh = 0; hh < NH; ++hh)
      for (int j = 0; j < LB; ++j) std::fill(&st[hh][j][vlanes + TR], &st[hh][j][0] + W, 0.0f);
  } else {
    (void)qtail;
  }

  for (int h0 = 0; h0 < nheads; h0 += NH) {
    const int hc = std::min(NH, nheads - h0);
    for (int hh = 0; hh < hc; ++hh) {
      if constexpr (TR > 0) {
        const float* qt = qt_of(h0 + hh);
        for (int e = 0; e < TR; ++e)
          for (int d = 0; d < D; ++d) qtail[hh][e][d] = vlanes + e < m_rows ? qt[d * (2 * vlanes) + vlanes + e] : 0.0f;
      }
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
          score_keys<D, SRV, KB, W>(qt_of(h0 + hh), kr, &st[hh][j0][0]);
          if constexpr (TR > 0) {
            // The tail rows: TK keys x TR rows of dot products along head_dim at a time, their 16
            // sums reduced together (as the rows kernel's two-key step), into lanes 16.. of the keys.
            SPECDEC_UNROLL for (int jt = 0; jt < KB; jt += TK) {
              vf16 acc[TK][TR];
              SPECDEC_UNROLL for (int t = 0; t < TK; ++t)
                SPECDEC_UNROLL for (int e = 0; e < TR; ++e) acc[t][e] = vf16{};
              for (int c = 0; c < D; c += vlanes) {
                vf16 kv[TK];
                SPECDEC_UNROLL for (int t = 0; t < TK; ++t) kv[t] = vload(kr[jt + t] + c);
                SPECDEC_UNROLL for (int e = 0; e < TR; ++e) {
                  const vf16 q = vkeep(vload(&qtail[hh][e][c]));  // one load for the TK keys
                  SPECDEC_UNROLL for (int t = 0; t < TK; ++t) acc[t][e] += kv[t] * q;
                }
              }
              vf16 all[vlanes];
              SPECDEC_UNROLL for (int t = 0; t < TK; ++t)
                SPECDEC_UNROLL for (int e = 0; e < TR; ++e) all[t * TR + e] = acc[t][e];
              alignas(64) float sums[vlanes];
              vstore(sums, vhsum16(all));
              SPECDEC_UNROLL for (int t = 0; t < TK; ++t)
                std::memcpy(&st[hh][j0 + jt + t][vlanes], sums + t * TR, sizeof(float) * TR);
            }
          }
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

//! Query rows past 16 up to which attend_part_lanes scores them as tail rows (dot products along
//! head_dim, 4 or 8 at a time) instead of as a second 16-lane row vector: 8 where a 16-lane vector
//! is one register (the avx512 level), else 0 (the tail step's 16 accumulators would not fit).
//! #24's fp16 trees of 5 and 6 tokens at GQA 4 (20 and 24 rows, D 128) ran 1.07-1.14x faster on a Zen 4
//! core at a 4K and a 32K cache (RESULTS.md, session 61).
inline constexpr int lanes_tail_rows = vreg_parts == 1 ? 8 : 0;

//! attend_part_lanes_rv with one row vector for m_rows <= 16, one and tail rows up to 16 +
//! lanes_tail_rows, two up to max_lane_rows (32). `scratch`: host_kernel_scratch_floats(D) floats
//! (the tail rows' queries, row-major).
template <int D, class T, class QtFn, class PartFn, class KRow, class VRow>
void attend_part_lanes(int nheads, QtFn&& qt_of, PartFn&& part_of, int m_rows, KRow&& krow, VRow&& vrow,
                       int k_begin, int k_end, float* scratch) noexcept {
  if (m_rows <= vlanes) return attend_part_lanes_rv<D, T, 1, 0>(nheads, qt_of, part_of, m_rows, krow, vrow, k_begin, k_end, scratch);
  if constexpr (lanes_tail_rows == 8) {  // (instantiated only where it can run)
    if (m_rows <= vlanes + 4) return attend_part_lanes_rv<D, T, 2, 4>(nheads, qt_of, part_of, m_rows, krow, vrow, k_begin, k_end, scratch);
    if (m_rows <= vlanes + 8) return attend_part_lanes_rv<D, T, 2, 8>(nheads, qt_of, part_of, m_rows, krow, vrow, k_begin, k_end, scratch);
  }
  attend_part_lanes_rv<D, T, 2, 0>(nheads, qt_of, part_of, m_rows, krow, vrow, k_begin, k_end, scratch);
}
