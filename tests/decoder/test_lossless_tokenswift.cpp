// Lossless end to end, drafter = TokenSwift self-drafting (draft/self_drafter.hpp over
// examples/common/tokenswift_draft.hpp: partial KV cache of 64 tokens, 3 fitted residual heads,
// 4-gram reutilization): at temperature 0 the decoder's output equals the double-precision reference
// LLaMA's own greedy output token for token over 1000 new tokens, for each of 3 seeds, with tau > 1
// (lossless_util.hpp), with TokenSwift's own tree (Cartesian heads + n-grams in one trie), the plain
// Cartesian tree (over the in-place view and over a dense copy of it), and a chain; greedy and
// sample-and-match verification.
#include <map>

#include "lossless_util.hpp"

using namespace lossless;

TEST_CASE("lossless: TokenSwift self-drafter", "[decoder][lossless][tokenswift]") {
  check_combination<greedy_verifier>(tokenswift_tree_builder({1, 2, 2, 1}), make_tokenswift(), "tokenswift/tokenswift[1,2,2,1]/greedy");
  check_combination<sample_and_match_verifier>(tokenswift_tree_builder({1, 2, 2, 1}, 10), make_tokenswift(),
                                               "tokenswift/tokenswift[1,2,2,1](max 10)/sample_and_match");
  check_combination<greedy_verifier>(small_cartesian(), make_tokenswift(), "tokenswift/cartesian/greedy");
  // The same drafter attending over a dense copy of the view (compact_partial_kv): same rows, same
  // order, so the same drafts and the same tau as the in-place view above.
  check_combination<greedy_verifier>(small_cartesian(), make_tokenswift({.budget = 64, .sink = 4, .compact = true}),
                                     "tokenswift(compact copy)/cartesian/greedy");
  // No n-grams, a budget of 16 with 1 sink: the heads and the partial cache alone.
  check_combination<greedy_verifier>(chain_tree_builder{}, make_tokenswift({.budget = 16, .sink = 1}, {.ngram_candidates = 0}),
                                     "tokenswift(B=16, no n-grams)/chain/greedy");
}

TEST_CASE("TokenSwift self-drafting in a batch: a request that finishes, and a new one in its slot, leave the others "
          "drafting", "[decoder][lossless][tokenswift]") {
  // The target's release empties a finished request's cache while the drafter kept its partial
  // selection; the next draft of another request checked the whole partial layout and refused the
  // stale rows ("index ... in [0, base length 0)"), so a batch stopped at the first request to finish
  // (review helper-105). The drafter now forgets such slots, and a request that takes a freed slot
  // gets a selection of its own; every output stays the target's greedy decoding.
  const auto cfg = tiny_config();
  const auto w = random_llama_weights<double>(cfg, 11, {.block_scale = 0.4});
  llama_model<double> target(cfg, w, 2, 600);
  const auto z = greedy_hidden_states(cfg, w, prompt_for(55, cfg.vocab_size), 120);
  for (const bool compact : {false, true}) {
    INFO((compact ? "compact copy" : "in-place view"));
    tokenswift_self_draft<double> draft(target, {.budget = 64, .sink = 4, .compact = compact}, fit_residual_heads(z, 3));
    using D = self_drafter<tokenswift_self_draft<double>>;
    speculative_batch<llama_model<double>, D, tokenswift_tree_builder, greedy_verifier> batch(
        target, D(draft), tokenswift_tree_builder({1, 2, 2, 1}));
    const std::vector<std::vector<std::int32_t>> prompts{prompt_for(11, cfg.vocab_size), prompt_for(22, cfg.vocab_size),
                                                         prompt_for(33, cfg.vocab_size)};
    const int lengths[3] = {10, 120, 40};
    std::map<std::uint32_t, std::vector<std::int32_t>> got;
    batch.add_request(0, prompts[0], {.max_new_tokens = lengths[0]});
    batch.add_request(1, prompts[1], {.max_new_tokens = lengths[1]});
    bool third = false;
    while (batch.active() > 0) {
      for (const auto& o : batch.step()) got[o.id].insert(got[o.id].end(), o.tokens.begin(), o.tokens.end());
      if (!third && batch.free_slots() > 0) {  // request 0 finished: a new request takes its slot
        batch.add_request(2, prompts[2], {.max_new_tokens = lengths[2]});
        third = true;
      }
    }
    CHECK(third);
    for (std::uint32_t id = 0; id < 3; ++id) {
      llama_model<double> alone(cfg, w, 1, 600);
      CHECK(got[id] == greedy_reference(alone, 0, prompts[id], lengths[id]));
    }
  }
}
