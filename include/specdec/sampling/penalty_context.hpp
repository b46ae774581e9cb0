#pragma once
//! \file penalty_context.hpp
//! The penalty context of a batch of logits rows, in the form a kernel reads: what
//! process_logits_batch (sampling/logits_processor.hpp) needs to apply the repetition and contextual
//! penalties (steps 1-2 of its chain) to rows whose context it is not given as one list per row.
//!
//! A row's penalty context is a committed context (a request's prompt and output so far) followed by
//! the row's own suffix (a tree node's root path; process_tree_logits' rule). A long context repeated
//! for each of a tree's rows would be read once per row and token, so each context is given once, as
//! its distinct tokens in ascending order with the position of each one's last occurrence:
//!   - the repetition penalty applies once to every distinct token of the context and the suffix;
//!   - the contextual penalty applies once to every distinct token whose last occurrence in
//!     context ++ suffix lies in the last W positions (TokenSwift §3.4, Eq. 3), i.e. at a position
//!     >= max(0, length + depth - W), the suffix's k-th token being at position length + k.
//! Each distinct token of a row is changed by one owner per phase (detail::penalty_path_step): the
//! context's pairs own their tokens, a suffix token owns itself at its last occurrence in the suffix.
//! The owners of a phase are distinct, so a CUDA block applies them in parallel without races, and
//! each penalized value is computed as process_logits computes it (repetition, then contextual, on
//! the original logit): bit for bit the same row.
//!
//! penalty_context_builder makes the arrays from committed token lists (or penalty_history, a
//! request's pairs kept up to date as it commits tokens) and trees, in host memory (a CUDA user copies
//! the seven arrays to the device).

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/core/config.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/tensor.hpp"

namespace specdec {

//! The penalty context of the rows of process_logits_batch (see the file comment). All int32, 1-D,
//! unit stride, in memory the call's policy can read. C contexts, T pairs, P suffix tokens:
//!   distinct        [T]      context c's distinct tokens, strictly ascending, in [0, V), at
//!                            [context_indptr[c], context_indptr[c + 1])
//!   last            [T]      last[j]: the position of distinct[j]'s last occurrence in its context,
//!                            in [0, context_length[c])
//!   context_indptr  [C + 1]  offsets into distinct / last (each context's range in [0, T])
//!   context_length  [C]      the committed length of context c: >= its pair count, and 0 exactly
//!                            when it has none
//!   row_context     [rows]   the context of row i, in [0, C), or -1: none (the suffix alone)
//!   path_indptr     [rows+1] offsets into path (each row's range in [0, P])
//!   path            [P]      row i's suffix, path[path_indptr[i] .. path_indptr[i + 1]), in [0, V)
//! Offsets need not start at 0 or be shared: each row reads its context's range and its own.
struct penalty_context {
  strided_view<const std::int32_t, 1> distinct, last, context_indptr, context_length, row_context, path_indptr, path;
};

namespace detail {

//! Throws invalid_argument naming `function` and `argument` unless every token of ctx is in [0, vocab)
//! (the context checks of process_logits, process_tree_logits and penalty_context_builder).
inline void check_context(std::span<const std::int32_t> ctx, std::int64_t vocab, std::string_view function,
                          std::string_view argument) {
  for (std::size_t j = 0; j < ctx.size(); ++j)
    if (ctx[j] < 0 || ctx[j] >= vocab) [[unlikely]]
      throw_invalid_argument(function, argument,
                             "token ids in [0, vocab = " + std::to_string(vocab) + ") (at position " +
                                 std::to_string(j) + ")",
                             ctx[j]);
}

//! The largest pair count, committed length and suffix depth of a penalty context (positions are
//! formed in int64, so only the arrays' own int32 range limits them).
inline constexpr std::int64_t penalty_context_max = std::numeric_limits<std::int32_t>::max();

//! One row's view of a penalty context and its sampling_params' penalties.
struct row_penalty {
  const std::int32_t* distinct = nullptr;  //!< the context's pairs: tokens ascending ...
  const std::int32_t* last = nullptr;      //!< ... and last positions
  std::int32_t count = 0;                  //!< pairs
  std::int64_t length = 0;                 //!< committed length
  const std::int32_t* path = nullptr;      //!< the row's suffix
  std::int32_t depth = 0;                  //!< its length
  float repetition = 1.0f;                 //!< r; 1 = off
  float contextual = 1.0f;                 //!< theta; 1 = off (also when W = 0)
  bool sign_aware = false;                 //!< contextual_sign_aware
  std::int64_t window_start = 0;           //!< positions >= it are in the contextual window

  //! Whether any token of the row is penalized (process_row's has_penalties).
  [[nodiscard]] SPECDEC_HOST_DEVICE bool active() const noexcept {
    return (repetition != 1.0f || contextual != 1.0f) && (count > 0 || depth > 0);
  }
};

//! row_penalty for a row with the given context (pairs may be null when count is 0) and suffix.
[[nodiscard]] SPECDEC_HOST_DEVICE inline row_penalty make_row_penalty(float repetition, float contextual, int window,
                                                                    bool sign_aware, const std::int32_t* distinct,
                                                                    const std::int32_t* last, std::int32_t count,
                                                                    std::int64_t length, const std::int32_t* path,
                                                                    std::int32_t depth) noexcept {
  row_penalty rp;
  rp.distinct = distinct, rp.last = last, rp.count = count, rp.length = length, rp.path = path, rp.depth = depth;
  rp.repetition = repetition;
  rp.contextual = window > 0 ? contextual : 1.0f;
  rp.sign_aware = sign_aware;
  const std::int64_t total = length + depth;
  rp.window_start = total > window ? total - window : 0;
  return rp;
}

//! The index of `token` among the sorted pairs, -1 when they lack it (binary search).
[[nodiscard]] SPECDEC_HOST_DEVICE inline std::int32_t penalty_pairs_find(const row_penalty& rp, std::int32_t token) noexcept {
  std::int32_t lo = 0, hi = rp.count;
  while (lo < hi) {
    const std::int32_t mid = lo + (hi - lo) / 2;
    if (rp.distinct[mid] < token)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < rp.count && rp.distinct[lo] == token ? lo : -1;
}

//! The CTRL form l > 0 ? l / theta : l * theta when sign_aware, else l / theta (logits_processor.hpp's
//! steps 1-2).
[[nodiscard]] SPECDEC_HOST_DEVICE inline float penalize(float l, float theta, bool sign_aware) noexcept {
  if (sign_aware && l <= 0.0f) return l * theta;
  return l / theta;
}

//! The penalized value of a logit `l` whose token last occurs at position `last`: repetition (always
//! the sign-aware form), then contextual inside the window; process_logits' operations in its order.
[[nodiscard]] SPECDEC_HOST_DEVICE inline float penalized_logit(const row_penalty& rp, float l, std::int64_t last) noexcept {
  if (rp.repetition != 1.0f) l = penalize(l, rp.repetition, true);
  if (rp.contextual != 1.0f && last >= rp.window_start) l = penalize(l, rp.contextual, rp.sign_aware);
  return l;
}

//! Applying a row's penalties in two phases, each with distinct owners (what the backends run):
//! phase 1, pair j sets its token's value from its committed last position alone
//! (penalized_logit(l, last[j])); phase 2, after phase 1 is done, suffix position k, when it is its
//! token's last occurrence in the suffix, either penalizes a token the context lacks (the whole
//! penalty, at position length + k) or brings a context token that phase 1 left outside the window
//! into it (the contextual penalty on the phase-1 value: the same operations, in the same order, as
//! penalized_logit at the token's true last position). Every distinct token of the row gets exactly
//! one final value this way, and phase 1 is O(1) per pair, not a scan of the suffix per pair.
//! What suffix position k does in phase 2:
enum class penalty_path_action : std::uint8_t {
  none,        //!< not the token's last occurrence, or a context token phase 1 already settled
  whole,       //!< a token the context lacks: penalized_logit(l, length + k)
  contextual,  //!< a context token the suffix brings into the window: penalize(x, theta, sign_aware)
};
//! `token` gets path[k]; `pair` its index among the pairs (-1: none).
[[nodiscard]] SPECDEC_HOST_DEVICE inline penalty_path_action penalty_path_step(const row_penalty& rp, std::int32_t k,
                                                                                std::int32_t& token,
                                                                                std::int32_t& pair) noexcept {
  token = rp.path[k];
  pair = -1;
  for (std::int32_t k2 = k + 1; k2 < rp.depth; ++k2)
    if (rp.path[k2] == token) return penalty_path_action::none;
  const std::int32_t j = penalty_pairs_find(rp, token);
  pair = j;
  if (j < 0) return penalty_path_action::whole;
  const bool inside_now = rp.contextual != 1.0f && rp.length + k >= rp.window_start;
  return inside_now && rp.last[j] < rp.window_start ? penalty_path_action::contextual : penalty_path_action::none;
}
//! Whether phase 1 changes pair j's token: with no repetition penalty, only the pairs inside the
//! window (a context of many distinct tokens and a short window then touches only the window's).
[[nodiscard]] SPECDEC_HOST_DEVICE inline bool penalty_pair_acts(const row_penalty& rp, std::int32_t j) noexcept {
  return rp.repetition != 1.0f || (rp.contextual != 1.0f && rp.last[j] >= rp.window_start);
}
//! Phase 2's new value for suffix position k's action on the token's current value x.
[[nodiscard]] SPECDEC_HOST_DEVICE inline float penalty_path_value(const row_penalty& rp, penalty_path_action a, float x,
                                                                  std::int32_t k) noexcept {
  return a == penalty_path_action::whole ? penalized_logit(rp, x, rp.length + k)
                                         : penalize(x, rp.contextual, rp.sign_aware);
}

//! The value a row's token ends with after both phases, read from the unpenalized row (nothing is
//! written), by the token's one final owner: a pair unless phase 2 acts on its token, else the suffix
//! position that acts. Every token of the context or the suffix has exactly one final owner; every
//! other token keeps its logit. What a fused kernel reads in place of the penalized row.
//!
//! Phase 2 acts on a pair's token iff the contextual penalty is on, the pair's last position lies
//! before the window and the token occurs in the suffix inside the window (positions k >=
//! window_suffix_begin(rp); penalty_path_step at its last occurrence, which is then inside too). A
//! window_suffix_filter of those suffix tokens answers "maybe" for each of them and for few others,
//! so a pair scans the suffix only on a "maybe": O(1) per pair before the window, not O(depth).
[[nodiscard]] SPECDEC_HOST_DEVICE inline std::int64_t window_suffix_begin(const row_penalty& rp) noexcept {
  const std::int64_t first_inside = rp.window_start - rp.length;
  return first_inside > 0 ? first_inside : 0;
}
//! A 1024-bit filter of a row's suffix tokens inside the window (add them all, then ask maybe()):
//! no false negatives; a token it was not given answers true with probability about (tokens added)
//! / 1024. Multiplicative hashing, the same bits on host and device.
struct window_suffix_filter {
  std::uint32_t words[32] = {};
  [[nodiscard]] static SPECDEC_HOST_DEVICE std::uint32_t slot(std::int32_t token) noexcept {
    return (static_cast<std::uint32_t>(token) * 2654435761u) >> 22;  // the top 10 bits
  }
  SPECDEC_HOST_DEVICE void add(std::int32_t token) noexcept { words[slot(token) >> 5] |= 1u << (slot(token) & 31); }
  [[nodiscard]] SPECDEC_HOST_DEVICE bool maybe(std::int32_t token) const noexcept {
    return ((words[slot(token) >> 5] >> (slot(token) & 31)) & 1u) != 0;
  }
};
//! Pair j: true, with `value` its token's final value, unless phase 2 brings its token into the
//! window: then false (that suffix position is the owner). `maybe(token)`: the window_suffix_filter's
//! answer (or any predicate true for every in-window suffix token).
template <class Maybe>
[[nodiscard]] SPECDEC_HOST_DEVICE bool penalty_pair_final(const row_penalty& rp, std::int32_t j, const float* row,
                                                          const Maybe& maybe, float& value) noexcept {
  const std::int32_t token = rp.distinct[j];
  if (rp.contextual != 1.0f && rp.last[j] < rp.window_start && maybe(token))
    for (std::int64_t k = window_suffix_begin(rp); k < rp.depth; ++k)
      if (rp.path[k] == token) return false;
  const float x = row[token];
  value = penalty_pair_acts(rp, j) ? penalized_logit(rp, x, rp.last[j]) : x;
  return true;
}
//! Suffix position k: true, with `token` and its final `value`, when phase 2 acts there (a token the
//! context lacks, at its last occurrence in the suffix; or a context token it brings into the
//! window, on the phase-1 value); else false (the token's owner is elsewhere). `before`, when given,
//! gets the token's value before phase 2.
[[nodiscard]] SPECDEC_HOST_DEVICE inline bool penalty_path_final(const row_penalty& rp, std::int32_t k, const float* row,
                                                                 std::int32_t& token, float& value,
                                                                 float* before = nullptr) noexcept {
  std::int32_t pair;
  const auto a = penalty_path_step(rp, k, token, pair);
  if (a == penalty_path_action::none) return false;
  float x = row[token];
  if (pair >= 0 && penalty_pair_acts(rp, pair)) x = penalized_logit(rp, x, rp.last[pair]);  // phase 1's value
  if (before != nullptr) *before = x;
  value = penalty_path_value(rp, a, x, k);
  return true;
}

//! A running first maximum (value, index): a larger value wins, an equal one the lower index (the
//! greedy rule: greedy_token, process_logits at temperature 0). Order-free, so threads and blocks may
//! combine their shares in any order.
struct first_max {
  float v = -std::numeric_limits<float>::infinity();
  std::int32_t i = std::numeric_limits<std::int32_t>::max();
  SPECDEC_HOST_DEVICE void see(float value, std::int32_t index) noexcept {
    if (value > v || (value == v && index < i)) v = value, i = index;
  }
};

//! What the two phases do to the number of the row's logits above -inf, read from the unpenalized
//! row (nothing is written): pair j's change (phase 1) and suffix position k's (phase 2, on the
//! phase-1 value). The row keeps a logit above -inf iff that number plus all the changes is > 0: the
//! check of a row the penalties might empty, without a copy of the row (the CUDA backend has none).
[[nodiscard]] SPECDEC_HOST_DEVICE inline int penalty_pair_survival(const row_penalty& rp, std::int32_t j,
                                                                   const float* row) noexcept {
  if (!penalty_pair_acts(rp, j)) return 0;
  const float x = row[rp.distinct[j]], ninf = -std::numeric_limits<float>::infinity();
  return int{penalized_logit(rp, x, rp.last[j]) > ninf} - int{x > ninf};
}
[[nodiscard]] SPECDEC_HOST_DEVICE inline int penalty_path_survival(const row_penalty& rp, std::int32_t k,
                                                                   const float* row) noexcept {
  std::int32_t token;
  float value, before;
  if (!penalty_path_final(rp, k, row, token, value, &before)) return 0;
  const float ninf = -std::numeric_limits<float>::infinity();
  return int{value > ninf} - int{before > ninf};
}

//! The checks a penalty context's values must pass, shared by the host backend (which throws) and the
//! device (which reports device_error::context). Each returns true when the value is valid.
//! Context c's header: 0 <= lo <= hi <= pairs, 0 <= hi - lo <= length, length == 0 iff hi == lo.
[[nodiscard]] SPECDEC_HOST_DEVICE inline bool penalty_context_header_ok(std::int32_t lo, std::int32_t hi,
                                                                        std::int32_t length, std::int64_t pairs) noexcept {
  return lo >= 0 && hi >= lo && hi <= pairs && length >= hi - lo && (length == 0) == (hi == lo);
}
//! Pair j of a context whose pairs start at lo: token in [0, V), above the previous pair's, last
//! position in [0, length).
[[nodiscard]] SPECDEC_HOST_DEVICE inline bool penalty_pair_ok(const std::int32_t* distinct, const std::int32_t* last,
                                                              std::int64_t lo, std::int64_t j, std::int64_t vocab,
                                                              std::int32_t length) noexcept {
  return distinct[j] >= 0 && distinct[j] < vocab && (j == lo || distinct[j - 1] < distinct[j]) && last[j] >= 0 &&
         last[j] < length;
}
//! Row i's suffix range: 0 <= lo <= hi <= P.
[[nodiscard]] SPECDEC_HOST_DEVICE inline bool penalty_path_range_ok(std::int32_t lo, std::int32_t hi,
                                                                    std::int64_t path_tokens) noexcept {
  return lo >= 0 && hi >= lo && hi <= path_tokens;
}

}  // namespace detail

namespace detail {

//! The pairs of a token list (its distinct tokens ascending, each with its last position) without a
//! sort: each token marks a bit of a vocabulary-sized bitmap and writes its index into a
//! vocabulary-sized position array (later occurrences overwrite earlier ones), then the bitmap's words
//! are read in order, each set bit giving the next token. O(n + V / 64), with no data-dependent
//! branch per token; both arrays are allocated on first use (V * 4.125 bytes), the bitmap left clear.
class token_marks {
 public:
  token_marks() = default;
  // scratch: a copy starts without arrays of its own (they are made on its first use)
  token_marks(const token_marks&) noexcept {}
  token_marks& operator=(const token_marks&) noexcept { return *this; }
  token_marks(token_marks&& o) noexcept
      : vocab_(std::exchange(o.vocab_, 0)), position_(std::move(o.position_)), bits_(std::move(o.bits_)) {}
  token_marks& operator=(token_marks&& o) noexcept {
    vocab_ = std::exchange(o.vocab_, 0), position_ = std::move(o.position_), bits_ = std::move(o.bits_);
    return *this;
  }

  //! Appends to `distinct` the distinct tokens of `tokens` ascending and to `last` each one's last
  //! position, offset + its last index. The tokens must be in [0, vocab) and offset + tokens.size()
  //! at most INT32_MAX (the callers check both).
  void append_pairs(std::span<const std::int32_t> tokens, std::int64_t offset, std::int32_t vocab,
                    std::vector<std::int32_t>& distinct, std::vector<std::int32_t>& last) {
    const auto words = (static_cast<std::size_t>(vocab) + 63) / 64;
    if (vocab != vocab_ || !position_) {  // (a moved-from object has none)
      position_ = std::make_unique_for_overwrite<std::int32_t[]>(static_cast<std::size_t>(vocab));
      bits_.assign(words, 0);
      vocab_ = vocab;
    }
    // room first: nothing below may throw once a bit is set (a throw would leave bits for the next call)
    const std::size_t most = std::min(tokens.size(), static_cast<std::size_t>(vocab));
    distinct.reserve(distinct.size() + most), last.reserve(last.size() + most);
    for (std::size_t j = 0; j < tokens.size(); ++j) {
      const auto t = static_cast<std::uint32_t>(tokens[j]);
      position_[t] = static_cast<std::int32_t>(j);
      bits_[t >> 6] |= std::uint64_t{1} << (t & 63u);
    }
    for (std::size_t w = 0; w < words; ++w) {
      for (std::uint64_t x = bits_[w]; x != 0; x &= x - 1) {
        const auto t = static_cast<std::int32_t>(w * 64 + static_cast<std::size_t>(std::countr_zero(x)));
        distinct.push_back(t);
        last.push_back(static_cast<std::int32_t>(offset + position_[static_cast<std::size_t>(t)]));
      }
      bits_[w] = 0;
    }
  }

 private:
  std::int32_t vocab_ = 0;
  std::unique_ptr<std::int32_t[]> position_;
  std::vector<std::uint64_t> bits_;
};

}  // namespace detail

//! One request's penalty context kept across steps: the distinct tokens of everything appended so
//! far (ascending) with their last positions, i.e. what penalty_context_builder::add_context makes
//! from the whole list, updated as tokens are committed instead of rebuilt from all of them. An
//! engine keeps one per request with a penalty, appends each step's committed tokens, and hands it
//! to add_context(const penalty_history&) (or batch_verify_input::histories). append() of n tokens
//! costs a sort of them, a binary search of each among the D distinct tokens so far, and a merge of
//! those not seen before (O(n log n + n log D), plus O(D) at worst for the merge): a few microseconds
//! for a step's tokens, where rebuilding a 32K-token context costs tens (RESULTS.md). Memory: two
//! int32 per distinct token.
class penalty_history {
 public:
  //! An empty history over a vocabulary of `vocab` tokens (>= 1).
  explicit penalty_history(std::int32_t vocab) : vocab_(vocab) { require(vocab >= 1, fn_, "vocab", ">= 1", vocab); }

  //! Forgets every token (keeps the memory).
  void clear() noexcept { distinct_.clear(), last_.clear(), length_ = 0; }

  //! Appends tokens at positions length() ... Throws invalid_argument (the history unchanged) on a
  //! token outside [0, vocab) or a length past INT32_MAX.
  void append(std::span<const std::int32_t> tokens) {
    require(tokens.size() <= static_cast<std::size_t>(detail::penalty_context_max - length_), fn_, "tokens",
            "a length of at most INT32_MAX in all (length() = " + std::to_string(length_) + ")", tokens.size());
    detail::check_context(tokens, vocab_, fn_, "tokens");
    if (tokens.empty()) return;
    // the new tokens' pairs: a sort of (token, index) keys, each token's last index kept
    fresh_.clear(), fresh_last_.clear(), keys_.clear();
    for (std::size_t j = 0; j < tokens.size(); ++j)
      keys_.push_back(static_cast<std::uint64_t>(tokens[j]) << 32 | static_cast<std::uint64_t>(j));
    std::sort(keys_.begin(), keys_.end());
    for (std::size_t i = 0; i < keys_.size(); ++i)
      if (i + 1 == keys_.size() || keys_[i + 1] >> 32 != keys_[i] >> 32) {
        fresh_.push_back(static_cast<std::int32_t>(keys_[i] >> 32));
        fresh_last_.push_back(static_cast<std::int32_t>(length_ + static_cast<std::int64_t>(keys_[i] & 0xffffffffu)));
      }
    // tokens seen before take their new last position in place; the rest (still ascending) are merged in
    std::size_t added = 0;
    for (std::size_t i = 0; i < fresh_.size(); ++i) {
      const auto at = std::lower_bound(distinct_.begin(), distinct_.end(), fresh_[i]);
      if (at != distinct_.end() && *at == fresh_[i]) {
        last_[static_cast<std::size_t>(at - distinct_.begin())] = fresh_last_[i];
      } else {
        fresh_[added] = fresh_[i], fresh_last_[added] = fresh_last_[i], ++added;
      }
    }
    std::size_t i = distinct_.size(), j = added, k = i + j;
    distinct_.resize(k), last_.resize(k);
    while (j > 0) {  // backwards: each old pair moves at most once, those below the smallest new token stay
      --k;
      if (i > 0 && distinct_[i - 1] > fresh_[j - 1]) {
        --i, distinct_[k] = distinct_[i], last_[k] = last_[i];
      } else {
        --j, distinct_[k] = fresh_[j], last_[k] = fresh_last_[j];
      }
    }
    length_ += static_cast<std::int64_t>(tokens.size());
  }

  //! Tokens appended so far.
  [[nodiscard]] std::int64_t length() const noexcept { return length_; }
  [[nodiscard]] std::int32_t vocab() const noexcept { return vocab_; }
  //! The pairs: distinct tokens ascending, each one's last position (penalty_context's layout).
  [[nodiscard]] std::span<const std::int32_t> distinct() const noexcept { return distinct_; }
  [[nodiscard]] std::span<const std::int32_t> last() const noexcept { return last_; }

 private:
  static constexpr std::string_view fn_ = "specdec::penalty_history::append";
  std::int32_t vocab_;
  std::int64_t length_ = 0;
  std::vector<std::int32_t> distinct_, last_, fresh_, fresh_last_;
  std::vector<std::uint64_t> keys_;
};

//! Builds a penalty_context in host memory: add each committed context once, then the rows that use
//! it (a tree's n + 1 verification rows with add_tree_rows). A token list costs O(length + V / 64)
//! (detail::token_marks, whose vocabulary-sized arrays are kept between builds); a penalty_history
//! costs a copy of its pairs. Throws invalid_argument
//! on a token outside [0, vocab), a bad tree, or a size past INT32_MAX.
class penalty_context_builder {
 public:
  //! An empty context for a vocabulary of `vocab` tokens (>= 1).
  explicit penalty_context_builder(std::int32_t vocab) : vocab_(vocab) {
    require(vocab >= 1, fn_, "vocab", ">= 1", vocab);
    path_indptr_.push_back(0);
    context_indptr_.push_back(0);
  }

  //! Forgets every context and row (keeps the memory).
  void clear() {
    distinct_.clear(), last_.clear(), context_length_.clear(), row_context_.clear(), path_.clear();
    context_indptr_.assign(1, 0), path_indptr_.assign(1, 0);
  }

  //! Adds a committed context; returns its index for add_row / add_tree_rows.
  std::int32_t add_context(std::span<const std::int32_t> committed) {
    require(committed.size() <= static_cast<std::size_t>(detail::penalty_context_max), fn_, "committed",
            "at most INT32_MAX tokens", committed.size());
    require(context_length_.size() < static_cast<std::size_t>(detail::penalty_context_max), fn_, "contexts",
            "fewer than INT32_MAX", context_length_.size());
    // the pairs' total stays in int32 whatever the context holds (checked before anything is added)
    require(distinct_.size() + std::min(committed.size(), static_cast<std::size_t>(vocab_)) <=
                static_cast<std::size_t>(detail::penalty_context_max),
            fn_, "committed", "at most INT32_MAX distinct tokens in all contexts", distinct_.size());
    detail::check_context(committed, vocab_, fn_, "committed");  // before anything is added
    require_not_own("committed", committed);
    marks_.append_pairs(committed, 0, vocab_, distinct_, last_);
    context_indptr_.push_back(static_cast<std::int32_t>(distinct_.size()));
    context_length_.push_back(static_cast<std::int32_t>(committed.size()));
    return static_cast<std::int32_t>(context_length_.size() - 1);
  }

  //! Adds the committed context a penalty_history holds (its pairs copied: O(distinct tokens), no
  //! pass over the tokens); returns its index. The history's vocabulary must be the builder's.
  std::int32_t add_context(const penalty_history& history) {
    require_equal(fn_, "history.vocab()", static_cast<std::int64_t>(vocab_), static_cast<std::int64_t>(history.vocab()));
    require(context_length_.size() < static_cast<std::size_t>(detail::penalty_context_max), fn_, "contexts",
            "fewer than INT32_MAX", context_length_.size());
    require(distinct_.size() + history.distinct().size() <= static_cast<std::size_t>(detail::penalty_context_max), fn_,
            "history", "at most INT32_MAX distinct tokens in all contexts", distinct_.size());
    distinct_.insert(distinct_.end(), history.distinct().begin(), history.distinct().end());
    last_.insert(last_.end(), history.last().begin(), history.last().end());
    context_indptr_.push_back(static_cast<std::int32_t>(distinct_.size()));
    context_length_.push_back(static_cast<std::int32_t>(history.length()));
    return static_cast<std::int32_t>(context_length_.size() - 1);
  }

  //! Adds a row with context `context` (an add_context result, or -1 for none) and suffix `path`.
  void add_row(std::int32_t context, std::span<const std::int32_t> path) {
    require_not_own("path", path);
    append_row(context, path);
  }

  //! Adds the n + 1 verification rows of a tree (process_tree_logits' rows): row 0 with an empty
  //! suffix, row i + 1 with node i's root path (root child first, node i last). tokens[i], parents[i]
  //! (-1 = a child of the root, else < i).
  void add_tree_rows(std::int32_t context, std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents) {
    require_not_own("tokens", tokens);
    require_not_own("parents", parents);
    require_equal(fn_, "parents.size()", tokens.size(), parents.size());
    for (std::size_t i = 0; i < parents.size(); ++i)
      if (parents[i] < -1 || parents[i] >= static_cast<std::int64_t>(i)) [[unlikely]]
        throw_invalid_argument(fn_, "parents", "parents[i] in [-1, i) (topological order) at i = " + std::to_string(i),
                               parents[i]);
    detail::check_context(tokens, vocab_, fn_, "tokens");  // every check before the first row is added
    check_context_index(context);
    // the sizes the rows will reach, checked before the first is added (append_row's own checks
    // would throw partway, leaving some of the tree's rows): n + 1 rows, sum of node depths suffix
    // tokens (a chain of 2^16 nodes holds 2^31 + 2^15 of them)
    require(row_context_.size() + tokens.size() + 1 <= static_cast<std::size_t>(detail::penalty_context_max), fn_,
            "tokens", "a tree whose n + 1 rows keep the rows below INT32_MAX", tokens.size());
    std::int64_t suffix = 0;  // depths fit int32 now: n < INT32_MAX
    depth_.resize(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      depth_[i] = parents[i] < 0 ? 1 : depth_[static_cast<std::size_t>(parents[i])] + 1;
      suffix += depth_[i];
    }
    require(static_cast<std::int64_t>(path_.size()) + suffix <= detail::penalty_context_max, fn_, "parents",
            "a tree whose root paths (" + std::to_string(suffix) + " tokens) keep all rows' suffixes within INT32_MAX",
            path_.size());
    // and a failed allocation leaves the builder as it was
    const std::size_t rows0 = row_context_.size(), path0 = path_.size();
    try {
      append_row(context, {});
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        scratch_.clear();
        for (std::int64_t a = static_cast<std::int64_t>(i); a >= 0; a = parents[static_cast<std::size_t>(a)])
          scratch_.push_back(tokens[static_cast<std::size_t>(a)]);
        std::reverse(scratch_.begin(), scratch_.end());
        append_row(context, scratch_);
      }
    } catch (...) {
      row_context_.resize(rows0), path_indptr_.resize(rows0 + 1), path_.resize(path0);
      throw;
    }
  }

  [[nodiscard]] std::int32_t contexts() const noexcept { return static_cast<std::int32_t>(context_length_.size()); }
  [[nodiscard]] std::int32_t rows() const noexcept { return static_cast<std::int32_t>(row_context_.size()); }
  [[nodiscard]] std::int32_t vocab() const noexcept { return vocab_; }

  // The seven arrays (host memory), e.g. to copy to a device.
  [[nodiscard]] std::span<const std::int32_t> distinct() const noexcept { return distinct_; }
  [[nodiscard]] std::span<const std::int32_t> last() const noexcept { return last_; }
  [[nodiscard]] std::span<const std::int32_t> context_indptr() const noexcept { return context_indptr_; }
  [[nodiscard]] std::span<const std::int32_t> context_length() const noexcept { return context_length_; }
  [[nodiscard]] std::span<const std::int32_t> row_context() const noexcept { return row_context_; }
  [[nodiscard]] std::span<const std::int32_t> path_indptr() const noexcept { return path_indptr_; }
  [[nodiscard]] std::span<const std::int32_t> path() const noexcept { return path_; }

  //! The context as host views (valid until the builder changes).
  [[nodiscard]] penalty_context view() const noexcept {
    const auto v = [](const std::vector<std::int32_t>& a) {
      return make_view<1>(a.data(), {static_cast<std::int64_t>(a.size())});
    };
    return {v(distinct_), v(last_), v(context_indptr_), v(context_length_), v(row_context_), v(path_indptr_), v(path_)};
  }

 private:
  // add_row without the aliasing check (add_tree_rows passes its own scratch).
  void append_row(std::int32_t context, std::span<const std::int32_t> path) {
    check_context_index(context);
    require(row_context_.size() < static_cast<std::size_t>(detail::penalty_context_max), fn_, "rows",
            "fewer than INT32_MAX", row_context_.size());
    require(path_.size() + path.size() <= static_cast<std::size_t>(detail::penalty_context_max), fn_, "path",
            "at most INT32_MAX suffix tokens in all rows", path_.size() + path.size());
    detail::check_context(path, vocab_, fn_, "path");
    path_.insert(path_.end(), path.begin(), path.end());
    path_indptr_.push_back(static_cast<std::int32_t>(path_.size()));
    row_context_.push_back(context);
  }
  // An argument must not view the builder's own arrays: they grow (and may move) while it is read.
  void require_not_own(std::string_view argument, std::span<const std::int32_t> in) const {
    const auto view = [](std::span<const std::int32_t> a) {
      return strided_view<const std::int32_t, 1>(a.data(), {static_cast<std::int64_t>(a.size())}, {1});
    };
    for (const auto* own : {&distinct_, &last_, &context_indptr_, &context_length_, &row_context_, &path_indptr_, &path_,
                            &scratch_, &depth_})
      if (views_overlap(view(in), view(*own))) [[unlikely]]
        throw_invalid_argument(fn_, argument, "memory apart from the builder's own arrays (they grow while it is read)",
                               "a view of one of them");
  }
  void check_context_index(std::int32_t context) const {
    require(context >= -1 && context < contexts(), fn_, "context",
            "-1 or an index from add_context (< " + std::to_string(contexts()) + ")", context);
  }

  static constexpr std::string_view fn_ = "specdec::penalty_context_builder";
  std::int32_t vocab_;
  std::vector<std::int32_t> distinct_, last_, context_indptr_, context_length_, row_context_, path_indptr_, path_;
  detail::token_marks marks_;
  std::vector<std::int32_t> scratch_;
  std::vector<std::int32_t> depth_;  // add_tree_rows: each node's depth (its root path's length)
};

}  // namespace specdec
