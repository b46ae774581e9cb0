// TokenSwift's residual heads (§3.2, Eq. 1; draft/residual_heads.hpp) at Llama-3.1-8B's hidden size
// H = 4096 with gamma = 3 (footnote 1), for n = 1, 4 and 16 draft positions (a decode batch), fp32 /
// fp16 / bf16 weights, one thread and the pool; and the self-drafter's per-step host work
// (draft/self_drafter.hpp: gamma + 1 = 4 rows of a 128256-token vocabulary -> top-3 alternatives
// per depth, plus a 4-gram query) with a model that only copies prepared rows.
// Counters: GB/s over the weights read (gamma H^2 elements) plus h0 and out; GFLOP/s = 2 gamma n H^2.
// For the drafter: GB/s over the logit rows read.
#include <benchmark/benchmark.h>

#include "common/counters.hpp"

#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/draft/self_drafter.hpp"
#include "specdec/draft/residual_heads.hpp"

namespace {

constexpr int kH = 4096, kGamma = 3;

template <class W>
void BM_residual_heads(benchmark::State& st) {
  const int n = static_cast<int>(st.range(0));
  const specdec::host pol{.num_threads = static_cast<int>(st.range(1))};
  specdec::philox_stream rng(7, 1);
  std::vector<W> w(static_cast<std::size_t>(kGamma) * kH * kH), b(static_cast<std::size_t>(kGamma) * kH);
  for (auto& x : w) x = specdec::from_float<W>((2.0f * rng.uniform() - 1.0f) / 64.0f);
  for (auto& x : b) x = specdec::from_float<W>(2.0f * rng.uniform() - 1.0f);
  std::vector<float> h0(static_cast<std::size_t>(n) * kH), out(static_cast<std::size_t>(kGamma) * n * kH);
  for (auto& x : h0) x = 2.0f * rng.uniform() - 1.0f;
  const auto hv = specdec::make_view<2>(std::as_const(h0).data(), {n, kH});
  const auto wv = specdec::make_view<3>(std::as_const(w).data(), {kGamma, kH, kH});
  const auto bv = specdec::make_view<2>(std::as_const(b).data(), {kGamma, kH});
  const auto ov = specdec::make_view<3>(out.data(), {kGamma, n, kH});
  for (auto _ : st) {
    specdec::residual_heads(pol, hv, wv, bv, ov);
    benchmark::DoNotOptimize(out.data());
  }
  const double bytes = (static_cast<double>(kGamma) * kH * kH + kGamma * kH) * sizeof(W) +
                       4.0 * (n * kH + static_cast<double>(kGamma) * n * kH);
  specdec_bench::set_counters(st, bytes, 2.0 * kGamma * n * static_cast<double>(kH) * kH);
}

// A self_draft_model that copies prepared rows (the drafter's own cost is what is measured).
struct canned_rows {
  using logit_type = float;
  std::vector<float> rows;
  int vocab = 128256;
  int vocab_size() const { return vocab; }
  int num_draft_heads() const { return kGamma; }
  void reset_draft(int) {}
  void self_draft(int, std::span<const std::int32_t>, std::span<float> out) { std::copy(rows.begin(), rows.end(), out.begin()); }
};

void BM_self_drafter_propose(benchmark::State& st) {
  canned_rows m;
  specdec::philox_stream rng(3, 4);
  m.rows.resize(static_cast<std::size_t>(kGamma + 1) * m.vocab);
  for (auto& x : m.rows) x = 8.0f * rng.uniform();
  specdec::self_drafter<canned_rows> d(m);
  // 4096 generated tokens over a small alphabet so the 4-gram pool has candidates to rank.
  std::vector<std::int32_t> toks(4096);
  for (auto& t : toks) t = static_cast<std::int32_t>(rng.below(64));
  specdec::draft_candidates out;
  d.propose({.request = 0, .tokens = std::span<const std::int32_t>(toks).first(1), .depth = 4, .width = 3}, out);
  for (auto _ : st) {
    d.propose({.request = 0, .tokens = toks, .depth = 4, .width = 3}, out);
    benchmark::DoNotOptimize(out.chain.data());
  }
  specdec_bench::set_counters(st, 4.0 * m.rows.size(), 0.0);
}

void args(benchmark::internal::Benchmark* b) {
  for (int n : {1, 4, 16})
    for (int t : {1, 0}) b->Args({n, t});
  b->ArgNames({"n", "threads"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

}  // namespace

BENCHMARK_TEMPLATE(BM_residual_heads, float)->Apply(args);
BENCHMARK_TEMPLATE(BM_residual_heads, specdec::half)->Apply(args);
BENCHMARK_TEMPLATE(BM_residual_heads, specdec::bfloat16)->Apply(args);
BENCHMARK(BM_self_drafter_propose)->Unit(benchmark::kMicrosecond);
