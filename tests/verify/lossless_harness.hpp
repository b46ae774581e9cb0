#pragma once
// Harness for the losslessness tests: a toy "language model" pair (target p and draft q) whose next-token
// distribution is a fixed pseudo-random function of the whole context, tree builders (random shapes,
// deterministic top-k trees, children drawn from q with or without replacement), a decode loop that runs
// verification steps until K tokens are emitted, and the exact joint law of the first K target tokens by
// enumeration. Each trial is one independent generation from the empty context; step s of trial t draws
// from philox_stream(seed, stream_id(t, s)) as the decoder would (request = trial, step = step).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <array>
#include <unordered_map>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/verify_result.hpp"
#include "verify/stat_util.hpp"

namespace harness {

using seq = std::vector<std::int32_t>;

struct toy_model {
  toy_model(int v, std::uint64_t t, int z, bool sh) : vocab(v), tag(t), zeros(z), sharp(sh) {
    if (v > 16) throw std::invalid_argument("toy_model: vocab <= 16");
  }
  int vocab = 8;
  std::uint64_t tag = 1;     // different tags = different models
  int zeros = 1;             // tokens forced to probability 0 per context
  bool sharp = false;        // square the weights for a peakier distribution

  // Context hashing is incremental (FNV-1a over token + 1, then mixed with the length), so tree nodes
  // extend their parent's state instead of rebuilding their context.
  static constexpr std::uint64_t fnv_prime = 1099511628211ull;
  std::uint64_t start() const noexcept { return 1469598103934665603ull ^ tag; }
  static std::uint64_t extend(std::uint64_t h, std::int32_t tok) noexcept {
    return (h ^ static_cast<std::uint64_t>(tok + 1)) * fnv_prime;
  }
  std::uint64_t state(const std::int32_t* ctx, std::size_t len) const noexcept {
    std::uint64_t h = start();
    for (std::size_t i = 0; i < len; ++i) h = extend(h, ctx[i]);
    return h;
  }
  // p(. | context) for a context with hash state h and length len; memoised (the trees revisit the same
  // short contexts constantly, and this keeps the trial loop lean under ASan).
  const float* dist_at(std::uint64_t h, std::size_t len) const {
    const std::uint64_t key = h ^ (len * 0x9E3779B97F4A7C15ull);
    auto [it, fresh] = memo_.try_emplace(key);
    if (fresh) compute(key, it->second.data());
    return it->second.data();
  }
  // p(. | context) into out[0..vocab). Deterministic in (tag, context).
  void dist(const std::int32_t* ctx, std::size_t len, float* out) const {
    std::copy_n(dist_at(state(ctx, len), len), vocab, out);
  }
  void compute(std::uint64_t h, float* out) const {
    specdec::philox_stream rng(h, tag);
    double w[64];
    double s = 0.0;
    for (int i = 0; i < vocab; ++i) {
      double x = -std::log(1.0 - rng.uniform_double());
      if (sharp) x = x * x * x;
      w[i] = x;
    }
    for (int z = 0; z < zeros; ++z) w[rng.below(static_cast<std::uint32_t>(vocab))] = 0.0;
    for (int i = 0; i < vocab; ++i) s += w[i];
    if (s <= 0.0) {
      w[0] = 1.0;
      s = 1.0;
    }
    for (int i = 0; i < vocab; ++i) out[i] = static_cast<float>(w[i] / s);
  }
  mutable std::unordered_map<std::uint64_t, std::array<float, 16>> memo_;
  std::vector<float> dist(const seq& ctx) const {
    std::vector<float> o(static_cast<std::size_t>(vocab));
    dist(ctx.data(), ctx.size(), o.data());
    return o;
  }
};

// Rows [n+1, V] of model m for a tree under `prefix`: row 0 at the root, row i+1 after node i.
inline void fill_rows(const toy_model& m, const seq& prefix, const specdec::token_tree& t, std::vector<float>& rows) {
  const int v = m.vocab, n = t.size();
  rows.resize(static_cast<std::size_t>((n + 1) * v));
  thread_local std::vector<std::uint64_t> h;
  h.resize(static_cast<std::size_t>(n));
  const std::uint64_t h0 = m.state(prefix.data(), prefix.size());
  std::copy_n(m.dist_at(h0, prefix.size()), v, rows.data());
  const auto par = t.parents();
  const auto tok = t.tokens();
  const auto dep = t.depths();
  for (int i = 0; i < n; ++i) {
    h[i] = toy_model::extend(par[i] < 0 ? h0 : h[par[i]], tok[i]);
    std::copy_n(m.dist_at(h[i], prefix.size() + static_cast<std::size_t>(dep[i]) + 1), v,
                rows.data() + static_cast<std::size_t>((i + 1) * v));
  }
}

inline std::int32_t draw(const float* p, int v, specdec::philox_stream& rng, double mass = 1.0) {
  double u = rng.uniform_double() * mass, c = 0.0;
  std::int32_t last = 0;
  for (int i = 0; i < v; ++i) {
    if (p[i] > 0.0f) last = i;
    c += p[i];
    if (u < c && p[i] > 0.0f) return i;
  }
  return last;
}

// A tree whose node at depth d gets branching[d] children drawn from the draft q (given the node's
// context), i.i.d. (with replacement) or sequentially excluding earlier siblings (without). Built level
// by level so every node's children are consecutive in index order = draw order.
inline void drawn_tree(specdec::token_tree& t, const toy_model& q, const seq& prefix, const std::vector<int>& branching,
                       bool with_replacement, specdec::philox_stream& rng) {
  t.clear();
  struct item { std::int32_t node; std::uint64_t h; };
  thread_local std::vector<item> frontier, next;
  frontier.assign(1, item{-1, q.state(prefix.data(), prefix.size())});
  float qd[16];
  for (std::size_t d = 0; d < branching.size(); ++d) {
    next.clear();
    for (const auto& it : frontier) {
      std::copy_n(q.dist_at(it.h, prefix.size() + d), q.vocab, qd);
      for (int c = 0; c < branching[d]; ++c) {
        double mass = 0.0;
        for (int i = 0; i < q.vocab; ++i) mass += qd[i];
        if (mass <= 1e-12) break;  // without replacement: nothing left to draw
        const auto tok = draw(qd, q.vocab, rng, mass);
        next.push_back(item{t.add(tok, it.node), toy_model::extend(it.h, tok)});
        if (!with_replacement) qd[tok] = 0.0f;
      }
    }
    std::swap(frontier, next);
  }
}
inline specdec::token_tree drawn_tree(const toy_model& q, const seq& prefix, const std::vector<int>& branching,
                                      bool with_replacement, specdec::philox_stream& rng) {
  specdec::token_tree t;
  drawn_tree(t, q, prefix, branching, with_replacement, rng);
  return t;
}

// Deterministic top-k tree (Cartesian/beam-like): node at depth d gets the branching[d] most likely draft
// tokens (ties: lower id) as children.
inline void topk_tree(specdec::token_tree& t, const toy_model& q, const seq& prefix, const std::vector<int>& branching) {
  t.clear();
  struct item { std::int32_t node; std::uint64_t h; };
  thread_local std::vector<item> frontier, next;
  frontier.assign(1, item{-1, q.state(prefix.data(), prefix.size())});
  for (std::size_t d = 0; d < branching.size(); ++d) {
    next.clear();
    for (const auto& it : frontier) {
      const float* qd = q.dist_at(it.h, prefix.size() + d);
      std::int32_t ids[16];
      for (int i = 0; i < q.vocab; ++i) ids[i] = i;
      std::stable_sort(ids, ids + q.vocab, [&](int a, int c) { return qd[a] > qd[c]; });
      for (int c = 0; c < branching[d] && c < q.vocab; ++c)
        next.push_back(item{t.add(ids[c], it.node), toy_model::extend(it.h, ids[c])});
    }
    std::swap(frontier, next);
  }
}
inline specdec::token_tree topk_tree(const toy_model& q, const seq& prefix, const std::vector<int>& branching) {
  specdec::token_tree t;
  topk_tree(t, q, prefix, branching);
  return t;
}

// Arbitrary random tree: n nodes, random parents, random tokens (duplicates among siblings allowed).
inline void random_tree(specdec::token_tree& t, int n, int vocab, specdec::philox_stream& rng) {
  t.clear();
  for (int i = 0; i < n; ++i) {
    const int parent = static_cast<int>(rng.below(static_cast<std::uint32_t>(i + 1))) - 1;
    t.add(static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(vocab))), parent);
  }
}
inline specdec::token_tree random_tree(int n, int vocab, specdec::philox_stream& rng) {
  specdec::token_tree t;
  random_tree(t, n, vocab, rng);
  return t;
}

// One verification step: given the generated prefix and the step's RNG, build a tree and verify it,
// returning the result and the tree (to map accepted nodes to tokens).
using step_fn = std::function<specdec::verify_result(const seq& prefix, specdec::philox_stream& rng,
                                                    specdec::token_tree& tree_out)>;

struct run_stats {
  std::map<seq, std::int64_t> counts;  // first K emitted tokens
  std::int64_t steps = 0;
  std::int64_t emitted = 0;
};

// Runs `trials` independent generations of at least K tokens each and counts the first K (tokens must
// be < 16; counted in a flat array, converted to the map form at the end).
inline run_stats run(const step_fn& step, int k, std::int64_t trials, std::uint64_t seed) {
  run_stats st;
  specdec::token_tree tree;
  std::vector<std::int64_t> flat(std::size_t{1} << (4 * k), 0);
  seq out;
  out.reserve(64);
  for (std::int64_t t = 0; t < trials; ++t) {
    out.clear();
    for (std::uint32_t s = 0; static_cast<int>(out.size()) < k; ++s) {
      specdec::philox_stream rng(seed, specdec::stream_id(static_cast<std::uint32_t>(t), s));
      const auto res = step(out, rng, tree);
      for (auto a : res.accepted) out.push_back(tree.token(a));
      out.push_back(res.bonus);
      ++st.steps;
      st.emitted += static_cast<std::int64_t>(res.accepted.size()) + 1;
    }
    std::size_t key = 0;
    for (int i = 0; i < k; ++i) key = (key << 4) | static_cast<std::size_t>(out[static_cast<std::size_t>(i)]);
    ++flat[key];
  }
  for (std::size_t key = 0; key < flat.size(); ++key) {
    if (!flat[key]) continue;
    seq s(static_cast<std::size_t>(k));
    for (int i = k - 1; i >= 0; --i) s[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((key >> (4 * (k - 1 - i))) & 15u);
    st.counts[s] = flat[key];
  }
  return st;
}

// Exact joint law of the first K tokens of autoregressive sampling from model p.
inline std::map<seq, double> exact_joint(const toy_model& p, int k) {
  std::map<seq, double> out;
  std::function<void(seq&, double)> rec = [&](seq& ctx, double mass) {
    if (static_cast<int>(ctx.size()) == k) {
      out[ctx] = mass;
      return;
    }
    const auto d = p.dist(ctx);
    for (int y = 0; y < p.vocab; ++y) {
      if (d[static_cast<std::size_t>(y)] <= 0.0f) continue;
      ctx.push_back(y);
      rec(ctx, mass * d[static_cast<std::size_t>(y)]);
      ctx.pop_back();
    }
  };
  seq ctx;
  rec(ctx, 1.0);
  return out;
}

inline stat::chi2_result check(const run_stats& st, const toy_model& p, int k, std::int64_t trials) {
  return stat::chi_square(st.counts, exact_joint(p, k), trials);
}

// 2-D row-major view helper.
inline specdec::strided_view<const float, 2> rows_view(const std::vector<float>& rows, int n_plus_1, int v) {
  return specdec::make_view<2>(rows.data(), {n_plus_1, v});
}

}  // namespace harness
