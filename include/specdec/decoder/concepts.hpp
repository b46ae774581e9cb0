#pragma once
//! \file concepts.hpp
//! The four policies a speculative_decoder is composed of, each a concept split into named
//! sub-requirements, and check_*<T>() functions that static_assert each part with a message naming
//! the missing member (modeled on kv/kv_layout.hpp). The decoder calls all four where it is
//! instantiated; each shipped policy is checked right after its definition. Which drafters, builders
//! and verifiers may be composed is declared by static traits and checked by check_policy_pairing()
//! (decoder/pairing.hpp). The drafter concept and check_drafter() are defined in draft/drafter.hpp
//! (so the shipped drafters in draft/ check themselves without including decoder/); this header
//! includes it, so it still offers all four.
//!
//! Row convention (shared with verify/): for a tree of n nodes the target writes n + 1 logit rows:
//! row 0 at the root (the last committed token), row i + 1 after node i.

#include <concepts>
#include <cstdint>
#include <span>
#include <type_traits>

#include "specdec/core/bfloat16.hpp"
#include "specdec/core/half.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/decoder/pairing.hpp"
#include "specdec/draft/draft_candidates.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/sampling/logits_processor.hpp"
#include "specdec/sampling/penalty_context.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/verify_result.hpp"

namespace specdec {

// ---- target_model ----------------------------------------------------------------------------------

//! `T::logit_type` is float or double (the element type of the rows forward() writes).
template <class T>
concept target_has_logit_type =
    requires { typename T::logit_type; } &&
    (std::is_same_v<typename T::logit_type, float> || std::is_same_v<typename T::logit_type, double>);

//! `vocab_size()` returns an integer (the width of each logit row).
template <class T>
concept target_has_vocab_size = requires(const T& t) {
  { t.vocab_size() } -> std::convertible_to<int>;
};

//! `max_requests()` returns an integer (request slots r in [0, max_requests())).
template <class T>
concept target_has_max_requests = requires(const T& t) {
  { t.max_requests() } -> std::convertible_to<int>;
};

//! Both geometry members (kept as one name for existing users).
template <class T>
concept target_has_geometry = target_has_vocab_size<T> && target_has_max_requests<T>;

//! `prefill(int request, std::span<const int32_t> prompt)` caches the prompt except its last token (the root).
template <class T>
concept target_has_prefill = requires(T& t, int r, std::span<const std::int32_t> prompt) { t.prefill(r, prompt); };

//! `forward(int request, int32_t root, const token_tree&, std::span<logit_type> logits)` writes n + 1 rows.
template <class T>
concept target_has_forward = target_has_logit_type<T> &&
    requires(T& t, int r, std::int32_t root, const token_tree& tree, std::span<typename T::logit_type> logits) {
      t.forward(r, root, tree, logits);
    };

//! `commit(int request, std::span<const int32_t> accepted_nodes)` appends the root's and the accepted
//! nodes' K/V from the last forward to the request's cache.
template <class T>
concept target_has_commit = requires(T& t, int r, std::span<const std::int32_t> accepted) { t.commit(r, accepted); };

//! One step's batch as a batched target sees it (speculative_batch builds it): entry b of B runs in
//! request slot slots[b] (distinct slots) with root token roots[b] (its last committed token, not yet
//! in its cache) and tree b of `trees` (local node indices; trees.committed_length(b) = the request's
//! committed tokens with the root, so node i sits at position committed_length(b) + depth(i), the root
//! at committed_length(b) - 1). Entry b's logit rows are [row_indptr[b], row_indptr[b + 1]): n_b + 1
//! rows, the root's first, then one after each node (the row convention above). row_indptr is
//! q_indptr of the attention calls with the root counted as a query.
struct target_batch {
  std::span<const int> slots;               //!< [B]
  std::span<const std::int32_t> roots;      //!< [B]
  const token_tree_batch& trees;            //!< B trees
  std::span<const std::int32_t> row_indptr; //!< [B + 1], row_indptr[0] = 0
  //! The same B trees as the token_tree objects the builder produced (what a per-request forward
  //! takes; batched_target_adapter passes them on).
  std::span<const token_tree* const> request_trees;
  [[nodiscard]] int size() const noexcept { return static_cast<int>(slots.size()); }
  [[nodiscard]] std::int32_t total_rows() const noexcept { return row_indptr.empty() ? 0 : row_indptr.back(); }
  //! Entry b's tree as (tokens, parents) spans of local node indices. b in [0, size()), else
  //! invalid_argument.
  [[nodiscard]] std::span<const std::int32_t> tokens(int b) const {
    const int n = trees.num_nodes(checked_entry(b, "specdec::target_batch::tokens"));
    return trees.tokens().subspan(static_cast<std::size_t>(trees.node_indptr()[static_cast<std::size_t>(b)]),
                                  static_cast<std::size_t>(n));
  }
  [[nodiscard]] std::span<const std::int32_t> parents(int b) const {
    const int n = trees.num_nodes(checked_entry(b, "specdec::target_batch::parents"));
    return trees.parents().subspan(static_cast<std::size_t>(trees.node_indptr()[static_cast<std::size_t>(b)]),
                                   static_cast<std::size_t>(n));
  }
  //! The batch's arrays agree (what speculative_batch builds; a hand-built one passed to a target
  //! helper is checked with this): B slots, roots, trees and request_trees, B + 1 row offsets from 0,
  //! non-decreasing, n_b + 1 rows for entry b. Throws invalid_argument naming `fn`. O(B).
  void validate(std::string_view fn) const {
    const auto B = static_cast<std::size_t>(size());
    require_equal(fn, "batch.roots.size()", B, roots.size());
    require_equal(fn, "batch.request_trees.size()", B, request_trees.size());
    require_equal(fn, "batch.trees.num_requests()", B, static_cast<std::size_t>(trees.num_requests()));
    require_equal(fn, "batch.row_indptr.size()", B + 1, row_indptr.size());
    detail::validate_indptr(fn, "batch", "row_indptr", row_indptr.data(), static_cast<std::int64_t>(B));
    for (std::size_t e = 0; e < B; ++e) {
      require(request_trees[e] != nullptr, fn, "batch.request_trees[b]", "non-null", "nullptr");
      if (!(row_indptr[e + 1] - row_indptr[e] == request_trees[e]->size() + 1)) [[unlikely]]
        throw_invalid_argument(fn, "batch.row_indptr",
                               "n_b + 1 rows for entry " + std::to_string(e) + " (its tree has " +
                                   std::to_string(request_trees[e]->size()) + " nodes)",
                               row_indptr[e + 1] - row_indptr[e]);
    }
  }

 private:
  [[nodiscard]] int checked_entry(int b, std::string_view fn) const {
    require_in_range(fn, "b", b, 0, size() - 1);
    return b;
  }
};

//! The logit element types a batched target may return (verification computes in float).
template <class E>
concept logit_element = std::is_same_v<std::remove_cv_t<E>, float> || std::is_same_v<std::remove_cv_t<E>, double> ||
                        std::is_same_v<std::remove_cv_t<E>, half> || std::is_same_v<std::remove_cv_t<E>, bfloat16>;

//! A tensor_like logits view a batched forward may return: rank 2 [rows, vocab] of float, double,
//! half or bfloat16, in any memory space.
template <class L>
concept logits_view = tensor_like<L> && (L::rank == 2) && logit_element<typename L::element_type>;

//! `forward_batch(const target_batch&)` runs every entry's root and tree in ONE call (one batched
//! forward over batch.total_rows() query rows) and returns the logits as a logits_view
//! [batch.total_rows(), vocab_size()] in the target's own memory (host or device), valid until the
//! target's next forward or commit; it keeps each entry's tree K/V for commit(slots[b], ...). The
//! caller may process the returned rows in place (host float rows are not copied).
template <class T>
concept target_has_forward_batch = requires(T& t, const target_batch& b) {
  { t.forward_batch(b) } -> logits_view;
};

//! `commit_batch(const target_batch&, const verify_batch_result&)` (optional): commits every entry of
//! the last forward_batch at once (entry b's accepted nodes are result.accepted_nodes(b)), validating
//! all entries before writing any, so a rejected call changes no cache. speculative_batch calls it
//! once per step when present, else commit(slots[b], ...) per entry.
template <class T>
concept target_has_commit_batch = requires(T& t, const target_batch& b, const verify_batch_result& res) {
  t.commit_batch(b, res);
};

//! `release(int request)` (optional): the request in this slot has left the batch; free what it holds
//! (pages, buffers). speculative_batch calls it when a request finishes or is aborted, when present.
template <class T>
concept target_has_release = requires(T& t, int r) { t.release(r); };

//! A target model: runs a speculation tree over its committed KV cache and commits accepted tokens.
//! It forwards per request (`forward`) or per batch (`forward_batch`), or both; speculative_batch calls
//! forward_batch once per step when there is one, else `forward` per request through
//! batched_target_adapter (decoder/speculative_batch.hpp).
template <class T>
concept target_model = target_has_geometry<T> && target_has_prefill<T> && target_has_commit<T> &&
                       (target_has_forward<T> || target_has_forward_batch<T>);

//! One static_assert per part of target_model, each naming the missing member.
template <class T>
consteval bool check_target_model() {
  static_assert(target_has_logit_type<T> || target_has_forward_batch<T>,
                "target_model: missing member type 'logit_type' (float or double: the element type of the logit rows "
                "forward writes)");
  // separate asserts so the message names exactly the member that is missing
  static_assert(target_has_vocab_size<T>, "target_model: missing member function 'vocab_size() const' returning int");
  static_assert(target_has_max_requests<T>,
                "target_model: missing member function 'max_requests() const' returning int");
  static_assert(target_has_prefill<T>,
                "target_model: missing member function 'prefill(int request, std::span<const int32_t> prompt)'");
  static_assert(target_has_forward<T> || target_has_forward_batch<T>,
                "target_model: missing member function 'forward(int request, int32_t root, const token_tree&, "
                "std::span<logit_type> logits)' writing tree.size() + 1 rows, or 'forward_batch(const "
                "specdec::target_batch&)' returning a rank-2 tensor_like of float/double/half/bfloat16 logits");
  static_assert(target_has_commit<T>,
                "target_model: missing member function 'commit(int request, std::span<const int32_t> accepted_nodes)'");
  return true;
}

// ---- drafter: draft/drafter.hpp (drafter_has_reset, drafter_has_propose, drafter, check_drafter) -----

// ---- tree_builder ----------------------------------------------------------------------------------

//! `build(const draft_candidates&, token_tree& out)` turns a draft into the tree the target verifies.
template <class B>
concept tree_builder_has_build = requires(B& b, const draft_candidates& c, token_tree& out) { b.build(c, out); };

//! A tree-builder policy.
template <class B>
concept tree_builder = tree_builder_has_build<B>;

template <class B>
consteval bool check_tree_builder() {
  static_assert(tree_builder_has_build<B>,
                "tree_builder: missing member function 'build(const specdec::draft_candidates&, specdec::token_tree& out)'");
  return true;
}

// ---- verifier --------------------------------------------------------------------------------------

//! Everything a verifier may use for one request and step. `logits` are the target's n + 1 rows after
//! the logits processors (sampling_params), float, row-major [n + 1, vocab].
struct verify_input {
  const token_tree& tree;
  strided_view<const float, 2> logits;
  const draft_candidates& draft;  //!< the draft (q rows for chain speculative sampling)
  philox_stream& rng;             //!< this request's and step's stream
};

//! `verify(const verify_input&, verify_result& out)` picks the accepted root path and the bonus token.
template <class V>
concept verifier_has_verify = requires(V& v, const verify_input& in, verify_result& out) { v.verify(in, out); };

//! `is_lossless_for_sampling` (static constexpr bool): true if the output distribution equals the
//! target's at any temperature; false for greedy-only verifiers (the decoder then requires temperature 0).
template <class V>
concept verifier_has_sampling_trait = requires {
  { V::is_lossless_for_sampling } -> std::convertible_to<bool>;
};

//! A verifier policy.
template <class V>
concept verifier = verifier_has_verify<V> && verifier_has_sampling_trait<V>;

//! One request's step as a verifier that processes rows itself sees it: the target's n + 1 rows as
//! the target returned them (not processed), and what processing them needs, row i + 1's context
//! being committed ++ the root path of node i (process_tree_logits' rule).
struct logits_verify_input {
  const token_tree& tree;
  strided_view<const float, 2> logits;       //!< [n + 1, V], unprocessed; the verifier does not write them
  const sampling_params& sampling;           //!< this request's logits processors
  std::span<const std::int32_t> committed;   //!< its committed tokens (prompt and output so far)
  const draft_candidates& draft;
  philox_stream& rng;
};

namespace detail {
template <class M>
struct member_class {};
template <class F, class C>
struct member_class<F C::*> {
  using type = C;
};
//! Whether V's verify and verify_logits are declared by one class: a verifier derived from one with
//! verify_logits that declares its own verify does not inherit the other's verify_logits.
template <class V>
concept verify_and_verify_logits_together = requires { &V::verify; &V::verify_logits; } &&
    std::is_same_v<typename member_class<decltype(&V::verify)>::type,
                   typename member_class<decltype(&V::verify_logits)>::type>;
}  // namespace detail

//! `verify_logits(const logits_verify_input&, verify_result& out)` (optional): verify(...) on rows
//! the verifier processes itself, the same result as processing every row with process_tree_logits
//! and calling verify, and the same refusals for rows that do not overlap (every row still checked;
//! the rows are only read). speculative_batch calls it for host logits instead of processing them: a
//! verifier whose walk reads few rows (every verifier in decoder/verifiers.hpp: the root's and one
//! per accepted node) processes only those. It counts only where the class that declares verify declares it too
//! (a derived verifier with its own verify gets processed rows through that verify).
template <class V>
concept verifier_has_verify_logits = requires(V& v, const logits_verify_input& in, verify_result& out) {
  v.verify_logits(in, out);
} && detail::verify_and_verify_logits_together<V>;

//! One step's batch as a batch verifier sees it (speculative_batch calls verify_batch when the
//! target's forward_batch returned its logits in device memory): the step's B trees as host arrays
//! in the array form of the batched verifiers (verify_greedy_batch's layout), the logits as the
//! target returned them, and each entry's processing parameters and this step's Philox stream.
struct batch_verify_input {
  std::span<const std::int32_t> node_indptr;         //!< [B + 1]
  std::span<const std::int32_t> tokens;              //!< [N]
  std::span<const std::int32_t> parents;             //!< [N], local (-1 = the root)
  strided_view<const float, 2> logits;               //!< [N + B, V]: entry b's rows from node_indptr[b] + b
  std::span<const sampling_params* const> sampling;  //!< [B]: entry b's logits processors
  std::span<const std::uint64_t> seeds, streams;     //!< [B]: entry b's philox_stream(seed, stream) this step
  //! [B]: entry b's committed tokens (prompt and output so far), the penalty context of its rows
  //! (process_tree_logits' `committed`); may be empty when no entry applies a penalty.
  std::span<const std::span<const std::int32_t>> committed = {};
  //! [B]: entry b's draft (its q rows for chain speculative sampling: draft_candidates::chain_q(), in
  //! any memory space); may be empty for verifiers that do not read drafts.
  std::span<const draft_candidates* const> drafts = {};
  //! [B], or empty: entry b's committed tokens as a penalty_history kept by the caller across steps
  //! (their pairs updated as tokens are committed: a copy per step instead of a pass over every
  //! token). When given, an entry that applies a penalty takes its context from histories[b] (not
  //! null, with length() = committed[b].size() when committed is given too); others may be null.
  std::span<const penalty_history* const> histories = {};
};

//! `verify_batch(const batch_verify_input&, verify_batch_result& out)` (optional): decides every
//! entry of a step at once, from logits wherever they live (a device verifier:
//! decoder/device_verifiers.cuh). out holds entry b's accepted local nodes and bonus token, as
//! verify(...) would give them for that entry. speculative_batch calls it for logits in device
//! memory; host logits keep the per-request verify.
template <class V>
concept verifier_has_verify_batch = requires(V& v, const batch_verify_input& in, verify_batch_result& out) {
  v.verify_batch(in, out);
};

template <class V>
consteval bool check_verifier() {
  static_assert(verifier_has_verify<V>,
                "verifier: missing member function 'verify(const specdec::verify_input&, specdec::verify_result& out)'");
  static_assert(verifier_has_sampling_trait<V>,
                "verifier: missing 'static constexpr bool is_lossless_for_sampling' (false = greedy only)");
  return true;
}

}  // namespace specdec
