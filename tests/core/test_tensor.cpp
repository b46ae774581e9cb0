#include <catch2/catch.hpp>

#include <cstdint>
#include <numeric>
#include <vector>

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
