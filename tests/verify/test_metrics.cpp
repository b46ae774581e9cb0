#include <catch2/catch.hpp>

#include <limits>
#include <thread>

#include "specdec/verify/metrics.hpp"

TEST_CASE("alpha follows TokenSwift Eq. 4 and tau counts the bonus token") {
  const std::vector<std::int32_t> a{4, 0, 2, 3};
  CHECK(specdec::acceptance_rate_eq4(a, 3) == Approx(9.0 / (4.0 * 4.0)));
  REQUIRE_THROWS_WITH(specdec::acceptance_rate_eq4(a, 2), Catch::Contains("accepted_per_step[0]"));
  REQUIRE_THROWS_WITH(specdec::acceptance_rate_eq4(std::vector<std::int32_t>{}, 2), Catch::Contains("'accepted_per_step'"));
  REQUIRE_THROWS_WITH(specdec::acceptance_rate_eq4(a, -1), Catch::Contains("'gamma'"));
  const std::vector<specdec::verify_result> steps{{{0, 1, 2}, 5}, {{}, 1}, {{3}, 2}};
  CHECK(specdec::mean_accepted_length(steps) == Approx((4.0 + 1.0 + 2.0) / 3.0));
  REQUIRE_THROWS_AS(specdec::mean_accepted_length(std::vector<specdec::verify_result>{}), specdec::invalid_argument);
  specdec::decode_metrics m;
  for (const auto& s : steps) m.record(s);
  CHECK(m.steps() == 3);
  CHECK(m.emitted() == 7);
  CHECK(m.tau() == Approx(7.0 / 3.0));
  CHECK(m.alpha(3) == Approx(4.0 / 12.0));
}

TEST_CASE("expected speedup is Leviathan's formula (GLIDE §5.1)") {
  // alpha 0.8, gamma 5, c 0.05: (1 - 0.8^6) / (0.2 * 1.25)
  CHECK(specdec::expected_speedup(0.8, 5, 0.05) == Approx((1 - std::pow(0.8, 6)) / (0.2 * 1.25)));
  CHECK(specdec::expected_speedup(1.0, 4, 0.1) == Approx(5.0 / 1.4));
  CHECK(specdec::expected_speedup(0.999999, 4, 0.1) == Approx(5.0 / 1.4).epsilon(1e-4));  // continuous at 1
  CHECK(specdec::expected_speedup(0.0, 3, 0.0) == Approx(1.0));
  REQUIRE_THROWS_WITH(specdec::expected_speedup(1.2, 3, 0.1), Catch::Contains("'alpha'"));
  REQUIRE_THROWS_WITH(specdec::expected_speedup(0.5, -1, 0.1), Catch::Contains("'gamma'"));
  REQUIRE_THROWS_WITH(specdec::expected_speedup(0.5, 1, -0.1), Catch::Contains("'c'"));
  // the non-finite policy: NaN and infinities are named, denormals ordinary
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (double bad : {nan, inf, -inf}) {
    REQUIRE_THROWS_WITH(specdec::expected_speedup(bad, 3, 0.1), Catch::Contains("'alpha'"));
    REQUIRE_THROWS_WITH(specdec::expected_speedup(0.5, 3, bad), Catch::Contains("'c'"));
  }
  CHECK(specdec::expected_speedup(std::numeric_limits<double>::denorm_min(), 3, 0.0) == Approx(1.0));
}

TEST_CASE("distinct-n counts unique n-grams over all n-grams") {
  const std::vector<std::int32_t> t{1, 2, 1, 2, 3};
  CHECK(specdec::distinct_n(t, 1) == Approx(3.0 / 5.0));
  CHECK(specdec::distinct_n(t, 2) == Approx(3.0 / 4.0));  // 12 21 12 23
  CHECK(specdec::distinct_n(t, 3) == Approx(1.0));
  CHECK(specdec::distinct_n(t, 6) == 0.0);
  REQUIRE_THROWS_WITH(specdec::distinct_n(t, 0), Catch::Contains("'n'"));
}

TEST_CASE("phase timers accumulate per phase") {
  specdec::decode_metrics m;
  {
    auto t = m.scoped(specdec::decode_phase::target);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  m.add_ms(specdec::decode_phase::draft, 1.5);
  CHECK(m.ms(specdec::decode_phase::target) >= 4.0);
  CHECK(m.ms(specdec::decode_phase::draft) == 1.5);
  CHECK(m.ms(specdec::decode_phase::verify) == 0.0);
  REQUIRE_THROWS_WITH(m.add_ms(specdec::decode_phase::verify, -1.0), Catch::Contains("'ms'"));
  for (double bad : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()})
    REQUIRE_THROWS_WITH(m.add_ms(specdec::decode_phase::verify, bad), Catch::Contains("'ms'"));
  CHECK(m.ms(specdec::decode_phase::verify) == 0.0);
}

TEST_CASE("metrics at the int limits and with a value that is no decode_phase", "[verify][validation]") {
  // gamma + 1 overflowed int at gamma = INT_MAX (a review's finding): now counted in 64 bits.
  constexpr int big = std::numeric_limits<int>::max();
  const std::vector<std::int32_t> a{0, big};
  CHECK(specdec::acceptance_rate_eq4(a, big) == Approx(0.5 * big / (static_cast<double>(big) + 1.0)));
  CHECK(specdec::expected_speedup(0.5, big, 0.0) == Approx(2.0));  // (1 - 0.5^(gamma+1)) / 0.5
  CHECK(specdec::expected_speedup(0.5, big, 1.0) > 0.0);
  specdec::decode_metrics m;
  const auto bad = static_cast<specdec::decode_phase>(7);
  REQUIRE_THROWS_WITH(m.add_ms(bad, 1.0), Catch::Contains("add_ms") && Catch::Contains("'phase'"));
  REQUIRE_THROWS_WITH(m.ms(bad), Catch::Contains("'phase'"));
  REQUIRE_THROWS_WITH(static_cast<void>(m.scoped(bad)), Catch::Contains("scoped") && Catch::Contains("'phase'"));
  for (auto p : {specdec::decode_phase::draft, specdec::decode_phase::target, specdec::decode_phase::verify})
    CHECK(m.ms(p) == 0.0);
}
