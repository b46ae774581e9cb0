#pragma once
//! \file speculative_batch.hpp
//! speculative_batch<Target, Drafter, TreeBuilder, Verifier>: the speculative step an engine drives
//! (continuous batching). The engine owns the loop:
//!
//!   specdec::speculative_batch<Target, Drafter, Builder, Verifier> batch{target, drafter};
//!   batch.add_request(id, prompt, options);          // joins at the next step
//!   while (batch.active() > 0)
//!     for (const auto& out : batch.step()) emit(out.id, out.tokens);   // out.finished: it left
//!
//! One step() for the B active requests (request slots r_0 < r_1 < ..., each with committed tokens
//! x_1..x_L, x_L = the root; Leviathan et al. 2023, LongSpec §3, GLIDE §3):
//!   1. per request: drafter.propose({r, x, depth, width}) -> draft_candidates, builder.build -> tree;
//!   2. the trees go into one token_tree_batch (ragged, positions L + depth) and the target runs ONCE
//!      for the whole batch: target.forward_batch(target_batch) -> logits [sum_b (n_b + 1), V]
//!      (row_indptr = the attention's q_indptr, the root counted); a target with only the per-request
//!      forward runs through batched_target_adapter (one forward per request into one buffer);
//!   3. per request, in parallel on the host thread pool: the rows are processed with the context
//!      each row would have autoregressively (process_tree_logits), then the verifier picks the
//!      accepted path and the bonus token, drawing from philox_stream(seed, stream_id(id, step)); a
//!      verifier with verify_logits (verifier_has_verify_logits: greedy_verifier,
//!      sample_and_match_verifier, chain_speculative_verifier, multi_draft_verifier) gets the rows
//!      unprocessed instead and processes only those its walk reads (every row still checked; the
//!      same result);
//!   4. target.commit_batch(target_batch, verify_batch_result) once when the target has it, else
//!      target.commit(r, accepted) per request; emitted tokens appended, stop rules applied.
//! Requests that finished leave (their slot is free for add_request before the next step; the
//! target's optional release(slot) is called); abort(id) removes a request between steps.
//!
//! Logits: the view forward_batch returns carries its memory space. Host rows of float with unit
//! inner stride are processed and verified in place (no copy; the target's buffer is overwritten with
//! the processed rows, except under a verifier with verify_logits, which leaves it as it was); double,
//! half and bfloat16 host rows are converted to float once (a finite double beyond FLT_MAX is refused,
//! naming its row and token, not read as +-inf). Device rows
//! (float, unit inner stride) go to the verifier's verify_batch when it has one
//! (verifier_has_verify_batch: cuda_greedy_verifier in decoder/device_verifiers.cuh), which decides
//! the whole step where the rows are, so only accepted nodes and bonus tokens come back; with any
//! other verifier they are rejected with invalid_argument before anything is committed. The host
//! path checks every row of a step for NaN / +inf (processing reads them all); verify_batch checks
//! the rows its walk reads, as verify_greedy does, so a bad row after a rejected node fails on the
//! host and not on the device.
//!
//! Randomness is keyed by request id and step, never by slot: step s of request `id` verifies with
//! philox_stream(seed, stream_id(id, s)) and drafts with philox_stream(seed ^ draft_seed_mix,
//! stream_id(id, s)), `seed` from that request's options. So a request's output depends on its prompt,
//! options and id only, not on its slot, on the other requests or on when it joined. Active ids are
//! distinct (add_request checks). Exception: a sampled request with generation_options::adaptive_depth
//! drafts to depths chosen from measured times and the batch's shared estimates, so its output keeps
//! its distribution but not its bits (decoder/adaptive_depth.hpp); greedy outputs are unaffected.
//!
//! Losslessness: with greedy_verifier (temperature 0) each request's output equals the target's
//! greedy decoding; with sample_and_match_verifier / chain_speculative_verifier /
//! multi_draft_verifier it is distributed as the target's autoregressive sampling with the same
//! processors. Drafters and builders only change speed.
//!
//! Threading: drafting, tree building, the forward and the commits run on the calling thread, in slot
//! order (drafters and targets keep per-slot state and need not be thread-safe); logits processing
//! and verification run one request per pool task, each with its own copy of the verifier (copied
//! from the one given at construction when the request takes its first step) and a per-thread
//! workspace. Not thread-safe itself.
//!
//! Errors: add_request validates everything before touching the target. An exception from a policy
//! inside step() propagates; the requests keep their committed tokens and step counters (a request's
//! step only counts once it committed), so the next step() redrafts from the same state.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "specdec/core/detail/tree_path.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/core/thread_pool.hpp"
#include "specdec/decoder/adaptive_depth.hpp"
#include "specdec/decoder/concepts.hpp"
#include "specdec/decoder/tree_builders.hpp"
#include "specdec/decoder/verifiers.hpp"
#include "specdec/draft/detail/draft_rows.hpp"  // model_int
#include "specdec/draft/draft_candidates.hpp"
#include "specdec/draft/ngram_drafter.hpp"  // the default drafter
#include "specdec/sampling/logits_processor.hpp"
#include "specdec/sampling/penalty_context.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/metrics.hpp"

namespace specdec {

//! Mixed into the seed of the draft stream (see the file comment): the golden-ratio constant, so the
//! draft and verification streams of one (request, step) never coincide.
inline constexpr std::uint64_t draft_seed_mix = 0x9e3779b97f4a7c15ull;

//! Per-request generation options.
struct generation_options {
  int max_new_tokens = 256;
  sampling_params sampling{.temperature = 0.0f};  //!< temperature 0 = greedy
  std::uint64_t seed = 0;
  int draft_depth = 4;   //!< chain length each step drafts (with adaptive_depth: the largest); <= max_draft_depth
  int draft_width = 3;   //!< alternatives per depth the drafter keeps
  std::optional<std::int32_t> eos{};
  std::vector<std::vector<std::int32_t>> stop_sequences{};
  //! Choose each step's depth in [0, draft_depth] from the measured cost of verifying n tokens on this
  //! machine and this request's running acceptance (decoder/adaptive_depth.hpp); depth 0 is plain
  //! decoding, so speculation that does not pay falls back to it. Greedy outputs are unchanged; sampled
  //! outputs keep their distribution but follow timing-dependent depths (not bit-reproducible).
  bool adaptive_depth = false;
  //! speculative_decoder only: called with each step's newly emitted tokens of a request (after stop /
  //! length truncation), `request` = the prompt's index, once the step's outputs are all taken. It
  //! must not call generate again (refused) nor add requests to batch() (generate then throws).
  //! speculative_batch reports through step().
  std::function<void(int request, std::span<const std::int32_t> tokens)> on_tokens{};
};

//! Why a request stopped.
enum class stop_reason : std::uint8_t { max_tokens, eos, stop_sequence };

//! Per-phase wall time in seconds and acceptance counters. A request's own statistics
//! (speculative_batch::request_stats, step_output::stats) count its own steps; its target_s is the
//! wall time of the batched forwards it took part in. A batch's statistics (stats()) count
//! request-steps (steps = sum over requests) and the wall time of each phase once per step().
struct decoder_stats {
  double draft_s = 0, build_s = 0, target_s = 0, verify_s = 0, commit_s = 0, prefill_s = 0;
  double calibrate_s = 0;        //!< the batch's one-time step cost calibration (adaptive_depth), not in total_s
  std::int64_t steps = 0;        //!< request-steps (target forwards after prefill, per request)
  std::int64_t batch_steps = 0;  //!< batched target calls (step() calls that ran the target)
  std::int64_t emitted = 0;      //!< tokens emitted (accepted + bonus, before truncation)
  std::int64_t accepted = 0;     //!< draft tokens accepted
  std::int64_t tree_nodes = 0;   //!< draft tokens verified (tree sizes summed)
  std::int64_t draft_depth = 0;  //!< deepest-path lengths summed (the most a step could accept)
  //! tau: mean tokens emitted per request-step (accepted + 1).
  [[nodiscard]] double tau() const noexcept { return steps ? static_cast<double>(emitted) / steps : 0.0; }
  //! alpha: accepted draft tokens over the tree depths drafted (per-position acceptance of the deepest
  //! path). TokenSwift Eq. 4's alpha (per-step acceptances over gamma + 1) is metrics().alpha(gamma).
  [[nodiscard]] double alpha() const noexcept { return draft_depth ? static_cast<double>(accepted) / draft_depth : 0.0; }
  [[nodiscard]] double total_s() const noexcept { return draft_s + build_s + target_s + verify_s + commit_s; }
};

//! What step() reports for one request.
struct step_output {
  std::uint32_t id = 0;
  std::vector<std::int32_t> tokens;  //!< emitted this step (after stop / length truncation; may be empty)
  bool finished = false;             //!< the request left the batch after this step
  stop_reason reason = stop_reason::max_tokens;  //!< why, when finished
  decoder_stats stats;               //!< the request's statistics so far (final when finished)
};

namespace detail {
//! target.vocab_size(), read where it is used (a user's target may change it): an int (a wider
//! integer is range-checked by model_int, not narrowed: 2^32 + 4 was decoded as a vocabulary of 4)
//! and >= 1, else invalid_argument naming `fn`.
template <class Target>
[[nodiscard]] int checked_vocab_size(const Target& target, std::string_view fn) {
  const int V = model_int(target.vocab_size(), fn, "target.vocab_size()");
  require(V >= 1, fn, "target.vocab_size()", ">= 1", V);
  return V;
}

//! Marks an object busy for one call that runs user code (a target, drafter, builder, verifier or
//! callback): the same object called again from that code is refused (invalid_argument naming `fn`,
//! `expected` saying from where the call may not come) instead of rewriting the state the outer call
//! is still using. The flag is cleared when the scope ends, by return or by exception.
class busy_scope {
 public:
  busy_scope(bool& busy, std::string_view fn, std::string_view expected) : busy_(busy) {
    require(!busy, fn, "the call", expected, "a re-entrant call");
    busy_ = true;
  }
  ~busy_scope() { busy_ = false; }
  busy_scope(const busy_scope&) = delete;
  busy_scope& operator=(const busy_scope&) = delete;

 private:
  bool& busy_;
};

//! Names request `id` in `failed` (speculative_batch::failed_request) when the scope is left by an
//! exception: around the parts of a step that are one request's own.
class blame_scope {
 public:
  blame_scope(std::optional<std::uint32_t>& failed, std::uint32_t id) noexcept
      : failed_(failed), id_(id), uncaught_(std::uncaught_exceptions()) {}
  ~blame_scope() {
    if (std::uncaught_exceptions() > uncaught_) failed_ = id_;
  }
  blame_scope(const blame_scope&) = delete;
  blame_scope& operator=(const blame_scope&) = delete;

 private:
  std::optional<std::uint32_t>& failed_;
  std::uint32_t id_;
  int uncaught_;
};
}  // namespace detail

//! A target with only the per-request forward as a batched one: forward_batch runs forward(slot,
//! root, tree, rows) per entry into one host buffer [total_rows, V] of logit_type and returns it.
template <class Target>
  requires target_has_forward<Target> && target_has_vocab_size<Target>
class batched_target_adapter {
 public:
  using logit_type = typename Target::logit_type;
  explicit batched_target_adapter(Target& target) noexcept : target_(&target) {}

  strided_view<logit_type, 2> forward_batch(const target_batch& b) {
    constexpr std::string_view fn = "specdec::batched_target_adapter::forward_batch";
    b.validate(fn);
    const std::int64_t V = detail::checked_vocab_size(*target_, fn);
    rows_.resize(static_cast<std::size_t>(b.total_rows()) * static_cast<std::size_t>(V));
    for (int e = 0; e < b.size(); ++e) {
      const auto first = static_cast<std::size_t>(b.row_indptr[static_cast<std::size_t>(e)]);
      const auto count = static_cast<std::size_t>(b.row_indptr[static_cast<std::size_t>(e) + 1]) - first;
      target_->forward(b.slots[static_cast<std::size_t>(e)], b.roots[static_cast<std::size_t>(e)],
                       *b.request_trees[static_cast<std::size_t>(e)],
                       std::span<logit_type>(rows_).subspan(first * static_cast<std::size_t>(V),
                                                            count * static_cast<std::size_t>(V)));
    }
    return make_view<2>(rows_.data(), {static_cast<std::int64_t>(b.total_rows()), V});
  }

 private:
  Target* target_;
  std::vector<logit_type> rows_;
};

//! The engine-driven step (see the file comment). Holds a reference to the target; owns the drafter,
//! the builder and the verifier. Request slots are [0, target.max_requests()).
template <class Target, class Drafter = ngram_drafter, class TreeBuilder = trie_tree_builder,
          class Verifier = sample_and_match_verifier>
class speculative_batch {
  static_assert(check_target_model<Target>());
  static_assert(check_drafter<Drafter>());
  static_assert(check_tree_builder<TreeBuilder>());
  static_assert(check_verifier<Verifier>());
  static_assert(check_policy_pairing<Drafter, TreeBuilder, Verifier>());

 public:
  //! `policy` sets the thread count of the per-request processing and verification.
  explicit speculative_batch(Target& target, Drafter drafter = {}, TreeBuilder builder = {}, Verifier verifier = {},
                             host policy = {})
      : target_(&target), drafter_(std::move(drafter)), builder_(std::move(builder)),
        verifier_(std::move(verifier)), policy_(policy), adapter_(target) {
    const int slots = detail::model_int(target.max_requests(), "specdec::speculative_batch", "target.max_requests()");
    require(slots >= 1, "specdec::speculative_batch", "target.max_requests()", ">= 1", slots);
    req_.resize(static_cast<std::size_t>(slots));
  }

  speculative_batch(const speculative_batch&) = delete;
  speculative_batch& operator=(const speculative_batch&) = delete;

  //! Adds a request: validates the id (not active), the prompt (non-empty, tokens in [0, V)) and the
  //! options, takes the lowest free slot, prefills it (target.prefill) and resets the drafter's state
  //! of that slot. Returns the slot. Throws invalid_argument (nothing changed) when the id is active,
  //! an argument is invalid or no slot is free (free_slots() == 0). When drafter.reset throws after the
  //! prefill, the slot is released (target.release, when the target has it) and stays free.
  int add_request(std::uint32_t id, std::span<const std::int32_t> prompt, const generation_options& opt = {}) {
    constexpr std::string_view fn = "specdec::speculative_batch::add_request";
    const detail::busy_scope busy(busy_, fn, not_from_callbacks);
    require(find(id) < 0, fn, "id", "an id that is not active", id);
    validate_request(fn, prompt, opt);
    int slot = 0;
    while (slot < max_requests() && req_[static_cast<std::size_t>(slot)].used) ++slot;
    require(slot < max_requests(), fn, "free slots", "a free slot (max_requests() = " + std::to_string(max_requests()) +
                                                         " requests active)", 0);
    auto& s = req_[static_cast<std::size_t>(slot)];
    // What can throw is made before the target sees the request (the copies of the options and the
    // prompt: a user's callable may throw when copied, any of them may not get memory), and moved in
    // without a throw after it: a copy that threw after the prefill left the slot marked used but
    // uncounted (a later abort made active() -1) and its prefill unreleased (session-66 review).
    generation_options o = opt;
    o.on_tokens = {};  // the owner's: speculative_decoder calls it, never the batch
    std::vector<std::int32_t> tokens(prompt.begin(), prompt.end());
    decltype(s.src) src;
    src.fill(source_estimates(adaptive_.cost_window));
    static_assert(std::is_nothrow_move_assignable_v<generation_options> &&
                  std::is_nothrow_move_assignable_v<decltype(s.src)>);
    const auto t0 = clock::now();
    target_->prefill(slot, prompt);
    try {
      drafter_.reset(slot);
    } catch (...) {  // the slot stays free: give the target back what its prefill took (a failing release
      try {          // is dropped; the drafter's error is the one reported)
        release(slot);
      } catch (...) {
      }
      throw;
    }
    s.stats = {};
    s.stats.prefill_s = seconds(t0);
    stats_.prefill_s += s.stats.prefill_s;
    s.used = true;
    s.id = id;
    s.step = 0;
    s.opt = std::move(o);
    s.tokens = std::move(tokens);
    s.prompt_len = s.tokens.size();
    s.reported = s.prompt_len;
    s.reason = stop_reason::max_tokens;
    s.verifier.reset();  // a fresh copy of the verifier for the new request (made on its first step)
    if (s.history) s.history->clear();
    s.src = std::move(src);
    s.source = 0;
    ++active_;
    return slot;
  }

  //! Marks the batch busy while its owner runs user code between calls (speculative_decoder's
  //! on_tokens callbacks): add_request, abort, step and calibrate_costs are refused until the
  //! returned scope ends (a step or an abort from there dropped tokens the owner had not taken).
  [[nodiscard]] detail::busy_scope hold_during_callbacks() {
    return detail::busy_scope(busy_, "specdec::speculative_batch::hold_during_callbacks", not_from_callbacks);
  }

  //! Removes request `id` between steps (its slot becomes free; target.release(slot) when the target
  //! has it). Returns false when no such request is active. Other requests are untouched.
  bool abort(std::uint32_t id) {
    const detail::busy_scope busy(busy_, "specdec::speculative_batch::abort", not_from_callbacks);
    const int slot = find(id);
    if (slot < 0) return false;
    leave(slot);
    return true;
  }

  //! Runs one speculative step for every active request (see the file comment) and returns one
  //! step_output per request that was active, in slot order. The span is valid until the next call of
  //! step, add_request or abort. When target.release throws for a finished request, every finished
  //! request has still left the batch and been released, and the first exception propagates; no
  //! output is lost: the next step returns the finished requests' outputs of the step that threw
  //! first (finished, with their last tokens), and the requests that went on report those tokens again
  //! in front of their new ones. When a target without commit_batch throws from commit(slot), the
  //! requests committed before it keep their new tokens: the next step reports them (in front of its
  //! own), and a request a stop rule finished is reported finished then, without another forward; the
  //! throwing request and those after it are as before the step. Room for each request's new tokens is
  //! reserved before the first commit, so whatever throws after a request committed (bad_alloc in the
  //! statistics or the outputs) leaves its tokens in tokens(id), reported by the next step. A drafted tree deeper than the
  //! step's draft depth is refused (invalid_argument) before the target's forward; one of more nodes
  //! than the request has tokens left to generate is cut to its first that many (so a target sized for
  //! prompt + max_new_tokens has room for every forward).
  //! O(sum_b (draft_b + build_b) + target forward + sum_b (n_b + 1) V).
  std::span<const step_output> step() {
    const detail::busy_scope busy(busy_, "specdec::speculative_batch::step", not_from_callbacks);
    out_count_ = carried_;  // finished requests' outputs of a step whose release threw, reported first
    failed_.reset();
    order_.clear();
    for (int r = 0; r < max_requests(); ++r)
      if (req_[static_cast<std::size_t>(r)].used) order_.push_back(r);
    if (order_.empty()) {
      carried_ = 0;
      return {outputs_.data(), out_count_};
    }
    const int V = detail::checked_vocab_size(*target_, "specdec::speculative_batch::step");

    // 1. depths (adaptive_depth: planned over the batch), drafts and trees, per request on this thread
    //    (drafters keep per-slot state)
    plan_depths();
    auto t0 = clock::now();
    running_.clear();
    for (const int r : order_) {
      auto& s = req_[static_cast<std::size_t>(r)];
      if (s.depth < 0) continue;  // nothing left (or stopped in a step that threw): finishes below without a forward
      const detail::blame_scope blame(failed_, s.id);
      const int depth = s.depth;
      const auto td = clock::now();
      s.draft_rng = philox_stream(s.opt.seed ^ draft_seed_mix, stream_id(s.id, s.step));
      const draft_request dr = draft_request_of(r, s, depth);
      if (depth > 0) drafter_.propose(dr, s.cand);
      else s.cand.clear();
      const auto tb = clock::now();
      if (depth > 0) builder_.build(s.cand, s.tree);
      else s.tree.clear();
      // No deeper than asked: the step's depth keeps a request within prompt + max_new_tokens (the
      // capacity a target is sized for) and is what the cost plan priced. A drafter or builder (a
      // user's) that returns more levels is an error, not a longer commit.
      if (s.tree.max_depth() >= depth) [[unlikely]]
        throw_invalid_argument("specdec::speculative_batch::step", "drafted tree",
                               "at most the step's draft depth " + std::to_string(depth) + " of levels (request id " +
                                   std::to_string(s.id) + ")",
                               s.tree.max_depth() + 1);
      // No wider than the room left: the forward holds the root and the tree's nodes after the cache,
      // tokens.size() + nodes <= prompt + max_new_tokens, so at most remaining(s) nodes. A chain never
      // needs the cut (nodes <= depth < remaining); a wide tree near a request's end does (a trie of
      // width 3 at depth 4 has up to 12 nodes), and a target sized for max_new_tokens refused it on
      // every retry. The first remaining(s) nodes are a tree (parents come first), and verifying it is
      // exact as the whole one: any tree the target's draws do not choose, for verifiers of any tree;
      // i.i.d. drafts (one unmerged branch each, in draw order, lengths set by the depth) keep their
      // first drafts whole and a prefix of the next, a cut no drawn value decides.
      if (const int room = remaining(s); s.tree.size() > room) s.tree.truncate(room);
      // A drafter or tree builder (the library's or a user's) must propose tokens of the target's
      // vocabulary, checked before the target's forward indexes its embedding rows with them.
      detail::check_context(s.tree.tokens(), V, "specdec::speculative_batch::step", "drafted tree");
      check_root(s, V, "specdec::speculative_batch::step");
      s.phase_draft = std::chrono::duration<double>(tb - td).count();
      s.phase_build = seconds(tb);
      running_.push_back(r);
    }
    const double draft_build = seconds(t0);

    // 2. one batched target forward
    trees_.clear();
    slots_.clear();
    roots_.clear();
    tree_ptrs_.clear();
    row_indptr_.assign(1, 0);
    for (const int r : running_) {
      auto& s = req_[static_cast<std::size_t>(r)];
      trees_.push_back(s.tree, static_cast<std::int32_t>(s.tokens.size()));
      slots_.push_back(r);
      roots_.push_back(s.tokens.back());
      tree_ptrs_.push_back(&s.tree);
      row_indptr_.push_back(row_indptr_.back() + s.tree.size() + 1);
    }
    double target_s = 0, verify_s = 0, commit_s = 0;
    if (!running_.empty()) {
      const target_batch tb{slots_, roots_, trees_, row_indptr_, tree_ptrs_};
      t0 = clock::now();
      float_rows rows = forward(tb, V);
      target_s = seconds(t0);

      // 3. processing and verification: device logits by the verifier's verify_batch at once, host
      //    logits one request per pool task
      t0 = clock::now();
      if (rows.on_device()) {
        verify_on_device(rows.device, V);
      } else {
        const auto count = static_cast<std::int64_t>(running_.size());
        const auto body = [&](std::int64_t b) {
          auto& s = req_[static_cast<std::size_t>(running_[static_cast<std::size_t>(b)])];
          s.threw = true;  // until its verification returns (read after a failed parallel_for)
          const auto tv = clock::now();
          const std::int32_t first = row_indptr_[static_cast<std::size_t>(b)];
          const std::int64_t n = s.tree.size();
          const strided_view<float, 2> view(rows.data + first * rows.row_stride, {n + 1, std::int64_t{V}},
                                            {rows.row_stride, 1});
          philox_stream rng(s.opt.seed, stream_id(s.id, s.step));
          if constexpr (verifier_has_verify_logits<Verifier>) {  // the verifier processes the rows it reads
            const logits_verify_input in{s.tree, strided_view<const float, 2>(view), s.opt.sampling, s.tokens, s.cand, rng};
            verifier_for(s).verify_logits(in, s.result);
          } else {
            thread_local sampling_workspace ws;  // one per pool thread, not per slot (V floats each)
            process_tree_logits(view, s.opt.sampling, s.tokens, s.tree.tokens(), s.tree.parents(), ws);
            verify_input in{s.tree, strided_view<const float, 2>(view), s.cand, rng};
            verifier_for(s).verify(in, s.result);
          }
          check_verify_result(s.result, s.tree, V);  // before the target commits or a token is emitted
          s.phase_verify = seconds(tv);
          s.threw = false;
        };
        for (const int r : running_) req_[static_cast<std::size_t>(r)].threw = false;
        try {
          if constexpr (std::is_copy_constructible_v<Verifier>) {
            parallel_for(policy_, count, body);
          } else {
            for (std::int64_t b = 0; b < count; ++b) body(b);
          }
        } catch (...) {
          for (const int r : running_)  // the first request whose verification threw (or never ran to its end)
            if (req_[static_cast<std::size_t>(r)].threw) {
              failed_ = req_[static_cast<std::size_t>(r)].id;
              break;
            }
          throw;
        }
      }
      verify_s = seconds(t0);

      // 4. commits, on this thread (one commit_batch when the target has it); each request's step
      //    counts once its commit returned. Every request's token list has room for what its commit
      //    emits before the first commit: once the target has committed, appending the tokens cannot
      //    fail (a bad_alloc there left the target's cache ahead of the tokens the next step drafted
      //    from), and they are in the list before anything that may still allocate (the statistics).
      t0 = clock::now();
      for (const int r : running_) {
        auto& s = req_[static_cast<std::size_t>(r)];
        s.tokens.reserve(s.tokens.size() + s.result.accepted.size() + 1);
      }
      if constexpr (target_has_commit_batch<Target>) {
        committed_.accepted_indptr.assign(1, 0);
        committed_.accepted.clear();
        committed_.bonus.clear();
        for (const int r : running_) committed_.push_back(req_[static_cast<std::size_t>(r)].result);
        target_->commit_batch(tb, committed_);
      }
      [[maybe_unused]] const double batch_commit_s = seconds(t0);
      for (const int r : running_) {
        auto& s = req_[static_cast<std::size_t>(r)];
        if constexpr (target_has_commit_batch<Target>) {
          s.phase_commit = batch_commit_s;  // the whole batch's commit, as target_s is the whole forward
        } else {
          const auto tc = clock::now();
          const detail::blame_scope blame(failed_, s.id);
          target_->commit(r, s.result.accepted);
          s.phase_commit = seconds(tc);
        }
        s.emitted_begin = s.tokens.size();
        for (auto i : s.result.accepted) s.tokens.push_back(s.tree.token(i));  // reserved: no allocation
        s.tokens.push_back(s.result.bonus);
        // Committed: should a later request's commit throw, the next step reports these tokens (from
        // `reported`) and, when a stop rule fired (finished_now), finishes the request without
        // another forward.
        s.tokens.resize(apply_stop_rules(s, s.emitted_begin));
        account(s, target_s);
      }
      commit_s = seconds(t0);
      ++stats_.batch_steps;
      learn(target_s, verify_s + commit_s);
    }
    double build_total = 0;  // drafting and building interleave per request: split by their own clocks
    for (const int r : running_) build_total += req_[static_cast<std::size_t>(r)].phase_build;
    stats_.draft_s += draft_build - build_total;
    stats_.build_s += build_total;
    stats_.target_s += target_s;
    stats_.verify_s += verify_s;
    stats_.commit_s += commit_s;
    metrics_.add_ms(decode_phase::draft, 1e3 * (draft_build - build_total));
    metrics_.add_ms(decode_phase::target, 1e3 * target_s);
    metrics_.add_ms(decode_phase::verify, 1e3 * verify_s);

    // 5. outputs; finished requests leave
    leaving_.clear();
    std::size_t k = 0;
    for (const int r : order_) {
      auto& s = req_[static_cast<std::size_t>(r)];
      step_output& out = next_output();
      out.id = s.id;
      out.tokens.clear();
      // Tokens since the last report: this step's, plus any a step that threw after this request's
      // commit had appended.
      out.tokens.assign(s.tokens.begin() + static_cast<std::ptrdiff_t>(s.reported), s.tokens.end());
      s.reported = s.tokens.size();
      if (k < running_.size() && running_[k] == r) {
        ++k;
        out.finished = s.finished_now;
      } else {
        out.finished = true;  // nothing left to generate before this step (max_new_tokens = 0), or stopped
        if (!s.finished_now) s.reason = stop_reason::max_tokens;
      }
      out.reason = s.reason;
      out.stats = s.stats;
      if (out.finished) vacate(r), leaving_.push_back(r);
    }
    // every finished request has left before the target hears of any (a throwing release must not
    // leave a finished request generating); the first exception is rethrown after every release
    std::exception_ptr failed;
    for (const int r : leaving_) {
      try {
        release(r);
      } catch (...) {
        if (!failed) failed = std::current_exception();
      }
    }
    if (failed) {
      // Nothing reported is lost: the requests that go on report these tokens again, and the finished
      // ones' outputs (left the batch, so no later step would see them) move to the front and are
      // carried into the next step's outputs.
      for (std::size_t i = carried_; i < out_count_; ++i)
        if (const step_output& o = outputs_[i]; !o.finished)
          req_[static_cast<std::size_t>(find(o.id))].reported -= o.tokens.size();
      const auto first = outputs_.begin(), last = first + static_cast<std::ptrdiff_t>(out_count_);
      carried_ = static_cast<std::size_t>(std::stable_partition(first, last, [](const step_output& o) { return o.finished; }) - first);
      std::rethrow_exception(failed);
    }
    carried_ = 0;
    return {outputs_.data(), out_count_};
  }

  //! Forgets the outputs that a step whose target.release threw carried for the next step (finished
  //! requests' last tokens; see step). For an engine that gives up on the batch after the exception,
  //! as speculative_decoder does, so that a later step does not report requests of the abandoned run.
  void drop_carried_outputs() noexcept { carried_ = 0; }
  //! Outputs the next step() returns before its own: finished requests' outputs of a step whose
  //! target.release threw. Nonzero means "call step() again" even when active() is 0.
  [[nodiscard]] std::size_t carried_outputs() const noexcept { return carried_; }

  //! After step() threw: the id of a request whose own part of the step threw (its drafter, tree
  //! builder or drafted-tree checks, its verification, or its per-request commit; the first in slot
  //! order when several verifications did), so that an engine can abort that request and step the
  //! others again instead of failing them all. Empty when the failure was the batch's (the target's
  //! forward or commit_batch, a release, a device verify_batch, an allocation between phases) or the
  //! last step did not throw. What a failed step leaves is as step() says.
  [[nodiscard]] std::optional<std::uint32_t> failed_request() const noexcept { return failed_; }

  //! Active requests (added, not finished or aborted).
  [[nodiscard]] int active() const noexcept { return active_; }
  //! Free request slots (add_request succeeds while > 0).
  [[nodiscard]] int free_slots() const noexcept { return max_requests() - active_; }
  [[nodiscard]] int max_requests() const noexcept { return static_cast<int>(req_.size()); }
  //! True when request `id` is active.
  [[nodiscard]] bool contains(std::uint32_t id) const noexcept { return find(id) >= 0; }
  //! The slot of active request `id` (throws invalid_argument when it is not active).
  [[nodiscard]] int slot_of(std::uint32_t id) const {
    const int slot = find(id);
    require(slot >= 0, "specdec::speculative_batch::slot_of", "id", "an active request", id);
    return slot;
  }
  //! Active request `id`'s committed tokens (prompt, then output).
  [[nodiscard]] std::span<const std::int32_t> tokens(std::uint32_t id) const {
    return req_[static_cast<std::size_t>(slot_of(id))].tokens;
  }
  //! Active request `id`'s statistics so far.
  [[nodiscard]] const decoder_stats& request_stats(std::uint32_t id) const {
    return req_[static_cast<std::size_t>(slot_of(id))].stats;
  }
  //! The batch's statistics (see decoder_stats) and metrics (verify/metrics.hpp: per request-step
  //! acceptances; phase times once per step()).
  [[nodiscard]] const decoder_stats& stats() const noexcept { return stats_; }
  [[nodiscard]] const decode_metrics& metrics() const noexcept { return metrics_; }
  void reset_stats() noexcept {
    stats_ = {};
    metrics_ = {};
  }
  [[nodiscard]] Drafter& drafter() noexcept { return drafter_; }
  [[nodiscard]] TreeBuilder& builder() noexcept { return builder_; }

  //! Parameters of the adaptive depth control (requests with generation_options::adaptive_depth).
  void set_adaptive_options(const adaptive_depth_options& o) {
    o.validate("specdec::speculative_batch::set_adaptive_options");
    adaptive_ = o;
    if (cost_.empty()) cost_ = step_cost_curve(o.cost_window);
    for (auto& b : batch_src_) b.nodes = b.draft_time = b.resumed_time = per_depth_median(o.cost_window);
    verify_per_row_ = running_median(o.cost_window);
  }
  [[nodiscard]] const adaptive_depth_options& adaptive_options() const noexcept { return adaptive_; }
  //! The measured cost of a step by target rows. Empty until the first step with an adaptive request
  //! calibrates it (or calibrate_costs / set_cost_curve); refined by every step while
  //! adaptive_options().learn_costs. Keep it (to_text) and give it to the next batch on this machine
  //! (set_cost_curve) to skip the calibration.
  [[nodiscard]] const step_cost_curve& cost_curve() const noexcept { return cost_; }
  void set_cost_curve(step_cost_curve c) { cost_ = std::move(c); }
  //! Times target forwards of 1, 2, 3, 5, 9, 17, ... rows on active request `id`'s slot, up to
  //! adaptive_options().calibration_rows and to the rows of the longest chain the request may still
  //! draft (its tokens left to generate: the room a target sized for max_new_tokens has), and adds
  //! the fastest of calibration_reps runs of each as one measurement of that row count to
  //! cost_curve(). The request's state is unchanged (the forwards are not committed). Adds its time to
  //! stats().calibrate_s. Throws invalid_argument when `id` is not active or has nothing left to
  //! generate.
  void calibrate_costs(std::uint32_t id) {
    const detail::busy_scope busy(busy_, "specdec::speculative_batch::calibrate_costs", not_from_callbacks);
    const int slot = slot_of(id);
    require(remaining(req_[static_cast<std::size_t>(slot)]) >= 1, "specdec::speculative_batch::calibrate_costs", "id",
            "a request with tokens left to generate", id);
    calibrate(slot);
  }
  [[nodiscard]] Target& target() noexcept { return *target_; }

  //! The validation add_request applies to a prompt and its options (speculative_decoder checks a
  //! whole batch with it before adding any request).
  //! `prompt_arg` names the prompt in messages.
  void validate_request(std::string_view fn, std::span<const std::int32_t> prompt, const generation_options& opt,
                        std::string_view prompt_arg = "prompt") const {
    require(opt.max_new_tokens >= 0, fn, "options.max_new_tokens", ">= 0", opt.max_new_tokens);
    require(opt.draft_depth >= 0 && opt.draft_depth <= max_draft_depth, fn, "options.draft_depth",
            "in [0, max_draft_depth = " + std::to_string(max_draft_depth) + "]", opt.draft_depth);
    require(opt.draft_width >= 1, fn, "options.draft_width", ">= 1", opt.draft_width);
    require(!opt.adaptive_depth || opt.draft_depth <= 64, fn, "options.draft_depth",
            "<= 64 with adaptive_depth (the depths it plans over)", opt.draft_depth);
    validate_sampling_params(opt.sampling, fn);
    require(Verifier::is_lossless_for_sampling || opt.sampling.temperature == 0.0f, fn, "options.sampling.temperature",
            "0 with a greedy-only verifier", opt.sampling.temperature);
    for (const auto& seq : opt.stop_sequences)
      require(!seq.empty(), fn, "options.stop_sequences", "non-empty sequences", "an empty one");
    require(!prompt.empty(), fn, prompt_arg, "a non-empty prompt", prompt.size());
    const int V = detail::checked_vocab_size(*target_, fn);
    for (auto t : prompt) require_in_range(fn, std::string(prompt_arg) + "[j]", t, 0, V - 1);
  }

 private:
  using clock = std::chrono::steady_clock;
  //! A verifier (the library's or a user's) must accept a root path of the tree, in path order, and
  //! add a bonus token of the vocabulary: the target commits those rows and the tokens are emitted.
  static void check_verify_result(const verify_result& result, const token_tree& tree, int vocab) {
    constexpr std::string_view fn = "specdec::speculative_batch::step";
    detail::validate_accepted_path(result.accepted, tree.size(), tree.parents(), fn, "verify_result.accepted");
    if (!(result.bonus >= 0 && result.bonus < vocab)) [[unlikely]]
      throw_invalid_argument(fn, "verify_result.bonus", "a token in [0, vocab_size() = " + std::to_string(vocab) + ")",
                             result.bonus);
  }
  static double seconds(clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); }

  //! The number of draft sources of the drafter (draft/drafter.hpp; 1 unless it declares them).
  static constexpr int sources = draft_sources_v<Drafter>;
  //! The adaptive depth's running estimates of one draft source, per request (its own) and for the
  //! batch (every request's prior).
  struct source_estimates {
    explicit source_estimates(int window = 9) : nodes(window), draft_time(window), resumed_time(window) {}
    acceptance_estimate acceptance;
    per_depth_median nodes;       //!< tree size by requested depth (every drafting step)
    per_depth_median draft_time;  //!< drafting seconds of steady steps (right after one that drafted), by depth
    //! The whole drafting seconds of resumed steps (catch-up included), by requested depth: the price of a
    //! source while no steady step is measured (one that never drafts twice in a row, such as the model
    //! behind lookup_first_drafter, may never have one).
    per_depth_median resumed_time;
    //! A resumed source's catch-up: extra drafting seconds per skipped token, and the most a catch-up
    //! took, the first draft's pass over the prompt included (LongSpec's draft re-reads at most its
    //! window, so the cost stops growing); 0 = not measured.
    double catch_up_rate = 0, catch_up_max = 0;
    // (per request)
    std::size_t drafted_len = 0;  //!< tokens.size() when this source last drafted (0: never)
    bool drafted_last = false;    //!< it drafted the previous step (drafting times of resumed steps differ)
    //! Exploration, per source: the budget set aside on this source's steps (seconds), and whether its
    //! next probe goes shallower. Per source, because a source's probes are what refresh its estimates:
    //! with one purse per request, the cheap probes of a source planned at full depth (one level
    //! shallower) spent every saving, and a source priced out by one slow step was never probed again.
    double explore_saved = 0;
    bool explore_down = false;
  };

  struct request_state {
    bool used = false;
    bool finished_now = false;  //!< a stop rule fired in its last committed step (it leaves once reported)
    bool threw = false;         //!< its verification this step has not returned (failed_request)
    std::uint32_t id = 0;    //!< request id: keys the random streams
    std::uint32_t step = 0;  //!< committed steps
    generation_options opt;
    std::vector<std::int32_t> tokens;
    std::size_t prompt_len = 0;
    stop_reason reason = stop_reason::max_tokens;
    decoder_stats stats;
    // per-step scratch, reused
    draft_candidates cand;
    token_tree tree;
    verify_result result;
    philox_stream draft_rng{0, 0};
    std::optional<Verifier> verifier;  //!< this slot's copy (parallel verification)
    //! tokens' penalty pairs, kept across steps for a verifier of device logits (batch_verify_input::histories)
    std::optional<penalty_history> history;
    std::size_t emitted_begin = 0;  //!< tokens[emitted_begin ..) were emitted by the last step
    std::size_t reported = 0;       //!< tokens[0 .. reported) were in a step_output (the prompt counts)
    double phase_draft = 0, phase_build = 0, phase_verify = 0, phase_commit = 0;
    int depth = -1;  //!< this step's draft depth (-1: nothing left to generate)
    // adaptive depth (decoder/adaptive_depth.hpp); the running estimates are kept for every request,
    // one set per draft source
    std::array<source_estimates, sources> src;
    int source = 0;            //!< the draft source of this step (drafter's draft_source; 0 with one)
    bool probing = false;      //!< this step explores a depth other than the planned one
    bool probe_down = false;   //!< this step's probe goes shallower
    int planned = 0;           //!< the planned depth (before exploring)
  };

  //! The step's logits: host float rows with unit inner stride (the target's own buffer or rows_),
  //! or, for a batch verifier, the target's float rows in device memory as returned (`device`).
  struct float_rows {
    float* data = nullptr;
    std::int64_t row_stride = 0;
    strided_view<const float, 2> device{};
    [[nodiscard]] bool on_device() const noexcept { return device.data() != nullptr; }
  };

  // Runs the target once and returns processable rows, checking the view's shape and memory space.
  float_rows forward(const target_batch& tb, int V) {
    constexpr std::string_view fn = "specdec::speculative_batch::step";
    if constexpr (target_has_forward_batch<Target>) return take_rows(fn, target_->forward_batch(tb), tb, V);
    else return take_rows(fn, adapter_.forward_batch(tb), tb, V);
  }

  template <logits_view L>
  float_rows take_rows(std::string_view fn, const L& logits, const target_batch& tb, int V) {
    using E = std::remove_cv_t<typename L::element_type>;
    const auto view = as_view(logits);
    if constexpr (verifier_has_verify_batch<Verifier>) {
      if (!host_accessible(view.space())) {  // the verifier decides the batch where the rows are
        require_shape(fn, "target logits", view, {std::int64_t{tb.total_rows()}, std::int64_t{V}});
        if constexpr (!std::is_same_v<E, float>)
          throw_invalid_argument(fn, "target logits",
                                 "float elements (device logits are verified as the target returns them)",
                                 std::to_string(sizeof(E)) + "-byte elements");
        else {
          require(view.stride(1) == 1 && view.stride(0) >= V, fn, "target logits",
                  "rows of unit inner stride, at least vocab_size() apart", view.stride(0));
          require(view.data() != nullptr, fn, "target logits", "a non-null data pointer", "nullptr");
          return {nullptr, 0, strided_view<const float, 2>(view.data(), {tb.total_rows(), std::int64_t{V}},
                                                           {view.stride(0), 1}, view.space())};
        }
      }
    }
    require(host_accessible(view.space()), fn, "target logits",
            "host-accessible memory (device logits need a verifier with verify_batch, e.g. cuda_greedy_verifier in "
            "decoder/device_verifiers.cuh)",
            name(view.space()));
    require_shape(fn, "target logits", view, {std::int64_t{tb.total_rows()}, std::int64_t{V}});
    if constexpr (std::is_same_v<typename L::element_type, float>) {
      if (view.stride(1) == 1 && view.stride(0) >= V) return {view.data(), view.stride(0)};  // in place
    }
    rows_.resize(static_cast<std::size_t>(tb.total_rows()) * static_cast<std::size_t>(V));
    if constexpr (std::is_same_v<E, double>) {
      // through assign_float_logits: a finite double beyond FLT_MAX is refused naming the value the
      // target returned (narrowed, it read as +-inf and failed as "inf" or passed as a masked token)
      for (std::int64_t i = 0; i < tb.total_rows(); ++i) {
        std::span<const double> row;
        if (view.stride(1) == 1) {
          row = {view.data() + i * view.stride(0), static_cast<std::size_t>(V)};
        } else {  // gathered
          row_in_.resize(static_cast<std::size_t>(V));
          for (std::int64_t v = 0; v < V; ++v) row_in_[static_cast<std::size_t>(v)] = view(i, v);
          row = row_in_;
        }
        detail::assign_float_logits(row_out_, row, {fn, "target logits", i});
        std::copy(row_out_.begin(), row_out_.end(), rows_.begin() + i * V);
      }
    } else {  // half / bfloat16: always within float's range
      for (std::int64_t i = 0; i < tb.total_rows(); ++i)
        for (std::int64_t v = 0; v < V; ++v)
          rows_[static_cast<std::size_t>(i * V + v)] = static_cast<float>(static_cast<E>(view(i, v)));
    }
    return {rows_.data(), V};
  }

  //! Step 3 for logits in device memory: one verify_batch over the running requests (no processing
  //! on the host: the verifier applies what it supports, or refuses), then each result is checked as
  //! the per-request path checks it, before the target commits or a token is emitted.
  void verify_on_device([[maybe_unused]] const strided_view<const float, 2>& logits, [[maybe_unused]] int V) {
    if constexpr (verifier_has_verify_batch<Verifier>) {
      const auto tv = clock::now();
      batch_sampling_.clear(), batch_seeds_.clear(), batch_streams_.clear(), batch_committed_.clear();
      batch_drafts_.clear(), batch_histories_.clear();
      for (const int r : running_) {
        auto& s = req_[static_cast<std::size_t>(r)];
        // a request with a penalty: its pairs brought up to date with the tokens committed since its
        // last step (tokens only grow between steps; a stop rule cuts only what the step appended)
        const penalty_history* h = nullptr;
        if (detail::applies_penalty(s.opt.sampling)) {
          if (!s.history || s.history->vocab() != V) s.history.emplace(static_cast<std::int32_t>(V));
          if (s.history->length() > static_cast<std::int64_t>(s.tokens.size())) s.history->clear();
          s.history->append(std::span<const std::int32_t>(s.tokens).subspan(static_cast<std::size_t>(s.history->length())));
          h = &*s.history;
        }
        batch_histories_.push_back(h);
        batch_sampling_.push_back(&s.opt.sampling);
        batch_seeds_.push_back(s.opt.seed);
        batch_streams_.push_back(stream_id(s.id, s.step));
        batch_committed_.push_back(s.tokens);  // the host path's process_tree_logits context
        batch_drafts_.push_back(&s.cand);
      }
      const batch_verify_input in{trees_.node_indptr(), trees_.tokens(), trees_.parents(), logits,
                                  batch_sampling_,      batch_seeds_,    batch_streams_, batch_committed_,
                                  batch_drafts_,        batch_histories_};
      batch_result_ = {};
      verifier_.verify_batch(in, batch_result_);
      constexpr std::string_view fn = "specdec::speculative_batch::step";
      const auto& ip = batch_result_.accepted_indptr;
      require(batch_result_.num_requests() == static_cast<int>(running_.size()) && ip.size() == running_.size() + 1,
              fn, "verify_batch's result", "one entry per request of the step", batch_result_.num_requests());
      bool offsets = ip.front() == 0 && static_cast<std::size_t>(ip.back()) == batch_result_.accepted.size();
      for (std::size_t b = 0; offsets && b < running_.size(); ++b) offsets = ip[b] <= ip[b + 1];
      require(offsets, fn, "verify_batch's result",
              "accepted_indptr from 0, non-decreasing, ending at accepted.size() = " +
                  std::to_string(batch_result_.accepted.size()),
              ip.back());
      const double t = seconds(tv);
      for (std::size_t b = 0; b < running_.size(); ++b) {
        auto& s = req_[static_cast<std::size_t>(running_[b])];
        s.result = batch_result_.request(static_cast<int>(b));
        check_verify_result(s.result, s.tree, V);
        s.phase_verify = t;  // the whole batch's, as target_s is the whole forward
      }
    }
  }

  Verifier& verifier_for(request_state& s) {
    if constexpr (std::is_copy_constructible_v<Verifier>) {
      if (!s.verifier) s.verifier.emplace(verifier_);
      return *s.verifier;
    } else {
      return verifier_;
    }
  }

  //! What slot r's drafter is asked this step (draft_source and propose see the same request).
  [[nodiscard]] static draft_request draft_request_of(int r, request_state& s, int depth) noexcept {
    return {r, s.tokens, depth, s.opt.draft_width, &s.opt.sampling, &s.draft_rng, static_cast<std::int64_t>(s.prompt_len)};
  }

  [[nodiscard]] static int remaining(const request_state& s) noexcept {
    return s.opt.max_new_tokens - static_cast<int>(s.tokens.size() - s.prompt_len);
  }

  // Each running request's depth this step: the fixed rule (draft_depth, capped so no draft is
  // wasted past max_new_tokens), or, when some request asks for adaptive_depth, choose_depths over
  // the batch, then exploration (adaptive_depth.hpp's file comment).
  void plan_depths() {
    bool adaptive = false;
    for (const int r : order_) {
      auto& s = req_[static_cast<std::size_t>(r)];
      const int left = remaining(s);
      s.depth = left <= 0 || s.finished_now ? -1 : std::min(s.opt.draft_depth, std::max(0, left - 1));
      s.probing = false;
      s.planned = s.depth;
      s.source = 0;
      if constexpr (sources > 1) {
        if (s.depth > 0) {
          const draft_request dr = draft_request_of(r, s, s.depth);
          const detail::blame_scope blame(failed_, s.id);
          s.source = drafter_.draft_source(dr);  // exactly int (drafter_has_sources)
          require(s.source >= 0 && s.source < sources, "specdec::speculative_batch::step", "drafter.draft_source()",
                  "in [0, draft_sources = " + std::to_string(sources) + ")", s.source);
        }
      }
      adaptive = adaptive || (s.depth > 0 && s.opt.adaptive_depth);
    }
    if (!adaptive) return;
    if (cost_.empty())
      for (const int r : order_)
        if (req_[static_cast<std::size_t>(r)].depth > 0 && req_[static_cast<std::size_t>(r)].opt.adaptive_depth) {
          calibrate(r);
          break;
        }
    // candidates: depths 0..depth of adaptive requests, the fixed depth of the others, each with the
    // estimates of the source about to draft; the batch's acceptance per source (every request's
    // prior) once for the deepest of them
    int deepest = 0;
    for (const int r : order_) deepest = std::max(deepest, req_[static_cast<std::size_t>(r)].depth);
    prior_q_.resize(sources);
    for (int k = 0; k < sources; ++k)
      batch_src_[static_cast<std::size_t>(k)].acceptance.conditional(deepest, nullptr, adaptive_,
                                                                      prior_q_[static_cast<std::size_t>(k)]);
    plan_in_.clear();
    plan_vals_.clear();
    plan_req_.clear();
    for (const int r : order_) {
      auto& s = req_[static_cast<std::size_t>(r)];
      if (s.depth < 0) continue;
      const int lo = s.opt.adaptive_depth ? 0 : s.depth;
      const auto k = static_cast<std::size_t>(s.source);
      const source_estimates& e = s.src[k];
      const source_estimates& b = batch_src_[k];
      e.acceptance.conditional(s.depth, &b.acceptance, prior_q_[k], adaptive_, q_);
      expected_tokens(q_, tok_);
      for (int d = lo; d <= s.depth; ++d) plan_vals_.push_back(tok_[static_cast<std::size_t>(d)]);
      // what the batch measured stands in for what this request has not measured yet
      for (int d = lo; d <= s.depth; ++d) plan_vals_.push_back(d == 0 ? 0.0 : e.nodes.at(d, b.nodes.at(d, d)));
      // a source that drafted for this request before, but not last step, pays its catch-up on the
      // tokens since (its first draft's pass over the prompt is a one-time cost, like prefill: not charged)
      // on top of a steady step's time; without a steady time, the time of its resumed steps (which holds
      // their catch-up) is the price; with neither, the catch-up alone
      const bool own = e.catch_up_max > 0;
      const double catch_up =
          e.drafted_last || e.drafted_len == 0
              ? 0.0
              : std::min((own ? e.catch_up_rate : b.catch_up_rate) * static_cast<double>(s.tokens.size() - e.drafted_len),
                         own ? e.catch_up_max : b.catch_up_max);
      for (int d = lo; d <= s.depth; ++d) {
        double price = 0.0;
        if (d > 0) {
          const double steady = e.draft_time.at(d, b.draft_time.at(d, -1.0));
          price = steady >= 0.0 ? steady + catch_up : e.resumed_time.at(d, b.resumed_time.at(d, catch_up));
        }
        plan_vals_.push_back(price);
      }
      plan_req_.push_back(r);
    }
    std::size_t off = 0;
    for (const int r : plan_req_) {
      const auto& s = req_[static_cast<std::size_t>(r)];
      const auto n = static_cast<std::size_t>(s.depth - (s.opt.adaptive_depth ? 0 : s.depth) + 1);
      const std::span<const double> v(plan_vals_);
      plan_in_.push_back({v.subspan(off, n), v.subspan(off + n, n), v.subspan(off + 2 * n, n)});
      off += 3 * n;
    }
    const double per_row = verify_per_row_.empty() ? 0.0 : verify_per_row_.median();
    const double rate = choose_depths(plan_in_, cost_, plan_out_, per_row);  // expected tokens per second
    const auto step_cost = [&](double n) {
      const double r = std::clamp(n, 1.0, static_cast<double>(step_cost_curve::max_rows));
      return cost_.seconds(r) + per_row * r;
    };
    double rows = 0;  // the planned step's rows
    for (std::size_t i = 0; i < plan_req_.size(); ++i)
      rows += 1.0 + plan_in_[i].nodes[static_cast<std::size_t>(plan_out_[i])];
    for (std::size_t i = 0; i < plan_req_.size(); ++i) {
      auto& s = req_[static_cast<std::size_t>(plan_req_[i])];
      if (!s.opt.adaptive_depth) continue;
      const int d = plan_out_[i];
      s.planned = d;
      s.depth = d;
      // Exploring: one level deeper or shallower (alternately where both exist), when the saved budget
      // covers the expected regret of that step: the seconds it adds (or saves; a drafter's catch-up
      // included) less the worth of the tokens it adds (or loses) at the plan's rate. A probe spends
      // the savings before it; its own step's share starts the next (learn()), so at a small budget (the
      // default 0.01) probes stay rare, and a budget near 1 may probe nearly every step: exploring takes
      // at most about that share of the time either way.
      const auto& c = plan_in_[i];
      const auto u = static_cast<std::size_t>(d);
      auto regret = [&](std::size_t to) {
        const double dt = step_cost(rows + c.nodes[to] - c.nodes[u]) - step_cost(rows) + c.draft_s[to] - c.draft_s[u];
        return std::max(0.0, dt - (c.tokens[to] - c.tokens[u]) / rate);
      };
      const bool up = u + 1 < c.tokens.size(), down = d > 0;
      if (!up && !down) continue;
      const source_estimates& e = s.src[static_cast<std::size_t>(s.source)];
      const std::size_t to = up && (!down || !e.explore_down) ? u + 1 : u - 1;
      const double cost = regret(to);
      if (e.explore_saved >= cost) {  // the savings are spent in learn(), once the probe ran
        s.probing = true;
        s.probe_down = to < u;
        s.depth = static_cast<int>(to);
      }
    }
  }

  // After a committed step: the running estimates of adaptive_depth.hpp. The cost curve gets the
  // target's forward (what calibration times too); verification and commit go in per row.
  void learn(double target_s, double verify_commit_s) {
    const double step_s = target_s + verify_commit_s;
    const auto B = static_cast<double>(running_.size());
    std::int64_t rows = 0;
    bool adaptive = false;
    for (const int r : running_) {
      auto& s = req_[static_cast<std::size_t>(r)];
      rows += s.tree.size() + 1;
      adaptive = adaptive || s.opt.adaptive_depth;
      const int depth = s.tree.max_depth() + 1;
      const auto acc = static_cast<int>(s.result.accepted.size());
      source_estimates& e = s.src[static_cast<std::size_t>(s.source)];
      source_estimates& b = batch_src_[static_cast<std::size_t>(s.source)];
      e.acceptance.record(depth, acc, adaptive_.decay);
      b.acceptance.record(depth, acc, adaptive_.decay);
      const double drafting = s.phase_draft + s.phase_build;
      if (s.depth > 0) {
        e.nodes.record(s.depth, static_cast<double>(s.tree.size()));
        b.nodes.record(s.depth, static_cast<double>(s.tree.size()));
        if (e.drafted_last) {
          e.draft_time.record(s.depth, drafting);
          b.draft_time.record(s.depth, drafting);
        } else if (e.drafted_len == 0) {
          // the first draft read the whole prompt (as far as the drafter looks back): a catch-up on
          // tokens.size() tokens, and a bound for later ones (a LongSpec draft re-reads at most its
          // window however long it skipped, so the cost per skipped token alone would overcharge)
          e.catch_up_max = std::max(e.catch_up_max, drafting);
          e.catch_up_rate = drafting / static_cast<double>(std::max<std::size_t>(1, s.emitted_begin));
          b.catch_up_max = std::max(b.catch_up_max, drafting);
          if (b.catch_up_rate == 0) b.catch_up_rate = e.catch_up_rate;
        } else {  // resumed drafting: the time beyond a steady step's is the catch-up
          // Every resumed time is kept apart from the steady ones: it prices a source that has no steady
          // time (plan_depths). Recorded as a steady time instead, a first resumed sample became the
          // "steady" time against which every later resumed step was read as catch-up and none was
          // recorded again, so a source that never drafts twice in a row kept its first price for good.
          e.resumed_time.record(s.depth, drafting);
          b.resumed_time.record(s.depth, drafting);
          const double steady = e.draft_time.at(s.depth, b.draft_time.at(s.depth, -1.0));
          if (steady >= 0.0) {  // (unknown before a first steady step)
            const double catch_up = std::max(drafting - steady, 1e-9);
            e.catch_up_rate = catch_up / static_cast<double>(std::max<std::size_t>(1, s.emitted_begin - e.drafted_len));
            e.catch_up_max = std::max(e.catch_up_max, catch_up);
            b.catch_up_rate = e.catch_up_rate;
            b.catch_up_max = std::max(b.catch_up_max, catch_up);
          }
        }
      }
      // the source that drafted has now seen the tokens; the others skipped this step
      for (auto& other : s.src) other.drafted_last = false;
      e.drafted_last = s.depth > 0;
      if (s.depth > 0) e.drafted_len = s.emitted_begin;
      // every step's time earns its source explore_budget of it, a probe's too (once the probe ran,
      // the savings before it are spent and the next probe goes the other way): the budget is a share
      // of all the decoding time, and a probe that found its source slow has paid for the next look
      if (s.opt.adaptive_depth) {
        if (s.probing) {
          e.explore_saved = 0;
          e.explore_down = !s.probe_down && s.planned > 0;
        }
        e.explore_saved += adaptive_.explore_budget * (step_s / B + drafting);
      }
    }
    if (adaptive && adaptive_.learn_costs && !cost_.empty()) {
      cost_.record(static_cast<int>(std::min<std::int64_t>(rows, step_cost_curve::max_rows)), target_s);
      verify_per_row_.add(verify_commit_s / static_cast<double>(rows));
    }
  }

  // The root, the request's last token, is a token of the target's vocabulary V, checked before a
  // forward feeds it (a target whose vocabulary shrank would not have an embedding row for it).
  static void check_root(const request_state& s, int V, std::string_view fn) {
    detail::check_context(std::span<const std::int32_t>(&s.tokens.back(), 1), V, fn, "root (the request's last token)");
  }

  // calibrate_costs on a slot (see there): one untimed forward (caches, clocks), then
  // calibration_reps passes over the row counts (interleaved, so a slow moment does not bias one row
  // count), keeping each count's fastest.
  void calibrate(int slot) {
    const auto t0 = clock::now();
    auto& s = req_[static_cast<std::size_t>(slot)];
    const int V = detail::checked_vocab_size(*target_, "specdec::speculative_batch::calibrate_costs");
    check_root(s, V, "specdec::speculative_batch::calibrate_costs");  // the forwards below feed it
    const std::array<int, 1> slots{slot};
    const std::array<std::int32_t, 1> roots{s.tokens.back()};
    std::vector<int> counts;  // no more rows than the longest chain this request may draft (its room)
    const int most = std::min(adaptive_.calibration_rows, std::max(1, remaining(s)));
    for (int rows = 1; rows <= most; rows = rows <= 2 ? rows + 1 : 2 * rows - 1) counts.push_back(rows);
    std::vector<double> best(counts.size(), std::numeric_limits<double>::infinity());
    token_tree star;
    token_tree_batch trees;
    for (int pass = -1; pass < adaptive_.calibration_reps; ++pass) {
      for (std::size_t i = 0; i < counts.size(); ++i) {
        const int rows = pass < 0 ? 1 : counts[i];
        star.clear();
        for (int k = 0; k + 1 < rows; ++k) star.add(static_cast<std::int32_t>(k % V), -1);
        trees.clear();
        trees.push_back(star, static_cast<std::int32_t>(s.tokens.size()));
        const std::array<std::int32_t, 2> indptr{0, rows};
        const std::array<const token_tree*, 1> ptrs{&star};
        const target_batch tb{slots, roots, trees, indptr, ptrs};
        const auto tf = clock::now();
        (void)forward(tb, V);
        if (pass >= 0) best[i] = std::min(best[i], seconds(tf));
        if (pass < 0) break;  // the warm-up: one forward
      }
    }
    for (std::size_t i = 0; i < counts.size(); ++i) cost_.record(counts[i], best[i]);
    stats_.calibrate_s += seconds(t0);
  }

  // The request's counters after a committed step.
  void account(request_state& s, double target_s) {
    ++s.step;
    auto& rs = s.stats;
    rs.draft_s += s.phase_draft;
    rs.build_s += s.phase_build;
    rs.target_s += target_s;
    rs.verify_s += s.phase_verify;
    rs.commit_s += s.phase_commit;
    const auto acc = static_cast<std::int64_t>(s.result.accepted.size());
    for (decoder_stats* st : {&rs, &stats_}) {
      ++st->steps;
      st->accepted += acc;
      st->emitted += s.result.num_emitted();
      st->tree_nodes += s.tree.size();
      st->draft_depth += s.tree.max_depth() + 1;
    }
    ++rs.batch_steps;
    metrics_.record(s.result);
  }

  // Stop conditions token by token over what this step appended after `before`; returns the length
  // to keep and sets finished_now / reason.
  std::size_t apply_stop_rules(request_state& s, std::size_t before) {
    s.finished_now = false;
    std::size_t keep = before;
    for (std::size_t i = before; i < s.tokens.size(); ++i) {
      keep = i + 1;
      if (static_cast<int>(keep - s.prompt_len) >= s.opt.max_new_tokens) {
        s.finished_now = true;
        s.reason = stop_reason::max_tokens;
        break;
      }
      if (s.opt.eos && s.tokens[i] == *s.opt.eos) {
        s.finished_now = true;
        s.reason = stop_reason::eos;
        break;
      }
      if (ends_with_stop(s, keep)) {
        s.finished_now = true;
        s.reason = stop_reason::stop_sequence;
        break;
      }
    }
    return keep;
  }

  static bool ends_with_stop(const request_state& s, std::size_t len) {
    for (const auto& stop : s.opt.stop_sequences) {
      if (len - s.prompt_len < stop.size()) continue;
      if (std::equal(stop.begin(), stop.end(), s.tokens.begin() + static_cast<std::ptrdiff_t>(len - stop.size())))
        return true;
    }
    return false;
  }

  [[nodiscard]] int find(std::uint32_t id) const noexcept {
    for (int r = 0; r < max_requests(); ++r)
      if (req_[static_cast<std::size_t>(r)].used && req_[static_cast<std::size_t>(r)].id == id) return r;
    return -1;
  }

  void leave(int slot) {
    vacate(slot);
    release(slot);
  }
  void vacate(int slot) {
    auto& s = req_[static_cast<std::size_t>(slot)];
    s.used = false;
    s.finished_now = false;
    --active_;
  }
  void release(int slot) {
    if constexpr (target_has_release<Target>) target_->release(slot);
  }

  step_output& next_output() {
    if (out_count_ == outputs_.size()) outputs_.emplace_back();
    return outputs_[out_count_++];
  }

  struct no_adapter {
    explicit no_adapter(Target&) noexcept {}
  };
  template <class T, bool = target_has_forward_batch<T> || !target_has_forward<T>>
  struct adapter_for {
    using type = batched_target_adapter<T>;
  };
  template <class T>
  struct adapter_for<T, true> {
    using type = no_adapter;
  };

  Target* target_;
  Drafter drafter_;
  TreeBuilder builder_;
  Verifier verifier_;
  host policy_;
  typename adapter_for<Target>::type adapter_;
  std::vector<request_state> req_;
  int active_ = 0;
  // inside add_request, abort, step or calibrate_costs: the target, drafter, builder and verifier
  // they call may not call them again (the step's scratch and the slots would change under it)
  bool busy_ = false;
  static constexpr std::string_view not_from_callbacks =
      "not made from the batch's own target, drafter, tree builder or verifier while a call of the batch runs, "
      "nor from speculative_decoder's on_tokens callback";
  decoder_stats stats_;
  decode_metrics metrics_;
  // per-step scratch, reused
  std::vector<int> order_, running_, slots_, leaving_;
  std::vector<std::int32_t> roots_, row_indptr_;
  std::vector<const token_tree*> tree_ptrs_;
  token_tree_batch trees_;
  verify_batch_result committed_;  //!< the step's results in batch order (commit_batch)
  verify_batch_result batch_result_;  //!< verify_batch's results (device logits)
  std::vector<const sampling_params*> batch_sampling_;
  std::vector<std::uint64_t> batch_seeds_, batch_streams_;
  std::vector<std::span<const std::int32_t>> batch_committed_;
  std::vector<const draft_candidates*> batch_drafts_;
  std::vector<const penalty_history*> batch_histories_;
  // adaptive depth
  adaptive_depth_options adaptive_;
  step_cost_curve cost_;
  // the whole batch's estimates per draft source: the priors of each request's
  std::array<source_estimates, sources> batch_src_;
  running_median verify_per_row_;  //!< verification + commit seconds per target row
  std::vector<depth_choice_input> plan_in_;
  std::vector<double> plan_vals_, q_, tok_;
  std::vector<std::vector<double>> prior_q_;  //!< [source][depth]: the batch's conditional acceptance
  std::vector<int> plan_req_, plan_out_;
  std::vector<float> rows_;
  std::vector<double> row_in_;  //!< a strided double row, gathered (take_rows)
  std::vector<float> row_out_;  //!< a double row as float (take_rows)
  std::vector<step_output> outputs_;
  std::size_t out_count_ = 0;
  std::size_t carried_ = 0;  //!< outputs_[0, carried_): finished requests' outputs of a step whose release threw
  std::optional<std::uint32_t> failed_;  //!< failed_request()
};

}  // namespace specdec
