#pragma once
//! \file ngram_drafter.hpp
//! ngram_drafter, the default drafter of speculative_decoder: model-free prompt lookup (PLD / TokenSwift
//! token reutilization): the longest suffix n-gram of the committed tokens that occurred before
//! proposes what followed it, from a draft/prompt_lookup.hpp index per request.
//! Deterministic: it provides no q rows and no i.i.d. drafts (`provides`, see decoder/pairing.hpp).

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/draft/draft_candidates.hpp"
#include "specdec/draft/drafter.hpp"
#include "specdec/draft/prompt_lookup.hpp"

namespace specdec {

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
    require(search_window >= 0, fn, "search_window", ">= 0 (0 = the whole context)", search_window);
    require(req.width >= 1, fn, "req.width", ">= 1", req.width);
    out.clear();
    if (req.depth <= 0) return;
    require(req.request >= 0 && req.request <= max_request_slot, fn, "req.request",
            "a request slot in [0, max_request_slot = 2^20 - 1]", req.request);
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
        if (static_cast<int>(out.sequences.size()) + 1 >= req.width) break;
      }
    }
  }

  //! Drafting state (one prompt_lookup index per request slot), not a parameter: the struct stays an
  //! aggregate so `ngram_drafter{.max_ngram = 4}` keeps working; leave this member out of initializers.
  detail::ngram_drafter_state state_{};
};
static_assert(check_drafter<ngram_drafter>());

}  // namespace specdec
