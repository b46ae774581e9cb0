#pragma once
//! \file speculative_decoder.hpp
//! speculative_decoder<Target, Drafter, TreeBuilder, Verifier>: the draft -> build tree -> verify loop
//! (Leviathan et al. 2023; LongSpec §3; GLIDE §3), composed from four policies (decoder/concepts.hpp).
//!
//! The decoder is a loop over speculative_batch's step (decoder/speculative_batch.hpp, which describes
//! the step): all prompts of a generate_batch call join the batch, and each step drafts for every
//! request still generating, runs the target once for all of them (forward_batch, or the per-request
//! forward through batched_target_adapter), verifies them in parallel and commits.
//! Stops at max_new_tokens, on an EOS token or when the output ends with a stop sequence (the stop
//! token / sequence is kept in the output). Requests of a batch are independent slots r (ragged: each
//! has its own context and tree). An engine that wants requests to join and leave between steps
//! drives speculative_batch itself.
//!
//! Randomness is keyed by request id, never by slot: each request has a caller-supplied 32-bit id
//! (default: its slot), step s of request `id` verifies with philox_stream(seed, stream_id(id, s))
//! and drafts with philox_stream(seed ^ draft_seed_mix, stream_id(id, s)) (the draft stream: a
//! sampling drafter's proposals, independent of the verification draws). So a request's output
//! depends on its prompt, options, seed and id only, not on which slot it runs in or what else is
//! batched with it. Ids within one call must be distinct (two requests with one id would draw the
//! same numbers).
//!
//! Losslessness: with greedy_verifier (temperature 0) the output equals the target's greedy decoding;
//! with sample_and_match_verifier / chain_speculative_verifier it is distributed as the target's
//! autoregressive sampling with the same processors. Drafters and builders only change speed.

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/decoder/concepts.hpp"
#include "specdec/decoder/speculative_batch.hpp"

namespace specdec {

//! One request's output.
struct generation_result {
  std::vector<std::int32_t> tokens;
  stop_reason reason = stop_reason::max_tokens;
  //! Range access so `for (auto t : d.generate(...))` works.
  [[nodiscard]] auto begin() const noexcept { return tokens.begin(); }
  [[nodiscard]] auto end() const noexcept { return tokens.end(); }
};

//! The policy-based decoder (see the file comment): a loop over speculative_batch's step. Holds a
//! reference to the target (and, through the drafter, any draft model); not thread-safe.
template <class Target, class Drafter = ngram_drafter, class TreeBuilder = trie_tree_builder,
          class Verifier = sample_and_match_verifier>
class speculative_decoder {
 public:
  using batch_type = speculative_batch<Target, Drafter, TreeBuilder, Verifier>;

  speculative_decoder(Target& target, Drafter drafter = {}, TreeBuilder builder = {}, Verifier verifier = {})
      : batch_(target, std::move(drafter), std::move(builder), std::move(verifier)) {}

  [[nodiscard]] const decoder_stats& stats() const noexcept { return batch_.stats(); }
  //! The same run through verify/metrics.hpp (per-step acceptances for TokenSwift Eq. 4's alpha via
  //! metrics().alpha(gamma), Distinct-n etc.; phases draft / target / verify in ms).
  [[nodiscard]] const decode_metrics& metrics() const noexcept { return batch_.metrics(); }
  void reset_stats() noexcept { batch_.reset_stats(); }
  [[nodiscard]] Drafter& drafter() noexcept { return batch_.drafter(); }
  //! The step this decoder loops over (its statistics are the decoder's).
  [[nodiscard]] batch_type& batch() noexcept { return batch_; }

  //! Generates for one prompt in request slot 0, drawing random numbers as request `request_id`
  //! (see the file comment).
  generation_result generate(std::span<const std::int32_t> prompt, const generation_options& opt = {},
                             std::uint32_t request_id = 0) {
    const std::vector<std::int32_t> p(prompt.begin(), prompt.end());
    return std::move(
        generate_batch(std::span<const std::vector<std::int32_t>>(&p, 1), opt, std::span<const std::uint32_t>(&request_id, 1))
            .front());
  }

  //! Generates for a ragged batch: prompt i runs in request slot i (prompts.size() <= max_requests())
  //! and draws random numbers as request request_ids[i] (empty: the slot i; otherwise one distinct id
  //! per prompt). All prompts join the batch before the first step; each step runs the target once
  //! for all requests still generating. O(steps x (drafts + one batched target forward + V x rows)).
  std::vector<generation_result> generate_batch(std::span<const std::vector<std::int32_t>> prompts,
                                                const generation_options& opt,
                                                std::span<const std::uint32_t> request_ids = {}) {
    constexpr std::string_view fn = "specdec::speculative_decoder::generate";
    const detail::busy_scope running(generating_, fn, "not called from its own on_tokens callback");
    require(batch_.active() == 0, fn, "batch()", "no request left active by a caller of batch()", batch_.active());
    require(!prompts.empty() && static_cast<int>(prompts.size()) <= batch_.max_requests(), fn, "prompts.size()",
            "in [1, target.max_requests() = " + std::to_string(batch_.max_requests()) + "]", prompts.size());
    require(request_ids.empty() || request_ids.size() == prompts.size(), fn, "request_ids",
            "empty (ids = slots) or one id per prompt (" + std::to_string(prompts.size()) + ")", request_ids.size());
    for (std::size_t i = 0; i < request_ids.size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        require(request_ids[i] != request_ids[j], fn, "request_ids", "distinct ids",
                "id " + std::to_string(request_ids[i]) + " twice");
    for (const auto& p : prompts) batch_.validate_request(fn, p, opt, "prompts[i]");

    const auto R = prompts.size();
    std::vector<generation_result> results(R);
    std::vector<std::uint32_t> ids(R);
    for (std::size_t i = 0; i < R; ++i) ids[i] = request_ids.empty() ? static_cast<std::uint32_t>(i) : request_ids[i];
    // The step's outputs are taken in full before any on_tokens callback runs: a callback that calls
    // into batch() cannot invalidate them, and it is handed tokens the results own.
    std::vector<std::pair<std::size_t, std::size_t>> fresh;  // (prompt, where its new tokens start)
    try {
      // Inside the try: a prefill that throws for a later prompt aborts the ones already added.
      // An empty batch fills slots from 0, so prompt i lands in slot i.
      for (std::size_t i = 0; i < R; ++i) (void)batch_.add_request(ids[i], prompts[i], opt);
      while (batch_.active() > 0) {
        fresh.clear();
        for (const step_output& out : batch_.step()) {
          const auto i = static_cast<std::size_t>(std::find(ids.begin(), ids.end(), out.id) - ids.begin());
          if (i == R) [[unlikely]]
            throw_invalid_argument(fn, "batch()", "only the requests generate started (an on_tokens callback added one)",
                                   "request id " + std::to_string(out.id));
          auto& res = results[i];
          fresh.emplace_back(i, res.tokens.size());
          res.tokens.insert(res.tokens.end(), out.tokens.begin(), out.tokens.end());
          if (out.finished) res.reason = out.reason;
        }
        if (!opt.on_tokens) continue;
        // The batch is held while the callbacks run: a step or an abort from one would drop tokens
        // (or a request) this loop has not taken, and the output would no longer be the target's.
        const detail::busy_scope held = batch_.hold_during_callbacks();
        for (const auto& [i, from] : fresh)
          if (results[i].tokens.size() > from)
            opt.on_tokens(static_cast<int>(i), std::span<const std::int32_t>(results[i].tokens).subspan(from));
      }
    } catch (...) {
      // Leave the batch empty for the next call: every request is aborted even when the target's
      // release throws for one (that error is dropped; the exception in flight is the one reported),
      // and no output of this call is carried into the next (a step whose release threw keeps its
      // finished requests' outputs for the next step; the next call's ids may be the same).
      batch_.drop_carried_outputs();
      for (auto id : ids) {
        try {
          batch_.abort(id);
        } catch (...) {
        }
      }
      throw;
    }
    return results;
  }

 private:
  batch_type batch_;
  bool generating_ = false;  // inside generate / generate_batch (a nested call from on_tokens is refused)
};

}  // namespace specdec
