// TokenSwift's residual heads (§3.2, Eq. 1): a hand example (identity and SiLU), the optimized host
// path against the double reference over random shapes (H not a multiple of 16, n across the
// 4-row passes, gamma 0 .. 4), float / half / bfloat16 in every position, biases or none, padded
// row strides, one thread and the pool; no allocation with a workspace; bad inputs named.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "specdec/draft/residual_heads.hpp"
#include "specdec/reference/residual_heads.hpp"

#include "common/alloc_counter.hpp"

namespace {

using specdec::bfloat16;
using specdec::half;
using specdec::make_view;
using specdec::residual_activation;

TEST_CASE("residual_heads: Eq. 1 on a hand example", "[residual_heads]") {
  // W_1 = [[1, 2], [0, 1]], b_1 = [0.5, -1]; W_2 = [[0, 1], [1, 0]], b_2 = 0; h_0 = [1, 1].
  // h_1 = W_1 h_0 + b_1 + h_0 = [3.5, 0] + [1, 1] = [4.5, 1]; h_2 = [1, 4.5] + [4.5, 1] = [5.5, 5.5].
  const std::vector<float> w{1, 2, 0, 1, 0, 1, 1, 0}, b{0.5f, -1, 0, 0}, h0{1, 1};
  std::vector<float> out(4, -7.0f);
  specdec::residual_heads(specdec::host{}, make_view<2>(h0.data(), {1, 2}), make_view<3>(w.data(), {2, 2, 2}),
                          make_view<2>(b.data(), {2, 2}), make_view<3>(out.data(), {2, 1, 2}));
  CHECK(out == std::vector<float>{4.5f, 1.0f, 5.5f, 5.5f});
  // SiLU: h_1 = silu([3.5, 0]) + h_0 = [3.5 / (1 + e^-3.5) + 1, 1].
  specdec::residual_heads(specdec::host{}, make_view<2>(h0.data(), {1, 2}), make_view<3>(w.data(), {1, 2, 2}),
                          make_view<2>(b.data(), {1, 2}), make_view<3>(out.data(), {1, 1, 2}),
                          {.activation = residual_activation::silu});
  CHECK(out[0] == Approx(3.5 / (1 + std::exp(-3.5)) + 1).epsilon(1e-6));
  CHECK(out[1] == 1.0f);
  // Without biases: h_1 = [3, 1] + [1, 1] = [4, 2]; h_2 = [2, 4] + [4, 2] = [6, 6].
  specdec::residual_heads(specdec::host{}, make_view<2>(h0.data(), {1, 2}), make_view<3>(w.data(), {2, 2, 2}),
                          make_view<3>(out.data(), {2, 1, 2}));
  CHECK(out == std::vector<float>{4.0f, 2.0f, 6.0f, 6.0f});
}

// Fills a vector of T from U(-a, a) and returns the stored values as doubles (what the reference sees).
template <class T>
std::vector<double> random_fill(std::vector<T>& v, std::size_t n, double a, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(static_cast<float>(-a), static_cast<float>(a));
  v.resize(n);
  std::vector<double> d(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = specdec::from_float<T>(u(rng));
    d[i] = specdec::to_float(v[i]);
  }
  return d;
}

template <class TX, class TW, class TO>
void check_against_reference(std::uint32_t seed, double tol) {
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 24; ++trial) {
    const int n = std::vector<int>{0, 1, 3, 4, 5, 9}[trial % 6];
    const int H = std::vector<int>{1, 15, 16, 17, 64, 130, 200}[(trial / 2) % 7];
    const int gamma = trial % 5;
    const bool with_bias = trial % 3 != 0;
    const auto act = trial % 4 == 3 ? residual_activation::silu : residual_activation::identity;
    const int pad_x = trial % 2 == 0 ? 0 : 3, pad_o = trial % 3 == 1 ? 5 : 0;  // padded row strides
    std::vector<TX> hx;
    std::vector<TW> w, b;
    const auto h0 = random_fill(hx, static_cast<std::size_t>(n) * (H + pad_x) + 1, 1.0, rng);
    const auto wd = random_fill(w, static_cast<std::size_t>(gamma) * H * H, 1.0 / std::sqrt(H), rng);
    auto bd = random_fill(b, static_cast<std::size_t>(gamma) * H, 0.5, rng);
    std::vector<double> h0c(static_cast<std::size_t>(n) * H);
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < H; ++c) h0c[static_cast<std::size_t>(r) * H + c] = h0[static_cast<std::size_t>(r) * (H + pad_x) + c];
    if (!with_bias) bd.clear();
    const auto ref = specdec::reference::residual_heads(h0c, wd, bd, n, H, gamma, act);
    std::vector<TO> out(static_cast<std::size_t>(gamma) * n * (H + pad_o) + 1, specdec::from_float<TO>(-9.0f));
    const auto xv = specdec::strided_view<const TX, 2>(hx.data(), {n, H}, {H + pad_x, 1});
    const auto wv = make_view<3>(std::as_const(w).data(), {gamma, H, H});
    const auto ov = specdec::strided_view<TO, 3>(out.data(), {gamma, n, H}, {static_cast<std::int64_t>(n) * (H + pad_o), H + pad_o, 1});
    const specdec::host pol{.num_threads = trial % 2 == 0 ? 1 : 0};
    if (with_bias)
      specdec::residual_heads(pol, xv, wv, make_view<2>(std::as_const(b).data(), {gamma, H}), ov, {.activation = act});
    else
      specdec::residual_heads(pol, xv, wv, ov, {.activation = act});
    INFO("trial " << trial << " n " << n << " H " << H << " gamma " << gamma << " bias " << with_bias);
    double worst = 0;
    for (int i = 0; i < gamma; ++i)
      for (int r = 0; r < n; ++r) {
        // Scale: the row's magnitude (values grow along the chain; the error is relative to it).
        double scale = 1e-30;
        for (int c = 0; c < H; ++c) scale = std::max(scale, std::abs(ref[(static_cast<std::size_t>(i) * n + r) * H + c]));
        for (int c = 0; c < H; ++c) {
          const double got = specdec::to_float(out[(static_cast<std::size_t>(i) * n + r) * (H + pad_o) + c]);
          worst = std::max(worst, std::abs(got - ref[(static_cast<std::size_t>(i) * n + r) * H + c]) / scale);
        }
      }
    CHECK(worst <= tol);
    // Padding between rows is never written.
    if (pad_o > 0 && gamma > 0 && n > 0) CHECK(specdec::to_float(out[static_cast<std::size_t>(H)]) == -9.0f);
  }
}

TEST_CASE("residual_heads: host path equals the double reference", "[residual_heads]") {
  // fp32 everywhere: rounding of H-term fp32 dot products only.
  check_against_reference<float, float, float>(1, 2e-6);
  // Low-precision weights / inputs: the reference sees the same stored values, so only fp32
  // accumulation differs.
  check_against_reference<half, half, float>(2, 2e-6);
  check_against_reference<bfloat16, bfloat16, float>(3, 2e-6);
  check_against_reference<float, half, float>(4, 2e-6);
  // Low-precision outputs: one rounding of the stored value (the chain itself stays fp32).
  check_against_reference<half, half, half>(5, 1.0 / 1024);
  check_against_reference<bfloat16, bfloat16, bfloat16>(6, 1.0 / 128);
  check_against_reference<float, bfloat16, half>(7, 1.0 / 1024);
}

TEST_CASE("residual_heads: the chain is carried in fp32 even when out is half", "[residual_heads]") {
  // With half out, h_2 must be computed from the fp32 h_1, not from its half rounding.
  std::mt19937 rng(8);
  const int n = 2, H = 48, gamma = 3;
  std::vector<float> x, w, b;
  const auto xd = random_fill(x, static_cast<std::size_t>(n) * H, 1.0, rng);
  const auto wd = random_fill(w, static_cast<std::size_t>(gamma) * H * H, 0.3, rng);
  const auto bd = random_fill(b, static_cast<std::size_t>(gamma) * H, 0.3, rng);
  std::vector<float> of(static_cast<std::size_t>(gamma) * n * H);
  std::vector<half> oh(of.size());
  const auto xv = make_view<2>(std::as_const(x).data(), {n, H});
  const auto wv = make_view<3>(std::as_const(w).data(), {gamma, H, H});
  const auto bv = make_view<2>(std::as_const(b).data(), {gamma, H});
  specdec::residual_heads(specdec::host{}, xv, wv, bv, make_view<3>(of.data(), {gamma, n, H}));
  std::vector<float> ws;
  specdec::residual_heads(specdec::host{}, xv, wv, bv, make_view<3>(oh.data(), {gamma, n, H}), {.workspace = &ws});
  for (std::size_t i = 0; i < of.size(); ++i) CHECK(specdec::to_float(oh[i]) == specdec::to_float(half(of[i])));
  // The workspace was used and a second call with it does not allocate.
  CHECK(ws.size() >= static_cast<std::size_t>(2 * n * H));
  const specdec::host one{.num_threads = 1};
  specdec_test::allocation_scope scope;
  specdec::residual_heads(one, xv, wv, bv, make_view<3>(oh.data(), {gamma, n, H}), {.workspace = &ws});
  specdec::residual_heads(one, xv, wv, bv, make_view<3>(of.data(), {gamma, n, H}));
  CHECK(scope.count() == 0);
}

TEST_CASE("residual_heads: bad inputs are named", "[residual_heads]") {
  using Catch::Matchers::Contains;
  std::vector<float> x(128), w(3 * 16 * 16), b(3 * 16), o(3 * 4 * 16);
  const auto xv = make_view<2>(std::as_const(x).data(), {4, 16});
  const auto wv = make_view<3>(std::as_const(w).data(), {3, 16, 16});
  const auto bv = make_view<2>(std::as_const(b).data(), {3, 16});
  const auto ov = make_view<3>(o.data(), {3, 4, 16});
  const specdec::host h{};
  CHECK_NOTHROW(specdec::residual_heads(h, xv, wv, bv, ov));
  CHECK_THROWS_WITH(specdec::residual_heads(h, xv, make_view<3>(std::as_const(w).data(), {3, 16, 8}), bv, ov),
                    Contains("specdec::residual_heads") && Contains("'weights'") && Contains("[3, 16, 16]") &&
                        Contains("[3, 16, 8]"));
  CHECK_THROWS_WITH(specdec::residual_heads(h, xv, wv, make_view<2>(std::as_const(b).data(), {2, 16}), ov),
                    Contains("'bias'") && Contains("[2, 16]"));
  CHECK_THROWS_WITH(specdec::residual_heads(h, xv, wv, bv, make_view<3>(o.data(), {3, 3, 16})),
                    Contains("'out'") && Contains("[3, 4, 16]"));
  CHECK_THROWS_WITH(specdec::residual_heads(h, xv, wv, bv, make_view<3>(o.data(), {2, 4, 16})), Contains("'out'"));
  CHECK_THROWS_WITH(specdec::residual_heads(h, make_view<2>(std::as_const(x).data(), {4, 0}), wv, bv, ov),
                    Contains("'h0'") && Contains("1 <= H"));
  CHECK_THROWS_WITH(specdec::residual_heads(h, specdec::strided_view<const float, 2>(x.data(), {4, 16}, {16, 2}), wv, bv, ov),
                    Contains("'h0'") && Contains("stride"));
  CHECK_THROWS_WITH(
      specdec::residual_heads(h, xv, wv, bv, specdec::strided_view<float, 3>(o.data(), {3, 4, 16}, {64, 16, 1}, specdec::memory_space::device)),
      Contains("'out'") && Contains("host"));
  CHECK_THROWS_WITH(specdec::residual_heads(specdec::host{.num_threads = -1}, xv, wv, bv, ov),
                    Contains("'policy.num_threads'") && Contains("got -1"));
  CHECK_THROWS_WITH(specdec::residual_heads(h, xv, wv, bv, ov, {.activation = static_cast<residual_activation>(9)}),
                    Contains("'params.activation'") && Contains("got 9"));
  CHECK_THROWS_WITH(specdec::residual_heads(h, make_view<2>(static_cast<const float*>(nullptr), {4, 16}), wv, bv, ov),
                    Contains("'h0'") && Contains("nullptr"));
  // out overlapping an input: h0 inside out's first head, out over the weights' tail, out on the bias.
  CHECK_THROWS_WITH(specdec::residual_heads(h, make_view<2>(std::as_const(o).data() + 16, {4, 16}), wv, bv, ov),
                    Contains("'out'") && Contains("disjoint from h0"));
  CHECK_THROWS_WITH(specdec::residual_heads(h, xv, wv, bv, make_view<3>(w.data() + w.size() - 3 * 4 * 16, {3, 4, 16})),
                    Contains("'out'") && Contains("disjoint from weights"));
  CHECK_THROWS_WITH(specdec::residual_heads(h, xv, make_view<3>(std::as_const(w).data(), {1, 16, 16}), make_view<2>(std::as_const(b).data(), {1, 16}),
                                            make_view<3>(b.data(), {1, 4, 16})),
                    Contains("'out'") && Contains("disjoint from bias"));
  // half out: the chain runs in params.workspace, which the call resizes (its storage may move) and
  // writes; an input kept in that storage is refused, a workspace apart from every input is used
  std::vector<specdec::half> oh(3 * 4 * 16);
  const auto ohv = make_view<3>(oh.data(), {3, 4, 16});
  std::vector<float> scratch(x.begin(), x.end());
  const auto in_scratch = make_view<2>(std::as_const(scratch).data(), {4, 16});
  CHECK_THROWS_WITH(specdec::residual_heads(h, in_scratch, wv, bv, ohv, {.workspace = &scratch}),
                    Contains("'params.workspace'") && Contains("apart from h0"));
  std::vector<float> holds_bias(b.begin(), b.end());
  CHECK_THROWS_WITH(specdec::residual_heads(h, xv, wv, make_view<2>(std::as_const(holds_bias).data(), {3, 16}), ohv,
                                            {.workspace = &holds_bias}),
                    Contains("'params.workspace'") && Contains("apart from bias"));
  std::vector<float> apart;
  CHECK_NOTHROW(specdec::residual_heads(h, in_scratch, wv, bv, ohv, {.workspace = &apart}));
  CHECK(apart.size() >= 2 * 4 * 16);
}

// One call on fixed finite data: h0 [3, 8] of TX, weights [2, 8, 8] (all entries non-zero), biases
// [2, 8]; `mutate` may plant a bad value first. Returns out [2, 3, 8] as floats.
template <class TX, class F>
std::vector<float> heads_run(residual_activation act, F&& mutate) {
  const int n = 3, H = 8, gamma = 2;
  std::vector<TX> h0(n * H);
  std::vector<float> w(gamma * H * H), b(gamma * H);
  for (int i = 0; i < n * H; ++i) h0[i] = specdec::from_float<TX>(0.125f * static_cast<float>(i % 5) - 0.25f);
  for (int i = 0; i < gamma * H * H; ++i) w[i] = 0.0625f * static_cast<float>(i % 7 + 1) * (i % 2 ? 1.0f : -1.0f);
  for (int i = 0; i < gamma * H; ++i) b[i] = 0.03125f * static_cast<float>(i % 3);
  mutate(h0, w, b);
  std::vector<float> out(gamma * n * H);
  specdec::residual_heads(specdec::host{1}, make_view<2>(std::as_const(h0).data(), {n, H}),
                          make_view<3>(std::as_const(w).data(), {gamma, H, H}), make_view<2>(std::as_const(b).data(), {gamma, H}),
                          make_view<3>(out.data(), {gamma, n, H}), {.activation = act});
  return out;
}

template <class TX>
void check_heads_nonfinite() {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const int n = 3, H = 8;
  const auto at = [&](int i, int r, int c) { return static_cast<std::size_t>((i * n + r) * H + c); };
  for (auto act : {residual_activation::identity, residual_activation::silu})
    for (float bad : {nan, inf, -inf}) {
      INFO("activation " << static_cast<int>(act) << " value " << bad);
      const auto clean = heads_run<TX>(act, [](auto&, auto&, auto&) {});
      // h0 row 1: every value of row 1 in both heads is non-finite; rows 0 and 2 are the clean run's
      const auto in_h0 = heads_run<TX>(act, [&](auto& h0, auto&, auto&) { h0[1 * H + 2] = specdec::from_float<TX>(bad); });
      for (int i = 0; i < 2; ++i)
        for (int r = 0; r < n; ++r)
          for (int c = 0; c < H; ++c) {
            if (r == 1) {
              CHECK_FALSE(std::isfinite(in_h0[at(i, r, c)]));
            } else {
              CHECK(in_h0[at(i, r, c)] == clean[at(i, r, c)]);
            }
          }
      // W_1 row 3: column 3 of h_1 is non-finite in every row, and h_2 (which mixes every column) all of it
      const auto in_w = heads_run<TX>(act, [&](auto&, auto& w, auto&) { w[3 * H + 5] = bad; });
      for (int r = 0; r < n; ++r)
        for (int c = 0; c < H; ++c) {
          if (c == 3) {
            CHECK_FALSE(std::isfinite(in_w[at(0, r, c)]));
          } else {
            CHECK(in_w[at(0, r, c)] == clean[at(0, r, c)]);
          }
          CHECK_FALSE(std::isfinite(in_w[at(1, r, c)]));
        }
      // b_2[4]: only column 4 of h_2
      const auto in_b = heads_run<TX>(act, [&](auto&, auto&, auto& b) { b[H + 4] = bad; });
      for (int i = 0; i < 2; ++i)
        for (int r = 0; r < n; ++r)
          for (int c = 0; c < H; ++c) {
            if (i == 1 && c == 4) {
              CHECK_FALSE(std::isfinite(in_b[at(i, r, c)]));
            } else {
              CHECK(in_b[at(i, r, c)] == clean[at(i, r, c)]);
            }
          }
    }
}

TEST_CASE("residual_heads: NaN and infinities propagate to what they reach; denormals are ordinary", "[residual_heads]") {
  // The non-finite policy of the float-producing entry points (residual_heads.hpp): IEEE propagation,
  // never a finite wrong value, nothing reaching rows it does not feed.
  check_heads_nonfinite<float>();
  check_heads_nonfinite<half>();
  check_heads_nonfinite<bfloat16>();
  // Denormal inputs and weights: no flush to zero; the result matches the double reference on the
  // denormal grid.
  const int n = 2, H = 20, gamma = 2;  // H = 20: a 16-lane body and a scalar tail
  std::vector<float> h0(n * H), w(gamma * H * H, 0.0f);
  std::vector<double> h0d(h0.size()), wd(w.size());
  for (int i = 0; i < n * H; ++i) h0d[i] = h0[i] = static_cast<float>(i + 1) * 1e-41f;
  for (int i = 0; i < gamma; ++i)
    for (int j = 0; j < H; ++j) w[(i * H + j) * H + j] = 0.5f, w[(i * H + j) * H + (j + 1) % H] = 0.25f;
  for (std::size_t i = 0; i < w.size(); ++i) wd[i] = w[i];
  const auto ref = specdec::reference::residual_heads(h0d, wd, {}, n, H, gamma);
  std::vector<float> out(gamma * n * H);
  specdec::residual_heads(specdec::host{1}, make_view<2>(std::as_const(h0).data(), {n, H}),
                          make_view<3>(std::as_const(w).data(), {gamma, H, H}), make_view<3>(out.data(), {gamma, n, H}));
  for (std::size_t i = 0; i < out.size(); ++i) {
    CHECK(out[i] > 0.0f);
    CHECK(out[i] < std::numeric_limits<float>::min());  // still denormal: the test exercises what it says
    CHECK(std::abs(out[i] - ref[i]) <= 8 * std::numeric_limits<float>::denorm_min());
  }
}

}  // namespace
