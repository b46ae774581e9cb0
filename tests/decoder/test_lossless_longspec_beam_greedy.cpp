// Lossless end to end (issue #6 item 4), drafter = LongSpec (dynamic beam tree [2, 2, 2]): for each tree builder x verifier below, at
// temperature 0, the decoder's output equals the double-precision reference LLaMA's own autoregressive
// greedy output token for token over 1000 new tokens, for each of 3 seeds (different weights and
// prompts), with tau > 1 every time (lossless_util.hpp).
#include "lossless_util.hpp"

using namespace lossless;

TEST_CASE("lossless: longspec_beam drafter, greedy and multi-draft verifiers", "[decoder][lossless]") {
  check_combination<greedy_verifier>(chain_tree_builder{}, make_longspec({2, 2, 2}), "longspec_beam/chain/greedy");
  check_combination<greedy_verifier>(small_cartesian(), make_longspec({2, 2, 2}), "longspec_beam/cartesian/greedy");
  check_combination<greedy_verifier>(trie_tree_builder{}, make_longspec({2, 2, 2}), "longspec_beam/trie/greedy");
  check_combination<multi_draft_verifier>(chain_tree_builder{}, make_longspec({2, 2, 2}), "longspec_beam/chain/multi_draft (one-hot q)");
}
