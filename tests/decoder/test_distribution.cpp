// Sampling losslessness: for each sampling combination (drafter x tree builder x verifier), the joint
// distribution of the first two generated tokens over many seeded runs matches the small-vocabulary
// model's exact autoregressive distribution (after the same logits processing): chi-square test at
// p = 0.001 with fixed seeds. A negative control shows the test rejects a wrong distribution.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>

#include "../../examples/common/longspec_draft.hpp"
#include "specdec/decoder/speculative_decoder.hpp"

using namespace specdec;
using namespace specdec::examples;

namespace {
constexpr int V = 6, runs = 3000;
const llama_config cfg{.vocab_size = V, .hidden = 16, .layers = 2, .heads = 1, .kv_heads = 1, .head_dim = 64, .ffn_hidden = 16};
const std::vector<std::int32_t> prompt{1, 2, 3, 1, 2, 3, 4, 1, 2};
const sampling_params params{.temperature = 0.9f, .top_k = 5};

const llama_weights<double>& weights() {
  static const auto w = random_llama_weights<double>(cfg, 5, {.block_scale = 1.0, .logit_scale = 2.0});
  return w;
}

// Exact P(t1, t2) of autoregressive sampling with `params`.
std::vector<double> exact_joint() {
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
std::pair<double, double> chi_square(const std::vector<int>& counts, const std::vector<double>& p, int n) {
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

template <class Decoder>
std::vector<int> sample_counts(Decoder& dec) {
  std::vector<int> counts(V * V, 0);
  for (int i = 0; i < runs; ++i) {
    const auto out = dec.generate(prompt, {.max_new_tokens = 3, .sampling = params, .seed = 1000u + i, .draft_depth = 3, .draft_width = 2});
    REQUIRE(out.tokens.size() == 3);
    ++counts[out.tokens[0] * V + out.tokens[1]];
  }
  return counts;
}

template <class Decoder>
void check(Decoder& dec, const char* name) {
  static const auto joint = exact_joint();
  const auto counts = sample_counts(dec);
  const auto [stat, crit] = chi_square(counts, joint, runs);
  INFO(name << ": chi2 " << stat << " critical " << crit << " tau " << dec.stats().tau());
  CHECK(stat < crit);
  CHECK(dec.stats().accepted > 0);  // drafts were accepted, so the speculative paths were exercised
}
}  // namespace

TEST_CASE("sampling distribution: ngram drafter with sample_and_match (trie) and chain speculative", "[decoder][distribution]") {
  llama_model<double> target(cfg, weights(), 1, 64);
  speculative_decoder<llama_model<double>, ngram_drafter, trie_tree_builder, sample_and_match_verifier> a(target);
  check(a, "ngram/trie/sample_and_match");
  speculative_decoder<llama_model<double>, ngram_drafter, chain_tree_builder, chain_speculative_verifier> b(target);
  check(b, "ngram/chain/chain_speculative (one-hot q)");
}

TEST_CASE("sampling distribution: LongSpec and chain drafters (sampled q)", "[decoder][distribution]") {
  llama_model<double> target(cfg, weights(), 1, 64);
  longspec_draft_config dc;
  dc.window = 8;
  longspec_draft_model<double> draft(target, dc, derive_longspec_draft(weights(), dc));
  using ls = longspec_drafter<longspec_draft_model<double>>;
  speculative_decoder<llama_model<double>, ls, chain_tree_builder, chain_speculative_verifier> a(target, ls(draft));
  check(a, "longspec/chain/chain_speculative (sampled q)");
  speculative_decoder<llama_model<double>, ls, cartesian_tree_builder, sample_and_match_verifier> b(target, ls(draft));
  check(b, "longspec/cartesian/sample_and_match");
  auto c1 = cfg;
  c1.layers = 1;
  auto w1 = weights();
  w1.layers.resize(1);
  llama_model<double> small(c1, w1, 1, 64);
  speculative_decoder<llama_model<double>, chain_drafter<llama_model<double>>, chain_tree_builder, chain_speculative_verifier> c(
      target, chain_drafter<llama_model<double>>(small));
  check(c, "chain/chain/chain_speculative (sampled q)");
}

TEST_CASE("sampling distribution: multi-draft drafters with multi_draft_verifier (with and without replacement)",
          "[decoder][distribution][multi_draft]") {
  llama_model<double> target(cfg, weights(), 1, 64);
  longspec_draft_config dc;
  dc.window = 8;
  longspec_draft_model<double> draft(target, dc, derive_longspec_draft(weights(), dc));
  using ls = longspec_drafter<longspec_draft_model<double>>;
  using md = speculative_decoder<llama_model<double>, ls, multi_draft_tree_builder, multi_draft_verifier>;
  md a(target, ls(draft, multi_draft_params{.mode = draft_sampling::with_replacement}));
  check(a, "longspec multi-draft (with replacement)/multi_draft_tree/multi_draft");
  md b(target, ls(draft, multi_draft_params{.mode = draft_sampling::without_replacement}));
  check(b, "longspec multi-draft (without replacement)/multi_draft_tree/multi_draft");
  auto c1 = cfg;
  c1.layers = 1;
  auto w1 = weights();
  w1.layers.resize(1);
  llama_model<double> small(c1, w1, 1, 64);
  using cd = chain_drafter<llama_model<double>>;
  speculative_decoder<llama_model<double>, cd, multi_draft_tree_builder, multi_draft_verifier> c(
      target, cd(small, multi_draft_params{.mode = draft_sampling::with_replacement}));
  check(c, "chain multi-draft (with replacement)/multi_draft_tree/multi_draft");
  speculative_decoder<llama_model<double>, cd, multi_draft_tree_builder, sample_and_match_verifier> d(
      target, cd(small, multi_draft_params{.mode = draft_sampling::without_replacement}));
  check(d, "chain multi-draft (without replacement)/multi_draft_tree/sample_and_match");
}

TEST_CASE("the chi-square check rejects a wrong distribution (negative control)", "[decoder][distribution]") {
  llama_model<double> target(cfg, weights(), 1, 64);
  speculative_decoder<llama_model<double>, ngram_drafter, trie_tree_builder, sample_and_match_verifier> a(target);
  const auto counts = sample_counts(a);
  std::vector<double> uniform(V * V, 1.0 / (V * V));
  const auto [stat, crit] = chi_square(counts, uniform, runs);
  CHECK(stat > crit);
}
