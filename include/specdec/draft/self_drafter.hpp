#pragma once
//! \file self_drafter.hpp
//! TokenSwift self-drafting (TokenSwift §3.1-3.2, Algorithm 1 lines 8-11) as a drafter policy.
//!
//! The draft model is the target itself reading a partial KV cache (kv/partial_kv.hpp) plus gamma
//! residual heads (draft/residual_heads.hpp): one forward of the root token gives gamma + 1 logit
//! rows l_0 .. l_gamma, row d predicting the token at depth d. The model side is the user's: it
//! implements self_draft_model. This policy turns the rows into candidates:
//!  - alternatives[d]: the top draft_request::width tokens of row d after the request's logits
//!    processors (at temperature 0 its penalties only, whose argmax the target's greedy row takes)
//!    (TokenSwift's "penalized probability p_<=3", line 8; contextual penalty and the
//!    samplers live in sampling/logits_processor.hpp), for cartesian / tokenswift tree builders;
//!  - chain: each row's best token (the path a chain builder verifies);
//!  - sequences: token reutilization (§3.2, line 10): the k most frequent n-grams of the generated
//!    text that begin with a_0 = argmax p_0, from a per-request draft/ngram_pool.hpp.
//! Verification is the decoder's: any lossless verifier over any tree keeps the output exact, so
//! the draft may be as wrong as it likes (TokenSwift Appendix A).

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/draft/detail/draft_rows.hpp"
#include "specdec/draft/draft_candidates.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/draft/ngram_pool.hpp"
#include "specdec/sampling/logits_processor.hpp"

namespace specdec {

// ---- self_draft_model: a target that drafts for itself (TokenSwift) ---------------------------------
// Split into named sub-requirements like the policy concepts (decoder/concepts.hpp), so a compile
// error names the member.

//! `M::logit_type` is float or double (the element type of the rows self_draft writes).
template <class M>
concept self_draft_has_logit_type =
    requires { typename M::logit_type; } &&
    (std::is_same_v<typename M::logit_type, float> || std::is_same_v<typename M::logit_type, double>);

//! `vocab_size()` returns an integer (the width of each row).
template <class M>
concept self_draft_has_vocab_size = requires(const M& m) {
  { m.vocab_size() } -> std::convertible_to<int>;
};

//! `num_draft_heads()` returns gamma >= 0 (rows per draft = gamma + 1).
template <class M>
concept self_draft_has_num_draft_heads = requires(const M& m) {
  { m.num_draft_heads() } -> std::convertible_to<int>;
};

//! `self_draft(int r, std::span<const int32_t> tokens, std::span<logit_type> rows)`: runs the root
//! tokens.back() of request r (tokens = its committed tokens, the root last; the model's cache holds
//! tokens.size() - 1 of them) over the model's partial KV cache and writes gamma + 1 rows of
//! vocab_size() logits, row d = l_d, the prediction for depth d (TokenSwift Eq. 1).
template <class M>
concept self_draft_has_self_draft = self_draft_has_logit_type<M> &&
    requires(M& m, int r, std::span<const std::int32_t> tokens, std::span<typename M::logit_type> rows) {
      m.self_draft(r, tokens, rows);
    };

//! `reset_draft(int r)` forgets request r's partial cache (a new prompt in that slot).
template <class M>
concept self_draft_has_reset_draft = requires(M& m, int r) { m.reset_draft(r); };

//! A target that drafts for itself (TokenSwift): what self_drafter drives.
template <class M>
concept self_draft_model = self_draft_has_logit_type<M> && self_draft_has_vocab_size<M> &&
                           self_draft_has_num_draft_heads<M> && self_draft_has_self_draft<M> &&
                           self_draft_has_reset_draft<M>;

//! One static_assert per part of self_draft_model, each naming the missing member.
template <class M>
consteval bool check_self_draft_model() {
  static_assert(self_draft_has_logit_type<M>,
                "self_draft_model: missing member type 'logit_type' (float or double: the element type of the rows)");
  static_assert(self_draft_has_vocab_size<M>, "self_draft_model: missing member function 'vocab_size() const' returning int");
  static_assert(self_draft_has_num_draft_heads<M>,
                "self_draft_model: missing member function 'num_draft_heads() const' returning int (gamma)");
  static_assert(self_draft_has_self_draft<M>,
                "self_draft_model: missing member function 'self_draft(int request, std::span<const int32_t> tokens, "
                "std::span<logit_type> rows)' writing num_draft_heads() + 1 rows");
  static_assert(self_draft_has_reset_draft<M>, "self_draft_model: missing member function 'reset_draft(int request)'");
  return true;
}

//! Options of self_drafter (defaults: TokenSwift Appendix B.2, Table 11).
struct self_drafter_params {
  int ngram_candidates = 20;  //!< k: n-grams retrieved per step (Table 11); 0 = no token reutilization
  ngram_pool_params ngram{};  //!< n = 4 ("to maintain consistency with multi-token generation", B.2)
  //! Count the prompt's n-grams too. TokenSwift counts the generated sequence only (§3.2: the prompt
  //! was not written by the model, so its phrases predict its output less well).
  bool ngrams_from_prompt = false;
};

//! TokenSwift's self-drafter over a self_draft_model (see the file comment). Per request it keeps an
//! n-gram pool and how many tokens it has fed it. propose() costs one model self_draft plus
//! O((gamma + 1) V) for the rows and O(m + k log k) for the n-gram query.
template <class Model>
class self_drafter {
  static_assert(check_self_draft_model<Model>());

 public:
  //! Ranked (top-k) rows and n-gram sequences: no q rows, no i.i.d. drafts (decoder/pairing.hpp).
  static constexpr draft_output provides = draft_output::none;
  explicit self_drafter(Model& model, self_drafter_params params = {}) : model_(&model), p_(params) {
    constexpr std::string_view fn = "specdec::self_drafter";
    require(p_.ngram_candidates >= 0, fn, "params.ngram_candidates", ">= 0", p_.ngram_candidates);
    require(p_.ngram.n >= 2, fn, "params.ngram.n", ">= 2", p_.ngram.n);
    require(p_.ngram.max_entries >= 1, fn, "params.ngram.max_entries", ">= 1", p_.ngram.max_entries);
  }

  void reset(int r) {
    model_->reset_draft(r);
    if (r >= 0 && static_cast<std::size_t>(r) < state_.size()) state_[static_cast<std::size_t>(r)] = request_state{};
  }

  void propose(const draft_request& req, draft_candidates& out) {
    constexpr std::string_view fn = "specdec::self_drafter::propose";
    out.clear();
    const int r = req.request;
    require(!req.tokens.empty(), fn, "req.tokens.size()", ">= 1 (the root is the last token)", req.tokens.size());
    const int gamma = detail::model_int(model_->num_draft_heads(), fn, "model.num_draft_heads()"),
              V = detail::model_int(model_->vocab_size(), fn, "model.vocab_size()");
    require(gamma >= 0 && gamma < std::numeric_limits<int>::max(), fn, "model.num_draft_heads()",
            "in [0, INT_MAX)", gamma);
    detail::validate_model_draft(req, V, fn);
    require(req.prompt_length >= -1, fn, "req.prompt_length", ">= 0, or -1 (not said)", req.prompt_length);
    feed_ngrams(r, req.tokens, req.prompt_length, V, fn);
    if (req.depth <= 0) return;
    rows_.resize((static_cast<std::size_t>(gamma) + 1) * static_cast<std::size_t>(V));
    model_->self_draft(r, req.tokens, std::span<typename Model::logit_type>(rows_));
    const int depth = std::min(req.depth, gamma + 1);
    // The rows are ranked after the request's processors. At temperature 0 only the penalties: the
    // target's row there is the argmax of its penalized logits (penalties come before the one-hot,
    // logits_processor.hpp), which Algorithm 1 (line 8, "penalized probability"; line 10's a_0) drafts
    // from too; the filters and the one-hot would leave a single token to rank.
    const sampling_params* proc = req.sampling != nullptr && req.sampling->temperature > 0.0f ? req.sampling : nullptr;
    if (req.sampling != nullptr && req.sampling->temperature == 0.0f &&
        (req.sampling->repetition_penalty != 1.0f || req.sampling->contextual_penalty != 1.0f)) {
      penalties_ = sampling_params{.repetition_penalty = req.sampling->repetition_penalty,
                                   .contextual_penalty = req.sampling->contextual_penalty,
                                   .penalty_window = req.sampling->penalty_window,
                                   .contextual_sign_aware = req.sampling->contextual_sign_aware};
      proc = &penalties_;
    }
    context_.assign(req.tokens.begin(), req.tokens.end());
    out.vocab = V;
    row_.resize(static_cast<std::size_t>(V));
    lp_.resize(static_cast<std::size_t>(V));
    for (int d = 0; d < depth; ++d) {
      detail::assign_float_logits(row_, std::span<const typename Model::logit_type>(rows_).subspan(
                                             static_cast<std::size_t>(d) * V, static_cast<std::size_t>(V)),
                                  {fn, "draft logits", d});
      // The penalty window sees the committed tokens and the chain drafted so far (Eq. 3's W).
      if (proc != nullptr) process_logits(std::span<float>(row_), *proc, context_, ws_);
      detail::log_softmax(std::span<const float>(row_), std::span<float>(lp_), fn);
      out.alternatives.emplace_back();
      top_(lp_, req.width, out.alternatives.back());
      out.chain.push_back(out.alternatives.back().front());
      context_.push_back(out.chain.back().token);
    }
    if (p_.ngram_candidates == 0) return;
    // Token reutilization: n-grams starting with a_0 = argmax p_0 (chain[0]), truncated to the depth.
    const auto& st = state_[static_cast<std::size_t>(r)];
    for (const auto& g : st.pool.query(out.chain.front().token, p_.ngram_candidates)) {
      auto& seq = out.sequences.emplace_back();
      for (std::size_t i = 0; i < g.tokens.size() && static_cast<int>(i) < req.depth; ++i) seq.push_back({g.tokens[i], 0.0f});
    }
  }

  //! The n-gram pool of request r. Precondition (checked): request r has proposed at least once.
  [[nodiscard]] const ngram_pool& pool(int r) const {
    if (!(r >= 0 && static_cast<std::size_t>(r) < state_.size())) [[unlikely]]
      throw_invalid_argument("specdec::self_drafter::pool", "request",
                             "a request that has proposed (0 <= request < " + std::to_string(state_.size()) + ")", r);
    return state_[static_cast<std::size_t>(r)].pool;
  }

 private:
  struct request_state {
    ngram_pool pool = ngram_pool(ngram_pool_params{});
    std::size_t fed = 0;     // tokens of the request already pushed (or skipped as prompt)
    bool started = false;    // the first propose after a reset sets the prompt boundary
  };

  // Pushes the request's tokens not yet seen: on the first call after a reset the prompt is skipped
  // (unless ngrams_from_prompt): the first prompt_length tokens, or, when the request does not say
  // (-1), every token of that call; a shorter token list than before means a new sequence.
  void feed_ngrams(int r, std::span<const std::int32_t> tokens, std::int64_t prompt_length, int V, std::string_view fn) {
    if (static_cast<std::size_t>(r) >= state_.size()) state_.resize(static_cast<std::size_t>(r) + 1);
    auto& st = state_[static_cast<std::size_t>(r)];
    const bool restart = st.started && tokens.size() < st.fed;  // a shorter token list: a new sequence
    // the tokens not yet fed, which the pool would hand back as candidates: of the model's
    // vocabulary (checked once each, before any is pushed, and before a new sequence drops the
    // request's pool, so a rejected call leaves it as it was)
    const bool continuing = st.started && !restart;
    const std::size_t first = p_.ngrams_from_prompt ? 0
                              : prompt_length >= 0  ? std::min(static_cast<std::size_t>(prompt_length), tokens.size())
                                                    : tokens.size();
    detail::check_context(tokens.subspan(continuing ? st.fed : first), V, fn,
                          "req.tokens (not yet fed to the n-gram pool)");
    if (restart) st = request_state{};
    if (!st.started) {
      st.pool = ngram_pool(p_.ngram);
      st.started = true;
      st.fed = first;
    }
    if (p_.ngram_candidates == 0) {
      st.fed = tokens.size();
      return;
    }
    for (; st.fed < tokens.size(); ++st.fed) st.pool.push(tokens[st.fed]);
  }

  Model* model_;
  self_drafter_params p_;
  std::vector<request_state> state_;
  std::vector<typename Model::logit_type> rows_;
  std::vector<float> row_, lp_;
  std::vector<std::int32_t> context_;
  sampling_workspace ws_;
  sampling_params penalties_;  // the request's penalties alone (temperature 0)
  detail::top_width_selector top_;
};

}  // namespace specdec
