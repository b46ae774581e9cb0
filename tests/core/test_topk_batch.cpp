// topk_batch (core/topk_batch.hpp): the host backend, and the CUDA kernel's selection run serially
// (its host twin: radix select by topk_key bytes with topk_digit_pick, ties gathered in index order,
// the k words sorted), both against the sort-based reference topk_indices_by_sort on rows with
// heavy ties, NaN, +-0 and +-inf. The kernel itself: tests/cuda/test_topk_batch.cu.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/core/topk.hpp"
#include "specdec/core/topk_batch.hpp"
#include "core/topk_batch_util.hpp"

namespace {

//! The kernel's three steps, serially, as its 512 threads would run them: the radix select; the
//! gather (the all-ties path when every entry equal to the k-th key is chosen, else chunks of 512
//! with the block scan's ranks, the early exit, and the atomic appends taken in reverse thread
//! order, an order the kernel does not fix); every slot of `chosen` written exactly once; the 1024
//! words padded with 0 and sorted descending, read back striped. The k best indices, best first.
std::vector<std::int32_t> kernel_twin(std::span<const float> row, int k) {
  namespace d = specdec::detail;
  constexpr int threads = 512, slots = d::topk_batch_max_k_device;
  const auto n = static_cast<std::int64_t>(row.size());
  std::uint32_t prefix = 0;
  std::int32_t need = k, kth_count = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    std::int32_t hist[256] = {};
    for (const float v : row) {
      const std::uint32_t key = d::topk_key(v);
      if (pass == 0 || (key >> (shift + 8)) == prefix) ++hist[(key >> shift) & 255u];
    }
    const int digit = d::topk_digit_pick(hist, need);
    prefix = (prefix << 8) | static_cast<std::uint32_t>(digit);
    if (pass == 3) kth_count = hist[digit];
  }
  const std::uint32_t kth = prefix;
  const std::int32_t above = k - need;
  std::vector<std::uint64_t> chosen(slots, 0);
  std::vector<int> writes(slots, 0);
  int above_s = 0, ties_s = 0;
  const auto word_of = [](std::uint32_t key, std::int64_t i) {
    return (std::uint64_t{key} << 32) | static_cast<std::uint32_t>(~static_cast<std::uint32_t>(i));
  };
  const auto put = [&](int slot, std::uint64_t w) {
    REQUIRE(slot >= 0);
    REQUIRE(slot < slots);
    chosen[static_cast<std::size_t>(slot)] = w;
    ++writes[static_cast<std::size_t>(slot)];
  };
  if (kth_count == need) {
    for (std::int64_t i = n - 1; i >= 0; --i) {
      const std::uint32_t key = d::topk_key(row[static_cast<std::size_t>(i)]);
      if (key >= kth) put(above_s++, word_of(key, i));
    }
  } else {
    for (std::int64_t base = 0; base < n; base += threads) {
      std::int32_t rank[threads], tied = 0;
      for (int t = 0; t < threads; ++t) {
        const std::int64_t i = base + t;
        rank[t] = tied;
        tied += i < n && d::topk_key(row[static_cast<std::size_t>(i)]) == kth;
      }
      for (int t = threads - 1; t >= 0; --t) {
        const std::int64_t i = base + t;
        if (i >= n) continue;
        const std::uint32_t key = d::topk_key(row[static_cast<std::size_t>(i)]);
        if (key > kth) put(above_s++, word_of(key, i));
        if (key == kth && ties_s + rank[t] < need) put(above + ties_s + rank[t], word_of(key, i));
      }
      const bool done = ties_s + tied >= need && above_s >= above;
      ties_s += tied;
      if (done) break;
    }
  }
  for (int slot = 0; slot < slots; ++slot) CHECK(writes[static_cast<std::size_t>(slot)] == (slot < k ? 1 : 0));
  std::vector<std::uint64_t> words(slots);
  for (int slot = 0; slot < slots; ++slot) words[static_cast<std::size_t>(slot)] = slot < k ? chosen[static_cast<std::size_t>(slot)] : 0u;
  std::sort(words.begin(), words.end(), std::greater<>());  // rank j * 512 + t is thread t's item j
  std::vector<std::int32_t> out;
  for (int slot = 0; slot < k; ++slot) out.push_back(static_cast<std::int32_t>(~static_cast<std::uint32_t>(words[static_cast<std::size_t>(slot)])));
  return out;
}

}  // namespace

TEST_CASE("topk_key orders floats as topk does", "[core][topk]") {
  namespace d = specdec::detail;
  constexpr float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> ascending{-inf, -3.0e38f, -1.0f, -1.0e-40f, 0.0f, 1.0e-40f, 1.0f, 3.0e38f, inf};
  CHECK(d::topk_key(nan) == 0u);
  CHECK(d::topk_key(-nan) == 0u);
  CHECK(d::topk_key(-0.0f) == d::topk_key(0.0f));
  CHECK(d::topk_key(-inf) > d::topk_key(nan));
  for (std::size_t i = 1; i < ascending.size(); ++i) CHECK(d::topk_key(ascending[i - 1]) < d::topk_key(ascending[i]));
}

TEST_CASE("topk_batch's kernel selection (host twin) and host backend equal the sort reference", "[core][topk]") {
  int rows_checked = 0;
  for (const std::int64_t n : {1, 2, 17, 300, 513, 5000}) {
    for (int kind = 0; kind < specdec_test::topk_row_kinds; ++kind) {
      const auto v = specdec_test::topk_rows(3, n, kind, static_cast<std::uint64_t>(n * 10 + kind));
      for (const int k : {1, 2, 7, 50, 511, 512, 513, 700, 1023, 1024, static_cast<int>(n)}) {
        if (k > n) continue;
        const bool twin = k <= specdec::detail::topk_batch_max_k_device;
        std::vector<std::int32_t> idx(static_cast<std::size_t>(3 * k), -1);
        std::vector<float> val(static_cast<std::size_t>(3 * k));
        specdec::topk_batch(specdec::host{.num_threads = 2}, specdec::make_view<2>(v.data(), {3, n}), k,
                            specdec::make_view<2>(idx.data(), {3, k}), specdec::make_view<2>(val.data(), {3, k}));
        for (int r = 0; r < 3; ++r) {
          const std::span<const float> row(v.data() + r * n, static_cast<std::size_t>(n));
          const auto want = specdec::topk_indices_by_sort(row, k);
          INFO("n " << n << " kind " << kind << " k " << k << " row " << r);
          if (twin) CHECK(kernel_twin(row, k) == want);
          CHECK(std::vector<std::int32_t>(idx.begin() + r * k, idx.begin() + (r + 1) * k) == want);
          for (int j = 0; j < k; ++j) {
            const float got = val[static_cast<std::size_t>(r * k + j)], ref = row[static_cast<std::size_t>(want[j])];
            CHECK(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(ref));
          }
          ++rows_checked;
        }
      }
    }
  }
  CHECK(rows_checked > 300);
}

TEST_CASE("topk_batch validates its arguments", "[core][topk][validation]") {
  std::vector<float> v(12, 1.0f), val(6);
  std::vector<std::int32_t> idx(6);
  const auto vv = specdec::make_view<2>(v.data(), {3, 4});
  CHECK_THROWS_WITH(specdec::topk_batch(specdec::host{}, vv, 5, specdec::make_view<2>(idx.data(), {3, 2}),
                                        specdec::make_view<2>(val.data(), {3, 2})),
                    Catch::Contains("topk_batch") && Catch::Contains("'k'"));
  CHECK_THROWS_WITH(specdec::topk_batch(specdec::host{}, vv, 2, specdec::make_view<2>(idx.data(), {2, 3}),
                                        specdec::make_view<2>(val.data(), {3, 2})),
                    Catch::Contains("out_indices"));
  CHECK_THROWS_WITH(specdec::topk_batch(specdec::host{}, vv, 2, specdec::make_view<2>(idx.data(), {3, 2}),
                                        specdec::make_view<2>(val.data(), {3, 2}, specdec::memory_space::device)),
                    Catch::Contains("out_values") && Catch::Contains("host"));
  // outputs over the values: a later row would be read after an earlier row's outputs were written
  std::vector<float> shared(12 + 6, 1.0f);
  CHECK_THROWS_WITH(specdec::topk_batch(specdec::host{1}, specdec::make_view<2>(shared.data(), {3, 4}), 2,
                                        specdec::make_view<2>(idx.data(), {3, 2}),
                                        specdec::make_view<2>(shared.data() + 4, {3, 2})),
                    Catch::Contains("'values'") && Catch::Contains("disjoint from 'out_values'"));
  const std::int64_t neg_e[2] = {-1, 4}, neg_s[2] = {4, 1};
  CHECK_THROWS_WITH(specdec::topk_batch(specdec::host{}, specdec::strided_view<float, 2>(v.data(), neg_e, neg_s), 2,
                                        specdec::make_view<2>(idx.data(), {0, 2}), specdec::make_view<2>(val.data(), {0, 2})),
                    Catch::Contains("'values'") && Catch::Contains("non-negative"));
  // k = 0 and zero rows write nothing
  std::fill(idx.begin(), idx.end(), -7);
  specdec::topk_batch(specdec::host{}, vv, 0, specdec::make_view<2>(idx.data(), {3, 0}),
                      specdec::make_view<2>(val.data(), {3, 0}));
  CHECK(idx == std::vector<std::int32_t>(6, -7));
}
