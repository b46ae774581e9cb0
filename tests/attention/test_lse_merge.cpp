// lse_merge: two-way and n-way merges against the double formula of LongSpec Appendix A,
// Proposition A.1; attention over a split cache merged = attention over the whole cache; -inf
// handling never gives NaN; in-place aliasing; base-2 <-> natural LSE converters.
#include "attention_fixture.hpp"

#include <cmath>
#include <limits>

#include "specdec/attention/decode_attention.hpp"
#include "specdec/attention/lse_merge.hpp"

using namespace attn_test;
namespace sd = specdec;

namespace {
constexpr float ninf = -std::numeric_limits<float>::infinity();

// Double-precision n-way merge of one row (Prop. A.1 by induction).
void merge_ref(const std::vector<double>& lse, const std::vector<const float*>& o, int d, std::vector<double>& out,
               double& lse_out) {
  double mx = -INFINITY;
  for (double l : lse) mx = std::max(mx, l);
  out.assign(d, 0.0);
  if (std::isinf(mx)) {
    lse_out = -INFINITY;
    return;
  }
  double s = 0;
  for (double l : lse) s += std::exp(l - mx);
  lse_out = mx + std::log(s);
  for (std::size_t p = 0; p < lse.size(); ++p)
    for (int c = 0; c < d; ++c) out[c] += std::exp(lse[p] - lse_out) * o[p][c];
}
}  // namespace

TEST_CASE("lse_merge n-way matches the double formula (S = 1, 2, 5, 130)") {
  sd::philox_stream rng(4, 4);
  const int n = 3, h = 4, d = 64;
  for (int s : {1, 2, 5, 130}) {
    DYNAMIC_SECTION("S = " << s) {
      std::vector<float> o(static_cast<std::size_t>(s) * n * h * d), l(static_cast<std::size_t>(s) * n * h);
      for (auto& x : o) x = 2 * rng.uniform() - 1;
      for (std::size_t i = 0; i < l.size(); ++i) l[i] = rng.uniform() < 0.2f ? ninf : 20 * rng.uniform() - 10;
      std::vector<float> out(static_cast<std::size_t>(n) * h * d), lo(static_cast<std::size_t>(n) * h);
      sd::lse_merge(sd::host{}, sd::make_view<4>(o.data(), {s, n, h, d}), sd::make_view<3>(l.data(), {s, n, h}),
                    sd::make_view<3>(out.data(), {n, h, d}), sd::make_view<2>(lo.data(), {n, h}));
      for (int t = 0; t < n; ++t)
        for (int hh = 0; hh < h; ++hh) {
          std::vector<double> ls;
          std::vector<const float*> os;
          for (int p = 0; p < s; ++p) {
            ls.push_back(l[(static_cast<std::size_t>(p) * n + t) * h + hh]);
            os.push_back(&o[((static_cast<std::size_t>(p) * n + t) * h + hh) * d]);
          }
          std::vector<double> ro;
          double rl;
          merge_ref(ls, os, d, ro, rl);
          const float gl = lo[static_cast<std::size_t>(t) * h + hh];
          if (std::isinf(rl)) CHECK(gl == ninf);
          else CHECK(gl == Approx(rl).epsilon(1e-6).margin(1e-6));
          for (int c = 0; c < d; ++c) CHECK(out[(static_cast<std::size_t>(t) * h + hh) * d + c] == Approx(ro[c]).margin(1e-5));
        }
    }
  }
}

TEST_CASE("lse_merge of attention over two halves of a cache equals attention over all of it") {
  // Prop. A.1 end to end: decode over keys [0, 200) and [200, 450) separately, merge, compare with
  // decode over [0, 450). The halves are separate contiguous caches cut from one buffer.
  batch<float> b(17, 8, 2, 128, {450}, {3});
  const auto full = sd::reference::decode_attention(b.q_view(), b.nhd(), b.indptr_view());
  std::vector<std::int32_t> len_a{200}, len_b{250};
  const std::int64_t row = static_cast<std::int64_t>(b.hkv) * b.d;
  sd::contiguous_kv<float> a{b.k_nhd.data(), b.v_nhd.data(), len_a.data(), 1, 200, b.hkv, b.d};
  sd::contiguous_kv<float> c{b.k_nhd.data() + 200 * row, b.v_nhd.data() + 200 * row, len_b.data(), 1, 250, b.hkv, b.d};
  std::vector<float> oa(b.q.size()), ob(b.q.size()), la(b.lse.size()), lb(b.lse.size());
  const int T = b.tokens();
  auto v3 = [&](std::vector<float>& x) { return sd::make_view<3>(x.data(), {T, b.hq, b.d}); };
  auto v2 = [&](std::vector<float>& x) { return sd::make_view<2>(x.data(), {T, b.hq}); };
  sd::decode_attention(sd::host{}, b.q_view(), a, b.indptr_view(), v3(oa), v2(la));
  sd::decode_attention(sd::host{}, b.q_view(), c, b.indptr_view(), v3(ob), v2(lb));
  SECTION("into separate outputs") {
    sd::lse_merge(sd::host{}, v3(oa), v2(la), v3(ob), v2(lb), b.out_view(), b.lse_view());
    check_against(b, full);
  }
  SECTION("in place into o_a / lse_a") {
    sd::lse_merge(sd::host{}, v3(oa), v2(la), v3(ob), v2(lb), v3(oa), v2(la));
    b.out = oa;
    b.lse = la;
    check_against(b, full);
  }
}

TEMPLATE_TEST_CASE("lse_merge -inf handling never gives NaN", "", float, sd::half, sd::bfloat16) {
  const int d = 64;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<TestType> a(d), b(d), o(d);
  for (int c = 0; c < d; ++c) {
    a[c] = sd::from_float<TestType>(nan);  // garbage in a part that saw no keys must not leak
    b[c] = sd::from_float<TestType>(0.5f + c / 128.0f);
  }
  std::vector<float> la{ninf}, lb{1.5f}, lo{0};
  auto v3 = [&](std::vector<TestType>& x) { return sd::make_view<3>(x.data(), {1, 1, d}); };
  auto v2 = [&](std::vector<float>& x) { return sd::make_view<2>(x.data(), {1, 1}); };
  SECTION("one side -inf: the other side passes through") {
    sd::lse_merge(sd::host{}, v3(a), v2(la), v3(b), v2(lb), v3(o), v2(lo));
    CHECK(lo[0] == 1.5f);
    for (int c = 0; c < d; ++c) CHECK(sd::to_float(o[c]) == sd::to_float(b[c]));
  }
  SECTION("both -inf: out 0 and lse -inf") {
    lb[0] = ninf;
    sd::lse_merge(sd::host{}, v3(a), v2(la), v3(b), v2(lb), v3(o), v2(lo));
    CHECK(lo[0] == ninf);
    for (int c = 0; c < d; ++c) CHECK(sd::to_float(o[c]) == 0.0f);
  }
  SECTION("equal LSEs average the outputs and add log 2") {
    for (int c = 0; c < d; ++c) a[c] = sd::from_float<TestType>(-0.5f);
    la[0] = 1.5f;
    sd::lse_merge(sd::host{}, v3(a), v2(la), v3(b), v2(lb), v3(o), v2(lo));
    CHECK(lo[0] == Approx(1.5 + std::log(2.0)).epsilon(1e-6));
    for (int c = 0; c < d; ++c)
      CHECK(sd::to_float(o[c]) ==
            Approx((sd::to_float(a[c]) + sd::to_float(b[c])) / 2).margin(std::is_same_v<TestType, float> ? 1e-6 : 1e-2));
  }
}

TEMPLATE_TEST_CASE("lse_merge: NaN in a part that has keys propagates, never a finite answer", "", float, sd::half,
                   sd::bfloat16) {
  const int d = 64, S = 70;  // more than one 64-part chunk of the host fold
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<TestType> parts(static_cast<std::size_t>(S) * d), o(d);
  for (std::size_t i = 0; i < parts.size(); ++i) parts[i] = sd::from_float<TestType>(0.25f);
  std::vector<float> lse(S, ninf), lo{0};
  auto run = [&] {
    sd::lse_merge(sd::host{}, sd::make_view<4>(parts.data(), {S, 1, 1, d}), sd::make_view<3>(lse.data(), {S, 1, 1}),
                  sd::make_view<3>(o.data(), {1, 1, d}), sd::make_view<2>(lo.data(), {1, 1}));
  };
  SECTION("the only non-empty part has LSE NaN (std::max / fmaxf would drop it as if the row were empty)") {
    lse[66] = nan;
    run();
    CHECK(std::isnan(lo[0]));
    for (int c = 0; c < d; ++c) CHECK(std::isnan(sd::to_float(o[c])));
  }
  SECTION("a NaN LSE beside finite ones") {
    lse[0] = 2.0f;
    lse[3] = nan;
    run();
    CHECK(std::isnan(lo[0]));
    CHECK(std::isnan(sd::to_float(o[0])));
  }
  SECTION("a finite LSE whose O holds NaN (a NaN value the part could see), however small its weight") {
    lse[0] = 50.0f;
    lse[65] = -80.0f;  // weight exp(-130) underflows to 0 in fp32, yet the NaN must reach the row
    parts[static_cast<std::size_t>(65) * d + 5] = sd::from_float<TestType>(nan);
    run();
    CHECK(lo[0] == Approx(50.0f));
    CHECK(std::isnan(sd::to_float(o[5])));
    CHECK(sd::to_float(o[4]) == Approx(0.25f).margin(1e-2));
  }
  SECTION("+inf LSE (an infinite score) is not finite either") {
    lse[1] = 1.0f;
    lse[2] = std::numeric_limits<float>::infinity();
    run();
    CHECK(!std::isfinite(lo[0]));
    CHECK(!std::isfinite(sd::to_float(o[0])));
  }
}

TEST_CASE("base-2 <-> natural LSE converters") {
  // FlashInfer's LSE: log2 sum 2^(s log2 e); specdec's: ln sum e^s. They differ by the factor ln 2.
  const std::vector<double> logits{0.3, -1.2, 2.5, 0.0};
  double se = 0;
  for (double s : logits) se += std::exp(s);
  const double natural = std::log(se);
  double s2 = 0;
  for (double s : logits) s2 += std::exp2(s * 1.4426950408889634);
  const double base2 = std::log2(s2);
  CHECK(sd::lse_base2_to_natural(static_cast<float>(base2)) == Approx(natural).epsilon(1e-6));
  CHECK(sd::lse_natural_to_base2(static_cast<float>(natural)) == Approx(base2).epsilon(1e-6));
  CHECK(sd::lse_base2_to_natural(ninf) == ninf);
  CHECK(sd::lse_natural_to_base2(ninf) == ninf);
  std::vector<float> t{static_cast<float>(base2), ninf, 0.0f, 3.0f};
  sd::convert_lse_base2_to_natural(sd::host{}, sd::make_view<2>(t.data(), {2, 2}));
  CHECK(t[0] == Approx(natural).epsilon(1e-6));
  CHECK(t[1] == ninf);
  sd::convert_lse_natural_to_base2(sd::host{}, sd::make_view<1>(t.data(), {4}));
  CHECK(t[0] == Approx(base2).epsilon(1e-6));
  CHECK(t[3] == Approx(3.0f).epsilon(1e-6));
}
