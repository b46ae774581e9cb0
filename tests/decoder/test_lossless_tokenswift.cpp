// Lossless end to end, drafter = TokenSwift self-drafting (draft/self_drafter.hpp over
// examples/common/tokenswift_draft.hpp: partial KV cache of 64 tokens, 3 fitted residual heads,
// 4-gram reutilization): at temperature 0 the decoder's output equals the double-precision reference
// LLaMA's own greedy output token for token over 1000 new tokens, for each of 3 seeds, with tau > 1
// (lossless_util.hpp), with TokenSwift's own tree (Cartesian heads + n-grams in one trie), the plain
// Cartesian tree (over the in-place view and over a dense copy of it), and a chain; greedy and
// sample-and-match verification.
#include "lossless_util.hpp"

using namespace lossless;

TEST_CASE("lossless: TokenSwift self-drafter", "[decoder][lossless][tokenswift]") {
  check_combination<greedy_verifier>(tokenswift_tree_builder({1, 2, 2, 1}), make_tokenswift(), "tokenswift/tokenswift[1,2,2,1]/greedy");
  check_combination<sample_and_match_verifier>(tokenswift_tree_builder({1, 2, 2, 1}, 10), make_tokenswift(),
                                               "tokenswift/tokenswift[1,2,2,1](max 10)/sample_and_match");
  check_combination<greedy_verifier>(small_cartesian(), make_tokenswift(), "tokenswift/cartesian/greedy");
  // The same drafter attending over a dense copy of the view (compact_partial_kv): same rows, same
  // order, so the same drafts and the same tau as the in-place view above.
  check_combination<greedy_verifier>(small_cartesian(), make_tokenswift({.budget = 64, .sink = 4, .compact = true}),
                                     "tokenswift(compact copy)/cartesian/greedy");
  // No n-grams, a budget of 16 with 1 sink: the heads and the partial cache alone.
  check_combination<greedy_verifier>(chain_tree_builder{}, make_tokenswift({.budget = 16, .sink = 1}, {.ngram_candidates = 0}),
                                     "tokenswift(B=16, no n-grams)/chain/greedy");
}
