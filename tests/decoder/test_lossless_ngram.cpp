// Lossless end to end (issue #6 item 4), drafter = n-gram prompt lookup (no model): for each tree builder x verifier below, at
// temperature 0, the decoder's output equals the double-precision reference LLaMA's own autoregressive
// greedy output token for token over 1000 new tokens, for each of 3 seeds (different weights and
// prompts), with tau > 1 every time (lossless_util.hpp).
#include "lossless_util.hpp"

using namespace lossless;

TEST_CASE("the seeds give different models, prompts and reference outputs", "[decoder][lossless]") {
  for (int a = 0; a < num_seeds; ++a)
    for (int b = a + 1; b < num_seeds; ++b) {
      CHECK(fixture_for(a).weights.embed != fixture_for(b).weights.embed);
      CHECK(fixture_for(a).weights.layers[0].wq != fixture_for(b).weights.layers[0].wq);
      CHECK(fixture_for(a).prompt != fixture_for(b).prompt);
      CHECK(fixture_for(a).reference != fixture_for(b).reference);
    }
  for (int a = 0; a < num_seeds; ++a) CHECK(fixture_for(a).reference.size() == static_cast<std::size_t>(new_tokens));
}

TEST_CASE("lossless: ngram drafter, greedy and multi-draft verifiers", "[decoder][lossless]") {
  check_combination<greedy_verifier>(chain_tree_builder{}, make_ngram, "ngram/chain/greedy");
  check_combination<greedy_verifier>(small_cartesian(), make_ngram, "ngram/cartesian/greedy");
  check_combination<greedy_verifier>(trie_tree_builder{}, make_ngram, "ngram/trie/greedy");
  check_combination<multi_draft_verifier>(chain_tree_builder{}, make_ngram, "ngram/chain/multi_draft (one-hot q)");
}

TEST_CASE("lossless: ngram drafter, sampling verifiers at temperature 0", "[decoder][lossless]") {
  check_combination<sample_and_match_verifier>(chain_tree_builder{}, make_ngram, "ngram/chain/sample_and_match");
  check_combination<sample_and_match_verifier>(small_cartesian(), make_ngram, "ngram/cartesian/sample_and_match");
  check_combination<sample_and_match_verifier>(trie_tree_builder{}, make_ngram, "ngram/trie/sample_and_match");
  check_combination<chain_speculative_verifier>(chain_tree_builder{}, make_ngram, "ngram/chain/chain_speculative");
}
