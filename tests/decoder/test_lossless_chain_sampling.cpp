// Lossless end to end (issue #6 item 4), drafter = chain (1-layer LLaMA): for each tree builder x verifier below, at
// temperature 0, the decoder's output equals the double-precision reference LLaMA's own autoregressive
// greedy output token for token over 1000 new tokens, for each of 3 seeds (different weights and
// prompts), with tau > 1 every time (lossless_util.hpp).
#include "lossless_util.hpp"

using namespace lossless;

TEST_CASE("lossless: chain drafter, sampling verifiers at temperature 0", "[decoder][lossless]") {
  check_combination<sample_and_match_verifier>(chain_tree_builder{}, make_chain, "chain/chain/sample_and_match");
  check_combination<sample_and_match_verifier>(small_cartesian(), make_chain, "chain/cartesian/sample_and_match");
  check_combination<sample_and_match_verifier>(trie_tree_builder{}, make_chain, "chain/trie/sample_and_match");
  check_combination<chain_speculative_verifier>(chain_tree_builder{}, make_chain, "chain/chain/chain_speculative");
}
