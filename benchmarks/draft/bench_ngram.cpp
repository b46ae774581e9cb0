// Host draft-candidate benchmarks: TokenSwift n-gram pool (n = 4) update and top-20 query over a
// 100K-token generated sequence, and incremental prompt lookup (m = 3..1) push + propose.
// Counters: "GB/s" = token bytes consumed (4 B per token pushed) or n-gram bytes returned;
// items_per_second = tokens pushed / queries answered. FLOP/s does not apply (hashing, no math).
// The synthetic text repeats phrases (tokens drawn from a 2000-token vocabulary with 50% copying
// of an earlier 8-token span), so counts and matches look like generated long text.
#include <benchmark/benchmark.h>

#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/draft/ngram_pool.hpp"
#include "specdec/draft/prompt_lookup.hpp"

namespace {

std::vector<std::int32_t> synthetic_text(int n, std::uint64_t seed) {
  specdec::philox_stream rng(seed, 4);
  std::vector<std::int32_t> t;
  t.reserve(static_cast<std::size_t>(n));
  while (static_cast<int>(t.size()) < n) {
    if (t.size() > 64 && rng.below(2)) {
      const auto s = rng.below(static_cast<std::uint32_t>(t.size() - 8));
      for (int i = 0; i < 8 && static_cast<int>(t.size()) < n; ++i) t.push_back(t[s + static_cast<std::uint32_t>(i)]);
    } else {
      t.push_back(static_cast<std::int32_t>(rng.below(2000)));
    }
  }
  return t;
}

void BM_ngram_pool_update_100k(benchmark::State& state) {
  const auto text = synthetic_text(100000, 1);
  const int cap = static_cast<int>(state.range(0));
  for (auto _ : state) {
    specdec::ngram_pool pool({.n = 4, .max_entries = cap});
    pool.extend(text);
    benchmark::DoNotOptimize(pool.size());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(text.size()) * 4, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
  state.counters["ns_per_token"] = benchmark::Counter(static_cast<double>(text.size()) * 1e-9,
                                                      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetItemsProcessed(static_cast<std::int64_t>(text.size()) * state.iterations());
  state.SetLabel(cap >= (1 << 20) ? "no eviction" : "cap forces LFU eviction");
}
BENCHMARK(BM_ngram_pool_update_100k)->Arg(1 << 20)->Arg(16384)->Unit(benchmark::kMillisecond);

void BM_ngram_pool_query_top20(benchmark::State& state) {
  const auto text = synthetic_text(100000, 1);
  specdec::ngram_pool pool({.n = 4});
  pool.extend(text);
  std::size_t q = 0, returned = 0, scanned = 0;
  for (auto _ : state) {
    const std::int32_t first = text[q++ % text.size()];  // queried tokens follow the text's frequencies
    scanned += static_cast<std::size_t>(pool.count_starting_with(first));
    const auto r = pool.query(first, 20);
    returned += r.size();
    benchmark::DoNotOptimize(r.data());
  }
  state.counters["avg_returned"] = static_cast<double>(returned) / static_cast<double>(state.iterations());
  state.counters["avg_candidates"] = static_cast<double>(scanned) / static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(returned) * 16, benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_ngram_pool_query_top20)->Unit(benchmark::kMicrosecond);

// Arg: max_ngram (3: PLD's usual lengths; 12: the byte-level demo's).
void BM_prompt_lookup_100k(benchmark::State& state) {
  const auto text = synthetic_text(100000, 2);
  std::size_t proposed = 0;
  const auto max_ngram = static_cast<int>(state.range(0));
  for (auto _ : state) {
    specdec::prompt_lookup pl({.min_ngram = 1, .max_ngram = max_ngram, .num_tokens = 10});
    for (std::size_t i = 0; i < text.size(); ++i) {
      pl.push(text[i]);
      if ((i & 15) == 0) proposed += pl.propose().size();  // one proposal per "step"
    }
    benchmark::DoNotOptimize(proposed);
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(text.size()) * 4, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
  state.counters["ns_per_token"] = benchmark::Counter(static_cast<double>(text.size()) * 1e-9,
                                                      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetItemsProcessed(static_cast<std::int64_t>(text.size()) * state.iterations());
}
BENCHMARK(BM_prompt_lookup_100k)->Arg(3)->Arg(12)->Unit(benchmark::kMillisecond);

}  // namespace
