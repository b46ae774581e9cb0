// RoPE: hand-computed examples, algebraic properties, Llama-3.1 scaling rule, differential tests of
// the fp32 kernels (float/half/bfloat16, both styles, partial rotary, cache) against the double
// reference, and one test per kind of bad input.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "position/rope_nonfinite_util.hpp"
#include "specdec/position/rope.hpp"
#include "specdec/reference/rope.hpp"

using specdec::rope_params;
using specdec::rope_style;

namespace {

template <class T>
std::vector<T> convert(const std::vector<double>& v) {
  std::vector<T> o;
  o.reserve(v.size());
  for (double x : v) o.push_back(specdec::from_float<T>(static_cast<float>(x)));
  return o;
}

template <class T>
std::vector<double> widen(const std::vector<T>& v) {
  std::vector<double> o;
  for (const T& x : v) o.push_back(static_cast<double>(specdec::to_float(x)));
  return o;
}

}  // namespace

TEST_CASE("reference RoPE matches hand-computed rotations for both conventions") {
  const std::vector<double> x{1, 2, 3, 4};
  const std::vector<std::int32_t> pos{1};
  std::vector<double> o(4);
  // head_dim 4, theta 10000: inv_freq = [1, 10000^-0.5 = 0.01].
  specdec::reference::rope({.theta = 10000.0, .style = rope_style::rotate_half}, 1, 1, 4, x.data(), pos.data(),
                           o.data());
  CHECK(o[0] == Approx(1 * std::cos(1.0) - 3 * std::sin(1.0)).epsilon(1e-14));
  CHECK(o[2] == Approx(3 * std::cos(1.0) + 1 * std::sin(1.0)).epsilon(1e-14));
  CHECK(o[1] == Approx(2 * std::cos(0.01) - 4 * std::sin(0.01)).epsilon(1e-14));
  CHECK(o[3] == Approx(4 * std::cos(0.01) + 2 * std::sin(0.01)).epsilon(1e-14));
  specdec::reference::rope({.theta = 10000.0, .style = rope_style::interleaved}, 1, 1, 4, x.data(), pos.data(),
                           o.data());
  CHECK(o[0] == Approx(1 * std::cos(1.0) - 2 * std::sin(1.0)).epsilon(1e-14));
  CHECK(o[1] == Approx(2 * std::cos(1.0) + 1 * std::sin(1.0)).epsilon(1e-14));
  CHECK(o[2] == Approx(3 * std::cos(0.01) - 4 * std::sin(0.01)).epsilon(1e-14));
  CHECK(o[3] == Approx(4 * std::cos(0.01) + 3 * std::sin(0.01)).epsilon(1e-14));
}

TEST_CASE("partial rotary leaves trailing dims untouched; position 0 is the identity") {
  std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<float> orig = x;
  const std::vector<std::int32_t> pos{0};
  specdec::apply_rope(specdec::host{1}, rope_params{.rotary_dim = 4}, specdec::make_view<3>(x.data(), {1, 1, 8}),
                      std::span<const std::int32_t>(pos));
  CHECK(x == orig);
  const std::vector<std::int32_t> pos7{7};
  specdec::apply_rope(specdec::host{1}, rope_params{.rotary_dim = 4}, specdec::make_view<3>(x.data(), {1, 1, 8}),
                      std::span<const std::int32_t>(pos7));
  CHECK(x[4] == 5);
  CHECK(x[7] == 8);
  CHECK(x[0] != 1);
  // rotary dim 4 on head_dim 8 pairs (0,2),(1,3) with inv_freq [1, 0.01].
  CHECK(x[0] == Approx(1 * std::cos(7.0) - 3 * std::sin(7.0)).epsilon(1e-6));
}

TEST_CASE("RoPE preserves pair norms and makes q.k depend only on the position difference") {
  std::mt19937 rng(7);
  std::normal_distribution<double> nd;
  const int d = 64;
  std::vector<double> q(d), k(d), rq(d), rk(d);
  for (auto& v : q) v = nd(rng);
  for (auto& v : k) v = nd(rng);
  for (auto style : {rope_style::rotate_half, rope_style::interleaved}) {
    const rope_params p{.theta = 500000.0, .style = style, .llama3 = specdec::llama3_rope_scaling{}};
    double dots[2];
    for (int s = 0; s < 2; ++s) {
      const std::int32_t pq = 100 + s * 5000, pk = 37 + s * 5000;
      specdec::reference::rope(p, 1, 1, d, q.data(), &pq, rq.data());
      specdec::reference::rope(p, 1, 1, d, k.data(), &pk, rk.data());
      double dot = 0, n0 = 0, n1 = 0;
      for (int i = 0; i < d; ++i) {
        dot += rq[i] * rk[i];
        n0 += q[i] * q[i];
        n1 += rq[i] * rq[i];
      }
      dots[s] = dot;
      CHECK(n1 == Approx(n0).epsilon(1e-12));
    }
    CHECK(dots[0] == Approx(dots[1]).epsilon(1e-9));
  }
}

TEST_CASE("Llama-3.1 frequency scaling follows the published rule") {
  const specdec::llama3_rope_scaling s{};  // factor 8, low 1, high 4, L = 8192
  const double two_pi = 2 * std::numbers::pi;
  // wavelength < L/high = 2048: unchanged
  CHECK(specdec::llama3_scale_inv_frequency(two_pi / 1000.0, s) == two_pi / 1000.0);
  // wavelength > L/low = 8192: divided by factor
  CHECK(specdec::llama3_scale_inv_frequency(two_pi / 10000.0, s) == Approx(two_pi / 10000.0 / 8.0).epsilon(1e-15));
  // wavelength 4096: smooth = (8192/4096 - 1) / (4 - 1) = 1/3 -> f * (2/3 / 8 + 1/3) = f * 5/12
  CHECK(specdec::llama3_scale_inv_frequency(two_pi / 4096.0, s) == Approx(two_pi / 4096.0 * 5.0 / 12.0).epsilon(1e-14));
  // continuous at both band edges
  const double eps = 1e-9;
  CHECK(specdec::llama3_scale_inv_frequency(two_pi / (2048.0 + eps), s) == Approx(two_pi / 2048.0).epsilon(1e-9));
  CHECK(specdec::llama3_scale_inv_frequency(two_pi / (8192.0 - eps), s) == Approx(two_pi / 8192.0 / 8).epsilon(1e-9));
  // Llama 3.1 8B config: theta 500000, head_dim 128.
  const auto f = specdec::rope_inv_frequencies({.theta = 500000.0, .llama3 = s}, 128);
  REQUIRE(f.size() == 64);
  CHECK(f[0] == 1.0);
  CHECK(f[63] == Approx(std::pow(500000.0, -126.0 / 128.0) / 8.0).epsilon(1e-14));
  for (std::size_t i = 1; i < f.size(); ++i) CHECK(f[i] < f[i - 1]);  // the rule keeps the order
  const auto plain = specdec::rope_inv_frequencies({.theta = 500000.0}, 128);
  CHECK(plain[63] == Approx(std::pow(500000.0, -126.0 / 128.0)).epsilon(1e-14));
}

namespace {

template <class T>
void differential(rope_style style, int rotary_dim, bool llama3, double tol_rel) {
  std::mt19937 rng(1234 + static_cast<int>(style) * 7 + rotary_dim + llama3);
  std::normal_distribution<double> nd;
  for (int d : {64, 128, 256}) {
    const int tokens = 37, heads = 3;
    const int rot = rotary_dim == 0 ? 0 : std::min(rotary_dim, d);
    const rope_params p{.theta = llama3 ? 500000.0 : 10000.0,
                        .style = style,
                        .rotary_dim = rot,
                        .llama3 = llama3 ? std::optional(specdec::llama3_rope_scaling{}) : std::nullopt};
    std::vector<double> xd(static_cast<std::size_t>(tokens) * heads * d);
    for (auto& v : xd) v = nd(rng);
    std::vector<std::int32_t> pos(tokens);
    std::uniform_int_distribution<std::int32_t> small(0, 4096), large(0, 2000000);
    for (int t = 0; t < tokens; ++t) pos[t] = t % 2 ? small(rng) : large(rng);
    std::vector<T> x = convert<T>(xd);
    const std::vector<double> in = widen(x);  // the stored (rounded) input
    std::vector<double> ref(in.size());
    specdec::reference::rope(p, tokens, heads, d, in.data(), pos.data(), ref.data());
    specdec::apply_rope(specdec::host{}, p, specdec::make_view<3>(x.data(), {tokens, heads, d}),
                        std::span<const std::int32_t>(pos));
    const std::vector<double> got = widen(x);
    // one assertion per case (keeps Debug/ASan runs fast), reporting the worst element
    double worst = -1;
    std::size_t at = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double excess = std::abs(got[i] - ref[i]) - tol_rel * (std::abs(ref[i]) + 1.0);
      if (!(excess <= worst)) {
        worst = excess;
        at = i;
      }
    }
    INFO("worst i = " << at << " d = " << d << " got " << got[at] << " want " << ref[at]);
    REQUIRE(worst <= 0);
    // the cached table gives bit-identical results (positions kept small so the table stays small)
    for (auto& q : pos) q %= 1000;
    std::vector<T> x1 = convert<T>(xd), x2 = x1;
    specdec::apply_rope(specdec::host{1}, p, specdec::make_view<3>(x1.data(), {tokens, heads, d}),
                        std::span<const std::int32_t>(pos));
    specdec::rope_cache cache(p, d, 1000);
    specdec::apply_rope(specdec::host{1}, cache, specdec::make_view<3>(x2.data(), {tokens, heads, d}),
                        std::span<const std::int32_t>(pos));
    REQUIRE(widen(x2) == widen(x1));
    REQUIRE(widen(x1) != in);
  }
}

}  // namespace

TEST_CASE("apply_rope (fp32 math) matches the double reference at large positions") {
  for (auto style : {rope_style::rotate_half, rope_style::interleaved})
    for (int rd : {0, 32})
      for (bool l3 : {false, true}) {
        differential<float>(style, rd, l3, 2e-6);
        differential<specdec::half>(style, rd, l3, 1.0 / 1024);
        differential<specdec::bfloat16>(style, rd, l3, 1.0 / 128);
      }
}

TEST_CASE("apply_rope: multi-threaded, strided heads and single-threaded runs agree") {
  const int tokens = 300, heads = 32, d = 128;
  std::mt19937 rng(99);
  std::normal_distribution<float> nd;
  // heads padded to stride 160 to exercise a non-contiguous token/head layout
  std::vector<float> a(static_cast<std::size_t>(tokens) * heads * 160), b;
  for (auto& v : a) v = nd(rng);
  b = a;
  const std::vector<float> orig = a;
  std::vector<std::int32_t> pos(tokens);
  for (int t = 0; t < tokens; ++t) pos[t] = 1000 + 3 * t;
  const std::int64_t ext[3] = {tokens, heads, d}, str[3] = {heads * 160, 160, 1};
  specdec::strided_view<float, 3> va(a.data(), ext, str), vb(b.data(), ext, str);
  specdec::apply_rope(specdec::host{}, rope_params{}, va, std::span<const std::int32_t>(pos));
  specdec::apply_rope(specdec::host{1}, rope_params{}, vb, std::span<const std::int32_t>(pos));
  CHECK(a == b);
  // the padding between head rows is untouched, the rows themselves changed
  bool pad_same = true, rows_changed = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (i % 160 >= 128)
      pad_same = pad_same && a[i] == orig[i];
    else
      rows_changed = rows_changed || a[i] != orig[i];
  }
  CHECK(pad_same);
  CHECK(rows_changed);
}

TEST_CASE("tree_positions: committed length plus depth") {
  const std::vector<std::int32_t> depth{0, 0, 1, 2, 1};
  std::vector<std::int32_t> out(5);
  specdec::tree_positions(100, depth, out);
  CHECK(out == std::vector<std::int32_t>{100, 100, 101, 102, 101});
  CHECK_THROWS_WITH(specdec::tree_positions(-1, depth, out), Catch::Contains("committed_length"));
  std::vector<std::int32_t> bad{0, -1};
  std::vector<std::int32_t> out2(2), out3(3);
  CHECK_THROWS_WITH(specdec::tree_positions(0, bad, out2), Catch::Contains("depths"));
  CHECK_THROWS_AS(specdec::tree_positions(0, depth, out3), specdec::invalid_argument);
  CHECK_THROWS_WITH(specdec::tree_positions(0, depth, out3), Catch::Contains("out"));
  // out over depths: in place is fine; shifted by one it gave 100 200 300 400 with no error
  std::vector<std::int32_t> buf{0, 1, 2, 3, 9};
  CHECK_THROWS_WITH(specdec::tree_positions(100, std::span<const std::int32_t>(buf.data(), 4), std::span(buf.data() + 1, 4)),
                    Catch::Contains("'depths'") && Catch::Contains("partly overlapping"));
  CHECK(buf == std::vector<std::int32_t>{0, 1, 2, 3, 9});
  specdec::tree_positions(100, std::span<const std::int32_t>(buf.data(), 4), std::span(buf.data(), 4));
  CHECK(buf == std::vector<std::int32_t>{100, 101, 102, 103, 9});
  // a bad depth after good ones: nothing written (out[0] and out[1] were before the throw)
  std::vector<std::int32_t> partial{0, 1, -1}, untouched(3, -5);
  CHECK_THROWS_WITH(specdec::tree_positions(7, partial, untouched), Catch::Contains("at node 2"));
  CHECK(untouched == std::vector<std::int32_t>(3, -5));
}

TEST_CASE("rope: a finite llama3 factor that sends an inverse frequency to inf is refused, not a NaN in x") {
  // factor 1e-320 passed "finite and > 0"; f / factor = inf, cos(position * inf) = NaN written into finite x
  rope_params p{.theta = 10000.0, .llama3 = specdec::llama3_rope_scaling{.factor = 1e-320}};
  CHECK_THROWS_WITH(specdec::rope_inv_frequencies(p, 64), Catch::Contains("'params.llama3.factor'") && Catch::Contains("finite"));
  std::vector<float> x(2 * 2 * 64, 0.5f);
  const std::vector<std::int32_t> pos{1, 2};
  CHECK_THROWS_WITH(specdec::apply_rope(specdec::host{}, p, specdec::make_view<3>(x.data(), {2, 2, 64}),
                                        std::span<const std::int32_t>(pos)),
                    Catch::Contains("'params.llama3.factor'"));
  CHECK(std::all_of(x.begin(), x.end(), [](float v) { return v == 0.5f; }));
  p.llama3->factor = 1e-3;  // small but fine: the low frequencies times 1000
  CHECK_NOTHROW(specdec::rope_inv_frequencies(p, 64));
}

TEST_CASE("apply_rope rejects bad inputs with named arguments") {
  std::vector<float> x(2 * 2 * 8);
  std::vector<std::int32_t> pos{1, 2};
  const auto v = specdec::make_view<3>(x.data(), {2, 2, 8});
  const std::span<const std::int32_t> ps(pos);
  const specdec::host h{1};
  auto throws = [&](auto&& f, const char* what) {
    REQUIRE_THROWS_AS(f(), specdec::invalid_argument);
    REQUIRE_THROWS_WITH(f(), Catch::Contains(what) && Catch::Contains("specdec::"));
  };
  throws([&] { specdec::apply_rope(h, rope_params{.theta = 1.0}, v, ps); }, "params.theta");
  throws([&] { specdec::apply_rope(h, rope_params{.theta = NAN}, v, ps); }, "params.theta");
  throws([&] { specdec::apply_rope(h, rope_params{.rotary_dim = 10}, v, ps); }, "params.rotary_dim");
  throws([&] { specdec::apply_rope(h, rope_params{.rotary_dim = 3}, v, ps); }, "params.rotary_dim");
  {  // a moved-from table has no positions: every position is refused, not looked up in a table it gave away
    specdec::rope_cache a(rope_params{}, 8, 16);
    specdec::rope_cache b(std::move(a));
    CHECK(b.max_positions() == 16);
    CHECK(a.max_positions() == 0);  // NOLINT(bugprone-use-after-move): the state under test
    throws([&] { specdec::apply_rope(h, a, v, ps); }, "max_positions");  // NOLINT(bugprone-use-after-move)
    specdec::apply_rope(h, b, v, ps);
  }
  throws([&] { specdec::apply_rope(h, rope_params{.rotary_dim = -2}, v, ps); }, "params.rotary_dim");
  throws([&] { specdec::apply_rope(h, rope_params{.style = static_cast<rope_style>(9)}, v, ps); }, "params.style");
  std::vector<float> odd(2 * 2 * 7);
  throws([&] { specdec::apply_rope(h, rope_params{}, specdec::make_view<3>(odd.data(), {2, 2, 7}), ps); }, "head_dim");
  throws([&] { specdec::apply_rope(h, rope_params{.llama3 = specdec::llama3_rope_scaling{.factor = 0}}, v, ps); },
         "params.llama3.factor");
  throws(
      [&] { specdec::apply_rope(h, rope_params{.llama3 = specdec::llama3_rope_scaling{.low_freq_factor = 4}}, v, ps); },
      "params.llama3.high_freq_factor");
  throws(
      [&] {
        specdec::apply_rope(h, rope_params{.llama3 = specdec::llama3_rope_scaling{.low_freq_factor = -1}}, v, ps);
      },
      "params.llama3.low_freq_factor");
  throws(
      [&] {
        specdec::apply_rope(
            h, rope_params{.llama3 = specdec::llama3_rope_scaling{.original_max_position_embeddings = 0}}, v, ps);
      },
      "params.llama3.original_max_position_embeddings");
  const std::vector<std::int32_t> one{1};
  throws([&] { specdec::apply_rope(h, rope_params{}, v, std::span<const std::int32_t>(one)); }, "positions");
  const std::vector<std::int32_t> neg{1, -3};
  throws([&] { specdec::apply_rope(h, rope_params{}, v, std::span<const std::int32_t>(neg)); }, "positions");
  const std::int64_t ext[3] = {2, 2, 4}, str[3] = {16, 8, 2};
  throws([&] { specdec::apply_rope(h, rope_params{}, specdec::strided_view<float, 3>(x.data(), ext, str), ps); },
         "'x'");
  throws(
      [&] {
        specdec::apply_rope(h, rope_params{}, specdec::make_view<3>(x.data(), {2, 2, 8}, specdec::memory_space::device),
                            ps);
      },
      "'x'");
  throws([&] { specdec::apply_rope(specdec::host{-1}, rope_params{}, v, ps); }, "policy.num_threads");
  throws([&] { (void)specdec::llama3_scale_inv_frequency(0.0, {}); }, "inv_freq");
  // cache-specific checks
  throws([&] { specdec::rope_cache(rope_params{}, 8, -1); }, "max_positions");
  throws([&] { specdec::rope_cache(rope_params{}, 0, 4); }, "head_dim");
  specdec::rope_cache cache(rope_params{}, 8, 2);
  throws([&] { specdec::apply_rope(h, cache, v, ps); }, "positions");  // position 2 >= max_positions 2
  specdec::rope_cache cache16(rope_params{}, 16, 8);
  throws([&] { specdec::apply_rope(h, cache16, v, ps); }, "head_dim");
  throws([&] { specdec::apply_rope(h, cache16, v, std::span<const std::int32_t>(neg)); }, "head_dim");
}

namespace {
// One run of the non-finite test (rope_test::check_nonfinite_pairs) on the host backend, through
// the parameters or through a rope_cache.
template <class T>
std::vector<float> rope_run(rope_style style, bool use_cache, int dim, float value) {
  std::vector<T> x = rope_test::nonfinite_input<T>(dim, value);
  const std::vector<std::int32_t> pos{0, 7};
  const rope_params p{.style = style, .rotary_dim = 4};
  const auto v = specdec::make_view<3>(x.data(), {2, 2, 8});
  if (use_cache) specdec::apply_rope(specdec::host{1}, specdec::rope_cache(p, 8, 8), v, std::span<const std::int32_t>(pos));
  else specdec::apply_rope(specdec::host{1}, p, v, std::span<const std::int32_t>(pos));
  return rope_test::to_floats(x);
}

template <class T>
void check_rope_nonfinite() {
  for (auto style : {rope_style::rotate_half, rope_style::interleaved})
    for (bool cache : {false, true})
      rope_test::check_nonfinite_pairs(
          style, "style " + std::to_string(static_cast<int>(style)) + " cache " + std::to_string(cache),
          [&](int dim, float value) { return rope_run<T>(style, cache, dim, value); });
}
}  // namespace

TEST_CASE("apply_rope: NaN and infinities propagate within their rotated pair only; denormals rotate") {
  // The non-finite policy of the float-producing entry points (rope.hpp): IEEE propagation to the
  // outputs a value reaches, never a finite wrong value.
  check_rope_nonfinite<float>();
  check_rope_nonfinite<specdec::half>();
  check_rope_nonfinite<specdec::bfloat16>();
  // Denormal inputs are ordinary numbers: the rotation of a denormal pair matches the double reference
  // to the denormal grid (no flush to zero), for float, and for half's own subnormals.
  for (auto style : {rope_style::rotate_half, rope_style::interleaved})
    rope_test::check_denormal_pairs(style, [](const rope_params& p, auto& x, const std::vector<std::int32_t>& pos) {
      specdec::apply_rope(specdec::host{1}, p, specdec::make_view<3>(x.data(), {1, 1, 4}),
                          std::span<const std::int32_t>(pos));
    });
}
