// TokenSwift's dynamic partial KV cache (§3.3): Eq. 2 importance over a 32K-token cache, a full
// rebuild (importance + top-(|B|-|S|) selection per kv head), a full compact_partial_kv sync, and a
// decode step over the partial view (per-head, shared, or a dense copy) beside the same step over
// the full cache (the saving the partial cache exists for). D = 128,
// 32 query heads / 8 kv heads, paged fp16/fp32 K/V (pages of 16), |B| = 4096, |S| = 64.
// Counters: GB/s (K rows read, plus V for attention), GFLOP/s (2 per multiply-add).
#include <benchmark/benchmark.h>

#include "common/counters.hpp"

#include <cstdint>
#include <vector>

#include "specdec/attention/decode_attention.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/kv/paged_kv.hpp"
#include "specdec/kv/partial_kv.hpp"

namespace {

constexpr int kHq = 32, kHkv = 8, kD = 128, kPage = 16, kBudget = 4096, kSink = 64;

template <class T>
struct problem {
  int len;
  std::vector<T> kp, vp, q, out;
  std::vector<float> lse, scores;
  std::vector<std::int32_t> indptr, indices, lens, q_indptr = {0, 1};
  explicit problem(int n) : len(n) {
    specdec::philox_stream rng(99, 1);
    const int pages = (n + kPage - 1) / kPage;
    kp.resize(static_cast<std::size_t>(pages) * kPage * kHkv * kD);
    vp.resize(kp.size());
    for (auto& x : kp) x = specdec::from_float<T>(2.0f * rng.uniform() - 1.0f);
    for (auto& x : vp) x = specdec::from_float<T>(2.0f * rng.uniform() - 1.0f);
    q.resize(static_cast<std::size_t>(kHq) * kD);
    for (auto& x : q) x = specdec::from_float<T>(2.0f * rng.uniform() - 1.0f);
    out.resize(q.size());
    lse.resize(kHq);
    scores.resize(static_cast<std::size_t>(kHkv) * n);
    indptr = {0, pages};
    indices.resize(pages);
    for (int i = 0; i < pages; ++i) indices[i] = i;
    lens = {n};
  }
  specdec::paged_kv<T> layout() {
    return {kp.data(), vp.data(), indptr.data(), indices.data(), lens.data(), 1, static_cast<int>(indices.size()),
            kPage, kHkv, kD};
  }
  auto q2() { return specdec::make_view<2>(q.data(), {kHq, kD}); }
  auto q3() { return specdec::make_view<3>(q.data(), {1, kHq, kD}); }
};

template <class T>
void BM_kv_importance(benchmark::State& st) {
  problem<T> p(static_cast<int>(st.range(0)));
  const specdec::host pol{.num_threads = static_cast<int>(st.range(1))};
  const auto cache = p.layout();
  for (auto _ : st) {
    specdec::kv_importance(pol, p.q2(), cache, 0, specdec::make_view<2>(p.scores.data(), {kHkv, p.len}));
    benchmark::DoNotOptimize(p.scores.data());
  }
  specdec_bench::set_counters(st, 1.0 * p.len * kHkv * kD * sizeof(T), 2.0 * p.len * kHkv * kD);
}

template <class T>
void BM_partial_kv_rebuild(benchmark::State& st) {
  problem<T> p(static_cast<int>(st.range(0)));
  const specdec::host pol{.num_threads = static_cast<int>(st.range(1))};
  const auto cache = p.layout();
  specdec::partial_kv_index idx(1, kHkv, kBudget, kSink);
  for (auto _ : st) {
    idx.rebuild(pol, 0, p.q2(), cache);
    benchmark::DoNotOptimize(idx.index_data());
  }
  specdec_bench::set_counters(st, 1.0 * p.len * kHkv * kD * sizeof(T), 2.0 * p.len * kHkv * kD);
}

// compact_partial_kv::sync right after a rebuild (every slot of every kv head copied: |B| x Hkv K and
// V rows), the cost a copy adds once per |B| - |S| committed tokens.
template <class T>
void BM_partial_kv_compact_sync(benchmark::State& st) {
  problem<T> p(static_cast<int>(st.range(0)));
  const auto cache = p.layout();
  specdec::partial_kv_index idx(1, kHkv, kBudget, kSink);
  idx.rebuild(specdec::host{.num_threads = 1}, 0, p.q2(), cache);
  specdec::compact_partial_kv<T> copy(1, kHkv, kBudget, kD);
  for (auto _ : st) {
    copy.invalidate(0);
    benchmark::DoNotOptimize(copy.sync(idx, cache, 0));
  }
  specdec_bench::set_counters(st, 2.0 * 2.0 * kBudget * kHkv * kD * sizeof(T), 0.0);  // read + write, K and V
}

// Arg 2: 0 = over the full cache, 1 = over the partial view (|B| tokens per kv head, each kv head its
// own selection: the paper), 2 = the same with one selection shared by the kv heads, 3 = over a
// compact_partial_kv copy of the per-head view (dense, what TokenSwift itself keeps).
template <class T>
void BM_decode_partial_vs_full(benchmark::State& st) {
  problem<T> p(static_cast<int>(st.range(0)));
  const specdec::host pol{.num_threads = static_cast<int>(st.range(1))};
  const bool partial = st.range(2) != 0;
  const auto cache = p.layout();
  specdec::partial_kv_index idx(1, kHkv, kBudget, kSink,
                                st.range(2) == 2 ? specdec::partial_kv_selection::shared : specdec::partial_kv_selection::per_kv_head);
  idx.rebuild(pol, 0, p.q2(), cache);
  const auto view = idx.layout(cache);
  specdec::compact_partial_kv<T> copy(1, kHkv, kBudget, kD);
  copy.sync(idx, cache, 0);
  const auto dense = copy.layout();
  const auto ip = specdec::make_view<1>(p.q_indptr.data(), {2});
  const auto ov = specdec::make_view<3>(p.out.data(), {1, kHq, kD});
  const auto lv = specdec::make_view<2>(p.lse.data(), {1, kHq});
  const bool compact = st.range(2) == 3;
  const std::size_t ws_bytes = compact   ? specdec::decode_attention_workspace_bytes(pol, p.q3(), dense, ip)
                               : partial ? specdec::decode_attention_workspace_bytes(pol, p.q3(), view, ip)
                                         : specdec::decode_attention_workspace_bytes(pol, p.q3(), cache, ip);
  specdec::attention_workspace ws(ws_bytes);
  for (auto _ : st) {
    if (compact) specdec::decode_attention(pol, p.q3(), dense, ip, ov, lv, {.workspace = &ws});
    else if (partial) specdec::decode_attention(pol, p.q3(), view, ip, ov, lv, {.workspace = &ws});
    else specdec::decode_attention(pol, p.q3(), cache, ip, ov, lv, {.workspace = &ws});
    benchmark::DoNotOptimize(p.out.data());
  }
  const double tokens = partial ? idx.size(0) : p.len;
  specdec_bench::set_counters(st, 2.0 * tokens * kHkv * kD * sizeof(T), 4.0 * tokens * kHq * kD);
}

void args(benchmark::internal::Benchmark* b) {
  b->Args({32768, 1})->Args({32768, 0})->ArgNames({"cache", "threads"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}
void decode_args(benchmark::internal::Benchmark* b) {
  for (int partial : {0, 1, 2, 3}) b->Args({32768, 1, partial});
  b->ArgNames({"cache", "threads", "partial"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

}  // namespace

BENCHMARK_TEMPLATE(BM_kv_importance, float)->Apply(args);
BENCHMARK_TEMPLATE(BM_kv_importance, specdec::half)->Apply(args);
BENCHMARK_TEMPLATE(BM_partial_kv_rebuild, float)->Apply(args);
BENCHMARK_TEMPLATE(BM_partial_kv_rebuild, specdec::half)->Apply(args);
BENCHMARK_TEMPLATE(BM_partial_kv_compact_sync, float)->Arg(32768)->ArgName("cache")->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(BM_partial_kv_compact_sync, specdec::half)->Arg(32768)->ArgName("cache")->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(BM_decode_partial_vs_full, float)->Apply(decode_args);
BENCHMARK_TEMPLATE(BM_decode_partial_vs_full, specdec::half)->Apply(decode_args);
