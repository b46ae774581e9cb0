// lse_merge on the cuda backend against the host backend on the same inputs: n-way (S = 1, 2, 5,
// 32, 33, 64, 65, 130), two-way with -inf parts (never NaN, NaN in a zero-weight part does not
// leak), in-place (out aliasing o_a), fp16/bf16/fp32; NaN/+inf in a part that has keys propagates
// (n-way and two-way, as on the host). Skipped (exit 77) without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cuda/test_attention_common.cuh"
#include "specdec/attention/lse_merge.cuh"
#include "specdec/core/numeric.hpp"
#include "specdec/core/philox.hpp"

using namespace cuda_attn_test;

namespace {

constexpr float ninf = -std::numeric_limits<float>::infinity();

template <class T>
std::vector<T> random_rows(std::size_t n, std::uint64_t seed) {
  specdec::philox_stream rng(seed, 3);
  std::vector<T> v(n);
  for (auto& x : v) x = specdec::from_float<T>(2.0f * rng.uniform() - 1.0f);
  return v;
}

std::vector<float> random_lse(std::size_t n, std::uint64_t seed, float p_inf) {
  specdec::philox_stream rng(seed, 4);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.uniform() < p_inf ? ninf : 20.0f * rng.uniform() - 10.0f;
  return v;
}

template <class T>
double tol() {
  return std::is_same_v<T, float> ? 1e-6 : std::is_same_v<T, specdec::half> ? 1e-3 : 8e-3;
}

template <class T>
void expect_close(const std::vector<T>& got, const std::vector<T>& want, const std::vector<float>& lg,
                  const std::vector<float>& lw) {
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double a = specdec::to_float(got[i]), b = specdec::to_float(want[i]);
    if (!(std::abs(a - b) <= tol<T>() * std::max(1.0, std::abs(b)))) ++bad;
  }
  for (std::size_t i = 0; i < lg.size(); ++i) {
    if (std::isinf(lw[i]) || std::isinf(lg[i])) {
      if (lg[i] != lw[i]) ++bad;
    } else if (!(std::abs(lg[i] - lw[i]) <= 1e-5 * std::max(1.0f, std::abs(lw[i])))) {
      ++bad;
    }
  }
  CHECK(bad == 0);
}

}  // namespace

TEMPLATE_TEST_CASE("cuda lse_merge n-way matches the host backend", "[cuda][attention]", specdec::bfloat16,
                   specdec::half, float) {
  const int n = 7, h = 3, d = 128;
  for (int s : {1, 2, 5, 32, 33, 64, 65, 130}) {  // around the kernel's 32-part groups and 64 cached LSEs
    DYNAMIC_SECTION("parts " << s) {
      const std::size_t rows = static_cast<std::size_t>(s) * n * h;
      auto o = random_rows<TestType>(rows * d, 10 + s);
      auto l = random_lse(rows, 20 + s, 0.3f);
      std::vector<TestType> ho(static_cast<std::size_t>(n) * h * d);
      std::vector<float> hl(static_cast<std::size_t>(n) * h);
      specdec::lse_merge(specdec::host{}, specdec::make_view<4>(o.data(), {s, n, h, d}),
                         specdec::make_view<3>(l.data(), {s, n, h}), specdec::make_view<3>(ho.data(), {n, h, d}),
                         specdec::make_view<2>(hl.data(), {n, h}));
      dvec<TestType> dO(o), dout(ho.size());
      dvec<float> dl(l), dlo(hl.size());
      specdec::lse_merge(specdec::cuda{}, specdec::make_view<4>(dO.data(), {s, n, h, d}, memory_space::device),
                         specdec::make_view<3>(dl.data(), {s, n, h}, memory_space::device),
                         specdec::make_view<3>(dout.data(), {n, h, d}, memory_space::device),
                         specdec::make_view<2>(dlo.data(), {n, h}, memory_space::device));
      specdec_test::sync_check("lse_merge(cuda) n-way");
      std::vector<TestType> go;
      std::vector<float> gl;
      dout.download(go);
      dlo.download(gl);
      expect_close(go, ho, gl, hl);
    }
  }
}

TEMPLATE_TEST_CASE("cuda lse_merge two-way in place, -inf parts, no NaN leak", "[cuda][attention]", specdec::bfloat16,
                   specdec::half) {
  const int n = 9, h = 4, d = 64;
  const std::size_t rows = static_cast<std::size_t>(n) * h;
  auto a = random_rows<TestType>(rows * d, 1);
  auto b = random_rows<TestType>(rows * d, 2);
  auto la = random_lse(rows, 3, 0.4f);
  auto lb = random_lse(rows, 4, 0.4f);
  la[0] = lb[0] = ninf;  // both empty -> 0 and -inf
  la[1] = ninf;          // part a empty and NaN: must not leak
  for (int c = 0; c < d; ++c) a[d + c] = specdec::from_float<TestType>(std::numeric_limits<float>::quiet_NaN());
  std::vector<TestType> ho = a;
  std::vector<float> hl = la;
  specdec::lse_merge(specdec::host{}, specdec::make_view<3>(ho.data(), {n, h, d}), specdec::make_view<2>(hl.data(), {n, h}),
                     specdec::make_view<3>(b.data(), {n, h, d}), specdec::make_view<2>(lb.data(), {n, h}),
                     specdec::make_view<3>(ho.data(), {n, h, d}), specdec::make_view<2>(hl.data(), {n, h}));
  dvec<TestType> da(a), db(b);
  dvec<float> dla(la), dlb(lb);
  auto va = specdec::make_view<3>(da.data(), {n, h, d}, memory_space::device);
  auto vla = specdec::make_view<2>(dla.data(), {n, h}, memory_space::device);
  specdec::lse_merge(specdec::cuda{}, va, vla, specdec::make_view<3>(db.data(), {n, h, d}, memory_space::device),
                     specdec::make_view<2>(dlb.data(), {n, h}, memory_space::device), va, vla);
  specdec_test::sync_check("lse_merge(cuda) two-way");
  std::vector<TestType> go;
  std::vector<float> gl;
  da.download(go);
  dla.download(gl);
  for (int c = 0; c < d; ++c) {
    REQUIRE(specdec::to_float(go[c]) == 0.0f);
    REQUIRE(!std::isnan(specdec::to_float(go[d + c])));
  }
  REQUIRE(gl[0] == ninf);
  expect_close(go, ho, gl, hl);
}

TEMPLATE_TEST_CASE("cuda lse_merge: NaN in a part that has keys propagates, never a finite answer",
                   "[cuda][attention][nonfinite]", specdec::bfloat16, specdec::half, float) {
  // The host test's cases (tests/attention/test_lse_merge.cpp) on the cuda n-way merge, S = 70 parts,
  // with a second token row that stays clean (0.25 everywhere, finite LSEs): it must come out finite
  // and as the host computes it, so nothing leaks across rows.
  const int d = 64, S = 70, n = 2;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<TestType> parts(static_cast<std::size_t>(S) * n * d, specdec::from_float<TestType>(0.25f));
  std::vector<float> lse(static_cast<std::size_t>(S) * n, ninf);
  for (int p = 0; p < S; ++p) lse[static_cast<std::size_t>(p) * n + 1] = 0.1f * static_cast<float>(p % 9) - 0.3f;
  auto part = [&](int p, int c) -> TestType& { return parts[(static_cast<std::size_t>(p) * n) * d + c]; };
  auto l0 = [&](int p) -> float& { return lse[static_cast<std::size_t>(p) * n]; };
  std::vector<TestType> o;
  std::vector<float> lo;
  auto run = [&] {
    dvec<TestType> dp(parts), dout(static_cast<std::size_t>(n) * d);
    dvec<float> dl(lse), dlo(static_cast<std::size_t>(n));
    specdec::lse_merge(specdec::cuda{}, specdec::make_view<4>(dp.data(), {S, n, 1, d}, memory_space::device),
                       specdec::make_view<3>(dl.data(), {S, n, 1}, memory_space::device),
                       specdec::make_view<3>(dout.data(), {n, 1, d}, memory_space::device),
                       specdec::make_view<2>(dlo.data(), {n, 1}, memory_space::device));
    specdec_test::sync_check("lse_merge(cuda) non-finite");
    dout.download(o);
    dlo.download(lo);
    std::vector<TestType> ho(static_cast<std::size_t>(n) * d);
    std::vector<float> hl(n);
    specdec::lse_merge(specdec::host{}, specdec::make_view<4>(parts.data(), {S, n, 1, d}),
                       specdec::make_view<3>(lse.data(), {S, n, 1}), specdec::make_view<3>(ho.data(), {n, 1, d}),
                       specdec::make_view<2>(hl.data(), {n, 1}));
    // the clean row: finite, and the host's result
    std::vector<TestType> go1(o.begin() + d, o.end()), ho1(ho.begin() + d, ho.end());
    for (int c = 0; c < d; ++c) REQUIRE(std::isfinite(specdec::to_float(go1[c])));
    expect_close(go1, ho1, {lo[1]}, {hl[1]});
  };
  SECTION("the only non-empty part has LSE NaN (std::max / fmaxf would drop it as if the row were empty)") {
    l0(66) = nan;
    run();
    CHECK(std::isnan(lo[0]));
    for (int c = 0; c < d; ++c) CHECK(std::isnan(specdec::to_float(o[c])));
  }
  SECTION("a NaN LSE beside finite ones") {
    l0(0) = 2.0f;
    l0(3) = nan;
    run();
    CHECK(std::isnan(lo[0]));
    CHECK(std::isnan(specdec::to_float(o[0])));
  }
  SECTION("a finite LSE whose O holds NaN (a NaN value the part could see), however small its weight") {
    l0(0) = 50.0f;
    l0(65) = -80.0f;  // weight exp(-130) underflows to 0 in fp32, yet the NaN must reach the row
    part(65, 5) = specdec::from_float<TestType>(nan);
    run();
    CHECK(lo[0] == Approx(50.0f));
    CHECK(std::isnan(specdec::to_float(o[5])));
    CHECK(specdec::to_float(o[4]) == Approx(0.25f).margin(1e-2));
  }
  SECTION("+inf LSE (an infinite score) is not finite either") {
    l0(1) = 1.0f;
    l0(2) = inf;
    run();
    CHECK(!std::isfinite(lo[0]));
    CHECK(!std::isfinite(specdec::to_float(o[0])));
  }
}

TEMPLATE_TEST_CASE("cuda lse_merge two-way: NaN in a part that has keys propagates", "[cuda][attention][nonfinite]",
                   specdec::bfloat16, specdec::half) {
  // Row 0: part a has a finite LSE and one NaN value (however small its weight) -> that element NaN,
  // the others and the LSE finite. Row 1: part a's LSE is NaN -> LSE and every element NaN. Row 2:
  // part b's LSE is +inf -> not finite. Row 3: clean, the host's result.
  const int n = 4, d = 64;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  auto a = random_rows<TestType>(static_cast<std::size_t>(n) * d, 5);
  auto b = random_rows<TestType>(static_cast<std::size_t>(n) * d, 6);
  std::vector<float> la{-60.0f, nan, 0.5f, 1.0f}, lb{40.0f, 2.0f, inf, -1.0f};
  a[7] = specdec::from_float<TestType>(nan);
  dvec<TestType> da(a), db(b), dout(a.size());
  dvec<float> dla(la), dlb(lb), dlo(la.size());
  specdec::lse_merge(specdec::cuda{}, specdec::make_view<3>(da.data(), {n, 1, d}, memory_space::device),
                     specdec::make_view<2>(dla.data(), {n, 1}, memory_space::device),
                     specdec::make_view<3>(db.data(), {n, 1, d}, memory_space::device),
                     specdec::make_view<2>(dlb.data(), {n, 1}, memory_space::device),
                     specdec::make_view<3>(dout.data(), {n, 1, d}, memory_space::device),
                     specdec::make_view<2>(dlo.data(), {n, 1}, memory_space::device));
  specdec_test::sync_check("lse_merge(cuda) two-way non-finite");
  std::vector<TestType> go;
  std::vector<float> gl;
  dout.download(go);
  dlo.download(gl);
  std::vector<TestType> ho(a.size());
  std::vector<float> hl(la.size());
  specdec::lse_merge(specdec::host{}, specdec::make_view<3>(a.data(), {n, 1, d}),
                     specdec::make_view<2>(la.data(), {n, 1}), specdec::make_view<3>(b.data(), {n, 1, d}),
                     specdec::make_view<2>(lb.data(), {n, 1}), specdec::make_view<3>(ho.data(), {n, 1, d}),
                     specdec::make_view<2>(hl.data(), {n, 1}));
  CHECK(gl[0] == Approx(40.0f));
  for (int c = 0; c < d; ++c) {
    INFO("element " << c);
    CHECK(std::isnan(specdec::to_float(go[c])) == (c == 7));
    CHECK(std::isnan(specdec::to_float(go[d + c])));
    CHECK(!std::isfinite(specdec::to_float(go[2 * d + c])));
  }
  CHECK(std::isnan(gl[1]));
  CHECK(!std::isfinite(gl[2]));
  expect_close(std::vector<TestType>(go.begin() + 3 * d, go.end()), std::vector<TestType>(ho.begin() + 3 * d, ho.end()),
               {gl[3]}, {hl[3]});
}

TEST_CASE("cuda merge params: one host -> device conversion keeps every field; float2 loads only when aligned",
          "[cuda][attention][nogpu]") {
  using specdec::half;
  // to_device_params: the same struct over CUDA's types, every pointer and size unchanged.
  std::vector<half> o(64), q(64);
  std::vector<float> lse(8);
  specdec::attention_io_params<half> io;
  io.q = q.data();
  io.q_stride_token = 96;
  io.q_stride_head = 32;
  io.o = o.data();
  io.o_stride_token = 40;
  io.o_stride_head = 8;
  io.lse = lse.data();
  io.lse_stride_token = 3;
  io.lse_stride_head = 1;
  io.num_requests = 5;
  io.total_tokens = 7;
  io.num_qo_heads = 4;
  io.num_kv_heads = 2;
  io.head_dim = 128;
  io.scale = 0.25f;
  const auto d = specdec::detail::to_device_params(io);
  static_assert(std::is_same_v<decltype(d), const specdec::attention_io_params<__half>>);
  CHECK(static_cast<const void*>(d.q) == q.data());
  CHECK(static_cast<const void*>(d.o) == o.data());
  CHECK(d.lse == lse.data());
  CHECK((d.q_stride_token == 96 && d.q_stride_head == 32 && d.o_stride_token == 40 && d.o_stride_head == 8));
  CHECK((d.lse_stride_token == 3 && d.num_requests == 5 && d.total_tokens == 7 && d.num_qo_heads == 4));
  CHECK((d.num_kv_heads == 2 && d.head_dim == 128 && d.scale == 0.25f));

  specdec::detail::lse_merge_params<half> mh;
  mh.in.o = o.data();
  mh.in.o_stride_token = 7;
  mh.in.count = 2;
  mh.head_dim = 64;
  const auto md = specdec::detail::to_device_params(mh);
  static_assert(std::is_same_v<decltype(md), const specdec::detail::lse_merge_params<__half, __half>>);
  CHECK((static_cast<const void*>(md.in.o) == o.data() && md.in.o_stride_token == 7 && md.in.count == 2 &&
         md.head_dim == 64));

  // float2 loads: fp32 parts with 8-byte aligned rows only.
  alignas(16) static float buf[1024];
  specdec::detail::lse_merge_params<float> mf;
  mf.in.o = buf;
  mf.in.o_stride_part = 512;
  mf.in.o_stride_token = 256;
  mf.in.o_stride_head = 64;
  CHECK(specdec::detail::merge_parts_vec2(mf));
  mf.in.o_stride_token = 255;  // odd token stride: row 1 is misaligned
  CHECK_FALSE(specdec::detail::merge_parts_vec2(mf));
  mf.in.o_stride_token = 256;
  mf.in.o = buf + 1;  // misaligned base
  CHECK_FALSE(specdec::detail::merge_parts_vec2(mf));
  mf.in.o = buf;
  mf.in.o_b = buf + 3;  // a separate second part, misaligned
  CHECK_FALSE(specdec::detail::merge_parts_vec2(mf));
  CHECK_FALSE(specdec::detail::merge_parts_vec2(mh));  // 16-bit parts: per-value loads
}
