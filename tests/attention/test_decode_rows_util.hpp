#pragma once
// Differential sweep of the kernels host decode runs on the cache of a request with few query rows
// per kv head: the dot-product ("row") kernel up to detail::max_dot_rows (tokens x Hq/Hkv <= 8) and
// the lanes kernel from 9 to 16 (one row vector) and 17 to detail::max_lane_rows (32, two, pinned):
// token counts of the range (each call takes four consecutive ones from its seed), GQA 1/2/4/8, head
// dims 64/128/256, cache lengths 0, 1, odd and longer than the split size, paged and contiguous (NHD,
// HND) caches, against the double reference; plus each kernel itself against the tile kernel on
// identical inputs.
#include "attention_fixture.hpp"

#include "specdec/attention/decode_attention.hpp"
#include "specdec/attention/hybrid_tree_attention.hpp"

namespace attn_test {

//! Cache lengths of the sweep: empty, one token, odd (not a multiple of the 32-key block, the
//! 16-token page or the 64-key tile), and 700 (> the automatic 256-token split: several parts).
inline std::vector<int> row_sweep_lengths() { return {0, 1, 37, 700}; }

//! decode_attention (and, for hybrid = true, hybrid_tree_attention) on requests whose token counts
//! are those the automatic choice runs `kernel` (rows or lanes) on at every level (rows: 1 .. 8 /
//! ratio tokens; lanes: rows 9-16), every layout kind in `kinds`, against the double reference.
//! kv_heads: Hkv (0: 1 at GQA 8, else 2; more than detail::dot_heads runs a work item's heads in
//! several chunks). wide_lanes: rows 17-32 with the lanes kernel pinned (its two-row-vector form,
//! which automatic runs only where a row vector is one register, detail::lanes_auto_rows), unless
//! opt.kernel pins another.
template <class T>
void row_kernel_sweep(std::uint64_t seed, int ratio, int d, std::initializer_list<layout_kind> kinds,
                      specdec::attention_options opt = {}, bool hybrid = false,
                      specdec::attention_kernel kernel = specdec::attention_kernel::rows, int kv_heads = 0,
                      bool wide_lanes = false) {
  using specdec::detail::max_dot_rows;
  using specdec::detail::vlanes;
  const bool lanes = kernel == specdec::attention_kernel::lanes;
  REQUIRE((!wide_lanes || lanes));
  if (wide_lanes && opt.kernel == specdec::attention_kernel::automatic) opt.kernel = specdec::attention_kernel::lanes;
  const int hkv = kv_heads > 0 ? kv_heads : ratio == 8 ? 1 : 2;
  const int first_row = wide_lanes ? vlanes + 1 : lanes ? max_dot_rows + 1 : 1;
  const int last_row = wide_lanes ? specdec::detail::max_lane_rows : lanes ? vlanes : max_dot_rows;
  const int min_tokens = (first_row + ratio - 1) / ratio, max_tokens = last_row / ratio;
  REQUIRE(min_tokens <= max_tokens);
  const std::vector<int> lens = row_sweep_lengths();
  std::vector<int> tokens;
  for (std::size_t r = 0; r < lens.size(); ++r)
    tokens.push_back(min_tokens + static_cast<int>((r + seed) % (max_tokens - min_tokens + 1)));
  batch<T> b(seed, hkv * ratio, hkv, d, lens, tokens);
  if (!wide_lanes)
    for (int n : tokens) REQUIRE(specdec::detail::automatic_cache_kernel(n * ratio) == kernel);  // the path under test
  for (auto kind : kinds) {
    INFO("layout " << name(kind) << " ratio " << ratio << " d " << d << " split " << opt.kv_split_size);
    b.with_layout(kind, [&](auto layout) {
      b.reset_outputs();
      specdec::decode_attention(specdec::host{}, b.q_view(), layout, b.indptr_view(), b.out_view(), b.lse_view(), opt);
      check_against(b, specdec::reference::decode_attention(b.q_view(), layout, b.indptr_view(), opt.scale));
      for (int t = b.q_indptr[0]; t < b.q_indptr[1]; ++t)  // request 0 has an empty cache
        for (int h = 0; h < b.hq; ++h)
          CHECK(b.lse[static_cast<std::size_t>(t) * b.hq + h] == -std::numeric_limits<float>::infinity());
      if (hybrid) {
        b.reset_outputs();
        specdec::hybrid_tree_attention(specdec::host{}, b.q_view(), layout, b.k_view(), b.v_view(), b.indptr_view(),
                                       b.mask_view(), b.out_view(), b.lse_view(), opt);
        check_against(b, specdec::reference::hybrid_tree_attention(b.q_view(), layout, b.k_view(), b.v_view(),
                                                                   b.indptr_view(), b.mask_view(), opt.scale));
      }
    });
  }
}

//! attend_part_rows<D, T, RB> (RB = 0: attend_part_lanes<D, T>, one or two row vectors) vs attend_part (the tile kernel) on
//! the same transposed query panel and K/V rows, one kv head, keys [k0, k1): partial O rows and
//! LSEs agree to `tol`.
template <int D, class T, int RB>
void row_kernel_matches_tile_kernel(std::uint64_t seed, int m_rows, int k0, int k1, double tol) {
  using namespace specdec::detail;
  specdec::philox_stream rng(seed, 3);
  const int mp = host_plan::mpad(m_rows);
  std::vector<float> qt(static_cast<std::size_t>(mp) * D, 0.0f);
  for (int i = 0; i < m_rows; ++i)
    for (int c = 0; c < D; ++c) qt[static_cast<std::size_t>(c) * (2 * vlanes) + i] = 0.3f * (2.0f * rng.uniform() - 1.0f);
  std::vector<T> k(static_cast<std::size_t>(k1 + 1) * D), v(k.size());
  for (auto& x : k) x = specdec::from_float<T>(2.0f * rng.uniform() - 1.0f);
  for (auto& x : v) x = specdec::from_float<T>(2.0f * rng.uniform() - 1.0f);
  std::vector<float> part_rows(static_cast<std::size_t>(mp) * (D + 2), -5.0f), part_tile(part_rows.size(), -5.0f);
  auto krow = [&](int t, int) { return static_cast<const T*>(k.data() + static_cast<std::size_t>(t) * D); };
  auto vrow = [&](int t, int) { return static_cast<const T*>(v.data() + static_cast<std::size_t>(t) * D); };
  auto qt_of = [&](int) { return static_cast<const float*>(qt.data()); };
  std::vector<float> staging(host_kernel_scratch_floats(D));  // the kernels' workspace slot (scratch.hpp)
  float* const scratch = staging.data();
  if constexpr (RB == 0) attend_part_lanes<D, T>(1, qt_of, [&](int) { return part_rows.data(); }, m_rows, krow, vrow, k0, k1, scratch);
  else attend_part_rows<D, T, RB>(1, qt_of, [&](int) { return part_rows.data(); }, m_rows, krow, vrow, k0, k1, scratch);
  attend_part<D, T, false>(1, qt_of, [&](int) { return part_tile.data(); }, m_rows, 1, krow, vrow, k0, k1, nullptr, 0, scratch);
  double worst = 0;
  // A NaN difference must stick (std::max(worst, NaN) would drop it): worst becomes NaN and stays.
  auto note = [&](double e) { worst = std::isnan(e) ? e : std::max(worst, e); };
  for (int i = 0; i < m_rows; ++i) {
    for (int c = 0; c < D; ++c) {
      const std::size_t at = static_cast<std::size_t>(i) * D + c;
      note(std::abs(static_cast<double>(part_rows[at]) - part_tile[at]));
    }
    const std::size_t l = static_cast<std::size_t>(mp) * D + i;
    if (k1 > k0) note(std::abs(static_cast<double>(part_rows[l]) - part_tile[l]) / std::max(1.0f, std::abs(part_tile[l])));
    else CHECK(part_rows[l] == -std::numeric_limits<float>::infinity());
  }
  INFO("D " << D << " RB " << RB << " rows " << m_rows << " keys [" << k0 << ", " << k1 << ") worst " << worst);
  CHECK(worst <= tol);  // also false for NaN
}

}  // namespace attn_test
