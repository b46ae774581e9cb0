// attend_lanes.inl: the body of attend_lanes.hpp (see there); no include guard, no #include, no namespace: compiled
// at the including file's flags by attend_lanes.hpp and once per dispatch level by kernels.inl
// (core/detail/isa_levels.inl).

//! Query rows per kv head up to which a cache part with more than max_dot_rows runs
//! attend_part_lanes instead of the tile kernel: one 16-lane row vector.
inline constexpr int max_lane_rows = vlanes;
//! The kernel attention_kernel::automatic runs on the cache parts of a request with `rows` query
//! rows per kv head (tokens x Hq / Hkv).
[[nodiscard]] constexpr attention_kernel automatic_cache_kernel(int rows) noexcept {
  return uses_row_kernel(rows) ? attention_kernel::rows
                               : rows <= max_lane_rows ? attention_kernel::lanes : attention_kernel::tiles;
}
//! Keys per online-softmax block of attend_part_lanes: whole score blocks, about 32 keys (the rows
//! kernel's dot_block).
inline constexpr int lanes_block = lanes_score_keys * ((dot_block + lanes_score_keys - 1) / lanes_score_keys);

//! Unmasked online-softmax attention of m_rows <= 16 query rows per kv head over keys [k_begin,
//! k_end) of `nheads` kv heads (automatic runs it for 9-16 rows; pinned, it takes 1-16). Why a
//! third kernel: with 9-16 rows the rows kernel's register block (8 rows x head_dim) no longer
//! fits, and the tile kernel stages each 64-key tile into an fp32 buffer before computing on it, so
//! its memory reads stall the core instead of overlapping the FMAs: on a Zen 3 core (AVX2) the demo
//! target's 5-token verification read its cache at 2.8 GB/s through the tile kernel and at 4.3
//! through this one (BM_hybrid_demo_shape_pinned, one thread; RESULTS.md, session 34).
//!
//! Per block of lanes_block keys: scores token-major over the heads (score_keys on the K rows in
//! place; fp16/bf16 rows are widened into a small L1 buffer first), prefetching K kpf_dist tokens
//! ahead and the block's V rows into L2 as the rows kernel does; an online softmax per head with
//! the rows in lanes; then O += P V per head (pv_blocks on the V rows in place), prefetching the
//! next block's V. Rows m_rows..15 have zero queries and are computed but never written out.
template <int D, class T, class QtFn, class PartFn, class KRow, class VRow>
void attend_part_lanes(int nheads, QtFn&& qt_of, PartFn&& part_of, int m_rows, KRow&& krow, VRow&& vrow,
                       int k_begin, int k_end) noexcept {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  constexpr int KB = lanes_score_keys;
  constexpr bool widen = !std::is_same_v<T, float>;
  constexpr int line_elems = 64 / static_cast<int>(sizeof(T));
  alignas(64) float st[dot_heads][lanes_block][vlanes];  // S, then P, key-major: a key's 16 rows together
  alignas(64) float mrow[dot_heads][vlanes], lrow[dot_heads][vlanes], alpha[vlanes];
  alignas(64) float kw[widen ? KB * D : 1];
  const T* vp[dot_heads][lanes_block];
  const T* vn[dot_heads][lanes_block];  // the next block's V rows, prefetched during this block's PV
  const int rows4 = static_cast<int>(round_up(m_rows, 4));

  for (int h0 = 0; h0 < nheads; h0 += dot_heads) {
    const int hc = std::min(dot_heads, nheads - h0);
    for (int hh = 0; hh < hc; ++hh) {
      float* o = part_of(h0 + hh);
      std::fill(o, o + static_cast<std::int64_t>(rows4) * D, 0.0f);
      std::fill(mrow[hh], mrow[hh] + vlanes, ninf);
      std::fill(lrow[hh], lrow[hh] + vlanes, 0.0f);
    }
    for (int b = k_begin; b < k_end; b += lanes_block) {
      const int nb = std::min(lanes_block, k_end - b);
      const int nnb = std::clamp(k_end - (b + lanes_block), 0, lanes_block);  // rows of the next block
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
              if (j < nnb) vn[hh][j] = vrow(b + lanes_block + j, h0 + hh);
              prefetch_row<D>(vr);
              if (b + j + kpf_dist < k_end) prefetch_row<D>(krow(b + j + kpf_dist, h0 + hh));
            }
            if constexpr (widen) {
              widen_row(src, kw + jj * D, D);
              kr[jj] = kw + jj * D;
            } else {
              kr[jj] = src;
            }
          }
          score_keys<D, 1, KB, vlanes>(qt_of(h0 + hh), kr, &st[hh][j0][0]);
        }
      }
      for (int hh = 0; hh < hc; ++hh) {
        // Online softmax over the block, the rows in lanes (as attend_part's, one row vector).
        softmax_block<vlanes>(&st[hh][0][0], nb, mrow[hh], lrow[hh], alpha);
        // O = alpha O + P V from the V rows in place (in L2 by now), prefetching the next block's.
        const T* const* vph = vp[hh];
        const T* const* vnh = vn[hh];
        const auto v_row = [vph](int j) { return vph[j]; };
        const auto prefetch_next = [vnh, nnb](int c0, int j) {
          if (j < nnb)
            SPECDEC_UNROLL for (int e = 0; e < pv_cols * vlanes; e += line_elems) __builtin_prefetch(vnh[j] + c0 + e, 0, 2);
        };
        pv_blocks<D, vlanes, lanes_pv_rows>(part_of(h0 + hh), alpha, &st[hh][0][0], v_row, nb, rows4, prefetch_next);
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
