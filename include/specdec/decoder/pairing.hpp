#pragma once
//! \file pairing.hpp
//! Policies that cannot be mis-paired (issue #22 item 4): static traits by which drafters, tree
//! builders and verifiers declare what they produce and what they need, and check_policy_pairing(),
//! which rejects an illegal drafter x tree builder x verifier combination at compile time with one
//! static_assert sentence naming the roles involved.
//!
//! The vocabulary (all optional; a policy without a trait gets the default in brackets):
//!  - tree builder: `static constexpr tree_shape produces` [tree_shape::tree]: the most general tree
//!    it may build;
//!  - verifier: `static constexpr tree_shape accepts` [tree_shape::tree]: the most general tree it
//!    verifies exactly; `static constexpr bool needs_draft_q` [false]: on trees that branch it needs
//!    the draft's q rows (draft_candidates::q / sequence_q);
//!  - drafter: `static constexpr draft_output provides` [draft_output::none]: what it can put into
//!    draft_candidates besides tokens (q rows, i.i.d. drafts), in some mode.
//!    (draft_output and its detection, draft_output_v, live in draft/drafter.hpp, so that drafters need
//!    not include decoder/.)
//! So user policies without traits keep compiling with each other and wherever the verifier accepts
//! any tree (greedy_verifier, sample_and_match_verifier). Under a verifier that restricts the tree they
//! count as guaranteeing the least: a builder without `produces` is refused by chain_speculative_verifier
//! and multi_draft_verifier, and a drafter without `provides` by multi_draft_verifier over
//! multi_draft_tree_builder, until they declare it (the static_assert names the trait). This is the one
//! break for existing user code: such pairs used to compile, and worked when the policy did what the
//! verifier needs (a builder that only builds chains, a drafter that draws i.i.d. drafts with q rows).
//!
//! What stays a run-time check, and why: traits describe types, and some of what a verifier needs is
//! chosen at run time. A drafter "can" provide q rows or i.i.d. drafts when some mode of it does:
//! chain_drafter / longspec_drafter fill q only when they sample (temperature > 0) and draw i.i.d.
//! drafts only when constructed with multi_draft_params (LongSpec's beam mode gives top-k sequences
//! without q). A builder's declared shape is an upper bound: cartesian_tree_builder with all widths 1
//! builds a chain, but its type says "tree", so it is refused where only chains are legal (use
//! chain_tree_builder). And a user's trait can be wrong. The verify/ functions therefore keep their
//! run-time checks (verify_chain_speculative: the tree is a chain; verify_multi_draft: every child's
//! token has q > 0 in its parent's row, distinct siblings when drawn without replacement).

#include <concepts>
#include <cstdint>

#include "specdec/draft/drafter.hpp"  // draft_output and its detection (the drafter side of the vocabulary)

namespace specdec {

//! The shape of a speculation tree, ordered from the most to the least constrained; each includes
//! the ones before it (a chain is one i.i.d. draft; k i.i.d. drafts are a tree).
enum class tree_shape : std::uint8_t {
  chain,       //!< a path: node i's parent is i - 1 (chain_tree_builder)
  iid_drafts,  //!< k drafts sampled independently from q, one unmerged branch each in draw order
               //!< (multi_draft_tree_builder over a multi-draft drafter); k = 1 is a chain
  tree,        //!< any tree: merged prefixes, ranked (top-k) siblings (trie, Cartesian, CAPE, TokenSwift)
};

// ---- trait detection (a missing trait takes its default, see the file comment) ----------------------

template <class B>
concept tree_builder_declares_shape = requires {
  { B::produces } -> std::convertible_to<tree_shape>;
};
template <class V>
concept verifier_declares_shape = requires {
  { V::accepts } -> std::convertible_to<tree_shape>;
};
template <class V>
concept verifier_declares_q_need = requires {
  { V::needs_draft_q } -> std::convertible_to<bool>;
};

namespace detail {
template <class B>
consteval tree_shape builder_shape() {
  if constexpr (tree_builder_declares_shape<B>) return B::produces;
  else return tree_shape::tree;
}
template <class V>
consteval tree_shape verifier_shape() {
  if constexpr (verifier_declares_shape<V>) return V::accepts;
  else return tree_shape::tree;
}
template <class V>
consteval bool verifier_needs_q() {
  if constexpr (verifier_declares_q_need<V>) return V::needs_draft_q;
  else return false;
}
}  // namespace detail

//! The tree shape a tree builder declares (tree_shape::tree without a `produces` trait).
template <class B>
inline constexpr tree_shape produced_shape_v = detail::builder_shape<B>();
//! The most general tree shape a verifier declares it verifies (tree_shape::tree without `accepts`).
template <class V>
inline constexpr tree_shape accepted_shape_v = detail::verifier_shape<V>();
//! Whether a verifier needs draft q rows on branching trees (false without `needs_draft_q`).
template <class V>
inline constexpr bool needs_draft_q_v = detail::verifier_needs_q<V>();

namespace detail {
//! The pairing rules of check_policy_pairing (see there), each true when it holds.
template <class Drafter, class Builder, class Verifier>
struct pairing_rules {
  static constexpr tree_shape built = produced_shape_v<Builder>;
  static constexpr tree_shape accepted = accepted_shape_v<Verifier>;
  static constexpr draft_output drafts = draft_output_v<Drafter>;
  static constexpr bool chain_for_chain_verifier = accepted != tree_shape::chain || built == tree_shape::chain;
  static constexpr bool shape_accepted = built <= accepted;
  static constexpr bool iid_drafter_for_iid_tree = built != tree_shape::iid_drafts ||
                                                   accepted == tree_shape::tree ||
                                                   provides_all(drafts, draft_output::iid_drafts);
  static constexpr bool q_for_q_verifier =
      !needs_draft_q_v<Verifier> || built == tree_shape::chain || provides_all(drafts, draft_output::q_rows);
  static constexpr bool all = chain_for_chain_verifier && shape_accepted && iid_drafter_for_iid_tree && q_for_q_verifier;
};
}  // namespace detail

//! Whether Drafter, Builder and Verifier may be composed (the rules of check_policy_pairing), for
//! code that wants to choose among policies rather than fail.
template <class Drafter, class Builder, class Verifier>
concept policy_pairing = detail::pairing_rules<Drafter, Builder, Verifier>::all;

//! One static_assert per pairing rule; only the first broken rule fires (each later rule assumes the
//! earlier ones hold), so an illegal pair gets exactly one message. Rules:
//!  1. a verifier of chains only gets a builder of chains;
//!  2. a verifier of i.i.d. drafts (or chains) gets a builder of those, not a merged / ranked tree;
//!  3. a builder of i.i.d. drafts, under a verifier that relies on them, gets a drafter that can draw
//!     them (otherwise the branches are top-k or n-gram sequences, not draws from q);
//!  4. a verifier that needs draft q rows on branching trees gets a drafter that can provide them.
//! Also checks that a declared trait has the vocabulary's type (a mistyped trait would otherwise be
//! ignored silently). Call it where the three policies meet (speculative_decoder, speculative_batch):
//! `static_assert(check_policy_pairing<Drafter, TreeBuilder, Verifier>());`. O(1), compile time only.
template <class Drafter, class Builder, class Verifier>
consteval bool check_policy_pairing() {
  // A mistyped trait is reported alone (the rules below would read its default).
  constexpr bool typed_builder = !requires { Builder::produces; } || tree_builder_declares_shape<Builder>;
  constexpr bool typed_accepts = !requires { Verifier::accepts; } || verifier_declares_shape<Verifier>;
  constexpr bool typed_needs_q = !requires { Verifier::needs_draft_q; } || verifier_declares_q_need<Verifier>;
  constexpr bool typed_drafter = !requires { Drafter::provides; } || drafter_declares_output<Drafter>;
  static_assert(typed_builder, "policy pairing: the tree builder's 'produces' trait must be a specdec::tree_shape");
  static_assert(typed_accepts, "policy pairing: the verifier's 'accepts' trait must be a specdec::tree_shape");
  static_assert(typed_needs_q, "policy pairing: the verifier's 'needs_draft_q' trait must be a bool");
  static_assert(typed_drafter, "policy pairing: the drafter's 'provides' trait must be a specdec::draft_output");
  if constexpr (typed_builder && typed_accepts && typed_needs_q && typed_drafter) {
    using rules = detail::pairing_rules<Drafter, Builder, Verifier>;
    constexpr bool r1 = rules::chain_for_chain_verifier, r2 = rules::shape_accepted,
                   r3 = rules::iid_drafter_for_iid_tree, r4 = rules::q_for_q_verifier;
    static_assert(r1,
                  "policy pairing: the verifier checks chains only (like chain_speculative_verifier), but the tree "
                  "builder may build branching trees; use chain_tree_builder (a builder that only builds chains "
                  "declares 'static constexpr specdec::tree_shape produces = specdec::tree_shape::chain'), or "
                  "sample_and_match_verifier for trees");
    static_assert(!r1 || r2,
                  "policy pairing: the verifier needs i.i.d. drafts (like multi_draft_verifier, from "
                  "multi_draft_tree_builder) or a chain, but the tree builder builds a merged or ranked tree whose "
                  "siblings were not drawn from q; use multi_draft_tree_builder or chain_tree_builder, or "
                  "sample_and_match_verifier for this tree");
    static_assert(!r1 || !r2 || r3,
                  "policy pairing: the tree builder lays out i.i.d. drafts for the verifier (like "
                  "multi_draft_tree_builder for multi_draft_verifier), but the drafter never draws i.i.d. drafts "
                  "(its 'provides' trait lacks specdec::draft_output::iid_drafts, like ngram_drafter's); use a "
                  "multi-draft chain_drafter or longspec_drafter, or chain_tree_builder");
    static_assert(!r1 || !r2 || !r3 || r4,
                  "policy pairing: the verifier needs the draft's q rows on branching trees, but the drafter never "
                  "provides them (its 'provides' trait lacks specdec::draft_output::q_rows); use a sampling "
                  "drafter, or chain_tree_builder");
  }
  return true;
}

}  // namespace specdec
