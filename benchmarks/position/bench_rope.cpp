// RoPE on the host at D = 128, 32 query heads + 8 KV heads (Q and K of one layer rotated per call),
// 1 / 64 / 4096 tokens at scattered positions (tree-like: committed length + depth), float and
// half storage; the params path (cos/sin in double per token) and the precomputed rope_cache path.
// Counters: "GB/s" = bytes of Q and K read and written once (+ the cos/sin rows for the cache path),
// "GFLOP/s" = 6 FLOPs per rotated pair (4 mul + 2 add).
#include <benchmark/benchmark.h>

#include "common/counters.hpp"

#include <cstdint>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/position/rope.hpp"

namespace {

constexpr int kHq = 32, kHkv = 8, kD = 128;

template <class T>
struct problem {
  int n;
  std::vector<T> q, k;
  std::vector<std::int32_t> pos;
  explicit problem(int tokens) : n(tokens) {
    specdec::philox_stream rng(7, 1);
    q.resize(static_cast<std::size_t>(n) * kHq * kD);
    k.resize(static_cast<std::size_t>(n) * kHkv * kD);
    for (auto& x : q) x = specdec::from_float<T>(rng.uniform() - 0.5f);
    for (auto& x : k) x = specdec::from_float<T>(rng.uniform() - 0.5f);
    for (int i = 0; i < n; ++i) pos.push_back(30000 + static_cast<std::int32_t>(rng.below(64)));
  }
  auto qv() { return specdec::make_view<3>(q.data(), {n, kHq, kD}); }
  auto kv() { return specdec::make_view<3>(k.data(), {n, kHkv, kD}); }
  auto pv() const { return std::span<const std::int32_t>(pos); }
  double bytes() const { return 2.0 * n * (kHq + kHkv) * kD * sizeof(T); }
  double flops() const { return 3.0 * n * (kHq + kHkv) * kD; }
};

using specdec_bench::set_counters;

template <class T>
void BM_rope_params(benchmark::State& st) {
  problem<T> p(static_cast<int>(st.range(0)));
  const specdec::host pol{.num_threads = static_cast<int>(st.range(1))};
  const specdec::rope_params rp{.theta = 500000.0, .llama3 = specdec::llama3_rope_scaling{}};
  for (auto _ : st) {
    specdec::apply_rope(pol, rp, p.qv(), p.pv());
    specdec::apply_rope(pol, rp, p.kv(), p.pv());
    benchmark::DoNotOptimize(p.q.data());
  }
  set_counters(st, p.bytes(), p.flops());
}

template <class T>
void BM_rope_cache(benchmark::State& st) {
  problem<T> p(static_cast<int>(st.range(0)));
  const specdec::host pol{.num_threads = static_cast<int>(st.range(1))};
  const specdec::rope_cache cache({.theta = 500000.0, .llama3 = specdec::llama3_rope_scaling{}}, kD, 30064);
  for (auto _ : st) {
    specdec::apply_rope(pol, cache, p.qv(), p.pv());
    specdec::apply_rope(pol, cache, p.kv(), p.pv());
    benchmark::DoNotOptimize(p.q.data());
  }
  set_counters(st, p.bytes() + 2.0 * 2 * p.n * kD / 2 * sizeof(float), p.flops());
}

// Last argument: threads. 1 = the calling thread only, rates per CPU second of that thread (it does
// all the work; stays meaningful on a shared machine); 0 = every hardware thread, wall-clock time.
template <int Threads>
void args(benchmark::internal::Benchmark* b) {
  for (int n : {1, 64, 4096}) b->Args({n, Threads});
  b->ArgNames({"tokens", "threads"})->Unit(benchmark::kMicrosecond);
  if (Threads != 1) b->UseRealTime();
}

}  // namespace

#define SPECDEC_ROPE_BENCH(fn, T)            \
  BENCHMARK_TEMPLATE(fn, T)->Apply(args<1>); \
  BENCHMARK_TEMPLATE(fn, T)->Apply(args<0>)
SPECDEC_ROPE_BENCH(BM_rope_params, float);
SPECDEC_ROPE_BENCH(BM_rope_params, specdec::half);
SPECDEC_ROPE_BENCH(BM_rope_cache, float);
SPECDEC_ROPE_BENCH(BM_rope_cache, specdec::half);
SPECDEC_ROPE_BENCH(BM_rope_cache, specdec::bfloat16);
