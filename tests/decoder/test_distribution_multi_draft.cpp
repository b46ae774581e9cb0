// Sampling losslessness of the multi-draft combinations: k independent drafts sampled from the draft
// distribution (first tokens with or without replacement), verified by multi_draft_verifier (or
// sample_and_match): the joint law of the first two generated tokens over many seeded runs matches the
// model's exact autoregressive law (chi-square at p = 0.001, fixed seeds; distribution_util.hpp, whose
// negative control is in test_distribution.cpp).
#include "distribution_util.hpp"

using namespace distribution;

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
