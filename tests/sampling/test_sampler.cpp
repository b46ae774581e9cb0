#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <span>
#include <vector>

#include <sys/mman.h>

#include "specdec/core/philox.hpp"
#include "specdec/sampling/logits_processor.hpp"
#include "specdec/sampling/detail/vec.hpp"
#include "specdec/sampling/sampler.hpp"
#include "specdec/verify/detail/stochastic.hpp"
#include "verify/stat_util.hpp"

namespace {
constexpr float ninf = -std::numeric_limits<float>::infinity();
}

TEST_CASE("chi-square p-values match tabulated quantiles") {
  // 95% and 99.9% quantiles of the chi-square distribution
  CHECK(stat::chi2_sf(3.841459, 1) == Approx(0.05).epsilon(1e-4));
  CHECK(stat::chi2_sf(18.307038, 10) == Approx(0.05).epsilon(1e-4));
  CHECK(stat::chi2_sf(29.588298, 10) == Approx(0.001).epsilon(1e-4));
  CHECK(stat::chi2_sf(124.342113, 100) == Approx(0.05).epsilon(1e-4));
  CHECK(stat::chi2_sf(0.0, 5) == 1.0);
  CHECK(stat::chi2_sf(1e4, 5) < 1e-100);
}

TEST_CASE("sample_token scans the weights its block sums were taken over") {
  // sample_token sums each 1024-token block with the dispatched exp_sum and then scans the chosen
  // block's weights. It scanned them with fast_exp at the file's own flags: in a default x86-64 build
  // under an AVX2/AVX-512 dispatch that rounds the multiply-adds the dispatched level fuses, so the
  // scanned weights differed from the summed ones in their last bit and a draw falling in the
  // difference went to the block's last token. Here every draw must equal the blocked inverse CDF over
  // exp_sum's own weights. The row repeats one logit at which the two exps differ (when this build has
  // such a pair), so the differences pile up along the block: the old scan missed ~1 draw in 20000.
  float xc = -0.5f;
  for (int k = 1; k <= 20000; ++k) {
    const float x = -static_cast<float>(k) * 2.5e-4f;
    float dispatched = 0.0f;
    (void)specdec::detail::exp_sum(&x, 1, 0.0f, &dispatched);
    if (dispatched != specdec::detail::fast_exp(x)) {
      xc = x;
      break;
    }
  }
  CAPTURE(xc);
  constexpr std::size_t v = 2 * specdec::detail::cdf_block;
  std::vector<float> row(v, xc), w(v);
  row[0] = 0.0f;  // the maximum
  double bs[2];
  for (int b = 0; b < 2; ++b)
    bs[b] = specdec::detail::exp_sum(row.data() + b * 1024, 1024, 0.0f, w.data() + b * 1024);
  const double total = bs[0] + bs[1];
  specdec::philox_stream rng(11, 3), ref(11, 3);
  std::int64_t mismatches = 0;
  for (int t = 0; t < 300000; ++t) {
    const double u = ref.uniform_double() * total;
    const std::int64_t want = specdec::detail::cdf_search(bs, 2, static_cast<std::int64_t>(v), u,
                                                          [&](std::int64_t i) { return static_cast<double>(w[static_cast<std::size_t>(i)]); });
    mismatches += specdec::sample_token(row, rng) != want;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("greedy_token takes the lowest id among ties") {
  CHECK(specdec::greedy_token(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}) == 1);
  CHECK(specdec::greedy_token(std::vector<float>{ninf, ninf, -5.0f}) == 2);
  // NaN is rejected, not skipped (the non-finite policy: a NaN row has no argmax to report)
  REQUIRE_THROWS_AS(specdec::greedy_token(std::vector<float>{std::nanf(""), 0.0f}), specdec::invalid_argument);
  REQUIRE_THROWS_WITH(specdec::greedy_token(std::vector<float>{ninf, ninf}),
                      Catch::Contains("specdec::greedy_token") && Catch::Contains("'row'"));
  REQUIRE_THROWS_AS(specdec::greedy_token(std::vector<float>{}), specdec::invalid_argument);
}

TEST_CASE("sample_token draws exactly from softmax(logits)") {
  const std::vector<float> logits{0.5f, -1.0f, 2.0f, ninf, 0.0f, 1.0f, -3.0f, 0.25f, 1.5f, -0.5f};
  std::vector<float> probs(logits.size());
  specdec::logits_to_probs(logits, probs);
  std::map<int, double> expected;
  for (std::size_t i = 0; i < probs.size(); ++i) expected[static_cast<int>(i)] = probs[i];
  const std::int64_t trials = 200000;
  std::map<int, std::int64_t> seen, seen_p;
  specdec::philox_stream rng(2024, specdec::stream_id(0, 0));
  for (std::int64_t t = 0; t < trials; ++t) ++seen[specdec::sample_token(logits, rng)];
  for (std::int64_t t = 0; t < trials; ++t) ++seen_p[specdec::sample_from_probs(probs, rng)];
  CHECK(seen.count(3) == 0);
  CHECK(seen_p.count(3) == 0);
  const auto r = stat::chi_square(seen, expected, trials);
  const auto rp = stat::chi_square(seen_p, expected, trials);
  INFO("logits: chi2 " << r.statistic << " dof " << r.dof << " p " << r.p_value);
  INFO("probs: chi2 " << rp.statistic << " dof " << rp.dof << " p " << rp.p_value);
  CHECK(r.p_value > stat::p_threshold);
  CHECK(rp.p_value > stat::p_threshold);
  // a wrong target (uniform) is rejected by the same test: the test has power
  std::map<int, double> uniform;
  for (int i = 0; i < 10; ++i) uniform[i] = 0.1;
  CHECK(stat::chi_square(seen, uniform, trials).p_value < 1e-10);
}

TEST_CASE("samplers are reproducible per (seed, request, step) and respect masks at 128K") {
  const int v = 128 * 1024;
  std::vector<float> logits(v, ninf);
  logits[5] = 0.0f;
  logits[v - 1] = 0.0f;
  logits[70000] = 1.0f;
  specdec::philox_stream a(9, specdec::stream_id(3, 17)), b(9, specdec::stream_id(3, 17)), c(9, specdec::stream_id(4, 17));
  std::vector<int> sa, sb, sc;
  for (int t = 0; t < 50; ++t) {
    sa.push_back(specdec::sample_token(logits, a));
    sb.push_back(specdec::sample_token(logits, b));
    sc.push_back(specdec::sample_token(logits, c));
  }
  CHECK(sa == sb);
  CHECK(sa != sc);
  for (int x : sa) CHECK((x == 5 || x == v - 1 || x == 70000));
  CHECK(a.offset() == 100);  // two Philox words per draw
  // +inf logits are rejected (the non-finite policy), before any Philox word is drawn
  std::vector<float> inf_row{0.0f, std::numeric_limits<float>::infinity(), 1.0f, std::numeric_limits<float>::infinity()};
  REQUIRE_THROWS_WITH(specdec::sample_token(inf_row, a), Catch::Contains("token 1") && Catch::Contains("+inf"));
  CHECK(a.offset() == 100);
}

TEST_CASE("samplers validate their inputs") {
  specdec::philox_stream rng(1, 1);
  REQUIRE_THROWS_WITH(specdec::sample_token(std::vector<float>{ninf}, rng),
                      Catch::Contains("specdec::sample_token") && Catch::Contains("'logits'"));
  REQUIRE_THROWS_WITH(specdec::sample_token(std::vector<float>{0.0f, std::nanf("")}, rng), Catch::Contains("NaN"));
  REQUIRE_THROWS_AS(specdec::sample_token(std::vector<float>{}, rng), specdec::invalid_argument);
  REQUIRE_THROWS_WITH(specdec::sample_from_probs(std::vector<float>{0.5f, -0.1f}, rng),
                      Catch::Contains("specdec::sample_from_probs") && Catch::Contains("'probs'"));
  REQUIRE_THROWS_WITH(specdec::sample_from_probs(std::vector<float>{0.0f, 0.0f}, rng), Catch::Contains("positive sum"));
  REQUIRE_THROWS_AS(specdec::sample_from_probs(std::vector<float>{}, rng), specdec::invalid_argument);
}

TEST_CASE("single-row samplers and processors refuse rows of 2^31 or more tokens (their ids would not fit int32)") {
  // 2^31 floats of address space, never touched (each call throws before reading the row): zero
  // pages reserved lazily, so the test costs no memory
  const std::size_t n = std::size_t{1} << 31;
  void* p = ::mmap(nullptr, n * sizeof(float), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  REQUIRE(p != MAP_FAILED);
  struct unmap {
    void* p;
    std::size_t bytes;
    ~unmap() { ::munmap(p, bytes); }
  } guard{p, n * sizeof(float)};
  const std::span<float> row(static_cast<float*>(p), n);
  specdec::philox_stream rng(1, 1);
  specdec::sampling_workspace ws;
  CHECK_THROWS_WITH(specdec::greedy_token(row), Catch::Contains("specdec::greedy_token") && Catch::Contains("at most 2^31 - 1 tokens"));
  CHECK_THROWS_WITH(specdec::sample_token(row, rng), Catch::Contains("at most 2^31 - 1 tokens"));
  CHECK_THROWS_WITH(specdec::sample_from_probs(row, rng), Catch::Contains("at most 2^31 - 1 tokens"));
  CHECK_THROWS_WITH(specdec::logits_to_probs(row, row), Catch::Contains("at most 2^31 - 1 tokens"));
  CHECK_THROWS_WITH(specdec::process_logits(row, {.temperature = 2.0f, .top_k = 5}, {}, ws),
                    Catch::Contains("specdec::process_logits") && Catch::Contains("at most 2^31 - 1 tokens"));
  CHECK_THROWS_WITH(specdec::process_tree_logits(specdec::make_view<2>(static_cast<float*>(p), {1, static_cast<std::int64_t>(n)}),
                                                 {.temperature = 2.0f}, {}, {}, {}, ws),
                    Catch::Contains("in [1, 2^31 - 1]"));
}

TEST_CASE("fast_exp is accurate on [-87.3, 0] and exactly 0 below") {
  double worst = 0.0;
  for (int i = 0; i <= 200000; ++i) {
    const float x = -87.0f * static_cast<float>(i) / 200000.0f;
    const double e = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(specdec::detail::fast_exp(x) - e) / e);
  }
  INFO("max relative error " << worst);
  CHECK(worst < 3e-7);
  CHECK(specdec::detail::fast_exp(0.0f) == 1.0f);
  CHECK(specdec::detail::fast_exp(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(specdec::detail::fast_exp(-90.0f) == 0.0f);
}

TEST_CASE("blocked sampling over several blocks matches the distribution") {
  // 2500 tokens (3 blocks of 1024, the last partial), mass spread over blocks: chi-square on 10 buckets
  const int v = 2500;
  std::vector<float> logits(v);
  for (int i = 0; i < v; ++i) logits[i] = static_cast<float>(std::sin(i * 0.37) * 2.0);
  std::vector<float> probs(v);
  specdec::logits_to_probs(logits, probs);
  std::map<int, double> expected;
  for (int i = 0; i < v; ++i) expected[i / 250] += probs[i];
  std::map<int, std::int64_t> a, b;
  specdec::philox_stream rng(5, 5);
  const std::int64_t trials = 20000;  // ~2000 per bucket: ample power, modest ASan runtime
  for (std::int64_t t = 0; t < trials; ++t) {
    ++a[specdec::sample_token(logits, rng) / 250];
    ++b[specdec::sample_from_probs(probs, rng) / 250];
  }
  CHECK(stat::chi_square(a, expected, trials).p_value > stat::p_threshold);
  CHECK(stat::chi_square(b, expected, trials).p_value > stat::p_threshold);
}

TEST_CASE("samplers follow the non-finite policy") {
  using Catch::Contains;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float den = std::numeric_limits<float>::denorm_min();
  specdec::philox_stream rng(3, 3);
  // logits: NaN and +inf rejected naming the token; -inf legal; all -inf rejected; denormals ordinary
  for (const float bad : {nan, inf}) {
    const std::vector<float> row{0.5f, 1.0f, bad, -2.0f};
    std::vector<float> probs(row.size());
    REQUIRE_THROWS_WITH(specdec::greedy_token(row), Contains("specdec::greedy_token") && Contains("token 2"));
    REQUIRE_THROWS_WITH(specdec::sample_token(row, rng), Contains("specdec::sample_token") && Contains("token 2"));
    REQUIRE_THROWS_WITH(specdec::logits_to_probs(row, probs), Contains("specdec::logits_to_probs") && Contains("token 2"));
  }
  CHECK(rng.offset() == 0);  // rejected before drawing
  const std::vector<float> masked{ninf, -3.0f, ninf};
  CHECK(specdec::greedy_token(masked) == 1);
  CHECK(specdec::sample_token(masked, rng) == 1);
  const std::vector<float> all_masked{ninf, ninf, ninf};
  std::vector<float> probs3(3);
  REQUIRE_THROWS_WITH(specdec::greedy_token(all_masked), Contains("all -inf"));
  REQUIRE_THROWS_WITH(specdec::sample_token(all_masked, rng), Contains("all -inf"));
  REQUIRE_THROWS_WITH(specdec::logits_to_probs(all_masked, probs3), Contains("all -inf"));
  // denormal logits: ordinary values (argmax by value, no flush to zero)
  const std::vector<float> tiny{0.0f, den, -den};
  CHECK(specdec::greedy_token(tiny) == 1);
  specdec::logits_to_probs(tiny, probs3);
  CHECK(probs3[0] == Approx(1.0 / 3.0));

  // probabilities: NaN, +-inf, negative rejected naming the token; all-zero rejected
  for (const float bad : {nan, inf, -inf, -den}) {
    const std::vector<float> row{0.25f, 0.25f, 0.25f, bad};
    REQUIRE_THROWS_WITH(specdec::sample_from_probs(row, rng), Contains("specdec::sample_from_probs") && Contains("token 3"));
  }
  REQUIRE_THROWS_WITH(specdec::sample_from_probs(std::vector<float>(3000, 0.0f), rng), Contains("positive sum"));
  CHECK(rng.offset() == 2);  // only the one valid sample_token above drew
  // a row whose only mass is denormal samples exactly like any other row: P(0) = 1/3, P(2) = 2/3
  const std::vector<float> denormal{den, 0.0f, 2 * den};
  std::map<int, std::int64_t> seen;
  const std::int64_t trials = 30000;
  for (std::int64_t t = 0; t < trials; ++t) ++seen[specdec::sample_from_probs(denormal, rng)];
  CHECK(seen.count(1) == 0);
  const auto r = stat::chi_square(seen, std::map<int, double>{{0, 1.0 / 3.0}, {2, 2.0 / 3.0}}, trials);
  INFO("chi2 " << r.statistic << " p " << r.p_value);
  CHECK(r.p_value > stat::p_threshold);
}

TEST_CASE("a categorical draw never returns a token outside the row or of weight 0") {
  // Block sums that announce mass where the weights have none (what rounding or a NaN turned into 0 in
  // a residual could leave behind) must not make the draw return -1: it walks on to a positive weight.
  const std::size_t v = 2500;  // three blocks of 1024
  std::vector<double> w(v, 0.0);
  w[2100] = 1.0;
  specdec::philox_stream rng(11, 1);
  for (int t = 0; t < 200; ++t) {
    const auto tok = specdec::detail::blocked_inverse_cdf(
        v, [&](std::size_t lo, std::size_t hi) { return lo == 0 ? 5.0 : std::accumulate(w.begin() + lo, w.begin() + hi, 0.0); },
        [&](std::size_t i) { return w[i]; }, rng, "test", "w");
    REQUIRE(tok == 2100);
  }
  // no positive weight at all behind a positive announced total: an error, not -1
  std::fill(w.begin(), w.end(), 0.0);
  REQUIRE_THROWS_AS(specdec::detail::blocked_inverse_cdf(
                        v, [&](std::size_t lo, std::size_t) { return lo == 0 ? 1.0 : 0.0; },
                        [&](std::size_t i) { return w[i]; }, rng, "test", "w"),
                    specdec::invalid_argument);
}

// The order cdf_search.hpp writes out serially (and the CUDA verifiers evaluate with 16 threads per
// block) is the order of the vectorized host kernels at this run's dispatch level, bit for bit: a
// GPU draw with the same Philox words then picks the same token. Lengths around the lane and block
// boundaries; weights of very different magnitudes so that a different order would round differently.
TEST_CASE("the block sums' lane order is the host kernels' order, bit for bit") {
  specdec::philox_stream rng(2026, 11);
  std::vector<float> p(1100), q(1100);
  int differs_from_naive = 0;
  for (const std::int64_t n : {1, 15, 16, 17, 31, 100, 1023, 1024, 1025, 1100}) {
    for (int rep = 0; rep < 20; ++rep) {
      for (std::int64_t i = 0; i < n; ++i) {
        p[i] = rng.uniform() * std::ldexp(1.0f, static_cast<int>(rng.below(60)) - 30);
        q[i] = rng.below(3) == 0 ? 0.0f : rng.uniform() * std::ldexp(1.0f, static_cast<int>(rng.below(60)) - 30);
      }
      const float* pp = p.data();
      const float* qp = q.data();
      const auto wp = [pp](std::int64_t i) { return static_cast<double>(pp[i]); };
      const auto wr = [pp, qp](std::int64_t i) {
        const double d = static_cast<double>(pp[i]) - static_cast<double>(qp[i]);
        return d > 0.0 ? d : 0.0;
      };
      const double want_p = specdec::detail::lane_order_sum(wp, 0, n);
      CHECK(specdec::detail::checked_prob_sum(pp, static_cast<std::size_t>(n)).sum == want_p);
      CHECK(specdec::detail::lane_sum(pp, static_cast<std::size_t>(n)) == want_p);
      CHECK(specdec::detail::residual_block_sum(pp, qp, 0, static_cast<std::size_t>(n)).sum ==
            specdec::detail::lane_order_sum(wr, 0, n));
      // The same block starting at an offset (the lanes are relative to the block's first token).
      if (n > 40) CHECK(specdec::detail::lane_sum(pp + 7, static_cast<std::size_t>(n - 7)) == specdec::detail::lane_order_sum(wp, 7, n));
      double naive = 0.0;
      for (std::int64_t i = 0; i < n; ++i) naive += wp(i);
      differs_from_naive += naive != want_p;
    }
  }
  CHECK(differs_from_naive > 20);  // the order matters for these rows: the check above can fail
}

// Host twin of cdf_device.cuh's cdf_draw_block: its warp's arithmetic (32 lanes of 32 consecutive
// tokens, a Hillis-Steele scan of the lanes' sums, the lane scan from c_start) with the shared decision
// (cdf_search_margin, cdf_prefix_safe). Whenever the decision says the fast token is safe it must be
// cdf_search's token; u placed on and next to the serial scan's own prefix sums must fall back.
namespace {
struct twin_draw {
  std::int64_t token;  // -3: the serial fallback would run
};
template <class W>
twin_draw warp_twin(const double* bs, std::int64_t nb, std::int64_t vocab, double u, const W& weight) {
  double c = 0.0;
  std::int64_t chosen = -1;
  for (std::int64_t b = 0; b < nb; ++b) {
    if (bs[b] > 0.0 && c + bs[b] > u) {
      chosen = b;
      break;
    }
    c += bs[b];
  }
  if (chosen < 0) return {-3};
  const std::int64_t lo = chosen * 1024, hi = std::min<std::int64_t>(vocab, lo + 1024);
  double s[32], incl[32];
  for (int l = 0; l < 32; ++l) {
    s[l] = 0.0;
    for (std::int64_t i = lo + 32 * l; i < std::min(hi, lo + 32 * l + 32); ++i) s[l] += weight(i);
    incl[l] = s[l];
  }
  for (int d = 1; d < 32; d *= 2) {
    double prev[32];
    std::copy(incl, incl + 32, prev);
    for (int l = d; l < 32; ++l) incl[l] = prev[l] + prev[l - d];  // o + incl, as the lane adds the shuffled value
  }
  for (int l = 0; l < 32; ++l) {
    double at = c + (incl[l] - s[l]), before = at;
    for (std::int64_t i = lo + 32 * l; i < std::min(hi, lo + 32 * l + 32); ++i) {
      const double w = weight(i);
      if (w > 0.0) {
        before = at;
        at += w;
        if (u < at) {
          const double margin = specdec::detail::cdf_search_margin(c + bs[chosen]);
          return {specdec::detail::cdf_prefix_safe(u, before, at, margin) ? i : -3};
        }
      }
    }
  }
  return {-3};
}
}  // namespace

TEST_CASE("the device's warp search returns cdf_search's token whenever it skips the serial scan") {
  namespace d = specdec::detail;
  specdec::philox_stream rng(77, 1);
  int fast = 0, random_u = 0, adversarial_fast = 0, adversarial = 0;
  for (int rep = 0; rep < 60; ++rep) {
    const std::int64_t V = 1 + rng.below(5000);
    std::vector<float> x(static_cast<std::size_t>(V));
    const int kind = static_cast<int>(rng.below(4));
    for (auto& v : x) {
      v = rng.uniform();
      if (kind == 1 && rng.below(2) == 0) v = 0.0f;                                       // sparse
      if (kind == 2) v = std::ldexp(rng.uniform(), -static_cast<int>(rng.below(100)));   // wide range
      if (kind == 3 && rng.below(64) != 0) v = 0.0f;                                      // a few tokens
    }
    x[rng.below(static_cast<std::uint32_t>(V))] = 0.75f;
    const float* xp = x.data();
    const auto w = [xp](std::int64_t i) { return static_cast<double>(xp[i]); };
    const std::int64_t nb = (V + 1023) / 1024;
    std::vector<double> bs(static_cast<std::size_t>(nb));
    for (std::int64_t b = 0; b < nb; ++b) bs[b] = d::lane_order_sum(w, b * 1024, std::min<std::int64_t>(V, b * 1024 + 1024));
    const double total = d::cdf_total(bs.data(), nb);
    auto check = [&](double u, bool adv) {
      const auto got = warp_twin(bs.data(), nb, V, u, w);
      if (got.token != -3) {
        CHECK(got.token == d::cdf_search(bs.data(), nb, V, u, w));
        ++(adv ? adversarial_fast : fast);
      }
      ++(adv ? adversarial : random_u);
    };
    for (int k = 0; k < 200; ++k) check(rng.uniform_double() * total, false);
    // u on the serial scan's own running sums (and one ulp either side): where rounding decides.
    double c = 0.0;
    for (std::int64_t b = 0; b < nb; ++b) {
      double cb = c;
      for (std::int64_t i = b * 1024; i < std::min<std::int64_t>(V, b * 1024 + 1024) && i < b * 1024 + 40; ++i)
        if (w(i) > 0.0) {
          cb += w(i);
          for (double u : {cb, std::nextafter(cb, 0.0), std::nextafter(cb, 2.0 * cb)})
            if (u < total) check(u, true);
        }
      c += bs[b];
    }
  }
  CHECK(random_u == 60 * 200);
  CHECK(fast > random_u * 99 / 100);       // the serial scan is the rare case for random u
  CHECK(adversarial_fast < adversarial / 10);  // and the rule for u on a boundary
}
