// Shared helpers of the cross-attention tests: target caches (contiguous NHD/HND and paged views
// of one random pool) and a differential check against reference::cross_attention. Casts, random
// fills and the closeness check come from test_random_util.hpp (shared with the sliding-window tests).
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "specdec/attention/cross_attention.hpp"
#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/kv/paged_kv.hpp"
#include "specdec/reference/attention.hpp"
#include "specdec/reference/cross_attention.hpp"
#include "test_random_util.hpp"

namespace xtest {

using attn_rand::cast;
using attn_rand::fill_normal;
using attn_rand::require_close;
using attn_rand::wide;

// A target cache with R requests of capacity C, filled with random values, in one of three layouts.
template <class T>
struct target {
  int R, C, hkv, d;
  std::vector<T> k, v;
  std::vector<std::int32_t> lengths, page_indptr, page_indices;
  static constexpr int page = 16;
  target(int R_, int C_, int hkv_, int d_, std::mt19937& rng) : R(R_), C(C_), hkv(hkv_), d(d_) {
    k.resize(static_cast<std::size_t>(R) * C * hkv * d);
    v.resize(k.size());
    fill_normal(k, rng);
    fill_normal(v, rng);
    for (int r = 0; r < R; ++r) lengths.push_back(static_cast<std::int32_t>(rng() % (C + 1)));
    // paged view of the same pool: C / page pages per request, shuffled
    const int per = C / page, pages = R * per;
    std::vector<std::int32_t> perm(static_cast<std::size_t>(pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    page_indptr.push_back(0);
    for (int r = 0; r < R; ++r) {
      for (int i = 0; i < per; ++i) page_indices.push_back(perm[static_cast<std::size_t>(r * per + i)]);
      page_indptr.push_back(page_indptr.back() + per);
    }
  }
  specdec::contiguous_kv<T> nhd() { return {k.data(), v.data(), lengths.data(), R, C, hkv, d}; }
  specdec::contiguous_kv<T, specdec::kv_order::hnd> hnd() { return {k.data(), v.data(), lengths.data(), R, C, hkv, d}; }
  specdec::paged_kv<T> paged() {
    return {k.data(), v.data(), page_indptr.data(), page_indices.data(), lengths.data(), R, R * (C / page), page,
            hkv,      d};
  }
};

template <class T, class L>
void check_layout(const L& cache, int hq, int d, const std::vector<int>& nq, std::mt19937& rng, double atol,
                  double rtol) {
  const int R = cache.num_requests();
  std::vector<std::int32_t> ip{0};
  for (int r = 0; r < R; ++r) ip.push_back(ip.back() + nq[static_cast<std::size_t>(r)]);
  const int N = ip.back();
  std::vector<T> q(static_cast<std::size_t>(N) * hq * d);
  fill_normal(q, rng);
  std::vector<std::int32_t> committed;
  for (int r = 0; r < R; ++r) committed.push_back(static_cast<std::int32_t>(rng() % (cache.length(r) + 1)));
  const auto qv = specdec::make_view<3>(q.data(), {N, hq, d});
  const auto iv = specdec::make_view<1>(ip.data(), {R + 1});
  std::vector<T> out(q.size());
  std::vector<float> lse(static_cast<std::size_t>(N) * hq);
  const auto ov = specdec::make_view<3>(out.data(), {N, hq, d});
  const auto lv = specdec::make_view<2>(lse.data(), {N, hq});
  // committed prefix
  specdec::cross_attention(specdec::host{}, qv, cache, committed, iv, ov, lv);
  require_close(specdec::reference::cross_attention(qv, cache, committed, iv), out, lse, atol, rtol);
  // whole target length
  std::vector<std::int32_t> all;
  for (int r = 0; r < R; ++r) all.push_back(cache.length(r));
  specdec::cross_attention(specdec::host{}, qv, cache, iv, ov, lv, {.kv_split_size = 64});
  require_close(specdec::reference::cross_attention(qv, cache, all, iv), out, lse, atol, rtol);
}

template <class T>
void sweep(double atol, double rtol, std::uint32_t seed, bool light = false) {
  // `light` (used for the 16-bit types, whose software conversions are slow under sanitizers) keeps
  // every layout and GQA ratio but with a smaller cache and fewer queries.
  std::mt19937 rng(seed);
  const int capacity = light ? 96 : 160;
  for (int d : {64, 128})
    for (auto [hq, hkv] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{8, 1}}) {
      target<T> tg(3, capacity, hkv, d, rng);
      tg.lengths[0] = 0;  // an empty target cache: out 0, lse -inf
      check_layout<T>(tg.nhd(), hq, d, {4, 1, light ? 3 : 9}, rng, atol, rtol);
      check_layout<T>(tg.hnd(), hq, d, {0, light ? 5 : 16, 3}, rng, atol, rtol);
      check_layout<T>(tg.paged(), hq, d, {2, 5, light ? 17 : 64}, rng, atol, rtol);
    }
}

}  // namespace xtest
