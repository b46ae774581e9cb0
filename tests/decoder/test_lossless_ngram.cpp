// Lossless end to end, drafter = ngram (prompt lookup): for each tree builder x verifier below the decoder's greedy output
// equals the double-precision reference LLaMA's own greedy decoding token for token over 1000 new
// tokens (each combination uses a different seed: weights and prompt differ).
#include "lossless_util.hpp"

using namespace lossless;

TEST_CASE("lossless greedy: ngram (prompt lookup) drafter (ngram)", "[decoder][lossless]") {
  check_combination<greedy_verifier>(chain_tree_builder{}, make_ngram, "chain/greedy", {0});
  check_combination<greedy_verifier>(cartesian_tree_builder{}, make_ngram, "cartesian/greedy", {1});
  check_combination<greedy_verifier>(trie_tree_builder{}, make_ngram, "trie/greedy", {2});
  check_combination<sample_and_match_verifier>(chain_tree_builder{}, make_ngram, "chain/sample_and_match", {3});
  check_combination<sample_and_match_verifier>(cartesian_tree_builder{}, make_ngram, "cartesian/sample_and_match", {4});
  check_combination<sample_and_match_verifier>(trie_tree_builder{}, make_ngram, "trie/sample_and_match", {5});
  check_combination<chain_speculative_verifier>(chain_tree_builder{}, make_ngram, "chain/chain_speculative", {6});
}
