// Fuzz targets for the tree builders: LongSpec's beam tree (tree/beam_tree_builder.hpp, checked
// against a naive re-derivation of its documented rule), GLIDE's CAPE (tree/cape.hpp) and the
// decoder's tree-builder policies (decoder/tree_builders.hpp), each built twice to catch state that
// leaks from one build into the next.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "specdec/decoder/tree_builders.hpp"
#include "specdec/tree/beam_tree_builder.hpp"
#include "specdec/tree/cape.hpp"
#include "specdec/tree/prune.hpp"

namespace {
using specdec::token_tree;
using specdec_fuzz::input;
using specdec_fuzz::list;
constexpr float ninf = -std::numeric_limits<float>::infinity();

//! "token/parent/logprob ..." of every node, for finding messages.
std::string describe(const token_tree& t) {
  std::string s = "{";
  for (int i = 0; i < t.size(); ++i)
    s += (i ? ", " : "") + std::to_string(t.token(i)) + "/" + std::to_string(t.parent(i)) + "/" + specdec_fuzz::num(t.logprob(i));
  return s + "}";
}

//! No two children of one node carry the same token.
void check_distinct_siblings(const token_tree& t, const std::string& who) {
  std::set<std::pair<std::int32_t, std::int32_t>> sib;
  for (int i = 0; i < t.size(); ++i) FUZZ_CHECK(sib.emplace(t.parent(i), t.token(i)).second, who + ": duplicate siblings");
}

//! beam_tree_builder's rule (file comment of beam_tree_builder.hpp) re-derived naively from the rows
//! the builder asked for: per step the w_k best (score desc, frontier row asc, token asc) children.
//! `exact` turns false when float rounding makes two different log-probs of one row give the same
//! score (score(f) + lp absorbs lp): the builder then ranks by log-prob, the rule by token id.
token_tree naive_beam(const std::vector<int>& widths, int vocab, const std::vector<std::vector<float>>& rows_per_step,
                      const std::vector<std::vector<std::int32_t>>& frontier_per_step, bool& exact) {
  exact = true;
  token_tree t;
  std::vector<std::int32_t> frontier{-1};
  for (std::size_t step = 0; step < widths.size() && !frontier.empty(); ++step) {
    if (step >= rows_per_step.size()) break;  // the builder stopped early (budget): no rows, no candidates
    FUZZ_CHECK(frontier == frontier_per_step[step], "beam: frontier of step " + std::to_string(step) + " is " +
                                                   list(frontier_per_step[step]) + ", expected " + list(frontier));
    struct cand {
      float score;
      std::int32_t row, token;
      float lp;
    };
    std::vector<cand> c;
    for (std::size_t r = 0; r < frontier.size(); ++r)
      for (int v = 0; v < vocab; ++v) {
        float lp = rows_per_step[step][r * static_cast<std::size_t>(vocab) + static_cast<std::size_t>(v)];
        if (lp == ninf) continue;
        lp = std::min(lp, 0.0f);
        const float base = frontier[r] < 0 ? 0.0f : t.score(frontier[r]);
        c.push_back({base + lp, static_cast<std::int32_t>(r), v, lp});
      }
    for (const auto& x : c)
      for (const auto& y : c) exact &= !(x.row == y.row && x.lp != y.lp && x.score == y.score);
    if (!exact) return t;
    std::sort(c.begin(), c.end(), [](const cand& a, const cand& b) {
      if (a.score != b.score) return a.score > b.score;
      if (a.row != b.row) return a.row < b.row;
      return a.token < b.token;
    });
    std::vector<std::int32_t> next;
    for (std::size_t j = 0; j < c.size() && j < static_cast<std::size_t>(widths[step]); ++j)
      next.push_back(t.add(c[j].token, frontier[static_cast<std::size_t>(c[j].row)], c[j].lp));
    frontier.swap(next);
  }
  return t;
}
}  // namespace

SPECDEC_FUZZ_TARGET(beam_tree, "beam_tree_builder::build_from_logprobs / build_from_candidates vs the documented rule") {
  input in(data, size);
  specdec::beam_tree_params params;
  params.beam_widths = in.many(static_cast<std::size_t>(in.range(0, 5)), [&] { return in.int32(1, 6); });
  params.max_nodes = in.int32(0, 30);
  specdec::beam_tree_builder builder(params);
  // build() reserves sum(widths) nodes and frontier x width candidate slots per step up front,
  // whatever the vocabulary or the node budget allows
  // widths up to 2^20 are fine but slow to fuzz; 64 covers the logic
  if (std::any_of(params.beam_widths.begin(), params.beam_widths.end(), [](int w) { return w > 64 && w <= (1 << 20); })) return;
  const bool dense = in.coin();
  const int vocab = dense ? in.range(1, 16) : in.int32(0, 16);
  std::vector<std::vector<float>> rows_per_step;
  std::vector<std::vector<std::int32_t>> frontier_per_step;
  bool bad_value = false;  // NaN or a log-prob above the 1e-3 rounding allowance
  bool rounding = false;   // a value in (0, 1e-3], read as 0
  token_tree t;
  if (dense) {
    t = builder.build_from_logprobs(vocab, [&](const token_tree& so_far, std::span<const std::int32_t> frontier,
                                               std::span<float> rows) {
      FUZZ_CHECK(rows.size() == frontier.size() * static_cast<std::size_t>(vocab), "beam: rows.size() != frontier x vocab");
      for (auto f : frontier) FUZZ_CHECK(f >= -1 && f < so_far.size(), "beam: frontier node outside the tree");
      for (float& x : rows) {
        x = in.chance(20) ? ninf : in.logprob();
        bad_value |= std::isnan(x) || x > 1e-3f;
        rounding |= x > 0.0f && x <= 1e-3f;
      }
      rows_per_step.emplace_back(rows.begin(), rows.end());
      frontier_per_step.emplace_back(frontier.begin(), frontier.end());
    });
  } else {
    t = builder.build_from_candidates([&](const token_tree& so_far, std::span<const std::int32_t> frontier, int k,
                                          std::span<std::int32_t> tokens, std::span<float> logprobs) {
      FUZZ_CHECK(tokens.size() == frontier.size() * static_cast<std::size_t>(k) && logprobs.size() == tokens.size(),
            "beam: candidate spans != frontier x k");
      for (auto f : frontier) FUZZ_CHECK(f >= -1 && f < so_far.size(), "beam: frontier node outside the tree");
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (in.chance(70)) tokens[i] = in.token(vocab > 0 ? vocab : 8), logprobs[i] = in.logprob();
        bad_value |= tokens[i] != -1 && (std::isnan(logprobs[i]) || logprobs[i] > 1e-3f);
      }
    });
  }
  // Policy 3: a build that used a NaN log-prob (or one above 0) must have been rejected.
  FUZZ_CHECK(!bad_value, "beam: accepted a NaN or positive log-prob");
  FUZZ_CHECK(t.size() <= builder.max_tree_size(), "beam: more nodes than max_tree_size()");
  std::vector<int> per_depth(params.beam_widths.size(), 0);
  for (int i = 0; i < t.size(); ++i) {
    FUZZ_CHECK(t.depth(i) < static_cast<int>(params.beam_widths.size()), "beam: deeper than the number of steps");
    ++per_depth[static_cast<std::size_t>(t.depth(i))];
    FUZZ_CHECK(t.token(i) >= 0 && (!dense || t.token(i) < vocab), "beam: token outside the vocabulary");
    FUZZ_CHECK(t.logprob(i) <= 0.0f && t.logprob(i) > ninf, "beam: node log-prob not in (-inf, 0]");
  }
  if (params.max_nodes == 0)
    for (std::size_t d = 0; d < per_depth.size(); ++d)
      FUZZ_CHECK(per_depth[d] <= params.beam_widths[d], "beam: step " + std::to_string(d) + " added more than its width");
  check_distinct_siblings(t, "beam");
  if (dense && !rounding) {
    bool exact = true;
    token_tree want = naive_beam(params.beam_widths, vocab, rows_per_step, frontier_per_step, exact);
    if (params.max_nodes > 0 && want.size() > params.max_nodes) want = specdec::keep_best_nodes(want, params.max_nodes);
    if (exact && !specdec_fuzz::same_tree(t, want)) {
      std::string rows;
      for (const auto& r : rows_per_step) {
        rows += "[";
        for (float x : r) rows += specdec_fuzz::num(x) + " ";
        rows += "] ";
      }
      specdec_fuzz::finding("beam: tree differs from the documented rule: widths " + list(params.beam_widths) +
                            ", max_nodes " + std::to_string(params.max_nodes) + ", vocab " + std::to_string(vocab) +
                            ", rows per step " + rows + "; got " + describe(t) + ", expected " + describe(want));
    }
  }
}

namespace {
struct ranked {
  std::int32_t token;
  float logprob;
};

//! A schedule S(p) of each kind; `scale` receives a table's scale (0 for bins).
specdec::cape_schedule fuzz_schedule(input& in, float& scale) {
  scale = 0.0f;
  switch (in.range(0, 3)) {
    case 0: return specdec::cape_schedule::glide_bins();
    case 1: return scale = 10.0f, specdec::cape_schedule::glide_appendix_table();
    case 2: {
      const auto n = static_cast<std::size_t>(in.range(0, 5));
      std::vector<float> bounds = in.many(n, [&] { return in.prob(); });
      std::sort(bounds.begin(), bounds.end());
      if (!bounds.empty() && in.chance(80)) bounds.back() = 1.0f;
      return specdec::cape_schedule::from_bins(bounds, in.many(n, [&] { return in.int32(0, 8); }));
    }
    default: {
      auto entries = in.many(static_cast<std::size_t>(in.range(0, 12)), [&] { return in.int32(0, 8); });
      scale = in.real(0.5f, 20.0f);
      return specdec::cape_schedule::from_table(std::move(entries), scale, in.coin());
    }
  }
}
}  // namespace

SPECDEC_FUZZ_TARGET(cape, "cape_expand / cape_expand_ranked / cape_schedule: proposal, Mask_CAPE == tree mask") {
  input in(data, size);
  float scale = 0.0f;
  const auto schedule = fuzz_schedule(in, scale);
  // expansion_size() casts floor(scale * p) to size_t: undefined past 2^64
  const float p_probe = in.prob();
  if (p_probe > 0.0f && p_probe <= 1.0f) FUZZ_CHECK(schedule.expansion_size(p_probe) >= 0, "cape: negative expansion size");
  int gamma = in.range(0, 6);
  const int max_tokens = in.int32(0, 20);
  specdec::cape_proposal prop;
  std::vector<float> probs;
  int vocab = 0;
  std::vector<std::int32_t> chain;
  std::vector<float> chain_p;                       // p_i of the chain token at each step
  std::vector<std::vector<std::int32_t>> eligible;  // X_i's candidates at each step, best first
  if (in.coin()) {
    vocab = in.int32(1, 10);
    const std::size_t v = static_cast<std::size_t>(std::clamp(vocab, 1, 64));
    probs.resize(static_cast<std::size_t>(gamma) * v + (in.chance(3) ? 1 : 0));
    for (std::size_t r = 0; r * v < probs.size(); ++r) {
      double s = 0;
      const std::size_t end = std::min(probs.size(), (r + 1) * v);
      for (std::size_t i = r * v; i < end; ++i) s += probs[i] = in.chance(30) ? 0.0f : in.prob();
      if (in.chance(90) && s > 0 && std::isfinite(s))
        for (std::size_t i = r * v; i < end; ++i) probs[i] = static_cast<float>(probs[i] / s);
    }
    if (in.coin()) chain = in.many(static_cast<std::size_t>(gamma), [&] { return in.token(vocab); });
    prop = specdec::cape_expand(probs, vocab, chain, schedule, max_tokens);
    gamma = static_cast<int>(probs.size() / static_cast<std::size_t>(vocab));  // one more row when vocab is 1
    const std::size_t stride = static_cast<std::size_t>(vocab);  // the library's row length (vocab may exceed v)
    for (int i = 0; i < gamma; ++i) {
      const std::span<const float> row(probs.data() + static_cast<std::size_t>(i) * stride, stride);
      const auto x = prop.tokens[static_cast<std::size_t>(i)];
      if (chain.empty()) {
        const auto best = std::max_element(row.begin(), row.end()) - row.begin();  // first maximum
        FUZZ_CHECK(x == best, "cape: greedy chain token is not the row's first argmax");
      }
      chain_p.push_back(row[static_cast<std::size_t>(x)]);
      // X_i = the most probable tokens other than x_i with p > 0, ties -> lower id
      std::vector<std::int32_t> e;
      for (std::size_t tok = 0; tok < stride; ++tok)
        if (static_cast<std::int32_t>(tok) != x && row[tok] > 0.0f) e.push_back(static_cast<std::int32_t>(tok));
      std::stable_sort(e.begin(), e.end(), [&](std::int32_t p, std::int32_t q) { return row[static_cast<std::size_t>(p)] > row[static_cast<std::size_t>(q)]; });
      eligible.push_back(e);
    }
  } else {
    std::vector<ranked> ch = in.many(static_cast<std::size_t>(gamma), [&] { return ranked{in.int32(0, 9), in.logprob()}; });
    std::vector<std::vector<ranked>> cands(static_cast<std::size_t>(in.range(0, gamma + 1)));
    for (auto& c : cands) c = in.many(static_cast<std::size_t>(in.range(0, 9)), [&] { return ranked{in.int32(0, 9), in.logprob()}; });
    specdec::cape_expand_ranked<ranked>(ch, cands, schedule, max_tokens, prop);
    for (int i = 0; i < gamma; ++i) {
      const auto& c = ch[static_cast<std::size_t>(i)];
      // p rounding to 0 below exp's range reads as the smallest positive float (cape_expand_ranked's rule)
      chain.push_back(c.token), chain_p.push_back(std::clamp(std::exp(c.logprob), std::numeric_limits<float>::min(), 1.0f));
      // X_i = the first distinct candidates other than x_i with a finite log-prob, in the order given
      // (a token listed twice is one expansion token: duplicate siblings would be one context twice)
      std::vector<std::int32_t> e;
      if (static_cast<std::size_t>(i) < cands.size())
        for (const auto& x : cands[static_cast<std::size_t>(i)])
          if (x.token != c.token && std::isfinite(x.logprob) && std::find(e.begin(), e.end(), x.token) == e.end())
            e.push_back(x.token);
      eligible.push_back(e);
    }
  }
  // Exact expected proposal: chain, then per step min(S(p_i) (capped at V - 1), what is left of
  // max_tokens, eligible tokens) of X_i's candidates in order.
  std::size_t room = max_tokens > 0 ? static_cast<std::size_t>(max_tokens - gamma) : SIZE_MAX;
  std::size_t at = static_cast<std::size_t>(gamma);
  for (int i = 0; i < gamma; ++i) {
    std::size_t k = static_cast<std::size_t>(schedule.expansion_size(chain_p[static_cast<std::size_t>(i)]));
    if (vocab > 0) k = std::min(k, static_cast<std::size_t>(vocab - 1));
    k = std::min({k, room, eligible[static_cast<std::size_t>(i)].size()});
    room -= k;
    FUZZ_CHECK(static_cast<std::size_t>(prop.expansion_sizes[static_cast<std::size_t>(i)]) == k,
          "cape: |X_" + std::to_string(i) + "| = " + std::to_string(prop.expansion_sizes[static_cast<std::size_t>(i)]) +
              ", expected " + std::to_string(k));
    for (std::size_t j = 0; j < k; ++j, ++at)
      FUZZ_CHECK(at < prop.tokens.size() && prop.tokens[at] == eligible[static_cast<std::size_t>(i)][j],
            "cape: X_" + std::to_string(i) + " is not its best candidates in order");
  }
  FUZZ_CHECK(prop.gamma == gamma && prop.size() >= gamma, "cape: chain missing from the proposal (gamma " +
                                                         std::to_string(gamma) + ", proposal " + list(prop.tokens) + ")");
  FUZZ_CHECK(max_tokens == 0 || prop.size() <= max_tokens, "cape: more tokens than max_tokens");
  for (int i = 0; i < gamma; ++i)
    if (!chain.empty()) FUZZ_CHECK(prop.tokens[static_cast<std::size_t>(i)] == chain[static_cast<std::size_t>(i)], "cape: chain changed");
  FUZZ_CHECK(at == prop.tokens.size() && prop.pos.size() == prop.tokens.size() && prop.logprobs.size() == prop.tokens.size(),
        "cape: sizes disagree");
  std::set<std::pair<std::int32_t, std::int32_t>> step_tokens;
  for (int i = 0; i < prop.size(); ++i) {
    const auto step = prop.pos[static_cast<std::size_t>(i)];
    FUZZ_CHECK(i < gamma ? step == i + 1 : step >= 1 && step <= gamma && (i == gamma || step >= prop.pos[static_cast<std::size_t>(i) - 1]),
          "cape: pos out of order");
    FUZZ_CHECK(step_tokens.emplace(step, prop.tokens[static_cast<std::size_t>(i)]).second,
          "cape: token " + std::to_string(prop.tokens[static_cast<std::size_t>(i)]) + " twice in step " + std::to_string(step) +
              " (proposal tokens " + list(prop.tokens) + ", pos " + list(prop.pos) + (vocab > 0 ? ", from rows)" : ", ranked)"));
    if (vocab > 0) {
      const auto tok = prop.tokens[static_cast<std::size_t>(i)];
      FUZZ_CHECK(tok >= 0 && tok < vocab, "cape: token outside the vocabulary");
      FUZZ_CHECK(probs[static_cast<std::size_t>(step - 1) * static_cast<std::size_t>(vocab) + static_cast<std::size_t>(tok)] > 0.0f,
            "cape: a zero-probability token in the proposal");
    }
  }
  const token_tree t = prop.tree();
  FUZZ_CHECK(t.size() == prop.size() && t.ancestor_mask() == prop.mask(), "cape: tree().ancestor_mask() != mask() (Mask_CAPE)");
  const std::int32_t committed = in.int32(1, 100);
  // committed_length + pos - 1 must fit int32, or position_ids throws invalid_argument (the
  // harness's accepted outcome); the expected value is computed in int64.
  const auto ids = prop.position_ids(committed);
  for (int i = 0; i < prop.size(); ++i)
    FUZZ_CHECK(std::int64_t{ids[static_cast<std::size_t>(i)]} ==
                   std::int64_t{committed} + prop.pos[static_cast<std::size_t>(i)] - 1,
               "cape: position_ids");
}

namespace {
specdec::draft_candidates fuzz_candidates(input& in) {
  specdec::draft_candidates c;
  const auto tok = [&] { return specdec::draft_token{in.int32(0, 5), in.logprob()}; };
  c.chain = in.many(static_cast<std::size_t>(in.range(0, 8)), tok);
  c.alternatives.resize(static_cast<std::size_t>(in.range(0, 8)));
  for (auto& a : c.alternatives) a = in.many(static_cast<std::size_t>(in.range(0, 5)), tok);
  c.sequences.resize(static_cast<std::size_t>(in.range(0, 5)));
  for (auto& s : c.sequences) s = in.many(static_cast<std::size_t>(in.range(0, 8)), tok);
  return c;
}

std::vector<std::int32_t> tokens_of(const std::vector<specdec::draft_token>& s, std::size_t n) {
  std::vector<std::int32_t> out;
  for (std::size_t i = 0; i < std::min(n, s.size()); ++i) out.push_back(s[i].token);
  return out;
}

//! Builds twice with one builder (candidates a, then b) and checks the second tree equals a fresh
//! builder's tree for b: builders keep scratch between builds, never results.
template <class Make>
token_tree build_checked(Make&& make, const specdec::draft_candidates& a, const specdec::draft_candidates& b,
                         const std::string& who) {
  auto reused = make();
  token_tree t;
  reused.build(a, t);
  reused.build(b, t);
  auto fresh = make();
  token_tree u;
  fresh.build(b, u);
  FUZZ_CHECK(specdec_fuzz::same_tree(t, u), who + ": the second build of a reused builder differs from a fresh builder's");
  check_distinct_siblings(t, who);
  return t;
}
}  // namespace

SPECDEC_FUZZ_TARGET(tree_builders, "decoder tree-builder policies (chain, cartesian, tokenswift, trie, multi_draft, cape)") {
  input in(data, size);
  const int which = in.range(0, 5);
  const auto a = fuzz_candidates(in);
  const auto b = fuzz_candidates(in);
  const int limit = in.int32(0, 12);
  const int limit2 = in.int32(0, 6);
  const auto widths = in.many(static_cast<std::size_t>(in.range(0, 5)), [&] { return in.int32(1, 3); });
  const std::size_t depth_cap = limit > 0 ? static_cast<std::size_t>(limit) : SIZE_MAX;
  if (which == 0) {
    const token_tree t = build_checked([&] { return specdec::chain_tree_builder{limit}; }, a, b, "chain_tree_builder");
    FUZZ_CHECK(std::vector<std::int32_t>(t.tokens().begin(), t.tokens().end()) == tokens_of(b.chain, depth_cap) &&
              (t.empty() || t.leaves().size() == 1),
          "chain_tree_builder: not the chain's first max_depth tokens");
  } else if (which == 1 || which == 2) {
    token_tree t;
    if (which == 1) {
      t = build_checked([&] { return specdec::cartesian_tree_builder(widths); }, a, b, "cartesian_tree_builder");
    } else {
      t = build_checked([&] { return specdec::tokenswift_tree_builder(widths, limit); }, a, b, "tokenswift_tree_builder");
      FUZZ_CHECK(limit <= 0 || t.size() <= limit, "tokenswift_tree_builder: over its node budget");
    }
    for (int i = 0; i < t.size() && which == 1; ++i) {
      const auto d = static_cast<std::size_t>(t.depth(i));
      FUZZ_CHECK(d < widths.size(), "cartesian_tree_builder: deeper than widths");
      bool found = false;
      if (d < b.alternatives.size() && !b.alternatives[d].empty()) {
        // the first widths[d] distinct tokens in rank order (a repeated token counts once)
        std::vector<std::int32_t> distinct;
        for (const auto& x : b.alternatives[d])
          if (distinct.size() < static_cast<std::size_t>(widths[d]) &&
              std::find(distinct.begin(), distinct.end(), x.token) == distinct.end())
            distinct.push_back(x.token);
        found = std::find(distinct.begin(), distinct.end(), t.token(i)) != distinct.end();
      } else {
        found = d < b.chain.size() && b.chain[d].token == t.token(i);
      }
      FUZZ_CHECK(found, "cartesian_tree_builder: a token that is not among depth " + std::to_string(d) + "'s candidates");
    }
  } else if (which == 3) {
    const token_tree t = build_checked([&] { return specdec::trie_tree_builder(limit, limit2); }, a, b, "trie_tree_builder");
    const std::size_t cap = limit2 > 0 ? static_cast<std::size_t>(limit2) : SIZE_MAX;
    std::set<std::vector<std::int32_t>> prefixes;
    auto add = [&](const std::vector<specdec::draft_token>& s) {
      const auto toks = tokens_of(s, cap);
      for (std::size_t len = 1; len <= toks.size(); ++len) prefixes.emplace(toks.begin(), toks.begin() + static_cast<std::ptrdiff_t>(len));
    };
    add(b.chain);
    for (const auto& s : b.sequences) add(s);
    FUZZ_CHECK(limit > 0 ? t.size() <= limit : static_cast<std::size_t>(t.size()) == prefixes.size(),
          "trie_tree_builder: node count");
    for (int i = 0; i < t.size(); ++i) FUZZ_CHECK(prefixes.count(t.path_tokens(i)) == 1, "trie_tree_builder: a path no candidate has");
  } else if (which == 4) {
    const token_tree t = [&] {
      // multi-draft trees may repeat sibling tokens (draws with replacement): no sibling check here
      specdec::multi_draft_tree_builder reused{limit}, fresh{limit};
      token_tree x, y;
      reused.build(a, x);
      reused.build(b, x);
      fresh.build(b, y);
      FUZZ_CHECK(specdec_fuzz::same_tree(x, y), "multi_draft_tree_builder: reused builder differs from a fresh one");
      return x;
    }();
    std::vector<std::int32_t> flat;
    auto add = [&](const std::vector<specdec::draft_token>& s) {
      const auto toks = tokens_of(s, depth_cap);
      flat.insert(flat.end(), toks.begin(), toks.end());
    };
    add(b.chain);
    for (const auto& s : b.sequences) add(s);
    FUZZ_CHECK(std::vector<std::int32_t>(t.tokens().begin(), t.tokens().end()) == flat,
          "multi_draft_tree_builder: nodes are not the drafts in order");
  } else {
    float scale = 0.0f;
    const auto schedule = fuzz_schedule(in, scale);
    const token_tree t = build_checked([&] { return specdec::cape_tree_builder(limit, schedule); }, a, b, "cape_tree_builder");
    FUZZ_CHECK(limit <= 0 || t.size() <= limit, "cape_tree_builder: more than max_tokens nodes");
    const auto chain = tokens_of(b.chain, depth_cap);
    for (std::size_t i = 0; i < chain.size(); ++i)
      FUZZ_CHECK(static_cast<int>(i) < t.size() && t.token(static_cast<int>(i)) == chain[i] &&
                t.parent(static_cast<int>(i)) == static_cast<std::int32_t>(i) - 1,
            "cape_tree_builder: the chain is not the first path");
  }
}
