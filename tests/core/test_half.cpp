#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <cstring>

#include "float16_reference.hpp"
#include "specdec/core/half.hpp"
#include "specdec/core/numeric.hpp"
#include "specdec/core/philox.hpp"

using specdec::half;
using namespace specdec_test;

// The compiler's own _Float16 as a second reference where C++ has it: GCC 12 defines __FLT16_MAX__
// on aarch64 too (the C type) but takes _Float16 in C++ only on x86 (aarch64 from GCC 13).
#if defined(__FLT16_MAX__) && (defined(__clang__) || defined(__x86_64__) || defined(__i386__) || __GNUC__ >= 13)
#define SPECDEC_TEST_HAVE_FLOAT16 1
#else
#define SPECDEC_TEST_HAVE_FLOAT16 0
#endif

namespace {
std::uint16_t to_half_bits(float f) { return half(f).bits; }
#if SPECDEC_TEST_HAVE_FLOAT16
std::uint16_t gcc_half_bits(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  std::uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
float gcc_half_to_float(std::uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}
#endif
bool is_nan_bits(std::uint16_t b) { return (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0; }
}  // namespace

TEST_CASE("half -> float is exact on all 65536 patterns") {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<std::uint16_t>(i);
    const float f = half::from_bits(b);
    const double ref = decode(binary16, b);
    INFO("pattern 0x" << std::hex << i);
    if (is_nan_bits(b)) {
      REQUIRE(std::isnan(f));
      REQUIRE(std::signbit(f) == ((b & 0x8000u) != 0));
      REQUIRE(((fbits(f) >> 13) & 0x1ffu) == (b & 0x1ffu));  // payload below the quiet bit kept
    } else {
      REQUIRE(static_cast<double>(f) == ref);
      REQUIRE(std::signbit(f) == std::signbit(ref));  // -0 stays -0
    }
#if SPECDEC_TEST_HAVE_FLOAT16
    const float g = gcc_half_to_float(b);
    if (!is_nan_bits(b)) REQUIRE(fbits(f) == fbits(g));
#endif
    REQUIRE((specdec::to_float(half::from_bits(b)) == f || std::isnan(f)));
  }
}

TEST_CASE("float -> half round-trips every half value and rounds every midpoint to even") {
  const rne_reference ref(binary16);
  for (std::uint32_t s : {0u, 0x8000u}) {
    for (std::uint32_t b = 0; b < 0x7c00u; ++b) {  // every finite magnitude
      const auto bits = static_cast<std::uint16_t>(s | b);
      const float v = half::from_bits(bits);
      INFO("pattern 0x" << std::hex << bits);
      REQUIRE(to_half_bits(v) == bits);  // exact values round-trip (both zeros included)
      // Midpoint between b and b+1 (b+1 == 0x7c00 is the overflow midpoint 65520).
      const double lo = ref.magnitude(static_cast<std::uint16_t>(b));
      const double hi = ref.magnitude(static_cast<std::uint16_t>(b + 1));
      const float mid = static_cast<float>((lo + hi) / 2);  // exact: needs 12 significant bits
      REQUIRE(static_cast<double>(mid) == (lo + hi) / 2);
      const float m = s ? -mid : mid;
      const std::uint16_t even = static_cast<std::uint16_t>(s | ((b % 2 == 0) ? b : b + 1));
      REQUIRE(to_half_bits(m) == even);
      REQUIRE(to_half_bits(std::nextafter(m, 0.0f)) == static_cast<std::uint16_t>(s | b));
      REQUIRE(to_half_bits(std::nextafter(m, s ? -INFINITY : INFINITY)) == static_cast<std::uint16_t>(s | (b + 1)));
#if SPECDEC_TEST_HAVE_FLOAT16
      REQUIRE(gcc_half_bits(m) == even);
#endif
    }
  }
}

TEST_CASE("float -> half special values and boundaries") {
  CHECK(to_half_bits(0.0f) == 0x0000);
  CHECK(to_half_bits(-0.0f) == 0x8000);
  CHECK(to_half_bits(INFINITY) == 0x7c00);
  CHECK(to_half_bits(-INFINITY) == 0xfc00);
  CHECK(to_half_bits(65504.0f) == 0x7bff);                    // largest finite
  CHECK(to_half_bits(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
  CHECK(to_half_bits(65520.0f) == 0x7c00);                    // overflow midpoint ties to even = Inf
  CHECK(to_half_bits(-65520.0f) == 0xfc00);
  CHECK(to_half_bits(1e30f) == 0x7c00);
  CHECK(to_half_bits(std::ldexp(1.0f, -24)) == 0x0001);       // smallest subnormal
  CHECK(to_half_bits(std::ldexp(1.0f, -25)) == 0x0000);       // half of it ties to even = +0
  CHECK(to_half_bits(-std::ldexp(1.0f, -25)) == 0x8000);
  CHECK(to_half_bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  CHECK(to_half_bits(std::ldexp(3.0f, -25)) == 0x0002);       // 1.5 ulp ties to even = 2
  CHECK(to_half_bits(std::ldexp(1.0f, -14)) == 0x0400);       // smallest normal
  CHECK(to_half_bits(std::ldexp(1023.5f, -24)) == 0x0400);    // subnormal rounding carries into normal
  CHECK(to_half_bits(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(to_half_bits(1.0f) == 0x3c00);
  CHECK(to_half_bits(-2.0f) == 0xc000);
  CHECK(to_half_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie at 1 + 2^-11 to even
  CHECK(to_half_bits(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  for (float nan : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::signaling_NaN(), bitsf(0x7f800001u), bitsf(0xffffffffu)}) {
    const std::uint16_t b = to_half_bits(nan);
    INFO("nan bits 0x" << std::hex << fbits(nan) << " -> 0x" << b);
    CHECK(is_nan_bits(b));
    CHECK((b & 0x0200u) != 0);  // quiet
    CHECK(((b & 0x8000u) != 0) == std::signbit(nan));
  }
}

TEST_CASE("float -> half matches the table-search reference on a float sweep and random floats") {
  const rne_reference ref(binary16);
  // Every 509th float bit pattern (~8.4M, all binades and both signs) plus random patterns.
  auto check_one = [&](float f) {
    if (std::isnan(f)) return;
    const std::uint16_t got = to_half_bits(f);
    const std::uint16_t want = std::isinf(f) ? static_cast<std::uint16_t>((std::signbit(f) ? 0x8000 : 0) | 0x7c00)
                                             : ref.round(static_cast<double>(f));
    if (got != want) FAIL("float bits 0x" << std::hex << fbits(f) << ": got 0x" << got << ", want 0x" << want);
#if SPECDEC_TEST_HAVE_FLOAT16
    if (gcc_half_bits(f) != want) FAIL("_Float16 disagrees with the reference at 0x" << std::hex << fbits(f));
#endif
  };
  for (std::uint64_t u = 0; u < (1ull << 32); u += 509) check_one(bitsf(static_cast<std::uint32_t>(u)));
  specdec::philox_stream rng(2024, 1);
  for (int i = 0; i < 200000; ++i) check_one(bitsf(rng.next_u32()));
  // Dense around the normal range where most activations live.
  for (int i = 0; i < 200000; ++i) check_one(static_cast<float>((rng.uniform_double() - 0.5) * 140000.0));
  SUCCEED("sweep done");
}

TEST_CASE("from_float<half> narrows with round to nearest even") {
  CHECK(specdec::from_float<half>(1.0f + std::ldexp(1.0f, -11)).bits == 0x3c00);
  CHECK(specdec::from_float<half>(2.5).bits == 0x4100);
  CHECK(specdec::to_float(specdec::from_float<half>(-3.0f)) == -3.0f);
}

TEST_CASE("from_float<half> and from_float<bfloat16> round a double once, not through float") {
  using specdec::bfloat16;
  // just above a midpoint by less than a float ulp: a float cast rounded to the midpoint, then to even
  CHECK(specdec::from_float<half>(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)).bits == 0x3c01);
  CHECK(specdec::from_float<half>(-(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40))).bits == 0xbc01);
  CHECK(specdec::from_float<bfloat16>(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)).bits == 0x3f81);
  CHECK(specdec::from_float<half>(1.0 + std::ldexp(1.0, -11) - std::ldexp(1.0, -40)).bits == 0x3c00);
  CHECK(specdec::from_float<half>(1e300).bits == 0x7c00);
  CHECK(specdec::from_float<bfloat16>(-1e300).bits == 0xff80);
  CHECK(specdec::from_float<half>(std::ldexp(1.0, -30)).bits == 0x0000);  // below half the smallest subnormal
  CHECK(std::isnan(specdec::to_float(specdec::from_float<half>(std::numeric_limits<double>::quiet_NaN()))));
  // against the table-search reference, on doubles within 2^-20 relative of the formats' midpoints
  // (where rounding twice differs) and on random doubles over both formats' ranges
  for (const auto& [fmt, inf_exp] : {std::pair{specdec_test::binary16, 16}, std::pair{specdec_test::bfloat16_format, 128}}) {
    const specdec_test::rne_reference ref(fmt);
    const bool is_half = fmt.mant_bits == 10;
    const auto narrow = [&](double x) -> std::uint16_t {
      return is_half ? specdec::from_float<half>(x).bits : specdec::from_float<bfloat16>(x).bits;
    };
    specdec::philox_stream rng(0xd0b1e, is_half ? 1 : 2);
    int bad = 0;
    for (int i = 0; i < 200000; ++i) {
      const auto p = static_cast<std::uint16_t>(rng.below(ref.inf_bits()));  // a finite magnitude below Inf
      const double mid = 0.5 * (ref.magnitude(p) + ref.magnitude(static_cast<std::uint16_t>(p + 1)));
      const double off = std::ldexp(mid, -20 - static_cast<int>(rng.below(30))) * (rng.below(2) ? 1 : -1);
      const double x = (rng.below(2) ? 1.0 : -1.0) * (mid + (i % 3 == 0 ? 0.0 : off));
      bad += narrow(x) != ref.round(x);
      const double y = (rng.uniform_double() - 0.5) * std::ldexp(1.0, static_cast<int>(rng.below(inf_exp + 28)) - 24);
      bad += narrow(y) != ref.round(y);
    }
    INFO((is_half ? "half" : "bfloat16"));
    CHECK(bad == 0);
  }
}

TEST_CASE("half -> float quiets a signalling NaN and keeps its payload, as F16C does") {
  for (std::uint32_t m = 1; m < 0x200; ++m)  // the signalling NaNs: quiet bit (0x200) clear
    for (const std::uint32_t sign : {0u, 0x8000u}) {
      const auto h = static_cast<std::uint16_t>(sign | 0x7c00u | m);
      const std::uint32_t want = (sign << 16) | 0x7fc00000u | (m << 13);
      REQUIRE(specdec_test::fbits(half::to_float(h)) == want);
    }
  CHECK(specdec_test::fbits(half::to_float(0x7e01)) == 0x7fc02000u);  // a quiet one is unchanged
}
