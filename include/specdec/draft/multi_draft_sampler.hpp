#pragma once
//! \file multi_draft_sampler.hpp
//! Multi-draft mode of the model drafters (chain_drafter, longspec_drafter): multi_draft_params, the
//! option that selects it, and detail::multi_draft_sampler, which draws k independent sampled drafts
//! with their q rows for multi_draft_verifier (see multi_draft_params).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/draft/draft_candidates.hpp"
#include "specdec/sampling/draft_sampling.hpp"
#include "specdec/sampling/logits_processor.hpp"
#include "specdec/sampling/sampler.hpp"

namespace specdec {

//! Multi-draft mode of the model drafters: per step they draw k = draft_request::width independent
//! drafts of draft_request::depth tokens from their draft distribution q (SpecInfer's multi-step
//! speculative sampling; Jeon et al. 2024 for the first tokens drawn without replacement), returned as
//! chain (first draw) + sequences with every draft's q rows (draft_candidates::q / sequence_q) and
//! `sampled_as = mode`. Verify them with multi_draft_tree_builder + multi_draft_verifier.
//! q is the draft's distribution after the request's logits processors; for a greedy request
//! (temperature 0) it is softmax(logits / greedy_temperature) instead, since k argmax drafts would all
//! be equal. Any q keeps the verification exact; q only changes how often drafts are accepted.
struct multi_draft_params {
  draft_sampling mode = draft_sampling::with_replacement;
  float greedy_temperature = 1.0f;  //!< > 0: temperature of q when the request is greedy
};

namespace detail {
//! Draws the k drafts of multi_draft_params (see there) given the root's logits and `feed(token,
//! depth, new_draft)`, which runs the draft model on the token at `depth` of the current draft
//! (new_draft: the first token of a new draft, so the model must first drop the previous draft's
//! speculation) and returns the logits after it. O(k depth (V + one draft-model token)).
struct multi_draft_sampler {
  std::vector<float> processed, q, root_q, masked;
  std::vector<std::int32_t> context, firsts;
  sampling_workspace ws;

  template <class T>
  void q_row(std::span<const T> logits, const draft_request& req, float greedy_temperature) {
    detail::assign_float_logits(processed, logits, {"specdec::multi_draft_sampler", "draft logits"});
    if (req.sampling != nullptr && req.sampling->temperature > 0.0f) {
      process_logits(std::span<float>(processed), *req.sampling, context, ws);
    } else {
      // The processors' temperature step: checked row, and no NaN / +inf from a tiny temperature
      // (it falls back to (l - max) / t, the same softmax).
      const auto scan = detail::checked_logit_scan(processed, {"specdec::multi_draft_sampler", "draft logits"});
      detail::apply_temperature(std::span<float>(processed), greedy_temperature, scan);
    }
    float mx = -std::numeric_limits<float>::infinity();
    for (float x : processed) mx = std::max(mx, x);
    double sum = 0;
    q.resize(processed.size());
    for (std::size_t i = 0; i < q.size(); ++i) {
      const float x = processed[i];
      q[i] = std::isinf(x) && x < 0 ? 0.0f : static_cast<float>(std::exp(static_cast<double>(x) - mx));
      sum += q[i];
    }
    for (auto& x : q) x = static_cast<float>(x / sum);
  }

  //! Throws before the drafter touches its model (so a bad request leaves the draft cache as it was).
  static void validate(const draft_request& req, const multi_draft_params& p, std::string_view fn) {
    require(req.rng != nullptr, fn, "draft_request.rng", "a Philox stream (multi-draft drafting samples)", "nullptr");
    require(p.greedy_temperature > 0.0f && std::isfinite(p.greedy_temperature), fn,
            "multi_draft_params.greedy_temperature", "a finite value > 0", p.greedy_temperature);
    require_draft_sampling(fn, "multi_draft_params.mode", p.mode);
    require(req.width >= 1 && req.width <= max_multi_drafts, fn, "req.width",
            "in [1, max_multi_drafts = " + std::to_string(max_multi_drafts) + "] drafts", req.width);
  }

  template <class T, class Feed>
  void run(std::span<const T> root, const draft_request& req, const multi_draft_params& p, Feed&& feed,
           draft_candidates& out) {
    validate(req, p, "specdec::multi_draft_sampler");
    out.clear();
    if (req.depth <= 0) return;
    const auto V = root.size();
    out.vocab = static_cast<int>(V);
    out.sampled_as = p.mode;
    const std::size_t L = req.tokens.size();
    context.assign(req.tokens.begin(), req.tokens.end());
    q_row(root, req, p.greedy_temperature);
    root_q = q;
    firsts.clear();
    const int k = req.width;
    for (int j = 0; j < k; ++j) {
      std::span<const float> row(root_q);
      if (p.mode == draft_sampling::without_replacement && !firsts.empty()) {
        masked = root_q;
        for (auto t : firsts) masked[static_cast<std::size_t>(t)] = 0.0f;
        double left = 0;
        for (float x : masked) left += x;
        if (!(left > 0.0)) break;  // q's support is exhausted: fewer than k distinct first tokens exist
        row = masked;
      }
      std::int32_t tok = sample_from_probs(row, *req.rng);
      firsts.push_back(tok);
      auto& seq = j == 0 ? out.chain : out.sequences.emplace_back();
      auto& qs = j == 0 ? out.q : out.sequence_q.emplace_back();
      seq.push_back({tok, std::log(root_q[static_cast<std::size_t>(tok)])});
      qs.insert(qs.end(), root_q.begin(), root_q.end());
      context.resize(L);
      context.push_back(tok);
      for (int d = 1; d < req.depth; ++d) {
        q_row(std::span<const T>(feed(tok, d - 1, d == 1)), req, p.greedy_temperature);
        tok = sample_from_probs(q, *req.rng);
        seq.push_back({tok, std::log(q[static_cast<std::size_t>(tok)])});
        qs.insert(qs.end(), q.begin(), q.end());
        context.push_back(tok);
      }
    }
  }
};
}  // namespace detail

}  // namespace specdec
