// The host decode row kernel (<= 8 query rows per kv head), fp32: differential against the double
// reference (1e-5) over rows 1..8, GQA 1/2/4/8, D 64/128/256, cache lengths 0/1/odd/> split, paged
// and contiguous layouts, automatic and forced splits; and against the tile kernel directly.
#include "test_decode_rows_util.hpp"

using namespace attn_test;

TEST_CASE("decode row kernel fp32: rows 1..8, GQA ratios, head dims, paged and contiguous") {
  std::uint64_t seed = 4100;
  for (int ratio : {1, 2, 4, 8})
    for (int d : {64, 128, 256}) {
      ++seed;
      if (!sweep_cell(std::countr_zero(unsigned(ratio)), d / 128, 3)) continue;  // (the -O0 sanitizer build)
      DYNAMIC_SECTION("ratio " << ratio << " d " << d) {
        row_kernel_sweep<float>(seed, ratio, d, {layout_kind::paged, layout_kind::nhd});
      }
    }
}

// (Catch2 runs a test case once per leaf section, and the code outside the sections on every one of
// those runs: the sweeps beside the sections sit in sections of their own, so each runs once.)
TEST_CASE("decode row kernel fp32: HND layout, forced splits, hybrid cache part, custom scale") {
  SECTION("HND") { row_kernel_sweep<float>(9001, 4, 128, {layout_kind::hnd}); }
  for (int split : {1, 31, 64, 1000})
    DYNAMIC_SECTION("split " << split) {
      row_kernel_sweep<float>(9002 + split, 2, 64, {layout_kind::paged}, {.kv_split_size = split}, true);
    }
  SECTION("custom scale") { row_kernel_sweep<float>(9100, 8, 256, {layout_kind::nhd}, {.scale = 0.02f}, true); }
}

TEST_CASE("decode row kernel fp32: equals the tile kernel on the same inputs") {
  for (int rows = 1; rows <= 8; ++rows)
    for (int n : {0, 1, 31, 33, 100}) {
      if (rows <= 4) row_kernel_matches_tile_kernel<64, float, 4>(rows * 100 + n, rows, 3, 3 + n, 2e-6);
      row_kernel_matches_tile_kernel<128, float, 8>(rows * 100 + n, rows, 0, n, 2e-6);
    }
  row_kernel_matches_tile_kernel<256, float, 8>(77, 5, 10, 300, 2e-6);
}

// The lanes kernel's sweep over GQA 1/2/4/8 x head dims 64/128/256 (cells thinned in the -O0
// sanitizer build), paged and NHD, seeds seed + 1.. per cell: rows 9-16, or with `wide` rows 17-32
// pinned (hybrid too at GQA 4).
static void lanes_ratio_grid(std::uint64_t seed, bool wide) {
  for (int ratio : {1, 2, 4, 8})
    for (int d : {64, 128, 256}) {
      ++seed;
      if (!sweep_cell(std::countr_zero(unsigned(ratio)), d / 128, 3)) continue;
      DYNAMIC_SECTION("ratio " << ratio << " d " << d) {
        row_kernel_sweep<float>(seed, ratio, d, {layout_kind::paged, layout_kind::nhd}, {}, wide && ratio == 4,
                                specdec::attention_kernel::lanes, 0, wide);
      }
    }
}

// The lanes kernel: 9-16 query rows per kv head (a small tree at GQA 1-8), the same sweep.
TEST_CASE("decode lanes kernel fp32: rows 9..16, GQA ratios, head dims, layouts, splits, hybrid") {
  using specdec::attention_kernel;
  lanes_ratio_grid(4600, false);
  SECTION("HND") { row_kernel_sweep<float>(4700, 4, 128, {layout_kind::hnd}, {}, true, attention_kernel::lanes); }
  for (int split : {1, 31, 64, 1000})
    DYNAMIC_SECTION("split " << split) {
      row_kernel_sweep<float>(4701 + split, 2, 64, {layout_kind::paged}, {.kv_split_size = split}, true,
                              attention_kernel::lanes);
    }
  SECTION("GQA 1, every row count; pinned on few rows") {
    // GQA 1: every row count 9-16 through the public API (two seeds: four consecutive counts each).
    for (std::uint64_t s : {4900, 4904})
      row_kernel_sweep<float>(s, 1, 64, {layout_kind::nhd}, {}, true, attention_kernel::lanes);
    // Pinned: lanes on a request the automatic choice gives the rows kernel (1-4 rows) is the same maths.
    row_kernel_sweep<float>(4800, 1, 64, {layout_kind::nhd}, {.kernel = attention_kernel::lanes}, true);
  }
}

// A decode-like work item holds all Hkv heads and runs them dot_heads at a time: Hkv = dot_heads + 3
// makes a full chunk and a partial one, for both kernels.
TEST_CASE("decode row and lanes kernels fp32: more kv heads than one chunk of a work item") {
  using specdec::attention_kernel;
  const int hkv = specdec::detail::dot_heads + 3;
  for (int ratio : {1, 2})
    DYNAMIC_SECTION("ratio " << ratio) {
      row_kernel_sweep<float>(5000 + ratio, ratio, 64, {layout_kind::paged, layout_kind::nhd}, {}, true,
                              attention_kernel::rows, hkv);
      row_kernel_sweep<float>(5010 + ratio, ratio, 128, {layout_kind::paged, layout_kind::hnd}, {}, true,
                              attention_kernel::lanes, hkv);
    }
}

// The lanes kernel's two-row-vector form: 17-32 query rows per kv head (a tree of 5-8 tokens at GQA
// 4), pinned, so every level runs it (automatic takes it where a row vector is one register). At the
// avx512 level rows 17-24 run one row vector and tail rows (lanes_tail_rows), 25-32 two vectors.
TEST_CASE("decode lanes kernel fp32: rows 17..32 (two row vectors), GQA ratios, head dims, layouts, splits, hybrid") {
  using specdec::attention_kernel;
  lanes_ratio_grid(5200, true);
  SECTION("HND, more kv heads than a chunk, split 45") {
    row_kernel_sweep<float>(5300, 4, 64, {layout_kind::hnd}, {.kv_split_size = 45}, true, attention_kernel::lanes,
                            specdec::detail::dot_heads + 3, true);
  }
  SECTION("the tile kernel pinned") {
    // The tile kernel pinned on the same rows (automatic no longer runs it there at the avx512 level).
    row_kernel_sweep<float>(5500, 4, 128, {layout_kind::paged}, {.kernel = attention_kernel::tiles}, true,
                            attention_kernel::lanes, 0, true);
  }
  SECTION("GQA 1, every row count") {
    // GQA 1: every row count 17-32 with a non-empty cache (request 0's is empty): six seeds of four
    // consecutive counts each.
    for (std::uint64_t s : {5394, 5397, 5400, 5403, 5406, 5407})
      row_kernel_sweep<float>(s, 1, 64, {layout_kind::nhd}, {}, true, attention_kernel::lanes, 0, true);
  }
}

TEST_CASE("decode kernels: the automatic choice by query rows per kv head") {
  using specdec::attention_kernel;
  using namespace specdec::detail;
  for (int rows : {1, 4, 8}) CHECK(automatic_cache_kernel(rows) == attention_kernel::rows);
  for (int rows : {9, 16}) CHECK(automatic_cache_kernel(rows) == attention_kernel::lanes);
  // 17-32: two row vectors where one is a register (this file's own level), else the tile kernel.
  for (int rows : {17, 24, 32})
    CHECK(automatic_cache_kernel(rows) == (vreg_parts == 1 ? attention_kernel::lanes : attention_kernel::tiles));
  for (int rows : {33, 64}) CHECK(automatic_cache_kernel(rows) == attention_kernel::tiles);
#if SPECDEC_ISA_DISPATCH
  // The levels the run-time dispatch picks from, whatever this file's flags (test_simd_level checks
  // that the dispatched call runs them).
  for (int rows : {17, 32}) CHECK(lvl_avx512::automatic_cache_kernel(rows) == attention_kernel::lanes);
#if SPECDEC_NATIVE_SIMD_LEVEL <= 1
  for (int rows : {17, 32}) CHECK(lvl_avx2::automatic_cache_kernel(rows) == attention_kernel::tiles);
#endif
#endif
}

TEST_CASE("decode lanes kernel fp32: equals the tile kernel on the same inputs") {
  for (int rows = 17; rows <= 32; ++rows)
    for (int n : {0, 1, 33, 100}) row_kernel_matches_tile_kernel<64, float, 0>(rows * 100 + n + 9, rows, 2, 2 + n, 2e-6);
  row_kernel_matches_tile_kernel<128, float, 0>(79, 29, 0, 200, 2e-6);
  for (int rows = 1; rows <= 16; ++rows)
    for (int n : {0, 1, 31, 33, 37, 100}) {
      row_kernel_matches_tile_kernel<64, float, 0>(rows * 100 + n + 7, rows, 3, 3 + n, 2e-6);
      row_kernel_matches_tile_kernel<128, float, 0>(rows * 100 + n, rows, 0, n, 2e-6);
    }
  row_kernel_matches_tile_kernel<256, float, 0>(78, 13, 10, 300, 2e-6);
}
