#pragma once
//! \file prompt_lookup.hpp
//! Prompt lookup decoding (PLD): draft by copying. Find the most recent EARLIER occurrence of the
//! context's last m tokens, longest match first (m = max_ngram down to min_ngram), and propose the
//! up to num_tokens tokens that followed it. The reference scan is O(L * max_ngram); the incremental
//! prompt_lookup index answers in O(max_ngram - min_ngram + 1) expected after an amortized
//! O(max_ngram - min_ngram + 1) update per appended token.

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/detail/hash_slots.hpp"

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
//! [min_ngram, max_ngram] it keeps, per distinct m-gram, the end of its latest occurrence that has at
//! least one token after it, so the current suffix never matches itself. Same proposals as
//! prompt_lookup_reference. Memory O(L * (max_ngram - min_ngram + 1)). Not thread-safe.
class prompt_lookup {
 public:
  explicit prompt_lookup(prompt_lookup_params params = {}) : p_(params) {
    detail::validate_pld("specdec::prompt_lookup", p_);
    maps_.resize(static_cast<std::size_t>(p_.max_ngram - p_.min_ngram + 1));
  }

  [[nodiscard]] const prompt_lookup_params& params() const noexcept { return p_; }
  [[nodiscard]] std::span<const std::int32_t> context() const noexcept { return ctx_; }

  //! Appends one token. Amortized O(max_ngram - min_ngram + 1) hash updates of O(m) each.
  //! Precondition: the context stays below 2^31 tokens.
  void push(std::int32_t token) {
    // The token at L-1 now has a successor: register the m-grams ending at L-1.
    const auto L = static_cast<std::int64_t>(ctx_.size());
    require(L < INT32_MAX, "specdec::prompt_lookup::push", "context().size()", "< INT32_MAX", L);
    ctx_.push_back(token);
    if (L == 0) return;
    const std::int64_t end = L - 1;  // inclusive end of the grams being registered
    for (int m = p_.min_ngram; m <= p_.max_ngram && end - m + 1 >= 0; ++m) {
      const auto start = static_cast<std::int32_t>(end - m + 1);
      // distinct grams sharing a hash stay separate (the predicate compares tokens); an equal gram
      // gets its latest start
      maps_[static_cast<std::size_t>(m - p_.min_ngram)].upsert(hash(start, m), start,
                                                                  [&](std::int32_t s) { return same(s, start, m); });
    }
  }

  //! Appends tokens in order.
  void extend(std::span<const std::int32_t> tokens) {
    ctx_.reserve(ctx_.size() + tokens.size());
    for (auto t : tokens) push(t);
  }

  //! The proposal for the current context (see prompt_lookup_reference); empty if no match.
  [[nodiscard]] std::vector<std::int32_t> propose() const {
    const auto L = static_cast<std::int64_t>(ctx_.size());
    for (int m = std::min<std::int64_t>(p_.max_ngram, L - 1); m >= p_.min_ngram; --m) {
      const std::int64_t start = L - m;
      const std::int32_t s = maps_[static_cast<std::size_t>(m - p_.min_ngram)].find(
          hash(start, m), [&](std::int32_t c) { return same(c, start, m); });
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
  }

 private:
  std::uint64_t hash(std::int64_t start, int m) const {
    std::uint64_t h = 0xCBF29CE484222325ull ^ static_cast<std::uint64_t>(m);
    for (int i = 0; i < m; ++i) {
      h ^= static_cast<std::uint32_t>(ctx_[static_cast<std::size_t>(start + i)]);
      h *= 0x100000001B3ull;
      h ^= h >> 29;
    }
    return h;
  }
  bool same(std::int64_t a, std::int64_t b, int m) const {
    return std::equal(ctx_.begin() + a, ctx_.begin() + a + m, ctx_.begin() + b);
  }

  prompt_lookup_params p_;
  std::vector<std::int32_t> ctx_;
  std::vector<detail::hash_slots> maps_;
};

}  // namespace specdec
