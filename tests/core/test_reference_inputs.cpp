// The plain reference oracles (include/specdec/reference/) check their arguments: a bad call throws
// specdec::invalid_argument naming the reference and the argument (never an out-of-bounds read, a
// division by zero or a silent wrong result), and a valid call still gives the plain formula's result.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/bitmask.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/reference/attention.hpp"
#include "specdec/reference/cross_attention.hpp"
#include "specdec/reference/residual_heads.hpp"
#include "specdec/reference/ring_kv.hpp"
#include "specdec/reference/rope.hpp"
#include "specdec/reference/sliding_window_attention.hpp"

using Catch::Contains;
using specdec::contiguous_kv;
using specdec::make_view;
using specdec::mask_word;
namespace ref = specdec::reference;

namespace {

constexpr double nan_v = std::numeric_limits<double>::quiet_NaN();
constexpr double inf_v = std::numeric_limits<double>::infinity();

//! Deterministic values in (-1, 1), exactly representable as float.
std::vector<float> values(std::size_t n, int seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + seed));
  return v;
}

std::vector<double> widen(const std::vector<float>& v) { return {v.begin(), v.end()}; }

//! The plain formula of one query row: lse = log sum_k exp(q.k_k * scale), out = sum_k exp(s_k - lse) v_k.
struct row_result {
  std::vector<double> out;
  double lse = -inf_v;
};
row_result attend(const float* q, const std::vector<const float*>& keys, const std::vector<const float*>& vals, int d,
                  double scale) {
  row_result res;
  res.out.assign(static_cast<std::size_t>(d), 0.0);
  std::vector<double> s;
  double sum = 0;
  for (const float* k : keys) {
    double dot = 0;
    for (int c = 0; c < d; ++c) dot += static_cast<double>(q[c]) * k[c];
    s.push_back(dot * scale);
    sum += std::exp(s.back());
  }
  if (keys.empty()) return res;
  res.lse = std::log(sum);
  for (std::size_t k = 0; k < keys.size(); ++k)
    for (int c = 0; c < d; ++c) res.out[static_cast<std::size_t>(c)] += std::exp(s[k] - res.lse) * vals[k][c];
  return res;
}

void require_row(const ref::attention_result& got, int t, int h, const row_result& want) {
  REQUIRE(got.l(t, h) == Approx(want.lse).epsilon(1e-12).margin(1e-12));
  for (int c = 0; c < got.dim; ++c)
    REQUIRE(got.o(t, h, c) == Approx(want.out[static_cast<std::size_t>(c)]).margin(1e-12));
}

}  // namespace

TEST_CASE("reference::decode_attention checks its arguments") {
  const int D = 4, hq = 2, hkv = 1, cap = 3;
  const std::vector<float> q = values(2 * hq * D, 1), k = values(cap * hkv * D, 2), v = values(cap * hkv * D, 3);
  std::int32_t len[1] = {3}, ip[2] = {0, 2};
  const contiguous_kv<const float> cache{k.data(), v.data(), len, 1, cap, hkv, D};
  const auto qv = make_view<3>(q.data(), {2, hq, D});
  const auto iv = make_view<1>(static_cast<const std::int32_t*>(ip), {2});
  constexpr const char* fn = "specdec::reference::decode_attention";

  SECTION("a valid call gives the plain formula") {
    const auto got = ref::decode_attention(qv, cache, iv);
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    for (int t = 0; t < 2; ++t)
      for (int h = 0; h < hq; ++h) {
        std::vector<const float*> ks, vs;
        for (int j = 0; j < 3; ++j)
          ks.push_back(&k[static_cast<std::size_t>(j) * D]), vs.push_back(&v[static_cast<std::size_t>(j) * D]);
        require_row(got, t, h, attend(&q[(static_cast<std::size_t>(t) * hq + h) * D], ks, vs, D, scale));
      }
    const auto scaled = ref::decode_attention(qv, cache, iv, 0.3);
    std::vector<const float*> ks, vs;
    for (int j = 0; j < 3; ++j)
      ks.push_back(&k[static_cast<std::size_t>(j) * D]), vs.push_back(&v[static_cast<std::size_t>(j) * D]);
    require_row(scaled, 1, 1, attend(&q[(1 * hq + 1) * D], ks, vs, D, 0.3));
  }
  SECTION("q_indptr: values against q's tokens, extent against the cache's requests") {
    std::int32_t bad[2] = {0, 5};
    REQUIRE_THROWS_WITH(ref::decode_attention(qv, cache, make_view<1>(static_cast<const std::int32_t*>(bad), {2})),
                        Contains(fn) && Contains("'q_indptr'"));
    std::int32_t start[2] = {1, 2};
    REQUIRE_THROWS_WITH(ref::decode_attention(qv, cache, make_view<1>(static_cast<const std::int32_t*>(start), {2})),
                        Contains("'q_indptr'"));
    REQUIRE_THROWS_WITH(ref::decode_attention(qv, cache, make_view<1>(static_cast<const std::int32_t*>(ip), {1})),
                        Contains(fn) && Contains("'q_indptr'"));
    REQUIRE_THROWS_WITH(ref::decode_attention(qv, cache, make_view<1>(static_cast<const std::int32_t*>(ip), {0})),
                        Contains("'q_indptr'"));
  }
  SECTION("heads: hq a multiple of hkv (no group of 0), head_dim equal to the cache's") {
    const std::vector<float> k2(cap * 2 * D), v2(cap * 2 * D);
    const contiguous_kv<const float> two{k2.data(), v2.data(), len, 1, cap, 2, D};
    const std::vector<float> q1(2 * 1 * D), q3(2 * 3 * D);
    REQUIRE_THROWS_WITH(ref::decode_attention(make_view<3>(q1.data(), {2, 1, D}), two, iv),
                        Contains(fn) && Contains("'q'"));
    REQUIRE_THROWS_WITH(ref::decode_attention(make_view<3>(q3.data(), {2, 3, D}), two, iv), Contains("'q'"));
    const std::vector<float> q8(2 * hq * 8);
    REQUIRE_THROWS_WITH(ref::decode_attention(make_view<3>(q8.data(), {2, hq, 8}), cache, iv),
                        Contains(fn) && Contains("'cache'"));
  }
  SECTION("cache lengths within capacity") {
    std::int32_t big[1] = {100};
    const contiguous_kv<const float> over{k.data(), v.data(), big, 1, cap, hkv, D};
    REQUIRE_THROWS_WITH(ref::decode_attention(qv, over, iv), Contains(fn) && Contains("'cache'"));
  }
  SECTION("a finite scale") {
    REQUIRE_THROWS_WITH(ref::decode_attention(qv, cache, iv, nan_v), Contains(fn) && Contains("'scale'"));
    REQUIRE_THROWS_WITH(ref::decode_attention(qv, cache, iv, inf_v), Contains("'scale'"));
    REQUIRE_NOTHROW(ref::decode_attention(qv, cache, iv, -0.5));  // the optimized path accepts negative scales
  }
}

TEST_CASE("reference::tree_attention checks its arguments") {
  const int D = 4, hq = 2, hkv = 1, n = 2;
  const std::vector<float> q = values(n * hq * D, 4), k = values(n * hkv * D, 5), v = values(n * hkv * D, 6);
  std::int32_t ip[2] = {0, 2};
  mask_word mask[2] = {0b01, 0b11};
  const auto qv = make_view<3>(q.data(), {n, hq, D});
  const auto kv = make_view<3>(k.data(), {n, hkv, D});
  const auto vv = make_view<3>(v.data(), {n, hkv, D});
  const auto iv = make_view<1>(static_cast<const std::int32_t*>(ip), {2});
  const auto mv = make_view<1>(static_cast<const mask_word*>(mask), {2});
  constexpr const char* fn = "specdec::reference::tree_attention";

  SECTION("a valid call gives the plain formula") {
    const auto got = ref::tree_attention(qv, kv, vv, iv, mv);
    const double scale = 0.5;  // 1 / sqrt(4)
    for (int h = 0; h < hq; ++h) {
      require_row(got, 0, h, attend(&q[static_cast<std::size_t>(h) * D], {&k[0]}, {&v[0]}, D, scale));
      require_row(got, 1, h,
                  attend(&q[(static_cast<std::size_t>(1) * hq + h) * D], {&k[0], &k[D]}, {&v[0], &v[D]}, D, scale));
    }
  }
  SECTION("q_indptr: at least one entry, values against q's tokens") {
    std::int32_t five[2] = {0, 5};
    mask_word m5[5] = {1, 3, 7, 15, 31};
    REQUIRE_THROWS_WITH(ref::tree_attention(qv, kv, vv, make_view<1>(static_cast<const std::int32_t*>(five), {2}),
                                            make_view<1>(static_cast<const mask_word*>(m5), {5})),
                        Contains(fn) && Contains("'q_indptr'"));
    REQUIRE_THROWS_WITH(ref::tree_attention(qv, kv, vv, make_view<1>(static_cast<const std::int32_t*>(ip), {0}), mv),
                        Contains(fn) && Contains("'q_indptr'"));
    std::int32_t down[3] = {0, 2, 1};
    REQUIRE_THROWS_WITH(ref::tree_attention(qv, kv, vv, make_view<1>(static_cast<const std::int32_t*>(down), {3}), mv),
                        Contains("'q_indptr'"));
  }
  SECTION("mask: sum over requests of n_r * words_per_row(n_r) words") {
    REQUIRE_THROWS_WITH(ref::tree_attention(qv, kv, vv, iv, make_view<1>(static_cast<const mask_word*>(mask), {1})),
                        Contains(fn) && Contains("'mask'"));
    // 65 tokens: two words per row, 130 words; 65 (one per row) is too few
    const int big = 65;
    const std::vector<float> qb(big * D), kb(big * D);
    std::vector<mask_word> mb(static_cast<std::size_t>(big) * 2, 0);
    for (int i = 0; i < big; ++i)
      mb[static_cast<std::size_t>(i) * 2 + static_cast<std::size_t>(i >> 6)] |= mask_word{1} << (i & 63);
    std::int32_t ipb[2] = {0, big};
    const auto ib = make_view<1>(static_cast<const std::int32_t*>(ipb), {2});
    const auto qbv = make_view<3>(qb.data(), {big, 1, D});
    const auto kbv = make_view<3>(kb.data(), {big, 1, D});
    REQUIRE_THROWS_WITH(ref::tree_attention(qbv, kbv, kbv, ib, make_view<1>(mb.data(), {big})), Contains("'mask'"));
    REQUIRE_NOTHROW(ref::tree_attention(qbv, kbv, kbv, ib, make_view<1>(mb.data(), {2 * big})));
  }
  SECTION("heads and spec_k / spec_v shapes") {
    REQUIRE_THROWS_WITH(ref::tree_attention(qv, make_view<3>(k.data(), {n, 0, D}), vv, iv, mv),
                        Contains(fn) && Contains("'spec_k'"));
    const std::vector<float> q3(n * 3 * D), k2(n * 2 * D);
    REQUIRE_THROWS_WITH(ref::tree_attention(make_view<3>(q3.data(), {n, 3, D}), make_view<3>(k2.data(), {n, 2, D}),
                                            make_view<3>(k2.data(), {n, 2, D}), iv, mv),
                        Contains("'q'"));
    REQUIRE_THROWS_WITH(ref::tree_attention(qv, make_view<3>(k.data(), {n, hkv, 2}), vv, iv, mv), Contains("'spec_k'"));
    REQUIRE_THROWS_WITH(ref::tree_attention(qv, kv, make_view<3>(v.data(), {1, hkv, D}), iv, mv),
                        Contains(fn) && Contains("'spec_v'"));
  }
  SECTION("a finite scale") {
    REQUIRE_THROWS_WITH(ref::tree_attention(qv, kv, vv, iv, mv, nan_v), Contains(fn) && Contains("'scale'"));
  }
}

TEST_CASE("reference::hybrid_tree_attention checks its arguments") {
  const int D = 4, hq = 2, hkv = 1, n = 2, cap = 3;
  const std::vector<float> q = values(n * hq * D, 7), k = values(n * hkv * D, 8), v = values(n * hkv * D, 9);
  const std::vector<float> ck = values(cap * hkv * D, 10), cv = values(cap * hkv * D, 11);
  std::int32_t len[1] = {2}, ip[2] = {0, 2};
  mask_word mask[2] = {0b01, 0b11};
  const contiguous_kv<const float> cache{ck.data(), cv.data(), len, 1, cap, hkv, D};
  const auto qv = make_view<3>(q.data(), {n, hq, D});
  const auto kv = make_view<3>(k.data(), {n, hkv, D});
  const auto vv = make_view<3>(v.data(), {n, hkv, D});
  const auto iv = make_view<1>(static_cast<const std::int32_t*>(ip), {2});
  const auto mv = make_view<1>(static_cast<const mask_word*>(mask), {2});
  constexpr const char* fn = "specdec::reference::hybrid_tree_attention";

  SECTION("a valid call gives the plain formula") {
    const auto got = ref::hybrid_tree_attention(qv, cache, kv, vv, iv, mv, 0.7);
    for (int h = 0; h < hq; ++h) {
      require_row(
          got, 0, h,
          attend(&q[static_cast<std::size_t>(h) * D], {&ck[0], &ck[D], &k[0]}, {&cv[0], &cv[D], &v[0]}, D, 0.7));
      require_row(got, 1, h,
                  attend(&q[(static_cast<std::size_t>(1) * hq + h) * D], {&ck[0], &ck[D], &k[0], &k[D]},
                         {&cv[0], &cv[D], &v[0], &v[D]}, D, 0.7));
    }
  }
  SECTION("bad arguments") {
    REQUIRE_THROWS_WITH(
        ref::hybrid_tree_attention(qv, cache, kv, vv, iv, make_view<1>(static_cast<const mask_word*>(mask), {3})),
        Contains(fn) && Contains("'mask'"));
    REQUIRE_THROWS_WITH(ref::hybrid_tree_attention(qv, cache, kv, make_view<3>(v.data(), {n, hkv, 2}), iv, mv),
                        Contains(fn) && Contains("'spec_v'"));
    REQUIRE_THROWS_WITH(ref::hybrid_tree_attention(qv, cache, make_view<3>(k.data(), {1, hkv, D}), vv, iv, mv),
                        Contains("'spec_k'"));
    std::int32_t big[1] = {4};
    const contiguous_kv<const float> over{ck.data(), cv.data(), big, 1, cap, hkv, D};
    REQUIRE_THROWS_WITH(ref::hybrid_tree_attention(qv, over, kv, vv, iv, mv), Contains(fn) && Contains("'cache'"));
    std::int32_t three[2] = {0, 3};
    REQUIRE_THROWS_WITH(
        ref::hybrid_tree_attention(qv, cache, kv, vv, make_view<1>(static_cast<const std::int32_t*>(three), {2}), mv),
        Contains("'q_indptr'"));
    REQUIRE_THROWS_WITH(ref::hybrid_tree_attention(qv, cache, kv, vv, iv, mv, -inf_v), Contains("'scale'"));
  }
}

TEST_CASE("reference::cross_attention checks its arguments") {
  const int D = 4, hq = 2, hkv = 1, cap = 4, R = 2;
  const std::vector<float> q = values(3 * hq * D, 12), k = values(R * cap * hkv * D, 13),
                           v = values(R * cap * hkv * D, 14);
  std::int32_t len[2] = {4, 3}, ip[3] = {0, 2, 3};
  const contiguous_kv<const float> target{k.data(), v.data(), len, R, cap, hkv, D};
  const auto qv = make_view<3>(q.data(), {3, hq, D});
  const auto iv = make_view<1>(static_cast<const std::int32_t*>(ip), {3});
  const std::vector<std::int32_t> committed{2, 1};
  constexpr const char* fn = "specdec::reference::cross_attention";

  SECTION("a valid call gives the plain formula") {
    const auto got = ref::cross_attention(qv, target, committed, iv);
    const double scale = 0.5;
    for (int t = 0; t < 3; ++t) {
      const int r = t < 2 ? 0 : 1;
      std::vector<const float*> ks, vs;
      for (int j = 0; j < committed[static_cast<std::size_t>(r)]; ++j) {
        ks.push_back(&k[(static_cast<std::size_t>(r) * cap + j) * D]);
        vs.push_back(&v[(static_cast<std::size_t>(r) * cap + j) * D]);
      }
      for (int h = 0; h < hq; ++h)
        require_row(got, t, h, attend(&q[(static_cast<std::size_t>(t) * hq + h) * D], ks, vs, D, scale));
    }
  }
  SECTION("committed: one length per request, each in [0, length(r)]") {
    REQUIRE_THROWS_WITH(ref::cross_attention(qv, target, std::vector<std::int32_t>{2}, iv),
                        Contains(fn) && Contains("'committed'"));
    REQUIRE_THROWS_WITH(ref::cross_attention(qv, target, std::vector<std::int32_t>{2, 50}, iv),
                        Contains("'committed'"));
    REQUIRE_THROWS_WITH(ref::cross_attention(qv, target, std::vector<std::int32_t>{2, 4}, iv), Contains("'committed'"));
    REQUIRE_THROWS_WITH(ref::cross_attention(qv, target, std::vector<std::int32_t>{-1, 1}, iv),
                        Contains("'committed'"));
  }
  SECTION("q_indptr, heads, head_dim, target, scale") {
    std::int32_t past[3] = {0, 2, 9};
    REQUIRE_THROWS_WITH(
        ref::cross_attention(qv, target, committed, make_view<1>(static_cast<const std::int32_t*>(past), {3})),
        Contains(fn) && Contains("'q_indptr'"));
    REQUIRE_THROWS_WITH(
        ref::cross_attention(qv, target, committed, make_view<1>(static_cast<const std::int32_t*>(ip), {2})),
        Contains("'q_indptr'"));
    const std::vector<float> k2(R * cap * 2 * D);
    const contiguous_kv<const float> two{k2.data(), k2.data(), len, R, cap, 2, D};
    const std::vector<float> q3(3 * 3 * D);
    REQUIRE_THROWS_WITH(ref::cross_attention(make_view<3>(q3.data(), {3, 3, D}), two, committed, iv), Contains("'q'"));
    const std::vector<float> q8(3 * hq * 8);
    REQUIRE_THROWS_WITH(ref::cross_attention(make_view<3>(q8.data(), {3, hq, 8}), target, committed, iv),
                        Contains("'target'"));
    std::int32_t over[2] = {9, 3};
    const contiguous_kv<const float> bad{k.data(), v.data(), over, R, cap, hkv, D};
    REQUIRE_THROWS_WITH(ref::cross_attention(qv, bad, committed, iv), Contains("'target'"));
    REQUIRE_THROWS_WITH(ref::cross_attention(qv, target, committed, iv, nan_v), Contains(fn) && Contains("'scale'"));
  }
}

TEST_CASE("reference::glide_project_queries checks its sizes") {
  const int T = 2, dD = 3, Hq = 2, Dh = 2;
  const std::vector<double> hidden = widen(values(T * dD, 15)), w = widen(values(Hq * Dh * dD, 16));
  const auto q = ref::glide_project_queries(hidden, w, T, dD, Hq, Dh);
  REQUIRE(q.size() == static_cast<std::size_t>(T * Hq * Dh));
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < Hq; ++j)
      for (int e = 0; e < Dh; ++e) {
        double s = 0;
        for (int c = 0; c < dD; ++c)
          s += hidden[static_cast<std::size_t>(t * dD + c)] * w[static_cast<std::size_t>((j * Dh + e) * dD + c)];
        REQUIRE(q[static_cast<std::size_t>((t * Hq + j) * Dh + e)] == Approx(s).margin(1e-15));
      }
  constexpr const char* fn = "specdec::reference::glide_project_queries";
  REQUIRE_THROWS_WITH(ref::glide_project_queries(std::vector<double>(8), std::vector<double>(8), 1, 8, 1, 64),
                      Contains(fn) && Contains("'w'"));
  REQUIRE_THROWS_WITH(ref::glide_project_queries(std::vector<double>(2), w, T, dD, Hq, Dh),
                      Contains(fn) && Contains("'hidden'"));
  REQUIRE_THROWS_WITH(ref::glide_project_queries(hidden, w, -1, dD, Hq, Dh), Contains("'tokens'"));
  REQUIRE_THROWS_WITH(ref::glide_project_queries(hidden, w, T, dD, Hq, -2), Contains("'head_dim'"));
  REQUIRE_THROWS_WITH(ref::glide_project_queries({}, {}, 1 << 30, 0, 1 << 30, 1 << 30), Contains("'tokens'"));
}

TEST_CASE("reference::residual_heads checks its arguments") {
  const int n = 2, H = 3, gamma = 2;
  const std::vector<double> h0 = widen(values(n * H, 17)), w = widen(values(gamma * H * H, 18)),
                            b = widen(values(gamma * H, 19));
  for (const auto act : {specdec::residual_activation::identity, specdec::residual_activation::silu}) {
    const auto got = ref::residual_heads(h0, w, b, n, H, gamma, act);
    REQUIRE(got.size() == static_cast<std::size_t>(gamma * n * H));
    std::vector<double> prev = h0;
    for (int i = 0; i < gamma; ++i) {
      std::vector<double> next(prev.size());
      for (int r = 0; r < n; ++r)
        for (int j = 0; j < H; ++j) {
          double z = b[static_cast<std::size_t>(i * H + j)];
          for (int c = 0; c < H; ++c)
            z += w[static_cast<std::size_t>((i * H + j) * H + c)] * prev[static_cast<std::size_t>(r * H + c)];
          if (act == specdec::residual_activation::silu) z /= 1.0 + std::exp(-z);
          next[static_cast<std::size_t>(r * H + j)] = z + prev[static_cast<std::size_t>(r * H + j)];
          REQUIRE(got[static_cast<std::size_t>((i * n + r) * H + j)] ==
                  Approx(next[static_cast<std::size_t>(r * H + j)]).epsilon(1e-14));
        }
      prev = next;
    }
  }
  REQUIRE(ref::residual_heads({}, {}, {}, 0, H, 0).empty());
  constexpr const char* fn = "specdec::reference::residual_heads";
  REQUIRE_THROWS_WITH(ref::residual_heads(h0, w, b, -1, H, gamma), Contains(fn) && Contains("'n'"));
  REQUIRE_THROWS_WITH(ref::residual_heads(h0, w, b, n, 0, gamma), Contains("'H'"));
  REQUIRE_THROWS_WITH(ref::residual_heads(h0, w, b, n, H, -1), Contains("'gamma'"));
  REQUIRE_THROWS_WITH(ref::residual_heads(std::vector<double>(4), w, b, n, H, gamma), Contains(fn) && Contains("'h0'"));
  REQUIRE_THROWS_WITH(ref::residual_heads(h0, std::vector<double>(4), b, n, H, gamma), Contains("'weights'"));
  REQUIRE_THROWS_WITH(ref::residual_heads(h0, w, std::vector<double>(3), n, H, gamma), Contains("'bias'"));
  REQUIRE_THROWS_WITH(ref::residual_heads(h0, w, b, n, H, gamma, static_cast<specdec::residual_activation>(7)),
                      Contains("'act'"));
}

TEST_CASE("reference::sliding_window_history checks window and rows") {
  using history = ref::sliding_window_history<float>;
  const int hkv = 2, d = 3;
  history h{hkv, d, 2, {}, {}};
  for (int i = 0; i < 3; ++i) {
    h.k.push_back(values(hkv * d, 20 + i));
    h.v.push_back(values(hkv * d, 30 + i));
  }
  REQUIRE(h.length() == 2);
  REQUIRE(h.k_row(0, 1) == h.k[1].data() + d);  // visible token 0 = the second oldest of three
  REQUIRE(h.v_row(1, 0) == h.v[2].data());
  REQUIRE_THROWS_WITH(h.k_row(5, 0), Contains("specdec::reference::sliding_window_history::k_row") && Contains("'t'"));
  REQUIRE_THROWS_WITH(h.v_row(-1, 0), Contains("specdec::reference::sliding_window_history::v_row") && Contains("'t'"));
  REQUIRE_THROWS_WITH(h.k_row(0, 2), Contains("'h'"));
  h.k[2].pop_back();
  REQUIRE_THROWS_WITH(h.k_row(1, 0), Contains("'k'"));
  REQUIRE_NOTHROW(h.k_row(0, 0));
  h.v.pop_back();
  REQUIRE_THROWS_WITH(h.v_row(0, 0), Contains("'v'"));
  for (const int window : {0, -1}) {
    history bad{1, d, window, {}, {}};
    bad.k.assign(1000, std::vector<float>(d));
    bad.v = bad.k;
    REQUIRE_THROWS_WITH(bad.length(),
                        Contains("specdec::reference::sliding_window_history::length") && Contains("'window'"));
    REQUIRE_THROWS_WITH(bad.k_row(0, 0), Contains("'window'"));
  }
}

TEST_CASE("reference::rope checks its arguments") {
  const std::vector<double> x{1, 2, 3, 4};
  std::vector<double> o(4);
  const std::int32_t pos[1] = {1};
  ref::rope({.theta = 10000.0, .style = specdec::rope_style::rotate_half}, 1, 1, 4, x.data(), pos, o.data());
  // rotate_half, R = 4: pairs (0, 2) at frequency 1 and (1, 3) at frequency 10000^(-1/2)
  REQUIRE(o[0] == Approx(1 * std::cos(1.0) - 3 * std::sin(1.0)).epsilon(1e-14));
  REQUIRE(o[2] == Approx(3 * std::cos(1.0) + 1 * std::sin(1.0)).epsilon(1e-14));
  REQUIRE(o[1] == Approx(2 * std::cos(0.01) - 4 * std::sin(0.01)).epsilon(1e-14));
  REQUIRE(o[3] == Approx(4 * std::cos(0.01) + 2 * std::sin(0.01)).epsilon(1e-14));
  const specdec::rope_params p{};
  constexpr const char* fn = "specdec::reference::rope";
  REQUIRE_THROWS_WITH(ref::rope(p, 1, 1, 4, nullptr, pos, o.data()), Contains(fn) && Contains("'x'"));
  REQUIRE_THROWS_WITH(ref::rope(p, 1, 1, 4, x.data(), pos, nullptr), Contains(fn) && Contains("'out'"));
  REQUIRE_THROWS_WITH(ref::rope(p, 1, 1, 4, x.data(), nullptr, o.data()), Contains(fn) && Contains("'positions'"));
  REQUIRE_THROWS_WITH(ref::rope(p, -1, 1, 4, x.data(), pos, o.data()), Contains("'tokens'"));
  REQUIRE_THROWS_WITH(ref::rope(p, 1, -1, 4, x.data(), pos, o.data()), Contains("'heads'"));
  const std::int32_t neg[1] = {-5};
  REQUIRE_THROWS_WITH(ref::rope(p, 1, 1, 4, x.data(), neg, o.data()), Contains(fn) && Contains("'positions'"));
  REQUIRE_THROWS_WITH(ref::rope(p, 1, 1, 3, x.data(), pos, o.data()), Contains(fn) && Contains("'head_dim'"));
  std::vector<double> inplace = x;
  REQUIRE_THROWS_WITH(ref::rope(p, 1, 1, 4, inplace.data(), pos, inplace.data()), Contains("'out'"));
  REQUIRE_NOTHROW(ref::rope(p, 0, 1, 4, nullptr, nullptr, nullptr));  // nothing to rotate
}

TEST_CASE("reference::sliding_window_attention checks its arguments") {
  using history = ref::sliding_window_history<float>;
  const int d = 4, hq = 2, hkv = 1;
  std::vector<history> hist(1, history{hkv, d, 2, {}, {}});
  for (int i = 0; i < 3; ++i) {
    hist[0].k.push_back(values(hkv * d, 40 + i));
    hist[0].v.push_back(values(hkv * d, 50 + i));
  }
  const std::vector<float> qf = values(2 * hq * d, 60), kf = values(2 * hkv * d, 61), vf = values(2 * hkv * d, 62);
  const std::vector<double> q = widen(qf), sk = widen(kf), sv = widen(vf);
  const std::vector<std::int32_t> ip{0, 2};
  const mask_word mask[2] = {0b01, 0b11};
  constexpr const char* fn = "specdec::reference::sliding_window_attention";

  SECTION("a valid call gives the plain formula") {
    const auto got = ref::sliding_window_attention<float>(q, hq, d, hist, sk.data(), sv.data(), ip, mask);
    const float *w0k = hist[0].k[1].data(), *w1k = hist[0].k[2].data(), *w0v = hist[0].v[1].data(),
                *w1v = hist[0].v[2].data();
    for (int h = 0; h < hq; ++h) {
      require_row(got, 0, h,
                  attend(&qf[static_cast<std::size_t>(h) * d], {w0k, w1k, &kf[0]}, {w0v, w1v, &vf[0]}, d, 0.5));
      require_row(got, 1, h,
                  attend(&qf[(static_cast<std::size_t>(1) * hq + h) * d], {w0k, w1k, &kf[0], &kf[d]},
                         {w0v, w1v, &vf[0], &vf[d]}, d, 0.5));
    }
    const auto nomask = ref::sliding_window_attention<float>(q, hq, d, hist, nullptr, nullptr, ip, nullptr, 0.9);
    require_row(nomask, 1, 1, attend(&qf[(1 * hq + 1) * d], {w0k, w1k}, {w0v, w1v}, d, 0.9));
  }
  SECTION("q_indptr: history.size() + 1 valid offsets; q of their tokens") {
    const std::vector<history> none;
    REQUIRE_THROWS_WITH(ref::sliding_window_attention<float>({}, hq, d, none, nullptr, nullptr, {}, nullptr),
                        Contains(fn) && Contains("'q_indptr'"));
    std::vector<history> two(2, hist[0]);
    REQUIRE_THROWS_WITH(ref::sliding_window_attention<float>(q, hq, d, two, nullptr, nullptr, ip, nullptr),
                        Contains("'q_indptr'"));
    REQUIRE_THROWS_WITH(ref::sliding_window_attention<float>(q, hq, d, two, nullptr, nullptr, {0, 2, 1}, nullptr),
                        Contains("'q_indptr'"));
    REQUIRE_THROWS_WITH(ref::sliding_window_attention<float>(q, hq, d, hist, nullptr, nullptr, {1, 2}, nullptr),
                        Contains("'q_indptr'"));
    REQUIRE_THROWS_WITH(ref::sliding_window_attention<float>(q, hq, d, hist, nullptr, nullptr, {0, 3}, nullptr),
                        Contains(fn) && Contains("'q'"));
  }
  SECTION("heads, histories, spec_v, scale") {
    REQUIRE_THROWS_WITH(ref::sliding_window_attention<float>(q, 0, d, hist, nullptr, nullptr, ip, nullptr),
                        Contains("'hq'"));
    std::vector<history> wide(1, history{2, d, 2, {}, {}});
    REQUIRE_THROWS_WITH(
        ref::sliding_window_attention<float>(widen(values(2 * 1 * d, 0)), 1, d, wide, nullptr, nullptr, ip, nullptr),
        Contains(fn) && Contains("'hq'"));
    std::vector<history> mixed(2, hist[0]);
    mixed[1].kv_heads = 2;
    REQUIRE_THROWS_WITH(ref::sliding_window_attention<float>(q, hq, d, mixed, nullptr, nullptr, {0, 1, 2}, nullptr),
                        Contains("'history'"));
    mixed[1] = hist[0];
    mixed[1].head_dim = 8;
    REQUIRE_THROWS_WITH(ref::sliding_window_attention<float>(q, hq, d, mixed, nullptr, nullptr, {0, 1, 2}, nullptr),
                        Contains("'history'"));
    mixed[1] = hist[0];
    mixed[1].window = 0;
    REQUIRE_THROWS_WITH(ref::sliding_window_attention<float>(q, hq, d, mixed, nullptr, nullptr, {0, 1, 2}, nullptr),
                        Contains("'history'"));
    REQUIRE_THROWS_WITH(ref::sliding_window_attention<float>(q, hq, d, hist, sk.data(), nullptr, ip, mask),
                        Contains(fn) && Contains("'spec_v'"));
    REQUIRE_THROWS_WITH(ref::sliding_window_attention<float>(q, hq, d, hist, nullptr, nullptr, ip, nullptr, inf_v),
                        Contains("'scale'"));
    REQUIRE_THROWS_WITH(ref::sliding_window_attention<float>(q, hq, 0, hist, nullptr, nullptr, ip, nullptr),
                        Contains("'head_dim'"));
  }
}
