// The batch forms a GPU engine calls on device logits, on the host: process_logits_batch equal to
// process_logits per row (empty context) bit for bit, logits_to_probs_batch equal to logits_to_probs
// (in place too); their refusals. And what their CUDA backends (sampling/logits_processor.cuh) rely
// on, run serially here: fast_exp_fused equals the host's exp at the AVX2 and AVX-512 levels (and at
// the file's own flags when they have FMA); at every level the build runs, exp_sum's and
// weighted_shift_sum's orders as the kernels reproduce them and top-p's selection as the kernel makes
// it (a weighted radix select over the boundary bin's logit keys, exact sums) equals
// apply_top_p's; top-p no longer depends on the order the boundary bin is visited in; a maximum of
// either zero gives the same shifted row.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <vector>

#include "sampling/penalty_test_util.hpp"
#include "sampling/sampling_reference.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/simd_level.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/core/topk.hpp"
#include "specdec/sampling/logits_processor.hpp"
#include "specdec/sampling/penalty_context.hpp"

namespace {

constexpr float ninf = -std::numeric_limits<float>::infinity();

std::vector<float> batch_row(std::int64_t v, specdec::philox_stream& rng, int kind) {
  std::vector<float> r(static_cast<std::size_t>(v));
  for (auto& x : r) {
    const float u = 2.0f * rng.uniform() - 1.0f;
    switch (kind % 5) {
      case 0: x = 8.0f * u; break;
      case 1: x = std::round(4.0f * u); break;               // many ties
      case 2: x = u * 3.0e38f; break;                         // near FLT_MAX: temperature's shifted path
      case 3: x = rng.below(3) == 0 ? ninf : 20.0f * u; break;  // masked tokens
      default: x = 1e-3f * u; break;                          // nearly flat
    }
  }
  return r;
}

specdec::sampling_params batch_params(specdec::philox_stream& rng, std::int64_t v) {
  specdec::sampling_params p;
  const auto pick = [&] { return rng.below(2) == 0; };
  p.temperature = rng.below(8) == 0 ? 0.0f : rng.below(8) == 0 ? 1.0f : 0.2f + 1.8f * rng.uniform();
  if (rng.below(16) == 0) p.temperature = 1e-30f;
  if (pick()) p.top_k = 1 + static_cast<int>(rng.below(static_cast<std::uint32_t>(v + 2)));
  if (pick()) p.top_p = rng.below(6) == 0 ? 1e-6f : 0.05f + 0.9f * rng.uniform();
  if (pick()) p.min_p = 0.3f * rng.uniform();
  if (pick()) p.eta_epsilon = 0.2f * rng.uniform();
  if (pick()) p.eta_alpha = 0.5f + rng.uniform();
  return p;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("process_logits_batch (host) equals process_logits per row, bit for bit") {
  specdec::philox_stream rng(17, 0);
  for (const std::int64_t v : {1, 2, 17, 300, 5000}) {
    const int rows = 24, P = 6;
    std::vector<specdec::sampling_params> params;
    for (int e = 0; e < P; ++e) params.push_back(batch_params(rng, v));
    std::vector<std::int32_t> row_params;
    std::vector<float> logits;
    for (int r = 0; r < rows; ++r) {
      row_params.push_back(static_cast<std::int32_t>(rng.below(P)));
      auto row = batch_row(v, rng, r);
      if (std::all_of(row.begin(), row.end(), [](float x) { return x == ninf; })) row[0] = 0.0f;
      logits.insert(logits.end(), row.begin(), row.end());
    }
    auto want = logits;
    specdec::sampling_workspace ws;
    for (int r = 0; r < rows; ++r)
      specdec::process_logits(std::span<float>(want.data() + r * v, static_cast<std::size_t>(v)),
                              params[static_cast<std::size_t>(row_params[static_cast<std::size_t>(r)])], {}, ws);
    std::vector<std::int32_t> status(3, 9);
    specdec::process_logits_batch(specdec::host{}, specdec::make_view<2>(logits.data(), {rows, v}),
                                  specdec::make_view<1>(params.data(), {P}),
                                  specdec::make_view<1>(row_params.data(), {rows}), specdec::make_view<1>(status.data(), {3}));
    INFO("V = " << v);
    CHECK(same_bits(logits, want));
    CHECK(status == std::vector<std::int32_t>{0, -1, -1});
  }
}

TEST_CASE("process_logits_batch refuses penalties, entries out of range and bad rows, writing nothing") {
  using Catch::Matchers::Contains;
  const int rows = 3, v = 8;
  std::vector<float> logits(rows * v, 0.5f);
  std::vector<specdec::sampling_params> params(2);
  std::vector<std::int32_t> row_params{0, 1, 1}, status(3, 9);
  const auto call = [&] {
    specdec::process_logits_batch(specdec::host{}, specdec::make_view<2>(logits.data(), {rows, v}),
                                  specdec::make_view<1>(params.data(), {2}), specdec::make_view<1>(row_params.data(), {rows}),
                                  specdec::make_view<1>(status.data(), {3}));
  };
  const auto before = logits;
  params[1].repetition_penalty = 1.2f;
  CHECK_THROWS_WITH(call(), Contains("specdec::process_logits_batch") && Contains("'params'") && Contains("penalty"));
  params[1] = {};
  params[1].contextual_penalty = 1.5f;  // with the default window of 1024
  CHECK_THROWS_WITH(call(), Contains("'params'") && Contains("penalty_context"));
  params[1].penalty_window = 0;  // a contextual penalty over no window applies nothing: accepted below
  params[0].top_p = 0.0f;
  CHECK_THROWS_WITH(call(), Contains("'params.top_p'"));
  params[0].top_p = 0.9f;
  row_params[2] = 2;
  CHECK_THROWS_WITH(call(), Contains("'row_params'") && Contains("[0, params.extent(0) = 2)") && Contains("row 2"));
  row_params[2] = 1;
  logits[static_cast<std::size_t>(2 * v + 3)] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(call(), Contains("'logits'") && Contains("row 2"));
  logits[static_cast<std::size_t>(2 * v + 3)] = 0.5f;
  CHECK(logits == before);
  CHECK(status == std::vector<std::int32_t>(3, 9));
  // arrays that share memory
  CHECK_THROWS_WITH(specdec::process_logits_batch(specdec::host{}, specdec::make_view<2>(logits.data(), {rows, v}),
                                                  specdec::make_view<1>(params.data(), {2}),
                                                  specdec::make_view<1>(reinterpret_cast<std::int32_t*>(logits.data()), {rows}),
                                                  specdec::make_view<1>(status.data(), {3})),
                    Contains("'row_params'") && Contains("memory disjoint from 'logits'"));
  call();
  CHECK(status == std::vector<std::int32_t>{0, -1, -1});
}

TEST_CASE("penalty_context_builder: each context's distinct tokens ascending with their last positions, tree paths") {
  using Catch::Matchers::Contains;
  specdec::penalty_context_builder b(10);
  const std::vector<std::int32_t> c0{4, 1, 4, 9, 1, 4}, c1{};
  CHECK(b.add_context(c0) == 0);
  CHECK(b.add_context(c1) == 1);
  const std::vector<std::int32_t> tokens{3, 4, 3}, parents{-1, 0, 1};
  b.add_tree_rows(0, tokens, parents);
  b.add_row(-1, std::vector<std::int32_t>{7});
  const auto eq = [](std::span<const std::int32_t> a, std::vector<std::int32_t> w) {
    return std::vector<std::int32_t>(a.begin(), a.end()) == w;
  };
  CHECK(eq(b.distinct(), {1, 4, 9}));
  CHECK(eq(b.last(), {4, 5, 3}));
  CHECK(eq(b.context_indptr(), {0, 3, 3}));
  CHECK(eq(b.context_length(), {6, 0}));
  CHECK(eq(b.row_context(), {0, 0, 0, 0, -1}));
  CHECK(eq(b.path_indptr(), {0, 0, 1, 3, 6, 7}));
  CHECK(eq(b.path(), {3, 3, 4, 3, 4, 3, 7}));
  CHECK_THROWS_WITH(b.add_context(std::vector<std::int32_t>{2, 10}), Contains("'committed'") && Contains("position 1"));
  CHECK(eq(b.distinct(), {1, 4, 9}));  // a refused context leaves nothing behind
  CHECK(b.add_context(std::vector<std::int32_t>{2}) == 2);
  CHECK(eq(b.last(), {4, 5, 3, 0}));
  CHECK_THROWS_WITH(b.add_row(3, {}), Contains("'context'"));
  CHECK_THROWS_WITH(b.add_row(0, std::vector<std::int32_t>{-1}), Contains("'path'"));
  CHECK_THROWS_WITH(b.add_tree_rows(0, tokens, std::vector<std::int32_t>{-1, 1, 0}), Contains("'parents'"));
  const auto rows_before = b.rows();
  CHECK_THROWS_WITH(b.add_tree_rows(0, std::vector<std::int32_t>{3, 11}, std::vector<std::int32_t>{-1, 0}),
                    Contains("'tokens'") && Contains("position 1"));
  CHECK(b.rows() == rows_before);  // a refused tree adds no row
  // Session 56: a span over the builder's own arrays was read after they grew and moved (a
  // use-after-free under ASan): refused by name.
  const auto paths_before = b.path().size();
  CHECK_THROWS_WITH(b.add_tree_rows(0, b.path().first(3), parents), Contains("'tokens'") && Contains("own arrays"));
  CHECK_THROWS_WITH(b.add_tree_rows(0, tokens, b.path().first(3)), Contains("'parents'") && Contains("own arrays"));
  CHECK_THROWS_WITH(b.add_row(0, b.path()), Contains("'path'") && Contains("own arrays"));
  CHECK_THROWS_WITH(b.add_context(b.distinct()), Contains("'committed'") && Contains("own arrays"));
  CHECK(b.path().size() == paths_before);
  CHECK(b.rows() == rows_before);
  // A chain of 2^16 nodes: its root paths hold 2^16 (2^16 + 1) / 2 > INT32_MAX suffix tokens. Refused
  // before its first row (append_row's limit threw partway before, after gigabytes of rows).
  std::vector<std::int32_t> chain_tokens(1 << 16, 5), chain_parents(1 << 16);
  for (std::size_t i = 0; i < chain_parents.size(); ++i) chain_parents[i] = static_cast<std::int32_t>(i) - 1;
  CHECK_THROWS_WITH(b.add_tree_rows(0, chain_tokens, chain_parents),
                    Contains("'parents'") && Contains("2147516416 tokens") && Contains("within INT32_MAX"));
  CHECK(b.path().size() == paths_before);
  CHECK(b.rows() == rows_before);
  chain_tokens.resize(1 << 10), chain_parents.resize(1 << 10);  // a long chain that fits
  b.add_tree_rows(0, chain_tokens, chain_parents);
  CHECK(b.rows() == rows_before + (1 << 10) + 1);
  CHECK(b.path().size() == paths_before + (std::size_t{1} << 9) * ((1 << 10) + 1));
  b.clear();
  CHECK(b.rows() == 0);
  CHECK(b.contexts() == 0);
  CHECK(eq(b.path_indptr(), {0}));
}

TEST_CASE("penalty_history and penalty_context_builder: the pairs of a token list by either ordering, kept up to date by appends") {
  // against a std::map of each token's last position: the builder's add_context (token_marks over
  // vocabularies of 1 to 70,000: bitmaps of one word, a partial word and many), and a history fed the
  // same tokens in appends of random lengths from narrow and wide id bands (its in-place updates of
  // known tokens, and merges of new ones below, between and above them)
  using Catch::Matchers::Contains;
  specdec::philox_stream rng(31, 7);
  for (const std::int32_t v : {1, 7, 300, 70000}) {
    for (int round = 0; round < 12; ++round) {
      specdec::penalty_history h(v);
      specdec::penalty_context_builder b(v);
      std::vector<std::int32_t> all;
      std::map<std::int32_t, std::int32_t> want;
      const int appends = 1 + static_cast<int>(rng.below(6));
      for (int a = 0; a < appends; ++a) {
        const auto n = rng.below(4) == 0 ? rng.below(3000) : rng.below(9);
        // a narrow band of ids some of the time: repeats, and new tokens between old ones
        const auto band = rng.below(2) == 0 ? static_cast<std::uint32_t>(v) : std::min<std::uint32_t>(static_cast<std::uint32_t>(v), 1 + rng.below(40));
        std::vector<std::int32_t> add(n);
        for (auto& t : add) {
          t = static_cast<std::int32_t>(rng.below(band));
          want[t] = static_cast<std::int32_t>(all.size());
          all.push_back(t);
        }
        h.append(add);
        REQUIRE(h.length() == static_cast<std::int64_t>(all.size()));
        std::vector<std::int32_t> wd, wl;
        for (const auto& [t, p] : want) wd.push_back(t), wl.push_back(p);
        CHECK(std::vector<std::int32_t>(h.distinct().begin(), h.distinct().end()) == wd);
        CHECK(std::vector<std::int32_t>(h.last().begin(), h.last().end()) == wl);
        b.clear();
        b.add_context(std::vector<std::int32_t>{0});  // a second context: the pairs land after its one
        REQUIRE(b.add_context(all) == 1);
        REQUIRE(b.add_context(h) == 2);
        const auto cp = b.context_indptr();
        const auto part = [&](std::span<const std::int32_t> x, int c) {
          return std::vector<std::int32_t>(x.begin() + cp[c], x.begin() + cp[c + 1]);
        };
        CHECK(part(b.distinct(), 1) == wd);
        CHECK(part(b.last(), 1) == wl);
        CHECK(part(b.distinct(), 2) == wd);
        CHECK(part(b.last(), 2) == wl);
        CHECK(b.context_length()[1] == static_cast<std::int32_t>(all.size()));
        CHECK(b.context_length()[2] == static_cast<std::int32_t>(all.size()));
      }
    }
  }
  specdec::penalty_history h(5);
  h.append(std::vector<std::int32_t>{4, 2, 4});
  CHECK_THROWS_WITH(h.append(std::vector<std::int32_t>{1, 5}), Contains("'tokens'") && Contains("position 1"));
  CHECK_THROWS_WITH(h.append(std::vector<std::int32_t>{-1}), Contains("'tokens'"));
  CHECK(h.length() == 3);  // a refused append leaves the history as it was
  CHECK(std::vector<std::int32_t>(h.distinct().begin(), h.distinct().end()) == std::vector<std::int32_t>{2, 4});
  CHECK(std::vector<std::int32_t>(h.last().begin(), h.last().end()) == std::vector<std::int32_t>{1, 2});
  specdec::penalty_context_builder b6(6);
  CHECK_THROWS_WITH(b6.add_context(h), Contains("'history.vocab()'"));
  CHECK(b6.contexts() == 0);
  CHECK_THROWS_WITH(specdec::penalty_history(0), Contains("'vocab'"));
  // a builder moved from, or copied, builds again (its scratch arrays are made anew)
  specdec::penalty_context_builder a(10);
  a.add_context(std::vector<std::int32_t>{3, 1, 3});
  specdec::penalty_context_builder moved(std::move(a)), copied(moved);
  for (auto* x : {&a, &moved, &copied}) {
    x->clear();
    x->add_context(std::vector<std::int32_t>{9, 2, 9, 0});
    CHECK(std::vector<std::int32_t>(x->distinct().begin(), x->distinct().end()) == std::vector<std::int32_t>{0, 2, 9});
    CHECK(std::vector<std::int32_t>(x->last().begin(), x->last().end()) == std::vector<std::int32_t>{3, 1, 2});
  }
  h.clear();
  CHECK(h.length() == 0);
  CHECK(h.distinct().empty());
}

TEST_CASE("process_logits_batch with a penalty_context equals process_tree_logits and process_logits, bit for bit") {
  // random committed contexts (small vocabularies: many repeats), random trees, random penalties with
  // every other step; each request's rows against process_tree_logits, context-free rows against
  // process_logits with the suffix as the whole context
  specdec::philox_stream rng(29, 3);
  for (const std::int64_t v : {3, 40, 1000}) {
    for (int round = 0; round < 16; ++round) {
      const int requests = 1 + static_cast<int>(rng.below(4)), P = requests;
      std::vector<specdec::sampling_params> params;
      for (int e = 0; e < P; ++e) {
        auto p = batch_params(rng, v);
        specdec_test::add_random_penalties(p, rng, 4, 12);
        params.push_back(p);
      }
      specdec::penalty_context_builder b(static_cast<std::int32_t>(v));
      std::vector<std::vector<std::int32_t>> committed(static_cast<std::size_t>(requests)), tokens = committed,
                                             parents = committed;
      std::vector<std::int32_t> row_params;
      std::vector<float> logits;
      const auto add_rows = [&](int n, int e) {
        for (int r = 0; r < n; ++r) {
          auto row = batch_row(v, rng, static_cast<int>(rng.below(5)));
          if (std::all_of(row.begin(), row.end(), [](float x) { return x == ninf; })) row[0] = 0.0f;
          logits.insert(logits.end(), row.begin(), row.end());
          row_params.push_back(e);
        }
      };
      for (int q = 0; q < requests; ++q) {
        auto& c = committed[static_cast<std::size_t>(q)];
        const auto len = rng.below(3) == 0 ? 0u : rng.below(40);
        for (std::uint32_t j = 0; j < len; ++j) c.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(v))));
        const int n = static_cast<int>(rng.below(9));
        for (int i = 0; i < n; ++i) {
          tokens[static_cast<std::size_t>(q)].push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(v))));
          parents[static_cast<std::size_t>(q)].push_back(i == 0 ? -1 : static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(i + 1))) - 1);
        }
        b.add_tree_rows(b.add_context(c), tokens[static_cast<std::size_t>(q)], parents[static_cast<std::size_t>(q)]);
        add_rows(n + 1, q);
      }
      std::vector<std::int32_t> loose;  // a context-free row: its suffix is its whole context
      for (std::uint32_t j = 0, n = rng.below(6); j < n; ++j) loose.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(v))));
      b.add_row(-1, loose);
      add_rows(1, 0);
      const std::int64_t rows = b.rows();
      REQUIRE(static_cast<std::int64_t>(row_params.size()) == rows);
      auto want = logits;
      specdec::sampling_workspace ws;
      std::int64_t first = 0;
      for (int q = 0; q < requests; ++q) {
        const auto n = static_cast<std::int64_t>(tokens[static_cast<std::size_t>(q)].size());
        specdec::process_tree_logits(specdec::make_view<2>(want.data() + first * v, {n + 1, v}),
                                     params[static_cast<std::size_t>(q)], committed[static_cast<std::size_t>(q)],
                                     tokens[static_cast<std::size_t>(q)], parents[static_cast<std::size_t>(q)], ws);
        first += n + 1;
      }
      specdec::process_logits(std::span<float>(want.data() + first * v, static_cast<std::size_t>(v)), params[0], {}, loose, ws);
      std::vector<std::int32_t> status(3, 9);
      // penalized_argmax_batch on the unprocessed rows: the index process_logits_batch makes one-hot
      // at temperature 0 (the other processors keep the maximum there)
      auto greedy = params;
      for (auto& p : greedy) p.temperature = 0.0f;
      auto one_hot = logits;
      specdec::process_logits_batch(specdec::host{}, specdec::make_view<2>(one_hot.data(), {rows, v}),
                                    specdec::make_view<1>(greedy.data(), {P}), specdec::make_view<1>(row_params.data(), {rows}),
                                    b.view(), specdec::make_view<1>(status.data(), {3}));
      std::vector<std::int32_t> argmax(static_cast<std::size_t>(rows), -7), argmax_status(3, 9);
      const auto unprocessed = logits;
      specdec::penalized_argmax_batch(specdec::host{}, specdec::make_view<2>(static_cast<const float*>(logits.data()), {rows, v}),
                                      specdec::make_view<1>(params.data(), {P}), specdec::make_view<1>(row_params.data(), {rows}),
                                      b.view(), specdec::make_view<1>(argmax.data(), {rows}),
                                      specdec::make_view<1>(argmax_status.data(), {3}));
      CHECK(same_bits(logits, unprocessed));
      CHECK(argmax_status == std::vector<std::int32_t>{0, -1, -1});
      for (std::int64_t r = 0; r < rows; ++r) {
        const auto at = std::find(one_hot.begin() + r * v, one_hot.begin() + (r + 1) * v, 0.0f) - (one_hot.begin() + r * v);
        INFO("V = " << v << ", round " << round << ", row " << r);
        CHECK(argmax[static_cast<std::size_t>(r)] == at);
      }
      specdec::process_logits_batch(specdec::host{}, specdec::make_view<2>(logits.data(), {rows, v}),
                                    specdec::make_view<1>(params.data(), {P}), specdec::make_view<1>(row_params.data(), {rows}),
                                    b.view(), specdec::make_view<1>(status.data(), {3}));
      INFO("V = " << v << ", round " << round);
      CHECK(same_bits(logits, want));
      CHECK(status == std::vector<std::int32_t>{0, -1, -1});
    }
  }
}

TEST_CASE("penalized_argmax_batch: a context token the suffix brings into the window is owned by the suffix; refusals") {
  using Catch::Matchers::Contains;
  // committed {3, 0, 0, 0}, suffix {3}, W = 2: the window starts at position 3, so token 3 (last
  // committed at 0) is penalized by the suffix alone (10 / 2 = 5), token 0 (last at 3) by its pair
  // (9 / 2 = 4.5); token 5 keeps 6 and wins. Read as its pair's unpenalized 10, token 3 would win.
  const std::int64_t v = 6;
  std::vector<float> logits{9.0f, 1.0f, 2.0f, 10.0f, 3.0f, 6.0f};
  specdec::sampling_params p;
  p.temperature = 0.0f, p.contextual_penalty = 2.0f, p.penalty_window = 2;
  specdec::penalty_context_builder b(static_cast<std::int32_t>(v));
  const std::vector<std::int32_t> committed{3, 0, 0, 0}, suffix{3};
  b.add_row(b.add_context(committed), suffix);
  std::vector<std::int32_t> row_params{0}, argmax{-7}, status(3, 9);
  const auto call = [&](const std::vector<float>& rows) {
    specdec::penalized_argmax_batch(specdec::host{}, specdec::make_view<2>(rows.data(), {1, v}),
                                    specdec::make_view<1>(&p, {1}), specdec::make_view<1>(row_params.data(), {1}),
                                    b.view(), specdec::make_view<1>(argmax.data(), {1}),
                                    specdec::make_view<1>(status.data(), {3}));
  };
  call(logits);
  CHECK(argmax[0] == 5);
  CHECK(status == std::vector<std::int32_t>{0, -1, -1});
  auto one_hot = logits;
  specdec::process_logits_batch(specdec::host{}, specdec::make_view<2>(one_hot.data(), {1, v}),
                                specdec::make_view<1>(&p, {1}), specdec::make_view<1>(row_params.data(), {1}), b.view(),
                                specdec::make_view<1>(status.data(), {3}));
  CHECK(one_hot == std::vector<float>{ninf, ninf, ninf, ninf, ninf, 0.0f});
  // refusals name the function and write nothing: a NaN row, a row the penalties empty, an entry out of range
  argmax = {-7};
  auto bad = logits;
  bad[2] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(call(bad), Contains("specdec::penalized_argmax_batch") && Contains("'logits'"));
  std::vector<float> emptied(static_cast<std::size_t>(v), ninf);
  emptied[0] = emptied[3] = -std::numeric_limits<float>::max();
  p.repetition_penalty = 2.0f;
  CHECK_THROWS_WITH(call(emptied), Contains("specdec::penalized_argmax_batch") && Contains("after the penalties"));
  row_params = {1};
  CHECK_THROWS_WITH(call(logits), Contains("specdec::penalized_argmax_batch") && Contains("'row_params'"));
  CHECK(argmax == std::vector<std::int32_t>{-7});
  row_params = {0};
  // the output must not share memory with the context or the logits
  std::vector<std::int32_t> shared(b.row_context().begin(), b.row_context().end());
  CHECK_THROWS_WITH(specdec::penalized_argmax_batch(specdec::host{}, specdec::make_view<2>(logits.data(), {1, v}),
                                                    specdec::make_view<1>(&p, {1}), specdec::make_view<1>(row_params.data(), {1}),
                                                    specdec::penalty_context{b.view().distinct, b.view().last,
                                                                             b.view().context_indptr, b.view().context_length,
                                                                             specdec::make_view<1>(static_cast<const std::int32_t*>(shared.data()), {1}),
                                                                             b.view().path_indptr, b.view().path},
                                                    specdec::make_view<1>(shared.data(), {1}),
                                                    specdec::make_view<1>(status.data(), {3})),
                    Contains("'argmax'") && Contains("disjoint"));
}

TEST_CASE("process_logits_batch refuses a malformed penalty_context and a row the penalties empty, writing nothing") {
  using Catch::Matchers::Contains;
  const int rows = 2, v = 6;
  std::vector<float> logits(rows * v, 0.5f);
  std::vector<specdec::sampling_params> params(1);
  params[0].repetition_penalty = 2.0f;
  std::vector<std::int32_t> row_params{0, 0}, status(3, 9);
  // context 0: committed {1, 3, 1} -> pairs (1, 2), (3, 1), length 3; row 0 suffix {4}, row 1 none
  std::vector<std::int32_t> distinct{1, 3}, last{2, 1}, indptr{0, 2}, length{3}, row_context{0, 0}, path_indptr{0, 1, 1},
      path{4};
  const auto v1 = [](std::vector<std::int32_t>& a) { return specdec::make_view<1>(a.data(), {static_cast<std::int64_t>(a.size())}); };
  const auto call = [&] {
    const specdec::penalty_context c{v1(distinct), v1(last), v1(indptr), v1(length), v1(row_context), v1(path_indptr), v1(path)};
    specdec::process_logits_batch(specdec::host{}, specdec::make_view<2>(logits.data(), {rows, v}),
                                  specdec::make_view<1>(params.data(), {1}), specdec::make_view<1>(row_params.data(), {rows}),
                                  c, specdec::make_view<1>(status.data(), {3}));
  };
  const auto before = logits;
  const auto refused = [&](auto& array, std::size_t at, std::int32_t value, const char* says) {
    const std::int32_t keep = array[at];
    array[at] = value;
    CHECK_THROWS_WITH(call(), Contains("specdec::process_logits_batch") && Contains("'context'") && Contains(says));
    CHECK(logits == before);
    array[at] = keep;
  };
  refused(distinct, 1, 1, "strictly ascending");
  refused(distinct, 1, 6, "[0, V)");
  refused(last, 0, 3, "last positions in [0, context_length)");
  refused(length, 0, 1, "at most context_length");
  refused(indptr, 1, 3, "inside [0, 2]");
  refused(row_context, 1, 1, "row_context entries in [-1, 1)");
  refused(path_indptr, 1, 2, "path range");
  refused(path, 0, 6, "path tokens in [0, V)");
  distinct = {}, last = {}, indptr = {0, 0};
  refused(length, 0, 3, "none exactly when the length is 0");
  distinct = {1, 3}, last = {2, 1}, indptr = {0, 2};
  // a row whose every admissible logit the penalty sends to -inf: tokens 1, 3 and 4 hold -FLT_MAX, the
  // others -inf; row 1 keeps token 4 (not in its context)
  for (int i = 0; i < v; ++i) logits[static_cast<std::size_t>(i)] = logits[static_cast<std::size_t>(v + i)] = ninf;
  for (const int t : {1, 3, 4})
    logits[static_cast<std::size_t>(t)] = logits[static_cast<std::size_t>(v + t)] = -std::numeric_limits<float>::max();
  const auto emptied = logits;
  CHECK_THROWS_WITH(call(), Contains("'logits'") && Contains("row 0") && Contains("after the penalties"));
  CHECK(logits == emptied);
  path = {5};  // token 4 is no longer in row 0's context
  call();
  CHECK(status == std::vector<std::int32_t>{0, -1, -1});
  CHECK(logits[4] == -std::numeric_limits<float>::max());
  CHECK(logits[1] == ninf);
  // (min * r) * theta overflows where min * (r * theta) does not: the check must follow the penalties'
  // own order (found by review), in process_logits and in the batch form alike
  {
    specdec::sampling_params q;
    q.temperature = 0.0f, q.repetition_penalty = 0x1.0033dcp+0f, q.contextual_penalty = 0x1.66c9cap+0f;
    q.penalty_window = 4, q.contextual_sign_aware = true;
    REQUIRE(std::isfinite(-0x1.6d079ap+127f * (q.repetition_penalty * q.contextual_penalty)));
    std::vector<float> one{-0x1.6d079ap+127f, ninf};
    const std::vector<std::int32_t> ctx{0};
    specdec::sampling_workspace ws;
    CHECK_THROWS_WITH(specdec::process_logits(one, q, ctx, ws), Contains("after the penalties"));
    CHECK(one == std::vector<float>{-0x1.6d079ap+127f, ninf});
    specdec::penalty_context_builder pb(2);
    pb.add_row(pb.add_context(ctx), {});
    std::vector<std::int32_t> zero{0};
    CHECK_THROWS_WITH(specdec::process_logits_batch(specdec::host{}, specdec::make_view<2>(one.data(), {1, 2}),
                                                    specdec::make_view<1>(&q, {1}), specdec::make_view<1>(zero.data(), {1}),
                                                    pb.view(), specdec::make_view<1>(status.data(), {3})),
                      Contains("'logits'") && Contains("after the penalties"));
    CHECK(one == std::vector<float>{-0x1.6d079ap+127f, ninf});
  }
  // the arrays written must not share memory with the context
  const specdec::penalty_context c{v1(distinct), v1(last), v1(indptr), v1(length), v1(row_context), v1(path_indptr),
                                   specdec::make_view<1>(status.data(), {1})};
  CHECK_THROWS_WITH(specdec::process_logits_batch(specdec::host{}, specdec::make_view<2>(logits.data(), {rows, v}),
                                                  specdec::make_view<1>(params.data(), {1}),
                                                  specdec::make_view<1>(row_params.data(), {rows}), c,
                                                  specdec::make_view<1>(status.data(), {3})),
                    Contains("'context.path'") && Contains("memory disjoint from 'status'"));
}

TEST_CASE("logits_to_probs_batch (host) equals logits_to_probs per row, in place and not") {
  using Catch::Matchers::Contains;
  specdec::philox_stream rng(5, 1);
  for (const std::int64_t v : {1, 15, 16, 257, 4099}) {
    const int rows = 10;
    std::vector<float> logits;
    for (int r = 0; r < rows; ++r) {
      auto row = batch_row(v, rng, r);
      row[0] = 1.0f;  // at least one logit above -inf
      logits.insert(logits.end(), row.begin(), row.end());
    }
    std::vector<float> want(logits.size()), probs(logits.size(), -1.0f);
    for (int r = 0; r < rows; ++r)
      specdec::logits_to_probs(std::span<const float>(logits.data() + r * v, static_cast<std::size_t>(v)),
                               std::span<float>(want.data() + r * v, static_cast<std::size_t>(v)));
    std::vector<std::int32_t> status(3, 9);
    specdec::logits_to_probs_batch(specdec::host{}, specdec::make_view<2>(logits.data(), {rows, v}),
                                   specdec::make_view<2>(probs.data(), {rows, v}), specdec::make_view<1>(status.data(), {3}));
    CHECK(same_bits(probs, want));
    specdec::logits_to_probs_batch(specdec::host{}, specdec::make_view<2>(logits.data(), {rows, v}),
                                   specdec::make_view<2>(logits.data(), {rows, v}), specdec::make_view<1>(status.data(), {3}));
    CHECK(same_bits(logits, want));
    CHECK(status == std::vector<std::int32_t>{0, -1, -1});
  }
  std::vector<float> l(4 * 8, 0.0f), p(4 * 8);
  std::vector<std::int32_t> status(3, 9);
  CHECK_THROWS_WITH(specdec::logits_to_probs_batch(specdec::host{}, specdec::make_view<2>(l.data(), {3, 8}),
                                                   specdec::make_view<2>(l.data() + 8, {3, 8}),
                                                   specdec::make_view<1>(status.data(), {3})),
                    Contains("'probs'") && Contains("memory disjoint from 'logits'"));
  l[9] = ninf;
  std::fill(l.begin() + 8, l.begin() + 16, ninf);
  CHECK_THROWS_WITH(specdec::logits_to_probs_batch(specdec::host{}, specdec::make_view<2>(l.data(), {4, 8}),
                                                   specdec::make_view<2>(p.data(), {4, 8}), specdec::make_view<1>(status.data(), {3})),
                    Contains("'logits'") && Contains("row 1"));
}

TEST_CASE("fast_exp_fused equals the host's exp at the FMA-capable levels") {
  // Every 97th float in [-90, 0.5] (about 10 million), through the dispatched exp_sum's weights.
  std::vector<float> xs;
  for (std::uint32_t b = 0;; b += 97) {
    float f;
    std::memcpy(&f, &b, sizeof f);
    if (f >= -90.0f && f <= 0.5f) xs.push_back(f);
    if (b > 0xFFFFFFFFu - 97) break;
  }
  std::vector<float> w(xs.size());
  int levels = 0;
  for (const auto level : {specdec::simd_level::avx2, specdec::simd_level::avx512}) {
    // the level must be one this file's kernels run at: a build without dispatch (SPECDEC_ISA_DISPATCH=0)
    // runs its own flags' copy whatever is requested
    if (!specdec::set_simd_level(level) || specdec::active_simd_level() != level) continue;
    ++levels;
    (void)specdec::detail::exp_sum(xs.data(), xs.size(), 0.0f, w.data());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) differ += std::bit_cast<std::uint32_t>(w[i]) != std::bit_cast<std::uint32_t>(specdec::detail::fast_exp_fused(xs[i]));
    INFO("level " << static_cast<int>(level) << ", " << xs.size() << " inputs");
    CHECK(differ == 0);
  }
  specdec::reset_simd_level();
  if (levels == 0) WARN("no FMA-capable level runs in this build on this CPU: nothing compared");
#if SPECDEC_NATIVE_SIMD_FMA
  // this file's own flags have FMA: its copy is the fused one too (at any optimization level)
  const float x = -0x1.089598p-9f;  // one of the inputs where one rounding and two differ
  CHECK(std::bit_cast<std::uint32_t>(specdec::detail::lvl_native::fast_exp(x)) ==
        std::bit_cast<std::uint32_t>(specdec::detail::fast_exp_fused(x)));
#endif
}

namespace {

// The twins below take the weights w the host's dispatched exp gives (specdec::detail::exp_sum's
// output), so they check the order and the selection at whatever level runs; that the device's
// weights (fast_exp_fused) are those weights at the FMA levels is the test case above.

// exp_sum's order (vec.inl), written the way chunked_sum_block (sampling/logits_processor.cuh)
// computes it: chunks of 256, in each the 16 lane sums over the whole lanes, then the tail, then the
// lanes; the chunk sums in order. value(i): the double added for token i.
template <class Value>
double chunked_sum_twin(std::size_t n, const Value& value) {
  double total = 0.0;
  for (std::size_t lo = 0; lo < n; lo += 256) {
    const std::size_t len = std::min<std::size_t>(256, n - lo), body = len - len % 16;
    double acc[16] = {};
    for (std::size_t j = 0; j < 16; ++j)
      for (std::size_t i = j; i < body; i += 16) acc[j] += value(lo + i);
    double s = 0.0;
    for (std::size_t i = body; i < len; ++i) s += value(lo + i);
    for (double a : acc) s += a;
    total += s;
  }
  return total;
}
double exp_sum_twin(const float* w, std::size_t n) {
  return chunked_sum_twin(n, [&](std::size_t i) { return static_cast<double>(w[i]); });
}

//! The host's weights of a row with maximum m.
std::vector<float> host_weights(const std::vector<float>& row, float m) {
  std::vector<float> w(row.size());
  (void)specdec::detail::exp_sum(row.data(), row.size(), m, w.data());
  return w;
}

// block_exact_sums (logits_processor.cuh), serially: visit(i, add) calls add(slot, w) for entry i's
// weights; each weight's quanta (top_p_units) go to two 32-bit counters of its slot, folded into the
// slot's double after every `round` entries (the kernel's top_p_units_round, 2^20; smaller here, so
// that rows fold many times). Each slot's sum is also taken plainly in double, in index order: the
// two must agree to the bit (the sums are exact).
template <class Visit, class Quantum>
std::vector<double> exact_sums_twin(std::size_t n, std::size_t slots, std::size_t round, const Visit& visit,
                                    const Quantum& quantum) {
  namespace d = specdec::detail;
  std::vector<double> out(slots, 0.0), plain(slots, 0.0);
  std::vector<std::uint32_t> hi(slots, 0u), lo(slots, 0u);
  bool units_exact = true;
  const auto add = [&](std::uint32_t slot, float w) {
    const std::uint32_t u = d::top_p_units(w);
    units_exact &= static_cast<double>(u) * quantum(slot) == static_cast<double>(w);  // w is u quanta
    hi[slot] += d::top_p_units_hi(u);
    lo[slot] += d::top_p_units_lo(u);
    plain[slot] += w;
  };
  for (std::size_t r0 = 0; r0 < n; r0 += round) {
    for (std::size_t i = r0; i < std::min(n, r0 + round); ++i) visit(i, add);
    for (std::size_t b = 0; b < slots; ++b) out[b] += d::top_p_units_mass(hi[b], lo[b], quantum(b)), hi[b] = lo[b] = 0u;
  }
  REQUIRE(units_exact);
  REQUIRE(std::equal(out.begin(), out.end(), plain.begin(),
                     [](double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }));
  return out;
}

// Top-p as the kernel selects it (block_top_p), serially: the bin masses (block_exact_sums, folded
// every `round` entries), the boundary and the rounded need as the host finds them, then a byte of
// the logit key per pass, each digit's weight summed (exact), and the ties at the last key by index.
// Returns the processed row.
std::vector<float> top_p_twin(std::vector<float> row, float m, float top_p, std::size_t round) {
  const std::size_t n = row.size();
  const auto w_all = host_weights(row, m);
  const auto weight = [&](std::size_t i) { return w_all[i]; };
  const double total = exp_sum_twin(w_all.data(), n);
  const std::vector<double> mass = exact_sums_twin(
      n, specdec::detail::top_p_bins, round,
      [&](std::size_t i, const auto& add) {
        if (weight(i) > 0.0f) add(specdec::detail::top_p_bin_of(weight(i)), weight(i));
      },
      [](std::uint32_t b) { return specdec::detail::top_p_quantum(b); });
  const double need0 = static_cast<double>(top_p) * total;
  double above = 0.0;
  std::uint32_t boundary = specdec::detail::top_p_bins - 1;
  for (; boundary > 0; --boundary) {
    if (above + mass[boundary] >= need0) break;
    above += mass[boundary];
  }
  const double q = specdec::detail::top_p_quantum(boundary);
  double need = std::ceil((need0 - above) / q) * q;
  const auto cand = [&](std::size_t i) { return weight(i) > 0.0f && specdec::detail::top_p_bin_of(weight(i)) == boundary; };
  std::uint32_t prefix = 0;
  std::int32_t take = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    std::int32_t cnt[256] = {};
    const std::vector<double> wsum = exact_sums_twin(
        n, 256, round,
        [&](std::size_t i, const auto& add) {
          if (!cand(i)) return;
          const std::uint32_t k = specdec::detail::topk_key(row[i]);
          if (pass == 0 || (k >> (shift + 8)) == prefix) add((k >> shift) & 255u, weight(i)), ++cnt[(k >> shift) & 255u];
        },
        [q](std::uint32_t) { return q; });
    double acc = 0.0;
    int d = 255;
    for (; d > 0; --d) {
      if (cnt[d] > 0 && acc + wsum[d] >= need) break;
      acc += wsum[d];
    }
    need -= acc;
    prefix = (prefix << 8) | static_cast<std::uint32_t>(d);
    if (pass == 3) {
      const float v = specdec::detail::bits_float(prefix >= 0x80000000u ? prefix & 0x7FFFFFFFu : ~prefix);
      const std::vector<float> one{v};
      const double w = host_weights(one, m)[0];  // the weight of the tied tokens' logit
      const double j = w > 0.0 ? std::ceil(need / w) : cnt[d];
      take = j < cnt[d] ? static_cast<std::int32_t>(j) : cnt[d];
    }
  }
  std::vector<float> out = row;
  std::int32_t ties = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float w = weight(i);
    const std::uint32_t b = specdec::detail::top_p_bin_of(w);
    if (b < boundary || (b == boundary && w == 0.0f)) {
      out[i] = ninf;
    } else if (cand(i)) {
      const std::uint32_t k = specdec::detail::topk_key(row[i]);
      const bool keep = k > prefix || (k == prefix && ties++ < take);
      if (!keep) out[i] = ninf;
    }
  }
  return out;
}

// weighted_shift_sum's order (vec.inl), as block_eta computes it: exp_sum's chunks.
double shift_sum_twin(const float* w, const float* x, std::size_t n, float m) {
  return chunked_sum_twin(n, [&](std::size_t i) { return w[i] > 0.0f ? static_cast<double>(w[i]) * (x[i] - m) : 0.0; });
}

}  // namespace

TEST_CASE("the cuda kernels' orders and top-p selection, run serially, give the host's values") {
 for (const auto level : {specdec::simd_level::portable, specdec::simd_level::avx2, specdec::simd_level::avx512}) {
  if (!specdec::set_simd_level(level) || specdec::active_simd_level() != level) continue;  // levels this build runs
  specdec::philox_stream rng(23, 0);
  int selective = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::int64_t v = 1 + static_cast<std::int64_t>(rng.below(trial % 10 == 0 ? 40000 : 700));
    auto row = batch_row(v, rng, trial);
    row[static_cast<std::size_t>(rng.below(static_cast<std::uint32_t>(v)))] = 2.0f;  // a maximum above -inf
    const float m = *std::max_element(row.begin(), row.end());
    // exp_sum's order
    std::vector<float> w(row.size());
    const double host_total = specdec::detail::exp_sum(row.data(), row.size(), m, w.data());
    REQUIRE(std::bit_cast<std::uint64_t>(host_total) == std::bit_cast<std::uint64_t>(exp_sum_twin(w.data(), row.size())));
    // weighted_shift_sum's order (eta's entropy term)
    const double host_shift = specdec::detail::weighted_shift_sum(w.data(), row.data(), row.size(), m);
    REQUIRE(std::bit_cast<std::uint64_t>(host_shift) ==
            std::bit_cast<std::uint64_t>(shift_sum_twin(w.data(), row.data(), row.size(), m)));
    // top-p
    const float top_p = trial % 7 == 0 ? 1e-6f : 0.02f + 0.97f * rng.uniform();
    specdec::sampling_params p;
    p.top_p = top_p;
    auto want = row;
    specdec::sampling_workspace ws;
    specdec::process_logits(want, p, {}, ws);
    const auto got = top_p_twin(row, m, top_p, 1 + rng.below(trial % 3 == 0 ? 64 : 5000));
    INFO("trial " << trial << " V " << v << " top_p " << top_p);
    CHECK(same_bits(got, want));
    selective += std::count(want.begin(), want.end(), ninf) > std::count(row.begin(), row.end(), ninf);
  }
  CHECK(selective > 100);  // most trials cut tokens
 }
  specdec::reset_simd_level();
}

TEST_CASE("top_p_units counts a weight in quanta of its top-p bin, denormals included") {
  // Every float in (0, 1] (a stride through the bit patterns, plus each binade's ends): w is
  // top_p_units(w) quanta of its bin, an integer below 2^24, split into two 12-bit parts.
  namespace d = specdec::detail;
  std::vector<std::uint32_t> bits;
  for (std::uint32_t b = 1; b <= 0x3F800000u; b += 7919u) bits.push_back(b);
  for (std::uint32_t e = 0; e < 127; ++e) bits.push_back(e << 23 | 1u), bits.push_back(e << 23 | 0x7FFFFFu);
  bits.push_back(0x3F800000u);  // 1
  for (const std::uint32_t b : bits) {
    const float w = d::bits_float(b);
    const std::uint32_t u = d::top_p_units(w);
    INFO("bits " << b);
    REQUIRE(u < (1u << 24));
    REQUIRE(static_cast<double>(u) * d::top_p_quantum(d::top_p_bin_of(w)) == static_cast<double>(w));
    REQUIRE((d::top_p_units_hi(u) << 12 | d::top_p_units_lo(u)) == u);
  }
  // the largest counters a round can hold give their exact mass
  const auto most = static_cast<std::uint32_t>(d::top_p_units_round * 4095);
  CHECK(d::top_p_units_mass(most, most, 1.0) == 4097.0 * 4095.0 * static_cast<double>(d::top_p_units_round));
}

TEST_CASE("temperature's shifted path gives the same zeros whichever zero is the maximum") {
  // (x - max) / t with max = -0 or +0 would give -0 or +0 for a zero logit: the row's maximum is
  // shifted as +0 either way, so the host and the CUDA reduction (which may meet the other zero
  // first) write the same bits
  for (const auto& row0 : {std::vector<float>{-0.0f, 0.0f, -1e30f}, std::vector<float>{0.0f, -0.0f, -1e30f}}) {
    specdec::sampling_params p;
    p.temperature = 1e-30f;  // |l| / t leaves the float range: the shifted path
    auto row = row0;
    specdec::sampling_workspace ws;
    specdec::process_logits(row, p, {}, ws);
    CHECK(std::signbit(row[0]) == std::signbit(row0[0]));  // -0 - (+0) = -0, +0 - (+0) = +0
    CHECK(std::signbit(row[1]) == std::signbit(row0[1]));
    CHECK(row[2] == ninf);
  }
}

TEST_CASE("top-p keeps the smallest (logit desc, id asc) prefix reaching p, checked against a sort") {
  // A reference that sorts the whole row and adds exact weights in that order: top-p's result must
  // not depend on how the boundary bin is visited (the host's quickselect, the device's radix passes).
  specdec::philox_stream rng(29, 0);
  for (int trial = 0; trial < 200; ++trial) {
    const std::int64_t v = 2 + static_cast<std::int64_t>(rng.below(3000));
    auto row = batch_row(v, rng, trial % 2 == 0 ? 1 : 4);  // ties, or nearly flat: big boundary bins
    row[0] = 1.0f;
    const float top_p = 0.05f + 0.9f * rng.uniform();
    specdec::sampling_params p;
    p.top_p = top_p;
    auto got = row;
    specdec::sampling_workspace ws;
    specdec::process_logits(got, p, {}, ws);
    const auto want = ref::top_p_by_sort(row, top_p);  // the host's rule, by a full sort of the boundary bin
    INFO("trial " << trial << " V " << v);
    CHECK(same_bits(got, want));
  }
}
