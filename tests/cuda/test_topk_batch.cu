// topk_batch(cuda{}) against topk_batch(host{}) (topk per row) on rows with heavy ties, NaN, +-0 and
// +-inf (tests/core/topk_batch_util.hpp), up to 64 rows, 256K entries per row and k = 1024, with a
// padded row stride; graph capture; arguments refused before any CUDA call. The kernel's selection
// also runs serially on the host in CI (its host twin, tests/core/test_topk_batch.cpp).
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/topk_batch_util.hpp"
#include "cuda/cuda_test_util.cuh"
#include "specdec/core/topk_batch.cuh"

using specdec::memory_space;
using specdec_test::device_buffer;

namespace {

struct expected_topk {
  std::vector<std::int32_t> idx;
  std::vector<float> val;
};

expected_topk host_topk(const std::vector<float>& v, std::int64_t rows, std::int64_t n, int k) {
  expected_topk e{std::vector<std::int32_t>(static_cast<std::size_t>(rows * k)), std::vector<float>(static_cast<std::size_t>(rows * k))};
  specdec::topk_batch(specdec::host{}, specdec::make_view<2>(v.data(), {rows, n}), k,
                      specdec::make_view<2>(e.idx.data(), {rows, k}), specdec::make_view<2>(e.val.data(), {rows, k}));
  return e;
}

//! Rows `pad` entries apart in the input and the outputs alike (the outputs' padding is not compared).
struct device_topk {
  std::int64_t rows, n, stride, out_stride;
  int k;
  device_buffer<float> v, val;
  device_buffer<std::int32_t> idx;
  device_topk(const std::vector<float>& host, std::int64_t rows_, std::int64_t n_, int k_, std::int64_t pad)
      : rows(rows_), n(n_), stride(n_ + pad), out_stride(k_ + pad), k(k_),
        v(specdec_test::padded_rows(host, rows_, n_, n_ + pad, 7.0e30f)),  // the padding would win if read
        val(static_cast<std::size_t>(rows_ * (k_ + pad))), idx(static_cast<std::size_t>(rows_ * (k_ + pad))) {}
  void launch(cudaStream_t s = nullptr) {
    const specdec::strided_view<const float, 2> vv(v.data(), {rows, n}, {stride, 1}, memory_space::device);
    specdec::topk_batch(specdec::cuda{.stream = s}, vv, k,
                        specdec::strided_view<std::int32_t, 2>(idx.data(), {rows, k}, {out_stride, 1}, memory_space::device),
                        specdec::strided_view<float, 2>(val.data(), {rows, k}, {out_stride, 1}, memory_space::device));
  }
  void check(const expected_topk& e) const {
    const auto gi = idx.download();
    const auto gv = val.download();
    int differ_idx = 0, differ_val = 0;
    for (std::int64_t r = 0; r < rows; ++r)
      for (int j = 0; j < k; ++j) {
        const auto g = static_cast<std::size_t>(r * out_stride + j), w = static_cast<std::size_t>(r * k + j);
        differ_idx += gi[g] != e.idx[w];
        differ_val += std::bit_cast<std::uint32_t>(gv[g]) != std::bit_cast<std::uint32_t>(e.val[w]);
      }
    CHECK(differ_idx == 0);
    CHECK(differ_val == 0);
  }
};

}  // namespace

TEST_CASE("cuda topk_batch equals the host's topk per row", "[cuda][core][topk]") {
  struct shape {
    std::int64_t rows, n;
  };
  for (const shape s : {shape{1, 1}, shape{3, 17}, shape{64, 300}, shape{8, 5000}, shape{8, 131072}, shape{2, 262144}}) {
    if (specdec_test::sanitizer_sized() && s.n > 5000) continue;
    // k: the fixed list and min(n, 1024), each once. Loops, not sections: Catch2 would run the code
    // outside the sections (the rows, up to 2 x 262144 of them) again for every section.
    std::vector<int> ks{1, 7, 50, 511, 700, 1024, static_cast<int>(std::min<std::int64_t>(s.n, 1024))};
    std::erase_if(ks, [&](int k) { return k > s.n; });
    std::sort(ks.begin(), ks.end());
    ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
    for (int kind = 0; kind < specdec_test::topk_row_kinds; ++kind) {
      const auto v = specdec_test::topk_rows(s.rows, s.n, kind, static_cast<std::uint64_t>(s.n + kind));
      for (const int k : ks) {
        INFO("rows " << s.rows << " n " << s.n << " kind " << kind << " k " << k);
        const auto e = host_topk(v, s.rows, s.n, k);
        for (const std::int64_t pad : {0, 3}) {
          device_topk d(v, s.rows, s.n, k, pad);
          d.launch();
          specdec_test::sync_check("topk_batch");
          d.check(e);
        }
      }
    }
  }
}

TEST_CASE("cuda topk_batch walks more rows than blocks (grid-stride) and a row whose ties come first",
          "[cuda][core][topk]") {
  {
    // more rows than the 65535 blocks: blocks take several rows (fewer rows, the same walk, under a sanitizer)
    const std::int64_t rows = specdec_test::sanitizer_sized() ? 65600 : 70000, n = 8;
    const auto v = specdec_test::topk_rows(rows, n, 1, 3);
    device_topk d(v, rows, n, 3, 0);
    d.launch();
    specdec_test::sync_check("topk_batch (70000 rows)");
    d.check(host_topk(v, rows, n, 3));
  }
  {
    // 0.5 everywhere but ten 1.0 near the end, k = 11: the one tie needed is found in the first
    // chunk, the larger keys only in the last (the gather must not stop early).
    const std::int64_t n = 20000;
    std::vector<float> v(static_cast<std::size_t>(n), 0.5f);
    for (int j = 0; j < 10; ++j) v[static_cast<std::size_t>(n - 1 - 37 * j)] = 1.0f;
    device_topk d(v, 1, n, 11, 0);
    d.launch();
    specdec_test::sync_check("topk_batch (late maxima)");
    d.check(host_topk(v, 1, n, 11));
  }
}

TEST_CASE("cuda topk_batch is captured in a CUDA graph and replays on new rows", "[cuda][core][topk]") {
  const std::int64_t rows = 8, n = 32768;
  const int k = 64;
  auto v = specdec_test::topk_rows(rows, n, 5, 1);
  device_topk d(v, rows, n, k, 0);
  int round = 0;
  specdec_test::replay_in_graph(
      3, [&](cudaStream_t s) { d.launch(s); },
      [&] {
        v = specdec_test::topk_rows(rows, n, round % specdec_test::topk_row_kinds, static_cast<std::uint64_t>(round + 2));
        ++round;
        d.v.upload(v);
      },
      [&] { d.check(host_topk(v, rows, n, k)); });
}

TEST_CASE("cuda topk_batch refuses host memory and k above 1024 before any CUDA call", "[cuda][core][topk][nogpu]") {
  std::vector<float> v(2 * 2000, 1.0f), val(2 * 1025);
  std::vector<std::int32_t> idx(2 * 1025);
  const auto vd = specdec::make_view<2>(v.data(), {2, 2000}, memory_space::device);
  const auto vh = specdec::make_view<2>(v.data(), {2, 2000});
  CHECK_THROWS_WITH(specdec::topk_batch(specdec::cuda{}, vh, 4, specdec::make_view<2>(idx.data(), {2, 4}, memory_space::device),
                                        specdec::make_view<2>(val.data(), {2, 4}, memory_space::device)),
                    Catch::Contains("values") && Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(specdec::topk_batch(specdec::cuda{}, vd, 1025,
                                        specdec::make_view<2>(idx.data(), {2, 1025}, memory_space::device),
                                        specdec::make_view<2>(val.data(), {2, 1025}, memory_space::device)),
                    Catch::Contains("at most 1024"));
  CHECK_THROWS_WITH(specdec::topk_batch(specdec::cuda{}, vd, 4, specdec::make_view<2>(idx.data(), {2, 4}, memory_space::device),
                                        specdec::make_view<2>(val.data(), {2, 5}, memory_space::device)),
                    Catch::Contains("out_values"));
}
