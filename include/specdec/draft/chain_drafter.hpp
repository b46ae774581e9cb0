#pragma once
//! \file chain_drafter.hpp
//! chain_drafter<M>: any small autoregressive model with a truncatable KV cache (the per-request
//! target_model interface plus cache_length / truncate) drafts a chain, keeping top-width
//! alternatives per depth, greedily or by sampling its processed distribution q; or, constructed with
//! multi_draft_params (draft/multi_draft_sampler.hpp), k independent sampled drafts with their q rows,
//! for multi_draft_verifier.
//! It declares what it can provide besides tokens (`provides`: q rows, i.i.d. drafts; see
//! decoder/pairing.hpp): what some mode provides, q rows only when sampling at temperature > 0, i.i.d.
//! drafts only when constructed with multi_draft_params; both are run-time choices the types cannot express.

#include <concepts>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/draft/detail/draft_rows.hpp"
#include "specdec/draft/draft_candidates.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/draft/multi_draft_sampler.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! A model the chain drafter can drive: a target_model with the per-request forward (decoder/concepts.hpp:
//! logit_type float or double, vocab_size, max_requests, prefill, forward, commit) whose cache can be
//! measured and truncated. Spelled out member by member rather than as `target_model<M> && ...` so that
//! draft/ does not include decoder/; it also asks for the per-request forward that propose() calls,
//! where target_model would accept a forward_batch-only model that never compiled here.
template <class M>
concept truncatable_model =
    requires { typename M::logit_type; } &&
    (std::is_same_v<typename M::logit_type, float> || std::is_same_v<typename M::logit_type, double>) &&
    requires(M& m, const M& cm, int r, int len, std::int32_t root, const token_tree& tree,
             std::span<const std::int32_t> tokens, std::span<typename M::logit_type> logits) {
      { cm.vocab_size() } -> std::convertible_to<int>;
      { cm.max_requests() } -> std::convertible_to<int>;
      m.prefill(r, tokens);
      m.forward(r, root, tree, logits);
      m.commit(r, tokens);
      { cm.cache_length(r) } -> std::convertible_to<int>;
      m.truncate(r, len);
    };

//! Chain drafting with a small autoregressive model. Per step: feed the committed tokens the model has
//! not cached yet, then `depth` one-token forwards (committing each, then truncating back), so the
//! model's cache always equals the committed prefix between steps. O(depth) model steps.
template <truncatable_model Model>
class chain_drafter {
 public:
  //! q rows when sampling; i.i.d. drafts in multi-draft mode (both run-time choices).
  static constexpr draft_output provides = draft_output::q_rows | draft_output::iid_drafts;
  explicit chain_drafter(Model& model) : model_(&model) {}
  //! Multi-draft mode (see multi_draft_params): k = width independent sampled drafts.
  chain_drafter(Model& model, multi_draft_params multi) : model_(&model), multi_(multi) {}
  void reset(int r) { model_->truncate(r, 0); }
  void propose(const draft_request& req, draft_candidates& out) {
    out.clear();
    const int r = req.request;
    constexpr std::string_view fn = "specdec::chain_drafter::propose";
    const auto& t = req.tokens;
    const int L = detail::context_length(req, fn);
    const int V = detail::model_int(model_->vocab_size(), fn, "model.vocab_size()");
    detail::validate_model_draft(req, V, fn);
    if (multi_) detail::multi_draft_sampler::validate(req, *multi_, fn);
    const auto cache_length = [&] { return detail::model_int(model_->cache_length(r), fn, "model.cache_length(request)"); };
    int cached = cache_length();
    require(cached >= 0, fn, "model.cache_length(request)", ">= 0", cached);
    // the tokens fed below: all of them (prefill) when nothing is cached, else t[cached .. L) (catch-up
    // and the root; a cache longer than L - 1 is refused after the prefill check)
    detail::require_fed_tokens(req, static_cast<std::size_t>(std::min(cached, L - 1)), V, fn);
    logits_.resize(static_cast<std::size_t>(V));
    if (cached == 0 && L > 1) model_->prefill(r, t.first(static_cast<std::size_t>(L)));
    cached = cache_length();
    require(cached >= 0, fn, "model.cache_length(request)", ">= 0", cached);
    require(cached <= L - 1, fn, "req.tokens.size()", "no shorter than last step", L);
    if (cached < L - 1) {  // catch up: root = t[cached], chain of the rest, commit all
      token_tree catch_up;
      for (int i = cached + 1; i < L - 1; ++i) catch_up.add(t[static_cast<std::size_t>(i)], i - cached - 2);
      big_.resize(static_cast<std::size_t>(catch_up.size() + 1) * V);
      model_->forward(r, t[static_cast<std::size_t>(cached)], catch_up, big_);
      path_.resize(static_cast<std::size_t>(catch_up.size()));
      for (int i = 0; i < catch_up.size(); ++i) path_[static_cast<std::size_t>(i)] = i;
      model_->commit(r, path_);
    }
    const token_tree empty;
    try {  // the speculation is dropped at the end, also when a step throws (bad draft logits)
      if (multi_ && req.depth > 0) {  // root logits once, then each draft from cache length L
        model_->forward(r, t.back(), empty, logits_);
        model_->commit(r, {});
        root_.assign(logits_.begin(), logits_.end());
        multi_sampler_.run(std::span<const typename Model::logit_type>(root_), req, *multi_,
                           [&](std::int32_t tok, int, bool new_draft) {
                             if (new_draft) model_->truncate(r, L);
                             model_->forward(r, tok, empty, logits_);
                             model_->commit(r, {});
                             return std::span<const typename Model::logit_type>(logits_);
                           },
                           out);
      } else {
        context_.assign(t.begin(), t.end());
        std::int32_t cur = t.back();
        for (int d = 0; d < req.depth; ++d) {
          model_->forward(r, cur, empty, logits_);
          model_->commit(r, {});
          cur = picker_.pick(std::span<const typename Model::logit_type>(logits_), req, context_, out,
                             "specdec::chain_drafter::propose");
          context_.push_back(cur);
        }
      }
    } catch (...) {
      model_->truncate(r, L - 1);
      throw;
    }
    model_->truncate(r, L - 1);
  }

 private:
  Model* model_;
  std::optional<multi_draft_params> multi_;
  std::vector<typename Model::logit_type> logits_, big_, root_;
  std::vector<std::int32_t> path_, context_;
  detail::chain_picker picker_;
  detail::multi_draft_sampler multi_sampler_;
};

}  // namespace specdec
