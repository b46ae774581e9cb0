// Lossless end to end, drafter = LongSpec (chain mode): for each tree builder x verifier below the decoder's greedy output
// equals the double-precision reference LLaMA's own greedy decoding token for token over 1000 new
// tokens (each combination uses a different seed: weights and prompt differ).
#include "lossless_util.hpp"

using namespace lossless;

TEST_CASE("lossless greedy: LongSpec (chain mode) drafter (longspec_greedy)", "[decoder][lossless]") {
  check_combination<greedy_verifier>(chain_tree_builder{}, make_longspec({}), "chain/greedy", {0});
  check_combination<greedy_verifier>(cartesian_tree_builder{}, make_longspec({}), "cartesian/greedy", {1});
  check_combination<greedy_verifier>(trie_tree_builder{}, make_longspec({}), "trie/greedy", {2});
}
