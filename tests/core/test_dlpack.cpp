#include <catch2/catch.hpp>

#include <cstdint>
#include <numeric>
#include <vector>

#include "specdec/core/dlpack.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::Equals;

namespace {
DLTensor make_tensor(void* data, std::int64_t* shape, std::int64_t* strides, int ndim, DLDataType dt,
                     DLDeviceType dev = kDLCPU, std::uint64_t byte_offset = 0) {
  DLTensor t{};
  t.data = data;
  t.device = DLDevice{dev, 0};
  t.ndim = ndim;
  t.dtype = dt;
  t.shape = shape;
  t.strides = strides;
  t.byte_offset = byte_offset;
  return t;
}
// The template arguments' comma would split Catch2's two-argument macros: name each instantiation.
const auto from_dlpack_bf16_1 = [](auto&&... a) { return specdec::from_dlpack<specdec::bfloat16, 1>(a...); };
const auto from_dlpack_cf32_3 = [](auto&&... a) { return specdec::from_dlpack<const float, 3>(a...); };
const auto from_dlpack_f16_1 = [](auto&&... a) { return specdec::from_dlpack<specdec::half, 1>(a...); };
const auto from_dlpack_f32_1 = [](auto&&... a) { return specdec::from_dlpack<float, 1>(a...); };
const auto from_dlpack_f32_2 = [](auto&&... a) { return specdec::from_dlpack<float, 2>(a...); };
const auto from_dlpack_f32_3 = [](auto&&... a) { return specdec::from_dlpack<float, 3>(a...); };
const auto from_dlpack_f64_2 = [](auto&&... a) { return specdec::from_dlpack<double, 2>(a...); };
const auto from_dlpack_i16_1 = [](auto&&... a) { return specdec::from_dlpack<std::int16_t, 1>(a...); };
const auto from_dlpack_i32_1 = [](auto&&... a) { return specdec::from_dlpack<std::int32_t, 1>(a...); };
const auto from_dlpack_u16_1 = [](auto&&... a) { return specdec::from_dlpack<std::uint16_t, 1>(a...); };
}  // namespace

TEST_CASE("from_dlpack: null strides are compact row-major, byte_offset is applied") {
  std::vector<float> buf(2 * 3 * 4 + 4);
  std::iota(buf.begin(), buf.end(), 0.0f);
  std::int64_t shape[3] = {2, 3, 4};
  auto t = make_tensor(buf.data(), shape, nullptr, 3, DLDataType{kDLFloat, 32, 1});
  auto v = from_dlpack_f32_3(t);
  CHECK(v.data() == buf.data());
  CHECK(v.extent(0) == 2);
  CHECK(v.extent(2) == 4);
  CHECK(v.stride(0) == 12);
  CHECK(v.stride(1) == 4);
  CHECK(v.stride(2) == 1);
  CHECK(v.space() == specdec::memory_space::host);
  CHECK(v(1, 2, 3) == 23.0f);

  t.byte_offset = 4 * sizeof(float);
  auto w = from_dlpack_cf32_3(t);
  CHECK(w.data() == buf.data() + 4);
  CHECK(w(0, 0, 0) == 4.0f);
}

TEST_CASE("from_dlpack: explicit strides (a transposed view) are taken in elements") {
  std::vector<double> buf(3 * 5);
  std::iota(buf.begin(), buf.end(), 0.0);
  std::int64_t shape[2] = {5, 3}, strides[2] = {1, 5};
  DLManagedTensor m{};
  m.dl_tensor = make_tensor(buf.data(), shape, strides, 2, DLDataType{kDLFloat, 64, 1});
  auto v = from_dlpack_f64_2(m);
  CHECK_FALSE(v.is_contiguous());
  CHECK(v.stride(0) == 1);
  CHECK(v.stride(1) == 5);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) REQUIRE(v(i, j) == buf[static_cast<std::size_t>(j * 5 + i)]);
}

TEST_CASE("from_dlpack: device types map to memory spaces") {
  float x[4] = {};
  std::int64_t shape[1] = {4};
  auto dt = DLDataType{kDLFloat, 32, 1};
  CHECK(from_dlpack_f32_1(make_tensor(x, shape, nullptr, 1, dt, kDLCUDA)).space() ==
        specdec::memory_space::device);
  CHECK(from_dlpack_f32_1(make_tensor(x, shape, nullptr, 1, dt, kDLCUDAHost)).space() ==
        specdec::memory_space::host);
  CHECK(from_dlpack_f32_1(make_tensor(x, shape, nullptr, 1, dt, kDLCUDAManaged)).space() ==
        specdec::memory_space::managed);
  for (DLDeviceType bad : {kDLOpenCL, kDLVulkan, kDLMetal, kDLROCM, kDLROCMHost, kDLExtDev}) {
    CHECK_THROWS_AS(from_dlpack_f32_1(make_tensor(x, shape, nullptr, 1, dt, bad)),
                    specdec::invalid_argument);
  }
  CHECK_THROWS_WITH(from_dlpack_f32_1(make_tensor(x, shape, nullptr, 1, dt, kDLROCM), "specdec::attn", "k"),
                    Equals("specdec::attn: argument 'k': expected a device of type kDLCPU, kDLCUDA, kDLCUDAHost or "
                           "kDLCUDAManaged, got device_type 10 (kDLROCM)"));
}

TEST_CASE("from_dlpack: dtype code, bits and lanes must match the element type") {
  std::uint16_t raw[4] = {};
  std::int64_t shape[1] = {4};
  CHECK_NOTHROW(from_dlpack_f16_1(make_tensor(raw, shape, nullptr, 1, DLDataType{kDLFloat, 16, 1})));
  CHECK_NOTHROW(from_dlpack_bf16_1(make_tensor(raw, shape, nullptr, 1, DLDataType{kDLBfloat, 16, 1})));
  CHECK_NOTHROW(from_dlpack_u16_1(make_tensor(raw, shape, nullptr, 1, DLDataType{kDLUInt, 16, 1})));
  CHECK_NOTHROW(from_dlpack_i16_1(make_tensor(raw, shape, nullptr, 1, DLDataType{kDLInt, 16, 1})));
  // half stored as bfloat16: same bits, different code.
  CHECK_THROWS_WITH(
      from_dlpack_f16_1(make_tensor(raw, shape, nullptr, 1, DLDataType{kDLBfloat, 16, 1}),
                                             "specdec::f", "q"),
      Equals("specdec::f: argument 'q': expected dtype float16 (code 2 (float), bits 16, lanes 1), "
             "got dtype code 4 (bfloat), bits 16, lanes 1"));
  // Wrong bits.
  CHECK_THROWS_WITH(from_dlpack_f32_1(make_tensor(raw, shape, nullptr, 1, DLDataType{kDLFloat, 16, 1})),
                    Contains("'tensor'") && Contains("expected dtype float32") && Contains("bits 16"));
  // Vector lanes are rejected.
  CHECK_THROWS_WITH(from_dlpack_f16_1(make_tensor(raw, shape, nullptr, 1, DLDataType{kDLFloat, 16, 2})),
                    Contains("lanes 2"));
  CHECK_THROWS_WITH(from_dlpack_i32_1(make_tensor(raw, shape, nullptr, 1, DLDataType{kDLUInt, 32, 1})),
                    Contains("specdec::from_dlpack") && Contains("int32") && Contains("code 1 (uint)"));
  CHECK(specdec::dlpack_dtype<const float>().code == kDLFloat);
  CHECK(specdec::dlpack_dtype<std::int64_t>().bits == 64);
}

namespace {
template <class T>
constexpr bool views_as = requires(const DLTensor& t) { specdec::from_dlpack<T, 1>(t); };
}  // namespace

TEST_CASE("from_dlpack: bool only where DLPack has a bool dtype; before 0.8 a uint8 tensor is viewed as uint8") {
  // Before DLPack 0.8 a bool view took an 8-bit uint tensor, whose bytes may be any value: loading
  // 0x02 as bool is undefined behaviour. Such headers leave from_dlpack<bool> out (dlpack_viewable).
  STATIC_REQUIRE(views_as<std::uint8_t>);
  STATIC_REQUIRE(views_as<const float>);
  STATIC_REQUIRE(views_as<bool> == static_cast<bool>(SPECDEC_DLPACK_HAS_BOOL));
  STATIC_REQUIRE(views_as<const bool> == static_cast<bool>(SPECDEC_DLPACK_HAS_BOOL));
  STATIC_REQUIRE(SPECDEC_DLPACK_HAS_BOOL == (specdec::dlpack_dtype<bool>().code != kDLUInt));
  std::uint8_t bytes[3] = {0, 2, 1};
  std::int64_t shape[1] = {3};
  const auto v = specdec::from_dlpack<const std::uint8_t, 1>(make_tensor(bytes, shape, nullptr, 1, DLDataType{kDLUInt, 8, 1}));
  CHECK(v(1) == 2);
}

TEST_CASE("from_dlpack: ndim, shape, data and alignment are validated") {
  float x[8] = {};
  std::int64_t shape2[2] = {2, 4};
  const auto f32 = DLDataType{kDLFloat, 32, 1};
  CHECK_THROWS_WITH(from_dlpack_f32_3(make_tensor(x, shape2, nullptr, 2, f32), "specdec::g", "v"),
                    Equals("specdec::g: argument 'v': expected ndim == 3, got 2"));
  CHECK_THROWS_WITH(from_dlpack_f32_2(make_tensor(x, nullptr, nullptr, 2, f32)),
                    Contains("non-null shape"));
  std::int64_t neg[2] = {2, -4};
  CHECK_THROWS_WITH(from_dlpack_f32_2(make_tensor(x, neg, nullptr, 2, f32)),
                    Contains("non-negative shape[1]") && Contains("got -4"));
  CHECK_THROWS_WITH(from_dlpack_f32_2(make_tensor(nullptr, shape2, nullptr, 2, f32)),
                    Contains("non-null data"));
  std::int64_t empty[2] = {0, 4};
  CHECK(from_dlpack_f32_2(make_tensor(nullptr, empty, nullptr, 2, f32)).size() == 0);
  CHECK_THROWS_WITH(from_dlpack_f32_2(make_tensor(x, shape2, nullptr, 2, f32, kDLCPU, 2)),
                    Contains("aligned to 4 bytes") && Contains("byte_offset 2"));
  // a byte_offset that wraps the pointer (here 16 bytes before the buffer), and strides whose reach
  // overflows int64 bytes (the view's arithmetic would wrap)
  CHECK_THROWS_WITH(from_dlpack_f32_2(make_tensor(x, shape2, nullptr, 2, f32, kDLCPU, ~std::uint64_t{15})),
                    Contains("within the address space"));
  std::int64_t shape3[2] = {3, 4}, far[2] = {std::int64_t{1} << 62, 1};
  CHECK_THROWS_WITH(from_dlpack_f32_2(make_tensor(x, shape3, far, 2, f32)), Contains("fit int64"));
  std::int64_t lowest[2] = {INT64_MIN, 1};
  CHECK_THROWS_WITH(from_dlpack_f32_2(make_tensor(x, shape3, lowest, 2, f32)), Contains("fit int64"));
  std::int64_t long_shape[1] = {std::int64_t{1} << 46}, minus[1] = {-1};  // reaches below address 0
  const auto from_dlpack_f32_1 = [](auto&&... a) { return specdec::from_dlpack<float, 1>(a...); };
  CHECK_THROWS_WITH(from_dlpack_f32_1(make_tensor(x, long_shape, minus, 1, f32)), Contains("do not wrap"));
  std::int64_t back[2] = {-4, 1};  // negative strides are fine when they stay in range
  CHECK(from_dlpack_f32_2(make_tensor(x + 8, shape2, back, 2, f32))(1, 0) == x[4]);
}

TEST_CASE("from_dlpack rejects shapes whose element count overflows int64", "[dlpack][sizes]") {
  // Wrapped, {2^32, 2^32} had 0 elements, and null data passed the non-empty check.
  std::int64_t shape[2] = {std::int64_t{1} << 32, std::int64_t{1} << 32};
  DLTensor t = make_tensor(nullptr, shape, nullptr, 2, specdec::dlpack_dtype<float>());
  REQUIRE_THROWS_WITH(from_dlpack_f32_2(t), Contains("fits in int64"));
  shape[0] = std::int64_t{1} << 62, shape[1] = 8;
  REQUIRE_THROWS_WITH(from_dlpack_f32_2(t), Contains("fits in int64"));
  // An empty tensor is empty whatever its other extents, and may have null data.
  shape[0] = 0, shape[1] = std::int64_t{1} << 62;
  const auto v = from_dlpack_f32_2(t);
  REQUIRE(v.extent(0) == 0);
  REQUIRE(v.extent(1) == std::int64_t{1} << 62);
}

#if defined(DLPACK_MAJOR_VERSION)  // DLPack 1.x headers (Debian's libdlpack-dev is 0.6: not compiled there)
TEST_CASE("from_dlpack of a DLManagedTensorVersioned checks its major version and read-only flag", "[dlpack]") {
  // The DLTensor inside carries no flag: a read-only tensor came back as a writable view, and a
  // tensor of another major version (whose other fields DLPack forbids reading) was read.
  static const float weights[4] = {1, 2, 3, 4};
  std::int64_t shape[1] = {4};
  DLManagedTensorVersioned mt{};
  mt.version = {DLPACK_MAJOR_VERSION, 0};
  mt.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  mt.dl_tensor = make_tensor(const_cast<float*>(weights), shape, nullptr, 1, specdec::dlpack_dtype<float>());
  CHECK_THROWS_WITH((specdec::from_dlpack<float, 1>(mt)), Contains("writable tensor"));
  CHECK(specdec::from_dlpack<const float, 1>(mt)(2) == 3.0f);
  mt.flags = 0;
  CHECK(specdec::from_dlpack<float, 1>(mt).extent(0) == 4);
  mt.version.major = DLPACK_MAJOR_VERSION + 1;
  CHECK_THROWS_WITH((specdec::from_dlpack<const float, 1>(mt)), Contains("major version"));
}
#endif
