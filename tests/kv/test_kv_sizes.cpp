// Sizes and pointers no real cache has, through the kv entry points: each of these wrote through a
// null pointer, overflowed int or wrapped a buffer size before it was checked (an ASan/UBSan audit).
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <vector>

#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/kv/partial_kv.hpp"
#include "specdec/kv/ring_append.hpp"
#include "specdec/kv/ring_kv.hpp"

namespace sd = specdec;
using Catch::Contains;

TEST_CASE("ring_append_batch rejects a ring without buffers even when every length is 0", "[kv][sizes]") {
  constexpr int D = 64;
  std::vector<std::int32_t> starts{0}, lengths{0}, node_indptr{0, 1}, accepted{0}, num_accepted{1}, status{7, 7, 7};
  std::vector<std::int64_t> appended{0};
  std::vector<float> sk(D, 1.f), sv(D, 2.f);
  auto call = [&](float* k, float* v) {
    const sd::ring_kv<float> ring(k, v, starts.data(), lengths.data(), 1, 4, 4, 1, D);
    sd::ring_append_batch(sd::host{}, ring, sd::make_view<1>(node_indptr.data(), {2}),
                          sd::make_view<1>(accepted.data(), {1}), sd::make_view<1>(num_accepted.data(), {1}),
                          sd::make_view<3>(sk.data(), {1, 1, D}), sd::make_view<3>(sv.data(), {1, 1, D}),
                          sd::make_view<1>(appended.data(), {1}), sd::make_view<1>(starts.data(), {1}),
                          sd::make_view<1>(lengths.data(), {1}), sd::make_view<1>(status.data(), {3}));
  };
  REQUIRE_THROWS_WITH(call(nullptr, nullptr), Contains("ring") && Contains("non-null k and v"));
  REQUIRE(appended[0] == 0);
  std::vector<float> k(4 * D), v(4 * D);
  call(k.data(), v.data());  // control: the same call with buffers appends the row
  REQUIRE(appended[0] == 1);
  REQUIRE(lengths[0] == 1);
  REQUIRE(k[0] == 1.f);
  REQUIRE(v[0] == 2.f);
}

TEST_CASE("kv_importance rejects null q or scores with elements", "[kv][sizes]") {
  constexpr int D = 64;
  std::vector<float> kc(4 * D, 0.5f), vc(4 * D, 0.25f), qb(D, 1.f), sc(4);
  std::vector<std::int32_t> lens{4};
  const sd::contiguous_kv<float> cache(kc.data(), vc.data(), lens.data(), 1, 4, 1, D);
  const sd::host one{.num_threads = 1};
  REQUIRE_THROWS_WITH(sd::kv_importance(one, sd::make_view<2>(static_cast<float*>(nullptr), {1, D}), cache, 0,
                                        sd::make_view<2>(sc.data(), {1, 4})),
                      Contains("'q'") && Contains("non-null data"));
  REQUIRE_THROWS_WITH(sd::kv_importance(one, sd::make_view<2>(qb.data(), {1, D}), cache, 0,
                                        sd::make_view<2>(static_cast<float*>(nullptr), {1, 4})),
                      Contains("'scores'") && Contains("non-null data"));
  sd::kv_importance(one, sd::make_view<2>(qb.data(), {1, D}), cache, 0, sd::make_view<2>(sc.data(), {1, 4}));
  REQUIRE(sc[0] == Approx(0.5 * D));  // control: q . K_0 = 64 * 0.5
}

TEST_CASE("ring_mapping::slot wraps without int overflow at slots near INT32_MAX", "[kv][sizes]") {
  constexpr int imax = std::numeric_limits<std::int32_t>::max();
  std::vector<std::int32_t> starts{imax - 1}, lengths{3};
  const sd::ring_mapping m{starts.data(), lengths.data(), imax, imax};
  REQUIRE(m.slot(0, 0) == imax - 1);
  REQUIRE(m.slot(0, 1) == 0);
  REQUIRE(m.slot(0, 2) == 1);
}

TEST_CASE("cache constructors reject geometry whose element count wraps", "[kv][sizes]") {
  // 1 * 2^28 slots * 2^30 heads * 64 = 2^64: wrapped to 0 before, and the next write went through null.
  // (Sizes read at run time: as constants, GCC propagates them into the fill loops after the check
  // and warns about offsets it cannot know are never reached.)
  volatile int big_v = 1 << 30;
  const int big = big_v;
  REQUIRE_THROWS_WITH((sd::ring_kv_cache<float>({.requests = 1, .kv_heads = big, .head_dim = 64, .window = big / 4})),
                      Contains("fits in int64"));
  // (|B| is at most 2^30 - 1 now: the appends' replacement count stays an int32)
  REQUIRE_THROWS_WITH(sd::partial_kv_index(big, big, big - 1, 0), Contains("fits in int64"));
  REQUIRE_THROWS_WITH(sd::partial_kv_index(1, 1, big, 0), Contains("'budget'") && Contains("2^30 - 1"));
  REQUIRE_THROWS_WITH(sd::compact_partial_kv<float>(big, big, big, 64), Contains("fits in int64"));
  REQUIRE(sd::checked_size_product("f", "a", {0, std::int64_t{1} << 62, 8}) == 0);
  REQUIRE(sd::checked_size_product("f", "a", {std::int64_t{1} << 31, std::int64_t{1} << 31}) == std::int64_t{1} << 62);
  REQUIRE_THROWS_WITH(sd::checked_size_product("f", "a", {std::int64_t{1} << 32, std::int64_t{1} << 32}),
                      Contains("4294967296 * 4294967296"));
  REQUIRE_THROWS_AS(sd::checked_size_product("f", "a", {-1, 2}), sd::invalid_argument);
}
