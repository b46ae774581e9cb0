// Compile-fail cases for decoder/pairing.hpp (issue #22 item 4): a drafter x tree builder x verifier
// combination that cannot verify exactly is rejected where speculative_decoder is instantiated, with
// one static_assert sentence of check_policy_pairing. Each -D macro instantiates one illegal pair;
// without a macro the file compiles (positive control: at least one legal pair per shipped verifier,
// policies without traits, and the policy_pairing concept on legal and illegal pairs).
#include <cstdint>
#include <span>

#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/draft/chain_drafter.hpp"

using namespace specdec;

// A target that also serves as chain_drafter's draft model (truncatable_model).
struct target {
  using logit_type = float;
  int vocab_size() const { return 4; }
  int max_requests() const { return 1; }
  void prefill(int, std::span<const std::int32_t>) {}
  void forward(int, std::int32_t, const token_tree&, std::span<float>) {}
  void commit(int, std::span<const std::int32_t>) {}
  int cache_length(int) const { return 0; }
  void truncate(int, int) {}
};
using model_drafter = chain_drafter<target>;

// User policies without pairing traits: a builder counts as building trees, a verifier accepts any
// tree and needs no q, a drafter provides no q rows and no i.i.d. drafts.
struct user_builder {
  void build(const draft_candidates&, token_tree&) {}
};
struct user_verifier {
  static constexpr bool is_lossless_for_sampling = true;
  void verify(const verify_input&, verify_result&) {}
};
struct user_drafter {
  void reset(int) {}
  void propose(const draft_request&, draft_candidates&) {}
};
// A user builder that declares it builds chains only: chain_speculative_verifier accepts it.
struct user_chain_builder : user_builder {
  static constexpr tree_shape produces = tree_shape::chain;
};
// A user verifier of any tree that needs q rows on branching trees.
struct user_q_verifier : user_verifier {
  static constexpr bool needs_draft_q = true;
};
// A trait of the wrong type would be ignored silently if it were not checked.
struct mistyped_builder : user_builder {
  static constexpr int produces = 0;
};

template <class Drafter, class Builder, class Verifier>
void make(target& t, Drafter drafter, Builder builder = {}) {
  speculative_decoder<target, Drafter, Builder, Verifier> d(t, std::move(drafter), std::move(builder));
  (void)d;
}

// The concept answers the same question without failing.
static_assert(policy_pairing<model_drafter, chain_tree_builder, chain_speculative_verifier>);
static_assert(policy_pairing<model_drafter, multi_draft_tree_builder, multi_draft_verifier>);
static_assert(policy_pairing<ngram_drafter, chain_tree_builder, multi_draft_verifier>);
static_assert(policy_pairing<ngram_drafter, multi_draft_tree_builder, sample_and_match_verifier>);
static_assert(!policy_pairing<model_drafter, cartesian_tree_builder, multi_draft_verifier>);
static_assert(!policy_pairing<model_drafter, cartesian_tree_builder, chain_speculative_verifier>);
static_assert(!policy_pairing<model_drafter, multi_draft_tree_builder, chain_speculative_verifier>);
static_assert(!policy_pairing<ngram_drafter, multi_draft_tree_builder, multi_draft_verifier>);
static_assert(!policy_pairing<user_drafter, user_builder, chain_speculative_verifier>);
static_assert(!policy_pairing<ngram_drafter, trie_tree_builder, user_q_verifier>);

int main() {
  target t;
  // Legal pairs, at least one per shipped verifier.
  make<ngram_drafter, trie_tree_builder, greedy_verifier>(t, {});
  make<model_drafter, cape_tree_builder, greedy_verifier>(t, model_drafter(t));
  make<model_drafter, cartesian_tree_builder, sample_and_match_verifier>(t, model_drafter(t));
  make<ngram_drafter, multi_draft_tree_builder, sample_and_match_verifier>(t, {});
  make<model_drafter, chain_tree_builder, chain_speculative_verifier>(t, model_drafter(t));
  make<ngram_drafter, chain_tree_builder, chain_speculative_verifier>(t, {});
  make<model_drafter, multi_draft_tree_builder, multi_draft_verifier>(t, model_drafter(t, multi_draft_params{}));
  make<ngram_drafter, chain_tree_builder, multi_draft_verifier>(t, {});
  // User policies without traits, and a declared user chain builder.
  make<user_drafter, user_builder, greedy_verifier>(t, {});
  make<user_drafter, cartesian_tree_builder, user_verifier>(t, {});
  make<user_drafter, user_chain_builder, chain_speculative_verifier>(t, {});
  make<user_drafter, chain_tree_builder, multi_draft_verifier>(t, {});
  make<ngram_drafter, trie_tree_builder, user_verifier>(t, {});

#ifdef MULTI_DRAFT_ON_CARTESIAN  // issue #22's example: sampled chain + Cartesian tree + multi-draft verifier
  make<model_drafter, cartesian_tree_builder, multi_draft_verifier>(t, model_drafter(t));
#endif
#ifdef MULTI_DRAFT_ON_TRIE
  make<ngram_drafter, trie_tree_builder, multi_draft_verifier>(t, {});
#endif
#ifdef CHAIN_ON_CARTESIAN
  make<model_drafter, cartesian_tree_builder, chain_speculative_verifier>(t, model_drafter(t));
#endif
#ifdef CHAIN_ON_MULTI_DRAFT_TREE
  make<model_drafter, multi_draft_tree_builder, chain_speculative_verifier>(t, model_drafter(t, multi_draft_params{}));
#endif
#ifdef CHAIN_ON_USER_BUILDER
  make<user_drafter, user_builder, chain_speculative_verifier>(t, {});
#endif
#ifdef MULTI_DRAFT_TREE_WITHOUT_IID_DRAFTER
  make<ngram_drafter, multi_draft_tree_builder, multi_draft_verifier>(t, {});
#endif
#ifdef Q_VERIFIER_WITHOUT_Q_DRAFTER
  make<ngram_drafter, trie_tree_builder, user_q_verifier>(t, {});
#endif
#ifdef MISTYPED_TRAIT
  make<ngram_drafter, mistyped_builder, greedy_verifier>(t, {});
#endif
}
