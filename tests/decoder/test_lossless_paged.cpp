// Lossless end to end over a PAGED target KV cache (examples' llama_model with kv_storage::paged:
// 16-token pages in a Philox-shuffled block table, read in place by the attention and by the LongSpec
// draft's cross-attention): at temperature 0 the decoder's output equals the contiguous-cache reference
// model's autoregressive greedy output token for token over 1000 new tokens, for each of 3 seeds, with
// tau > 1 every time (lossless_util.hpp). Combinations: chain drafter (paged small model too) / chain /
// greedy, LongSpec beam / trie / greedy, LongSpec chain / chain / chain_speculative, multi-draft
// LongSpec / multi_draft_tree / multi_draft.
#include "lossless_util.hpp"

using namespace lossless;

TEST_CASE("lossless on a paged target: chain drafter and LongSpec beam, greedy", "[decoder][lossless][paged]") {
  check_combination<greedy_verifier>(chain_tree_builder{}, make_chain_drafter({}, paged_options()),
                                     "paged: chain(paged)/chain/greedy", paged_options());
  check_combination<greedy_verifier>(trie_tree_builder{}, make_longspec({2, 2, 2}), "paged: longspec_beam/trie/greedy",
                                     paged_options());
}

TEST_CASE("lossless on a paged target: chain speculative and multi-draft verifiers", "[decoder][lossless][paged]") {
  check_combination<chain_speculative_verifier>(chain_tree_builder{}, make_longspec({}),
                                                "paged: longspec/chain/chain_speculative", paged_options());
  check_combination<multi_draft_verifier>(multi_draft_tree_builder{}, make_longspec_multi(draft_sampling::with_replacement),
                                          "paged: multi_longspec/multi_draft_tree/multi_draft", paged_options());
}
