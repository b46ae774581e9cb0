#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "specdec/core/half.hpp"
#include "specdec/core/tensor.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::Equals;

namespace {
// A user's own tensor type: satisfies tensor_like without deriving from anything of specdec's.
struct my_tensor {
  using element_type = float;
  static constexpr int rank = 2;
  float* p;
  std::int64_t rows, cols, row_stride;
  float* data() const { return p; }
  std::int64_t extent(int i) const { return i == 0 ? rows : cols; }
  std::int64_t stride(int i) const { return i == 0 ? row_stride : 1; }
  specdec::memory_space space() const { return specdec::memory_space::managed; }
};
struct not_a_tensor {
  using element_type = float;
  float* data() const { return nullptr; }
};
}  // namespace

static_assert(specdec::tensor_like<my_tensor>);
static_assert(!specdec::tensor_like<not_a_tensor>);
static_assert(!specdec::tensor_like<float*>);
static_assert(specdec::tensor_like<specdec::strided_view<const double, 1>>);

TEST_CASE("strided_view indexes with element strides") {
  std::vector<float> buf(2 * 3 * 4);
  std::iota(buf.begin(), buf.end(), 0.0f);
  auto v = specdec::make_view(buf.data(), {2, 3, 4});
  CHECK(v.rank == 3);
  CHECK(v.extent(0) == 2);
  CHECK(v.stride(0) == 12);
  CHECK(v.stride(1) == 4);
  CHECK(v.stride(2) == 1);
  CHECK(v.size() == 24);
  CHECK(v.is_contiguous());
  CHECK(v.space() == specdec::memory_space::host);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) REQUIRE(v(i, j, k) == static_cast<float>(i * 12 + j * 4 + k));
  v(1, 2, 3) = -1.0f;
  CHECK(buf[23] == -1.0f);

  // A transposed (non-contiguous) view of the same data: [4, 3] over dims (k, j) at i = 0.
  const std::int64_t e[2] = {4, 3}, s[2] = {1, 4};
  specdec::strided_view<float, 2> t(buf.data(), e, s);
  CHECK_FALSE(t.is_contiguous());
  CHECK(t(3, 2) == buf[2 * 4 + 3]);

  // Size-1 dimensions do not break contiguity whatever their stride.
  const std::int64_t e1[3] = {2, 1, 4}, s1[3] = {4, 999, 1};
  CHECK(specdec::strided_view<float, 3>(buf.data(), e1, s1).is_contiguous());

  specdec::strided_view<const float, 3> c = v;  // const conversion keeps geometry
  CHECK(c.data() == buf.data());
  CHECK(c.stride(0) == 12);
  CHECK(c(0, 1, 1) == 5.0f);
}

TEST_CASE("make_view rejects negative extents and keeps the memory space") {
  float x = 0;
  CHECK_THROWS_AS(specdec::make_view(&x, {2, -1}), specdec::invalid_argument);
  CHECK_THROWS_WITH(specdec::make_view(&x, {2, -1}), Contains("specdec::make_view") && Contains("'extents'") &&
                                                         Contains("got -1"));
  auto d = specdec::make_view(&x, {1}, specdec::memory_space::device);
  CHECK(d.space() == specdec::memory_space::device);
  auto z = specdec::make_view(&x, {0, 5});
  CHECK(z.size() == 0);
}

TEST_CASE("make_view refuses extents whose product overflows int64; contiguous wraps without UB and require_array refuses") {
  float x = 0;
  const std::int64_t big = std::int64_t{1} << 32;
  CHECK_THROWS_WITH(specdec::make_view(&x, {big, big}),
                    Contains("specdec::make_view") && Contains("'extents'") && Contains("product fits in int64") &&
                        Contains("4294967296 * 4294967296"));
  CHECK_THROWS_AS(specdec::make_view(&x, {2, big, big / 2, 2}), specdec::invalid_argument);
  // A product just under 2^63 is accepted (a view, not an allocation). A zero extent makes an empty
  // array, but the other extents still give the strides, so their product must fit too (as from_dlpack).
  CHECK_NOTHROW(specdec::make_view(&x, {std::int64_t{1} << 31, (std::int64_t{1} << 31) - 1, 2}));
  const auto e = specdec::make_view(&x, {0, big, big / 4});
  CHECK(e.size() == 0);
  CHECK(e.stride(0) == big * (big / 4));
  CHECK_NOTHROW(specdec::require_array("f", "e", e));
  CHECK_THROWS_AS(specdec::make_view(&x, {0, big, big, big}), specdec::invalid_argument);
  // strided_view::contiguous is noexcept: its strides wrap (uint64 arithmetic, no signed overflow for
  // UBSan to report) into a view that the entry points' check refuses.
  const auto w = specdec::strided_view<float, 3>::contiguous(&x, {4, big, big});
  CHECK(w.stride(2) == 1);
  CHECK(w.stride(1) == big);
  CHECK(w.stride(0) == 0);  // 2^64 wrapped
  CHECK_THROWS_WITH(specdec::require_array("f", "w", w), Contains("'w'") && Contains("do not wrap"));
}

TEST_CASE("as_view converts any tensor_like") {
  std::vector<float> buf(3 * 8);
  std::iota(buf.begin(), buf.end(), 0.0f);
  const my_tensor m{buf.data(), 3, 5, 8};  // 3 rows of 5 columns, padded rows of 8
  auto v = specdec::as_view(m);
  static_assert(std::is_same_v<decltype(v), specdec::strided_view<float, 2>>);
  CHECK(v.extent(0) == 3);
  CHECK(v.extent(1) == 5);
  CHECK(v.stride(0) == 8);
  CHECK(v.space() == specdec::memory_space::managed);
  CHECK(v(2, 4) == 20.0f);
  CHECK_FALSE(v.is_contiguous());
}

TEST_CASE("require_shape, require_unit_inner_stride and require_host_accessible") {
  std::vector<float> buf(2 * 3 * 4);
  auto v = specdec::make_view(buf.data(), {2, 3, 4});
  CHECK_NOTHROW(specdec::require_shape("f", "q", v, {2, 3, 4}));
  CHECK_NOTHROW(specdec::require_shape("f", "q", v, {-1, 3, -1}));
  CHECK_THROWS_WITH(specdec::require_shape("specdec::attn", "q", v, {2, 5, -1}),
                    Equals("specdec::attn: argument 'q': expected shape [2, 5, *], got [2, 3, 4]"));
  CHECK_THROWS_WITH(specdec::require_shape("specdec::attn", "q", v, {2, 3}),
                    Equals("specdec::attn: argument 'q': expected shape [2, 3], got [2, 3, 4]"));
  CHECK(specdec::shape_string(v) == "[2, 3, 4]");

  const std::int64_t e[2] = {4, 3}, s[2] = {1, 4};
  specdec::strided_view<float, 2> t(buf.data(), e, s);
  CHECK_THROWS_WITH(specdec::require_unit_inner_stride("specdec::g", "k", t),
                    Equals("specdec::g: argument 'k': expected unit stride in the last dimension, got 4"));
  CHECK_NOTHROW(specdec::require_unit_inner_stride("specdec::g", "k", v));

  auto d = specdec::make_view(buf.data(), {24}, specdec::memory_space::device);
  CHECK_THROWS_WITH(specdec::require_host_accessible("specdec::h", "x", d),
                    Equals("specdec::h: argument 'x': expected host-accessible memory (host or managed), got device"));
  CHECK_NOTHROW(specdec::require_host_accessible("f", "x", specdec::make_view(buf.data(), {24}, specdec::memory_space::managed)));
  CHECK(specdec::device_accessible(specdec::memory_space::managed));
  CHECK_FALSE(specdec::device_accessible(specdec::memory_space::host));
  CHECK_FALSE(specdec::host_accessible(specdec::memory_space::device));
}

TEST_CASE("require_array refuses a view whose data pointer is misaligned for its element type") {
  using Catch::Matchers::Contains;
  // a user's tensor type over a byte buffer at an odd offset: the backends load elements as float
  // (e.g. lse_merge, topk_batch), undefined behaviour before; from_dlpack refuses the same
  std::vector<float> buf(16);
  std::byte* const bytes = reinterpret_cast<std::byte*>(buf.data());
  for (const int offset : {1, 2, 3}) {
    const auto odd = specdec::make_view<1>(reinterpret_cast<float*>(bytes + offset), {4});
    CHECK_THROWS_WITH(specdec::require_array("specdec::f", "x", odd),
                      Contains("specdec::f") && Contains("'x'") && Contains("aligned to 4 bytes") && Contains("address 0x"));
  }
  CHECK_NOTHROW(specdec::require_array("specdec::f", "x", specdec::make_view<1>(buf.data() + 1, {4})));
  // empty views are not read: any address is accepted, as a null one is
  CHECK_NOTHROW(specdec::require_array("specdec::f", "x", specdec::make_view<1>(reinterpret_cast<float*>(bytes + 1), {0})));
  // alignment is the element type's: an int64 view at a 4-byte offset is refused, a half view at 2 is not
  std::vector<std::int64_t> wide(4);
  const auto i64 = specdec::make_view<1>(reinterpret_cast<std::int64_t*>(reinterpret_cast<std::byte*>(wide.data()) + 4), {2});
  CHECK_THROWS_WITH(specdec::require_array("specdec::f", "x", i64), Contains("aligned to 8 bytes"));
  const auto h = specdec::make_view<1>(reinterpret_cast<const specdec::half*>(bytes + 2), {4});
  CHECK_NOTHROW(specdec::require_array("specdec::f", "x", h));
}

TEST_CASE("require_array refuses views whose element offsets overflow int64 bytes; require_disjoint treats them as overlapping") {
  using Catch::Matchers::Contains;
  std::vector<float> buf(16);
  const std::int64_t e[2] = {3, 4}, e1[2] = {3, 1};
  const std::int64_t far[2] = {std::int64_t{1} << 62, 1}, edge[2] = {(INT64_MAX / 4) / 2, 1}, past[2] = {(INT64_MAX / 4) / 2 + 1, 1};
  const specdec::strided_view<float, 2> a(buf.data(), e, far), ok(buf.data(), e1, edge), over(buf.data(), e1, past);
  CHECK_THROWS_WITH(specdec::require_array("specdec::f", "x", a), Contains("'x'") && Contains("fit int64"));
  CHECK_THROWS_WITH(specdec::require_shape("specdec::f", "x", over, {3, 1}), Contains("fit int64"));
  CHECK_NOTHROW(specdec::require_array("specdec::f", "x", ok));  // the last float at 2 x ((2^63 - 1) / 4 / 2) floats: in range
  CHECK(specdec::detail::addressable(ok));
  CHECK_FALSE(specdec::detail::addressable(a));
  // an unaddressable view overlaps everything (no wrapped span can make it look apart)
  const auto other = specdec::make_view<1>(buf.data() + 12, {4});
  CHECK_THROWS_WITH(specdec::require_disjoint("specdec::f", "x", a, "y", other), Contains("'y'"));
  // offsets that fit int64 but addresses that wrap: below address 0 (a negative stride from a real
  // pointer), past the top (a pointer near UINTPTR_MAX); both refused, both overlap everything
  const std::int64_t huge[1] = {std::int64_t{1} << 50}, minus[1] = {-1}, two[1] = {2}, page[1] = {4096};
  const specdec::strided_view<float, 1> below_zero(buf.data(), huge, minus);
  const specdec::strided_view<float, 1> past_top(reinterpret_cast<float*>(~std::uintptr_t{0} - 4095), two, page);
  CHECK_THROWS_WITH(specdec::require_array("specdec::f", "x", below_zero), Contains("addresses that do not wrap"));
  CHECK_THROWS_WITH(specdec::require_array("specdec::f", "x", past_top), Contains("addresses that do not wrap"));
  CHECK(specdec::views_overlap(below_zero, below_zero));
  CHECK(specdec::views_overlap(past_top, other));
  const std::int64_t four[1] = {4};
  CHECK(specdec::detail::addressable(specdec::strided_view<float, 1>(buf.data() + 3, four, minus)));  // in range
  CHECK(specdec::views_overlap(a, other));
}

// has_unique_elements against enumeration: on random small rank-3 views (extents 0-4, strides -13..13,
// stride 0 included) it may say "unique" only when every index tuple has its own offset, and it must
// say so for every layout a real array has (any permutation of packed or padded strides).
TEST_CASE("has_unique_elements never accepts a view whose indices share an element") {
  std::uint64_t state = 0x9e3779b97f4a7c15ull;
  const auto next = [&](int n) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int>((state >> 33) % static_cast<std::uint64_t>(n));
  };
  float dummy = 0.f;
  int unique_seen = 0, shared_seen = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::int64_t e[3], s[3];
    for (int i = 0; i < 3; ++i) {
      e[i] = next(5);
      s[i] = next(27) - 13;
    }
    const specdec::strided_view<float, 3> v(&dummy, {e[0], e[1], e[2]}, {s[0], s[1], s[2]});
    std::vector<std::int64_t> offsets;
    for (std::int64_t a = 0; a < e[0]; ++a)
      for (std::int64_t b = 0; b < e[1]; ++b)
        for (std::int64_t c = 0; c < e[2]; ++c) offsets.push_back(a * s[0] + b * s[1] + c * s[2]);
    std::sort(offsets.begin(), offsets.end());
    const bool distinct = std::adjacent_find(offsets.begin(), offsets.end()) == offsets.end();
    if (specdec::has_unique_elements(v)) {
      INFO("extents " << e[0] << ' ' << e[1] << ' ' << e[2] << ", strides " << s[0] << ' ' << s[1] << ' ' << s[2]);
      REQUIRE(distinct);
    }
    (distinct ? unique_seen : shared_seen) += 1;
  }
  REQUIRE(unique_seen > 1000);  // both kinds were drawn
  REQUIRE(shared_seen > 1000);
  // Every permutation of a packed or row-padded layout.
  const std::int64_t ext[3] = {3, 4, 5};
  int perm[3] = {0, 1, 2};
  do {
    for (std::int64_t pad : {0, 3}) {
      std::int64_t st[3], step = 1;
      for (int k = 2; k >= 0; --k) {  // perm[2] innermost
        st[perm[k]] = step;
        step *= ext[perm[k]] + (k == 2 ? pad : 0);
      }
      REQUIRE(specdec::has_unique_elements(specdec::strided_view<float, 3>(&dummy, {3, 4, 5}, {st[0], st[1], st[2]})));
      REQUIRE(specdec::has_unique_elements(specdec::strided_view<float, 3>(&dummy, {3, 4, 5}, {-st[0], st[1], -st[2]})));
    }
  } while (std::next_permutation(perm, perm + 3));
  // Strides whose reach passes 2^63 describe no array.
  constexpr std::int64_t huge = std::int64_t{1} << 62;
  REQUIRE_FALSE(specdec::has_unique_elements(specdec::strided_view<float, 2>(&dummy, {4, 2}, {huge, 1})));
  REQUIRE_FALSE(specdec::has_unique_elements(
      specdec::strided_view<float, 1>(&dummy, {2}, {std::numeric_limits<std::int64_t>::min()})));
  REQUIRE_THROWS_WITH(specdec::require_unique_elements("f", "out", specdec::strided_view<float, 2>(&dummy, {4, 8}, {0, 1})),
                      Contains("'out'") && Contains("do not overlap") && Contains("strides [0, 1]"));
}

TEST_CASE("the views' size arithmetic does not overflow at the extremes it accepts", "[tensor][errors]") {
  // Each was signed int64 overflow (UBSan reports it in CI's sanitizer step; session-67 review).
  float x[4] = {};
  // require_batch_counts: N + R wrapped negative and passed "extent(0) + requests <= INT32_MAX"
  const specdec::strided_view<float, 1> reqs(x, {1}, {1});
  const specdec::strided_view<float, 1> nodes(x, {std::numeric_limits<std::int64_t>::max()}, {0});
  CHECK_THROWS_WITH(specdec::require_batch_counts("f", "bonus", reqs, "tokens", nodes, true), Contains("tokens"));
  const specdec::strided_view<float, 1> fits(x, {std::numeric_limits<std::int32_t>::max() - 1}, {0});
  CHECK(specdec::require_batch_counts("f", "bonus", reqs, "tokens", fits, true).nodes == fits.extent(0));
  // view_byte_span at the largest reach addressable() accepts: hi * size + size overflowed by one
  const std::int64_t rows = std::numeric_limits<std::int64_t>::max() / 4 + 1;
  const specdec::strided_view<float, 1> big(x, {rows}, {1});
  const specdec::strided_view<float, 1> other(x + 2, {1}, {1});
  CHECK(specdec::views_overlap(big, other));
  // is_contiguous on an empty view with a huge extent (the running product left int64)
  const specdec::strided_view<float, 3> empty(x, {0, std::int64_t{1} << 62, 4}, {0, 4, 1});
  CHECK_FALSE(empty.is_contiguous());
  CHECK(specdec::strided_view<float, 2>::contiguous(x, {std::int64_t{1} << 62, 4}).is_contiguous());
}
