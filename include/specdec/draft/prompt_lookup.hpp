#pragma once
//! \file prompt_lookup.hpp
//! Prompt lookup decoding (PLD): draft by copying. Find the most recent EARLIER occurrence of the
//! context's last m tokens, longest match first (m = max_ngram down to min_ngram), and propose the
//! up to num_tokens tokens that followed it. The reference scan is O(L * max_ngram); the incremental
//! prompt_lookup index answers in O(max_ngram - min_ngram + 1) expected after an amortized
//! O(max_ngram - min_ngram + 1) update per appended token, and also lists every earlier occurrence,
//! most recent first, in O(1) per occurrence (draft/ngram_drafter.hpp's ngram_drafter drafts from them).

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/detail/hash_slots.hpp"
#include "specdec/core/tensor.hpp"

namespace specdec {

//! Parameters of prompt lookup.
struct prompt_lookup_params {
  //! Longest n-gram the lookup matches. The index keeps one hash table per length in [min_ngram,
  //! max_ngram] and hashes every length on each push (O(max_ngram^2) work per token), so the range is
  //! bounded; PLD uses 3-5 and TokenSwift 4, and a 256-token suffix match already pins the text down.
  static constexpr int max_ngram_limit = 256;
  int min_ngram = 1;    //!< shortest suffix to match, in [1, max_ngram]
  int max_ngram = 3;    //!< longest suffix to match, in [min_ngram, max_ngram_limit]
  int num_tokens = 10;  //!< most tokens proposed, >= 1 (any int: proposals stop at the context's end)
};

namespace detail {
inline void validate_pld(std::string_view fn, const prompt_lookup_params& p) {
  require(p.min_ngram >= 1 && p.min_ngram <= prompt_lookup_params::max_ngram_limit, fn, "params.min_ngram",
          ">= 1 and <= " + std::to_string(prompt_lookup_params::max_ngram_limit) + " (max_ngram_limit)", p.min_ngram);
  require(p.max_ngram >= p.min_ngram && p.max_ngram <= prompt_lookup_params::max_ngram_limit, fn, "params.max_ngram",
          ">= min_ngram = " + std::to_string(p.min_ngram) + " and <= " +
              std::to_string(prompt_lookup_params::max_ngram_limit) + " (max_ngram_limit)",
          p.max_ngram);
  require(p.num_tokens >= 1, fn, "params.num_tokens", ">= 1", p.num_tokens);
}
}  // namespace detail

//! Reference (stateless) prompt lookup over `context`: for m = max_ngram down to min_ngram (and
//! m < context.size()), the latest start s < L - m with context[s, s+m) == the last m tokens gives
//! the proposal context[s+m, min(s+m+num_tokens, L)). Empty if nothing matches. O(L * max_ngram).
inline std::vector<std::int32_t> prompt_lookup_reference(std::span<const std::int32_t> context,
                                                         const prompt_lookup_params& p = {}) {
  detail::validate_pld("specdec::prompt_lookup_reference", p);
  const auto L = static_cast<std::int64_t>(context.size());
  for (std::int64_t m = std::min<std::int64_t>(p.max_ngram, L - 1); m >= p.min_ngram; --m) {
    const auto suffix = context.subspan(static_cast<std::size_t>(L - m));
    for (std::int64_t s = L - m - 1; s >= 0; --s) {
      if (std::equal(suffix.begin(), suffix.end(), context.begin() + s)) {
        const auto b = static_cast<std::size_t>(s + m);
        const auto e = static_cast<std::size_t>(std::min<std::int64_t>(s + m + p.num_tokens, L));
        return {context.begin() + static_cast<std::ptrdiff_t>(b), context.begin() + static_cast<std::ptrdiff_t>(e)};
      }
    }
  }
  return {};
}

//! Incremental prompt-lookup index over a growing context (prompt + generated tokens): for every m in
//! [min_ngram, max_ngram] it keeps, per distinct m-gram, the start of its latest occurrence that has at
//! least one token after it, so the current suffix never matches itself, and per occurrence the start
//! of the previous occurrence of the same m-gram, so all matches can be walked newest first
//! (latest_match / previous_match) without a scan. Same proposals as prompt_lookup_reference.
//! Memory O(L * (max_ngram - min_ngram + 1)). Not thread-safe.
class prompt_lookup {
 public:
  explicit prompt_lookup(prompt_lookup_params params = {}) : p_(params) {
    detail::validate_pld("specdec::prompt_lookup", p_);
    maps_.resize(static_cast<std::size_t>(p_.max_ngram - p_.min_ngram + 1));
    prev_.resize(maps_.size());
  }

  [[nodiscard]] const prompt_lookup_params& params() const noexcept { return p_; }
  [[nodiscard]] std::span<const std::int32_t> context() const noexcept { return ctx_; }

  //! Appends one token: O(max_ngram) hashing (the grams ending at the previous token share their
  //! hash steps) plus amortized O(max_ngram - min_ngram + 1) table updates, each comparing an equal
  //! gram's O(m) tokens. Precondition: the context stays below 2^31 tokens.
  void push(std::int32_t token) {
    // The token at L-1 now has a successor: register the m-grams ending at L-1.
    const auto L = static_cast<std::int64_t>(ctx_.size());
    require(L < INT32_MAX, "specdec::prompt_lookup::push", "context().size()", "< INT32_MAX", L);
    ctx_.push_back(token);
    if (L == 0) return;
    const std::int64_t end = L - 1;  // inclusive end of the grams being registered
    // The hash reads a gram from its last token back to its first, so the hash of the m-gram ending
    // at `end` is one step on from the (m-1)-gram's: O(max_ngram) steps for all lengths, not
    // O(max_ngram^2) (with lengths 1-12, indexing a 16K-token prompt took 12-16 ms before).
    std::uint64_t h = hash_seed;
    for (int m = 1; m <= p_.max_ngram && end - m + 1 >= 0; ++m) {
      const auto start = static_cast<std::int32_t>(end - m + 1);
      h = hash_step(h, ctx_[static_cast<std::size_t>(start)]);
      if (m < p_.min_ngram) continue;
      // distinct grams sharing a hash stay separate (the predicate compares tokens); an equal gram
      // gets its latest start, and the start it replaces becomes this occurrence's predecessor
      // (starts of one length arrive in order 0, 1, 2, ..., so prev_[.][start] is a push_back)
      const auto mi = static_cast<std::size_t>(m - p_.min_ngram);
      prev_[mi].push_back(maps_[mi].upsert(h, start, [&](std::int32_t s) { return same(s, start, m); }));
    }
  }

  //! Appends tokens in order.
  void extend(std::span<const std::int32_t> tokens) {
    // tokens may view the context itself (tokens copied from context(), e.g. an accepted proposal):
    // read them from a copy, since the reserve below moves the context (a use-after-free before)
    const auto as_view = [](const std::int32_t* p, std::size_t n) {
      return strided_view<const std::int32_t, 1>(p, {static_cast<std::int64_t>(n)}, {1});
    };
    if (views_overlap(as_view(tokens.data(), tokens.size()), as_view(ctx_.data(), ctx_.size()))) {
      own_.assign(tokens.begin(), tokens.end());
      tokens = own_;
    }
    // Grow geometrically: an exact reserve per call re-copied the whole context on every few-token
    // extend (the decoder's per-step pattern), ~7 us a step at 90K tokens.
    if (const std::size_t need = ctx_.size() + tokens.size(); need > ctx_.capacity())
      ctx_.reserve(std::max(need, 2 * ctx_.capacity()));
    for (auto t : tokens) push(t);
  }

  //! The start s of the latest earlier occurrence of the context's last m tokens (s < L - m and
  //! context[s, s + m) equals them), or -1 if there is none (always when m >= L). O(m) expected.
  //! Precondition (checked): min_ngram <= m <= max_ngram.
  [[nodiscard]] std::int32_t latest_match(int m) const {
    require_in_range("specdec::prompt_lookup::latest_match", "m", m, p_.min_ngram, p_.max_ngram);
    const auto L = static_cast<std::int64_t>(ctx_.size());
    if (m >= L) return -1;
    const std::int64_t start = L - m;
    return maps_[static_cast<std::size_t>(m - p_.min_ngram)].find(hash(start, m),
                                                                  [&](std::int32_t c) { return same(c, start, m); });
  }

  //! The start of the occurrence of the same m-gram before the one starting at s, or -1: the earlier
  //! occurrences of the last m tokens, most recent first, are latest_match(m), previous_match(m, that),
  //! ..., -1. O(1). Precondition (checked): min_ngram <= m <= max_ngram and an m-gram starting at s
  //! is indexed (s from latest_match / previous_match of the same m).
  [[nodiscard]] std::int32_t previous_match(int m, std::int32_t s) const {
    constexpr std::string_view fn = "specdec::prompt_lookup::previous_match";
    require_in_range(fn, "m", m, p_.min_ngram, p_.max_ngram);
    const auto& prev = prev_[static_cast<std::size_t>(m - p_.min_ngram)];
    if (!(s >= 0 && static_cast<std::size_t>(s) < prev.size())) [[unlikely]]
      throw_invalid_argument(fn, "s", "the start of an indexed m-gram, in [0, " + std::to_string(prev.size()) + ")", s);
    return prev[static_cast<std::size_t>(s)];
  }

  //! The proposal for the current context (see prompt_lookup_reference); empty if no match.
  [[nodiscard]] std::vector<std::int32_t> propose() const {
    const auto L = static_cast<std::int64_t>(ctx_.size());
    for (int m = std::min<std::int64_t>(p_.max_ngram, L - 1); m >= p_.min_ngram; --m) {
      const std::int32_t s = latest_match(m);
      if (s < 0) continue;
      const auto b = static_cast<std::size_t>(s + m);
      const auto e = static_cast<std::size_t>(std::min<std::int64_t>(std::int64_t{s} + m + p_.num_tokens, L));
      return {ctx_.begin() + static_cast<std::ptrdiff_t>(b), ctx_.begin() + static_cast<std::ptrdiff_t>(e)};
    }
    return {};
  }

  void clear() {
    ctx_.clear();
    for (auto& m : maps_) m.clear();
    for (auto& v : prev_) v.clear();
  }

 private:
  // FNV-1a-style steps with a shift mix, over a gram's tokens from its last to its first (push
  // extends one length's hash to the next). One table per length, so the length is not hashed.
  static constexpr std::uint64_t hash_seed = 0xCBF29CE484222325ull;
  static std::uint64_t hash_step(std::uint64_t h, std::int32_t token) noexcept {
    h ^= static_cast<std::uint32_t>(token);
    h *= 0x100000001B3ull;
    return h ^ (h >> 29);
  }
  std::uint64_t hash(std::int64_t start, int m) const {
    std::uint64_t h = hash_seed;
    for (int i = m - 1; i >= 0; --i) h = hash_step(h, ctx_[static_cast<std::size_t>(start + i)]);
    return h;
  }
  bool same(std::int64_t a, std::int64_t b, int m) const {
    return std::equal(ctx_.begin() + a, ctx_.begin() + a + m, ctx_.begin() + b);
  }

  prompt_lookup_params p_;
  std::vector<std::int32_t> ctx_;
  std::vector<std::int32_t> own_;  // extend: a copy of tokens that view ctx_
  std::vector<detail::hash_slots> maps_;
  std::vector<std::vector<std::int32_t>> prev_;  // [m - min_ngram][start]: previous start of that m-gram, or -1
};

}  // namespace specdec
