// Host tree benchmarks: LongSpec beam tree build (widths {4,16,16,16,16}) at vocab 32K and 128K,
// O(V) top-k over 32K/128K rows (vs std::partial_sort and a full sort for context), trie merge of
// 20 4-gram candidates into TokenSwift's 40-node [1,3,3,3] tree, ancestor mask of a 1024-node tree,
// GLIDE's CAPE from full draft rows (cape_expand) and from ranked top-8 candidates (cape_expand_ranked,
// what decoder/tree_builders.hpp's cape_tree_builder runs each step).
// Counters: "GB/s" = bytes of the rows each step must read once (frontier x vocab x 4 B), or the
// tree/mask bytes written; items_per_second = vocabulary entries scanned (or candidate tokens
// merged). FLOP/s does not apply (comparisons only). Inputs are built once, outside the timed loop.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/core/topk.hpp"
#include "specdec/tree/beam_tree_builder.hpp"
#include "specdec/tree/cape.hpp"
#include "specdec/tree/cartesian_tree.hpp"
#include "specdec/tree/trie_merge.hpp"

namespace {

// Rows of log-prob-like values (log-softmax of random logits is not needed for timing: any values
// <= 0 with a realistic spread exercise the same code).
std::vector<float> random_rows(int rows, int vocab, std::uint64_t seed) {
  specdec::philox_stream rng(seed, 2);
  std::vector<float> v(static_cast<std::size_t>(rows) * static_cast<std::size_t>(vocab));
  for (auto& x : v) x = -20.0f * rng.uniform() - 1e-3f;
  return v;
}

// range(1) = 1: the callback copies the rows every step (drafter output write included);
// range(1) = 0: rows are written once and reused, isolating the builder's own selection cost.
void BM_beam_tree_build(benchmark::State& state) {
  const int vocab = static_cast<int>(state.range(0));
  const bool copy_rows = state.range(1) != 0;
  bool filled = false;
  const std::vector<int> widths{4, 16, 16, 16, 16};
  const int max_rows = 16;
  const auto src = random_rows(max_rows, vocab, 7);
  specdec::beam_tree_builder b({.beam_widths = widths});
  std::int64_t rows_scanned = 0;
  for (auto _ : state) {
    rows_scanned = 0;
    auto t = b.build_from_logprobs(vocab, [&](const specdec::token_tree&, std::span<const std::int32_t> f, std::span<float> rows) {
      // the "drafter": copy precomputed rows (what a model's log-softmax output write would cost)
      if (copy_rows || !filled) std::memcpy(rows.data(), src.data(), f.size() * static_cast<std::size_t>(vocab) * sizeof(float));
      filled = filled || f.size() == 16;
      rows_scanned += static_cast<std::int64_t>(f.size());
    });
    benchmark::DoNotOptimize(t);
  }
  const double entries = static_cast<double>(rows_scanned) * vocab;
  state.counters["steps"] = static_cast<double>(widths.size());
  state.counters["GB/s"] = benchmark::Counter(entries * sizeof(float), benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
  state.counters["us_per_step"] = benchmark::Counter(static_cast<double>(widths.size()) * 1e-6,
                                                     benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetItemsProcessed(static_cast<std::int64_t>(entries) * state.iterations());
  state.SetLabel(copy_rows ? "53 rows/build, rows copied" : "53 rows/build, selection only");
}
BENCHMARK(BM_beam_tree_build)->Args({32000, 1})->Args({128000, 1})->Args({32000, 0})->Args({128000, 0})
    ->Unit(benchmark::kMicrosecond);

// Builder-only cost with a top-k drafter (candidates computed on the drafter side): per-step merge.
void BM_beam_tree_build_candidates(benchmark::State& state) {
  const std::vector<int> widths{4, 16, 16, 16, 16};
  specdec::beam_tree_builder b({.beam_widths = widths});
  specdec::philox_stream rng(3, 3);
  std::vector<float> lps(16 * 16);
  for (auto& x : lps) x = -10.0f * rng.uniform();
  for (auto _ : state) {
    auto t = b.build_from_candidates([&](const specdec::token_tree&, std::span<const std::int32_t> f, int k,
                                         std::span<std::int32_t> toks, std::span<float> lp) {
      for (std::size_t i = 0; i < f.size() * static_cast<std::size_t>(k); ++i) {
        toks[i] = static_cast<std::int32_t>(i % static_cast<std::size_t>(k));
        lp[i] = lps[i % lps.size()];
      }
    });
    benchmark::DoNotOptimize(t);
  }
  const double cand = 4 + 4 * 16 + 3 * 16 * 16;  // candidate pairs per build
  state.counters["GB/s"] = benchmark::Counter(cand * 8, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["us_per_step"] = benchmark::Counter(5 * 1e-6, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetItemsProcessed(static_cast<std::int64_t>(cand) * state.iterations());
}
BENCHMARK(BM_beam_tree_build_candidates)->Unit(benchmark::kMicrosecond);

void BM_topk(benchmark::State& state) {
  const int vocab = static_cast<int>(state.range(0)), k = static_cast<int>(state.range(1));
  const auto row = random_rows(1, vocab, 11);
  std::vector<std::int32_t> idx(static_cast<std::size_t>(k));
  std::vector<float> val(static_cast<std::size_t>(k));
  specdec::topk_workspace<float> ws;
  for (auto _ : state) {
    specdec::topk<float>(row, k, idx, val, ws);
    benchmark::DoNotOptimize(idx.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(vocab) * sizeof(float),
                                              benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.SetItemsProcessed(static_cast<std::int64_t>(vocab) * state.iterations());
}
BENCHMARK(BM_topk)->Args({32000, 1})->Args({32000, 20})->Args({32000, 64})->Args({128000, 20})->Args({128000, 64})
    ->Unit(benchmark::kMicrosecond);

// Context: the same selection by std::partial_sort over an index array (O(V log k) + the iota).
void BM_topk_partial_sort(benchmark::State& state) {
  const int vocab = static_cast<int>(state.range(0)), k = static_cast<int>(state.range(1));
  const auto row = random_rows(1, vocab, 11);
  std::vector<std::int32_t> idx(static_cast<std::size_t>(vocab));
  for (auto _ : state) {
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](std::int32_t a, std::int32_t b) {
      return row[static_cast<std::size_t>(a)] != row[static_cast<std::size_t>(b)] ? row[static_cast<std::size_t>(a)] > row[static_cast<std::size_t>(b)] : a < b;
    });
    benchmark::DoNotOptimize(idx.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(vocab) * sizeof(float),
                                              benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.SetItemsProcessed(static_cast<std::int64_t>(vocab) * state.iterations());
}
BENCHMARK(BM_topk_partial_sort)->Args({32000, 20})->Args({128000, 20})->Unit(benchmark::kMicrosecond);

void BM_trie_merge_20_ngrams_into_40_node_tree(benchmark::State& state) {
  specdec::philox_stream rng(5, 5);
  std::vector<specdec::head_candidates> heads;
  for (int k = 0; k < 4; ++k) {
    specdec::head_candidates h;
    for (int r = 0; r < (k == 0 ? 1 : 3); ++r) h.tokens.push_back(100 * k + r), h.logprobs.push_back(-0.5f * static_cast<float>(r + 1));
    heads.push_back(h);
  }
  const auto base = specdec::cartesian_tree(heads);  // 40 nodes
  std::vector<std::vector<std::int32_t>> grams;
  for (int i = 0; i < 20; ++i) {  // 4-grams from the pool: start with a_0, half share the tree's prefixes
    std::vector<std::int32_t> g{0};
    for (int d = 1; d < 4; ++d) g.push_back(rng.below(2) ? 100 * d + static_cast<std::int32_t>(rng.below(3)) : 5000 + static_cast<std::int32_t>(rng.below(50)));
    grams.push_back(g);
  }
  specdec::trie_merger m;
  int nodes = 0;
  for (auto _ : state) {
    m.clear();
    m.add_tree(base, 0);
    for (const auto& g : grams) m.add_sequence(g, {}, 1);
    nodes = m.tree().size();
    benchmark::DoNotOptimize(m.tree().tokens().data());
  }
  state.counters["nodes"] = nodes;
  // bytes of the merged tree's SoA arrays written (token, parent, depth: int32; logprob, score: f32)
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(nodes) * 20, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
  state.SetItemsProcessed(static_cast<std::int64_t>(40 + 20 * 4) * state.iterations());
}
BENCHMARK(BM_trie_merge_20_ngrams_into_40_node_tree)->Unit(benchmark::kMicrosecond);

void BM_ancestor_mask(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  specdec::philox_stream rng(8, 8);
  specdec::token_tree t;
  for (int i = 0; i < n; ++i) t.add(i, static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(i + 1))) - 1, -1.0f);
  std::vector<specdec::mask_word> buf(static_cast<std::size_t>(n) * specdec::words_per_row(n));
  for (auto _ : state) {
    t.write_ancestor_mask(buf.data(), specdec::words_per_row(n));
    benchmark::DoNotOptimize(buf.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(buf.size()) * 8, benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
  state.SetItemsProcessed(static_cast<std::int64_t>(n) * state.iterations());
}
BENCHMARK(BM_ancestor_mask)->Arg(64)->Arg(1024)->Unit(benchmark::kMicrosecond);

// CAPE (GLIDE §4.2, Algorithm 1) over gamma = 5 draft rows of V probabilities, with confidences
// spread over the §4.2 bins (one top-k of K_i + 1 per row). GB/s = row bytes read (gamma x V x 4 B).
void BM_cape_expand(benchmark::State& state) {
  const int vocab = static_cast<int>(state.range(0)), gamma = 5;
  specdec::philox_stream rng(9, 9);
  std::vector<float> probs(static_cast<std::size_t>(gamma) * static_cast<std::size_t>(vocab));
  for (int i = 0; i < gamma; ++i) {
    float* row = probs.data() + static_cast<std::size_t>(i) * static_cast<std::size_t>(vocab);
    double z = 0;
    for (int v = 0; v < vocab; ++v) z += row[v] = rng.uniform();
    const float top = 0.2f * static_cast<float>(i);  // the greedy token takes 0, .2, .4, .6, .8 of the mass
    for (int v = 0; v < vocab; ++v) row[v] = static_cast<float>(row[v] / z) * (1.0f - top);
    row[i] += top;
  }
  int beta = 0;
  for (auto _ : state) {
    const auto p = specdec::cape_expand(probs, vocab);
    beta = p.size();
    benchmark::DoNotOptimize(p.tokens.data());
  }
  state.counters["tokens"] = beta;
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(probs.size()) * sizeof(float),
                                              benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.SetItemsProcessed(static_cast<std::int64_t>(probs.size()) * state.iterations());
}
BENCHMARK(BM_cape_expand)->Arg(32000)->Arg(128000)->Unit(benchmark::kMicrosecond);

// CAPE from ranked candidates: gamma = 5 chain tokens with confidences .9/.7/.5/.3/.1 and 8 ranked
// candidates per step (the decoder's cape_tree_builder path, capacity reused). GB/s = candidate bytes
// read (token + log-prob) plus proposal bytes written.
void BM_cape_expand_ranked(benchmark::State& state) {
  struct cand {
    std::int32_t token;
    float logprob;
  };
  const int gamma = 5, width = 8;
  std::vector<cand> chain;
  std::vector<std::vector<cand>> alts(static_cast<std::size_t>(gamma));
  for (int i = 0; i < gamma; ++i) {
    chain.push_back({100 * i, std::log(0.9f - 0.2f * static_cast<float>(i))});
    for (int j = 0; j < width; ++j) alts[static_cast<std::size_t>(i)].push_back({100 * i + j, -1.0f - static_cast<float>(j)});
  }
  specdec::cape_proposal p;
  for (auto _ : state) {
    specdec::cape_expand_ranked<cand>(chain, alts, specdec::cape_schedule::glide_bins(), 0, p);
    benchmark::DoNotOptimize(p.tokens.data());
  }
  state.counters["tokens"] = p.size();
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(gamma * (width + 1)) * 8 + static_cast<double>(p.size()) * 16,
                                              benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.SetItemsProcessed(static_cast<std::int64_t>(gamma * width) * state.iterations());
}
BENCHMARK(BM_cape_expand_ranked);

}  // namespace
