// Lossless end to end (issue #6 item 4), drafter = chain (1-layer LLaMA) in multi-draft mode: k = 3 independent drafts sampled from q (at temperature 0.5 for a greedy request), first tokens with replacement: for each tree builder x verifier below, at
// temperature 0, the decoder's output equals the double-precision reference LLaMA's own autoregressive
// greedy output token for token over 1000 new tokens, for each of 3 seeds (different weights and
// prompts), with tau > 1 every time (lossless_util.hpp).
#include "lossless_util.hpp"

using namespace lossless;

TEST_CASE("lossless: multi-draft chain drafter (with replacement)", "[decoder][lossless]") {
  const auto drafter = make_chain_multi(draft_sampling::with_replacement);
  check_combination<multi_draft_verifier>(multi_draft_tree_builder{}, drafter, "multi_chain/multi_draft_tree/multi_draft");
  check_combination<greedy_verifier>(multi_draft_tree_builder{}, drafter, "multi_chain/multi_draft_tree/greedy");
  check_combination<sample_and_match_verifier>(multi_draft_tree_builder{}, drafter, "multi_chain/multi_draft_tree/sample_and_match");
  check_combination<multi_draft_verifier>(chain_tree_builder{}, drafter, "multi_chain/chain/multi_draft");
}
