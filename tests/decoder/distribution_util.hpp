#pragma once
// Shared machinery of the decoder's sampling-distribution tests (test_distribution*.cpp): a 6-token
// model, the exact joint law of its first two sampled tokens, a chi-square check at p = 0.001, and the
// model drafters the combinations use.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>

#include "../../examples/common/longspec_draft.hpp"
#include "../../examples/common/tokenswift_draft.hpp"
#include "specdec/decoder/speculative_decoder.hpp"

namespace distribution {
using namespace specdec;            // scoped here, not global: the test bundles pre-include this header
using namespace specdec::examples;  // at file scope for every file of a bundle
inline constexpr int V = 6;
#ifdef SPECDEC_TEST_SANITIZED
// The -O0 sanitizer build looks for memory errors and undefined behaviour; the statistical power is
// the Release build's (3000 runs). 1000 runs keep every path and still reject the negative control.
inline constexpr int runs = 1000;
#else
inline constexpr int runs = 3000;
#endif
inline const llama_config cfg{.vocab_size = V, .hidden = 16, .layers = 2, .heads = 1, .kv_heads = 1, .head_dim = 64, .ffn_hidden = 16};
inline const std::vector<std::int32_t> prompt{1, 2, 3, 1, 2, 3, 4, 1, 2};
inline const sampling_params params{.temperature = 0.9f, .top_k = 5};

inline const llama_weights<double>& weights() {
  static const auto w = random_llama_weights<double>(cfg, 5, {.block_scale = 1.0, .logit_scale = 2.0});
  return w;
}

// Exact P(t1, t2) of autoregressive sampling with `params`.
inline std::vector<double> exact_joint() {
  llama_model<double> m(cfg, weights(), 1, 64);
  auto probs = [&](std::vector<std::int32_t> ctx) {
    m.prefill(0, ctx);
    std::vector<double> l(V);
    m.forward(0, ctx.back(), token_tree{}, l);
    std::vector<float> f(l.begin(), l.end());
    sampling_workspace ws;
    process_logits(f, params, ctx, ws);
    double mx = -INFINITY, s = 0;
    for (float x : f) mx = std::max(mx, static_cast<double>(x));
    std::vector<double> p(V);
    for (int v = 0; v < V; ++v) s += p[v] = std::isinf(f[v]) ? 0.0 : std::exp(f[v] - mx);
    for (auto& x : p) x /= s;
    return p;
  };
  const auto p1 = probs(prompt);
  std::vector<double> joint(V * V);
  for (int a = 0; a < V; ++a) {
    auto ctx = prompt;
    ctx.push_back(a);
    const auto p2 = probs(ctx);
    for (int b = 0; b < V; ++b) joint[a * V + b] = p1[a] * p2[b];
  }
  return joint;
}

// Pearson chi-square with cells of expectation < 5 pooled; returns {statistic, critical value at 0.001}.
inline std::pair<double, double> chi_square(const std::vector<int>& counts, const std::vector<double>& p, int n) {
  double stat = 0, pooled_e = 0, pooled_o = 0;
  int cells = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double e = p[i] * n;
    if (e < 5) {
      pooled_e += e, pooled_o += counts[i];
      continue;
    }
    stat += (counts[i] - e) * (counts[i] - e) / e, ++cells;
  }
  if (pooled_e > 0) stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / std::max(pooled_e, 1e-9), ++cells;
  const double df = cells - 1, z = 3.090;  // Wilson-Hilferty
  return {stat, df * std::pow(1 - 2 / (9 * df) + z * std::sqrt(2 / (9 * df)), 3)};
}

//! width: alternatives per depth the model drafters keep (cartesian and CAPE trees use them).
//! adaptive: generation_options::adaptive_depth (the caller sets the batch's cost curve and options).
template <class Decoder>
std::vector<int> sample_counts(Decoder& dec, int width = 2, bool adaptive = false) {
  std::vector<int> counts(V * V, 0);
  for (int i = 0; i < runs; ++i) {
    const auto out = dec.generate(prompt, {.max_new_tokens = 3, .sampling = params, .seed = 1000u + i, .draft_depth = 3,
                                           .draft_width = width, .adaptive_depth = adaptive});
    REQUIRE(out.tokens.size() == 3);
    ++counts[out.tokens[0] * V + out.tokens[1]];
  }
  return counts;
}

//! LongSpec draft over `target` (window 8) and a 1-layer chain-drafter model sharing the target's first
//! layer; both must outlive the decoders built on them.
struct drafters {
  longspec_draft_config dc = window_8();
  longspec_draft_model<double> longspec;
  llama_model<double> small;
  explicit drafters(llama_model<double>& target)
      : longspec(target, dc, derive_longspec_draft(weights(), dc)), small(one_layer_config(), one_layer_weights(), 1, 64) {}
  static longspec_draft_config window_8() {
    longspec_draft_config c;
    c.window = 8;
    return c;
  }
  static llama_config one_layer_config() {
    auto c = cfg;
    c.layers = 1;
    return c;
  }
  static llama_weights<double> one_layer_weights() {
    auto w = weights();
    w.layers.resize(1);
    return w;
  }
};

template <class Decoder>
void check(Decoder& dec, const char* name, int width = 2, bool adaptive = false) {
  static const auto joint = exact_joint();
  const auto counts = sample_counts(dec, width, adaptive);
  const auto [stat, crit] = chi_square(counts, joint, runs);
  INFO(name << ": chi2 " << stat << " critical " << crit << " tau " << dec.stats().tau());
  CHECK(stat < crit);
  CHECK(dec.stats().accepted > 0);  // drafts were accepted, so the speculative paths were exercised
}
}  // namespace distribution
