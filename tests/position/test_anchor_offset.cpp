// LongSpec anchor-offset indices (§3.2, Appendix G Algorithm 1): the paper's example, the
// definition as properties over many seeded draws, offset range and uniformity, reproducibility,
// ragged batches, and bad inputs.
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <vector>

#include "specdec/position/anchor_offset.hpp"

TEST_CASE("Algorithm 1 example: N = 128, o = 16257") {
  std::vector<std::int32_t> p(128);
  specdec::anchor_offset_indices(16257, p);
  CHECK(p[0] == 0);
  CHECK(p[1] == 1);
  CHECK(p[2] == 2);
  CHECK(p[3] == 3);
  CHECK(p[4] == 16261);  // as printed in the paper
  // The paper prints 16385 for the last index; P[127] = 127 + 16257 = 16384 by lines 3 and 5.
  CHECK(p[127] == 16384);
  // §3.2's other example: [0, 1, 2, 3, 8192, 8193, 8194, ...] is the offset 8188
  std::vector<std::int32_t> q(7);
  specdec::anchor_offset_indices(8188, q);
  CHECK(q == std::vector<std::int32_t>{0, 1, 2, 3, 8192, 8193, 8194});
}

TEST_CASE("anchor-offset indices satisfy Algorithm 1's definition for every draw") {
  for (int n : {0, 1, 3, 4, 5, 17, 128, 1000})
    for (int max_len : {n, n + 1, n + 7, 32768}) {
      for (std::uint64_t seed = 0; seed < 20; ++seed) {
        specdec::philox_stream rng(seed, specdec::stream_id(3, 9));
        std::vector<std::int32_t> p(static_cast<std::size_t>(n));
        const int o = specdec::anchor_offset_indices(max_len, rng, p);
        REQUIRE(o >= 0);
        REQUIRE(o <= max_len - n);
        for (int i = 0; i < n; ++i) {
          REQUIRE(p[i] == (i < 4 ? i : i + o));
          REQUIRE(p[i] < max_len);  // inclusive upper bound keeps every index below MAX_LEN
        }
        // reproducible from the same (seed, stream)
        specdec::philox_stream again(seed, specdec::stream_id(3, 9));
        std::vector<std::int32_t> p2(static_cast<std::size_t>(n));
        REQUIRE(specdec::anchor_offset_indices(max_len, again, p2) == o);
        REQUIRE(p2 == p);
      }
    }
}

TEST_CASE("anchor offset is uniform on [0, MAX_LEN - N], both ends included") {
  const int n = 10, max_len = 17;  // 8 possible offsets
  std::map<int, int> hist;
  specdec::philox_stream rng(42, 0);
  const int draws = 80000;
  for (int i = 0; i < draws; ++i) ++hist[specdec::anchor_offset_draw(n, max_len, rng)];
  REQUIRE(hist.size() == 8);
  CHECK(hist.begin()->first == 0);
  CHECK(hist.rbegin()->first == 7);
  double chi2 = 0;
  for (auto [o, c] : hist) chi2 += (c - draws / 8.0) * (c - draws / 8.0) / (draws / 8.0);
  CHECK(chi2 < 24.3);  // chi-square, 7 degrees of freedom, p = 0.001
  // max_len == n: the offset is always 0 (indices are vanilla 0..N-1)
  for (int i = 0; i < 100; ++i) CHECK(specdec::anchor_offset_draw(n, n, rng) == 0);
}

TEST_CASE("custom anchor count and the ragged batch version") {
  std::vector<std::int32_t> p(6);
  specdec::anchor_offset_indices(100, p, 0);
  CHECK(p == std::vector<std::int32_t>{100, 101, 102, 103, 104, 105});
  specdec::anchor_offset_indices(100, p, 2);
  CHECK(p == std::vector<std::int32_t>{0, 1, 102, 103, 104, 105});

  const std::vector<std::int32_t> lens{5, 0, 9, 2};
  std::vector<std::int32_t> out(16), offs(4);
  specdec::anchor_offset_indices_batch(7, 3, 4096, lens, out, offs);
  std::size_t at = 0;
  for (std::size_t b = 0; b < lens.size(); ++b) {
    specdec::philox_stream rng(7, specdec::stream_id(static_cast<std::uint32_t>(b), 3));
    std::vector<std::int32_t> one(static_cast<std::size_t>(lens[b]));
    CHECK(specdec::anchor_offset_indices(4096, rng, one) == offs[b]);
    CHECK(std::vector<std::int32_t>(out.begin() + static_cast<std::ptrdiff_t>(at),
                                    out.begin() + static_cast<std::ptrdiff_t>(at + one.size())) == one);
    at += one.size();
  }
  CHECK(offs[0] != offs[2]);  // independent streams (collision chance ~1/4000 is fixed by the seeds)
}

TEST_CASE("anchor-offset generators reject bad inputs") {
  specdec::philox_stream rng(1, 1);
  std::vector<std::int32_t> p(10);
  CHECK_THROWS_AS(specdec::anchor_offset_indices(9, rng, p), specdec::invalid_argument);
  CHECK_THROWS_WITH(specdec::anchor_offset_indices(9, rng, p), Catch::Contains("max_len"));
  CHECK_THROWS_WITH(specdec::anchor_offset_draw(-1, 5, rng), Catch::Contains("'n'"));
  CHECK_THROWS_WITH(specdec::anchor_offset_draw(6, 5, rng), Catch::Contains("max_len"));
  CHECK_THROWS_WITH(specdec::anchor_offset_indices(-1, p), Catch::Contains("offset"));
  CHECK_THROWS_WITH(specdec::anchor_offset_indices(INT32_MAX - 3, p), Catch::Contains("offset"));
  CHECK_THROWS_WITH(specdec::anchor_offset_indices(0, p, -1), Catch::Contains("num_anchors"));
  CHECK_THROWS_WITH(specdec::anchor_offset_indices(100, rng, p, -2), Catch::Contains("num_anchors"));
  const std::vector<std::int32_t> lens{5, 11};
  std::vector<std::int32_t> out(16), offs(2), offs1(1), out15(15);
  CHECK_THROWS_WITH(specdec::anchor_offset_indices_batch(1, 0, 10, lens, out, offs), Catch::Contains("lengths"));
  CHECK_THROWS_WITH(specdec::anchor_offset_indices_batch(1, 0, 100, lens, out15, offs), Catch::Contains("'out'"));
  CHECK_THROWS_WITH(specdec::anchor_offset_indices_batch(1, 0, 100, lens, out, offs1), Catch::Contains("offsets"));
  CHECK_THROWS_AS(specdec::anchor_offset_indices_batch(1, 0, 100, lens, out, offs1), specdec::invalid_argument);
  // offsets and out are written while lengths is read: one buffer for two of them is refused
  std::vector<std::int32_t> shared{4, 4, 4}, idx(12);
  CHECK_THROWS_WITH(specdec::anchor_offset_indices_batch(1, 0, 100000, shared, idx, shared),
                    Catch::Contains("'lengths'") && Catch::Contains("disjoint from 'offsets'"));
  std::vector<std::int32_t> both(16 + 1);  // out = [0, 16), offsets = [15, 17)
  CHECK_THROWS_WITH(specdec::anchor_offset_indices_batch(1, 0, 100, lens, std::span(both).first(16), std::span(both).last(2)),
                    Catch::Contains("'offsets'") && Catch::Contains("disjoint from 'out'"));
  CHECK(shared == std::vector<std::int32_t>{4, 4, 4});
}
