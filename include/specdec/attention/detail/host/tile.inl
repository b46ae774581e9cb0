// tile.inl: the body of tile.hpp (see there); no include guard, no #include, no namespace: compiled at
// the including file's flags by tile.hpp and once per dispatch level by kernels.hpp
// (core/detail/isa_levels.inl).

inline constexpr int kv_tile = 64;        //!< KV tokens per staged tile (one mask word per tree tile)
inline constexpr float log2e_f = 1.4426950408889634f;
[[nodiscard]] constexpr std::int64_t round_up(std::int64_t x, std::int64_t m) noexcept { return (x + m - 1) / m * m; }

//! Query rows rounded up to whole 32-row panels (the score microkernel's widest block): the row
//! count of a query panel set and of a part's partial O.
[[nodiscard]] constexpr int padded_rows(int rows) noexcept { return static_cast<int>(round_up(rows, 2 * vlanes)); }

//! Native registers per 16-lane vector (1 with AVX-512, 2 with AVX2, 4 with SSE or NEON).
inline constexpr int vreg_parts = vlanes / native_lanes;

//! Keys per register block of the tile kernel's score microkernel with `rv` row vectors (8 with
//! AVX-512, fewer where the register file is smaller); a power of two that divides the 8-row
//! staging pad.
[[nodiscard]] constexpr int tile_score_keys(int rv) noexcept { return fit_block(rv, rv + 1, 8); }
//! Keys per register block of the lanes kernel's score microkernel (one row vector, K rows read in
//! place): as many KB accumulators as fit beside the query vector and the broadcast key element,
//! at most 8 (AVX-512 8, AVX2 6: 12 of 16 ymm accumulate, SSE 2). Measured on a Zen 3 core
//! (benchmarks/RESULTS.md, session 34): the 6-key block ran at 1.9 FMAs per cycle in isolation
//! against 1.1 for 4 keys (8 ymm accumulators do not hide the FMA latency there). The tile kernel
//! keeps tile_score_keys: the same change made its cells 10-25% slower on that core.
//! With rv = 2 row vectors (17-32 rows): AVX-512 8 (16 of 32 zmm accumulate), AVX2 2.
//! With one row vector on widened (fp16/bf16) K rows at the avx512 level: 16 keys (16 zmm
//! accumulators), so the query vector is loaded once per 16 broadcast FMAs instead of 8. That step
//! is load-bound (a broadcast load per FMA), and on an Intel Xeon #24's fp16 trees 3-4 ran 3-5%
//! faster at 4K and 32K. fp32 rows (read in place, not from the L1 buffer) keep 8: the demo
//! target's fp32 cells of 10-16 rows came out up to 1.1x slower with 16 (RESULTS.md, session 49).
[[nodiscard]] constexpr int lanes_score_keys_for(int rv, bool widened) noexcept {
  return std::clamp((native_vregs - rv * vreg_parts - 1) / (rv * vreg_parts), 1,
                    vreg_parts == 1 && rv == 1 && widened ? 16 : 8);
}
//! Column vectors per register block of the PV microkernel: 4 with AVX-512 (a 64-column slice),
//! 1 where the register file is smaller.
inline constexpr int pv_cols = fit_block(4 + 1, 1, 4);
//! Query rows per register block of the tile kernel's PV microkernel.
inline constexpr int tile_pv_rows = 4;
//! Query rows per register block of the lanes kernel's PV microkernel (pv_blocks; an even number)
//! where it does not run pv_row_groups: 4 with AVX-512 (fp32 V rows there); with one column vector
//! as many as fit beside it and the broadcast weight (AVX2: 6 rows, 12 ymm accumulators, for the
//! reason given at lanes_score_keys_for).
inline constexpr int lanes_pv_rows =
    pv_cols > 1 ? 4 : std::clamp((native_vregs - vreg_parts - 1) / vreg_parts / 2 * 2, 2, 8);

//! The score microkernel: S^T[jj][r * 16 + lane] = sum_d K_jj[d] * Qt[d][r * 16 + lane] for the KB
//! keys whose fp32 rows are kr[0..KB) and RV row vectors of the [D][32] query panel `qt`; row jj
//! of the result at s + jj * SS. The key's dot product runs over d in order whatever KB is, so
//! every block size gives the same bits.
template <int D, int RV, int KB, int SS>
SPECDEC_FORCEINLINE void score_keys(const float* __restrict qt, const float* const (&kr)[KB], float* __restrict s) noexcept {
  vf16 acc[KB][RV];
  SPECDEC_UNROLL for (int jj = 0; jj < KB; ++jj)
    SPECDEC_UNROLL for (int r = 0; r < RV; ++r) acc[jj][r] = vf16{};
  for (int d = 0; d < D; ++d) {
    vf16 qv[RV];
    SPECDEC_UNROLL for (int r = 0; r < RV; ++r) qv[r] = vload(qt + d * (2 * vlanes) + r * vlanes);
    SPECDEC_UNROLL for (int jj = 0; jj < KB; ++jj) {
      const vf16 kk = vbroadcast(kr[jj][d]);
      SPECDEC_UNROLL for (int r = 0; r < RV; ++r) acc[jj][r] += kk * qv[r];
    }
  }
  SPECDEC_UNROLL for (int jj = 0; jj < KB; ++jj)
    SPECDEC_UNROLL for (int r = 0; r < RV; ++r) vstore(s + jj * SS + r * vlanes, acc[jj][r]);
}

//! S^T[j][lane] = sum_d Kf[j][d] * Qt_panel[d][lane] for j < roundup(nb, 8), RV row vectors.
//! The panel is [D][32] contiguous floats (GEMM-style packing), so its 16 KB stream through L1 without
//! the set conflicts a [D][Mpad] layout with a power-of-two row stride would cause.
template <int D, int RV>
SPECDEC_FORCEINLINE void score_tile(const float* __restrict qt, const float* __restrict kf, int nb,
                                    float* __restrict s) noexcept {
  constexpr int KB = tile_score_keys(RV);  // divides the 8-row staging pad
  for (int j0 = 0; j0 < nb; j0 += KB) {
    const float* kr[KB];
    SPECDEC_UNROLL for (int jj = 0; jj < KB; ++jj) kr[jj] = kf + (j0 + jj) * D;
    score_keys<D, RV, KB, 2 * vlanes>(qt, kr, s + j0 * (2 * vlanes));
  }
}

//! One online-softmax step of 16 query rows (one per lane) over a block of nb base-2 scores, key j's
//! vector at s + j * SS: the rows' running max m and sum l (16 each) are updated in place, alpha
//! gets exp2(m_old - m_new), the factor by which the rows' O is scaled before this block's P V is
//! added, and the scores become P = exp2(s - m_new). A row that has seen only -inf scores keeps
//! m = -inf and gets P = 0, alpha = 0 (its reference max is taken as 0: no inf - inf). Shared by the
//! tile and lanes kernels.
template <int SS>
SPECDEC_FORCEINLINE void softmax_block(float* __restrict s, int nb, float* __restrict m, float* __restrict l,
                                       float* __restrict alpha) noexcept {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  const vf16 mold = vload(m);
  vf16 mx = mold;
  for (int j = 0; j < nb; ++j) mx = vmax(mx, vload(s + j * SS));
  const vf16 mref = vselect(mx == ninf, vf16{}, mx);
  vstore(alpha, vexp2(mold - mref));
  vf16 sum{};
  for (int j = 0; j < nb; ++j) {
    const vf16 p = vexp2(vload(s + j * SS) - mref);
    vstore(s + j * SS, p);
    sum += p;
  }
  vstore(l, vload(l) * vload(alpha) + sum);
  vstore(m, mx);
}

//! The end of a part, rows [0, rows) of its O (`o`, rows D apart): O /= l, or zeros for a row
//! without keys, and the row's LSE in natural log, ln 2 * (m + log2 l) or -inf without keys
//! (end_softmax_base2), written to lse[i]. Rows [0, with_keys) had keys; m and l are the rows'
//! running max (base 2) and sum. lse may be m (attend_part keeps m where the LSE goes). Shared by
//! the three host kernels.
template <int D>
void finish_part(float* o, float* lse, int rows, int with_keys, const float* m, const float* l) noexcept {
  for (int i = 0; i < rows; ++i) {
    float* oi = o + static_cast<std::int64_t>(i) * D;
    const softmax_part_end e = end_softmax_base2(m[i], l[i], i < with_keys);
    if (e.empty) std::fill(oi, oi + D, 0.0f);
    else for (int c = 0; c < D; c += vlanes) vstore(oi + c, vload(oi + c) * vbroadcast(e.inv_l));
    lse[i] = e.lse;
  }
}

//! One register block of the PV microkernels: O[i][c] = alpha[i] * O[i][c] + sum_{j < nb} P[j][i] *
//! V_j[c] for rows i0..i0+R-1 and the CW column vectors from c0 (P[j][i] at pt[j * PS + i]; V_j is
//! vrow(j) in storage type, widened in registers). per_key(c0, CW * 16, j) runs before key j is read
//! when i0 is 0 (a prefetch hook, once per column slice). Keys are accumulated in order, so every R
//! and CW give the same bits.
template <int D, int PS, int R, int CW, class VRowFn, class PerKey>
SPECDEC_FORCEINLINE void pv_register_block(float* __restrict o, const float* __restrict alpha, const float* __restrict pt,
                                           VRowFn& vrow, int nb, int i0, int c0, PerKey& per_key) noexcept {
  vf16 acc[R][CW];
  SPECDEC_UNROLL for (int ii = 0; ii < R; ++ii) {
    const vf16 a = vbroadcast(alpha[i0 + ii]);
    SPECDEC_UNROLL for (int c = 0; c < CW; ++c) acc[ii][c] = vload(o + (i0 + ii) * D + c0 + c * vlanes) * a;
  }
  for (int j = 0; j < nb; ++j) {
    if (i0 == 0) per_key(c0, CW * vlanes, j);
    vf16 vv[CW];  // each read by R FMAs: one load each (vkeep)
    SPECDEC_UNROLL for (int c = 0; c < CW; ++c) vv[c] = vkeep(vload_as_float(vrow(j) + c0 + c * vlanes));
    // Unrolled (SPECDEC_UNROLL) before GCC's -O3 unroll-and-jam sees a loop nest, which matters
    // beyond -O2: the jam unrolled the key loop by 2 around this loop (two keys' V vectors live
    // at once), which spilled an accumulator to the stack on AVX2 (6 rows x 2 ymm; its
    // store-reload chain bound the loop). Without the jam the lanes and tile kernels ran
    // 1.03-1.40x faster on a Zen 3 core (RESULTS.md, session 35). (#pragma GCC unroll on the
    // key loop itself does not stop the jam.)
    SPECDEC_UNROLL for (int ii = 0; ii < R; ++ii) {
      const vf16 p = vbroadcast(pt[j * PS + i0 + ii]);
      SPECDEC_UNROLL for (int c = 0; c < CW; ++c) acc[ii][c] += p * vv[c];
    }
  }
  SPECDEC_UNROLL for (int ii = 0; ii < R; ++ii)
    SPECDEC_UNROLL for (int c = 0; c < CW; ++c) vstore(o + (i0 + ii) * D + c0 + c * vlanes, acc[ii][c]);
}

//! The PV microkernel: O[i][c] = alpha[i] * O[i][c] + sum_{j < nb} P[j][i] * V_j[c] for `rows` (a
//! multiple of 4) rows i of O from `o` (rows D apart; P[j][i] at pt[j * PS + i]); V_j is vrow(j) in
//! storage type, widened in registers. Register blocks of PR rows x pv_cols column vectors, then
//! blocks of 4 and 2 rows for the rest; column slices outer, so one slice of the V
//! rows stays in L1 while every row block consumes it. per_key(c0, width, j) runs before the first
//! row block of the slice of `width` columns from c0 reads key j (a prefetch hook). Keys are
//! accumulated in order whatever the blocks are, so every block size gives the same bits.
template <int D, int PS, int PR, class VRowFn, class PerKey>
SPECDEC_FORCEINLINE void pv_blocks(float* __restrict o, const float* __restrict alpha, const float* __restrict pt,
                                   VRowFn&& vrow, int nb, int rows, PerKey&& per_key) noexcept {
  static_assert(PR % 2 == 0);
  constexpr int CW = pv_cols;
  for (int c0 = 0; c0 < D; c0 += CW * vlanes) {
    int i0 = 0;
    for (; i0 + PR <= rows; i0 += PR) pv_register_block<D, PS, PR, CW>(o, alpha, pt, vrow, nb, i0, c0, per_key);
    if constexpr (PR > 4) {
      if (i0 + 4 <= rows) {
        pv_register_block<D, PS, 4, CW>(o, alpha, pt, vrow, nb, i0, c0, per_key);
        i0 += 4;
      }
    }
    if constexpr (PR > 2) {
      if (i0 < rows) pv_register_block<D, PS, 2, CW>(o, alpha, pt, vrow, nb, i0, c0, per_key);
    }
  }
}

//! Column vectors per register block of a PV group of R rows: as many as fit beside the R x CW
//! accumulators, the CW V vectors and the broadcast weight, a power of two (D is a multiple of 64:
//! 4 column vectors), at most 4. AVX-512: R 4 -> 4, 8 -> 2, 12 -> 2, 16 -> 1.
template <int R>
inline constexpr int pv_group_cols = fit_block(R + 1, 1, 4);

//! The PV step of R rows i0..i0+R-1 in one register block per column slice (pv_group_cols<R>
//! vectors wide), so that each V vector is widened once for all R rows. Same arguments and bits as
//! pv_blocks; per_key runs when i0 is 0. The rows kernel's PV step (4 or 8 rows) and pv_row_groups'
//! groups.
template <int D, int PS, int R, class VRowFn, class PerKey>
SPECDEC_FORCEINLINE void pv_group(float* __restrict o, const float* __restrict alpha, const float* __restrict pt,
                                  VRowFn& vrow, int nb, int i0, PerKey& per_key) noexcept {
  constexpr int CW = pv_group_cols<R>;
  for (int c0 = 0; c0 < D; c0 += CW * vlanes) pv_register_block<D, PS, R, CW>(o, alpha, pt, vrow, nb, i0, c0, per_key);
}

//! The per_key hook of the rows and lanes kernels' PV step: prefetches (into L2) the next block's
//! V rows vn[0..nnb) a 64-byte line at a time, each line once: the lines that start in the columns
//! [c0, c0 + w) of the slice being read (w is 16, 32 or 64 and c0 a multiple of it, so a slice of a
//! line or more starts on a line).
template <class T>
[[nodiscard]] auto prefetch_next_v(const T* const* vn, int nnb) noexcept {
  return [vn, nnb](int c0, int w, int j) {
    constexpr int line_elems = 64 / static_cast<int>(sizeof(T));
    if (j >= nnb) return;
    if (w >= line_elems)
      for (int e = 0; e < w; e += line_elems) __builtin_prefetch(vn[j] + c0 + e, 0, 2);
    else if (c0 % line_elems == 0)
      __builtin_prefetch(vn[j] + c0, 0, 2);
  };
}

//! The lanes kernel's PV step on fp16/bf16 V rows at the avx512 level: the rows in as few pv_group
//! register blocks as the register file allows, 12 rows x 2 column vectors, then 8 x 2 or 4 x 4 for
//! the rest, and 16 rows x 1 column vector when exactly 16 rows are left, so each V vector is widened
//! once per group instead of once per 4 rows (pv_blocks). On an Intel Xeon (AVX-512), where an fp16
//! -> fp32 conversion costs about two FMA slots, fp16 D 128 with the block in L1 (BM_pv_step): 4-row
//! blocks 62-63% of the FMA peak at 4-32 rows, these groups 73-82% at 8-32 (RESULTS.md, session
//! 49). Not for fp32 V, where there is nothing to save (attend_part_lanes_rv). Same arguments,
//! result and bits as pv_blocks; per_key runs in the first group.
template <int D, int PS, class VRowFn, class PerKey>
SPECDEC_FORCEINLINE void pv_row_groups(float* __restrict o, const float* __restrict alpha, const float* __restrict pt,
                                       VRowFn&& vrow, int nb, int rows, PerKey&& per_key) noexcept {
  // (D > 0: dependent, so a level that never calls it still compiles the definition.)
  static_assert(D > 0 && vreg_parts == 1, "pv_row_groups: its groups fit the avx512 level's 32 registers only");
  int i0 = 0;
  for (; rows - i0 >= 12 && rows - i0 != 16; i0 += 12) pv_group<D, PS, 12>(o, alpha, pt, vrow, nb, i0, per_key);
  switch (rows - i0) {
    case 16: pv_group<D, PS, 16>(o, alpha, pt, vrow, nb, i0, per_key); break;
    case 8: pv_group<D, PS, 8>(o, alpha, pt, vrow, nb, i0, per_key); break;
    case 4: pv_group<D, PS, 4>(o, alpha, pt, vrow, nb, i0, per_key); break;
    default: break;  // rows is a multiple of 4
  }
}

//! O[row0 + i][:] = alpha[i] * O[row0 + i][:] + sum_j P[j][i] * Vf[j][:] for i < rows (multiple of 4).
template <int D>
SPECDEC_FORCEINLINE void pv_tile(float* __restrict o, const float* __restrict alpha, const float* __restrict pt,
                                 const float* __restrict vf, int nb, int rows) noexcept {
  pv_blocks<D, 2 * vlanes, tile_pv_rows>(o, alpha, pt, [&](int j) { return vf + j * D; }, nb, rows, [](int, int, int) {});
}

//! Software-prefetches one K or V row (D elements), a 64-byte line at a time, with
//! __builtin_prefetch locality `Locality`: 2 = prefetcht1 (into L2), the hint the kernels here use
//! for rows they read a tile or a block later (see stage_rows and kpf_dist for why not L1), except
//! the lanes kernel's K at the avx512 level (lanes_kpf_locality).
template <int D, int Locality = 2, class T>
SPECDEC_FORCEINLINE void prefetch_row(const T* row) noexcept {
  constexpr int line_elems = 64 / static_cast<int>(sizeof(T));
  SPECDEC_UNROLL for (int c = 0; c < D; c += line_elems) __builtin_prefetch(row + c, 0, Locality);
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
