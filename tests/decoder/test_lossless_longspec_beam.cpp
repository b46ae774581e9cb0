// Lossless end to end, drafter = LongSpec (dynamic beam tree): for each tree builder x verifier below the decoder's greedy output
// equals the double-precision reference LLaMA's own greedy decoding token for token over 1000 new
// tokens (each combination uses a different seed: weights and prompt differ).
#include "lossless_util.hpp"

using namespace lossless;

TEST_CASE("lossless greedy: LongSpec (dynamic beam tree) drafter (longspec_beam)", "[decoder][lossless]") {
  check_combination<greedy_verifier>(trie_tree_builder{}, make_longspec({2, 2, 2}), "trie/greedy", {0});
  check_combination<sample_and_match_verifier>(trie_tree_builder{}, make_longspec({2, 2, 2}), "trie/sample_and_match", {1});
  check_combination<greedy_verifier>(chain_tree_builder{}, make_longspec({2, 2, 2}), "chain/greedy", {2});
  check_combination<sample_and_match_verifier>(cartesian_tree_builder{}, make_longspec({2, 2, 2}), "cartesian/sample_and_match", {3});
  check_combination<chain_speculative_verifier>(chain_tree_builder{}, make_longspec({2, 2, 2}), "chain/chain_speculative", {4});
}
