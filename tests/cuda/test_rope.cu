// apply_rope on the cuda backend against apply_rope(host) on the same inputs: rotate-half and
// interleaved, partial rotary, Llama-3.1 scaling, large and tree-like (repeated) positions, strided
// heads, fp32/fp16/bf16; NaN/Inf propagate within their rotated pair only and denormals rotate (the
// host test's cases); plus validation errors. Skipped (exit 77) without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.cuh"
#include "position/rope_nonfinite_util.hpp"
#include "specdec/core/numeric.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/position/rope.cuh"

namespace {

using specdec::memory_space;

template <class T>
void compare_with_host(const specdec::rope_params& params, int tokens, int heads, int dim, int head_pad,
                       std::uint64_t seed) {
  specdec::philox_stream rng(seed, 1);
  const int hs = dim + head_pad;  // head stride (padding exercises strided heads)
  std::vector<T> x(static_cast<std::size_t>(tokens) * heads * hs);
  for (auto& v : x) v = specdec::from_float<T>(2.0f * rng.uniform() - 1.0f);
  std::vector<std::int32_t> pos(tokens);
  for (int t = 0; t < tokens; ++t) pos[t] = t % 3 == 0 ? 1000000 + t : static_cast<std::int32_t>(rng.below(70000));
  const std::int64_t ext[3] = {tokens, heads, dim}, str[3] = {static_cast<std::int64_t>(heads) * hs, hs, 1};
  std::vector<T> hx = x;
  specdec::apply_rope(specdec::host{}, params, specdec::strided_view<T, 3>(hx.data(), ext, str),
                      specdec::make_view<1>(pos.data(), {tokens}));
  specdec_test::device_buffer<T> dx(x);
  specdec_test::device_buffer<std::int32_t> dpos(pos);
  specdec::apply_rope(specdec::cuda{}, params, specdec::strided_view<T, 3>(dx.data(), ext, str, memory_space::device),
                      specdec::make_view<1>(dpos.data(), {tokens}, memory_space::device));
  specdec_test::sync_check("apply_rope(cuda)");
  const auto gx = dx.download();
  // cos/sin may differ by one float rounding (device vs host libm): allow one storage ulp-ish.
  const double tol = std::is_same_v<T, float> ? 1e-6 : std::is_same_v<T, specdec::half> ? 1e-3 : 8e-3;
  int bad = 0;
  for (std::size_t i = 0; i < gx.size(); ++i) {
    const double a = specdec::to_float(gx[i]), b = specdec::to_float(hx[i]);
    if (!(std::abs(a - b) <= tol)) ++bad;
  }
  CHECK(bad == 0);
}

//! Rotates x in place on the device: x [tokens, heads, dim] of type T, one position per token.
template <class T>
void rope_on_device(const specdec::rope_params& p, std::vector<T>& x, const std::vector<std::int32_t>& pos,
                    int heads, int dim) {
  const int tokens = static_cast<int>(pos.size());
  specdec_test::device_buffer<T> dx(x);
  specdec_test::device_buffer<std::int32_t> dpos(pos);
  specdec::apply_rope(specdec::cuda{}, p, specdec::make_view<3>(dx.data(), {tokens, heads, dim}, memory_space::device),
                      specdec::make_view<1>(dpos.data(), {tokens}, memory_space::device));
  specdec_test::sync_check("apply_rope(cuda)");
  x = dx.download();
}

//! One run of the non-finite test (rope_test::check_nonfinite_pairs) on the device: the twin of the
//! host test's rope_run (tests/position/test_rope.cpp).
template <class T>
std::vector<float> rope_run(specdec::rope_style style, int dim, float value) {
  std::vector<T> x = rope_test::nonfinite_input<T>(dim, value);
  rope_on_device<T>({.style = style, .rotary_dim = 4}, x, {0, 7}, 2, 8);
  return rope_test::to_floats(x);
}

template <class T>
void check_rope_nonfinite() {
  for (auto style : {specdec::rope_style::rotate_half, specdec::rope_style::interleaved})
    rope_test::check_nonfinite_pairs(style, "style " + std::to_string(static_cast<int>(style)),
                                     [&](int dim, float value) { return rope_run<T>(style, dim, value); });
}

}  // namespace

TEMPLATE_TEST_CASE("cuda apply_rope: NaN and infinities propagate within their rotated pair only",
                   "[cuda][rope][nonfinite]", float, specdec::half, specdec::bfloat16) {
  // The non-finite policy of the float-producing entry points (README "Conventions"): IEEE
  // propagation to the outputs a value reaches, never a finite wrong value; nothing else changes.
  check_rope_nonfinite<TestType>();
}

TEST_CASE("cuda apply_rope: denormals rotate (no flush to zero)", "[cuda][rope][nonfinite]") {
  // The host test's denormal case on the device: the rotation of a denormal pair matches the double
  // reference to the denormal grid, for float, and for half's own subnormals.
  for (auto style : {specdec::rope_style::rotate_half, specdec::rope_style::interleaved}) {
    INFO("style " << static_cast<int>(style));
    rope_test::check_denormal_pairs(
        style, [](const specdec::rope_params& p, auto& x, const std::vector<std::int32_t>& pos) {
          rope_on_device(p, x, pos, 1, 4);
        });
  }
}

TEMPLATE_TEST_CASE("cuda apply_rope matches the host", "[cuda][rope]", float, specdec::half, specdec::bfloat16) {
  SECTION("rotate-half, full rotary") { compare_with_host<TestType>({}, 37, 8, 128, 0, 1); }
  SECTION("interleaved, partial rotary, padded heads") {
    compare_with_host<TestType>({.theta = 500000.0, .style = specdec::rope_style::interleaved, .rotary_dim = 64}, 20,
                                4, 128, 8, 2);
  }
  SECTION("Llama-3.1 scaling") {
    compare_with_host<TestType>({.theta = 500000.0, .llama3 = specdec::llama3_rope_scaling{}}, 16, 2, 64, 0, 3);
  }
}

TEST_CASE("cuda apply_rope rejects bad inputs", "[cuda][rope][validation][nogpu]") {
  using Catch::Matchers::Contains;
  auto* fake = reinterpret_cast<float*>(0x100000);
  auto* fpos = reinterpret_cast<std::int32_t*>(0x200000);
  auto x = specdec::make_view<3>(fake, {4, 2, 64}, memory_space::device);
  auto p = specdec::make_view<1>(fpos, {4}, memory_space::device);
  REQUIRE_THROWS_WITH(specdec::apply_rope(specdec::cuda{}, {}, specdec::make_view<3>(fake, {4, 2, 64}), p),
                      Contains("specdec::apply_rope") && Contains("'x'"));
  REQUIRE_THROWS_WITH(specdec::apply_rope(specdec::cuda{}, {}, x, specdec::make_view<1>(fpos, {3}, memory_space::device)),
                      Contains("'positions'"));
  REQUIRE_THROWS_WITH(specdec::apply_rope(specdec::cuda{}, {.rotary_dim = 3}, x, p), Contains("'params.rotary_dim'"));
  REQUIRE_THROWS_WITH(specdec::apply_rope(specdec::cuda{}, {.theta = 0.5}, x, p), Contains("'params.theta'"));
  REQUIRE_THROWS_AS(specdec::apply_rope(specdec::cuda{}, {}, x, specdec::make_view<1>(fpos, {4})), specdec::invalid_argument);
}
