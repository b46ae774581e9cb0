// Ring-buffer sliding-window KV cache: the visible window against a full-history oracle through
// random committed/speculative appends, rollbacks and commits (ragged requests, many wraps); constant
// memory over 100K appended tokens (same pointers, same bytes, zero heap allocations); bad inputs.
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <limits>
#include <new>
#include <random>
#include <vector>

#include "specdec/kv/ring_kv.hpp"
#include "specdec/reference/ring_kv.hpp"

// Count every heap allocation of the process so the 100K-token test can assert that appends
// allocate nothing (the counter replaces every allocation form, so it also holds under ASan).
#include "common/alloc_counter.hpp"

using specdec::ring_kv_cache;

namespace {

using history = specdec::reference::sliding_window_history<float>;

std::vector<float> rows(int n, int hkv, int d, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(static_cast<std::size_t>(n) * hkv * d);
  for (auto& e : x) e = u(rng);
  return x;
}

void push(history& h, const std::vector<float>& k, const std::vector<float>& v, int n) {
  const std::size_t row = static_cast<std::size_t>(h.kv_heads) * h.head_dim;
  for (int i = 0; i < n; ++i) {
    h.k.emplace_back(k.begin() + static_cast<std::ptrdiff_t>(i * row),
                     k.begin() + static_cast<std::ptrdiff_t>((i + 1) * row));
    h.v.emplace_back(v.begin() + static_cast<std::ptrdiff_t>(i * row),
                     v.begin() + static_cast<std::ptrdiff_t>((i + 1) * row));
  }
}

void check_same(const ring_kv_cache<float>& c, int r, const history& h) {
  const auto l = c.layout();
  REQUIRE(l.length(r) == h.length());
  REQUIRE(c.length(r) == h.length());
  REQUIRE(c.appended(r) == static_cast<std::int64_t>(h.k.size()));
  for (int t = 0; t < h.length(); ++t)
    for (int hh = 0; hh < h.kv_heads; ++hh)
      for (int d = 0; d < h.head_dim; ++d) {
        REQUIRE(l.k_row(r, t, hh)[d] == h.k_row(t, hh)[d]);
        REQUIRE(l.v_row(r, t, hh)[d] == h.v_row(t, hh)[d]);
      }
}

}  // namespace

TEST_CASE("ring: window fills, then keeps the newest W tokens oldest first") {
  ring_kv_cache<float> c({.requests = 1, .kv_heads = 1, .head_dim = 2, .window = 4});
  CHECK(c.slots() == 4);
  for (int i = 0; i < 10; ++i) {
    const float kv[2] = {static_cast<float>(i), static_cast<float>(-i)};
    c.append(0, specdec::make_view<3>(kv, {1, 1, 2}), specdec::make_view<3>(kv, {1, 1, 2}));
    const auto l = c.layout();
    const int len = std::min(i + 1, 4);
    REQUIRE(l.length(0) == len);
    for (int t = 0; t < len; ++t) {
      REQUIRE(l.k_row(0, t, 0)[0] == static_cast<float>(i + 1 - len + t));
      REQUIRE(l.v_row(0, t, 0)[1] == -static_cast<float>(i + 1 - len + t));
    }
  }
  REQUIRE_NOTHROW(specdec::validate_kv_layout(c.layout(), "t", "ring"));
  // appending more rows than slots in one call keeps only the newest
  std::vector<float> many(7 * 2);
  for (int i = 0; i < 7; ++i) many[2 * i] = 100.0f + i;
  c.append(0, specdec::make_view<3>(many.data(), {7, 1, 2}), specdec::make_view<3>(many.data(), {7, 1, 2}));
  for (int t = 0; t < 4; ++t) CHECK(c.layout().k_row(0, t, 0)[0] == 103.0f + t);
  CHECK(c.appended(0) == 17);
  c.reset(0);
  CHECK(c.length(0) == 0);
  CHECK(c.appended(0) == 0);
}

TEST_CASE("ring: random appends, speculative appends, rollbacks and commits match the history oracle") {
  std::mt19937 rng(2024);
  const int R = 3, hkv = 2, d = 4, W = 7, P = 5;
  ring_kv_cache<float> c({.requests = R, .kv_heads = hkv, .head_dim = d, .window = W, .speculative_capacity = P});
  std::vector<history> hist(R, history{hkv, d, W, {}, {}});
  std::vector<int> pend(R, 0);
  for (int step = 0; step < 3000; ++step) {
    const int r = static_cast<int>(rng() % R);
    const int op = static_cast<int>(rng() % 4);
    if (op == 0 && pend[r] == 0) {  // committed append, sizes up to 2 windows
      const int n = static_cast<int>(rng() % (r == 0 ? 2 : 15));
      auto k = rows(n, hkv, d, rng), v = rows(n, hkv, d, rng);
      c.append(r, specdec::make_view<3>(k.data(), {n, hkv, d}), specdec::make_view<3>(v.data(), {n, hkv, d}));
      push(hist[r], k, v, n);
    } else if (op == 1) {  // speculative append within capacity
      const int n = static_cast<int>(rng() % (P - pend[r] + 1));
      auto k = rows(n, hkv, d, rng), v = rows(n, hkv, d, rng);
      c.append_speculative(r, specdec::make_view<3>(k.data(), {n, hkv, d}),
                           specdec::make_view<3>(v.data(), {n, hkv, d}));
      push(hist[r], k, v, n);
      pend[r] += n;
    } else if (op == 2) {  // rollback some pending
      const int n = static_cast<int>(rng() % (pend[r] + 1));
      c.rollback(r, n);
      for (int i = 0; i < n; ++i) {
        hist[r].k.pop_back();
        hist[r].v.pop_back();
      }
      pend[r] -= n;
    } else {  // commit a prefix of the pending tokens, drop the rest
      const int a = static_cast<int>(rng() % (pend[r] + 1));
      c.commit(r, a);
      for (int i = 0; i < pend[r] - a; ++i) {
        hist[r].k.pop_back();
        hist[r].v.pop_back();
      }
      pend[r] = 0;
    }
    REQUIRE(c.pending(r) == pend[r]);
    REQUIRE_NOTHROW(specdec::validate_kv_layout(c.layout(), "t", "ring"));
    for (int q = 0; q < R; ++q) check_same(c, q, hist[q]);
  }
  for (int q = 0; q < R; ++q) CHECK(hist[q].k.size() > static_cast<std::size_t>(3 * (W + P)));  // wrapped many times
}

TEST_CASE("ring: rollback after the ring wrapped restores the exact window") {
  ring_kv_cache<float> c({.requests = 1, .kv_heads = 1, .head_dim = 1, .window = 3, .speculative_capacity = 2});
  auto one = [&](float x, bool spec) {
    const float a[1] = {x};
    if (spec)
      c.append_speculative(0, specdec::make_view<3>(a, {1, 1, 1}), specdec::make_view<3>(a, {1, 1, 1}));
    else
      c.append(0, specdec::make_view<3>(a, {1, 1, 1}), specdec::make_view<3>(a, {1, 1, 1}));
  };
  for (int i = 0; i < 11; ++i) one(static_cast<float>(i), false);  // window 8, 9, 10
  one(50, true);
  one(51, true);  // window 10, 50, 51; slots now hold 8..51, nothing committed lost
  CHECK(c.layout().k_row(0, 0, 0)[0] == 10.0f);
  c.rollback(0, 2);
  for (int t = 0; t < 3; ++t) CHECK(c.layout().k_row(0, t, 0)[0] == 8.0f + t);
  one(60, true);
  c.commit(0, 1);
  for (int t = 0; t < 3; ++t) CHECK(c.layout().k_row(0, t, 0)[0] == (t < 2 ? 9.0f + t : 60.0f));
  CHECK(c.committed(0) == 12);
}

TEST_CASE("ring: append_rows appends the accepted tree path in the given order") {
  ring_kv_cache<float> c({.requests = 2, .kv_heads = 1, .head_dim = 1, .window = 4});
  const float spec[5] = {10, 11, 12, 13, 14};
  const std::vector<std::int32_t> path{0, 2, 3};
  c.append_rows(1, specdec::make_view<3>(spec, {5, 1, 1}), specdec::make_view<3>(spec, {5, 1, 1}), path);
  CHECK(c.length(0) == 0);
  REQUIRE(c.length(1) == 3);
  CHECK(c.layout().k_row(1, 0, 0)[0] == 10);
  CHECK(c.layout().k_row(1, 1, 0)[0] == 12);
  CHECK(c.layout().v_row(1, 2, 0)[0] == 13);
}

TEST_CASE("ring: memory does not grow over 100K appended tokens") {
  ring_kv_cache<specdec::half> c(
      {.requests = 2, .kv_heads = 8, .head_dim = 128, .window = 512, .speculative_capacity = 16});
  const std::size_t bytes = c.bytes();
  const auto* kp = c.k_data();
  const auto* vp = c.v_data();
  CHECK(bytes == 2u * 2 * 528 * 8 * 128 * sizeof(specdec::half));
  std::vector<specdec::half> row(4 * 8 * 128, specdec::half(0.5f));
  const auto k = specdec::make_view<3>(row.data(), {4, 8, 128});
  specdec_test::allocation_scope scope;
  for (int i = 0; i < 100000 / 4; ++i) {
    c.append(0, k, k);
    c.append_speculative(1, k, k);
    c.commit(1, 3);
  }
  CHECK(scope.count() == 0);  // no heap allocation in append / append_speculative / commit
  CHECK(c.appended(0) == 100000);
  CHECK(c.appended(1) == 75000);
  CHECK(c.bytes() == bytes);
  CHECK(c.k_data() == kp);
  CHECK(c.v_data() == vp);
  CHECK(c.length(0) == 512);
}

TEST_CASE("ring: bad inputs are rejected with named arguments") {
  {  // a moved-from ring holds no requests: every call is refused, not run over storage it gave away
    ring_kv_cache<float> a({.requests = 2, .kv_heads = 1, .head_dim = 4, .window = 4, .speculative_capacity = 2});
    ring_kv_cache<float> b(std::move(a));
    CHECK(b.num_requests() == 2);
    CHECK(a.num_requests() == 0);  // NOLINT(bugprone-use-after-move): the state under test
    CHECK_THROWS_WITH(a.rollback(1, 0), Catch::Contains("'request'"));  // NOLINT(bugprone-use-after-move)
    CHECK(a.layout().num_requests() == 0);  // NOLINT(bugprone-use-after-move)
    ring_kv_cache<float> c({.requests = 1, .kv_heads = 1, .head_dim = 4});
    c = std::move(b);
    CHECK(c.num_requests() == 2);
    CHECK_THROWS_WITH(b.reset(0), Catch::Contains("'request'"));  // NOLINT(bugprone-use-after-move)
  }
  using cfg = specdec::ring_kv_config;
  CHECK_THROWS_WITH(ring_kv_cache<float>(cfg{.kv_heads = 0, .head_dim = 4}), Catch::Contains("config.kv_heads"));
  CHECK_THROWS_WITH(ring_kv_cache<float>(cfg{.kv_heads = 1, .head_dim = 0}), Catch::Contains("config.head_dim"));
  CHECK_THROWS_WITH(ring_kv_cache<float>(cfg{.requests = -1, .kv_heads = 1, .head_dim = 4}),
                    Catch::Contains("config.requests"));
  CHECK_THROWS_WITH(ring_kv_cache<float>(cfg{.kv_heads = 1, .head_dim = 4, .window = 0}),
                    Catch::Contains("config.window"));
  CHECK_THROWS_WITH(ring_kv_cache<float>(cfg{.kv_heads = 1, .head_dim = 4, .speculative_capacity = -1}),
                    Catch::Contains("config.speculative_capacity"));
  ring_kv_cache<float> c({.requests = 2, .kv_heads = 2, .head_dim = 4, .window = 4, .speculative_capacity = 2});
  std::vector<float> buf(3 * 2 * 4);
  const auto k3 = specdec::make_view<3>(buf.data(), {3, 2, 4});
  const auto k2 = specdec::make_view<3>(buf.data(), {2, 2, 4});
  const auto k1 = specdec::make_view<3>(buf.data(), {1, 2, 4});
  CHECK_THROWS_AS(c.append(2, k3, k3), specdec::invalid_argument);
  CHECK_THROWS_WITH(c.append(2, k3, k3), Catch::Contains("request") && Catch::Contains("ring_kv_cache::append"));
  CHECK_THROWS_WITH(c.append(-1, k3, k3), Catch::Contains("request"));
  CHECK_THROWS_WITH(c.append(0, specdec::make_view<3>(buf.data(), {3, 1, 8}), k3), Catch::Contains("'k'"));
  CHECK_THROWS_WITH(c.append(0, specdec::make_view<3>(buf.data(), {6, 2, 2}), k3), Catch::Contains("'k'"));
  CHECK_THROWS_WITH(c.append(0, k3, k2), Catch::Contains("'v'"));
  const std::int64_t ext[3] = {1, 2, 4}, str[3] = {8, 4, 2};  // inner stride 2
  const specdec::strided_view<float, 3> strided(buf.data(), ext, str);
  CHECK_THROWS_WITH(c.append(0, strided, k1), Catch::Contains("'k'"));
  CHECK_THROWS_WITH(c.append(0, k1, specdec::make_view<3>(buf.data(), {1, 2, 4}, specdec::memory_space::device)),
                    Catch::Contains("'v'"));
  CHECK_THROWS_WITH(c.append_speculative(0, k3, k3), Catch::Contains("'k'") && Catch::Contains("speculative_capacity"));
  c.append_speculative(0, k1, k1);
  {  // a broadcast view of 2^63 - 1 rows with one token pending: pending + n overflowed int64 and passed
    const std::int64_t huge[3] = {std::numeric_limits<std::int64_t>::max(), 2, 4}, bcast[3] = {0, 4, 1};
    const specdec::strided_view<float, 3> all(buf.data(), huge, bcast);
    CHECK_THROWS_WITH(c.append_speculative(0, all, all),
                      Catch::Contains("'k'") && Catch::Contains("speculative_capacity - pending = 1"));
    CHECK(c.pending(0) == 1);
  }
  CHECK_THROWS_WITH(c.append(0, k1, k1), Catch::Contains("pending"));
  const std::vector<std::int32_t> path{0};
  CHECK_THROWS_WITH(c.append_rows(0, k1, k1, path), Catch::Contains("pending"));
  CHECK_THROWS_WITH(c.rollback(0, 2), Catch::Contains("count"));
  CHECK_THROWS_WITH(c.rollback(0, -1), Catch::Contains("count"));
  CHECK_THROWS_WITH(c.commit(0, 2), Catch::Contains("accepted"));
  CHECK_THROWS_WITH(c.rollback(5, 0), Catch::Contains("request"));
  CHECK_THROWS_WITH(c.commit(5, 0), Catch::Contains("request"));
  CHECK_THROWS_WITH(c.reset(5), Catch::Contains("request"));
  CHECK_THROWS_WITH((void)c.length(5), Catch::Contains("request"));
  CHECK_THROWS_WITH((void)c.appended(-1), Catch::Contains("request"));
  CHECK_THROWS_WITH((void)c.committed(2), Catch::Contains("request"));
  CHECK_THROWS_WITH((void)c.pending(2), Catch::Contains("request"));
  CHECK_THROWS_WITH(c.append_speculative(7, k1, k1), Catch::Contains("request"));
  const std::vector<std::int32_t> bad_path{0, 3};
  CHECK_THROWS_WITH(c.append_rows(1, k3, k3, bad_path), Catch::Contains("rows"));
  // layout validation (through validate_kv_layout, as every attention entry point runs it)
  auto l = c.layout();
  REQUIRE_NOTHROW(specdec::validate_kv_layout(l, "f", "cache"));
  std::int32_t bad_len[2] = {5, 0}, starts[2] = {0, 0}, good_len[2] = {1, 0}, bad_start[2] = {0, 6};
  auto bl = l;
  bl.mapping.lengths = bad_len;
  bl.mapping.starts = starts;
  CHECK_THROWS_WITH(specdec::validate_kv_layout(bl, "f", "cache"), Catch::Contains("lengths[0]"));
  bl.mapping.lengths = good_len;
  bl.mapping.starts = bad_start;
  CHECK_THROWS_WITH(specdec::validate_kv_layout(bl, "f", "cache"), Catch::Contains("starts[1]"));
  bl = l;
  bl.mapping.slots = 3;
  CHECK_THROWS_WITH(specdec::validate_kv_layout(bl, "f", "cache"), Catch::Contains("slots"));
  bl = l;
  bl.k = nullptr;
  CHECK_THROWS_WITH(specdec::validate_kv_layout(bl, "f", "cache"), Catch::Contains("non-null k"));
  bl = l;
  bl.mapping.window = 0;
  CHECK_THROWS_AS(specdec::validate_kv_layout(bl, "f", "cache"), specdec::invalid_argument);
}
