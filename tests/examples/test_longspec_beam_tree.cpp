// LongSpec beam drafting with a tree forward (issue #22 item 5): longspec_draft_model::step_tree runs
// speculative nodes under the ancestor mask, and a node's logits equal those of step() along its root
// path (double: exactly; float: within rounding, the batched attention may use other host kernels);
// longspec_drafter's beam mode through step_tree (one forward per beam level) proposes exactly what
// the path-by-path fallback proposes (a wrapper that hides step_tree forces it), with far fewer draft
// tokens; windows smaller than context + tree depth (8) exercise the sliding window; the request's depth
// caps the beam's levels.
#include <catch2/catch.hpp>

#include <cstdio>
#include <limits>
#include <map>
#include <random>

#include "../../examples/common/longspec_draft.hpp"

using namespace specdec;
using namespace specdec::examples;

namespace {
llama_config cfg() { return {.vocab_size = 40, .hidden = 24, .layers = 3, .heads = 2, .kv_heads = 1, .head_dim = 64, .ffn_hidden = 32}; }
template <class T>
llama_weights<T> convert(const llama_weights<double>& w) {
  return convert_weights<T>(w);
}

// Forwards to a longspec_draft_model, counting the speculative draft tokens it runs; Tree = false hides
// step_tree (so longspec_drafter takes its path-by-path fallback).
template <class T, bool Tree>
struct counting_draft {
  using logit_type = T;
  longspec_draft_model<T>* m;
  long long spec_tokens = 0;
  [[nodiscard]] int vocab_size() const { return m->vocab_size(); }
  [[nodiscard]] int absorbed(int r) const { return m->absorbed(r); }
  [[nodiscard]] int receptive_field() const { return m->receptive_field(); }
  void reset(int r) { m->reset(r); }
  void step(int r, std::int32_t tok, int pos, bool commit, std::span<T> logits) {
    spec_tokens += commit ? 0 : 1;
    m->step(r, tok, pos, commit, logits);
  }
  void discard_speculation(int r) { m->discard_speculation(r); }
  void step_tree(int r, std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                 std::span<const std::int32_t> positions, std::span<T> logits)
    requires Tree
  {
    spec_tokens += static_cast<long long>(tokens.size());
    m->step_tree(r, tokens, parents, positions, logits);
  }
};
static_assert(tree_draft_model<counting_draft<double, true>>);
static_assert(!tree_draft_model<counting_draft<double, false>> && incremental_draft_model<counting_draft<double, false>>);

// Equal for a double model, within float rounding for a float one.
template <class Model, class T>
bool close(T a, T b) {
  if constexpr (std::is_same_v<Model, double>) return a == b;
  else return std::abs(a - b) <= T(1e-4) * (1 + std::abs(b));
}
longspec_draft_config draft_config(int layers, int window) {
  return {.layers = layers, .window = window, .layer_map = glide_layer_map(cfg().layers, layers)};
}

// A target of the given seed with `context` tokens prefilled, plus two draft models of it.
template <class T>
struct setup {
  llama_weights<double> wd;
  llama_model<T> target;
  longspec_draft_config dc;
  longspec_draft_model<T> a, b;
  std::vector<std::int32_t> prompt;
  setup(std::uint64_t seed, int window, int layers, int context, int capacity = 512)
      : wd(random_llama_weights<double>(cfg(), seed)), target(cfg(), convert<T>(wd), 2, capacity),
        dc(draft_config(layers, window)),
        a(target, dc, derive_longspec_draft(convert<T>(wd), dc)), b(target, dc, derive_longspec_draft(convert<T>(wd), dc)) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    prompt.resize(static_cast<std::size_t>(context));
    for (auto& t : prompt) t = static_cast<std::int32_t>(rng() % static_cast<unsigned>(cfg().vocab_size));
    // the target has seen all but the last token (the root), as after a decoding step
    target.prefill(1, std::span<const std::int32_t>(prompt).first(prompt.size() - 1));
  }
};
}  // namespace

TEMPLATE_TEST_CASE("LongSpec draft: step_tree rows equal step() along each root path", "[longspec][tree]", double, float) {
  using T = TestType;
  setup<T> s(5, 8, 2, 30);
  const int V = cfg().vocab_size, L = 30;
  for (int p = 0; p < L; ++p) {
    s.a.step(1, s.prompt[static_cast<std::size_t>(p)], p, true, {});
    s.b.step(1, s.prompt[static_cast<std::size_t>(p)], p, true, {});
  }
  // A random tree of 40 nodes (parent < child), depths up to ~10 (> window 8).
  std::mt19937 rng(9);
  std::vector<std::int32_t> tok(40), par(40), depth(40), pos(40);
  for (int i = 0; i < 40; ++i) {
    tok[i] = static_cast<std::int32_t>(rng() % static_cast<unsigned>(V));
    par[i] = i == 0 ? -1 : static_cast<std::int32_t>(static_cast<int>(rng() % static_cast<unsigned>(i + 1)) - 1);
    if (i > 0 && par[i] >= 0 && rng() % 2) par[i] = i - 1;  // long chains too
    depth[i] = par[i] < 0 ? 0 : depth[par[i]] + 1;
    pos[i] = L + depth[i];
  }
  // path-by-path reference rows through step()
  std::vector<T> ref(40 * static_cast<std::size_t>(V));
  for (int i = 0; i < 40; ++i) {
    std::vector<int> path;
    for (int a = i; a >= 0; a = par[a]) path.insert(path.begin(), a);
    s.b.discard_speculation(1);
    for (std::size_t d = 0; d < path.size(); ++d)
      s.b.step(1, tok[path[d]], L + static_cast<int>(d), false,
               d + 1 == path.size() ? std::span<T>(ref).subspan(static_cast<std::size_t>(i) * V, V) : std::span<T>{});
  }
  auto check_rows = [&](std::span<const T> rows, int from, int count) {
    for (int i = 0; i < count; ++i)
      for (int v = 0; v < V; ++v) {
        const T x = rows[static_cast<std::size_t>(i) * V + v], y = ref[static_cast<std::size_t>(from + i) * V + v];
        INFO("node " << from + i << " token " << v);
        REQUIRE(close<T>(x, y));
      }
  };
  // (1) the whole tree in one call; (2) in three calls of 1, 15 and 24 nodes.
  std::vector<T> rows(40 * static_cast<std::size_t>(V));
  s.a.step_tree(1, tok, par, pos, rows);
  CHECK(s.a.speculative_nodes(1) == 40);
  check_rows(rows, 0, 40);
  s.a.discard_speculation(1);
  const std::span<const std::int32_t> ts(tok), ps(par), qs(pos);
  for (auto [from, count] : {std::pair{0, 1}, std::pair{1, 15}, std::pair{16, 24}}) {
    const auto f = static_cast<std::size_t>(from), c = static_cast<std::size_t>(count);
    s.a.step_tree(1, ts.subspan(f, c), ps.subspan(f, c), qs.subspan(f, c), std::span<T>(rows).first(c * V));
    check_rows(rows, from, count);
  }
  // step() after step_tree extends the newest node; the committed state is untouched by speculation.
  std::vector<T> after(static_cast<std::size_t>(V)), fresh(static_cast<std::size_t>(V));
  s.a.step(1, 3, L + depth[39] + 1, false, after);
  s.a.discard_speculation(1);
  s.b.discard_speculation(1);
  s.a.step(1, 7, L, true, after);
  s.b.step(1, 7, L, true, fresh);
  for (int v = 0; v < V; ++v) REQUIRE(after[v] == fresh[v]);
  // Validation names the argument and leaves the speculation as it was.
  const std::int32_t t1[1] = {1}, bad_parent[1] = {2}, root[1] = {-1}, p_bad[1] = {L + 5}, p_ok[1] = {L + 1};
  REQUIRE_THROWS_WITH(s.a.step_tree(1, t1, bad_parent, p_ok, {}), Catch::Contains("'parents[i]'"));
  REQUIRE_THROWS_WITH(s.a.step_tree(1, t1, root, p_bad, {}), Catch::Contains("'positions[i]'"));
  REQUIRE_THROWS_WITH(s.a.step_tree(1, t1, root, std::span<const std::int32_t>{}, {}), Catch::Contains("'positions.size()'"));
  REQUIRE_THROWS_WITH(s.a.step_tree(1, t1, root, p_ok, std::span<T>(after).first(3)), Catch::Contains("'logits.size()'"));
  CHECK(s.a.speculative_nodes(1) == 0);
}

TEMPLATE_TEST_CASE("LongSpec beam drafter: step_tree proposes what the path-by-path fallback proposes", "[longspec][tree]",
                   double, float) {
  using T = TestType;
  const std::vector<std::vector<int>> shapes{{4, 16, 16, 16, 16}, {2, 3, 3}, {1, 2, 1, 3, 2, 2, 2, 2, 2, 2}};
  int compared = 0;
  for (std::uint64_t seed : {1u, 2u, 3u})
    for (int window : {8, 32})
      for (int layers : {1, 2})
        for (const auto& widths : shapes) {
          const int context = 10 + static_cast<int>(seed) * 17;
          setup<T> s(seed, window, layers, context);
          counting_draft<T, true> ct{&s.a};
          counting_draft<T, false> cf{&s.b};
          longspec_drafter<counting_draft<T, true>> tree_d(ct, widths);
          longspec_drafter<counting_draft<T, false>> path_d(cf, widths);
          std::vector<std::int32_t> tokens = s.prompt;
          draft_candidates x, y;
          for (int round = 0; round < 3; ++round) {  // the committed text grows between proposals
            const draft_request req{.request = 1, .tokens = tokens, .depth = static_cast<int>(widths.size())};
            ct.spec_tokens = cf.spec_tokens = 0;
            tree_d.propose(req, x);
            path_d.propose(req, y);
            INFO("seed " << seed << " window " << window << " layers " << layers << " widths " << widths.size() << " round " << round);
            const auto same = [](const std::vector<draft_token>& a, const std::vector<draft_token>& b) {
              if (a.size() != b.size()) return false;
              for (std::size_t i = 0; i < a.size(); ++i)
                if (a[i].token != b[i].token || !close<T>(a[i].logprob, b[i].logprob)) return false;
              return true;
            };
            REQUIRE(same(x.chain, y.chain));
            REQUIRE(x.sequences.size() == y.sequences.size());
            for (std::size_t q = 0; q < x.sequences.size(); ++q) REQUIRE(same(x.sequences[q], y.sequences[q]));
            // draft tokens: each frontier node once (all widths but the last) vs its whole root path
            long long once = 0, paths = 0;
            for (std::size_t k = 0; k + 1 < widths.size(); ++k) once += widths[k];
            for (std::size_t k = 0; k + 1 < widths.size(); ++k) paths += static_cast<long long>(widths[k]) * static_cast<long long>(k + 1);
            CHECK(ct.spec_tokens <= once);
            CHECK(cf.spec_tokens <= paths);
            CHECK(ct.spec_tokens < cf.spec_tokens);
            if (seed == 1 && window == 8 && layers == 1 && round == 0)
              std::printf("beam %zu levels: %lld draft tokens per proposal with step_tree, %lld path by path\n", widths.size(),
                          ct.spec_tokens, cf.spec_tokens);
            ++compared;
            for (int k = 0; k < 1 + round; ++k) tokens.push_back(x.chain[static_cast<std::size_t>(k)].token);
          }
        }
  CHECK(compared == 3 * 2 * 2 * 3 * 3);
}

TEST_CASE("LongSpec beam drafter with a node budget proposes the full beam tree's best nodes", "[longspec][tree]") {
  using T = double;
  // token path -> cumulative log-probability of every node of a proposal (chain and sequences share prefixes)
  const auto nodes_of = [](const draft_candidates& c) {
    std::map<std::vector<std::int32_t>, double> out;
    const auto add = [&](const std::vector<draft_token>& seq) {
      std::vector<std::int32_t> path;
      double score = 0;
      for (const auto& t : seq) {
        path.push_back(t.token);
        score += t.logprob;
        out.emplace(path, score);
      }
    };
    add(c.chain);
    for (const auto& s : c.sequences) add(s);
    return out;
  };
  int compared = 0;
  for (std::uint64_t seed : {1u, 2u, 3u})
    for (const int budget : {1, 5, 12, 30}) {
      setup<T> s(seed, 16, 1, 20);
      counting_draft<T, true> full_model{&s.a}, budget_model{&s.b};
      const std::vector<int> widths{4, 16, 16, 16, 16};
      longspec_drafter<counting_draft<T, true>> full(full_model, widths);
      longspec_drafter<counting_draft<T, true>> capped(budget_model, beam_tree_params{widths, budget});
      const draft_request req{.request = 1, .tokens = s.prompt, .depth = 5};
      draft_candidates a, b;
      full.propose(req, a);
      capped.propose(req, b);
      const auto all = nodes_of(a), kept = nodes_of(b);
      INFO("seed " << seed << " budget " << budget);
      REQUIRE(kept.size() == std::min<std::size_t>(all.size(), static_cast<std::size_t>(budget)));
      // every kept node is a node of the full tree with the same score, and none scores below a dropped one
      // (a child never scores above its parent, so the best `budget` nodes are ancestor-closed)
      double worst_kept = 0, best_dropped = -std::numeric_limits<double>::infinity();
      for (const auto& [path, score] : kept) {
        const auto it = all.find(path);
        REQUIRE(it != all.end());
        CHECK(close<T>(it->second, score));
        worst_kept = std::min(worst_kept, score);
      }
      for (const auto& [path, score] : all)
        if (!kept.contains(path)) best_dropped = std::max(best_dropped, score);
      CHECK(worst_kept >= best_dropped - 1e-9);
      ++compared;
    }
  CHECK(compared == 12);
  setup<T> s(1, 16, 1, 20);
  counting_draft<T, true> m{&s.a};
  using drafter_t = longspec_drafter<counting_draft<T, true>>;
  CHECK_THROWS_AS(drafter_t(m, beam_tree_params{{}, 4}), specdec::invalid_argument);
  // every level's width is checked when the drafter is made, also those a capped step never drafts
  CHECK_THROWS_WITH(drafter_t(m, beam_tree_params{{4, 16, 0}, 4}), Catch::Contains("params.beam_widths[2]"));
  CHECK_THROWS_WITH(drafter_t(m, std::vector<int>{4, beam_tree_params::max_width + 1}), Catch::Contains("params.beam_widths[1]"));
  CHECK_THROWS_WITH(drafter_t(m, beam_tree_params{{4, 16}, -1}), Catch::Contains("params.max_nodes"));
}

TEST_CASE("LongSpec beam drafter: req.depth caps the levels (a shallower beam, as adaptive depth plans it)",
          "[longspec][tree]") {
  using T = double;
  const std::vector<int> widths{4, 16, 16, 16, 16};
  int compared = 0;
  for (std::uint64_t seed : {1u, 2u})
    for (const int budget : {0, 12})
      for (const int depth : {1, 2, 3, 5, 7}) {
        setup<T> s(seed, 16, 1, 20);
        counting_draft<T, true> full_model{&s.a}, short_model{&s.b};
        const auto levels = static_cast<std::size_t>(std::min<int>(depth, static_cast<int>(widths.size())));
        const std::vector<int> first(widths.begin(), widths.begin() + static_cast<std::ptrdiff_t>(levels));
        longspec_drafter<counting_draft<T, true>> capped(full_model, beam_tree_params{widths, budget});
        longspec_drafter<counting_draft<T, true>> shallow(short_model, beam_tree_params{first, budget});
        draft_candidates a, b;
        capped.propose({.request = 1, .tokens = s.prompt, .depth = depth}, a);
        shallow.propose({.request = 1, .tokens = s.prompt, .depth = static_cast<int>(levels)}, b);
        INFO("seed " << seed << " budget " << budget << " depth " << depth);
        CHECK(a.chain == b.chain);
        CHECK(a.sequences == b.sequences);
        // the chain is the deepest best path: the beam's last level, unless the budget cut it off
        if (budget == 0) CHECK(a.chain.size() == levels);
        CHECK(a.chain.size() <= levels);
        for (const auto& q : a.sequences) CHECK(q.size() <= levels);
        CHECK(full_model.spec_tokens == short_model.spec_tokens);  // the levels not drafted cost nothing
        ++compared;
      }
  CHECK(compared == 2 * 2 * 5);
}
