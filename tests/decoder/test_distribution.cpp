// Sampling losslessness: for each sampling combination (drafter x tree builder x verifier), the joint
// distribution of the first two generated tokens over many seeded runs matches the small-vocabulary
// model's exact autoregressive distribution (after the same logits processing): chi-square test at
// p = 0.001 with fixed seeds. A negative control shows the test rejects a wrong distribution.
// This file: the n-gram drafter (one-hot q) with every tree builder and verifier that accepts it.
// test_distribution_models.cpp: the model drafters; test_distribution_multi_draft.cpp: multi-draft.
#include "distribution_util.hpp"

using namespace specdec;
using namespace specdec::examples;
using namespace distribution;

TEST_CASE("sampling distribution: ngram drafter with every sampling verifier", "[decoder][distribution]") {
  llama_model<double> target(cfg, weights(), 1, 64);
  speculative_decoder<llama_model<double>, ngram_drafter, trie_tree_builder, sample_and_match_verifier> a(target);
  check(a, "ngram/trie/sample_and_match");
  speculative_decoder<llama_model<double>, ngram_drafter, chain_tree_builder, chain_speculative_verifier> b(target);
  check(b, "ngram/chain/chain_speculative (one-hot q)");
  speculative_decoder<llama_model<double>, ngram_drafter, chain_tree_builder, sample_and_match_verifier> c(target);
  check(c, "ngram/chain/sample_and_match");
  speculative_decoder<llama_model<double>, ngram_drafter, cartesian_tree_builder, sample_and_match_verifier> d(target);
  check(d, "ngram/cartesian/sample_and_match");
  speculative_decoder<llama_model<double>, ngram_drafter, chain_tree_builder, multi_draft_verifier> e(target);
  check(e, "ngram/chain/multi_draft (one-hot q)");
}

TEST_CASE("the chi-square check rejects a wrong distribution (negative control)", "[decoder][distribution]") {
  llama_model<double> target(cfg, weights(), 1, 64);
  speculative_decoder<llama_model<double>, ngram_drafter, trie_tree_builder, sample_and_match_verifier> a(target);
  const auto counts = sample_counts(a);
  std::vector<double> uniform(V * V, 1.0 / (V * V));
  const auto [stat, crit] = chi_square(counts, uniform, runs);
  CHECK(stat > crit);
}
