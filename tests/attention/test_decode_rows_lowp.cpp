// The host decode row kernel (<= 8 query rows per kv head) with fp16 and bf16 storage: the same
// differential sweep as test_decode_rows.cpp (one output rounding of tolerance) and the fp16 widening
// path against the tile kernel.
#include "test_decode_rows_util.hpp"

using namespace attn_test;

TEST_CASE("decode row kernel fp16/bf16: rows 1..8, GQA ratios, head dims, paged and contiguous") {
  std::uint64_t seed = 5100;
  for (int ratio : {1, 2, 4, 8})
    for (int d : {64, 128, 256}) {
      seed += 2;
      if (!sweep_cell(std::countr_zero(unsigned(ratio)), d / 128, 3)) continue;  // (the -O0 sanitizer build)
      DYNAMIC_SECTION("ratio " << ratio << " d " << d) {
        row_kernel_sweep<specdec::half>(seed - 1, ratio, d, {layout_kind::paged, layout_kind::nhd});
        row_kernel_sweep<specdec::bfloat16>(seed, ratio, d, {layout_kind::nhd, layout_kind::paged});
      }
    }
  // (In sections of their own: Catch2 runs the code outside the sections once per leaf section.)
  SECTION("HND and paged, forced splits, hybrid") {
    row_kernel_sweep<specdec::half>(5300, 2, 128, {layout_kind::hnd}, {.kv_split_size = 100}, true);
    row_kernel_sweep<specdec::bfloat16>(5301, 4, 64, {layout_kind::paged}, {.kv_split_size = 33}, true);
  }
}

TEST_CASE("decode row kernel fp16/bf16: equals the tile kernel on the same inputs") {
  for (int rows = 1; rows <= 8; ++rows) {
    row_kernel_matches_tile_kernel<128, specdec::half, 8>(rows, rows, 0, 65, 2e-6);
    row_kernel_matches_tile_kernel<64, specdec::bfloat16, 8>(rows + 50, rows, 5, 40, 2e-6);
  }
}

TEST_CASE("decode lanes kernel fp16/bf16: rows 9..32, GQA ratios, head dims; rows 1..32 equal the tile kernel") {
  using specdec::attention_kernel;
  std::uint64_t seed = 5600;
  for (int ratio : {1, 2, 4, 8})
    for (int d : {64, 128}) {
      seed += 2;
      if (!sweep_cell(std::countr_zero(unsigned(ratio)), d / 128, 2)) continue;  // (the -O0 sanitizer build)
      DYNAMIC_SECTION("ratio " << ratio << " d " << d) {
        row_kernel_sweep<specdec::half>(seed - 1, ratio, d, {layout_kind::paged}, {}, false, attention_kernel::lanes);
        row_kernel_sweep<specdec::bfloat16>(seed, ratio, d, {layout_kind::nhd}, {}, false, attention_kernel::lanes);
      }
    }
  // (In sections of their own: Catch2 runs the code outside the sections once per leaf section.)
  SECTION("HND, forced split, hybrid") {
    row_kernel_sweep<specdec::half>(5700, 2, 128, {layout_kind::hnd}, {.kv_split_size = 100}, true,
                                    attention_kernel::lanes);
  }
  SECTION("rows 17-32: the two-row-vector form, pinned") {
    row_kernel_sweep<specdec::half>(5710, 4, 128, {layout_kind::paged}, {}, true, attention_kernel::lanes, 0, true);
    row_kernel_sweep<specdec::bfloat16>(5711, 2, 64, {layout_kind::nhd}, {}, false, attention_kernel::lanes, 0, true);
  }
  SECTION("every row count equals the tile kernel") {
    // Every row count the lanes kernel takes, 1-8 too (pinned there: rows4 4 and 8, where the PV
    // step's first and only group is 4 or 8 rows and runs the V prefetch hook).
    for (int rows = 1; rows <= 32; ++rows) {
      row_kernel_matches_tile_kernel<128, specdec::half, 0>(rows, rows, 0, 65, 2e-6);
      row_kernel_matches_tile_kernel<64, specdec::bfloat16, 0>(rows + 50, rows, 5, 40, 2e-6);
    }
  }
}
