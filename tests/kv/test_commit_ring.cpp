// Ring-cache commit (kv/commit.hpp over kv/ring_kv.hpp): the accepted path of a tree's draft K/V is
// appended in path order; a full rejection or a failed commit leaves the ring bit-identical; chain
// drafting keeps the oldest accepted pending tokens.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/kv/commit.hpp"
#include "specdec/kv/ring_kv.hpp"
#include "specdec/tree/token_tree.hpp"

namespace {
constexpr int H = 2, D = 4, W = 6;

std::vector<float> rows(int n, specdec::philox_stream& rng) {
  std::vector<float> r(static_cast<std::size_t>(n) * H * D);
  for (auto& x : r) x = rng.uniform();
  return r;
}

bool same_ring(const specdec::ring_kv_cache<float>& c, const std::vector<float>& k0, const std::vector<float>& v0) {
  const std::size_t elems = static_cast<std::size_t>(c.num_requests()) * c.slots() * H * D;
  return std::memcmp(c.k_data(), k0.data(), elems * sizeof(float)) == 0 &&
         std::memcmp(c.v_data(), v0.data(), elems * sizeof(float)) == 0;
}
}  // namespace

TEST_CASE("tree-drafting ring commit appends the accepted path's rows in order") {
  specdec::philox_stream rng(3, 3);
  specdec::ring_kv_cache<float> cache({.requests = 2, .kv_heads = H, .head_dim = D, .window = W, .speculative_capacity = 0});
  auto pre = rows(9, rng);  // wraps the ring
  cache.append(1, specdec::make_view<3>(pre.data(), {9, H, D}), specdec::make_view<3>(pre.data(), {9, H, D}));
  const auto tree = specdec::token_tree::from_parents(std::vector<std::int32_t>{5, 6, 7, 8, 9},
                                                      std::vector<std::int32_t>{-1, -1, 1, 2, 1});
  auto sk = rows(5, rng), sv = rows(5, rng);
  const auto k = specdec::make_view<3>(sk.data(), {5, H, D});
  const auto v = specdec::make_view<3>(sv.data(), {5, H, D});
  const std::vector<std::int32_t> path{1, 2, 3};
  specdec::kv_commit_ring(cache, 1, k, v, std::span(path), tree.parents());
  CHECK(cache.length(1) == W);
  const auto view = cache.layout();
  for (int j = 0; j < 3; ++j)
    for (int h = 0; h < H; ++h) {
      CHECK(std::memcmp(view.k_row(1, W - 3 + j, h), sk.data() + (path[j] * H + h) * D, D * sizeof(float)) == 0);
      CHECK(std::memcmp(view.v_row(1, W - 3 + j, h), sv.data() + (path[j] * H + h) * D, D * sizeof(float)) == 0);
    }
  // the three committed tokens before them are the last three prefill rows
  for (int j = 0; j < 3; ++j)
    CHECK(std::memcmp(view.k_row(1, j, 0), pre.data() + ((6 + j) * H) * D, D * sizeof(float)) == 0);
}

TEST_CASE("ring commit: full rejection and failed commits leave the ring bit-identical") {
  specdec::philox_stream rng(4, 4);
  specdec::ring_kv_cache<float> cache({.requests = 1, .kv_heads = H, .head_dim = D, .window = W, .speculative_capacity = 2});
  auto pre = rows(4, rng);
  cache.append(0, specdec::make_view<3>(pre.data(), {4, H, D}), specdec::make_view<3>(pre.data(), {4, H, D}));
  const std::size_t elems = static_cast<std::size_t>(cache.slots()) * H * D;
  const std::vector<float> k0(cache.k_data(), cache.k_data() + elems), v0(cache.v_data(), cache.v_data() + elems);
  const auto tree = specdec::token_tree::from_parents(std::vector<std::int32_t>{1, 2, 3}, std::vector<std::int32_t>{-1, 0, -1});
  auto sk = rows(3, rng);
  const auto k = specdec::make_view<3>(sk.data(), {3, H, D});
  const std::vector<std::int32_t> none, not_path{0, 2}, good{0, 1};
  specdec::kv_commit_ring(cache, 0, k, k, std::span(none), tree.parents());
  CHECK(cache.length(0) == 4);
  using Catch::Contains;
  REQUIRE_THROWS_WITH(specdec::kv_commit_ring(cache, 0, k, k, std::span(not_path), tree.parents()),
                      Contains("specdec::kv_commit_ring") && Contains("accepted[1]"));
  REQUIRE_THROWS_WITH(specdec::kv_commit_ring(cache, 1, k, k, std::span(good)), Contains("'request'"));
  auto bad = rows(3, rng);
  const auto kbad = specdec::make_view<3>(bad.data(), {3, H, D / 2});
  REQUIRE_THROWS_AS(specdec::kv_commit_ring(cache, 0, kbad, kbad, std::span(good)), specdec::invalid_argument);
  CHECK(same_ring(cache, k0, v0));
  CHECK(cache.length(0) == 4);

  // chain drafting: two pending tokens, one accepted
  auto d = rows(2, rng);
  cache.append_speculative(0, specdec::make_view<3>(d.data(), {2, H, D}), specdec::make_view<3>(d.data(), {2, H, D}));
  REQUIRE_THROWS_WITH(specdec::kv_commit_ring_pending(cache, 0, 3), Contains("'accepted'"));
  specdec::kv_commit_ring_pending(cache, 0, 1);
  CHECK(cache.length(0) == 5);
  CHECK(cache.pending(0) == 0);
  CHECK(std::memcmp(cache.layout().k_row(0, 4, 1), d.data() + H * 0 * D + D, D * sizeof(float)) == 0);
}

TEST_CASE("ring commit rejects a spec buffer larger than int32 node indices before writing") {
  specdec::ring_kv_cache<float> cache({.requests = 1, .kv_heads = H, .head_dim = D, .window = W, .speculative_capacity = 0});
  std::vector<float> buf(H * D, 1.0f);
  const std::size_t elems = static_cast<std::size_t>(cache.slots()) * H * D;
  const std::vector<float> k0(cache.k_data(), cache.k_data() + elems), v0(cache.v_data(), cache.v_data() + elems);
  // 2^31 nodes with a zero token stride: no memory behind them, only the extent matters
  const std::int64_t ext[3] = {std::int64_t{1} << 31, H, D}, str[3] = {0, D, 1};
  const specdec::strided_view<const float, 3> huge(buf.data(), ext, str);
  const std::vector<std::int32_t> none;
  using Catch::Contains;
  REQUIRE_THROWS_WITH(specdec::kv_commit_ring(cache, 0, huge, huge, std::span(none)),
                      Contains("specdec::kv_commit_ring") && Contains("at most 2^31 - 1 tree nodes"));
  CHECK(same_ring(cache, k0, v0));
}

TEST_CASE("ring commit checks its preconditions for a full rejection too") {
  // A full rejection writes nothing, but its arguments are still checked (review find: an empty path
  // returned before the checks, so pending tokens and spec buffers of the wrong shape went unnoticed).
  constexpr int H = 2, D = 4;
  specdec::ring_kv_cache<float> cache({.requests = 1, .kv_heads = H, .head_dim = D, .window = 4, .speculative_capacity = 2});
  std::vector<float> d(2 * H * D, 1.f), sk(3 * H * D, 2.f), bad(3 * 3 * 7, 2.f);
  const auto k = specdec::make_view<3>(static_cast<const float*>(sk.data()), {3, H, D});
  const auto kbad = specdec::make_view<3>(static_cast<const float*>(bad.data()), {3, 3, 7});
  const std::vector<std::int32_t> none;
  cache.append_speculative(0, specdec::make_view<3>(d.data(), {2, H, D}), specdec::make_view<3>(d.data(), {2, H, D}));
  CHECK_THROWS_WITH(specdec::kv_commit_ring(cache, 0, k, k, std::span(none)), Catch::Contains("pending"));
  CHECK(cache.pending(0) == 2);
  cache.rollback(0, 2);
  CHECK_THROWS_WITH(specdec::kv_commit_ring(cache, 0, kbad, kbad, std::span(none)), Catch::Contains("'k'"));
  specdec::kv_commit_ring(cache, 0, k, k, std::span(none));  // valid and empty: nothing appended
  CHECK(cache.length(0) == 0);
  CHECK(cache.pending(0) == 0);
}
