// attend_rows.inl: the body of attend_rows.hpp (see there); no include guard, no #include, no namespace: compiled at
// the including file's flags by attend_rows.hpp and once per dispatch level by kernels.hpp
// (core/detail/isa_levels.inl).

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
//! `scratch`: host_kernel_scratch_floats(D) floats (the calling thread's slot of the workspace,
//! scratch.hpp), which hold the query rows of the heads in flight.
template <int D, class T, int RB, class QtFn, class PartFn, class KRow, class VRow>
void attend_part_rows(int nheads, QtFn&& qt_of, PartFn&& part_of, int m_rows, KRow&& krow, VRow&& vrow,
                      int k_begin, int k_end, float* scratch) noexcept {
  static_assert(RB == 4 || RB == 8, "attend_part_rows: 4 or 8 rows");
  static_assert(dot_heads * RB * static_cast<std::size_t>(D) <= host_kernel_scratch_floats(D));
  static_assert(D % (2 * vlanes) == 0, "attend_part_rows: head_dim a multiple of 32");
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  constexpr int dv = D / vlanes;                       // vectors per row
  constexpr int qs = fit_block(RB + 1, 0, 2);          // QK^T accumulator sets per row (AVX-512: 2)
  // Keys per score step. 2 (each query vector loaded once for two K rows) for 8 rows where 2 x 8
  // accumulators, two K vectors and a query vector fit in the register file (AVX-512): a two-token
  // tree step at 32K took 22 ms instead of 27-30 on a Zen 4 core (RESULTS.md, session 12). For 4
  // rows GCC 12 turns the two-key loop into query vectors held in registers with K as the memory
  // operand, plus spills, and a decode step got 25% slower in cache; so 1 there, with qs
  // accumulator sets per row. Also 1 for fp32 rows of head_dim 64 (the demo target's cache): on a
  // Zen 5 core its 3-4-token verification at 16K (6-8 rows at GQA 2, four layers, one thread) took
  // 3.6-3.7 ms with one key per step against 4.5-5.5 with two (minimum over interleaved rounds, in
  // either order), and fp32 D64 at 32/8 heads was within 3%; fp16 at D64 and every D128 shape
  // measured ran as fast or faster with two (RESULTS.md, "Kernel staging off the stack", session 42).
  constexpr bool one_key_rows = std::is_same_v<T, float> && D == 64;
  constexpr int kt = RB == 8 && !one_key_rows && 2 * RB + 3 <= vregs16 ? 2 : 1;
  // The heads' query rows, row-major (64 KiB at head_dim 256): in the workspace, not on the stack
  // (scratch.hpp).
  float(*const __restrict qb)[RB][D] = reinterpret_cast<float(*)[RB][D]>(scratch);
  alignas(64) float sb[dot_heads][dot_block][RB];  // scores key-major: a key's RB rows together
  float mrow[dot_heads][RB], lrow[dot_heads][RB], alpha[dot_heads][RB];
  const T* vp[dot_heads][dot_block];
  const T* vn[dot_heads][dot_block];  // the next block's V rows, prefetched during this block's PV pass

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
          SPECDEC_UNROLL for (int t = 0; t < kt; ++t) {
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
            SPECDEC_UNROLL for (int i = 0; i < RB; ++i) a0[i] = a1[i] = vf16{};
            for (int c = 0; c < dv; ++c) {
              const vf16 k0 = vload_as_float(kr[0] + c * vlanes), k1 = vload_as_float(kr[1] + c * vlanes);
              SPECDEC_UNROLL for (int i = 0; i < RB; ++i) {
                const vf16 q = vkeep(vload(&qb[hh][i][c * vlanes]));  // one load for both keys
                a0[i] += k0 * q;
                a1[i] += k1 * q;
              }
            }
            // The 16 dot products reduced together into keys j and j + 1 of every row (with an
            // odd block's repeated last key, j + 1 = nb <= 31, overwritten with -inf below).
            static_assert(2 * RB == vlanes);
            vf16 all[vlanes];
            SPECDEC_UNROLL for (int i = 0; i < RB; ++i) {
              all[i] = a0[i];
              all[RB + i] = a1[i];
            }
            vstore(&sb[hh][j][0], vhsum16(all));
          } else {
            vf16 acc[qs][RB];
            SPECDEC_UNROLL for (int u = 0; u < qs; ++u)
              SPECDEC_UNROLL for (int i = 0; i < RB; ++i) acc[u][i] = vf16{};
            for (int c = 0; c < dv; c += qs) {
              vf16 kv[qs];
              SPECDEC_UNROLL for (int u = 0; u < qs; ++u) kv[u] = vload_as_float(kr[0] + (c + u) * vlanes);
              SPECDEC_UNROLL for (int i = 0; i < RB; ++i)
                SPECDEC_UNROLL for (int u = 0; u < qs; ++u) acc[u][i] += kv[u] * vload(&qb[hh][i][(c + u) * vlanes]);
            }
            SPECDEC_UNROLL for (int i = 0; i < RB; ++i) {
              vf16 sum = acc[0][i];
              SPECDEC_UNROLL for (int u = 1; u < qs; ++u) sum += acc[u][i];
              sb[hh][j][i] = vhsum(sum);
            }
          }
        }
      }
      // Online softmax over the block (keys past nb count as -inf), vectorised over the block's
      // scores: lane l of every vector is row l % RB (key-major, RB divides 16).
      constexpr int nvec = dot_block * RB / vlanes;
      for (int hh = 0; hh < hc; ++hh) {
        float* s = &sb[hh][0][0];
        std::fill(s + nb * RB, s + dot_block * RB, ninf);
        vf16 mv = vload(s);
        for (int v = 1; v < nvec; ++v) mv = vmax(mv, vload(s + v * vlanes));
        alignas(64) float lanes[vlanes];
        vstore(lanes, mv);
        SPECDEC_UNROLL for (int i = 0; i < RB; ++i) {
          float mx = mrow[hh][i];
          SPECDEC_UNROLL for (int l = i; l < vlanes; l += RB) mx = std::max(mx, lanes[l]);
          const float mref = mx == ninf ? 0.0f : mx;
          alpha[hh][i] = std::exp2(mrow[hh][i] - mref);
          mrow[hh][i] = mx;
          SPECDEC_UNROLL for (int l = i; l < vlanes; l += RB) lanes[l] = mref;
        }
        const vf16 mref = vload(lanes);
        vf16 sum{};
        for (int v = 0; v < nvec; ++v) {
          const vf16 p = vexp2(vload(s + v * vlanes) - mref);
          vstore(s + v * vlanes, p);
          sum += p;
        }
        vstore(lanes, sum);
        SPECDEC_UNROLL for (int i = 0; i < RB; ++i) {
          float l = 0.0f;
          SPECDEC_UNROLL for (int k = i; k < vlanes; k += RB) l += lanes[k];
          lrow[hh][i] = lrow[hh][i] * alpha[hh][i] + l;
        }
      }
      // O = alpha O + P V, per head, all RB rows in one register block per column slice (pv_group);
      // V rows now come from L2. Each line of the next block's V rows is prefetched once.
      for (int hh = 0; hh < hc; ++hh) {
        const T* const* vph = vp[hh];
        const auto v_row = [vph](int j) { return vph[j]; };
        const auto prefetch_next = prefetch_next_v(vn[hh], nnb);
        pv_group<D, RB, RB>(part_of(h0 + hh), alpha[hh], &sb[hh][0][0], v_row, nb, 0, prefetch_next);
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
