// Bad input found by a session-55 review of kv/ and position/, each reproduced first (ASan/UBSan or a
// wrong result), now a clear error or the right result:
//  - a user's layout whose length() changes between the check and the work (kv_importance_batch and
//    partial_kv_select_batch read each length twice: scores written / read past the checked columns;
//    partial_kv_append_batch, found in session 56, placed a length other than the one it checked);
//  - ring_kv_cache appends whose token count overflows int64;
//  - layout geometries whose element offsets overflow int64 (contiguous, ring, paged, block table);
//  - apply_rope's positions inside x (rotated while read);
//  - ring_append_batch's arrays inside the ring's own K/V slots;
//  - the batched commits' index arrays inside the cache rows they move, and from-buffer outputs over
//    the spec buffers; their new_lengths and status inside a row they write (session 56);
//  - a negative length read after the layout check (the host selection wrote over a negative count),
//    partial_kv_index::rebuild ranking more tokens than it scored, and misaligned mapping index arrays
//    (session 65).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "specdec/kv/block_table_kv.hpp"
#include "specdec/kv/commit.hpp"
#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/kv/paged_kv.hpp"
#include "specdec/kv/partial_kv.hpp"
#include "specdec/kv/ring_append.hpp"
#include "specdec/kv/ring_kv.hpp"
#include "specdec/position/rope.hpp"
#include "common/growing_layout.hpp"

namespace sd = specdec;
using Catch::Contains;

using specdec_test::growing_layout;  // length() 4 for its first calls, then 1000

TEST_CASE("batched importance and selection read each request's length once", "[kv][partial]") {
  std::vector<float> row(64, 1.f), q(64, 1.f);
  int scored = 0, selected = 0;
  for (int calls_before = 0; calls_before < 8; ++calls_before) {
    CAPTURE(calls_before);
    int calls = 0;
    growing_layout cache{row.data(), calls_before, &calls};
    std::vector<float> scores(6, -7.f);  // [1, 1, 4] and two guard floats after it
    std::vector<std::int32_t> status(3);
    const auto sv = sd::make_view<3>(scores.data(), {1, 1, 4});
    // Refused when a length the checks read is 1000 (more than the 4 columns), else the 4 keys
    // scored: never a write past the columns.
    try {
      sd::kv_importance_batch(sd::host{}, sd::make_view<3>(q.data(), {1, 1, 64}), cache, sv,
                              sd::make_view<1>(status.data(), {3}));
      ++scored;
      CHECK(scores[3] == Approx(64.f));  // q . K over the 4 checked keys
    } catch (const sd::invalid_argument& e) {
      CHECK_THAT(e.what(), Contains("'scores'"));
    }
    CHECK(scores[4] == -7.f);  // nothing past the columns
    CHECK(scores[5] == -7.f);
    calls = 0;
    std::vector<std::int32_t> index(8, -1), evict(8, -1), sizes(1), seen(1), placed(1);
    const auto select = [&] {
      sd::partial_kv_select_batch(sd::host{}, sd::make_view<3>(scores.data(), {1, 1, 4}), cache, 8, 0,
                                  sd::partial_kv_selection::per_kv_head, sd::make_view<3>(index.data(), {1, 1, 8}),
                                  sd::make_view<3>(evict.data(), {1, 1, 8}), sd::make_view<1>(sizes.data(), {1}),
                                  sd::make_view<1>(seen.data(), {1}), sd::make_view<1>(placed.data(), {1}),
                                  sd::make_view<1>(status.data(), {3}));
    };
    // The same for the selection: refused, or the 4 keys kept (budget 8); never a read past the
    // columns (ASan in CI's sanitizer build) or an index >= 4.
    bool refused = false;
    try {
      select();
    } catch (const sd::invalid_argument& e) {
      refused = true;
      CHECK_THAT(e.what(), Contains("'scores'"));
    }
    if (!refused) {
      ++selected;
      CHECK(sizes[0] == 4);
      for (int i = 0; i < 4; ++i) CHECK((index[static_cast<std::size_t>(i)] >= 0 && index[static_cast<std::size_t>(i)] < 4));
    }
  }
  CHECK(scored > 0);
  CHECK(selected > 0);
}

TEST_CASE("batched importance and selection refuse a negative length read after the layout check", "[kv][partial]") {
  // lengths_within checked only length > columns: a layout answering 4 to validate_kv_layout and
  // then -3 made the host selection write std::iota over a negative count (a heap overflow under ASan).
  std::vector<float> row(64, 1.f), q(64, 1.f);
  int refused = 0;
  for (int calls_before = 0; calls_before < 4; ++calls_before) {
    CAPTURE(calls_before);
    int calls = 0;
    growing_layout cache{row.data(), calls_before, &calls, 4, -3};  // 4, then -3
    std::vector<float> scores(6, -7.f);
    std::vector<std::int32_t> status(3), index(8, -1), evict(8, -1), sizes(1, 9), seen(1, 9), placed(1, 9);
    const auto sv = sd::make_view<3>(scores.data(), {1, 1, 4});
    try {
      sd::kv_importance_batch(sd::host{}, sd::make_view<3>(q.data(), {1, 1, 64}), cache, sv,
                              sd::make_view<1>(status.data(), {3}));
    } catch (const sd::invalid_argument& e) {
      ++refused;
      CHECK_THAT(e.what(), Contains("length") && (Contains(">= 0") || Contains("non-negative")));
      CHECK(scores == std::vector<float>(6, -7.f));
    }
    calls = 0;
    try {
      sd::partial_kv_select_batch(sd::host{}, sd::make_view<3>(scores.data(), {1, 1, 4}), cache, 8, 2,
                                  sd::partial_kv_selection::per_kv_head, sd::make_view<3>(index.data(), {1, 1, 8}),
                                  sd::make_view<3>(evict.data(), {1, 1, 6}), sd::make_view<1>(sizes.data(), {1}),
                                  sd::make_view<1>(seen.data(), {1}), sd::make_view<1>(placed.data(), {1}),
                                  sd::make_view<1>(status.data(), {3}));
    } catch (const sd::invalid_argument& e) {
      ++refused;
      CHECK_THAT(e.what(), Contains("length") && (Contains(">= 0") || Contains("non-negative")));
      CHECK(index == std::vector<std::int32_t>(8, -1));
      CHECK(sizes[0] == 9);
    }
  }
  CHECK(refused > 0);
}

namespace {
// K and V row t all (t + 1); length() 1000 for its first calls, then 4.
struct rising_rows_layout {
  using value_type = float;
  const float* rows;
  int calls_before;
  int* calls;
  int num_requests() const { return 1; }
  int num_kv_heads() const { return 1; }
  int head_dim() const { return 64; }
  int length(int) const { return (*calls)++ < calls_before ? 1000 : 4; }
  const float* k_row(int, int t, int) const { return rows + static_cast<std::ptrdiff_t>(t) * 64; }
  const float* v_row(int, int t, int) const { return rows + static_cast<std::ptrdiff_t>(t) * 64; }
  sd::memory_space space() const { return sd::memory_space::host; }
};
}  // namespace

TEST_CASE("partial_kv_index::rebuild ranks the tokens it scored", "[kv][partial]") {
  // rebuild read cache.length(r) and kv_importance read it again: a layout answering 1000 and then
  // 4 had 4 tokens scored and 1000 ranked, 996 of them on scratch scores never computed. K row t is
  // all (t + 1), so the scores rise with t and the 6 non-sink slots must show the last 6 tokens scored.
  std::vector<float> rows(1000 * 64), q(64, 1.f);
  for (int t = 0; t < 1000; ++t) std::fill_n(rows.begin() + t * 64, 64, static_cast<float>(t + 1));
  for (int calls_before = 0; calls_before < 6; ++calls_before) {
    CAPTURE(calls_before);
    int calls = 0;
    rising_rows_layout cache{rows.data(), calls_before, &calls};
    sd::partial_kv_index idx(1, 1, 8, 2);
    try {
      idx.rebuild(sd::host{}, 0, sd::make_view<2>(q.data(), {1, 64}), cache);
    } catch (const sd::invalid_argument&) {
      continue;  // refused: nothing to rank
    }
    const int len = idx.seen(0);
    REQUIRE((len == 4 || len == 1000));
    const auto shown = idx.indices(0, 0);
    std::vector<std::int32_t> got(shown.begin(), shown.end()), want{0, 1};
    for (int t = std::max(2, len - 6); t < len; ++t) want.push_back(t);
    std::sort(got.begin(), got.end());
    CHECK(got == want);
  }
}

TEST_CASE("a mapping's index arrays must be aligned for int32", "[kv]") {
  // Only k and v were checked for alignment: a lengths or page-table pointer at an odd byte offset was
  // read misaligned (undefined behaviour) by validation itself, then by every kernel (session-65 review).
  alignas(8) unsigned char bytes[64] = {};
  const std::int32_t two = 2, zero = 0;
  std::memcpy(bytes + 1, &two, 4);
  const auto* odd = reinterpret_cast<const std::int32_t*>(bytes + 1);
  std::vector<float> k(8 * 4), v(8 * 4);
  const sd::contiguous_kv<float> c(k.data(), v.data(), odd, 1, 8, 1, 4);
  CHECK_THROWS_WITH(sd::validate_kv_layout(c, "test", "cache"),
                    Contains("cache.mapping.lengths aligned to 4 bytes") && Contains("address 0x"));
  // paged: page_indptr {0, 1} and page_indices {0} misaligned in turn
  alignas(8) std::int32_t indptr[2] = {0, 1}, indices[1] = {0}, lens[1] = {2};
  alignas(8) unsigned char raw[32] = {};
  std::memcpy(raw + 1, indptr, sizeof indptr);
  std::memcpy(raw + 17, &zero, 4);
  const auto* odd_indptr = reinterpret_cast<const std::int32_t*>(raw + 1);
  const auto* odd_indices = reinterpret_cast<const std::int32_t*>(raw + 17);
  CHECK_THROWS_WITH(sd::validate_kv_layout(sd::paged_kv<float>(k.data(), v.data(), odd_indptr, indices, lens, 1, 2, 4, 1, 4),
                                           "test", "cache"),
                    Contains("cache.mapping.page_indptr aligned"));
  CHECK_THROWS_WITH(sd::validate_kv_layout(sd::paged_kv<float>(k.data(), v.data(), indptr, odd_indices, lens, 1, 2, 4, 1, 4),
                                           "test", "cache"),
                    Contains("cache.mapping.page_indices aligned"));
  // device-resident: the pointers are still checked (nothing is read)
  CHECK_THROWS_WITH(sd::validate_kv_layout(sd::paged_kv<float>(k.data(), v.data(), indptr, odd_indices, lens, 1, 2, 4, 1, 4,
                                                               sd::memory_space::device),
                                           "test", "cache"),
                    Contains("cache.mapping.page_indices aligned"));
  sd::validate_kv_layout(sd::paged_kv<float>(k.data(), v.data(), indptr, indices, lens, 1, 2, 4, 1, 4), "test", "cache");
}

TEST_CASE("partial_kv_append_batch places the length it checked", "[kv][partial]") {
  // Session 56: the host backend read each length twice, once for the state check and once to
  // place. A length that passed the check (1000 >= seen 10) and then read 4 rewound seen to 4, so
  // the next append placed tokens 4..9 a second time.
  std::vector<float> row(64, 1.f);
  int appended = 0, refused = 0;
  for (int calls_before = 0; calls_before < 8; ++calls_before) {
    CAPTURE(calls_before);
    int calls = 0;
    growing_layout cache{row.data(), calls_before, &calls, 1000, 4};  // 1000, then 4
    // budget 8, sink 0, full: 8 slots showing tokens 2..9, seen 10, eviction order slots 0..7
    std::vector<std::int32_t> index{2, 3, 4, 5, 6, 7, 8, 9}, evict{0, 1, 2, 3, 4, 5, 6, 7};
    std::vector<std::int32_t> sizes{8}, seen{10}, placed{0}, status(3, 5);
    try {
      sd::partial_kv_append_batch(sd::host{}, cache, 8, 0, sd::make_view<3>(index.data(), {1, 1, 8}),
                                  sd::make_view<3>(std::as_const(evict).data(), {1, 1, 8}),
                                  sd::make_view<1>(sizes.data(), {1}), sd::make_view<1>(seen.data(), {1}),
                                  sd::make_view<1>(placed.data(), {1}), sd::make_view<1>(status.data(), {3}));
      ++appended;  // the checked length was 1000: tokens 10..999 placed, the last 8 shown
      CHECK(seen[0] == 1000);
      CHECK(sizes[0] == 8);
      CHECK(status[0] == 0);
      for (int i = 0; i < 8; ++i) CHECK(index[static_cast<std::size_t>(i)] >= 992);
    } catch (const sd::invalid_argument& e) {
      ++refused;  // the checked length was 4, below seen: nothing written
      CHECK_THAT(e.what(), Contains("length 4") && Contains("seen 10"));
      CHECK(seen[0] == 10);
      CHECK(index == std::vector<std::int32_t>{2, 3, 4, 5, 6, 7, 8, 9});
    }
  }
  CHECK(appended > 0);
  CHECK(refused > 0);
}

TEST_CASE("ring_kv_cache refuses appends past 2^63 - 1 tokens", "[kv][ring]") {
  sd::ring_kv_cache<float> cache({.requests = 1, .kv_heads = 1, .head_dim = 64, .window = 4, .speculative_capacity = 0});
  std::vector<float> src(64, 1.f);
  // a broadcast view of INT64_MAX rows is a valid k (only the newest `slots` rows are copied)
  const sd::strided_view<float, 3> all(src.data(), {std::numeric_limits<std::int64_t>::max(), 1, 64}, {0, 64, 1});
  cache.append(0, all, all);
  REQUIRE(cache.appended(0) == std::numeric_limits<std::int64_t>::max());
  const sd::strided_view<float, 3> one(src.data(), {1, 1, 64}, {0, 64, 1});
  REQUIRE_THROWS_WITH(cache.append(0, one, one), Contains("at most 2^63 - 1 - appended(request) = 0 tokens"));
  std::vector<std::int32_t> rows{0};
  REQUIRE_THROWS_WITH(cache.append_rows(0, one, one, rows), Contains("'k'"));
  CHECK(cache.appended(0) == std::numeric_limits<std::int64_t>::max());  // unchanged
  CHECK(cache.length(0) == 4);
}

TEST_CASE("ring_kv_cache refuses rows from its own storage", "[kv][ring]") {
  // Session 56: rows were copied slot by slot, so appending the cache's own K rows in another order
  // read a row already overwritten (tokens 2 3 1 1 where 2 3 1 0 was meant).
  sd::ring_kv_cache<float> cache({.requests = 1, .kv_heads = 1, .head_dim = 64, .window = 4, .speculative_capacity = 0});
  std::vector<float> src(4 * 64);
  for (int t = 0; t < 4; ++t) std::fill_n(src.begin() + t * 64, 64, static_cast<float>(t));
  const auto all = sd::make_view<3>(static_cast<const float*>(src.data()), {4, 1, 64});
  cache.append(0, all, all);
  const auto own_k = sd::make_view<3>(cache.k_data(), {4, 1, 64});
  const auto own_v = sd::make_view<3>(cache.v_data(), {4, 1, 64});
  const std::vector<std::int32_t> rows{1, 0};
  REQUIRE_THROWS_WITH(cache.append_rows(0, own_k, own_v, rows), Contains("'k'") && Contains("K slots"));
  REQUIRE_THROWS_WITH(cache.append(0, all, own_v), Contains("'v'") && Contains("V slots"));
  CHECK(cache.appended(0) == 4);  // nothing appended
  cache.append_rows(0, all, all, rows);  // control: the same rows from memory of their own
  CHECK(cache.appended(0) == 6);
}

TEST_CASE("layouts whose element offsets pass int64 are refused", "[kv][sizes]") {
  static float dummy[64];
  constexpr int big = std::numeric_limits<std::int32_t>::max();
  std::int32_t len[1] = {big}, zero[1] = {0};
  const sd::contiguous_kv<float> c(dummy, dummy, len, 1, big, big, big);
  REQUIRE_THROWS_WITH(sd::validate_kv_layout(c, "test", "cache"), Contains("product fits in int64"));
  const sd::ring_kv<float> ring(dummy, dummy, zero, zero, 1, big, 1, big, big);
  REQUIRE_THROWS_WITH(sd::validate_kv_layout(ring, "test", "cache"), Contains("product fits in int64"));
  std::int32_t indptr[2] = {0, 0};
  const sd::paged_kv<float> paged(dummy, dummy, indptr, nullptr, zero, 1, big, big, big, big);
  REQUIRE_THROWS_WITH(sd::validate_kv_layout(paged, "test", "cache"), Contains("product fits in int64"));
  // the same geometries at a size that fits are accepted
  const sd::contiguous_kv<float> fits(dummy, dummy, zero, 1, 1, 1, 64);
  sd::validate_kv_layout(fits, "test", "cache");
}

TEST_CASE("apply_rope refuses positions inside x", "[position][rope]") {
  std::vector<float> x(2 * 64 + 4, 0.f);
  auto* pos = reinterpret_cast<std::int32_t*>(x.data() + 10);
  pos[0] = 1, pos[1] = 2;
  const sd::rope_cache rc(sd::rope_params{}, 64, 16);
  REQUIRE_THROWS_WITH(sd::apply_rope(sd::host{.num_threads = 1}, rc, sd::make_view<3>(x.data(), {2, 1, 64}),
                                     sd::strided_view<const std::int32_t, 1>(pos, {2}, {1})),
                      Contains("'positions': expected memory disjoint from 'x'"));
  REQUIRE_THROWS_WITH(sd::apply_rope(sd::host{.num_threads = 1}, sd::rope_params{}, sd::make_view<3>(x.data(), {2, 1, 64}),
                                     sd::strided_view<const std::int32_t, 1>(pos, {2}, {1})),
                      Contains("'positions'"));
  CHECK(pos[0] == 1);  // x not rotated
  // control: positions apart
  std::vector<std::int32_t> apart{1, 2};
  sd::apply_rope(sd::host{.num_threads = 1}, rc, sd::make_view<3>(x.data(), {2, 1, 64}), sd::make_view<1>(apart.data(), {2}));
}

TEST_CASE("ring_append_batch refuses arrays inside the ring's slots", "[kv][ring]") {
  constexpr int R = 2, S = 4, D = 64;
  std::vector<float> k(R * S * D, 0.f), v(R * S * D, 0.f);
  std::vector<std::int32_t> starts(R, 0), lengths(R, 0);
  const sd::ring_kv<float> ring(k.data(), v.data(), starts.data(), lengths.data(), R, S, S, 1, D);
  std::vector<std::int32_t> indptr{0, 2, 4}, accepted{0, 1, 0, 1}, num{2, 2}, status(3);
  std::vector<float> spec(4 * D, -1.f);
  const auto call = [&](std::int64_t* appended, const float* sk) {
    sd::ring_append_batch(sd::host{}, ring, sd::make_view<1>(indptr.data(), {3}), sd::make_view<1>(accepted.data(), {4}),
                          sd::make_view<1>(num.data(), {2}), sd::make_view<3>(sk, {4, 1, D}),
                          sd::make_view<3>(static_cast<const float*>(spec.data()), {4, 1, D}), sd::make_view<1>(appended, {2}),
                          sd::make_view<1>(starts.data(), {2}), sd::make_view<1>(lengths.data(), {2}),
                          sd::make_view<1>(status.data(), {3}));
  };
  auto* in_k = reinterpret_cast<std::int64_t*>(k.data() + D);  // request 0, slot 1
  in_k[0] = in_k[1] = 0;
  REQUIRE_THROWS_WITH(call(in_k, spec.data()), Contains("'appended': expected memory disjoint from 'ring.k'"));
  std::vector<std::int64_t> appended(2, 0);
  REQUIRE_THROWS_WITH(call(appended.data(), v.data()), Contains("'spec_k': expected memory disjoint from 'ring.v'"));
  CHECK(lengths[1] == 0);  // nothing written
  call(appended.data(), spec.data());  // control
  CHECK(appended[0] == 2);
  CHECK(appended[1] == 2);
  CHECK(lengths[1] == 2);
}

TEST_CASE("batched commits: index arrays inside the moved rows, outputs over the spec buffers", "[kv][commit]") {
  constexpr int R = 2, T = 8, D = 64;
  std::vector<float> k(R * T * D, -1.f), v(R * T * D, 0.f);
  std::vector<std::int32_t> lens{0, 0};
  const sd::contiguous_kv<float> cache(k.data(), v.data(), lens.data(), R, T, 1, D);
  const std::span<const sd::contiguous_kv<float>> layers(&cache, 1);
  std::vector<std::int32_t> newl(2, -9), status(3);
  SECTION("in place: committed_lengths in request 0's slot 0, which its move overwrites") {
    auto* committed = reinterpret_cast<std::int32_t*>(k.data());
    committed[0] = committed[1] = 0;
    k[2 * D] = 42.f;  // request 0's node 2 (moved to slot 1)
    k[T * D + D] = 43.f;  // request 1's node 1 (moved to slot 0)
    std::vector<std::int32_t> indptr{0, 3, 6}, accepted{1, 2, 0, 1, 2, 0}, num{2, 2};
    sd::kv_commit_in_place_batch(sd::host{}, layers, sd::make_view<1>(static_cast<const std::int32_t*>(committed), {2}),
                                 sd::make_view<1>(indptr.data(), {3}), sd::make_view<1>(accepted.data(), {6}),
                                 sd::make_view<1>(num.data(), {2}), sd::make_view<1>(newl.data(), {2}),
                                 sd::make_view<1>(status.data(), {3}));
    CHECK(newl[0] == 2);  // committed 0 + 2, as checked (not the moved row's bits)
    CHECK(newl[1] == 2);
    CHECK(k[D] == 42.f);
    CHECK(k[T * D] == 43.f);  // request 1 moved from its checked committed length 0
  }
  SECTION("from a buffer: new_lengths inside a spec buffer") {
    std::vector<float> spec(4 * D, 5.f), specv(4 * D, 5.f);
    auto* in_spec = reinterpret_cast<std::int32_t*>(spec.data() + 2 * D);  // request 1's node 0
    std::vector<std::int32_t> committed{0, 0}, indptr{0, 2, 4}, accepted{0, 1, 0, 1}, num{2, 2};
    std::vector<sd::strided_view<const float, 3>> sk{sd::make_view<3>(static_cast<const float*>(spec.data()), {4, 1, D})},
        svv{sd::make_view<3>(static_cast<const float*>(specv.data()), {4, 1, D})};
    const auto call = [&](std::int32_t* out) {
      sd::kv_commit_from_buffer_batch(sd::host{}, layers, std::span(sk), std::span(svv),
                                      sd::make_view<1>(committed.data(), {2}), sd::make_view<1>(indptr.data(), {3}),
                                      sd::make_view<1>(accepted.data(), {4}), sd::make_view<1>(num.data(), {2}),
                                      sd::make_view<1>(out, {2}), sd::make_view<1>(status.data(), {3}));
    };
    REQUIRE_THROWS_WITH(call(in_spec), Contains("'spec_k': expected memory disjoint from 'new_lengths'"));
    CHECK(k[T * D] == -1.f);  // nothing written
    call(newl.data());  // control
    CHECK(k[T * D] == 5.f);
    CHECK(newl[1] == 2);
  }
  SECTION("new_lengths or status inside a row the commit writes (session 56)") {
    // Written after the rows: the commit would leave a length where a committed key was. Rows
    // outside the written ones (request 1's slot 2, past its 2 accepted tokens) are fine.
    std::vector<float> spec(4 * D, 5.f), specv(4 * D, 6.f);
    std::vector<sd::strided_view<const float, 3>> sk{sd::make_view<3>(static_cast<const float*>(spec.data()), {4, 1, D})},
        svv{sd::make_view<3>(static_cast<const float*>(specv.data()), {4, 1, D})};
    std::vector<std::int32_t> committed{0, 0}, indptr{0, 2, 4}, accepted{0, 1, 0, 1}, num{2, 2};
    const auto commit = [&](bool from_buffer, std::int32_t* nl, std::int32_t* st) {
      if (from_buffer)
        sd::kv_commit_from_buffer_batch(sd::host{}, layers, std::span(sk), std::span(svv),
                                        sd::make_view<1>(committed.data(), {2}), sd::make_view<1>(indptr.data(), {3}),
                                        sd::make_view<1>(accepted.data(), {4}), sd::make_view<1>(num.data(), {2}),
                                        sd::make_view<1>(nl, {2}), sd::make_view<1>(st, {3}));
      else
        sd::kv_commit_in_place_batch(sd::host{}, layers, sd::make_view<1>(committed.data(), {2}),
                                     sd::make_view<1>(indptr.data(), {3}), sd::make_view<1>(accepted.data(), {4}),
                                     sd::make_view<1>(num.data(), {2}), sd::make_view<1>(nl, {2}),
                                     sd::make_view<1>(st, {3}));
    };
    for (const bool from_buffer : {false, true}) {
      CAPTURE(from_buffer);
      auto* k_row_1_1 = reinterpret_cast<std::int32_t*>(k.data() + (T + 1) * D + D - 2);  // request 1, token 1, last 2 floats
      auto* v_row_0_0 = reinterpret_cast<std::int32_t*>(v.data() + 5);                     // request 0, token 0
      REQUIRE_THROWS_WITH(commit(from_buffer, k_row_1_1, status.data()),
                          Contains("'new_lengths'") && Contains("request 1, token 1, kv head 0"));
      REQUIRE_THROWS_WITH(commit(from_buffer, newl.data(), v_row_0_0),
                          Contains("'status'") && Contains("layers[0], request 0, token 0"));
      CHECK(k[(T + 1) * D] == -1.f);  // nothing written
      CHECK(v[0] == 0.f);
      auto* past = reinterpret_cast<std::int32_t*>(k.data() + (T + 2) * D);  // request 1, token 2: not written
      commit(from_buffer, past, status.data());
      CHECK(past[0] == 2);
      CHECK(past[1] == 2);
      CHECK(status[0] == 0);
    }
    CHECK(k[T * D] == 5.f);  // the last (from-buffer) commit's rows
    CHECK(v[D] == 6.f);
  }
}

namespace {
// A user's layout of one request, one kv head, 8 rows of head_dim 4 at k (K and V the same rows).
struct rows4_layout {
  using value_type = float;
  float* k;
  int num_requests() const { return 1; }
  int num_kv_heads() const { return 1; }
  int head_dim() const { return 4; }
  int length(int) const { return 8; }
  const float* k_row(int, int t, int) const { return k + t * 4; }
  const float* v_row(int, int t, int) const { return k + t * 4; }
  sd::memory_space space() const { return sd::memory_space::host; }
};
}  // namespace

// Session 61's review: the single-request and span forms of the in-place commit re-read their index
// arrays while moving rows (an array kept inside a moved row: a wild read under ASan), the
// from-buffer commits wrote rows over spec rows still to be copied, and kv_importance wrote scores
// over K rows still to be read (wrong results, no error).
TEST_CASE("commits and kv_importance: index arrays inside moved rows, spec buffers and scores over rows", "[kv][commit]") {
  constexpr int cap = 8, D = 4, c = 1;
  std::vector<float> k(cap * D), v(cap * D);
  for (int i = 0; i < cap * D; ++i) k[static_cast<std::size_t>(i)] = v[static_cast<std::size_t>(i)] = 100.f + static_cast<float>(i / D);
  std::vector<std::int32_t> len{c};
  sd::contiguous_kv<float> cache(k.data(), v.data(), len.data(), 1, cap, 1, D);
  const std::span<const sd::contiguous_kv<float>> layers(&cache, 1);
  SECTION("in place, one request and the span batch form: accepted kept in row c, which the first move overwrites") {
    for (const bool batch : {false, true}) {
      CAPTURE(batch);
      for (int i = 0; i < cap * D; ++i) k[static_cast<std::size_t>(i)] = v[static_cast<std::size_t>(i)] = 100.f + static_cast<float>(i / D);
      auto* acc = reinterpret_cast<std::int32_t*>(k.data() + c * D);  // row c = node 0's
      acc[0] = 1, acc[1] = 2;  // the path 1 -> 2 (nodes at rows c + 1, c + 2)
      k[(c + 1) * D + 1] = 1e30f;  // node 1's K, element 1: lands on acc[1] when node 1 moves to row c
      const std::vector<std::int32_t> parents{-1, -1, 1};
      if (!batch) {
        CHECK(sd::kv_commit_in_place(layers, 0, c, 3, std::span<const std::int32_t>(acc, 2), parents) == c + 2);
      } else {
        const std::vector<std::int32_t> committed{c}, sizes{3}, indptr{0, 2};
        const auto out = sd::kv_commit_in_place_batch(layers, committed, sizes, indptr, std::span<const std::int32_t>(acc, 2));
        REQUIRE(out.size() == 1);
        CHECK(out[0] == c + 2);
      }
      CHECK(k[c * D] == 101.f + c);  // node 1 (row c + 1) moved to row c
      CHECK(k[c * D + 1] == 1e30f);
      CHECK(k[(c + 1) * D] == 102.f + c);  // node 2 (row c + 2, as checked) to row c + 1
      CHECK(v[(c + 1) * D + 3] == 102.f + c);
    }
  }
  SECTION("from a buffer whose rows are the cache's own rows 0..3: refused before writing") {
    const auto sk = sd::make_view<3>(static_cast<const float*>(k.data()), {4, 1, D});
    const auto sv = sd::make_view<3>(static_cast<const float*>(v.data()), {4, 1, D});
    const std::vector<std::int32_t> accepted{0, 1, 2}, parents{-1, 0, 1, 2};
    len[0] = 2;
    REQUIRE_THROWS_WITH(sd::kv_commit_from_buffer(layers, 0, 2, std::span(&sk, 1), std::span(&sv, 1), accepted, parents),
                        Contains("'spec_k / spec_v'") && Contains("request 0, token 2, kv head 0"));
    std::vector<std::int32_t> committed{2}, indptr{0, 4}, acc4{0, 1, 2, 0}, num{3}, newl(1, -9), status(3);
    const auto v1 = [](std::vector<std::int32_t>& x) { return sd::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())}); };
    REQUIRE_THROWS_WITH(sd::kv_commit_from_buffer_batch(sd::host{}, layers, std::span(&sk, 1), std::span(&sv, 1), v1(committed),
                                                        v1(indptr), v1(acc4), v1(num), v1(newl), v1(status)),
                        Contains("'spec_k / spec_v'") && Contains("token 2"));
    for (int t = 0; t < cap; ++t) CHECK(k[static_cast<std::size_t>(t * D)] == 100.f + static_cast<float>(t));  // nothing written
    CHECK(newl[0] == -9);
    // Control: the same nodes from a buffer of their own.
    std::vector<float> own(k.begin(), k.begin() + 4 * D), ownv(v.begin(), v.begin() + 4 * D);
    const auto ok = sd::make_view<3>(static_cast<const float*>(own.data()), {4, 1, D});
    const auto okv = sd::make_view<3>(static_cast<const float*>(ownv.data()), {4, 1, D});
    CHECK(sd::kv_commit_from_buffer(layers, 0, 2, std::span(&ok, 1), std::span(&okv, 1), accepted, parents) == 5);
    CHECK(k[4 * D] == 102.f);  // node 2's row, not the row it was copied over
  }
  SECTION("kv_importance: scores over K rows it still reads") {
    len[0] = 8;
    std::vector<float> q(D, 1.f);
    const auto qv = sd::make_view<2>(static_cast<const float*>(q.data()), {1, D});
    REQUIRE_THROWS_WITH(sd::kv_importance(sd::host{}, qv, cache, 0, sd::make_view<2>(k.data() + 4, {1, 8})),
                        Contains("'scores'") && Contains("cache.k"));
    std::vector<std::int32_t> status(3);
    REQUIRE_THROWS_WITH(sd::kv_importance_batch(sd::host{}, sd::make_view<3>(static_cast<const float*>(q.data()), {1, 1, D}), cache,
                                                sd::make_view<3>(k.data() + 4, {1, 1, 8}), sd::make_view<1>(status.data(), {3})),
                        Contains("'scores'") && Contains("cache.k"));
    // A user's layout (no visit_memory): compared row by row.
    const rows4_layout user{k.data()};
    REQUIRE_THROWS_WITH(sd::kv_importance(sd::host{}, qv, user, 0, sd::make_view<2>(k.data() + 4, {1, 8})),
                        Contains("'scores'") && Contains("request 0, token 1, kv head 0"));
    for (int t = 0; t < cap; ++t) CHECK(k[static_cast<std::size_t>(t * D)] == 100.f + static_cast<float>(t));  // nothing written
    std::vector<float> scores(8);
    sd::kv_importance(sd::host{}, qv, user, 0, sd::make_view<2>(scores.data(), {1, 8}));  // control
    CHECK(scores[1] == Approx(4 * 101.f));
  }
}

TEST_CASE("batched commits refuse two requests over the rows they move, and allow pages shared below them", "[kv][commit]") {
  // A pool of 4 pages of 4 tokens, 1 kv head, head_dim 4; each row's first element is 100 + its index
  // in the pool. Both requests have 4 committed tokens and a 3-node chain after them (tokens 4-6, in
  // their second page) of which nodes 0 and 2 are accepted: node 2 moves to token 5.
  constexpr int P = 4, H = 1, D = 4, pages = 4;
  std::vector<float> k(static_cast<std::size_t>(pages * P * H * D)), v(k.size());
  const auto fill = [&] {
    for (std::size_t i = 0; i < k.size(); ++i) k[i] = v[i] = 100.f + static_cast<float>(i / D);
  };
  fill();
  const std::vector<std::int32_t> page_indptr{0, 2, 4}, lengths{7, 7};
  const auto run = [&](const std::vector<std::int32_t>& page_indices, bool arrays) {
    const sd::paged_kv<float> cache(k.data(), v.data(), page_indptr.data(), page_indices.data(), lengths.data(), 2, pages,
                                    P, H, D);
    const std::vector<sd::paged_kv<float>> layers{cache};
    const std::vector<std::int32_t> committed{4, 4}, sizes{3, 3}, acc_indptr{0, 2, 4}, accepted{0, 2, 0, 2},
        node_indptr{0, 3, 6};
    if (!arrays) return sd::kv_commit_in_place_batch(std::span(layers), committed, sizes, acc_indptr, accepted);
    // the array form keeps each request's path at the start of its nodes' slots (node_indptr)
    const std::vector<std::int32_t> by_node{0, 2, 0, 0, 2, 0};
    std::vector<std::int32_t> num{2, 2}, newl{-1, -1}, status{9, 9, 9};
    sd::kv_commit_in_place_batch(sd::host{}, std::span(layers), sd::make_view<1>(committed.data(), {2}),
                                 sd::make_view<1>(node_indptr.data(), {3}), sd::make_view<1>(by_node.data(), {6}),
                                 sd::make_view<1>(num.data(), {2}), sd::make_view<1>(newl.data(), {2}),
                                 sd::make_view<1>(status.data(), {3}));
    return newl;
  };
  for (const bool arrays : {false, true}) {
    INFO((arrays ? "array form" : "span form"));
    fill();
    const auto before = k;
    // request 1's second page is request 0's: its move of node 2 would be request 0's rows again
    CHECK_THROWS_WITH(run({0, 1, 2, 1}, arrays), Contains("layers[0]") && Contains("request 0 token 4") &&
                                                     Contains("request 1 token 4") && Contains("shared between requests"));
    CHECK(k == before);
    CHECK(v == before);
    // a page shared below the committed lengths (a common prefix) is read by neither commit: allowed
    CHECK(run({0, 1, 0, 2}, arrays) == std::vector<std::int32_t>{6, 6});
    CHECK(k[static_cast<std::size_t>((1 * P + 1) * D)] == 100.f + 6);  // request 0: token 5 <- node 2 (token 6)
    CHECK(k[static_cast<std::size_t>((2 * P + 1) * D)] == 100.f + 10);  // request 1: in its own page 2
  }
  // the from-buffer form writes the accepted path's destinations: those are compared
  fill();
  const auto before = k;
  const std::vector<std::int32_t> shared{0, 1, 2, 1}, committed{4, 4}, node_indptr{0, 3, 6}, accepted{0, 2, 0, 0, 2, 0},
      num{2, 2};
  const sd::paged_kv<float> cache(k.data(), v.data(), page_indptr.data(), shared.data(), lengths.data(), 2, pages, P, H, D);
  const std::vector<sd::paged_kv<float>> layers{cache};
  std::vector<float> spec(static_cast<std::size_t>(6 * H * D), 7.f);
  const auto sv = sd::make_view<3>(static_cast<const float*>(spec.data()), {6, H, D});
  std::vector<std::int32_t> newl{-1, -1}, status{9, 9, 9};
  CHECK_THROWS_WITH(sd::kv_commit_from_buffer_batch(sd::host{}, std::span(layers), std::span(&sv, 1), std::span(&sv, 1),
                                                    sd::make_view<1>(committed.data(), {2}),
                                                    sd::make_view<1>(node_indptr.data(), {3}),
                                                    sd::make_view<1>(accepted.data(), {6}), sd::make_view<1>(num.data(), {2}),
                                                    sd::make_view<1>(newl.data(), {2}), sd::make_view<1>(status.data(), {3})),
                    Contains("shared between requests"));
  CHECK(k == before);
  CHECK(newl == std::vector<std::int32_t>{-1, -1});
}
