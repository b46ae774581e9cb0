// Lossless end to end (issue #6 item 4), drafter = LongSpec (chain mode): for each tree builder x verifier below, at
// temperature 0, the decoder's output equals the double-precision reference LLaMA's own autoregressive
// greedy output token for token over 1000 new tokens, for each of 3 seeds (different weights and
// prompts), with tau > 1 every time (lossless_util.hpp).
#include "lossless_util.hpp"

using namespace lossless;

TEST_CASE("lossless: longspec drafter, greedy and multi-draft verifiers", "[decoder][lossless]") {
  check_combination<greedy_verifier>(chain_tree_builder{}, make_longspec({}), "longspec/chain/greedy");
  check_combination<greedy_verifier>(small_cartesian(), make_longspec({}), "longspec/cartesian/greedy");
  check_combination<greedy_verifier>(trie_tree_builder{}, make_longspec({}), "longspec/trie/greedy");
  check_combination<multi_draft_verifier>(chain_tree_builder{}, make_longspec({}), "longspec/chain/multi_draft (one-hot q)");
}

TEST_CASE("lossless: prompt lookup first, else the longspec chain (lookup_first_drafter)", "[decoder][lossless]") {
  check_combination<greedy_verifier>(chain_tree_builder{}, make_lookup_longspec, "lookup+longspec/chain/greedy");
  check_combination<sample_and_match_verifier>(chain_tree_builder{}, make_lookup_longspec, "lookup+longspec/chain/sample_and_match");
  check_combination<chain_speculative_verifier>(chain_tree_builder{}, make_lookup_longspec, "lookup+longspec/chain/chain_speculative");
}
