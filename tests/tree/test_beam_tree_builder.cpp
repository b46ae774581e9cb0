#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/tree/beam_tree_builder.hpp"
#include "specdec/tree/prune.hpp"

using specdec::beam_tree_builder;
using specdec::token_tree;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A toy drafter whose next-token distribution is a deterministic function of the path (root-first
// token sequence): softmax of small integer logits, so equal probabilities (ties) are common.
struct toy_drafter {
  int vocab;
  std::uint64_t seed;
  int calls = 0;
  // When set, the root's row is -1e30 or -2e30 per token: below it every base + lp rounds to base,
  // so equal scores of different log-probs are the rule, not the exception.
  bool huge_root = false;
  std::vector<float> logprobs(const std::vector<std::int32_t>& path) const {
    if (huge_root && path.empty()) {
      std::vector<float> out(static_cast<std::size_t>(vocab));
      for (std::size_t v = 0; v < out.size(); ++v) out[v] = (v * 7 + seed) % 3 == 0 ? -2e30f : -1e30f;
      return out;
    }
    std::uint64_t h = seed;
    for (auto t : path) h = h * 1000003u + static_cast<std::uint64_t>(t) + 1;
    specdec::philox_stream rng(h, 7);
    std::vector<double> logit(static_cast<std::size_t>(vocab));
    double mx = -1e300;
    for (auto& l : logit) {
      l = static_cast<double>(rng.below(3));
      mx = std::max(mx, l);
    }
    double z = 0;
    for (auto l : logit) z += std::exp(l - mx);
    std::vector<float> out(static_cast<std::size_t>(vocab));
    for (std::size_t v = 0; v < out.size(); ++v) out[v] = static_cast<float>(logit[v] - mx - std::log(z));
    return out;
  }
  std::vector<std::int32_t> path_of(const token_tree& t, std::int32_t node) const {
    return node < 0 ? std::vector<std::int32_t>{} : t.path_tokens(node);
  }
};

// Reference beam tree by plain enumeration: level k+1 = the w_k best of ALL (s, v) extensions of the
// sequences of level k, ranked by a full sort on (score desc, index of s in level k, log-prob desc,
// v asc): the builder's documented order.
token_tree reference_beam_tree(const toy_drafter& d, const std::vector<int>& widths) {
  struct seq {
    std::int32_t node;  // -1 root
    std::vector<std::int32_t> toks;
    float score;
  };
  token_tree t;
  std::vector<seq> level{{-1, {}, 0.0f}};
  for (int w : widths) {
    struct ext {
      float score;
      std::size_t s;
      std::int32_t v;
      float lp;
    };
    std::vector<ext> all;
    for (std::size_t s = 0; s < level.size(); ++s) {
      const auto lp = d.logprobs(level[s].toks);
      for (int v = 0; v < d.vocab; ++v)
        if (lp[static_cast<std::size_t>(v)] != kNegInf)
          all.push_back({level[s].score + lp[static_cast<std::size_t>(v)], s, v, lp[static_cast<std::size_t>(v)]});
    }
    std::sort(all.begin(), all.end(), [](const ext& a, const ext& b) {
      if (a.score != b.score) return a.score > b.score;
      if (a.s != b.s) return a.s < b.s;
      if (a.lp != b.lp) return a.lp > b.lp;
      return a.v < b.v;
    });
    all.resize(std::min(all.size(), static_cast<std::size_t>(w)));
    std::vector<seq> next;
    for (const auto& e : all) {
      auto toks = level[e.s].toks;
      toks.push_back(e.v);
      const int id = t.add(e.v, level[e.s].node, e.lp);
      next.push_back({id, toks, t.score(id)});
    }
    level = std::move(next);
  }
  return t;
}

token_tree build_dense(const toy_drafter& d, const specdec::beam_tree_params& p, int* calls = nullptr) {
  beam_tree_builder b(p);
  int n = 0;
  auto t = b.build_from_logprobs(d.vocab, [&](const token_tree& tree, std::span<const std::int32_t> frontier,
                                              std::span<float> rows) {
    ++n;
    REQUIRE(rows.size() == frontier.size() * static_cast<std::size_t>(d.vocab));
    for (std::size_t r = 0; r < frontier.size(); ++r) {
      const auto lp = d.logprobs(d.path_of(tree, frontier[r]));
      std::copy(lp.begin(), lp.end(), rows.begin() + static_cast<std::ptrdiff_t>(r * lp.size()));
    }
  });
  if (calls) *calls = n;
  return t;
}

}  // namespace

TEST_CASE("beam_tree_builder: defaults are LongSpec's widths (4, 16, 16, 16, 16)", "[tree][beam]") {
  // LongSpec (Appendix B/D) uses beam widths [4, 16, 16, 16, 16]; both the params and a builder
  // constructed without arguments must carry exactly that, with no node budget.
  const std::vector<int> longspec{4, 16, 16, 16, 16};
  CHECK(specdec::beam_tree_params{}.beam_widths == longspec);
  CHECK(specdec::beam_tree_params{}.max_nodes == 0);
  beam_tree_builder b;
  CHECK(b.params().beam_widths == longspec);
  CHECK(b.params().max_nodes == 0);
  CHECK(b.max_tree_size() == 68);

  // Every row offers k distinct finite candidates, so each step fills its width: the drafter is asked
  // to expand the root (k = 4), then the 4 step-0 nodes (k = 16), then 16 nodes at each later step.
  std::vector<std::pair<std::size_t, int>> calls;  // (frontier size, k) per step
  std::vector<std::vector<std::int32_t>> frontiers;
  const auto t = b.build_from_candidates([&](const token_tree&, std::span<const std::int32_t> f, int k,
                                             std::span<std::int32_t> tokens, std::span<float> logprobs) {
    calls.emplace_back(f.size(), k);
    frontiers.emplace_back(f.begin(), f.end());
    for (std::size_t r = 0; r < f.size(); ++r)
      for (int j = 0; j < k; ++j) {
        const std::size_t e = r * static_cast<std::size_t>(k) + static_cast<std::size_t>(j);
        tokens[e] = j;
        logprobs[e] = -0.1f * static_cast<float>(j + 1) - 0.01f * static_cast<float>(r);
      }
  });
  CHECK(calls == std::vector<std::pair<std::size_t, int>>{{1, 4}, {4, 16}, {16, 16}, {16, 16}, {16, 16}});
  // the frontier of step k + 1 is exactly the nodes added at step k (appended in order)
  REQUIRE(frontiers.size() == 5);
  CHECK(frontiers[0] == std::vector<std::int32_t>{-1});
  CHECK(frontiers[1] == std::vector<std::int32_t>{0, 1, 2, 3});
  for (int i = 0; i < 16; ++i) CHECK(frontiers[2][static_cast<std::size_t>(i)] == 4 + i);
  REQUIRE(t.size() == 68);
  std::vector<int> per_depth(static_cast<std::size_t>(t.max_depth()) + 1, 0);
  for (auto d : t.depths()) ++per_depth[static_cast<std::size_t>(d)];
  CHECK(per_depth == longspec);
}

TEST_CASE("beam_tree_builder: hand-computed example keeps a high-score leaf unexpanded", "[tree][beam]") {
  // V = 4, widths {2, 3, 2}. Probabilities (the tree's log-probs are their logs):
  //  root: [.5 .3 .15 .05]           -> step 0 keeps tok0 (.5), tok1 (.3)                    nodes 0, 1
  //  after 0: [.1 .2 .6 .1]  => cumulative .05 .10 .30 .05
  //  after 1: [.9 .05 .03 .02] => cumulative .27 .015 .009 .006
  //                                  -> step 1 keeps (0,2)=.30, (1,0)=.27, (0,1)=.10          nodes 2, 3, 4
  //  after 0,2: uniform .25 => .075 each; after 1,0: [.7 .1 .1 .1] => .189 .027 ...;
  //  after 0,1: [1 0 0 0] => .10
  //                                  -> step 2 keeps (1,0,0)=.189, (0,1,0)=.10                nodes 5, 6
  // Node 2 has the best cumulative score of its level yet none of its children is kept: it stays
  // in the tree as a leaf (LongSpec: stop expanding, do not remove).
  std::map<std::vector<std::int32_t>, std::vector<double>> dist{
      {{}, {.5, .3, .15, .05}},     {{0}, {.1, .2, .6, .1}},       {{1}, {.9, .05, .03, .02}},
      {{0, 2}, {.25, .25, .25, .25}}, {{1, 0}, {.7, .1, .1, .1}}, {{0, 1}, {1, 0, 0, 0}}};
  beam_tree_builder b({.beam_widths = {2, 3, 2}});
  std::vector<std::vector<std::int32_t>> frontiers;
  auto t = b.build_from_logprobs(4, [&](const token_tree& tree, std::span<const std::int32_t> f, std::span<float> rows) {
    frontiers.emplace_back(f.begin(), f.end());
    for (std::size_t r = 0; r < f.size(); ++r) {
      const auto path = f[r] < 0 ? std::vector<std::int32_t>{} : tree.path_tokens(f[r]);
      const auto& p = dist.at(path);
      for (int v = 0; v < 4; ++v) rows[r * 4 + static_cast<std::size_t>(v)] = static_cast<float>(std::log(p[static_cast<std::size_t>(v)]));
    }
  });
  REQUIRE(frontiers == std::vector<std::vector<std::int32_t>>{{-1}, {0, 1}, {2, 3, 4}});
  REQUIRE(t.size() == 7);
  CHECK(std::vector<std::int32_t>(t.tokens().begin(), t.tokens().end()) == std::vector<std::int32_t>{0, 1, 2, 0, 1, 0, 0});
  CHECK(std::vector<std::int32_t>(t.parents().begin(), t.parents().end()) == std::vector<std::int32_t>{-1, -1, 0, 1, 0, 3, 4});
  CHECK(std::exp(t.score(5)) == Approx(.189).epsilon(1e-5));
  CHECK(std::exp(t.score(2)) == Approx(.30).epsilon(1e-5));
  CHECK(t.leaves() == std::vector<std::int32_t>{2, 5, 6});

  // Budget 4: the 4 best cumulative scores are .5, .3, .30 (node 2, index later), .27 -> nodes 0,1,2,3.
  beam_tree_builder b4({.beam_widths = {2, 3, 2}, .max_nodes = 4});
  auto t4 = b4.build_from_logprobs(4, [&](const token_tree& tree, std::span<const std::int32_t> f, std::span<float> rows) {
    for (std::size_t r = 0; r < f.size(); ++r) {
      const auto path = f[r] < 0 ? std::vector<std::int32_t>{} : tree.path_tokens(f[r]);
      const auto& p = dist.at(path);
      for (int v = 0; v < 4; ++v) rows[r * 4 + static_cast<std::size_t>(v)] = static_cast<float>(std::log(p[static_cast<std::size_t>(v)]));
    }
  });
  CHECK(std::vector<std::int32_t>(t4.parents().begin(), t4.parents().end()) == std::vector<std::int32_t>{-1, -1, 0, 1});
  CHECK(std::vector<std::int32_t>(t4.tokens().begin(), t4.tokens().end()) == std::vector<std::int32_t>{0, 1, 2, 0});
}

TEST_CASE("beam_tree_builder: dense and candidate callbacks equal brute-force enumeration", "[tree][beam]") {
  const std::vector<std::vector<int>> shapes{{4, 16, 16, 16, 16}, {2, 3, 4, 2}, {1, 1, 1}, {3, 9, 27}, {5, 1, 5, 1}};
  for (int vocab : {2, 3, 5, 8, 300}) {  // 300: heavy ties through the O(V) top-k path
    for (const auto& widths : shapes) {
      for (std::uint64_t seed = 0; seed < 4; ++seed) {
        toy_drafter d{vocab, seed * 31 + static_cast<std::uint64_t>(vocab)};
        const auto ref = reference_beam_tree(d, widths);
        int calls = 0;
        const auto got = build_dense(d, {.beam_widths = widths}, &calls);
        REQUIRE(got == ref);
        REQUIRE(calls == static_cast<int>(widths.size()));
        // Candidate callback: returns top-k by a full sort, in reversed order, padded with -1.
        beam_tree_builder b({.beam_widths = widths});
        const auto got2 = b.build_from_candidates([&](const token_tree& tree, std::span<const std::int32_t> f, int k,
                                                      std::span<std::int32_t> toks, std::span<float> lps) {
          REQUIRE(toks.size() == f.size() * static_cast<std::size_t>(k));
          for (std::size_t r = 0; r < f.size(); ++r) {
            const auto lp = d.logprobs(d.path_of(tree, f[r]));
            auto order = specdec::topk_indices_by_sort<float>(lp, std::min(k, vocab));
            std::reverse(order.begin(), order.end());
            for (std::size_t j = 0; j < order.size(); ++j) {
              toks[r * static_cast<std::size_t>(k) + j] = order[j];
              lps[r * static_cast<std::size_t>(k) + j] = lp[static_cast<std::size_t>(order[j])];
            }
          }
        });
        REQUIRE(got2 == ref);
        // The builder object is reusable: a second build gives the same tree.
        REQUIRE(build_dense(d, {.beam_widths = widths}) == ref);
      }
    }
  }
}

TEST_CASE("beam_tree_builder: equal scores of different log-probs keep the row's top-k order", "[tree][beam]") {
  // Below a root score of -1e30, base + lp rounds to base for every lp of a row: the documented order
  // then ranks by log-prob (as each row's top-k does), not by token id. Before, the builder ranked by
  // id there, so the global top-w_k disagreed with the rows' cuts it was built from.
  {
    beam_tree_builder b({.beam_widths = {1, 1}});
    const auto t = b.build_from_logprobs(2, [](const token_tree&, std::span<const std::int32_t> f, std::span<float> rows) {
      if (f[0] < 0)
        rows[0] = -1e30f, rows[1] = kNegInf;
      else
        rows[0] = -1.0f, rows[1] = -1e-7f;  // -1e30 - 1 == -1e30 - 1e-7 in float
    });
    REQUIRE(t.size() == 2);
    CHECK(t.score(1) == t.score(0) - 1.0f);
    CHECK(t.token(1) == 1);  // the higher log-prob, not the lower id
  }
  const std::vector<std::vector<int>> shapes{{2, 3, 4, 2}, {1, 1, 1}, {3, 9, 27}, {5, 1, 5, 1}};
  for (int vocab : {2, 3, 5, 8}) {
    for (const auto& widths : shapes) {
      for (std::uint64_t seed = 0; seed < 6; ++seed) {
        toy_drafter d{vocab, seed * 17 + static_cast<std::uint64_t>(vocab)};
        d.huge_root = true;
        const auto ref = reference_beam_tree(d, widths);
        REQUIRE(build_dense(d, {.beam_widths = widths}) == ref);
      }
    }
  }
}

TEST_CASE("beam_tree_builder: node budget keeps the global best N, ancestor-closed, and stops early", "[tree][beam]") {
  for (int vocab : {3, 6}) {
    for (std::uint64_t seed = 0; seed < 5; ++seed) {
      toy_drafter d{vocab, 1000 + seed};
      const std::vector<int> widths{4, 8, 8, 8};
      const auto full = reference_beam_tree(d, widths);
      for (int budget : {1, 3, 7, 12, 20, 100}) {
        int calls = 0;
        const auto got = build_dense(d, {.beam_widths = widths, .max_nodes = budget}, &calls);
        REQUIRE(got == specdec::keep_best_nodes(full, budget));
        // brute force: the top-N of the full tree by (score desc, index asc)
        std::vector<int> order(static_cast<std::size_t>(full.size()));
        for (int i = 0; i < full.size(); ++i) order[static_cast<std::size_t>(i)] = i;
        std::sort(order.begin(), order.end(), [&](int a, int b) {
          return full.score(a) != full.score(b) ? full.score(a) > full.score(b) : a < b;
        });
        order.resize(std::min<std::size_t>(order.size(), static_cast<std::size_t>(budget)));
        std::sort(order.begin(), order.end());
        REQUIRE(got.size() == static_cast<int>(order.size()));
        for (int i = 0; i < got.size(); ++i) {
          REQUIRE(got.path_tokens(i) == full.path_tokens(order[static_cast<std::size_t>(i)]));
          REQUIRE(got.score(i) == full.score(order[static_cast<std::size_t>(i)]));
        }
        if (budget == 1) REQUIRE(calls <= 2);  // later steps cannot beat the single best root child
      }
    }
  }
}

TEST_CASE("keep_best_nodes: closure when scores increase down a path", "[tree][beam]") {
  // Positive log-probs (not a beam output, but keep_best_nodes accepts any tree): best-first still
  // never keeps a node without its parent.
  token_tree t;
  t.add(1, -1, -5.0f);  // 0
  t.add(2, 0, 10.0f);   // 1: score 5, but parent scores -5
  t.add(3, -1, -1.0f);  // 2
  std::vector<std::int32_t> kept;
  const auto k = specdec::keep_best_nodes(t, 1, &kept);
  REQUIRE(kept == std::vector<std::int32_t>{2});
  REQUIRE(k.size() == 1);
  const auto k2 = specdec::keep_best_nodes(t, 2, &kept);
  REQUIRE(kept == std::vector<std::int32_t>{0, 2});
  REQUIRE(specdec::keep_best_nodes(t, 3) == t);
  REQUIRE(specdec::keep_best_nodes(t, 0).empty());
  REQUIRE_THROWS_WITH(specdec::keep_best_nodes(t, -1), Catch::Contains("max_nodes"));
}

TEST_CASE("beam_tree_builder: validation", "[tree][beam][validation]") {
  using Catch::Contains;
  REQUIRE_THROWS_WITH(beam_tree_builder({.beam_widths = {}}), Contains("beam_widths"));
  REQUIRE_THROWS_WITH(beam_tree_builder({.beam_widths = {4, 0}}), Contains("beam_widths[1]"));
  REQUIRE_THROWS_WITH(beam_tree_builder({.beam_widths = {4}, .max_nodes = -2}), Contains("max_nodes"));
  beam_tree_builder b({.beam_widths = {2, 2}});
  const auto noop = [](const token_tree&, std::span<const std::int32_t>, std::span<float>) {};
  REQUIRE_THROWS_WITH(b.build_from_logprobs(0, noop), Contains("vocab_size"));
  const auto with = [](float bad) {
    return [bad](const token_tree&, std::span<const std::int32_t>, std::span<float> rows) {
      std::fill(rows.begin(), rows.end(), -1.0f);
      rows[1] = bad;
    };
  };
  REQUIRE_THROWS_WITH(b.build_from_logprobs(4, with(std::nanf(""))), Contains("log-prob") && Contains("build_from_logprobs"));
  REQUIRE_THROWS_WITH(b.build_from_logprobs(4, with(0.5f)), Contains("log-prob of token 1"));
  REQUIRE_NOTHROW(b.build_from_logprobs(4, with(1e-5f)));  // rounding above 0 is tolerated
  REQUIRE_THROWS_WITH(b.build_from_candidates([](const token_tree&, std::span<const std::int32_t>, int,
                                                 std::span<std::int32_t> t, std::span<float> l) {
                        t[0] = 3, t[1] = 3, l[0] = l[1] = -1.0f;
                      }),
                      Contains("distinct"));
  REQUIRE_THROWS_WITH(b.build_from_candidates([](const token_tree&, std::span<const std::int32_t>, int,
                                                 std::span<std::int32_t> t, std::span<float> l) {
                        t[0] = -5, l[0] = -1.0f;
                      }),
                      Contains("candidate token"));
  // All candidates impossible (-inf or padding): the tree stops growing.
  const auto t = b.build_from_candidates([](const token_tree&, std::span<const std::int32_t>, int,
                                            std::span<std::int32_t> t, std::span<float> l) {
    t[0] = 1, l[0] = kNegInf;
  });
  REQUIRE(t.empty());
}

TEST_CASE("beam_tree_builder: widths that could not be allocated are rejected up front", "[tree][beam][validation]") {
  using Catch::Contains;
  constexpr int imax = std::numeric_limits<int>::max();
  // Used to construct fine and then throw std::bad_alloc from build (reserve(INT_MAX) nodes).
  REQUIRE_THROWS_WITH(beam_tree_builder(specdec::beam_tree_params{{imax}}),
                      Contains("beam_tree_builder") && Contains("beam_widths[0]") && Contains("<= 4096"));
  REQUIRE_THROWS_WITH(beam_tree_builder({.beam_widths = {4, 4097}}), Contains("beam_widths[1]"));
  // Widths each within the bound but summing past max_builder_nodes (2^20 nodes).
  const std::vector<int> many(257, 4096);
  REQUIRE_THROWS_WITH(beam_tree_builder({.beam_widths = many}), Contains("params.beam_widths") && Contains("1048576"));
  REQUIRE_NOTHROW(beam_tree_builder({.beam_widths = std::vector<int>(256, 4096)}));
}

TEST_CASE("keep_best_nodes: -inf scores rank last, ties by index, and the order is a strict weak order",
          "[tree][beam]") {
  // Random trees whose log-probs are <= 0 with many ties and -inf ("impossible") nodes: the kept set must
  // be the global top-N by (score desc, index asc), which best-first pruning gives only if its
  // comparator is a strict weak order on every score the tree can hold.
  specdec::philox_stream rng(5, 5);
  for (int trial = 0; trial < 300; ++trial) {
    token_tree t;
    const int n = 1 + static_cast<int>(rng.below(40));
    for (int i = 0; i < n; ++i) {
      const auto parent = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(i + 1))) - 1;
      const auto r = rng.below(5);
      t.add(1, parent, r == 0 ? kNegInf : -0.5f * static_cast<float>(r - 1));
    }
    std::vector<std::int32_t> order(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return t.score(a) > t.score(b); });
    const int keep = static_cast<int>(rng.below(static_cast<std::uint32_t>(n + 1)));
    std::vector<std::int32_t> want(order.begin(), order.begin() + keep), kept;
    std::sort(want.begin(), want.end());
    specdec::keep_best_nodes(t, keep, &kept);
    INFO("trial " << trial);
    REQUIRE(kept == want);
  }
}
