#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "specdec/core/philox.hpp"

using specdec::philox4x32_10;
using specdec::philox_block;
using specdec::philox_stream;

namespace {
struct kat {
  philox_block ctr;
  std::uint32_t k0, k1;
  philox_block expected;
};
// Known-answer vectors for philox4x32-10 from Random123's kat_vectors (Salmon et al., SC'11).
constexpr kat kats[] = {
    {{{0u, 0u, 0u, 0u}}, 0u, 0u, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
    {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
     0xffffffffu,
     0xffffffffu,
     {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
    {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
     0xa4093822u,
     0x299f31d0u,
     {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
};

constexpr bool same(const philox_block& a, const philox_block& b) {
  return a.v[0] == b.v[0] && a.v[1] == b.v[1] && a.v[2] == b.v[2] && a.v[3] == b.v[3];
}
// The generator is constexpr: the known answers hold at compile time too.
static_assert(same(philox4x32_10(kats[0].ctr, kats[0].k0, kats[0].k1), kats[0].expected));
static_assert(same(philox4x32_10(kats[2].ctr, kats[2].k0, kats[2].k1), kats[2].expected));
}  // namespace

TEST_CASE("philox4x32_10 reproduces the Random123 known-answer vectors") {
  for (const auto& k : kats) {
    const philox_block out = philox4x32_10(k.ctr, k.k0, k.k1);
    for (int w = 0; w < 4; ++w) CHECK(out.v[w] == k.expected.v[w]);
  }
}

TEST_CASE("philox_stream: word offset o is word o%4 of block o/4 with counter (block, stream), key seed") {
  const std::uint64_t seed = 0x1122334455667788ull, stream = specdec::stream_id(5, 9);
  philox_stream s(seed, stream);
  for (std::uint64_t o = 0; o < 64; ++o) {
    const std::uint64_t block = o / 4;
    const philox_block out = philox4x32_10(
        {{static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32), static_cast<std::uint32_t>(stream),
          static_cast<std::uint32_t>(stream >> 32)}},
        static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
    REQUIRE(s.offset() == o);
    REQUIRE(s.next_u32() == out.v[o % 4]);
  }
  // Blocks beyond 2^32 use the high counter word.
  philox_stream far(seed, stream, (1ull << 34) + 2);
  const philox_block out = philox4x32_10({{0u, 1u, static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)}},
                                         static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  CHECK(far.next_u32() == out.v[2]);
}

TEST_CASE("philox_stream: offsets, seek and copies") {
  philox_stream a(7, 3);
  std::vector<std::uint32_t> seq;
  for (int i = 0; i < 40; ++i) seq.push_back(a.next_u32());
  for (std::uint64_t start = 0; start < 20; ++start) {
    philox_stream b(7, 3, start);
    for (std::uint64_t i = start; i < 40; ++i) REQUIRE(b.next_u32() == seq[i]);
  }
  philox_stream c(7, 3);
  c.seek(13);
  CHECK(c.next_u32() == seq[13]);
  CHECK(c.offset() == 14);
  philox_stream d = c;  // copies continue independently from the same point
  CHECK(d.next_u32() == seq[14]);
  CHECK(c.next_u32() == seq[14]);
  CHECK(c.seed() == 7);
  CHECK(c.stream() == 3);
  // The cached block must follow every seek: within the cached block, backwards, and forwards.
  philox_stream f(7, 3);
  const std::uint64_t order[] = {5, 4, 7, 0, 39, 38, 6, 6, 20, 3};
  for (const std::uint64_t o : order) {
    f.seek(o);
    REQUIRE(f.next_u32() == seq[o]);
  }
  philox_stream e(7, 3);
  const std::uint64_t w = e.next_u64();
  CHECK(w == (static_cast<std::uint64_t>(seq[1]) << 32 | seq[0]));
  CHECK(e.offset() == 2);
}

TEST_CASE("philox_stream: different seeds, streams and (request, step) pairs give different numbers") {
  CHECK(specdec::stream_id(1, 2) == ((1ull << 32) | 2));
  std::set<std::uint32_t> firsts;
  for (std::uint32_t r = 0; r < 8; ++r)
    for (std::uint32_t step = 0; step < 8; ++step) firsts.insert(philox_stream(1, specdec::stream_id(r, step)).next_u32());
  for (std::uint64_t seed = 2; seed < 10; ++seed) firsts.insert(philox_stream(seed, 0).next_u32());
  CHECK(firsts.size() == 72);  // 72 distinct 32-bit draws (a collision has probability ~6e-7)
}

TEST_CASE("philox_stream: uniform draws are in range and are the documented functions of the words") {
  philox_stream s(42, 1), w(42, 1);
  double sum = 0, sum_open = 0;
  float lo = 1, hi = 0, lo_open = 2;
  constexpr int n = 200000;
  for (int i = 0; i < n; ++i) {
    const float u = s.uniform();
    REQUIRE(u == static_cast<float>(w.next_u32() >> 8) * 0x1p-24f);
    REQUIRE(u >= 0.0f);
    REQUIRE(u < 1.0f);
    const float v = s.uniform_open0();
    REQUIRE(v == static_cast<float>((w.next_u32() >> 8) + 1) * 0x1p-24f);
    REQUIRE(v > 0.0f);
    REQUIRE(v <= 1.0f);
    REQUIRE(std::isfinite(std::log(v)));
    lo = std::min(lo, u);
    hi = std::max(hi, u);
    lo_open = std::min(lo_open, v);
    sum += u;
    sum_open += v;
  }
  // Mean 1/2, sd of the mean sqrt(1/12/n) ~ 6.5e-4: 6 sigma.
  CHECK(std::abs(sum / n - 0.5) < 4e-3);
  CHECK(std::abs(sum_open / n - 0.5) < 4e-3);
  CHECK(lo < 1e-3f);
  CHECK(hi > 0.999f);
  // Extremes of the mapping.
  CHECK(static_cast<float>(0xffffffffu >> 8) * 0x1p-24f < 1.0f);
  CHECK(static_cast<float>((0xffffffffu >> 8) + 1) * 0x1p-24f == 1.0f);

  philox_stream d(3, 4), dw(3, 4);
  for (int i = 0; i < 10000; ++i) {
    const double x = d.uniform_double();
    REQUIRE(x == static_cast<double>(dw.next_u64() >> 11) * 0x1p-53);
    REQUIRE(x >= 0.0);
    REQUIRE(x < 1.0);
  }
}

TEST_CASE("philox_stream::below(n) is in [0, n) and close to uniform") {
  philox_stream s(11, 12);
  for (std::uint32_t n : {1u, 2u, 3u, 7u, 1000u, 0x80000001u, 0xffffffffu})
    for (int i = 0; i < 2000; ++i) REQUIRE(s.below(n) < n);
  // Chi-square over 10 bins with 100000 draws: 9 dof, the 99.99% quantile is 33.7.
  std::vector<int> bins(10, 0);
  constexpr int n = 100000;
  for (int i = 0; i < n; ++i) ++bins[s.below(10)];
  double chi2 = 0;
  for (int b : bins) chi2 += (b - n / 10.0) * (b - n / 10.0) / (n / 10.0);
  CHECK(chi2 < 33.7);
}
