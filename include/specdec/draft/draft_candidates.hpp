#pragma once
//! \file draft_candidates.hpp
//! What a drafter hands a tree builder: the draft's guesses for the tokens after the root.
//!
//! A drafter fills any of three parts (builders use what they need, see decoder/tree_builders.hpp):
//!  - `chain`: the drafter's continuation (depth 0 first) with each token's draft log-probability:
//!    its best guess, or a draw from its processed distribution q when it samples (below);
//!  - `alternatives[d]`: ranked (token, logprob) candidates for depth d, best first, drafted *given
//!    the chain up to d-1* (the shipped drafters list a token once; builders merge repeats);
//!    caterpillar / Cartesian / CAPE trees;
//!  - `sequences`: further whole continuations (other n-gram matches, beams), best first; trie trees.
//! alternatives[d][0] is chain[d] only when the chain is the drafter's top choice: greedy model
//! drafting, the TokenSwift self-drafter (chain = each processed row's best), the n-gram drafter
//! (chain = the most recent match). A model drafter that samples (chain_drafter / longspec_drafter
//! given draft_request::sampling at temperature > 0) draws chain[d] from its processed q, for chain
//! speculative sampling, and drafts each next depth after that draw, still ranking alternatives[d]
//! by its raw log-softmax: chain[d] may then sit anywhere in alternatives[d] or outside it, and
//! alternatives[d + 1] follow chain[d], not alternatives[d][0]. The output law does not depend on it
//! (any verifier of any tree is exact); only acceptance does. Builders read the parts as follows:
//! cartesian_tree_builder ranks depth d by alternatives[d], so under a sampled chain its argmax root
//! carries children drafted after the sampled token (measured better than anchoring on chain[d]; see
//! there); cape_tree_builder expands the sampled chain[d] with the best alternatives[d] other than it,
//! which were ranked given the same prefix (coherent, as GLIDE §4.2's X_i are). Drafting greedily
//! when the verifier does not read q (sample_and_match) builds both trees along the draft's argmax
//! path and accepts as much or more: on tests/decoder's 6-token model at T = 0.9, CAPE's tau rose
//! from 2.22 to 2.29 (chain drafter) and 2.24 to 2.37 (LongSpec), Cartesian [1, 3, 3, 3] stayed
//! within noise.
//! Drafters that sample their chain from a distribution q (chain speculative sampling) also store
//! q's rows: row d = q at depth d (row 0 at the root), matching the verifiers' row convention.
//! Multi-draft drafters (multi_draft_params in draft/multi_draft_sampler.hpp) draw chain and
//! sequences as k independent samples from q (SpecInfer; Jeon et al. 2024), store every draft's q
//! rows and say how the first tokens were drawn (`sampled_as`); multi_draft_verifier reads both.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/sampling/draft_sampling.hpp"
#include "specdec/sampling/logits_processor.hpp"

namespace specdec {

//! One candidate token with its draft log-probability (0 for model-free drafters).
struct draft_token {
  std::int32_t token = 0;
  float logprob = 0.0f;
  friend bool operator==(const draft_token&, const draft_token&) = default;
};

//! A drafter's output for one request and step (see the file comment). Reused across steps: clear()
//! keeps capacity, so steady-state drafting does not allocate.
struct draft_candidates {
  std::vector<draft_token> chain;
  std::vector<std::vector<draft_token>> alternatives;
  std::vector<std::vector<draft_token>> sequences;
  std::vector<float> q;  //!< [chain.size(), vocab] draft probabilities when the chain was sampled; else empty
  int vocab = 0;         //!< row length of q (and of sequence_q's rows)
  //! sequence_q[j]: [sequences[j].size(), vocab] draft probabilities of sequences[j] (row d = q at its
  //! depth d), filled by multi-draft drafters; empty otherwise.
  std::vector<std::vector<float>> sequence_q;
  //! Set when chain and sequences are k independent drafts sampled from q (chain first = first draw):
  //! how the drafts' first tokens were drawn (with or without replacement). Empty otherwise.
  std::optional<draft_sampling> sampled_as;
  //! The chain's q rows in the drafter's own memory, [chain.size(), vocab] float with unit inner
  //! stride, in any memory space: a drafter that keeps its q rows in its own buffer (a model on the
  //! device) sets this instead of copying them into `q`. When its data() is non-null it is what
  //! verifiers read (chain_q()); host verifiers require host-accessible memory. Valid until the
  //! drafter's next propose().
  strided_view<const float, 2> q_rows{};

  //! The chain's q rows: q_rows when set, else a host view of `q` ([0, vocab] when q is empty).
  [[nodiscard]] strided_view<const float, 2> chain_q() const noexcept {
    if (q_rows.data() != nullptr) return q_rows;
    const std::int64_t v = vocab > 0 ? vocab : 0;
    const std::int64_t rows = v > 0 ? static_cast<std::int64_t>(q.size()) / v : 0;
    return strided_view<const float, 2>(q.data(), {rows, v}, {v, 1});
  }

  void clear() noexcept {
    chain.clear();
    for (auto& a : alternatives) a.clear();
    alternatives.clear();
    sequences.clear();
    q.clear();
    sequence_q.clear();
    sampled_as.reset();
    q_rows = {};
  }
  [[nodiscard]] bool empty() const noexcept { return chain.empty() && sequences.empty(); }
};

//! The largest request slot (draft_request::request) a drafter keeps per-request state for. Drafters
//! index that state by slot, so a slot is bounded: an id of 2^31 - 1 would ask for that many states
//! (an out-of-memory kill, not an error). Engines number their slots densely from 0.
inline constexpr int max_request_slot = (1 << 20) - 1;

//! The deepest chain a request may draft per step (draft_request::depth, and
//! generation_options::draft_depth). Far beyond what pays (the papers draft 4-10 levels;
//! adaptive_depth plans up to 64), and it bounds what planning sizes per step and how many forwards
//! a model drafter runs for one proposal.
inline constexpr int max_draft_depth = 4096;

//! The most independent drafts one multi-draft proposal samples (draft_request::width in
//! multi-draft mode): each keeps depth q rows of the vocabulary, so an unbounded width asked for
//! memory without end (an out-of-memory kill, not an error). SpecInfer-style multi-draft uses a few.
inline constexpr int max_multi_drafts = 4096;

//! What the decoder tells a drafter: which request, its committed tokens (prompt and output so far;
//! the last one is the root) and how deep / wide to draft.
struct draft_request {
  int request = 0;
  std::span<const std::int32_t> tokens;
  int depth = 4;  //!< chain length to draft (0 = propose nothing); model drafters refuse > max_draft_depth
  int width = 1;  //!< alternatives to keep per depth (>= 1); in multi-draft mode the drafts, <= max_multi_drafts
  //! When both are set and temperature > 0, model drafters sample their chain from the processed
  //! draft distribution q (stored in draft_candidates::q) instead of taking the argmax.
  const sampling_params* sampling = nullptr;
  philox_stream* rng = nullptr;
  //! How many of `tokens` are the prompt (-1: not said). speculative_batch says it, so that a drafter
  //! first asked after some tokens were generated (depth 0 planned for the first steps) still tells
  //! the prompt from the output; without it a drafter takes the first call's tokens as the prompt.
  std::int64_t prompt_length = -1;
};

}  // namespace specdec
