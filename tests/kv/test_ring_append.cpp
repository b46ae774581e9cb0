// ring_append_batch (host backend; the cuda one is tested against it in tests/cuda/
// test_kv_ring_append.cu): every round equals ring_kv_cache::append_rows per request (storage, view
// arrays and appended counters, also when a path is longer than the ring), and bad values throw
// before anything is written.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "kv/ring_append_util.hpp"
#include "specdec/kv/ring_append.hpp"

namespace {

template <class T>
specdec::strided_view<T, 1> v1(std::vector<T>& x) {
  return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())});
}

struct state {
  specdec::ring_kv_cache<float> cache;  // its storage and view arrays, written by ring_append_batch
  std::vector<std::int64_t> appended;
  std::vector<std::int32_t> status{7, 7, 7};
  state(int R, int hkv, int d, int W, int P)
      : cache({.requests = R, .kv_heads = hkv, .head_dim = d, .window = W, .speculative_capacity = P}),
        appended(static_cast<std::size_t>(R), 0) {}
};

void append(state& s, specdec_test::ring_round& w, int hkv, int d) {
  const auto ring = s.cache.layout();
  const std::int64_t N = w.node_indptr.back();
  auto starts = specdec::make_view<1>(const_cast<std::int32_t*>(ring.mapping.starts), {ring.requests});
  auto lengths = specdec::make_view<1>(const_cast<std::int32_t*>(ring.mapping.lengths), {ring.requests});
  specdec::ring_append_batch(specdec::host{}, ring, v1(w.node_indptr), v1(w.accepted), v1(w.num_accepted),
                             specdec::make_view<3>(w.spec_k.data(), {N, hkv, d}),
                             specdec::make_view<3>(w.spec_v.data(), {N, hkv, d}), v1(s.appended), starts, lengths,
                             v1(s.status));
}

void check_equal(const state& s, const specdec::ring_kv_cache<float>& ref) {
  const auto a = s.cache.layout(), b = ref.layout();
  const std::size_t elems = static_cast<std::size_t>(a.requests) * a.mapping.slots * a.kv_heads * a.dim;
  CHECK(std::vector<float>(a.k, a.k + elems) == std::vector<float>(b.k, b.k + elems));
  CHECK(std::vector<float>(a.v, a.v + elems) == std::vector<float>(b.v, b.v + elems));
  for (int r = 0; r < a.requests; ++r) {
    CHECK(s.appended[r] == ref.appended(r));
    CHECK(a.mapping.lengths[r] == b.mapping.lengths[r]);
    CHECK(a.mapping.starts[r] == b.mapping.starts[r]);
  }
}

}  // namespace

TEST_CASE("ring_append_batch equals ring_kv_cache::append_rows per request, round after round", "[kv][ring]") {
  specdec::philox_stream rng(31, 0);
  for (auto [R, W, P, max_nodes] : {std::tuple{1, 4, 0, 9}, std::tuple{3, 16, 0, 40}, std::tuple{5, 16, 4, 12},
                                    std::tuple{2, 64, 0, 70}}) {
    const int hkv = 2, d = 8;
    state s(R, hkv, d, W, P);
    specdec::ring_kv_cache<float> ref({.requests = R, .kv_heads = hkv, .head_dim = d, .window = W, .speculative_capacity = P});
    for (int round = 0; round < 20; ++round) {
      auto w = specdec_test::random_ring_round(R, max_nodes, hkv, d, rng);
      append(s, w, hkv, d);
      CHECK(s.status == std::vector<std::int32_t>{0, -1, -1});
      specdec_test::reference_append(ref, w, hkv, d);
      check_equal(s, ref);
    }
    for (int r = 0; r < R; ++r) CHECK(ref.appended(r) > W + P);  // every ring wrapped
  }
}

TEST_CASE("ring_append_batch rejects bad values before writing anything", "[kv][ring][validation]") {
  const int R = 3, hkv = 2, d = 8;
  specdec::philox_stream rng(5, 0);
  auto w = specdec_test::random_ring_round(R, 6, hkv, d, rng);
  while (w.num_accepted[1] < 2) w = specdec_test::random_ring_round(R, 6, hkv, d, rng);
  auto reject = [&](specdec_test::ring_round bad, std::vector<std::int64_t> appended, const std::string& what) {
    state s(R, hkv, d, 8, 0);
    s.appended = appended;
    specdec::ring_kv_cache<float> before({.requests = R, .kv_heads = hkv, .head_dim = d, .window = 8});
    CHECK_THROWS_WITH(append(s, bad, hkv, d), Catch::Contains("ring_append_batch") && Catch::Contains(what));
    CHECK(s.appended == appended);
    CHECK(s.status == std::vector<std::int32_t>{7, 7, 7});
    const auto a = s.cache.layout(), b = before.layout();
    const std::size_t elems = static_cast<std::size_t>(R) * 8 * hkv * d;
    CHECK(std::vector<float>(a.k, a.k + elems) == std::vector<float>(b.k, b.k + elems));
  };
  const std::vector<std::int64_t> zeros(R, 0);
  const int b1 = w.node_indptr[1];
  {
    auto bad = w;
    std::swap(bad.accepted[b1], bad.accepted[b1 + 1]);  // not increasing
    reject(bad, zeros, "accepted");
  }
  {
    auto bad = w;
    bad.num_accepted[1] = w.node_indptr[2] - w.node_indptr[1] + 1;
    reject(bad, zeros, "num_accepted");
  }
  {
    auto bad = w;
    bad.node_indptr[1] = -1;
    reject(bad, zeros, "node_indptr");
  }
  reject(w, {0, -3, 0}, "appended");
  {  // view arrays that are not the ring's own
    state s(R, hkv, d, 8, 0);
    std::vector<std::int32_t> starts(R), lengths(R);
    const std::int64_t N = w.node_indptr.back();
    CHECK_THROWS_WITH(specdec::ring_append_batch(specdec::host{}, s.cache.layout(), v1(w.node_indptr), v1(w.accepted),
                                                 v1(w.num_accepted), specdec::make_view<3>(w.spec_k.data(), {N, hkv, d}),
                                                 specdec::make_view<3>(w.spec_v.data(), {N, hkv, d}), v1(s.appended),
                                                 v1(starts), v1(lengths), v1(s.status)),
                      Catch::Contains("the ring's own starts and lengths"));
  }
  {  // outputs over inputs: status over node_indptr (the device clears status before reading the trees)
    state s(R, hkv, d, 8, 0);
    const auto ring = s.cache.layout();
    auto wi = w;
    const std::int64_t N = wi.node_indptr.back();
    auto starts = specdec::make_view<1>(const_cast<std::int32_t*>(ring.mapping.starts), {ring.requests});
    auto lengths = specdec::make_view<1>(const_cast<std::int32_t*>(ring.mapping.lengths), {ring.requests});
    const auto before = wi.node_indptr;
    CHECK_THROWS_WITH(specdec::ring_append_batch(specdec::host{}, ring, v1(wi.node_indptr), v1(wi.accepted),
                                                 v1(wi.num_accepted), specdec::make_view<3>(wi.spec_k.data(), {N, hkv, d}),
                                                 specdec::make_view<3>(wi.spec_v.data(), {N, hkv, d}), v1(s.appended),
                                                 starts, lengths, specdec::make_view<1>(wi.node_indptr.data(), {3})),
                      Catch::Contains("'status'") && Catch::Contains("'node_indptr'"));
    CHECK(wi.node_indptr == before);
    CHECK(s.appended == zeros);
  }
}
