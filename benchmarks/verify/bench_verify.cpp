// Tree verification at vocab 32K and 128K with a 64-node tree (4 root children, each heading a chain of
// 16: the shape of a 4-beam draft). Target rows are Zipf-like distributions; along chain 0 the drafted
// token carries probability 0.5 at every level (0.7 in the draft rows), so greedy verification accepts
// 16 tokens and the stochastic verifiers a few. Counters: "GB/s" = probability/logit bytes of the rows the
// verifier scans in full (greedy, sample_and_match: accepted + 1; multi-draft: p and q per rejected
// child plus the bonus row), items_per_second = trees verified, "accepted" = mean accepted nodes.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/greedy.hpp"
#include "specdec/verify/multi_draft.hpp"
#include "specdec/verify/sample_and_match.hpp"

namespace {

constexpr int nodes = 64, chains = 4, depth = nodes / chains;

struct fixture {
  std::int64_t v;
  specdec::token_tree tree;
  std::vector<float> p, q;  // [nodes + 1, v] each
  explicit fixture(std::int64_t vocab) : v(vocab) {
    specdec::philox_stream rng(1, 1);
    // one Zipf row (probability ~ rank^-1.1 over a random permutation), rotated per row
    std::vector<float> base(static_cast<std::size_t>(v));
    for (std::int64_t i = 0; i < v; ++i) base[i] = static_cast<float>(i + 1);
    for (std::int64_t i = v - 1; i > 0; --i) std::swap(base[i], base[rng.below(static_cast<std::uint32_t>(i + 1))]);
    double s = 0.0;
    for (auto& x : base) s += (x = std::pow(x, -1.1f));
    for (auto& x : base) x = static_cast<float>(x / s * 0.5);  // total 0.5; the drafted token gets the other 0.5
    for (int i = 0; i < nodes; ++i)
      tree.add(static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(v))), i < chains ? -1 : i - chains);
    p.resize(static_cast<std::size_t>((nodes + 1) * v));
    q.resize(p.size());
    for (int r = 0; r <= nodes; ++r) {
      std::rotate_copy(base.begin(), base.begin() + (r * 977) % v, base.end(), p.begin() + r * v);
      std::rotate_copy(base.begin(), base.begin() + (r * 977 + 13) % v, base.end(), q.begin() + r * v);
    }
    // chain 0 (nodes 0, 4, 8, ...): at its parent's row the drafted token gets +0.5 in p and +0.7 in q
    // (q's remaining mass scaled to 0.3), so multi-draft accepts each level with probability 5/7
    for (int d = 0, node = 0; d < depth; ++d, node += chains) {
      const int row = d == 0 ? 0 : node - chains + 1;
      for (std::int64_t i = 0; i < v; ++i) q[static_cast<std::size_t>(row * v + i)] *= 0.6f;
      p[static_cast<std::size_t>(row * v + tree.token(node))] += 0.5f;
      q[static_cast<std::size_t>(row * v + tree.token(node))] += 0.7f;
    }
    for (int r = 0; r <= nodes; ++r)  // the other rows: renormalise to 1
      if (r != 0 && (r - 1) % chains != 0) {
        for (std::int64_t i = 0; i < v; ++i) p[static_cast<std::size_t>(r * v + i)] *= 2.0f, q[static_cast<std::size_t>(r * v + i)] *= 2.0f;
      }
    // the leaf row of chain 0 (after node 60) was not boosted
  }
  auto pv() const { return specdec::make_view<2>(p.data(), {nodes + 1, v}); }
  auto qv() const { return specdec::make_view<2>(q.data(), {nodes + 1, v}); }
};

const fixture& get(std::int64_t v) {
  static const fixture f32(32000), f128(128256);
  return v == 32000 ? f32 : f128;
}

// rows_read: full rows of V floats the verifier scanned; accepted: total accepted nodes; trees verified
void finish(benchmark::State& st, double rows_read, double accepted, double trees, std::int64_t v) {
  st.counters["GB/s"] = benchmark::Counter(rows_read * static_cast<double>(v) * 4.0 / 1e9, benchmark::Counter::kIsRate);
  st.counters["accepted"] = benchmark::Counter(accepted / trees);
  st.counters["rows/tree"] = benchmark::Counter(rows_read / trees);
  st.SetItemsProcessed(static_cast<std::int64_t>(trees));
}

// Rows multi-draft scans: at every visited node, 2 (p and q) per rejected child (the residual update)
// and, at the last one, 1 for the bonus draw. Children are tried in index order, so the rejected ones
// are those before the accepted child (all of them at the last node).
double multi_draft_rows(const specdec::token_tree& t, const specdec::verify_result& r) {
  double rows = 1.0;
  std::int32_t cur = -1;
  for (std::size_t j = 0; j <= r.accepted.size(); ++j) {
    const auto kids = t.children(cur);
    const std::int32_t next = j < r.accepted.size() ? r.accepted[j] : -1;
    for (auto c : kids) {
      if (c == next) break;
      rows += 2.0;
    }
    cur = next;
  }
  return rows;
}

void BM_verify_greedy(benchmark::State& st) {
  const auto& f = get(st.range(0));
  double rows = 0, acc = 0;
  for (auto _ : st) {
    const auto r = specdec::verify_greedy(f.tree, f.pv());
    rows += static_cast<double>(r.accepted.size() + 1);
    acc += static_cast<double>(r.accepted.size());
    benchmark::DoNotOptimize(r.bonus);
  }
  finish(st, rows, acc, static_cast<double>(st.iterations()), f.v);
}

void BM_verify_sample_and_match(benchmark::State& st) {
  const auto& f = get(st.range(0));
  double rows = 0, acc = 0;
  std::uint32_t step = 0;
  for (auto _ : st) {
    specdec::philox_stream rng(7, specdec::stream_id(0, step++));
    const auto r = specdec::verify_sample_and_match(f.tree, f.pv(), rng);
    rows += static_cast<double>(r.accepted.size() + 1);
    acc += static_cast<double>(r.accepted.size());
    benchmark::DoNotOptimize(r.bonus);
  }
  finish(st, rows, acc, static_cast<double>(st.iterations()), f.v);
}

void BM_verify_multi_draft(benchmark::State& st) {
  const auto& f = get(st.range(0));
  const auto mode = st.range(1) ? specdec::draft_sampling::without_replacement : specdec::draft_sampling::with_replacement;
  double rows = 0, acc = 0;
  std::uint32_t step = 0;
  for (auto _ : st) {
    specdec::philox_stream rng(7, specdec::stream_id(0, step++));
    const auto r = specdec::verify_multi_draft(f.tree, f.pv(), f.qv(), mode, rng);
    st.PauseTiming();
    rows += multi_draft_rows(f.tree, r);
    acc += static_cast<double>(r.accepted.size());
    st.ResumeTiming();
    benchmark::DoNotOptimize(r.bonus);
  }
  finish(st, rows, acc, static_cast<double>(st.iterations()), f.v);
}

void BM_verify_sample_and_match_batch(benchmark::State& st) {
  const auto& f = get(st.range(0));
  const int requests = 8;
  std::vector<specdec::token_tree> trees(requests, f.tree);
  const specdec::token_tree_batch batch(trees, std::vector<std::int32_t>(requests, 100));
  std::vector<float> all;
  for (int r = 0; r < requests; ++r) all.insert(all.end(), f.p.begin(), f.p.end());
  const auto view = specdec::make_view<2>(all.data(), {requests * (nodes + 1), f.v});
  double rows = 0, acc = 0;
  std::uint32_t step = 0;
  for (auto _ : st) {
    const auto r = specdec::verify_sample_and_match_batch(specdec::host{}, batch, view, 7, step++);
    rows += static_cast<double>(r.accepted.size() + requests);
    acc += static_cast<double>(r.accepted.size());
    benchmark::DoNotOptimize(r.bonus.data());
  }
  finish(st, rows, acc, static_cast<double>(st.iterations() * requests), f.v);
}

}  // namespace

BENCHMARK(BM_verify_greedy)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_verify_sample_and_match)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_verify_multi_draft)->ArgNames({"V", "wor"})->Args({32000, 0})->Args({128256, 0})->Args({32000, 1})->Args({128256, 1})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_verify_sample_and_match_batch)->Arg(32000)->Arg(128256)->Unit(benchmark::kMicrosecond)->UseRealTime();
