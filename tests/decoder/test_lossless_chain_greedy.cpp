// Lossless end to end, drafter = chain (small LLaMA): for each tree builder x verifier below the decoder's greedy output
// equals the double-precision reference LLaMA's own greedy decoding token for token over 1000 new
// tokens (each combination uses a different seed: weights and prompt differ).
#include "lossless_util.hpp"

using namespace lossless;

TEST_CASE("lossless greedy: chain (small LLaMA) drafter (chain_greedy)", "[decoder][lossless]") {
  check_combination<greedy_verifier>(chain_tree_builder{}, make_chain, "chain/greedy", {0});
  check_combination<greedy_verifier>(cartesian_tree_builder{}, make_chain, "cartesian/greedy", {1});
  check_combination<greedy_verifier>(trie_tree_builder{}, make_chain, "trie/greedy", {2});
}
