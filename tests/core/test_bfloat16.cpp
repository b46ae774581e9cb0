#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>

#include "float16_reference.hpp"
#include "specdec/core/bfloat16.hpp"
#include "specdec/core/numeric.hpp"
#include "specdec/core/philox.hpp"

using specdec::bfloat16;
using namespace specdec_test;

namespace {
std::uint16_t to_bf16_bits(float f) { return bfloat16(f).bits; }
bool is_nan_bits(std::uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }
}  // namespace

TEST_CASE("bfloat16 -> float is exact on all 65536 patterns") {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<std::uint16_t>(i);
    const float f = bfloat16::from_bits(b);
    INFO("pattern 0x" << std::hex << i);
    if (is_nan_bits(b)) {
      REQUIRE(std::isnan(f));
      REQUIRE(std::signbit(f) == ((b & 0x8000u) != 0));
    } else {
      const double ref = decode(bfloat16_format, b);
      REQUIRE(static_cast<double>(f) == ref);
      REQUIRE(std::signbit(f) == std::signbit(ref));
    }
    REQUIRE((fbits(f) >> 16) == i);  // the pattern is the top half of the float
  }
}

TEST_CASE("float -> bfloat16 round-trips every value and rounds every midpoint to even") {
  const rne_reference ref(bfloat16_format);
  for (std::uint32_t s : {0u, 0x8000u}) {
    for (std::uint32_t b = 0; b < 0x7f80u; ++b) {
      const auto bits = static_cast<std::uint16_t>(s | b);
      const float v = bfloat16::from_bits(bits);
      INFO("pattern 0x" << std::hex << bits);
      REQUIRE(to_bf16_bits(v) == bits);
      const double lo = ref.magnitude(static_cast<std::uint16_t>(b));
      const double hi = ref.magnitude(static_cast<std::uint16_t>(b + 1));
      const double mid_d = (lo + hi) / 2;
      const float mid = static_cast<float>(mid_d);
      REQUIRE(static_cast<double>(mid) == mid_d);  // exact: needs 9 significant bits
      const float m = s ? -mid : mid;
      REQUIRE(to_bf16_bits(m) == static_cast<std::uint16_t>(s | ((b % 2 == 0) ? b : b + 1)));
      REQUIRE(to_bf16_bits(std::nextafter(m, 0.0f)) == static_cast<std::uint16_t>(s | b));
      REQUIRE(to_bf16_bits(std::nextafter(m, s ? -INFINITY : INFINITY)) == static_cast<std::uint16_t>(s | (b + 1)));
    }
  }
}

TEST_CASE("float -> bfloat16 special values") {
  CHECK(to_bf16_bits(0.0f) == 0x0000);
  CHECK(to_bf16_bits(-0.0f) == 0x8000);
  CHECK(to_bf16_bits(INFINITY) == 0x7f80);
  CHECK(to_bf16_bits(-INFINITY) == 0xff80);
  CHECK(to_bf16_bits(bitsf(0x7f7f7fffu)) == 0x7f7f);  // just below the overflow midpoint: largest finite
  CHECK(to_bf16_bits(bitsf(0x7f7f8000u)) == 0x7f80);  // overflow midpoint: 0x7f7f is odd, ties to Inf
  CHECK(to_bf16_bits(FLT_MAX) == 0x7f80);             // beyond the midpoint: overflows to Inf
  CHECK(to_bf16_bits(-FLT_MAX) == 0xff80);
  CHECK(to_bf16_bits(std::numeric_limits<float>::denorm_min()) == 0x0000);  // below half an ulp
  CHECK(to_bf16_bits(bitsf(0x00008000u)) == 0x0000);  // subnormal midpoint, even = 0
  CHECK(to_bf16_bits(bitsf(0x00018000u)) == 0x0002);  // subnormal midpoint, even = 2
  CHECK(to_bf16_bits(bitsf(0x00008001u)) == 0x0001);
  CHECK(to_bf16_bits(1.0f) == 0x3f80);
  for (float nan : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::signaling_NaN(), bitsf(0x7f800001u), bitsf(0xff80ffffu),
                    bitsf(0x7fffffffu)}) {
    const std::uint16_t b = to_bf16_bits(nan);
    INFO("nan bits 0x" << std::hex << fbits(nan) << " -> 0x" << b);
    CHECK(is_nan_bits(b));  // never rounds into Inf, even when only low payload bits are set
    CHECK((b & 0x0040u) != 0);
    CHECK(((b & 0x8000u) != 0) == std::signbit(nan));
  }
}

TEST_CASE("float -> bfloat16 matches the table-search reference on a float sweep and random floats") {
  const rne_reference ref(bfloat16_format);
  auto check_one = [&](float f) {
    if (std::isnan(f)) return;
    const std::uint16_t got = to_bf16_bits(f);
    const std::uint16_t want = std::isinf(f) ? static_cast<std::uint16_t>((std::signbit(f) ? 0x8000 : 0) | 0x7f80)
                                             : ref.round(static_cast<double>(f));
    if (got != want) FAIL("float bits 0x" << std::hex << fbits(f) << ": got 0x" << got << ", want 0x" << want);
  };
  for (std::uint64_t u = 0; u < (1ull << 32); u += 509) check_one(bitsf(static_cast<std::uint32_t>(u)));
  specdec::philox_stream rng(99, 3);
  for (int i = 0; i < 200000; ++i) check_one(bitsf(rng.next_u32()));
  SUCCEED("sweep done");
}

TEST_CASE("from_float<bfloat16> narrows with round to nearest even") {
  CHECK(specdec::from_float<bfloat16>(bitsf(0x3f808000u)).bits == 0x3f80);
  CHECK(specdec::from_float<bfloat16>(bitsf(0x3f818000u)).bits == 0x3f82);
  CHECK(specdec::to_float(specdec::from_float<bfloat16>(-3.0)) == -3.0f);
}
