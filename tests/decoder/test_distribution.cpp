// Sampling losslessness: for each sampling combination (drafter x tree builder x verifier), the joint
// distribution of the first two generated tokens over many seeded runs matches the small-vocabulary
// model's exact autoregressive distribution (after the same logits processing): chi-square test at
// p = 0.001 with fixed seeds. A negative control shows the test rejects a wrong distribution.
#include "distribution_util.hpp"

using namespace distribution;

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

TEST_CASE("the chi-square check rejects a wrong distribution (negative control)", "[decoder][distribution]") {
  llama_model<double> target(cfg, weights(), 1, 64);
  speculative_decoder<llama_model<double>, ngram_drafter, trie_tree_builder, sample_and_match_verifier> a(target);
  const auto counts = sample_counts(a);
  std::vector<double> uniform(V * V, 1.0 / (V * V));
  const auto [stat, crit] = chi_square(counts, uniform, runs);
  CHECK(stat > crit);
}
