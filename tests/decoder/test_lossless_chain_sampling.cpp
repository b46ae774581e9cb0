// Lossless end to end, drafter = chain (small LLaMA): for each tree builder x verifier below the decoder's greedy output
// equals the double-precision reference LLaMA's own greedy decoding token for token over 1000 new
// tokens (each combination uses a different seed: weights and prompt differ).
#include "lossless_util.hpp"

using namespace lossless;

TEST_CASE("lossless greedy: chain (small LLaMA) drafter (chain_sampling)", "[decoder][lossless]") {
  check_combination<sample_and_match_verifier>(chain_tree_builder{}, make_chain, "chain/sample_and_match", {0});
  check_combination<sample_and_match_verifier>(cartesian_tree_builder{}, make_chain, "cartesian/sample_and_match", {1});
  check_combination<sample_and_match_verifier>(trie_tree_builder{}, make_chain, "trie/sample_and_match", {2});
  check_combination<chain_speculative_verifier>(chain_tree_builder{}, make_chain, "chain/chain_speculative", {3});
}
