#pragma once
//! \file drafters.hpp
//! Drafter policies for speculative_decoder:
//!  - ngram_drafter:       model-free prompt lookup (PLD / TokenSwift token reutilization): the longest
//!                         suffix n-gram of the committed tokens that occurred before proposes what followed it;
//!  - chain_drafter<M>:    any small autoregressive model with a truncatable KV cache (the target_model
//!                         interface plus cache_length / truncate) drafts a chain, keeping top-width
//!                         alternatives per depth, greedily or by sampling its processed distribution q;
//!  - longspec_drafter<M>: LongSpec's draft (§3.1: sliding-window self-attention + cache-free cross-
//!                         attention into the target's KV, shared embedding/head), driven token by token
//!                         through the incremental_draft_model interface; chain mode, or LongSpec's dynamic
//!                         beam tree (Appendix B) through tree/beam_tree_builder.hpp, returned as sequences.
//! Both model drafters also have a multi-draft mode (multi_draft_params): k independent sampled drafts
//! with their q rows, for multi_draft_verifier.
//! Each declares what it can provide besides tokens (`provides`: q rows, i.i.d. drafts; see
//! decoder/pairing.hpp). For the model drafters that is what some mode provides: q rows only when
//! sampling at temperature > 0, i.i.d. drafts only when constructed with multi_draft_params; both are
//! run-time choices the types cannot express.
//! TokenSwift self-drafting (the target itself on a partial KV cache, with residual heads and n-gram
//! reutilization) is a drafter too: decoder/self_drafter.hpp.

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include "specdec/core/detail/simd.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/topk.hpp"
#include "specdec/decoder/concepts.hpp"
#include "specdec/draft/prompt_lookup.hpp"
#include "specdec/sampling/logits_processor.hpp"
#include "specdec/sampling/sampler.hpp"
#include "specdec/tree/beam_tree_builder.hpp"

namespace specdec {

namespace detail {
inline namespace SPECDEC_HOST_ISA {  // the float path uses core/detail/simd.hpp: see core/isa.hpp
//! Log-softmax of one row into out: out[i] = row[i] - (max + log sum_j exp(row[j] - max)). O(V).
//! double rows: double arithmetic throughout. float rows: the max and the exponentials run on
//! 16-lane vectors (vexp2, relative error < 1e-7), each 16-lane block summed into a double; at a
//! 128K-token vocabulary the scalar double `exp` per element took ~0.5 ms a row (the self-drafter
//! runs gamma + 1 = 4 rows a step). -inf entries (masked tokens) stay -inf.
template <class T>
void log_softmax(std::span<const T> row, std::span<float> out) {
  const std::size_t n = row.size();
  if constexpr (std::is_same_v<T, float>) {
    constexpr float ninf = -std::numeric_limits<float>::infinity();
    const std::size_t nv = n / vlanes * vlanes;
    vf16 vm = vbroadcast(ninf);
    for (std::size_t i = 0; i < nv; i += vlanes) vm = vmax(vm, vload(row.data() + i));
    float mx = vhmax(vm);
    for (std::size_t i = nv; i < n; ++i) mx = std::max(mx, row[i]);
    if (mx == ninf || std::isnan(mx)) {  // nothing finite to normalise by: keep the row as it is
      for (std::size_t i = 0; i < n; ++i) out[i] = row[i];
      return;
    }
    constexpr float log2e = 1.4426950408889634f;
    const vf16 vmx = vbroadcast(mx);
    double sum = 0;
    for (std::size_t i = 0; i < nv; i += vlanes) sum += vhsum(vexp2((vload(row.data() + i) - vmx) * log2e));
    for (std::size_t i = nv; i < n; ++i) sum += std::exp(static_cast<double>(row[i]) - mx);
    const float lse = static_cast<float>(static_cast<double>(mx) + std::log(sum));
    const vf16 vl = vbroadcast(lse);
    for (std::size_t i = 0; i < nv; i += vlanes) vstore(out.data() + i, vload(row.data() + i) - vl);
    for (std::size_t i = nv; i < n; ++i) out[i] = row[i] - lse;
  } else {
    double mx = -std::numeric_limits<double>::infinity();
    for (auto x : row) mx = std::max(mx, static_cast<double>(x));
    double sum = 0;
    for (auto x : row) sum += std::exp(static_cast<double>(x) - mx);
    const double lse = mx + std::log(sum);
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<double>(row[i]) - lse);
  }
}
}  // namespace SPECDEC_HOST_ISA

//! The `width` best entries of a log-prob row, best first (ties: lower token id first), through
//! core/topk.hpp's O(V) heap selection; fewer when the vocabulary is smaller than width.
struct top_width_selector {
  std::vector<std::int32_t> idx;
  std::vector<float> val;
  topk_workspace<float> ws;
  void operator()(std::span<const float> lp, int width, std::vector<draft_token>& out) {
    const int k = std::min(width, static_cast<int>(lp.size()));
    idx.resize(static_cast<std::size_t>(k));
    val.resize(static_cast<std::size_t>(k));
    topk<float>(lp, k, idx, val, ws);
    out.clear();
    for (int j = 0; j < k; ++j) out.push_back({idx[static_cast<std::size_t>(j)], val[static_cast<std::size_t>(j)]});
  }
};

//! Shared per-depth logic of the model drafters: records alternatives, picks the chain token (argmax,
//! or a draw from the processed q when sampling) and appends it to out.
struct chain_picker {
  std::vector<float> lp, processed;
  template <class T>
  std::int32_t pick(std::span<const T> logits, const draft_request& req, std::span<const std::int32_t> context,
                    draft_candidates& out) {
    const auto V = logits.size();
    lp.resize(V);
    log_softmax(logits, std::span<float>(lp));
    out.alternatives.emplace_back();
    top_width(lp, std::max(1, req.width), out.alternatives.back());
    const bool sample = req.rng != nullptr && req.sampling != nullptr && req.sampling->temperature > 0.0f;
    if (!sample) {
      out.chain.push_back(out.alternatives.back().front());
      return out.chain.back().token;
    }
    processed.assign(logits.begin(), logits.end());
    process_logits(std::span<float>(processed), *req.sampling, context, ws);
    std::int32_t tok = sample_token(processed, *req.rng);
    // q row = softmax of the processed logits (the distribution tok was drawn from).
    float mx = -std::numeric_limits<float>::infinity();
    for (float x : processed) mx = std::max(mx, x);
    double sum = 0;
    for (float x : processed) sum += std::isinf(x) ? 0.0 : std::exp(static_cast<double>(x) - mx);
    out.vocab = static_cast<int>(V);
    for (float x : processed) out.q.push_back(std::isinf(x) ? 0.0f : static_cast<float>(std::exp(static_cast<double>(x) - mx) / sum));
    out.chain.push_back({tok, lp[static_cast<std::size_t>(tok)]});
    return tok;
  }
  sampling_workspace ws;
  top_width_selector top_width;
};
}  // namespace detail

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
    processed.assign(logits.begin(), logits.end());
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
    const int k = std::max(1, req.width);
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

// ---- n-gram / prompt lookup ------------------------------------------------------------------------

namespace detail {
//! ngram_drafter's per-request prompt_lookup indexes, keyed by request slot.
struct ngram_drafter_state {
  std::vector<std::optional<prompt_lookup>> index;

  //! The index of slot r over [min_ngram, max_ngram], brought up to date with the committed tokens t:
  //! it appends the tokens not yet indexed, and re-indexes from scratch when the n-gram range changed
  //! or t does not extend the indexed tokens (shorter, or the first or last indexed token differs).
  const prompt_lookup& indexed(std::size_t r, std::span<const std::int32_t> t, int min_ngram, int max_ngram) {
    if (index.size() <= r) index.resize(r + 1);
    auto& pl = index[r];
    if (!pl || pl->params().min_ngram != min_ngram || pl->params().max_ngram != max_ngram)
      pl.emplace(prompt_lookup_params{.min_ngram = min_ngram, .max_ngram = max_ngram, .num_tokens = 1});
    const auto ctx = pl->context();
    if (ctx.size() > t.size() || (!ctx.empty() && (ctx.front() != t.front() || ctx.back() != t[ctx.size() - 1])))
      pl->clear();
    pl->extend(t.subspan(pl->context().size()));
    return *pl;
  }
};
}  // namespace detail

//! Prompt-lookup drafting with no model. For n from max_ngram down to min_ngram, the most recent
//! earlier occurrences of the last n committed tokens propose the tokens that followed them: the most
//! recent match becomes the chain, up to width - 1 further distinct matches become sequences, and
//! alternatives[d] lists the distinct tokens the matches put at depth d. The first n with a match (in
//! the search window) is the only one used.
//! Per request slot (draft_request::request) it keeps a draft/prompt_lookup.hpp index fed with the
//! committed tokens each propose() sees, so a call costs O(tokens added since the last call) amortized
//! updates plus, per n tried, one expected O(n) lookup and O(width * depth) per occurrence visited
//! (newest first, until width distinct continuations are found or the window ends): no scan of the
//! context and no allocation per occurrence. Precondition: between reset(r) calls, the tokens of
//! request r only grow (each call's tokens extend the last call's), as the decoder's committed tokens
//! do; a shorter context, or one whose first or last indexed token differs, is re-indexed from
//! scratch. Memory O(L * (max_ngram - min_ngram + 1)) per request. Not thread-safe.
struct ngram_drafter {
  static constexpr draft_output provides = draft_output::none;  // deterministic: no q, no i.i.d. drafts
  int max_ngram = 3;      //!< in [min_ngram, prompt_lookup_params::max_ngram_limit]
  int min_ngram = 1;      //!< >= 1
  int search_window = 0;  //!< tokens searched back from the end (0 = whole context)

  void reset(int r) {
    if (r >= 0 && static_cast<std::size_t>(r) < state_.index.size()) {
      auto& pl = state_.index[static_cast<std::size_t>(r)];
      if (pl) pl->clear();  // keeps the capacity for the slot's next prompt
    }
  }

  void propose(const draft_request& req, draft_candidates& out) {
    constexpr std::string_view fn = "specdec::ngram_drafter::propose";
    if (!(min_ngram >= 1 && max_ngram >= min_ngram)) [[unlikely]]
      throw_invalid_argument(fn, "min_ngram/max_ngram", "1 <= min_ngram <= max_ngram",
                             std::to_string(min_ngram) + "/" + std::to_string(max_ngram));
    require(max_ngram <= prompt_lookup_params::max_ngram_limit, fn, "max_ngram",
            "<= prompt_lookup_params::max_ngram_limit = 256", max_ngram);
    out.clear();
    if (req.depth <= 0) return;
    require(req.request >= 0, fn, "req.request", ">= 0 (a request slot)", req.request);
    const auto& t = req.tokens;
    const auto L = static_cast<std::int64_t>(t.size());
    const prompt_lookup& pl = state_.indexed(static_cast<std::size_t>(req.request), t, min_ngram, max_ngram);
    const std::int64_t lo = search_window > 0 ? std::max<std::int64_t>(0, L - search_window) : 0;
    const auto found = [&](const std::vector<draft_token>& seq, std::int64_t b, std::int64_t len) {
      return static_cast<std::int64_t>(seq.size()) == len &&
             std::equal(seq.begin(), seq.end(), t.begin() + b, [](const draft_token& x, std::int32_t y) { return x.token == y; });
    };
    for (int n = static_cast<int>(std::min<std::int64_t>(max_ngram, L - 1)); n >= min_ngram && out.empty(); --n) {
      // matches t[s .. s+n) == t[L-n .. L) with s + n < L, newest first
      for (std::int32_t s = pl.latest_match(n); s >= lo; s = pl.previous_match(n, s)) {
        const std::int64_t b = std::int64_t{s} + n;  // < L: the continuation is never empty
        const std::int64_t len = std::min<std::int64_t>(req.depth, L - b);
        bool dup = found(out.chain, b, len);
        for (const auto& q : out.sequences) dup = dup || found(q, b, len);
        if (dup) continue;
        auto& seq = out.chain.empty() ? out.chain : out.sequences.emplace_back();
        for (std::int64_t j = b; j < b + len; ++j) seq.push_back({t[static_cast<std::size_t>(j)], 0.0f});
        for (std::size_t d = 0; d < seq.size(); ++d) {
          if (out.alternatives.size() <= d) out.alternatives.emplace_back();
          auto& a = out.alternatives[d];
          if (std::none_of(a.begin(), a.end(), [&](const draft_token& x) { return x.token == seq[d].token; }))
            a.push_back(seq[d]);
        }
        if (static_cast<int>(out.sequences.size()) + 1 >= std::max(1, req.width)) break;
      }
    }
  }

  //! Drafting state (one prompt_lookup index per request slot), not a parameter: the struct stays an
  //! aggregate so `ngram_drafter{.max_ngram = 4}` keeps working; leave this member out of initializers.
  detail::ngram_drafter_state state_{};
};
static_assert(check_drafter<ngram_drafter>());

// ---- chain drafter over any small autoregressive model -----------------------------------------------

//! A model the chain drafter can drive: a target_model whose cache can be measured and truncated.
template <class M>
concept truncatable_model = target_model<M> && requires(M& m, const M& cm, int r, int len) {
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
    const auto& t = req.tokens;
    const int L = static_cast<int>(t.size());
    require(L >= 1, "specdec::chain_drafter::propose", "req.tokens.size()", ">= 1", L);
    if (multi_) detail::multi_draft_sampler::validate(req, *multi_, "specdec::chain_drafter::propose");
    const int V = model_->vocab_size();
    logits_.resize(static_cast<std::size_t>(V));
    if (model_->cache_length(r) == 0 && L > 1) model_->prefill(r, t.first(static_cast<std::size_t>(L)));
    int cached = model_->cache_length(r);
    require(cached <= L - 1, "specdec::chain_drafter::propose", "req.tokens.size()", "no shorter than last step", L);
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
      model_->truncate(r, L - 1);
      return;
    }
    context_.assign(t.begin(), t.end());
    std::int32_t cur = t.back();
    for (int d = 0; d < req.depth; ++d) {
      model_->forward(r, cur, empty, logits_);
      model_->commit(r, {});
      cur = picker_.pick(std::span<const typename Model::logit_type>(logits_), req, context_, out);
      context_.push_back(cur);
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

// ---- LongSpec drafter ------------------------------------------------------------------------------

//! A draft model driven one token at a time (examples::longspec_draft_model): step(r, token, position,
//! commit, logits) runs one token, storing its K/V as committed (ring) or speculative;
//! discard_speculation(r) drops the speculative ones; absorbed(r) = committed tokens seen.
template <class M>
concept incremental_draft_model = requires(M& m, const M& cm, int r, std::int32_t tok, int pos, bool commit,
                                           std::span<typename M::logit_type> logits) {
  typename M::logit_type;
  { cm.vocab_size() } -> std::convertible_to<int>;
  { cm.absorbed(r) } -> std::convertible_to<int>;
  m.reset(r);
  m.step(r, tok, pos, commit, logits);
  m.discard_speculation(r);
};

//! LongSpec drafting (§3.1, Appendix B). With empty beam_widths: a chain of req.depth tokens (greedy or
//! sampled) with top-width alternatives per depth. With beam widths (LongSpec uses [4, 16, 16, 16, 16]):
//! the dynamic beam tree, each frontier node scored by re-running the draft along its path (the
//! draft has no tree attention here, so a step costs O(frontier x depth) draft tokens), returned as
//! the tree's root-to-leaf sequences for trie_tree_builder.
template <incremental_draft_model Model>
class longspec_drafter {
 public:
  //! q rows when sampling its chain; i.i.d. drafts in multi-draft mode (the beam mode gives neither).
  static constexpr draft_output provides = draft_output::q_rows | draft_output::iid_drafts;
  explicit longspec_drafter(Model& model, std::vector<int> beam_widths = {})
      : model_(&model), beam_(beam_widths.empty() ? beam_tree_params{} : beam_tree_params{beam_widths, 0}),
        use_beam_(!beam_widths.empty()) {}
  //! Multi-draft mode (see multi_draft_params): k = width independent sampled drafts.
  longspec_drafter(Model& model, multi_draft_params multi) : model_(&model), use_beam_(false), multi_(multi) {}

  void reset(int r) { model_->reset(r); }

  void propose(const draft_request& req, draft_candidates& out) {
    out.clear();
    const int r = req.request;
    const auto& t = req.tokens;
    const int L = static_cast<int>(t.size());
    const int V = model_->vocab_size();
    require(L >= 1 && model_->absorbed(r) <= L, "specdec::longspec_drafter::propose", "req.tokens.size()",
            "at least the tokens already absorbed", L);
    if (multi_) detail::multi_draft_sampler::validate(req, *multi_, "specdec::longspec_drafter::propose");
    root_.resize(static_cast<std::size_t>(V));
    logits_.resize(static_cast<std::size_t>(V));
    model_->discard_speculation(r);
    if (model_->absorbed(r) == L) {  // nothing new (only possible when re-proposing): recompute the root row
      model_->reset(r);
    }
    int first = model_->absorbed(r);
    if constexpr (requires { model_->receptive_field(); })  // skip history no future prediction can see
      first = std::max(first, L - 1 - static_cast<int>(model_->receptive_field()));
    for (int p = first; p < L; ++p)
      model_->step(r, t[static_cast<std::size_t>(p)], p, true,
                   p == L - 1 ? std::span<typename Model::logit_type>(root_) : std::span<typename Model::logit_type>{});
    if (req.depth <= 0) return;
    if (multi_) {
      multi_sampler_.run(std::span<const typename Model::logit_type>(root_), req, *multi_,
                         [&](std::int32_t tok, int depth, bool new_draft) {
                           if (new_draft) model_->discard_speculation(r);
                           model_->step(r, tok, L + depth, false, logits_);
                           return std::span<const typename Model::logit_type>(logits_);
                         },
                         out);
      model_->discard_speculation(r);
      return;
    }
    if (!use_beam_) {
      context_.assign(t.begin(), t.end());
      std::int32_t cur = picker_.pick(std::span<const typename Model::logit_type>(root_), req, context_, out);
      for (int d = 1; d < req.depth; ++d) {
        context_.push_back(cur);
        model_->step(r, cur, L + d - 1, false, logits_);
        cur = picker_.pick(std::span<const typename Model::logit_type>(logits_), req, context_, out);
      }
      model_->discard_speculation(r);
      return;
    }
    beam_tree_builder builder(beam_);
    const token_tree tree = builder.build_from_logprobs(V, [&](const token_tree& cur, std::span<const std::int32_t> frontier,
                                                               std::span<float> rows) {
      for (std::size_t f = 0; f < frontier.size(); ++f) {
        std::span<float> row = rows.subspan(f * static_cast<std::size_t>(V), static_cast<std::size_t>(V));
        if (frontier[f] < 0) {
          detail::log_softmax(std::span<const typename Model::logit_type>(root_), row);
          continue;
        }
        model_->discard_speculation(r);
        const auto path = cur.path_tokens(frontier[f]);
        for (std::size_t d = 0; d < path.size(); ++d)
          model_->step(r, path[d], L + static_cast<int>(d), false, logits_);
        detail::log_softmax(std::span<const typename Model::logit_type>(logits_), row);
      }
    });
    model_->discard_speculation(r);
    // chain = the best continuation: the deepest leaf with the highest path log-probability (so a chain
    // builder verifies the beam's best full-depth path, not whichever leaf comes first in index order).
    const auto leaves = tree.leaves();
    std::size_t best = 0;
    double best_score = -std::numeric_limits<double>::infinity();
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      double score = 0;
      for (auto node : tree.path(leaves[i])) score += tree.logprob(node);
      const int d = tree.depth(leaves[i]), bd = tree.depth(leaves[best]);
      if (i == 0 || d > bd || (d == bd && score > best_score)) best = i, best_score = score;
    }
    for (std::size_t i = 0; i < leaves.size(); ++i) {
      std::vector<draft_token> seq;
      for (auto node : tree.path(leaves[i])) seq.push_back({tree.token(node), tree.logprob(node)});
      if (i == best) out.chain = std::move(seq);
      else out.sequences.push_back(std::move(seq));
    }
  }

 private:
  Model* model_;
  beam_tree_params beam_;
  bool use_beam_;
  std::optional<multi_draft_params> multi_;
  std::vector<typename Model::logit_type> root_, logits_;
  std::vector<std::int32_t> context_;
  detail::chain_picker picker_;
  detail::multi_draft_sampler multi_sampler_;
};

}  // namespace specdec
