#pragma once
//! \file lookup_first_drafter.hpp
//! lookup_first_drafter<D>: prompt lookup where the context repeats itself, a model drafter D
//! elsewhere. Each step it first asks an ngram_drafter whose shortest n-gram is `lookup.min_ngram`; a
//! match of at least that many committed tokens proposes what followed it, at no model cost, and the
//! model drafter is not run. Only without such a match does D draft.
//!
//! Why: a long-context draft model costs real time per token (a LongSpec draft's cross-attention reads
//! the target's whole last-layer KV for every token it drafts), while long inputs (code, documents,
//! chat histories) repeat spans that prompt lookup proposes for free and the target often accepts in
//! full. LongSpec's evaluation sets PLD (prompt lookup decoding, Saxena 2023) beside its draft; this
//! combinator runs both, each where it pays. A short match (a byte or two on a byte-level model) says
//! little, so min_ngram is the threshold at which the lookup is trusted over the model.
//!
//! The model drafter D sees every step's committed tokens whenever it runs, so a drafter that absorbs
//! the context incrementally (longspec_drafter) catches up on the tokens of the steps it skipped; it is
//! never asked to propose at depth 0. The decoder's losslessness does not depend on who drafted.
//! `provides` (decoder/pairing.hpp) keeps D's q rows, which its sampled steps fill as D would (a
//! lookup step is deterministic and carries none: verifiers read that as a one-hot q, exactly as for
//! ngram_drafter), and drops i.i.d. drafts: a lookup step is one chain, not k independent draws, so
//! multi_draft_verifier over multi_draft_tree_builder refuses the pair at compile time.
//! The two parts are its draft sources (draft/drafter.hpp): with adaptive_depth, speculative_batch
//! plans lookup steps and model steps each with its own acceptance and drafting cost.

#include <cstdint>
#include <utility>

#include "specdec/draft/draft_candidates.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/draft/ngram_drafter.hpp"

namespace specdec {

template <drafter D>
class lookup_first_drafter {
 public:
  static constexpr draft_output provides =
      provides_all(draft_output_v<D>, draft_output::q_rows) ? draft_output::q_rows : draft_output::none;

  //! The default lookup trusts matches of 3 to 4 tokens (on a byte-level model, 3-byte contexts and up).
  explicit lookup_first_drafter(D model, ngram_drafter lookup = ngram_drafter{.max_ngram = 4, .min_ngram = 3})
      : model_(std::move(model)), lookup_(std::move(lookup)) {}

  void reset(int r) {
    lookup_.reset(r);
    model_.reset(r);
  }

  //! The lookup's proposal when it has one (ngram_drafter::propose's validation applies), else the
  //! model drafter's. Nothing at depth <= 0.
  void propose(const draft_request& req, draft_candidates& out) {
    lookup_.propose(req, out);
    if (req.depth <= 0) return;
    if (!out.empty()) {
      ++lookup_steps_;
      return;
    }
    model_.propose(req, out);
    ++model_steps_;
  }

  //! Draft sources (draft/drafter.hpp): 0 = the lookup, 1 = the model drafter. draft_source(req) is
  //! the part that propose(req) uses at any depth >= 1: whether a lookup match exists does not depend on
  //! the depth. It runs the lookup (indexing the tokens propose would index), not the model drafter.
  static constexpr int draft_sources = 2;
  [[nodiscard]] int draft_source(const draft_request& req) {
    draft_request probe = req;
    probe.depth = 1;
    lookup_.propose(probe, probe_);
    return probe_.empty() ? 1 : 0;
  }

  //! Steps drafted by the lookup and by the model drafter since construction (all requests).
  [[nodiscard]] std::int64_t lookup_steps() const noexcept { return lookup_steps_; }
  [[nodiscard]] std::int64_t model_steps() const noexcept { return model_steps_; }

  [[nodiscard]] D& model() noexcept { return model_; }
  [[nodiscard]] const D& model() const noexcept { return model_; }
  [[nodiscard]] const ngram_drafter& lookup() const noexcept { return lookup_; }

 private:
  D model_;
  ngram_drafter lookup_;
  draft_candidates probe_;  //!< draft_source's scratch
  std::int64_t lookup_steps_ = 0, model_steps_ = 0;
};

}  // namespace specdec
