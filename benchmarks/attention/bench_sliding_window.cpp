// Draft sliding-window tree attention on the host (LongSpec §3.1: W = 512): D = 128, 32 query heads
// / 8 KV heads, a ring that has wrapped (100K tokens appended, W visible), draft trees of 1 / 16 / 64
// nodes, fp32 and fp16. Counters: "GB/s" = bytes read/written at least once (window K/V, tree K/V,
// Q, O, LSE), "GFLOP/s" = 2 FLOPs per multiply-add of QK^T and PV over the keys each query sees
// (W window keys + its ancestors). The workspace is sized once (no allocation in the timed loop).
#include <benchmark/benchmark.h>

#include "common/counters.hpp"

#include <cstdint>
#include <vector>

#include "specdec/attention/sliding_window_attention.hpp"
#include "specdec/core/philox.hpp"

namespace {

constexpr int kHq = 32, kHkv = 8, kD = 128, kW = 512;

template <class T>
struct problem {
  int tree;
  specdec::ring_kv_cache<T> ring{{.requests = 1, .kv_heads = kHkv, .head_dim = kD, .window = kW}};
  std::vector<T> q, sk, sv, out;
  std::vector<float> lse;
  std::vector<std::int32_t> q_indptr;
  std::vector<specdec::mask_word> mask;
  std::int64_t visible_pairs = 0;

  explicit problem(int n) : tree(n) {
    specdec::philox_stream rng(99, 3);
    auto rnd = [&] { return specdec::from_float<T>(2.0f * rng.uniform() - 1.0f); };
    std::vector<T> chunk(static_cast<std::size_t>(1000) * kHkv * kD);
    for (auto& x : chunk) x = rnd();
    const auto cv = specdec::make_view<3>(chunk.data(), {1000, kHkv, kD});
    for (int i = 0; i < 100; ++i) ring.append(0, cv, cv);  // wrapped many times
    q.resize(static_cast<std::size_t>(tree) * kHq * kD);
    for (auto& x : q) x = rnd();
    out.resize(q.size());
    lse.resize(static_cast<std::size_t>(tree) * kHq);
    sk.resize(static_cast<std::size_t>(tree) * kHkv * kD);
    sv.resize(sk.size());
    for (auto& x : sk) x = rnd();
    for (auto& x : sv) x = rnd();
    q_indptr = {0, tree};
    const int wpr = specdec::words_per_row(tree);
    mask.assign(static_cast<std::size_t>(tree) * wpr, 0);
    for (int i = 0; i < tree; ++i) {
      const int parent = i == 0 ? -1 : static_cast<int>(rng.below(static_cast<std::uint32_t>(i)));
      if (parent >= 0)
        for (int w = 0; w < wpr; ++w)
          mask[static_cast<std::size_t>(i) * wpr + w] = mask[static_cast<std::size_t>(parent) * wpr + w];
      specdec::set_bit(&mask[static_cast<std::size_t>(i) * wpr], i);
    }
    for (auto w : mask) visible_pairs += __builtin_popcountll(w);
  }
  auto qv() { return specdec::make_view<3>(q.data(), {tree, kHq, kD}); }
  auto ov() { return specdec::make_view<3>(out.data(), {tree, kHq, kD}); }
  auto lv() { return specdec::make_view<2>(lse.data(), {tree, kHq}); }
  auto kv() { return specdec::make_view<3>(sk.data(), {tree, kHkv, kD}); }
  auto vv() { return specdec::make_view<3>(sv.data(), {tree, kHkv, kD}); }
  auto iv() { return specdec::make_view<1>(q_indptr.data(), {2}); }
  auto mv() { return specdec::make_view<1>(mask.data(), {static_cast<std::int64_t>(mask.size())}); }
  double bytes() const {
    return 2.0 * (kW + tree) * kHkv * kD * sizeof(T) + 2.0 * tree * kHq * kD * sizeof(T) + 4.0 * tree * kHq;
  }
  double flops() const {
    return 4.0 * kHq * kD * (static_cast<double>(tree) * kW + static_cast<double>(visible_pairs));
  }
};

template <class T>
void BM_sliding_window_attention(benchmark::State& st) {
  problem<T> p(static_cast<int>(st.range(0)));
  const specdec::host pol{.num_threads = static_cast<int>(st.range(1))};
  const auto ring = p.ring.layout();
  specdec::attention_workspace ws(specdec::sliding_window_attention_workspace_bytes(pol, p.qv(), ring, p.iv()));
  for (auto _ : st) {
    specdec::sliding_window_attention(pol, p.qv(), ring, p.kv(), p.vv(), p.iv(), p.mv(), p.ov(), p.lv(),
                                      {.workspace = &ws});
    benchmark::DoNotOptimize(p.out.data());
  }
  specdec_bench::set_counters(st, p.bytes(), p.flops());
}

// Appending one accepted token to the wrapped ring (constant cost, no allocation).
template <class T>
void BM_ring_append(benchmark::State& st) {
  problem<T> p(1);
  const int n = static_cast<int>(st.range(0));
  std::vector<T> rows(static_cast<std::size_t>(n) * kHkv * kD, specdec::from_float<T>(0.5f));
  const auto rv = specdec::make_view<3>(rows.data(), {n, kHkv, kD});
  for (auto _ : st) {
    p.ring.append(0, rv, rv);
    benchmark::DoNotOptimize(p.ring.k_data());
  }
  const double bytes = 2.0 * 2 * n * kHkv * kD * sizeof(T);  // read + write, K and V
  st.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.SetBytesProcessed(static_cast<std::int64_t>(bytes) * st.iterations());
}

// Last argument: threads (1 = the calling thread only, rates per CPU second of that thread; 0 =
// every hardware thread, wall-clock time).
template <int Threads>
void args(benchmark::internal::Benchmark* b) {
  for (int tree : {1, 16, 64}) b->Args({tree, Threads});
  b->ArgNames({"tree", "threads"})->Unit(benchmark::kMicrosecond);
  if (Threads != 1) b->UseRealTime();
}

}  // namespace

BENCHMARK_TEMPLATE(BM_sliding_window_attention, float)->Apply(args<1>);
BENCHMARK_TEMPLATE(BM_sliding_window_attention, specdec::half)->Apply(args<1>);
BENCHMARK_TEMPLATE(BM_sliding_window_attention, float)->Apply(args<0>);
BENCHMARK_TEMPLATE(BM_sliding_window_attention, specdec::half)->Apply(args<0>);
BENCHMARK_TEMPLATE(BM_ring_append, specdec::half)->ArgName("tokens")->Arg(1)->Arg(8);
