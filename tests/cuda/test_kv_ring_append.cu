// ring_append_batch(cuda{}) against ring_kv_cache::append_rows per request (tests/kv/ring_append_util.hpp):
// a device ring updated round after round (wrapping, paths longer than the ring) holds the same rows
// and view arrays as the host reference; bad values are reported in status and leave the request
// unwritten; a captured graph replays; host memory is refused before any CUDA call.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "cuda/cuda_test_util.cuh"
#include "kv/ring_append_util.hpp"
#include "specdec/kv/ring_append.cuh"

using specdec::memory_space;
using specdec_test::device_buffer;
using specdec_test::dv;

namespace {

struct device_ring {
  int R, hkv, d, W, slots;
  device_buffer<float> k, v;
  device_buffer<std::int32_t> starts, lengths, st;
  device_buffer<std::int64_t> appended;
  device_ring(int R_, int hkv_, int d_, int W_, int P)
      : R(R_), hkv(hkv_), d(d_), W(W_), slots(W_ + P),
        k(std::vector<float>(static_cast<std::size_t>(R_) * (W_ + P) * hkv_ * d_, 0.0f)),
        v(std::vector<float>(static_cast<std::size_t>(R_) * (W_ + P) * hkv_ * d_, 0.0f)),
        starts(std::vector<std::int32_t>(static_cast<std::size_t>(R_), 0)),
        lengths(std::vector<std::int32_t>(static_cast<std::size_t>(R_), 0)), st(std::vector<std::int32_t>{5, 5, 5}),
        appended(std::vector<std::int64_t>(static_cast<std::size_t>(R_), 0)) {}
  specdec::ring_kv<float> layout() const {
    return {k.data(), v.data(), starts.data(), lengths.data(), R, slots, W, hkv, d, memory_space::device};
  }
};

struct device_round {
  device_buffer<std::int32_t> ni, acc, nacc;
  device_buffer<float> k, v;
  std::int64_t N;
  explicit device_round(const specdec_test::ring_round& w)
      : ni(w.node_indptr), acc(w.accepted.empty() ? std::vector<std::int32_t>{0} : w.accepted), nacc(w.num_accepted),
        k(w.spec_k.empty() ? std::vector<float>{0} : w.spec_k), v(w.spec_v.empty() ? std::vector<float>{0} : w.spec_v),
        N(w.node_indptr.back()) {}
};

void launch(device_ring& g, device_round& w, cudaStream_t s = nullptr) {
  specdec::ring_append_batch(specdec::cuda{.stream = s}, g.layout(), dv(w.ni),
                             specdec::make_view<1>(w.acc.data(), {w.N}, memory_space::device), dv(w.nacc),
                             specdec::make_view<3>(w.k.data(), {w.N, g.hkv, g.d}, memory_space::device),
                             specdec::make_view<3>(w.v.data(), {w.N, g.hkv, g.d}, memory_space::device), dv(g.appended),
                             dv(g.starts), dv(g.lengths), dv(g.st));
}

void check_equal(const device_ring& g, const specdec::ring_kv_cache<float>& ref) {
  const auto b = ref.layout();
  const std::size_t elems = static_cast<std::size_t>(g.R) * g.slots * g.hkv * g.d;
  CHECK(g.k.download() == std::vector<float>(b.k, b.k + elems));
  CHECK(g.v.download() == std::vector<float>(b.v, b.v + elems));
  const auto app = g.appended.download();
  const auto st = g.starts.download(), len = g.lengths.download();
  for (int r = 0; r < g.R; ++r) {
    CHECK(app[r] == ref.appended(r));
    CHECK(st[r] == b.mapping.starts[r]);
    CHECK(len[r] == b.mapping.lengths[r]);
  }
}

}  // namespace

TEST_CASE("cuda ring_append_batch equals ring_kv_cache::append_rows, round after round", "[cuda][kv]") {
  specdec::philox_stream rng(31, 1);
  for (auto [R, W, P, max_nodes] : {std::tuple{1, 4, 0, 9}, std::tuple{3, 16, 0, 40}, std::tuple{5, 16, 4, 12},
                                    std::tuple{9, 512, 0, 64}}) {
    const int hkv = 2, d = 64;
    device_ring g(R, hkv, d, W, P);
    specdec::ring_kv_cache<float> ref({.requests = R, .kv_heads = hkv, .head_dim = d, .window = W, .speculative_capacity = P});
    for (int round = 0; round < 20; ++round) {
      auto w = specdec_test::random_ring_round(R, max_nodes, hkv, d, rng);
      device_round dw(w);
      launch(g, dw);
      specdec_test::sync_check("ring_append_batch");
      CHECK(g.st.download() == std::vector<std::int32_t>{0, -1, -1});
      specdec_test::reference_append(ref, w, hkv, d);
      check_equal(g, ref);
    }
  }
}

TEST_CASE("cuda ring_append_batch reports bad values and leaves that request unwritten", "[cuda][kv]") {
  const int R = 3, hkv = 2, d = 8;
  specdec::philox_stream rng(5, 0);
  auto w = specdec_test::random_ring_round(R, 6, hkv, d, rng);
  while (w.num_accepted[1] < 2) w = specdec_test::random_ring_round(R, 6, hkv, d, rng);
  const int b1 = w.node_indptr[1];
  auto bad = w;
  std::swap(bad.accepted[b1], bad.accepted[b1 + 1]);
  device_ring g(R, hkv, d, 8, 0);
  device_round dw(bad);
  launch(g, dw);
  specdec_test::sync_check("ring_append_batch (bad path)");
  const auto st = g.st.download();
  CHECK(st[0] == static_cast<std::int32_t>(specdec::device_error::accepted));
  CHECK(st[1] == 1);
  CHECK(g.appended.download()[1] == 0);
  CHECK(g.lengths.download()[1] == 0);
}

TEST_CASE("cuda ring_append_batch is captured in a CUDA graph and replays", "[cuda][kv]") {
  const int R = 4, hkv = 2, d = 16;
  specdec::philox_stream rng(9, 0);
  auto w = specdec_test::random_ring_round(R, 10, hkv, d, rng);
  device_ring g(R, hkv, d, 8, 0);
  device_round dw(w);
  specdec::ring_kv_cache<float> ref({.requests = R, .kv_heads = hkv, .head_dim = d, .window = 8});
  specdec_test::replay_in_graph(
      3, [&](cudaStream_t s) { launch(g, dw, s); }, [&] { g.st.upload({4, 4, 4}); },
      [&] {  // each replay appends the same round again
        specdec_test::reference_append(ref, w, hkv, d);
        check_equal(g, ref);
      });
}

TEST_CASE("cuda ring_append_batch rejects host memory before any CUDA call", "[cuda][kv][nogpu]") {
  const int R = 2, hkv = 2, d = 8;
  specdec::philox_stream rng(1, 0);
  auto w = specdec_test::random_ring_round(R, 4, hkv, d, rng);
  specdec::ring_kv_cache<float> host_ring({.requests = R, .kv_heads = hkv, .head_dim = d, .window = 8});
  const auto ring = host_ring.layout();
  std::vector<std::int64_t> appended(R);
  std::vector<std::int32_t> st(3);
  auto dev = [](auto* p, std::int64_t n) { return specdec::make_view<1>(p, {n}, memory_space::device); };
  const std::int64_t N = w.node_indptr.back();
  CHECK_THROWS_WITH(
      specdec::ring_append_batch(specdec::cuda{}, ring, dev(w.node_indptr.data(), R + 1), dev(w.accepted.data(), N),
                                 dev(w.num_accepted.data(), R),
                                 specdec::make_view<3>(w.spec_k.data(), {N, hkv, d}, memory_space::device),
                                 specdec::make_view<3>(w.spec_v.data(), {N, hkv, d}, memory_space::device),
                                 dev(appended.data(), R), dev(const_cast<std::int32_t*>(ring.mapping.starts), R),
                                 dev(const_cast<std::int32_t*>(ring.mapping.lengths), R), dev(st.data(), 3)),
      Catch::Contains("ring_append_batch") && Catch::Contains("ring") && Catch::Contains("device-accessible"));
}
