#pragma once
//! \file speculative_decoder.hpp
//! speculative_decoder<Target, Drafter, TreeBuilder, Verifier>: the draft -> build tree -> verify loop
//! (Leviathan et al. 2023; LongSpec §3; GLIDE §3), composed from four policies (decoder/concepts.hpp).
//!
//! One step for request r with committed tokens x_1..x_L (x_L = the root):
//!   1. drafter.propose({r, x, depth, width}) -> draft_candidates
//!   2. builder.build(candidates) -> token_tree of n nodes (positions L + depth, ancestor mask)
//!   3. target.forward(r, x_L, tree) -> n + 1 logit rows (row 0 at the root, row i + 1 after node i)
//!   4. the rows are processed (sampling_params: penalties, temperature, top-k/p, ...) with the context
//!      each row would have autoregressively (process_tree_logits), then verifier.verify -> accepted path
//!      + bonus token, drawing from philox_stream(seed, stream_id(id, step))
//!   5. target.commit(r, accepted) (the root's and accepted nodes' K/V), emit accepted tokens + bonus
//! Stops at max_new_tokens, on an EOS token or when the output ends with a stop sequence (the stop
//! token / sequence is kept in the output). Requests of a batch are independent slots r (ragged: each
//! has its own context and tree), stepped round-robin.
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
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/decoder/concepts.hpp"
#include "specdec/decoder/draft_candidates.hpp"
#include "specdec/decoder/drafters.hpp"
#include "specdec/decoder/tree_builders.hpp"
#include "specdec/decoder/verifiers.hpp"
#include "specdec/sampling/logits_processor.hpp"
#include "specdec/verify/metrics.hpp"

namespace specdec {

//! Mixed into the seed of the draft stream (see the file comment): the golden-ratio constant, so the
//! draft and verification streams of one (request, step) never coincide.
inline constexpr std::uint64_t draft_seed_mix = 0x9e3779b97f4a7c15ull;

//! Per-generation options.
struct generation_options {
  int max_new_tokens = 256;
  sampling_params sampling{.temperature = 0.0f};  //!< temperature 0 = greedy
  std::uint64_t seed = 0;
  int draft_depth = 4;   //!< chain length each step drafts
  int draft_width = 3;   //!< alternatives per depth the drafter keeps
  std::optional<std::int32_t> eos{};
  std::vector<std::vector<std::int32_t>> stop_sequences{};
  //! Called with each step's newly emitted tokens of a request (after stop / length truncation).
  std::function<void(int request, std::span<const std::int32_t> tokens)> on_tokens{};
};

//! Why a request stopped.
enum class stop_reason : std::uint8_t { max_tokens, eos, stop_sequence };

//! Per-phase wall time in seconds and acceptance counters (accumulated over all requests).
struct decoder_stats {
  double draft_s = 0, build_s = 0, target_s = 0, verify_s = 0, commit_s = 0, prefill_s = 0;
  std::int64_t steps = 0;        //!< target forwards after prefill
  std::int64_t emitted = 0;      //!< tokens emitted (accepted + bonus, before truncation)
  std::int64_t accepted = 0;     //!< draft tokens accepted
  std::int64_t tree_nodes = 0;   //!< draft tokens verified (tree sizes summed)
  std::int64_t draft_depth = 0;  //!< deepest-path lengths summed (the most a step could accept)
  //! tau: mean tokens emitted per target forward (accepted + 1).
  [[nodiscard]] double tau() const noexcept { return steps ? static_cast<double>(emitted) / steps : 0.0; }
  //! alpha: accepted draft tokens over the tree depths drafted (per-position acceptance of the deepest
  //! path). TokenSwift Eq. 4's alpha (per-step acceptances over gamma + 1) is metrics().alpha(gamma).
  [[nodiscard]] double alpha() const noexcept { return draft_depth ? static_cast<double>(accepted) / draft_depth : 0.0; }
  [[nodiscard]] double total_s() const noexcept { return draft_s + build_s + target_s + verify_s + commit_s; }
};

//! One request's output.
struct generation_result {
  std::vector<std::int32_t> tokens;
  stop_reason reason = stop_reason::max_tokens;
  //! Range access so `for (auto t : d.generate(...))` works.
  [[nodiscard]] auto begin() const noexcept { return tokens.begin(); }
  [[nodiscard]] auto end() const noexcept { return tokens.end(); }
};

//! The policy-based decoder (see the file comment). Holds references to the target (and, through the
//! drafter, any draft model); not thread-safe.
template <class Target, class Drafter = ngram_drafter, class TreeBuilder = trie_tree_builder,
          class Verifier = sample_and_match_verifier>
class speculative_decoder {
  static_assert(check_target_model<Target>());
  static_assert(check_drafter<Drafter>());
  static_assert(check_tree_builder<TreeBuilder>());
  static_assert(check_verifier<Verifier>());
  static_assert(check_policy_pairing<Drafter, TreeBuilder, Verifier>());

 public:
  speculative_decoder(Target& target, Drafter drafter = {}, TreeBuilder builder = {}, Verifier verifier = {})
      : target_(&target), drafter_(std::move(drafter)), builder_(std::move(builder)), verifier_(std::move(verifier)) {}

  [[nodiscard]] const decoder_stats& stats() const noexcept { return stats_; }
  //! The same run through verify/metrics.hpp (per-step acceptances for TokenSwift Eq. 4's alpha via
  //! metrics().alpha(gamma), Distinct-n etc.; phases draft / target / verify in ms).
  [[nodiscard]] const decode_metrics& metrics() const noexcept { return metrics_; }
  void reset_stats() noexcept {
    stats_ = {};
    metrics_ = {};
  }
  [[nodiscard]] Drafter& drafter() noexcept { return drafter_; }

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
  //! per prompt). O(steps x (draft + target forward over the tree + V x rows)).
  std::vector<generation_result> generate_batch(std::span<const std::vector<std::int32_t>> prompts,
                                                const generation_options& opt,
                                                std::span<const std::uint32_t> request_ids = {}) {
    constexpr std::string_view fn = "specdec::speculative_decoder::generate";
    require(!prompts.empty() && static_cast<int>(prompts.size()) <= target_->max_requests(), fn, "prompts.size()",
            "in [1, target.max_requests() = " + std::to_string(target_->max_requests()) + "]", prompts.size());
    require(request_ids.empty() || request_ids.size() == prompts.size(), fn, "request_ids",
            "empty (ids = slots) or one id per prompt (" + std::to_string(prompts.size()) + ")", request_ids.size());
    for (std::size_t i = 0; i < request_ids.size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        require(request_ids[i] != request_ids[j], fn, "request_ids", "distinct ids",
                "id " + std::to_string(request_ids[i]) + " twice");
    require(opt.max_new_tokens >= 0, fn, "options.max_new_tokens", ">= 0", opt.max_new_tokens);
    require(opt.draft_depth >= 0, fn, "options.draft_depth", ">= 0", opt.draft_depth);
    require(opt.draft_width >= 1, fn, "options.draft_width", ">= 1", opt.draft_width);
    validate_sampling_params(opt.sampling, fn);
    require(Verifier::is_lossless_for_sampling || opt.sampling.temperature == 0.0f, fn, "options.sampling.temperature",
            "0 with a greedy-only verifier", opt.sampling.temperature);
    const int V = target_->vocab_size();
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      require(!prompts[i].empty(), fn, "prompts[i]", "a non-empty prompt", i);
      for (auto t : prompts[i]) require_in_range(fn, "prompts[i][j]", t, 0, V - 1);
    }
    for (const auto& s : opt.stop_sequences) require(!s.empty(), fn, "options.stop_sequences", "non-empty sequences", "an empty one");

    const int R = static_cast<int>(prompts.size());
    std::vector<request_state> st(static_cast<std::size_t>(R));
    std::vector<generation_result> results(static_cast<std::size_t>(R));
    for (int r = 0; r < R; ++r) {
      auto& s = st[static_cast<std::size_t>(r)];
      s.tokens = prompts[static_cast<std::size_t>(r)];
      s.prompt_len = s.tokens.size();
      s.id = request_ids.empty() ? static_cast<std::uint32_t>(r) : request_ids[static_cast<std::size_t>(r)];
      const auto t0 = clock::now();
      target_->prefill(r, s.tokens);
      drafter_.reset(r);
      stats_.prefill_s += seconds(t0);
      s.active = opt.max_new_tokens > 0;
    }
    bool any = true;
    while (any) {
      any = false;
      for (int r = 0; r < R; ++r) {
        auto& s = st[static_cast<std::size_t>(r)];
        if (!s.active) continue;
        step(r, s, results[static_cast<std::size_t>(r)], opt, V);
        any |= s.active;
      }
    }
    return results;
  }

 private:
  using clock = std::chrono::steady_clock;
  static double seconds(clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); }

  struct request_state {
    std::vector<std::int32_t> tokens;
    std::size_t prompt_len = 0;
    std::uint32_t id = 0;  //!< request id: keys the random streams
    std::uint32_t step = 0;
    bool active = false;
  };

  void step(int r, request_state& s, generation_result& res, const generation_options& opt, int V) {
    philox_stream rng(opt.seed, stream_id(s.id, s.step));
    philox_stream draft_rng(opt.seed ^ draft_seed_mix, stream_id(s.id, s.step));
    ++s.step;
    const int remaining = opt.max_new_tokens - static_cast<int>(s.tokens.size() - s.prompt_len);
    // Drafting past the remaining budget is wasted work: at most remaining - 1 drafts can be kept.
    const int depth = std::min(opt.draft_depth, std::max(0, remaining - 1));
    auto t0 = clock::now();
    draft_request req{r, s.tokens, depth, opt.draft_width, &opt.sampling, &draft_rng};
    if (depth > 0) drafter_.propose(req, cand_);
    else cand_.clear();
    stats_.draft_s += seconds(t0);
    metrics_.add_ms(decode_phase::draft, 1e3 * seconds(t0));

    t0 = clock::now();
    if (depth > 0) builder_.build(cand_, tree_);
    else tree_.clear();
    stats_.build_s += seconds(t0);

    t0 = clock::now();
    const int n = tree_.size();
    raw_.resize(static_cast<std::size_t>(n + 1) * V);
    target_->forward(r, s.tokens.back(), tree_, std::span<typename Target::logit_type>(raw_));
    stats_.target_s += seconds(t0);
    metrics_.add_ms(decode_phase::target, 1e3 * seconds(t0));

    t0 = clock::now();
    rows_.resize(raw_.size());
    for (std::size_t i = 0; i < raw_.size(); ++i) rows_[i] = static_cast<float>(raw_[i]);
    const auto view = make_view<2>(rows_.data(), {n + 1, V});
    process_tree_logits(view, opt.sampling, s.tokens, tree_.tokens(), tree_.parents(), sampling_ws_);
    verify_input in{tree_, strided_view<const float, 2>(view), cand_, rng};
    verifier_.verify(in, result_);
    stats_.verify_s += seconds(t0);
    metrics_.add_ms(decode_phase::verify, 1e3 * seconds(t0));
    metrics_.record(result_);

    t0 = clock::now();
    target_->commit(r, result_.accepted);
    stats_.commit_s += seconds(t0);

    ++stats_.steps;
    stats_.accepted += static_cast<std::int64_t>(result_.accepted.size());
    stats_.emitted += result_.num_emitted();
    stats_.tree_nodes += n;
    stats_.draft_depth += tree_.max_depth() + 1;

    const std::size_t before = s.tokens.size();
    for (auto i : result_.accepted) s.tokens.push_back(tree_.token(i));
    s.tokens.push_back(result_.bonus);
    // Stop conditions, token by token over what this step emitted.
    std::size_t keep = before;
    for (std::size_t i = before; i < s.tokens.size(); ++i) {
      keep = i + 1;
      if (static_cast<int>(keep - s.prompt_len) >= opt.max_new_tokens) {
        s.active = false;
        res.reason = stop_reason::max_tokens;
        break;
      }
      if (opt.eos && s.tokens[i] == *opt.eos) {
        s.active = false;
        res.reason = stop_reason::eos;
        break;
      }
      if (ends_with_stop(s, keep, opt)) {
        s.active = false;
        res.reason = stop_reason::stop_sequence;
        break;
      }
    }
    s.tokens.resize(keep);
    res.tokens.assign(s.tokens.begin() + static_cast<std::ptrdiff_t>(s.prompt_len), s.tokens.end());
    if (opt.on_tokens && keep > before)
      opt.on_tokens(r, std::span<const std::int32_t>(s.tokens).subspan(before, keep - before));
  }

  static bool ends_with_stop(const request_state& s, std::size_t len, const generation_options& opt) {
    for (const auto& stop : opt.stop_sequences) {
      if (len - s.prompt_len < stop.size()) continue;
      if (std::equal(stop.begin(), stop.end(), s.tokens.begin() + static_cast<std::ptrdiff_t>(len - stop.size())))
        return true;
    }
    return false;
  }

  Target* target_;
  Drafter drafter_;
  TreeBuilder builder_;
  Verifier verifier_;
  decoder_stats stats_;
  decode_metrics metrics_;
  draft_candidates cand_;
  token_tree tree_;
  verify_result result_;
  std::vector<typename Target::logit_type> raw_;
  std::vector<float> rows_;
  sampling_workspace sampling_ws_;
};

}  // namespace specdec
