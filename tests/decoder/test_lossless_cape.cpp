// Lossless end to end (issue #6 item 4), tree builder = GLIDE's CAPE (§4.2; decoder/tree_builders.hpp):
// for each drafter x verifier below, at temperature 0, the decoder's output equals the double-precision
// reference LLaMA's own autoregressive greedy output token for token over 1000 new tokens, for each of
// 3 seeds, with tau > 1 every time (lossless_util.hpp). The model drafters keep 8 alternatives per
// depth, so the §4.2 bins' full expansion sets (up to 7 siblings) are available.
#include "lossless_util.hpp"

using namespace lossless;

TEST_CASE("lossless: CAPE trees from the model drafters and the n-gram drafter", "[decoder][lossless][cape]") {
  constexpr int width = 8;  // max S(p) = 7 siblings + the chain token
  check_combination<greedy_verifier>(cape_tree_builder{}, make_longspec({}), "longspec/cape/greedy", {}, width);
  check_combination<sample_and_match_verifier>(cape_tree_builder{}, make_longspec({}), "longspec/cape/sample_and_match", {}, width);
  check_combination<greedy_verifier>(cape_tree_builder(12), make_chain, "chain/cape(max 12)/greedy", {}, width);
  check_combination<greedy_verifier>(cape_tree_builder{}, make_ngram, "ngram/cape/greedy", {}, width);
}
