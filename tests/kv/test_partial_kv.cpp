// TokenSwift's dynamic partial KV cache (§3.3): Eq. 2 importance against a double reference and a
// hand example; rebuild's selection against brute force (sinks, top-(|B|-|S|) by importance,
// decreasing order, ties by index); the append/replace policy and the rebuild trigger (TokenSwift
// Algorithm 1, line 5); attention over indexed_kv equal to attention over a compacted copy
// (contiguous and paged bases); no allocation and a fixed index buffer over 20K appends; bad inputs
// named; partial_kv_select_batch (the batch form a GPU engine calls) equal to rebuild's lists, per kv
// head and shared, and the cuda kernel's selection rule, run serially, equal to the host's.
#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "specdec/attention/decode_attention.hpp"
#include "specdec/core/topk_batch.hpp"
#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/kv/paged_kv.hpp"
#include "specdec/kv/partial_kv.hpp"

#include "common/alloc_counter.hpp"

namespace {

using specdec::contiguous_kv;
using specdec::partial_kv_index;

// One request batch of random K/V in a contiguous NHD cache.
template <class T>
struct cache_data {
  int requests, max_tokens, hkv, d;
  std::vector<T> k, v;
  std::vector<std::int32_t> lens;
  cache_data(int r, int cap, int h, int dim, std::vector<std::int32_t> l, std::uint32_t seed)
      : requests(r), max_tokens(cap), hkv(h), d(dim), lens(std::move(l)) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1, 1);
    k.resize(static_cast<std::size_t>(r) * cap * h * dim);
    v.resize(k.size());
    for (auto& x : k) x = specdec::from_float<T>(u(rng));
    for (auto& x : v) x = specdec::from_float<T>(u(rng));
  }
  contiguous_kv<T> layout() { return {k.data(), v.data(), lens.data(), requests, max_tokens, hkv, d}; }
};

std::vector<float> random_q(int hq, int d, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> q(static_cast<std::size_t>(hq) * d);
  for (auto& x : q) x = u(rng);
  return q;
}

// Eq. 2 in double, straight from the paper: sum over the group's query heads of q_j . K_i.
template <class L>
std::vector<double> importance_ref(const std::vector<float>& q, int hq, const L& cache, int r) {
  const int hkv = cache.num_kv_heads(), d = cache.head_dim(), g = hq / hkv, len = cache.length(r);
  std::vector<double> s(static_cast<std::size_t>(hkv) * len, 0.0);
  for (int h = 0; h < hkv; ++h)
    for (int i = 0; i < len; ++i)
      for (int j = h * g; j < (h + 1) * g; ++j)
        for (int c = 0; c < d; ++c)
          s[static_cast<std::size_t>(h) * len + i] +=
              static_cast<double>(q[static_cast<std::size_t>(j) * d + c]) * specdec::to_float(cache.k_row(r, i, h)[c]);
  return s;
}

}  // namespace

TEST_CASE("partial_kv: Eq. 2 importance on a hand example") {
  // 2 query heads sharing 1 kv head, D = 2: q0 = (1, 0), q1 = (0, 1), so score_i = K_i[0] + K_i[1].
  std::vector<float> k = {1, 1, 2, -1, 0, 3, -2, -2}, v(k.size(), 0.0f);
  std::vector<std::int32_t> len = {4};
  const contiguous_kv<float> cache{k.data(), v.data(), len.data(), 1, 4, 1, 2};
  std::vector<float> q = {1, 0, 0, 1}, s(4, -99.0f);
  specdec::kv_importance(specdec::host{}, specdec::make_view<2>(q.data(), {2, 2}), cache, 0,
                         specdec::make_view<2>(s.data(), {1, 4}));
  CHECK(s == std::vector<float>{2, 1, 3, -4});
  // Budget 3 with 1 sink: token 0, then tokens 2 (score 3) and 1 (score 1), stored in token order;
  // token 1 (the less important) is evicted first.
  partial_kv_index idx(1, 1, 3, 1);
  idx.rebuild(specdec::host{}, 0, specdec::make_view<2>(q.data(), {2, 2}), cache);
  const auto sel = idx.indices(0, 0);
  CHECK(std::vector<std::int32_t>(sel.begin(), sel.end()) == std::vector<std::int32_t>{0, 1, 2});
  const auto ev = idx.eviction_order(0, 0);
  CHECK(std::vector<std::int32_t>(ev.begin(), ev.end()) == std::vector<std::int32_t>{1, 2});
}

TEST_CASE("partial_kv: kv_importance matches the double reference (GQA 1/4/8, fp32 and half, paged)") {
  for (int ratio : {1, 4, 8}) {
    const int hkv = 2, hq = hkv * ratio, d = 64;
    cache_data<float> f(2, 300, hkv, d, {0, 257}, 11 + ratio);
    cache_data<specdec::half> hf(2, 300, hkv, d, {1, 300}, 21 + ratio);
    const auto q = random_q(hq, d, 5 + ratio);
    auto check = [&](const auto& cache, int r, auto qv) {
      const int len = cache.length(r);
      std::vector<float> s(static_cast<std::size_t>(hkv) * std::max(len, 1), 0.0f);
      specdec::kv_importance(specdec::host{}, qv, cache, r, specdec::make_view<2>(s.data(), {hkv, std::max(len, 1)}));
      const auto ref = importance_ref(q, hq, cache, r);
      for (int h = 0; h < hkv; ++h)
        for (int i = 0; i < len; ++i)
          CHECK(s[static_cast<std::size_t>(h) * std::max(len, 1) + i] ==
                Approx(ref[static_cast<std::size_t>(h) * len + i]).epsilon(1e-5).margin(1e-4));
    };
    INFO("ratio " << ratio);
    for (int r = 0; r < 2; ++r) check(f.layout(), r, specdec::make_view<2>(q.data(), {hq, d}));
    for (int r = 0; r < 2; ++r) check(hf.layout(), r, specdec::make_view<2>(q.data(), {hq, d}));
    // Paged copy of the half cache (pages of 16, shuffled page order).
    const int page = 16, pages_per = (300 + page - 1) / page;
    std::vector<specdec::half> kp(static_cast<std::size_t>(2) * pages_per * page * hkv * d), vp(kp.size());
    std::vector<std::int32_t> indptr = {0, pages_per, 2 * pages_per}, indices(2 * pages_per);
    std::iota(indices.begin(), indices.end(), 0);
    std::shuffle(indices.begin(), indices.end(), std::mt19937(3));
    auto hl = hf.layout();
    specdec::paged_kv<specdec::half> paged{kp.data(), vp.data(), indptr.data(), indices.data(), hf.lens.data(), 2,
                                          2 * pages_per, page, hkv, d};
    for (int r = 0; r < 2; ++r)
      for (int t = 0; t < hl.length(r); ++t)
        for (int h = 0; h < hkv; ++h) std::copy_n(hl.k_row(r, t, h), d, paged.k_row(r, t, h));
    for (int r = 0; r < 2; ++r) check(paged, r, specdec::make_view<2>(q.data(), {hq, d}));
  }
}

TEST_CASE("partial_kv: rebuild keeps the sinks and the top |B|-|S| by importance, evicting the least important first") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    const int hkv = 1 + trial % 3, hq = hkv * (1 + trial % 4), d = 16;
    const int len = static_cast<int>(rng() % 200), budget = 1 + static_cast<int>(rng() % 64);
    const int sink = static_cast<int>(rng() % (budget + 1));
    cache_data<float> c(1, 200, hkv, d, {len}, 100 + trial);
    // Quantise some keys so equal scores (ties) occur.
    if (trial % 2)
      for (auto& x : c.k) x = std::round(x * 2.0f) / 2.0f;
    const auto q = random_q(hq, d, 200 + trial);
    const auto qv = specdec::make_view<2>(q.data(), {hq, d});
    partial_kv_index idx(1, hkv, budget, sink);
    idx.rebuild(specdec::host{}, 0, qv, c.layout());
    std::vector<float> s(static_cast<std::size_t>(hkv) * std::max(len, 1));
    specdec::kv_importance(specdec::host{}, qv, c.layout(), 0, specdec::make_view<2>(s.data(), {hkv, std::max(len, 1)}));
    INFO("trial " << trial << " len " << len << " budget " << budget << " sink " << sink);
    REQUIRE(idx.size(0) == std::min(budget, len));
    for (int h = 0; h < hkv; ++h) {
      const float* sh = s.data() + static_cast<std::size_t>(h) * std::max(len, 1);
      // Brute force: every non-sink token, stable-sorted by decreasing score.
      std::vector<std::int32_t> want(static_cast<std::size_t>(std::min(sink, len)));
      std::iota(want.begin(), want.end(), 0);
      std::vector<std::int32_t> rest;
      for (int i = std::min(sink, len); i < len; ++i) rest.push_back(i);
      std::stable_sort(rest.begin(), rest.end(), [&](int a, int b) { return sh[a] > sh[b]; });
      rest.resize(static_cast<std::size_t>(std::min<int>(budget - sink, static_cast<int>(rest.size()))));
      // Stored in token order (the view reads the cache in address order).
      std::vector<std::int32_t> sorted_rest(rest);
      std::sort(sorted_rest.begin(), sorted_rest.end());
      want.insert(want.end(), sorted_rest.begin(), sorted_rest.end());
      const auto got = idx.indices(0, h);
      CHECK(std::vector<std::int32_t>(got.begin(), got.end()) == want);
      // Eviction order: the slots left free (from |B| - 1 down), then the selected tokens from the
      // least important up (the reverse of the brute-force ranking).
      std::vector<std::int32_t> want_ev;
      for (int slot = budget - 1; slot >= static_cast<int>(want.size()) && slot >= sink; --slot) want_ev.push_back(slot);
      for (auto it = rest.rbegin(); it != rest.rend(); ++it)
        want_ev.push_back(static_cast<std::int32_t>(std::find(want.begin(), want.end(), *it) - want.begin()));
      const auto ev = idx.eviction_order(0, h);
      CHECK(std::vector<std::int32_t>(ev.begin(), ev.end()) == want_ev);
    }
    CHECK(idx.seen(0) == len);
    CHECK_FALSE(idx.needs_rebuild(0));
  }
}

TEMPLATE_TEST_CASE("partial_kv: kv_importance_batch equals kv_importance per request, bit for bit", "", float,
                   specdec::half) {
  const int R = 3, cap = 300, hkv = 2, hq = 8, d = 32;
  cache_data<TestType> c(R, cap, hkv, d, {0, 150, 300}, 41);
  std::vector<TestType> q(static_cast<std::size_t>(R) * hq * d);
  {
    const auto qf = random_q(R * hq, d, 42);
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = specdec::from_float<TestType>(qf[i]);
  }
  const float sentinel = 7.0f;
  std::vector<float> scores(static_cast<std::size_t>(R) * hkv * cap, sentinel);
  std::vector<std::int32_t> status{5, 5, 5};
  specdec::kv_importance_batch(specdec::host{.num_threads = 2}, specdec::make_view<3>(q.data(), {R, hq, d}), c.layout(),
                               specdec::make_view<3>(scores.data(), {R, hkv, cap}),
                               specdec::make_view<1>(status.data(), {3}));
  CHECK(status == std::vector<std::int32_t>{0, -1, -1});
  for (int r = 0; r < R; ++r) {
    std::vector<float> one(static_cast<std::size_t>(hkv) * cap, sentinel);
    specdec::kv_importance(specdec::host{}, specdec::make_view<2>(q.data() + static_cast<std::size_t>(r) * hq * d, {hq, d}),
                           c.layout(), r, specdec::make_view<2>(one.data(), {hkv, cap}));
    const float* got = scores.data() + static_cast<std::size_t>(r) * hkv * cap;
    for (std::size_t i = 0; i < one.size(); ++i) CHECK(std::bit_cast<std::uint32_t>(got[i]) == std::bit_cast<std::uint32_t>(one[i]));
  }
  // Fewer columns than request 2's length: refused before any score is written.
  std::vector<float> short_scores(static_cast<std::size_t>(R) * hkv * 200, sentinel);
  CHECK_THROWS_WITH(specdec::kv_importance_batch(specdec::host{}, specdec::make_view<3>(q.data(), {R, hq, d}), c.layout(),
                                                 specdec::make_view<3>(short_scores.data(), {R, hkv, 200}),
                                                 specdec::make_view<1>(status.data(), {3})),
                    Catch::Contains("kv_importance_batch") && Catch::Contains("request 2 has length 300"));
  CHECK(std::all_of(short_scores.begin(), short_scores.end(), [&](float x) { return x == sentinel; }));
  // Shapes: q's request count must be the cache's.
  CHECK_THROWS_WITH(specdec::kv_importance_batch(specdec::host{}, specdec::make_view<3>(q.data(), {R - 1, hq, d}),
                                                 c.layout(), specdec::make_view<3>(scores.data(), {R, hkv, cap}),
                                                 specdec::make_view<1>(status.data(), {3})),
                    Catch::Contains("'q'"));
}

TEST_CASE("partial_kv: a NaN importance (a NaN in a key row) ranks below every score, as in topk") {
  // 12 tokens, one kv head, budget 4 without sinks: tokens 3 and 8 have NaN keys, so NaN scores;
  // the selection is the top 4 of the ten finite scores, and the NaN tokens are never kept over them.
  const int len = 12, d = 16;
  cache_data<float> c(1, len, 1, d, {len}, 5);
  for (int t : {3, 8}) c.k[static_cast<std::size_t>(t) * d + 2] = std::numeric_limits<float>::quiet_NaN();
  const auto q = random_q(1, d, 6);
  const auto qv = specdec::make_view<2>(q.data(), {1, d});
  std::vector<float> s(len);
  specdec::kv_importance(specdec::host{}, qv, c.layout(), 0, specdec::make_view<2>(s.data(), {1, len}));
  REQUIRE(std::isnan(s[3]));
  REQUIRE(std::isnan(s[8]));
  std::vector<std::int32_t> finite;
  for (int i = 0; i < len; ++i)
    if (!std::isnan(s[static_cast<std::size_t>(i)])) finite.push_back(i);
  std::stable_sort(finite.begin(), finite.end(), [&](int a, int b) { return s[static_cast<std::size_t>(a)] > s[static_cast<std::size_t>(b)]; });
  finite.resize(4);
  std::sort(finite.begin(), finite.end());
  partial_kv_index idx(1, 1, 4, 0);
  idx.rebuild(specdec::host{}, 0, qv, c.layout());
  const auto got = idx.indices(0, 0);
  CHECK(std::vector<std::int32_t>(got.begin(), got.end()) == finite);
  // With a budget above the finite count the NaN tokens come last, lower index first: the least
  // important, so the first evicted.
  partial_kv_index all(1, 1, len, 0);
  all.rebuild(specdec::host{}, 0, qv, c.layout());
  const auto ev = all.eviction_order(0, 0);
  CHECK(all.indices(0, 0)[static_cast<std::size_t>(ev[0])] == 8);
  CHECK(all.indices(0, 0)[static_cast<std::size_t>(ev[1])] == 3);
}

TEST_CASE("partial_kv: shared selection keeps one set for all kv heads, ranked by the summed scores") {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 20; ++trial) {
    const int hkv = 2 + trial % 3, hq = hkv * (1 + trial % 2), d = 16;
    const int len = 1 + static_cast<int>(rng() % 150), budget = 1 + static_cast<int>(rng() % 48);
    const int sink = static_cast<int>(rng() % (budget + 1));
    cache_data<float> c(1, 150, hkv, d, {len}, 300 + trial);
    const auto q = random_q(hq, d, 400 + trial);
    const auto qv = specdec::make_view<2>(q.data(), {hq, d});
    partial_kv_index idx(1, hkv, budget, sink, specdec::partial_kv_selection::shared);
    CHECK(idx.selection() == specdec::partial_kv_selection::shared);
    idx.rebuild(specdec::host{}, 0, qv, c.layout());
    std::vector<float> s(static_cast<std::size_t>(hkv) * len);
    specdec::kv_importance(specdec::host{}, qv, c.layout(), 0, specdec::make_view<2>(s.data(), {hkv, len}));
    const int keep = std::min(sink, len);
    std::vector<std::int32_t> rest;
    for (int i = keep; i < len; ++i) rest.push_back(i);
    // float sums as the index adds them (head 0 + head 1 + ...), ties by token index.
    std::vector<float> tf(static_cast<std::size_t>(len), 0.0f);
    for (int i = 0; i < len; ++i) {
      float acc = s[static_cast<std::size_t>(i)];
      for (int h = 1; h < hkv; ++h) acc += s[static_cast<std::size_t>(h) * len + i];
      tf[static_cast<std::size_t>(i)] = acc;
    }
    std::stable_sort(rest.begin(), rest.end(), [&](int a, int b) { return tf[a] > tf[b]; });
    rest.resize(static_cast<std::size_t>(std::min<int>(budget - sink, static_cast<int>(rest.size()))));
    std::vector<std::int32_t> want(static_cast<std::size_t>(keep));
    std::iota(want.begin(), want.end(), 0);
    std::vector<std::int32_t> sorted_rest(rest);
    std::sort(sorted_rest.begin(), sorted_rest.end());
    want.insert(want.end(), sorted_rest.begin(), sorted_rest.end());
    INFO("trial " << trial << " len " << len << " budget " << budget << " sink " << sink);
    for (int h = 0; h < hkv; ++h) {
      const auto got = idx.indices(0, h);
      CHECK(std::vector<std::int32_t>(got.begin(), got.end()) == want);
      const auto e0 = idx.eviction_order(0, 0), eh = idx.eviction_order(0, h);
      CHECK(std::vector<std::int32_t>(eh.begin(), eh.end()) == std::vector<std::int32_t>(e0.begin(), e0.end()));
    }
    // Appends replace the same slot in every head.
    idx.append(0, len);
    idx.append(0, len + budget);
    for (int h = 1; h < hkv; ++h) {
      const auto a = idx.indices(0, 0), b = idx.indices(0, h);
      CHECK(std::vector<std::int32_t>(a.begin(), a.end()) == std::vector<std::int32_t>(b.begin(), b.end()));
    }
  }
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(partial_kv_index(1, 1, 4, 1, static_cast<specdec::partial_kv_selection>(7)),
                    Contains("'selection'") && Contains("got 7"));
}

TEST_CASE("partial_kv: new tokens fill, then replace the newest-filled, then the least important; Algorithm 1's trigger (line 5)") {
  const int budget = 6, sink = 2;
  std::vector<float> q = {1, 0};
  // 4 tokens, scores 0.1, 0.4, 0.3, 0.2: all fit (size 4 < budget 6).
  std::vector<float> k = {0.1f, 0, 0.4f, 0, 0.3f, 0, 0.2f, 0}, v(k.size());
  std::vector<std::int32_t> len = {4};
  const contiguous_kv<float> cache{k.data(), v.data(), len.data(), 1, 4, 1, 2};
  partial_kv_index idx(1, 1, budget, sink);
  idx.rebuild(specdec::host{}, 0, specdec::make_view<2>(q.data(), {1, 2}), cache);
  auto slots = [&] {
    const auto s = idx.indices(0, 0);
    return std::vector<std::int32_t>(s.begin(), s.end());
  };
  CHECK(slots() == std::vector<std::int32_t>{0, 1, 2, 3});  // sinks 0, 1; then 2 (0.3) before 3 (0.2)
  idx.append(0, 6);                                         // two free slots
  CHECK(slots() == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5});
  CHECK_FALSE(idx.needs_rebuild(0));
  {
    const auto ev = idx.eviction_order(0, 0);  // free-at-rebuild slots 5, 4, then 3 (0.2), 2 (0.3)
    CHECK(std::vector<std::int32_t>(ev.begin(), ev.end()) == std::vector<std::int32_t>{5, 4, 3, 2});
  }
  idx.append(0, 9);  // 6, 7, 8 replace slots 5, 4, 3
  CHECK(slots() == std::vector<std::int32_t>{0, 1, 2, 8, 7, 6});
  CHECK_FALSE(idx.needs_rebuild(0));
  idx.append(0, 10);  // 9 replaces slot 2: |B| - |S| = 4 placed, not yet more than 4
  CHECK(slots() == std::vector<std::int32_t>{0, 1, 9, 8, 7, 6});
  CHECK_FALSE(idx.needs_rebuild(0));
  idx.append(0, 11);  // the 5th replacement since the rebuild: more than |B| - |S|; wraps to slot 5
                      // (Algorithm 1, line 5's |C_full| - e > |B| - |S| held from 9 on: it counts the
                      // two tokens that filled free slots, which replaced nothing)
  CHECK(slots() == std::vector<std::int32_t>{0, 1, 9, 8, 7, 10});
  CHECK(idx.needs_rebuild(0));
  CHECK(idx.seen(0) == 11);
  // |S| = |B|: only the sinks are ever shown.
  partial_kv_index all_sink(1, 1, 2, 2);
  all_sink.rebuild(specdec::host{}, 0, specdec::make_view<2>(q.data(), {1, 2}), cache);
  all_sink.append(0, 50);
  const auto s2 = all_sink.indices(0, 0);
  CHECK(std::vector<std::int32_t>(s2.begin(), s2.end()) == std::vector<std::int32_t>{0, 1});
  CHECK_FALSE(all_sink.needs_rebuild(0));
  // clear(r): the request's selection as constructed (a released or reused slot): nothing shown or
  // seen, the eviction list of a fresh index, and a layout over a cache whose length dropped to 0
  // passes the layout check again.
  idx.clear(0);
  CHECK(idx.size(0) == 0);
  CHECK(idx.seen(0) == 0);
  CHECK_FALSE(idx.needs_rebuild(0));
  const partial_kv_index fresh(1, 1, budget, sink);
  const auto e0 = idx.eviction_order(0, 0), e1 = fresh.eviction_order(0, 0);
  CHECK(std::vector<std::int32_t>(e0.begin(), e0.end()) == std::vector<std::int32_t>(e1.begin(), e1.end()));
  len[0] = 0;
  CHECK_NOTHROW(validate_kv_layout(idx.layout(cache), "test", "cache"));
  CHECK_THROWS_AS(idx.clear(1), specdec::invalid_argument);
}

TEST_CASE("partial_kv: attention over indexed_kv equals attention over a compacted copy") {
  const int hkv = 2, hq = 8, d = 64, budget = 96, sink = 4;
  cache_data<float> c(3, 400, hkv, d, {400, 37, 0}, 9);
  std::vector<float> q = random_q(hq * 3, d, 10);  // one decode token per request
  partial_kv_index idx(3, hkv, budget, sink);
  for (int r = 0; r < 3; ++r)
    idx.rebuild(specdec::host{}, r, specdec::make_view<2>(q.data() + static_cast<std::size_t>(r) * hq * d, {hq, d}),
                c.layout());
  idx.append(0, 400);  // nothing new
  const auto view = idx.layout(c.layout());
  static_assert(specdec::kv_layout<std::remove_const_t<decltype(view)>>);
  // Compacted copy: slot t of (r, h) holds the row the view shows there.
  std::vector<float> ck(static_cast<std::size_t>(3) * budget * hkv * d), cv(ck.size());
  std::vector<std::int32_t> clen = {idx.size(0), idx.size(1), idx.size(2)};
  const contiguous_kv<float> compact{ck.data(), cv.data(), clen.data(), 3, budget, hkv, d};
  for (int r = 0; r < 3; ++r)
    for (int h = 0; h < hkv; ++h)
      for (int t = 0; t < clen[r]; ++t) {
        std::copy_n(view.k_row(r, t, h), d, compact.k_row(r, t, h));
        std::copy_n(view.v_row(r, t, h), d, compact.v_row(r, t, h));
        CHECK(view.k_row(r, t, h) == c.layout().k_row(r, idx.indices(r, h)[t], h));  // read in place
      }
  CHECK(clen == std::vector<std::int32_t>{budget, 37, 0});
  std::vector<std::int32_t> ip = {0, 1, 2, 3};
  std::vector<float> o1(q.size()), o2(q.size()), l1(3 * hq), l2(3 * hq);
  auto qv = specdec::make_view<3>(q.data(), {3, hq, d});
  auto ipv = specdec::make_view<1>(ip.data(), {4});
  specdec::decode_attention(specdec::host{}, qv, view, ipv, specdec::make_view<3>(o1.data(), {3, hq, d}),
                            specdec::make_view<2>(l1.data(), {3, hq}));
  specdec::decode_attention(specdec::host{}, qv, compact, ipv, specdec::make_view<3>(o2.data(), {3, hq, d}),
                            specdec::make_view<2>(l2.data(), {3, hq}));
  CHECK(o1 == o2);  // same rows in the same order: the same arithmetic
  CHECK(l1 == l2);
  CHECK(std::isinf(l1[2 * hq]));  // request 2: empty cache
}

TEST_CASE("partial_kv: compact_partial_kv follows the view slot by slot, copying only what changed") {
  const int hkv = 3, hq = 6, d = 64, budget = 40, sink = 4;
  for (auto sel : {specdec::partial_kv_selection::per_kv_head, specdec::partial_kv_selection::shared}) {
    // Capacity 300: requests 0 and 1 start at 200 and 25 tokens and grow; request 2 stays empty.
    cache_data<specdec::half> c(3, 300, hkv, d, {200, 25, 0}, 21);
    const auto q = random_q(hq * 3, d, 22);
    partial_kv_index idx(3, hkv, budget, sink, sel);
    specdec::compact_partial_kv<specdec::half> copy(3, hkv, budget, d);
    CHECK(copy.bytes() == std::size_t{2} * 3 * budget * hkv * d * sizeof(specdec::half));
    auto qr = [&](int r) { return specdec::make_view<2>(q.data() + static_cast<std::size_t>(r) * hq * d, {hq, d}); };
    auto same_rows = [&] {
      const auto view = idx.layout(c.layout());
      const auto dense = copy.layout();
      for (int r = 0; r < 3; ++r) {
        REQUIRE(dense.length(r) == view.length(r));
        for (int h = 0; h < hkv; ++h)
          for (int t = 0; t < view.length(r); ++t) {
            REQUIRE(std::equal(view.k_row(r, t, h), view.k_row(r, t, h) + d, dense.k_row(r, t, h)));
            REQUIRE(std::equal(view.v_row(r, t, h), view.v_row(r, t, h) + d, dense.v_row(r, t, h)));
          }
      }
    };
    for (int r = 0; r < 3; ++r) idx.rebuild(specdec::host{}, r, qr(r), c.layout());
    CHECK(copy.sync(idx, c.layout(), 0) == std::int64_t{budget} * hkv);  // everything after a rebuild
    CHECK(copy.sync(idx, c.layout(), 1) == std::int64_t{25} * hkv);
    CHECK(copy.sync(idx, c.layout(), 2) == 0);
    same_rows();
    CHECK(copy.sync(idx, c.layout(), 0) == 0);  // nothing changed
    // One committed token: request 0 (full) replaces one slot per head, request 1 fills one.
    c.lens = {201, 26, 0};
    idx.append(0, 201);
    idx.append(1, 26);
    CHECK(copy.sync(idx, c.layout(), 0) == hkv);
    CHECK(copy.sync(idx, c.layout(), 1) == hkv);
    same_rows();
    // Many tokens, a rebuild, and attention over the copy equals attention over the view.
    c.lens = {290, 90, 0};
    idx.append(0, 290);
    idx.append(1, 90);
    CHECK(idx.needs_rebuild(0));
    idx.rebuild(specdec::host{}, 0, qr(0), c.layout());
    for (int r = 0; r < 3; ++r) copy.sync(idx, c.layout(), r);
    same_rows();
    std::vector<std::int32_t> ip = {0, 1, 2, 3};
    std::vector<specdec::half> qh(q.size()), o1(q.size()), o2(q.size());
    for (std::size_t i = 0; i < q.size(); ++i) qh[i] = specdec::half(q[i]);
    std::vector<float> l1(3 * hq), l2(3 * hq);
    const auto qv = specdec::make_view<3>(std::as_const(qh).data(), {3, hq, d});
    const auto ipv = specdec::make_view<1>(ip.data(), {4});
    specdec::decode_attention(specdec::host{}, qv, idx.layout(c.layout()), ipv, specdec::make_view<3>(o1.data(), {3, hq, d}),
                              specdec::make_view<2>(l1.data(), {3, hq}));
    specdec::decode_attention(specdec::host{}, qv, copy.layout(), ipv, specdec::make_view<3>(o2.data(), {3, hq, d}),
                              specdec::make_view<2>(l2.data(), {3, hq}));
    for (std::size_t i = 0; i < o1.size(); ++i) REQUIRE(specdec::to_float(o1[i]) == specdec::to_float(o2[i]));
    CHECK(l1 == l2);
    // invalidate: the next sync copies every shown row again; sync allocates nothing.
    copy.invalidate(1);
    CHECK(copy.layout().length(1) == 0);
    {
      specdec_test::allocation_scope scope;
      CHECK(copy.sync(idx, c.layout(), 1) == std::int64_t{idx.size(1)} * hkv);
      CHECK(scope.count() == 0);
    }
  }
  using Catch::Matchers::Contains;
  cache_data<float> c(1, 50, 2, 64, {50}, 5);
  partial_kv_index idx(1, 2, 8, 2);
  specdec::compact_partial_kv<float> copy(1, 2, 8, 64);
  CHECK_THROWS_WITH(copy.sync(idx, c.layout(), 1), Contains("'request'") && Contains("got 1"));
  partial_kv_index other(1, 2, 16, 2);
  CHECK_THROWS_WITH(copy.sync(other, c.layout(), 0), Contains("'index.budget()'") && Contains("got 16"));
  cache_data<float> wide(1, 50, 2, 128, {50}, 6);
  CHECK_THROWS_WITH(copy.sync(idx, wide.layout(), 0), Contains("'full.head_dim()'") && Contains("got 128"));
  CHECK_THROWS_WITH(copy.invalidate(-1), Contains("'request'"));
  CHECK_THROWS_WITH(specdec::compact_partial_kv<float>(1, 0, 8, 64), Contains("'kv_heads'"));
  // An index that shows a token the full cache no longer has (cache truncated behind its back).
  const auto q = random_q(4, 64, 7);
  idx.rebuild(specdec::host{}, 0, specdec::make_view<2>(q.data(), {4, 64}), c.layout());
  c.lens = {5};
  CHECK_THROWS_WITH(copy.sync(idx, c.layout(), 0), Contains("'index'") && Contains("full.length(request) = 5"));
}

TEST_CASE("partial_kv: a rejected sync leaves the compact copy bit-identical; sync and rebuild validate the cache first") {
  using Catch::Matchers::Contains;
  const int hkv = 2, d = 64, budget = 8;
  cache_data<float> c(1, 50, hkv, d, {50}, 8);
  partial_kv_index idx(1, hkv, budget, 2);
  specdec::compact_partial_kv<float> copy(1, hkv, budget, d);
  const auto q = random_q(hkv, d, 9);
  idx.rebuild(specdec::host{}, 0, specdec::make_view<2>(q.data(), {hkv, d}), c.layout());
  const std::size_t elems = static_cast<std::size_t>(budget) * hkv * d;
  const auto snapshot = [&] {
    const auto l = copy.layout();
    return std::make_pair(std::vector<float>(l.k, l.k + elems), std::vector<float>(l.v, l.v + elems));
  };
  const auto before = snapshot();
  // The full cache shrank to 2 tokens: the sinks (0, 1) are still there, the other shown tokens are
  // not. Nothing may be copied, not even the sinks' rows, and the copy's bookkeeping stays put.
  c.lens = {2};
  CHECK_THROWS_WITH(copy.sync(idx, c.layout(), 0), Contains("'index'") && Contains("full.length(request) = 2"));
  CHECK(snapshot() == before);
  // A full cache whose length exceeds its capacity is rejected too (it would read another request's rows).
  c.lens = {51};
  CHECK_THROWS_WITH(copy.sync(idx, c.layout(), 0), Contains("specdec::compact_partial_kv::sync") && Contains("'full'") &&
                                                       Contains("max_tokens = 50") && Contains("got 51"));
  CHECK(snapshot() == before);
  c.lens = {50};
  CHECK(copy.sync(idx, c.layout(), 0) == std::int64_t{budget} * hkv);  // every slot: none was marked copied
  CHECK(snapshot() != before);
  // rebuild validates the cache before reading its lengths: a device-resident cache's lengths are
  // never dereferenced (the pointer below stands for device memory and would fault on the host).
  auto dev = c.layout();
  dev.where = specdec::memory_space::device;
  dev.mapping.lengths = reinterpret_cast<const std::int32_t*>(std::uintptr_t{64});
  CHECK_THROWS_WITH(idx.rebuild(specdec::host{}, 0, specdec::make_view<2>(q.data(), {hkv, d}), dev),
                    Contains("specdec::partial_kv_index::rebuild") && Contains("host-accessible"));
}

TEST_CASE("partial_kv: appends allocate nothing and the index memory stays put over 20K tokens") {
  const int hkv = 4, d = 16;
  cache_data<float> c(2, 64, hkv, d, {64, 10}, 4);
  const auto q = random_q(hkv * 2, d, 4);
  partial_kv_index idx(2, hkv, 32, 4);
  for (int r = 0; r < 2; ++r) idx.rebuild(specdec::host{}, r, specdec::make_view<2>(q.data(), {hkv * 2, d}), c.layout());
  const auto* data = idx.index_data();
  const std::size_t bytes = idx.index_bytes();
  CHECK(bytes == std::size_t{2} * hkv * (32 + (32 - 4)) * sizeof(std::int32_t));  // slots + eviction lists
  long allocs = 0;
  {
    specdec_test::allocation_scope scope;
    for (int n = 65; n <= 20064; ++n) idx.append(0, n);
    for (int n = 11; n <= 20010; n += 7) idx.append(1, n);
    allocs = scope.count();
  }
  CHECK(allocs == 0);
  CHECK(idx.index_data() == data);
  CHECK(idx.index_bytes() == bytes);
  CHECK(idx.size(0) == 32);
  CHECK(idx.needs_rebuild(0));
  // The sinks survive every replacement; the rest are the newest tokens.
  const auto s = idx.indices(0, 2);
  for (int t = 0; t < 4; ++t) CHECK(s[t] == t);
  for (int t = 4; t < 32; ++t) CHECK(s[t] >= 20064 - 28);
}

TEST_CASE("partial_kv: bad inputs are named") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(partial_kv_index(1, 1, 0, 0), Contains("'budget'") && Contains("got 0"));
  CHECK_THROWS_WITH(partial_kv_index(1, 1, 4, 5), Contains("'sink'") && Contains("got 5"));
  CHECK_THROWS_WITH(partial_kv_index(1, 1, 4, -1), Contains("'sink'"));
  CHECK_THROWS_WITH(partial_kv_index(1, 0, 4, 1), Contains("'kv_heads'"));
  CHECK_THROWS_WITH(partial_kv_index(-1, 1, 4, 1), Contains("'requests'"));

  cache_data<float> c(1, 8, 2, 4, {8}, 1);
  std::vector<float> q(3 * 4), s(2 * 8);
  partial_kv_index idx(1, 2, 4, 1);
  // 3 query heads for 2 kv heads.
  CHECK_THROWS_WITH(idx.rebuild(specdec::host{}, 0, specdec::make_view<2>(q.data(), {3, 4}), c.layout()),
                    Contains("specdec::kv_importance") && Contains("'q'") && Contains("multiple"));
  // Wrong head_dim.
  CHECK_THROWS_WITH(specdec::kv_importance(specdec::host{}, specdec::make_view<2>(q.data(), {2, 3}), c.layout(), 0,
                                           specdec::make_view<2>(s.data(), {2, 8})),
                    Contains("'q'") && Contains("shape [*, 4]"));
  // Scores too short, wrong heads, request out of range.
  CHECK_THROWS_WITH(specdec::kv_importance(specdec::host{}, specdec::make_view<2>(q.data(), {2, 4}), c.layout(), 0,
                                           specdec::make_view<2>(s.data(), {2, 7})),
                    Contains("'scores'") && Contains("at least cache.length(request) = 8"));
  CHECK_THROWS_WITH(specdec::kv_importance(specdec::host{}, specdec::make_view<2>(q.data(), {2, 4}), c.layout(), 0,
                                           specdec::make_view<2>(s.data(), {1, 8})),
                    Contains("'scores'") && Contains("shape [2, *]"));
  CHECK_THROWS_WITH(specdec::kv_importance(specdec::host{}, specdec::make_view<2>(q.data(), {2, 4}), c.layout(), 1,
                                           specdec::make_view<2>(s.data(), {2, 8})),
                    Contains("'request'") && Contains("got 1"));
  // Index object and cache disagree on kv heads; request out of range; shrinking appends.
  partial_kv_index three(1, 3, 4, 1);
  CHECK_THROWS_WITH(three.rebuild(specdec::host{}, 0, specdec::make_view<2>(q.data(), {3, 4}), c.layout()),
                    Contains("'cache.num_kv_heads()'") && Contains("expected 3"));
  CHECK_THROWS_WITH(three.layout(c.layout()), Contains("'cache.num_kv_heads()'"));
  CHECK_THROWS_WITH(idx.size(1), Contains("'request'"));
  CHECK_THROWS_WITH(idx.indices(0, 2), Contains("'kv_head'"));
  CHECK_THROWS_WITH(idx.eviction_order(0, 2), Contains("'kv_head'") && Contains("got 2"));
  CHECK_THROWS_WITH(idx.eviction_order(5, 0), Contains("'request'") && Contains("got 5"));
  idx.append(0, 5);
  CHECK_THROWS_WITH(idx.append(0, 4), Contains("'new_length'") && Contains(">= seen(request) = 5"));
  // A hand-made indexed_kv with an index past the base's length is rejected by any attention call.
  cache_data<float> c64(1, 8, 2, 64, {8}, 2);
  std::vector<std::int32_t> bad_index = {0, 9, 0, 0, 0, 1, 0, 0}, bad_len = {2};
  const specdec::indexed_kv<contiguous_kv<float>> bad{c64.layout(), bad_index.data(), bad_len.data(), 4};
  std::vector<float> qq(8 * 64), o(qq.size()), l(8);
  std::vector<std::int32_t> ip = {0, 1};
  CHECK_THROWS_WITH(specdec::decode_attention(specdec::host{}, specdec::make_view<3>(qq.data(), {1, 8, 64}), bad,
                                              specdec::make_view<1>(ip.data(), {2}), specdec::make_view<3>(o.data(), {1, 8, 64}),
                                              specdec::make_view<2>(l.data(), {1, 8})),
                    Contains("'cache'") && Contains("kv head 0, slot 1") && Contains("got 9"));
  std::vector<std::int32_t> long_len = {5};
  const specdec::indexed_kv<contiguous_kv<float>> too_long{c64.layout(), bad_index.data(), long_len.data(), 4};
  CHECK_THROWS_WITH(specdec::validate_kv_layout(too_long, "f", "cache"), Contains("in [0, budget 4]") && Contains("got 5"));
}

namespace {

// The cuda kernel's rule (kv/partial_kv.cuh, partial_kv_select_kernel), run serially: the threshold
// key by the byte-wise radix select (topk_digit_pick, the kernel's), the tokens taken in index order
// with a running count of the tied ones, then the eviction ranks from the taken tokens' keys sorted
// ascending after the free slots.
void kernel_rule_lists(const float* s, int len, int sink, int budget, std::int32_t* slots, std::int32_t* evict) {
  const int keep = std::min(sink, len), shown = specdec::detail::partial_kv_shown(len, sink, budget);
  const int rest = shown - keep, olen = len - keep;
  for (int i = 0; i < keep; ++i) slots[i] = i;
  if (rest == olen) {
    for (int i = 0; i < olen; ++i) slots[keep + i] = keep + i;
  } else if (rest > 0) {
    std::uint32_t prefix = 0;
    std::int32_t need = rest;
    for (int pass = 0; pass < 4; ++pass) {
      const int shift = 24 - 8 * pass;
      std::int32_t hist[256] = {};
      for (int i = keep; i < len; ++i) {
        const std::uint32_t key = specdec::detail::topk_key(s[i]);
        if (pass == 0 || (key >> (shift + 8)) == prefix) ++hist[(key >> shift) & 255u];
      }
      const int d = specdec::detail::topk_digit_pick(hist, need);
      prefix = (prefix << 8) | static_cast<std::uint32_t>(d);
    }
    int taken = 0, ties = 0;
    for (int i = keep; i < len; ++i) {
      const std::uint32_t key = specdec::detail::topk_key(s[i]);
      if (key > prefix || (key == prefix && ties++ < need)) slots[keep + taken++] = i;
    }
    REQUIRE(taken == rest);
  }
  const int free_slots = budget - std::max(shown, sink);
  for (int i = 0; i < free_slots; ++i) evict[i] = budget - 1 - i;
  std::vector<std::pair<std::uint64_t, std::int32_t>> ranked;
  for (int p = 0; p < rest; ++p) {
    const std::int32_t tok = slots[keep + p];
    ranked.emplace_back(specdec::detail::partial_kv_rank_key(s[tok], tok), keep + p);
  }
  std::sort(ranked.begin(), ranked.end());
  for (int p = 0; p < rest; ++p) evict[free_slots + p] = ranked[static_cast<std::size_t>(p)].second;
}

}  // namespace

TEST_CASE("partial_kv: the cuda kernel's selection rule, run serially, gives the host's lists") {
  std::mt19937 rng(11);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  int checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int len = static_cast<int>(rng() % 700), budget = 1 + static_cast<int>(rng() % 300);
    const int sink = static_cast<int>(rng() % (budget + 1));
    std::vector<float> s(static_cast<std::size_t>(len));
    std::uniform_real_distribution<float> u(-4, 4);
    for (auto& x : s) {
      x = u(rng);
      switch (trial % 5) {
        case 1: x = std::round(x); break;  // many ties
        case 2: x = rng() % 8 == 0 ? nan : rng() % 8 == 1 ? -0.0f : rng() % 8 == 2 ? 0.0f : x; break;
        case 3: x = rng() % 4 == 0 ? inf : rng() % 4 == 1 ? -inf : x; break;
        case 4: x = 1.0f; break;  // one value: every comparison is a tie
        default: break;
      }
    }
    std::vector<std::int32_t> slots(static_cast<std::size_t>(budget), -7), evict(static_cast<std::size_t>(budget - sink), -7);
    std::vector<std::int32_t> slots2(slots), evict2(evict);
    std::vector<std::uint64_t> order(static_cast<std::size_t>(len));
    specdec::detail::partial_kv_select_lists(s.data(), len, sink, budget, slots.data(), evict.data(), order.data());
    kernel_rule_lists(s.data(), len, sink, budget, slots2.data(), evict2.data());
    INFO("trial " << trial << " len " << len << " budget " << budget << " sink " << sink);
    CHECK(slots2 == slots);
    CHECK(evict2 == evict);
    checked += len > budget;
  }
  CHECK(checked > 100);  // most trials select (len > |B|), not only copy
}

TEST_CASE("partial_kv: partial_kv_select_batch writes rebuild's lists for every request, per kv head and shared") {
  using specdec::make_view;
  const int R = 5, cap = 400, hkv = 3, hq = 6, d = 16;
  for (const auto selection : {specdec::partial_kv_selection::per_kv_head, specdec::partial_kv_selection::shared}) {
    for (const auto& [budget, sink] : {std::pair{64, 4}, std::pair{7, 7}, std::pair{1, 0}, std::pair{500, 16}}) {
      cache_data<float> c(R, cap, hkv, d, {0, 3, 70, 400, 251}, 31);
      for (std::size_t i = 0; i < c.k.size(); i += 3) c.k[i] = std::round(c.k[i]);  // some equal scores
      const auto q = random_q(R * hq, d, 32);
      const int cols = cap + 5;
      std::vector<float> scores(static_cast<std::size_t>(R) * hkv * cols, 0.0f);
      std::vector<std::int32_t> status(3, 9);
      specdec::kv_importance_batch(specdec::host{}, make_view<3>(q.data(), {R, hq, d}), c.layout(),
                                   make_view<3>(scores.data(), {R, hkv, cols}), make_view<1>(status.data(), {3}));
      std::vector<std::int32_t> index(static_cast<std::size_t>(R) * hkv * budget, -7),
          evict(static_cast<std::size_t>(R) * hkv * (budget - sink), -7), sizes(R, -7), seen(R, -7), placed(R, -7);
      status.assign(3, 9);
      specdec::partial_kv_select_batch(specdec::host{}, make_view<3>(scores.data(), {R, hkv, cols}), c.layout(), budget,
                                       sink, selection, make_view<3>(index.data(), {R, hkv, budget}),
                                       make_view<3>(evict.data(), {R, hkv, budget - sink}), make_view<1>(sizes.data(), {R}),
                                       make_view<1>(seen.data(), {R}), make_view<1>(placed.data(), {R}),
                                       make_view<1>(status.data(), {3}));
      CHECK(status == std::vector<std::int32_t>{0, -1, -1});
      CHECK(seen == c.lens);
      CHECK(placed == std::vector<std::int32_t>(R, 0));
      partial_kv_index idx(R, hkv, budget, sink, selection);
      for (int r = 0; r < R; ++r) {
        idx.rebuild(specdec::host{}, r, make_view<2>(q.data() + static_cast<std::size_t>(r) * hq * d, {hq, d}), c.layout());
        INFO("budget " << budget << " sink " << sink << " request " << r << " shared "
                       << (selection == specdec::partial_kv_selection::shared));
        CHECK(sizes[static_cast<std::size_t>(r)] == idx.size(r));
        for (int h = 0; h < hkv; ++h) {
          const auto rh = static_cast<std::size_t>(r) * hkv + static_cast<std::size_t>(h);
          const auto want = idx.indices(r, h);
          const auto ev = idx.eviction_order(r, h);
          CHECK(std::vector<std::int32_t>(index.begin() + static_cast<std::ptrdiff_t>(rh * budget),
                                          index.begin() + static_cast<std::ptrdiff_t>(rh * budget + want.size())) ==
                std::vector<std::int32_t>(want.begin(), want.end()));
          // slots past the shown ones are not written
          CHECK(std::all_of(index.begin() + static_cast<std::ptrdiff_t>(rh * budget + want.size()),
                            index.begin() + static_cast<std::ptrdiff_t>((rh + 1) * budget), [](auto x) { return x == -7; }));
          CHECK(std::vector<std::int32_t>(evict.begin() + static_cast<std::ptrdiff_t>(rh * ev.size()),
                                          evict.begin() + static_cast<std::ptrdiff_t>((rh + 1) * ev.size())) ==
                std::vector<std::int32_t>(ev.begin(), ev.end()));
        }
      }
    }
  }
}

TEST_CASE("partial_kv: partial_kv_select_batch names bad arguments and writes nothing on a rejected call") {
  using Catch::Matchers::Contains;
  using specdec::make_view;
  const int R = 2, hkv = 2, budget = 8, sink = 2;
  cache_data<float> c(R, 16, hkv, 4, {16, 5}, 3);
  std::vector<float> scores(static_cast<std::size_t>(R) * hkv * 16, 1.0f);
  std::vector<std::int32_t> index(static_cast<std::size_t>(R) * hkv * budget, -7),
      evict(static_cast<std::size_t>(R) * hkv * (budget - sink), -7), sizes(R, -7), seen(R, -7), placed(R, -7), status(3, 9);
  const auto sel = specdec::partial_kv_selection::per_kv_head;
  const auto seen_v = make_view<1>(seen.data(), {R});
  const auto placed_v = make_view<1>(placed.data(), {R});
  auto call = [&](int cols, int b, int s, auto sel_) {
    specdec::partial_kv_select_batch(specdec::host{}, make_view<3>(scores.data(), {R, hkv, cols}), c.layout(), b, s, sel_,
                                     make_view<3>(index.data(), {R, hkv, b}),
                                     make_view<3>(evict.data(), {R, hkv, std::max(b - s, 0)}), make_view<1>(sizes.data(), {R}),
                                     seen_v, placed_v, make_view<1>(status.data(), {3}));
  };
  CHECK_THROWS_WITH(call(15, budget, sink, sel), Contains("specdec::partial_kv_select_batch") && Contains("'scores'") &&
                                                     Contains("request 0 has length 16"));
  CHECK_THROWS_WITH(call(16, 0, 0, sel), Contains("'budget'") && Contains("got 0"));
  CHECK_THROWS_WITH(call(16, 4, 5, sel), Contains("'sink'") && Contains("got 5"));
  CHECK_THROWS_WITH(call(16, budget, sink, static_cast<specdec::partial_kv_selection>(7)), Contains("'selection'"));
  CHECK_THROWS_WITH(specdec::partial_kv_select_batch(specdec::host{}, make_view<3>(scores.data(), {R, hkv, 16}), c.layout(),
                                                     budget, sink, sel, make_view<3>(index.data(), {R, hkv, budget - 1}),
                                                     make_view<3>(evict.data(), {R, hkv, budget - sink}),
                                                     make_view<1>(sizes.data(), {R}), seen_v, placed_v,
                                                     make_view<1>(status.data(), {3})),
                    Contains("'index'") && Contains("shape"));
  CHECK_THROWS_WITH(specdec::partial_kv_select_batch(specdec::host{}, make_view<3>(scores.data(), {R, hkv, 16}), c.layout(),
                                                     budget, sink, sel, make_view<3>(index.data(), {R, hkv, budget}),
                                                     make_view<3>(evict.data(), {R, hkv, budget}),
                                                     make_view<1>(sizes.data(), {R}), seen_v, placed_v,
                                                     make_view<1>(status.data(), {3})),
                    Contains("'evict'") && Contains("shape"));
  CHECK_THROWS_WITH(specdec::partial_kv_select_batch(specdec::host{}, make_view<3>(scores.data(), {R, hkv, 16}), c.layout(),
                                                     budget, sink, sel, make_view<3>(index.data(), {R, hkv, budget}),
                                                     make_view<3>(evict.data(), {R, hkv, budget - sink}),
                                                     make_view<1>(sizes.data(), {R - 1}), seen_v, placed_v,
                                                     make_view<1>(status.data(), {3})),
                    Contains("'sizes'"));
  CHECK(std::all_of(index.begin(), index.end(), [](auto x) { return x == -7; }));
  CHECK(std::all_of(evict.begin(), evict.end(), [](auto x) { return x == -7; }));
  CHECK(std::all_of(sizes.begin(), sizes.end(), [](auto x) { return x == -7; }));
  CHECK(status == std::vector<std::int32_t>(3, 9));
  CHECK_THROWS_WITH(specdec::partial_kv_select_batch(specdec::host{}, make_view<3>(scores.data(), {R, hkv, 16}), c.layout(),
                                                     budget, sink, sel, make_view<3>(index.data(), {R, hkv, budget}),
                                                     make_view<3>(evict.data(), {R, hkv, budget - sink}),
                                                     make_view<1>(sizes.data(), {R}), seen_v, seen_v,
                                                     make_view<1>(status.data(), {3})),
                    Contains("'placed'") && Contains("memory disjoint from 'seen'"));
  CHECK_THROWS_WITH(specdec::partial_kv_select_batch(specdec::host{}, make_view<3>(scores.data(), {R, hkv, 16}), c.layout(),
                                                     budget, sink, sel,
                                                     make_view<3>(reinterpret_cast<std::int32_t*>(scores.data()), {R, hkv, budget}),
                                                     make_view<3>(evict.data(), {R, hkv, budget - sink}),
                                                     make_view<1>(sizes.data(), {R}), seen_v, placed_v,
                                                     make_view<1>(status.data(), {3})),
                    Contains("'index'") && Contains("memory disjoint from 'scores'"));
  CHECK_THROWS_WITH(call(16, (1 << 30), 0, sel), Contains("'budget'") && Contains("2^30 - 1"));
  call(16, budget, sink, sel);
  CHECK(sizes == std::vector<std::int32_t>{8, 5});
  CHECK(seen == std::vector<std::int32_t>{16, 5});
  CHECK(placed == std::vector<std::int32_t>{0, 0});
}

TEST_CASE("partial_kv: partial_kv_append_batch places new tokens as partial_kv_index::append, from the start and after a selection") {
  using specdec::make_view;
  const int R = 3, cap = 1200, hkv = 2, hq = 4, d = 8;
  std::mt19937 rng(5);
  for (const auto& [budget, sink] : {std::pair{16, 4}, std::pair{9, 9}, std::pair{40, 0}, std::pair{1, 0}}) {
    for (const bool select_first : {false, true}) {
      cache_data<float> c(R, cap, hkv, d, {0, 0, 0}, 41);
      const auto q = random_q(R * hq, d, 42);
      partial_kv_index idx(R, hkv, budget, sink);
      // the arrays as partial_kv_index starts: nothing shown, eviction |B| - 1 down to |S|
      std::vector<std::int32_t> index(static_cast<std::size_t>(R) * hkv * budget, -7),
          evict(static_cast<std::size_t>(R) * hkv * (budget - sink)), sizes(R, 0), seen(R, 0), placed(R, 0), status(3, 9);
      for (std::size_t i = 0; i < evict.size(); ++i)
        evict[i] = budget - 1 - static_cast<std::int32_t>(i % static_cast<std::size_t>(budget - sink));
      const auto index_v = make_view<3>(index.data(), {R, hkv, budget});
      const auto evict_v = make_view<3>(evict.data(), {R, hkv, budget - sink});
      const auto sizes_v = make_view<1>(sizes.data(), {R});
      const auto seen_v = make_view<1>(seen.data(), {R});
      const auto placed_v = make_view<1>(placed.data(), {R});
      const auto status_v = make_view<1>(status.data(), {3});
      int rebuilt = 0, triggered = 0;
      for (int step = 0; step < 160; ++step) {
        for (int r = 0; r < R; ++r) {  // 0-6 new tokens a step, now and then a jump of 50
          const int grow = step % 37 == 5 ? 50 : static_cast<int>(rng() % 7);
          c.lens[static_cast<std::size_t>(r)] = std::min(cap, c.lens[static_cast<std::size_t>(r)] + grow);
          idx.append(r, c.lens[static_cast<std::size_t>(r)]);
        }
        specdec::partial_kv_append_batch(specdec::host{}, c.layout(), budget, sink, index_v, evict_v, sizes_v, seen_v,
                                         placed_v, status_v);
        REQUIRE(status == std::vector<std::int32_t>{0, -1, -1});
        for (int r = 0; r < R; ++r) {
          INFO("budget " << budget << " sink " << sink << " step " << step << " request " << r);
          REQUIRE(sizes[static_cast<std::size_t>(r)] == idx.size(r));
          REQUIRE(seen[static_cast<std::size_t>(r)] == idx.seen(r));
          CHECK(specdec::detail::partial_kv_needs_rebuild(placed[static_cast<std::size_t>(r)], budget, sink) ==
                idx.needs_rebuild(r));
          CHECK(placed[static_cast<std::size_t>(r)] <= 2 * (budget - sink));
          triggered += idx.needs_rebuild(r);
          for (int h = 0; h < hkv; ++h) {
            const auto want = idx.indices(r, h);
            const auto at = (static_cast<std::size_t>(r) * hkv + static_cast<std::size_t>(h)) * budget;
            REQUIRE(std::vector<std::int32_t>(index.begin() + static_cast<std::ptrdiff_t>(at),
                                              index.begin() + static_cast<std::ptrdiff_t>(at + want.size())) ==
                    std::vector<std::int32_t>(want.begin(), want.end()));
          }
        }
        // a selection every 40 steps (both sides), the first one at step 20 when select_first
        if (step % 40 == (select_first ? 20 : 39)) {
          for (int r = 0; r < R; ++r)
            idx.rebuild(specdec::host{}, r, make_view<2>(q.data() + static_cast<std::size_t>(r) * hq * d, {hq, d}), c.layout());
          std::vector<float> scores(static_cast<std::size_t>(R) * hkv * cap);
          specdec::kv_importance_batch(specdec::host{}, make_view<3>(q.data(), {R, hq, d}), c.layout(),
                                       make_view<3>(scores.data(), {R, hkv, cap}), status_v);
          specdec::partial_kv_select_batch(specdec::host{}, make_view<3>(scores.data(), {R, hkv, cap}), c.layout(), budget,
                                           sink, specdec::partial_kv_selection::per_kv_head, index_v, evict_v, sizes_v,
                                           seen_v, placed_v, status_v);
          ++rebuilt;
        }
      }
      CHECK(rebuilt >= 3);
      if (budget > sink) CHECK(triggered > 0);  // the replacements ran past |B| - |S| between selections
    }
  }
}

TEST_CASE("partial_kv: partial_kv_append_batch refuses a shrinking cache, a bad state and a bad eviction slot") {
  using Catch::Matchers::Contains;
  using specdec::make_view;
  const int R = 2, hkv = 2, budget = 4, sink = 1;
  cache_data<float> c(R, 16, hkv, 4, {6, 6}, 3);
  std::vector<std::int32_t> index(static_cast<std::size_t>(R) * hkv * budget, -7),
      evict(static_cast<std::size_t>(R) * hkv * (budget - sink), 2), sizes{4, 4}, seen{4, 4}, placed{0, 0}, status(3, 9);
  auto call = [&] {
    specdec::partial_kv_append_batch(specdec::host{}, c.layout(), budget, sink, make_view<3>(index.data(), {R, hkv, budget}),
                                     make_view<3>(evict.data(), {R, hkv, budget - sink}), make_view<1>(sizes.data(), {R}),
                                     make_view<1>(seen.data(), {R}), make_view<1>(placed.data(), {R}),
                                     make_view<1>(status.data(), {3}));
  };
  const auto untouched = index;
  seen[1] = 7;  // above the cache's length 6
  CHECK_THROWS_WITH(call(), Contains("specdec::partial_kv_append_batch") && Contains("for request 1") &&
                                Contains("length 6, size 4, seen 7, placed 0"));
  seen[1] = 4, sizes[0] = 5;
  CHECK_THROWS_WITH(call(), Contains("for request 0") && Contains("size 5"));
  sizes[0] = 4, placed[1] = 7;  // above 2 (|B| - |S|) = 6
  CHECK_THROWS_WITH(call(), Contains("for request 1") && Contains("placed 7"));
  placed[1] = 0;
  CHECK(index == untouched);
  CHECK(status == std::vector<std::int32_t>(3, 9));
  // arrays that share memory: an index write into evict would turn a token into a slot
  CHECK_THROWS_WITH(specdec::partial_kv_append_batch(specdec::host{}, c.layout(), budget, sink,
                                                     make_view<3>(index.data(), {R, hkv, budget}),
                                                     make_view<3>(index.data() + 1, {R, hkv, budget - sink}),
                                                     make_view<1>(sizes.data(), {R}), make_view<1>(seen.data(), {R}),
                                                     make_view<1>(placed.data(), {R}), make_view<1>(status.data(), {3})),
                    Contains("'evict'") && Contains("memory disjoint from 'index'"));
  CHECK_THROWS_WITH(specdec::partial_kv_append_batch(specdec::host{}, c.layout(), budget, sink,
                                                     make_view<3>(index.data(), {R, hkv, budget}),
                                                     make_view<3>(evict.data(), {R, hkv, budget - sink}),
                                                     make_view<1>(sizes.data(), {R}), make_view<1>(sizes.data(), {R}),
                                                     make_view<1>(placed.data(), {R}), make_view<1>(status.data(), {3})),
                    Contains("'seen'") && Contains("memory disjoint from 'sizes'"));
  CHECK(index == untouched);
  evict[static_cast<std::size_t>(hkv * (budget - sink)) + 1] = 4;  // request 1, head 0, the second replacement
  CHECK_THROWS_WITH(call(), Contains("'evict'") && Contains("request 1"));
  // nothing written, request 0's appends (whose slots are fine) included: a refused call can be retried
  CHECK(index == untouched);
  CHECK(sizes == std::vector<std::int32_t>{4, 4});
  CHECK(seen == std::vector<std::int32_t>{4, 4});
  CHECK(placed == std::vector<std::int32_t>{0, 0});
  CHECK(status == std::vector<std::int32_t>(3, 9));
  evict[static_cast<std::size_t>(hkv * (budget - sink)) + 1] = 2;  // repaired: the same call goes through
  call();
  CHECK(seen == std::vector<std::int32_t>{6, 6});
  CHECK(placed == std::vector<std::int32_t>{2, 2});
  CHECK(index[2] == 5);  // request 0, head 0: both replacements took slot 2, the last wrote token 5
}

namespace {
// A user's own layout (not a kv_cache): 3 tokens, 1 kv head, head_dim 4, token `hole` without storage
// (validate_kv_layout checks only the corner rows).
struct holed_rows {
  using value_type = const float;
  const float* rows;
  int hole = 1;
  int num_requests() const { return 1; }
  int num_kv_heads() const { return 1; }
  int head_dim() const { return 4; }
  int length(int) const { return 3; }
  const float* k_row(int, int t, int) const { return t == hole ? nullptr : rows + 4 * t; }
  const float* v_row(int r, int t, int h) const { return k_row(r, t, h); }
  specdec::memory_space space() const { return specdec::memory_space::host; }
};
}  // namespace

TEST_CASE("partial_kv: a null row of a user's layout, scores over q, and moved-from objects are refused") {
  using Catch::Matchers::Contains;
  std::vector<float> rows(12, 1.0f), q(4, 1.0f), scores(3, -5.0f);
  const holed_rows holed{rows.data()};
  // kv_importance, its batch form and rebuild check every row they read, before writing a score
  CHECK_THROWS_WITH(specdec::kv_importance(specdec::host{}, specdec::make_view<2>(q.data(), {1, 4}), holed, 0,
                                           specdec::make_view<2>(scores.data(), {1, 3})),
                    Contains("'cache'") && Contains("non-null k_row") && Contains("token 1"));
  std::vector<std::int32_t> status(3, 9);
  CHECK_THROWS_WITH(specdec::kv_importance_batch(specdec::host{}, specdec::make_view<3>(q.data(), {1, 1, 4}), holed,
                                                 specdec::make_view<3>(scores.data(), {1, 1, 3}),
                                                 specdec::make_view<1>(status.data(), {3})),
                    Contains("'cache'") && Contains("token 1"));
  CHECK(std::all_of(scores.begin(), scores.end(), [](float x) { return x == -5.0f; }));
  partial_kv_index idx(1, 1, 4, 0);
  CHECK_THROWS_WITH(idx.rebuild(specdec::host{}, 0, specdec::make_view<2>(q.data(), {1, 4}), holed), Contains("token 1"));
  // the same layout whole is scored
  const holed_rows whole{rows.data(), -1};
  specdec::kv_importance(specdec::host{}, specdec::make_view<2>(q.data(), {1, 4}), whole, 0,
                         specdec::make_view<2>(scores.data(), {1, 3}));
  CHECK(scores == std::vector<float>{4.0f, 4.0f, 4.0f});

  // compact_partial_kv::sync checks the rows it copies before the first copy
  partial_kv_index shown(1, 1, 4, 0);
  shown.append(0, 3);  // shows tokens 0, 1, 2
  specdec::compact_partial_kv<float> copy(1, 1, 4, 4);
  CHECK_THROWS_WITH(copy.sync(shown, holed, 0), Contains("'full'") && Contains("non-null k_row") && Contains("token 1"));
  CHECK(copy.layout().length(0) == 0);
  CHECK(copy.sync(shown, whole, 0) == 3);

  // scores overlapping q: a later request's query would be read after an earlier one's scores
  std::vector<float> buf(8, 1.0f);
  cache_data<float> c(2, 4, 1, 4, {2, 2}, 3);
  CHECK_THROWS_WITH(specdec::kv_importance_batch(specdec::host{}, specdec::make_view<3>(buf.data(), {2, 1, 4}), c.layout(),
                                                 specdec::make_view<3>(buf.data() + 4, {2, 1, 2}),
                                                 specdec::make_view<1>(status.data(), {3})),
                    Contains("'q'") && Contains("disjoint from 'scores'"));
  CHECK_THROWS_WITH(specdec::kv_importance(specdec::host{}, specdec::make_view<2>(buf.data(), {1, 4}), c.layout(), 0,
                                           specdec::make_view<2>(buf.data() + 2, {1, 2})),
                    Contains("'scores'") && Contains("disjoint from 'q'"));

  // moved-from: no requests left, so every call is refused instead of indexing moved storage
  partial_kv_index a(2, 1, 4, 1);
  partial_kv_index b(std::move(a));
  CHECK(b.num_requests() == 2);
  CHECK(a.num_requests() == 0);  // NOLINT(bugprone-use-after-move): the state under test
  CHECK_THROWS_WITH(a.append(1, 1), Contains("'request'"));  // NOLINT(bugprone-use-after-move)
  specdec::compact_partial_kv<float> ca(2, 1, 4, 4);
  specdec::compact_partial_kv<float> cb(std::move(ca));
  CHECK(cb.num_requests() == 2);
  CHECK(ca.num_requests() == 0);                              // NOLINT(bugprone-use-after-move)
  CHECK_THROWS_WITH(ca.invalidate(1), Contains("'request'"));  // NOLINT(bugprone-use-after-move)
  CHECK(ca.layout().num_requests() == 0);                     // NOLINT(bugprone-use-after-move)
}
