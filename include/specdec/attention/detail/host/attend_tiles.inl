// attend_tiles.inl: the body of attend_tiles.hpp (see there); no include guard, no #include, no namespace: compiled at
// the including file's flags by attend_tiles.hpp and once per dispatch level by kernels.hpp
// (core/detail/isa_levels.inl).

//! Online-softmax attention of M query rows over keys [k_begin, k_end), for `nheads` kv heads at
//! once: head hh has its transposed query panels at qt_of(hh), its K/V rows at krow(t, hh) /
//! vrow(t, hh) and its partial at part_of(hh). Tiles are the outer loop and heads the inner one, so
//! with nheads = Hkv a token's rows of all heads (adjacent in NHD and paged layouts) are read
//! together, which the hardware prefetchers follow; with nheads = 1 the item is one (request, kv
//! head), which keeps a large tree's accumulators in L2. Optionally under the tree mask (`mask` =
//! the request's n x n mask, rows `wpr` words; key index = tree token index, query row i is tree
//! token i / group). Writes each head's normalised partial O [Mpad][D] and LSE (natural log; -inf
//! when a row saw no key). `scratch`: host_kernel_scratch_floats(D) floats (the calling thread's
//! slot of the workspace, scratch.hpp), where the K and V tiles are staged.
template <int D, class T, bool Masked, class QtFn, class PartFn, class KRow, class VRow>
void attend_part(int nheads, QtFn&& qt_of, PartFn&& part_of, int m_rows, int group, KRow&& krow, VRow&& vrow,
                 int k_begin, int k_end, const mask_word* mask, int wpr, float* scratch) noexcept {
  static_assert(2 * kv_tile * static_cast<std::size_t>(D) <= host_kernel_scratch_floats(D));
  const int mp = padded_rows(m_rows);
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  for (int hh = 0; hh < nheads; ++hh) {
    float* o = part_of(hh);
    float* m = o + static_cast<std::int64_t>(mp) * D;
    std::fill(o, o + static_cast<std::int64_t>(mp) * D, 0.0f);
    std::fill(m, m + mp, ninf);
    std::fill(m + mp, m + 2 * mp, 0.0f);
  }

  // The staged K and V tiles (128 KiB at head_dim 256): in the workspace, not on the stack (scratch.hpp).
  float* const __restrict kf = scratch;
  float* const __restrict vf = scratch + kv_tile * D;
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
          softmax_block<2 * vlanes>(st + r * vlanes, nb, m + row0 + r * vlanes, l + row0 + r * vlanes, alpha + r * vlanes);
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
  // Normalise every padded row (the pad rows: zeros, LSE -inf); the LSE replaces m.
  for (int hh = 0; hh < nheads; ++hh) {
    float* o = part_of(hh);
    float* m = o + static_cast<std::int64_t>(mp) * D;
    finish_part<D>(o, m, mp, k_end > k_begin ? m_rows : 0, m, m + mp);
  }
}
