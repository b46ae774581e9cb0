// Sampling losslessness of the multi-draft combinations: k independent drafts sampled from the draft
// distribution (first tokens with or without replacement), verified by multi_draft_verifier (or
// sample_and_match): the joint law of the first two generated tokens over many seeded runs matches the
// model's exact autoregressive law (chi-square at p = 0.001, fixed seeds; distribution_util.hpp, whose
// negative control is in test_distribution.cpp).
#include "distribution_util.hpp"

using namespace specdec;
using namespace specdec::examples;
using namespace distribution;

TEST_CASE("sampling distribution: multi-draft drafters with multi_draft_verifier (with and without replacement)",
          "[decoder][distribution][multi_draft]") {
  llama_model<double> target(cfg, weights(), 1, 64);
  drafters d(target);
  using ls = longspec_drafter<longspec_draft_model<double>>;
  using md = speculative_decoder<llama_model<double>, ls, multi_draft_tree_builder, multi_draft_verifier>;
  md a(target, ls(d.longspec, multi_draft_params{.mode = draft_sampling::with_replacement}));
  check(a, "longspec multi-draft (with replacement)/multi_draft_tree/multi_draft");
  md b(target, ls(d.longspec, multi_draft_params{.mode = draft_sampling::without_replacement}));
  check(b, "longspec multi-draft (without replacement)/multi_draft_tree/multi_draft");
  using cd = chain_drafter<llama_model<double>>;
  speculative_decoder<llama_model<double>, cd, multi_draft_tree_builder, multi_draft_verifier> c(
      target, cd(d.small, multi_draft_params{.mode = draft_sampling::with_replacement}));
  check(c, "chain multi-draft (with replacement)/multi_draft_tree/multi_draft");
  speculative_decoder<llama_model<double>, cd, multi_draft_tree_builder, sample_and_match_verifier> e(
      target, cd(d.small, multi_draft_params{.mode = draft_sampling::without_replacement}));
  check(e, "chain multi-draft (without replacement)/multi_draft_tree/sample_and_match");
}
