// Sampling losslessness of the model drafters (LongSpec chain and beam modes, chain drafter) with every
// tree builder and sampling verifier that accepts them: the joint law of the first two generated
// tokens over many seeded runs matches the model's exact autoregressive law (chi-square at p = 0.001,
// fixed seeds; distribution_util.hpp, whose negative control is in test_distribution.cpp).
// Chains are sampled from q (chain_speculative uses it); beams and alternatives are top-k (one-hot
// for the verifiers), so sample_and_match verifies those trees.
#include "distribution_util.hpp"

using namespace specdec;
using namespace specdec::examples;
using namespace distribution;

namespace {
template <class Builder, class Verifier, class Drafter>
void check_with(llama_model<double>& target, Drafter drafter, Builder builder, const char* name, int width = 2) {
  speculative_decoder<llama_model<double>, Drafter, Builder, Verifier> dec(target, std::move(drafter), std::move(builder));
  check(dec, name, width);
}
}  // namespace

TEST_CASE("sampling distribution: LongSpec drafter, chain and beam modes", "[decoder][distribution]") {
  llama_model<double> target(cfg, weights(), 1, 64);
  drafters d(target);
  using ls = longspec_drafter<longspec_draft_model<double>>;
  check_with<chain_tree_builder, chain_speculative_verifier>(target, ls(d.longspec), {}, "longspec/chain/chain_speculative (sampled q)");
  check_with<chain_tree_builder, sample_and_match_verifier>(target, ls(d.longspec), {}, "longspec/chain/sample_and_match");
  check_with<cartesian_tree_builder, sample_and_match_verifier>(target, ls(d.longspec), {}, "longspec/cartesian/sample_and_match");
  check_with<trie_tree_builder, sample_and_match_verifier>(target, ls(d.longspec), {}, "longspec/trie/sample_and_match");
  check_with<cape_tree_builder, sample_and_match_verifier>(target, ls(d.longspec), {}, "longspec/cape/sample_and_match", 4);
  const std::vector<int> beam{2, 2, 2};
  check_with<trie_tree_builder, sample_and_match_verifier>(target, ls(d.longspec, beam), {}, "longspec_beam/trie/sample_and_match");
  check_with<chain_tree_builder, chain_speculative_verifier>(target, ls(d.longspec, beam), {}, "longspec_beam/chain/chain_speculative");
}

TEST_CASE("sampling distribution: chain drafter", "[decoder][distribution]") {
  llama_model<double> target(cfg, weights(), 1, 64);
  drafters d(target);
  using cd = chain_drafter<llama_model<double>>;
  check_with<chain_tree_builder, chain_speculative_verifier>(target, cd(d.small), {}, "chain/chain/chain_speculative (sampled q)");
  check_with<cartesian_tree_builder, sample_and_match_verifier>(target, cd(d.small), {}, "chain/cartesian/sample_and_match");
  check_with<trie_tree_builder, sample_and_match_verifier>(target, cd(d.small), {}, "chain/trie/sample_and_match");
  check_with<cape_tree_builder, sample_and_match_verifier>(target, cd(d.small), {}, "chain/cape/sample_and_match", 4);
}

TEST_CASE("sampling distribution: adaptive depth (each step's depth follows the request's acceptance so far)",
          "[decoder][distribution][adaptive]") {
  // A given cost curve (each extra row costs a share of a plain step, learn_costs off) and a weak prior:
  // after an accepted draft the next step drafts, after a rejection it may not, so the depth of step
  // 2 depends on the draws of step 1. The law of the output must not.
  llama_model<double> target(cfg, weights(), 1, 64);
  drafters d(target);
  using ls = longspec_drafter<longspec_draft_model<double>>;
  for (const bool chain : {true, false}) {
    speculative_decoder<llama_model<double>, ls, chain_tree_builder, chain_speculative_verifier> a(target, ls(d.longspec));
    speculative_decoder<llama_model<double>, ls, cartesian_tree_builder, sample_and_match_verifier> b(target, ls(d.longspec));
    auto run = [&](auto& dec, const char* name, double per_row) {
      adaptive_depth_options o;
      o.learn_costs = false;
      o.prior_weight = 0.5;
      dec.batch().set_adaptive_options(o);
      step_cost_curve c;
      c.record(1, 1.0), c.record(2, 1.0 + per_row), c.record(3, 1.0 + 2 * per_row);
      dec.batch().set_cost_curve(c);
      check(dec, name, 2, true);
      const auto& st = dec.stats();
      INFO(name << ": steps " << st.steps << ", depth drafted " << st.draft_depth << ", nodes " << st.tree_nodes);
      CHECK(st.draft_depth > st.steps / 10);  // drafting steps ...
      CHECK(st.draft_depth < 2 * st.steps);   // ... and plain or shallow ones
    };
    if (chain) run(a, "longspec/chain/chain_speculative, adaptive depth", 0.45);
    else run(b, "longspec/cartesian/sample_and_match, adaptive depth", 0.03);
  }
}

TEST_CASE("sampling distribution: TokenSwift self-drafter", "[decoder][distribution][tokenswift]") {
  // Partial view of 6 of the prompt's 8 cached tokens (2 sinks), so drafts come from an approximate
  // model; heads fitted on the target's greedy text from another prompt; penalized (top-k) rows.
  llama_model<double> target(cfg, weights(), 1, 64);
  const std::vector<std::int32_t> train_prompt{5, 4, 3, 2, 1, 0, 5, 5};
  tokenswift_self_draft<double> draft(target, {.budget = 6, .sink = 2},
                                      fit_residual_heads(greedy_hidden_states(cfg, weights(), train_prompt, 60), 2));
  using sd = self_drafter<tokenswift_self_draft<double>>;
  check_with<tokenswift_tree_builder, sample_and_match_verifier>(target, sd(draft, {.ngram = {.n = 2}}),
                                                                 tokenswift_tree_builder({1, 2, 2}),
                                                                 "tokenswift/tokenswift/sample_and_match");
  check_with<cartesian_tree_builder, sample_and_match_verifier>(target, sd(draft), {}, "tokenswift/cartesian/sample_and_match");
}
