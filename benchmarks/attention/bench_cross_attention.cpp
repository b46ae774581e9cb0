// Cache-free cross-attention on the host (GLIDE §4.1 / LongSpec §3.1): draft queries (1 / 16 / 64
// tokens, already projected to the target's 32 query heads, D = 128) over one target layer's KV
// cache (8 KV heads, contiguous NHD, read in place) of 4K and 32K committed tokens, fp32 and fp16;
// plus the GLIDE query projection helper. Counters: "GB/s" = bytes read/written at least once
// (target K/V up to the committed length, Q, O, LSE), "GFLOP/s" = 2 FLOPs per multiply-add.
#include <benchmark/benchmark.h>

#include "common/counters.hpp"

#include <cstdint>
#include <vector>

#include "specdec/attention/cross_attention.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/kv/contiguous_kv.hpp"

namespace {

constexpr int kHq = 32, kHkv = 8, kD = 128;

template <class T>
struct problem {
  int cache, n;
  std::vector<T> k, v, q, out;
  std::vector<float> lse;
  std::vector<std::int32_t> lengths, committed, q_indptr;
  problem(int cache_len, int queries) : cache(cache_len), n(queries) {
    specdec::philox_stream rng(5, 2);
    auto rnd = [&] { return specdec::from_float<T>(2.0f * rng.uniform() - 1.0f); };
    // the target holds 64 more tokens (being verified) than the draft may see
    k.resize(static_cast<std::size_t>(cache + 64) * kHkv * kD);
    v.resize(k.size());
    for (auto& x : k) x = rnd();
    for (auto& x : v) x = rnd();
    lengths = {cache + 64};
    committed = {cache};
    q.resize(static_cast<std::size_t>(n) * kHq * kD);
    for (auto& x : q) x = rnd();
    out.resize(q.size());
    lse.resize(static_cast<std::size_t>(n) * kHq);
    q_indptr = {0, n};
  }
  specdec::contiguous_kv<T> target() { return {k.data(), v.data(), lengths.data(), 1, cache + 64, kHkv, kD}; }
  auto qv() { return specdec::make_view<3>(q.data(), {n, kHq, kD}); }
  auto ov() { return specdec::make_view<3>(out.data(), {n, kHq, kD}); }
  auto lv() { return specdec::make_view<2>(lse.data(), {n, kHq}); }
  auto iv() { return specdec::make_view<1>(q_indptr.data(), {2}); }
  double bytes() const { return 2.0 * cache * kHkv * kD * sizeof(T) + 2.0 * n * kHq * kD * sizeof(T) + 4.0 * n * kHq; }
  double flops() const { return 4.0 * n * kHq * static_cast<double>(cache) * kD; }
};

using specdec_bench::set_counters;

template <class T>
void BM_cross_attention(benchmark::State& st) {
  problem<T> p(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  const specdec::host pol{.num_threads = static_cast<int>(st.range(2))};
  const auto target = p.target();
  const specdec::kv_prefix<specdec::contiguous_kv<T>> prefix{target, p.committed.data()};
  specdec::attention_workspace ws(specdec::cross_attention_workspace_bytes(pol, p.qv(), prefix, p.iv()));
  for (auto _ : st) {
    specdec::cross_attention(pol, p.qv(), target, p.committed, p.iv(), p.ov(), p.lv(), {.workspace = &ws});
    benchmark::DoNotOptimize(p.out.data());
  }
  set_counters(st, p.bytes(), p.flops());
}

// GLIDE's Q^{m,j} = H^m W_j for all 32 heads: hidden [n, 4096] x w_q [32 * 128, 4096].
template <class T>
void BM_glide_project_queries(benchmark::State& st) {
  const int n = static_cast<int>(st.range(0)), dd = 4096;
  const specdec::host pol{.num_threads = static_cast<int>(st.range(1))};
  std::vector<T> h(static_cast<std::size_t>(n) * dd, specdec::from_float<T>(0.01f)),
      w(static_cast<std::size_t>(kHq) * kD * dd, specdec::from_float<T>(0.02f)),
      q(static_cast<std::size_t>(n) * kHq * kD);
  for (auto _ : st) {
    specdec::glide_project_queries(pol, specdec::make_view<2>(h.data(), {n, dd}),
                                   specdec::make_view<2>(w.data(), {kHq * kD, dd}),
                                   specdec::make_view<3>(q.data(), {n, kHq, kD}));
    benchmark::DoNotOptimize(q.data());
  }
  set_counters(st, (static_cast<double>(w.size()) + h.size() + q.size()) * sizeof(T),
               2.0 * n * kHq * kD * static_cast<double>(dd));
}

// Last argument: threads (1 = the calling thread only, rates per CPU second of that thread; 0 =
// every hardware thread, wall-clock time).
template <int Threads>
void cross_args(benchmark::internal::Benchmark* b) {
  for (int cache : {4096, 32768})
    for (int n : {1, 16, 64}) b->Args({cache, n, Threads});
  b->ArgNames({"cache", "queries", "threads"})->Unit(benchmark::kMillisecond);
  if (Threads != 1) b->UseRealTime();
}
template <int Threads>
void proj_args(benchmark::internal::Benchmark* b) {
  for (int n : {1, 16}) b->Args({n, Threads});
  b->ArgNames({"tokens", "threads"})->Unit(benchmark::kMillisecond);
  if (Threads != 1) b->UseRealTime();
}

}  // namespace

BENCHMARK_TEMPLATE(BM_cross_attention, float)->Apply(cross_args<1>);
BENCHMARK_TEMPLATE(BM_cross_attention, specdec::half)->Apply(cross_args<1>);
BENCHMARK_TEMPLATE(BM_cross_attention, float)->Apply(cross_args<0>);
BENCHMARK_TEMPLATE(BM_cross_attention, specdec::half)->Apply(cross_args<0>);
BENCHMARK_TEMPLATE(BM_glide_project_queries, float)->Apply(proj_args<1>);
BENCHMARK_TEMPLATE(BM_glide_project_queries, float)->Apply(proj_args<0>);
