// Losslessness of the stochastic verifiers on the GPU path, by chi-square (tests/verify/stat_util.hpp):
// one launch verifies 40000 requests, each the same step with its own Philox stream, and the first
// emitted token must follow the target's root row p0 (and, given an accepted first token x, the second
// token P[x]). sample_and_match on a fixed tree with duplicate siblings; chain speculative sampling
// on chains whose tokens are drawn from a different draft law q (so tokens get rejected and the
// residual is drawn); multi-draft on trees whose children are drawn from q, with and without
// replacement (rejected siblings update the residual).
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "cuda/cuda_test_util.cuh"
#include "specdec/sampling/sampler.hpp"
#include "specdec/verify/multi_draft.cuh"
#include "specdec/verify/sample_and_match.cuh"
#include "specdec/verify/speculative_sampling.cuh"
#include "verify/stat_util.hpp"

using specdec::memory_space;
using specdec_test::device_buffer;
using specdec_test::dv;

namespace {

constexpr int V = 6;
constexpr int trials = 40000;

//! A toy bigram law: row 0 (the root) and row 1 + x (after token x), each a distribution over V.
std::vector<std::vector<double>> toy_law(std::uint64_t seed) {
  specdec::philox_stream rng(seed, 1);
  std::vector<std::vector<double>> rows;
  for (int i = 0; i <= V; ++i) rows.push_back(stat::random_dist(V, rng, 1.0, i % 3 == 0 ? 1 : 0));
  return rows;
}

//! First-token and (first, second)-token counts of the emitted tokens; the chi-square tests.
struct tally {
  std::map<int, std::int64_t> first;
  std::map<std::pair<int, int>, std::int64_t> pair;
  std::map<int, std::int64_t> first_with_second;
  void add(const std::vector<std::int32_t>& emitted, const std::vector<std::int32_t>& nacc, int nodes_per_request) {
    for (int r = 0; r < static_cast<int>(nacc.size()); ++r) {
      const int b = r * nodes_per_request + r;
      ++first[emitted[b]];
      if (nacc[r] >= 1) ++pair[{emitted[b], emitted[b + 1]}], ++first_with_second[emitted[b]];
    }
  }
  void check(const std::vector<std::vector<double>>& p) const {
    std::map<int, double> e1;
    for (int y = 0; y < V; ++y) e1[y] = p[0][y];
    const auto r1 = stat::chi_square(first, e1, trials);
    INFO("first token: chi2 " << r1.statistic << " dof " << r1.dof << " p " << r1.p_value);
    CHECK(r1.p_value > stat::p_threshold);
    // Given an accepted first token x, the second is a draw from P[x]: expected counts from the
    // observed number of accepted x (pooled into one chi-square over the pairs).
    std::int64_t accepted = 0;
    std::map<std::pair<int, int>, double> e2;
    for (const auto& [x, n] : first_with_second) {
      accepted += n;
      for (int y = 0; y < V; ++y) e2[{x, y}] = static_cast<double>(n) * p[1 + x][y];
    }
    for (auto& [k, e] : e2) e /= static_cast<double>(accepted);
    const auto r2 = stat::chi_square(pair, e2, accepted);
    INFO("second token given the first: chi2 " << r2.statistic << " dof " << r2.dof << " p " << r2.p_value << " over "
                                                << accepted);
    CHECK(accepted > trials / 10);
    CHECK(r2.p_value > stat::p_threshold);
  }
};

//! `trials` requests of the same tree shape whose tokens were drawn from a draft law: the host arrays
//! of a draft-reading verifier (chain speculative sampling, multi-draft), target rows pp and draft
//! rows qq numbered alike.
struct draft_batch {
  std::vector<std::int32_t> indptr{0}, tokens, parents;
  std::vector<float> pp, qq;
  std::vector<std::uint64_t> seeds, streams;
};

//! Uploads the batch, runs verify(node_indptr, tokens, parents, target_probs, draft_probs, seeds,
//! streams, accepted, num_accepted, bonus, emitted, status) on device views once, requires a clean
//! status and tallies the emitted tokens (n nodes per request).
template <class Verify>
tally run_draft_batch(const draft_batch& b, int n, const char* what, Verify&& verify) {
  const std::int64_t N = static_cast<std::int64_t>(b.tokens.size());
  device_buffer<std::int32_t> di(b.indptr), dt(b.tokens), dp(b.parents), acc(static_cast<std::size_t>(N)),
      nacc(trials), bon(trials), emi(static_cast<std::size_t>(N + trials)), st(3);
  device_buffer<std::uint64_t> ds(b.seeds), dst(b.streams);
  device_buffer<float> dpp(b.pp), dqq(b.qq);
  verify(dv(di), dv(dt), dv(dp), specdec::make_view<2>(dpp.data(), {N + trials, V}, memory_space::device),
         specdec::make_view<2>(dqq.data(), {N + trials, V}, memory_space::device), dv(ds), dv(dst), dv(acc), dv(nacc),
         dv(bon), dv(emi), dv(st));
  specdec_test::sync_check(what);
  REQUIRE(st.download() == std::vector<std::int32_t>{0, -1, -1});
  tally t;
  t.add(emi.download(), nacc.download(), n);
  return t;
}

}  // namespace

TEST_CASE("cuda verify_sample_and_match_batch is lossless (chi-square, 40000 requests)", "[cuda][verify][lossless]") {
  const auto p = toy_law(91);
  // root -> {0: token 2, 1: token 4, 2: token 2 (duplicate sibling), 3: token 5}; under node 0: {4: token 1,
  // 5: token 3}; under node 2: {6: token 0}.
  const std::vector<std::int32_t> tok{2, 4, 2, 5, 1, 3, 0}, par{-1, -1, -1, -1, 0, 0, 2};
  const int n = static_cast<int>(tok.size());
  std::vector<std::int32_t> indptr{0}, tokens, parents;
  std::vector<float> probs;
  std::vector<std::uint64_t> seeds(trials, 2024), streams;
  for (int r = 0; r < trials; ++r) {
    tokens.insert(tokens.end(), tok.begin(), tok.end());
    parents.insert(parents.end(), par.begin(), par.end());
    indptr.push_back(indptr.back() + n);
    for (int s = 0; s <= n; ++s) {  // row s: after node s - 1 (the root for s = 0): P[token of node s - 1]
      const auto& row = s == 0 ? p[0] : p[1 + tok[s - 1]];
      for (double x : row) probs.push_back(static_cast<float>(x));
    }
    streams.push_back(specdec::stream_id(static_cast<std::uint32_t>(r), 0));
  }
  const std::int64_t N = static_cast<std::int64_t>(tokens.size());
  device_buffer<std::int32_t> di(indptr), dt(tokens), dp(parents), acc(static_cast<std::size_t>(N)), nacc(trials),
      bon(trials), emi(static_cast<std::size_t>(N + trials)), st(3);
  device_buffer<std::uint64_t> ds(seeds), dst(streams);
  device_buffer<float> pr(probs);
  specdec::verify_sample_and_match_batch(specdec::cuda{}, dv(di), dv(dt), dv(dp),
                                         specdec::make_view<2>(pr.data(), {N + trials, V}, memory_space::device), dv(ds),
                                         dv(dst), dv(acc), dv(nacc), dv(bon), dv(emi), dv(st));
  specdec_test::sync_check("verify_sample_and_match_batch (lossless)");
  REQUIRE(st.download() == std::vector<std::int32_t>{0, -1, -1});
  tally t;
  t.add(emi.download(), nacc.download(), n);
  t.check(p);
}

TEST_CASE("cuda verify_chain_speculative_batch is lossless (chi-square, 40000 requests)", "[cuda][verify][lossless]") {
  const auto p = toy_law(92), q = toy_law(93);
  constexpr int n = 3;
  specdec::philox_stream draft_rng(7, 7);
  draft_batch b;
  b.seeds.assign(trials, 2025);
  for (int r = 0; r < trials; ++r) {
    int prev = -1;  // the chain's tokens drawn from the draft law, row by row
    for (int s = 0; s <= n; ++s) {
      const auto& prow = prev < 0 ? p[0] : p[1 + prev];
      const auto& qrow = prev < 0 ? q[0] : q[1 + prev];
      std::vector<float> qf(qrow.begin(), qrow.end());
      for (double x : prow) b.pp.push_back(static_cast<float>(x));
      b.qq.insert(b.qq.end(), qf.begin(), qf.end());
      if (s < n) {
        prev = specdec::sample_from_probs(qf, draft_rng);
        b.tokens.push_back(prev);
        b.parents.push_back(s - 1);
      }
    }
    b.indptr.push_back(b.indptr.back() + n);
    b.streams.push_back(specdec::stream_id(static_cast<std::uint32_t>(r), 0));
  }
  run_draft_batch(b, n, "verify_chain_speculative_batch (lossless)", [](const auto&... a) {
    specdec::verify_chain_speculative_batch(specdec::cuda{}, a...);
  }).check(p);
}

TEST_CASE("cuda verify_multi_draft_batch is lossless (chi-square, 40000 requests)", "[cuda][verify][lossless]") {
  for (auto mode : {specdec::draft_sampling::with_replacement, specdec::draft_sampling::without_replacement}) {
    const bool wor = mode == specdec::draft_sampling::without_replacement;
    const auto p = toy_law(94), q = toy_law(95);
    // three root children, two children under each: drawn from the draft law, in index order
    const std::vector<std::int32_t> par{-1, -1, -1, 0, 0, 1, 1, 2, 2};
    const int n = static_cast<int>(par.size());
    specdec::philox_stream draft_rng(8, wor ? 9 : 8);
    draft_batch b;
    b.seeds.assign(trials, 2026);
    for (int r = 0; r < trials; ++r) {
      std::vector<std::int32_t> tok(static_cast<std::size_t>(n));
      for (int parent = -1; parent < n; ++parent) {  // each node's children, drawn in order
        const auto& qrow = parent < 0 ? q[0] : q[1 + tok[static_cast<std::size_t>(parent)]];
        std::vector<float> qf(qrow.begin(), qrow.end());
        for (int i = 0; i < n; ++i) {
          if (par[static_cast<std::size_t>(i)] != parent) continue;
          tok[static_cast<std::size_t>(i)] = specdec::sample_from_probs(qf, draft_rng);
          if (wor) qf[static_cast<std::size_t>(tok[static_cast<std::size_t>(i)])] = 0.0f;
        }
      }
      for (int s = 0; s <= n; ++s) {  // row s: after node s - 1 (the root for s = 0)
        const auto& prow = s == 0 ? p[0] : p[1 + tok[static_cast<std::size_t>(s - 1)]];
        const auto& qrow = s == 0 ? q[0] : q[1 + tok[static_cast<std::size_t>(s - 1)]];
        for (double x : prow) b.pp.push_back(static_cast<float>(x));
        for (double x : qrow) b.qq.push_back(static_cast<float>(x));
      }
      b.tokens.insert(b.tokens.end(), tok.begin(), tok.end());
      b.parents.insert(b.parents.end(), par.begin(), par.end());
      b.indptr.push_back(b.indptr.back() + n);
      b.streams.push_back(specdec::stream_id(static_cast<std::uint32_t>(r), 0));
    }
    INFO("without replacement: " << wor);
    run_draft_batch(b, n, "verify_multi_draft_batch (lossless)",
                    [mode](const auto& ni, const auto& tk, const auto& pa, const auto& pr, const auto& qr,
                           const auto&... rest) {
                      specdec::verify_multi_draft_batch(specdec::cuda{}, ni, tk, pa, pr, qr, mode, rest...);
                    })
        .check(p);
  }
}
