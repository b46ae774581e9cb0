#pragma once
//! \file ngram_pool.hpp
//! TokenSwift's token reutilization (§3.2, Algorithm 1 line 10): a frequency table of the n-grams of
//! the generated sequence S = {x_0, ..., x_{t-1}}, queried for the top-k most frequent n-grams that
//! begin with a given token (TokenSwift: a_0 = argmax p_0, n = 4 "to maintain consistency with
//! multi-token generation", k = 20; Appendix B.2, Table 11).
//!
//! Update: push(token) is amortized O(1) (one open-addressing hash probe, an O(1) LFU move between
//! frequency nodes, and at most one eviction; no allocation in steady state). Query: O(m + k log k)
//! for the m distinct n-grams that begin with the token.
//! Memory: O(max_entries): at most max_entries n-grams, each n tokens plus ~56 bytes of bookkeeping
//! (slot, frequency node, per-first-token list entry, hash cell at load <= 1/2).
//! Eviction rule (when a NEW n-gram arrives and the table is full): the least frequent n-gram is
//! dropped; among equally frequent ones, the one whose count was last raised longest ago (its last
//! occurrence is the oldest). This is O(1) LFU with per-count recency lists. A count saturates at
//! 2^32 - 1 (further occurrences only refresh its recency).
//! Ranking (deterministic): higher count first; ties broken by a seeded pseudo-random key of the
//! n-gram (Philox of a hash of its tokens, keyed by `seed`), then lexicographically; so equal counts
//! are ordered "randomly" but reproducibly (the library's choice: TokenSwift §3.4's random selection
//! is among the groups that passed verification, which exact tree verification replaces by its walk;
//! the paper leaves retrieval ties open), and two continuations with the same count are both kept and
//! both returned when k allows.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/detail/hash_slots.hpp"

namespace specdec {

//! Parameters of ngram_pool.
struct ngram_pool_params {
  int n = 4;                       //!< n-gram length (TokenSwift: 4), >= 2
  int max_entries = 1 << 20;       //!< cap on distinct n-grams kept, >= 1
  std::uint64_t seed = 0;          //!< tie-break key seed
};

//! One query result: an n-gram (tokens[0] is the queried token) and its frequency.
struct ngram_candidate {
  std::vector<std::int32_t> tokens;
  std::uint32_t count = 0;
};

//! Incremental n-gram frequency table (see file comment). Not thread-safe.
class ngram_pool {
 public:
  explicit ngram_pool(ngram_pool_params params = {}) : p_(params) {
    constexpr std::string_view fn = "specdec::ngram_pool";
    require(p_.n >= 2, fn, "params.n", ">= 2", p_.n);
    require(p_.max_entries >= 1, fn, "params.max_entries", ">= 1", p_.max_entries);
  }

  [[nodiscard]] const ngram_pool_params& params() const noexcept { return p_; }
  //! Distinct n-grams currently stored.
  [[nodiscard]] int size() const noexcept { return static_cast<int>(index_.size()); }
  //! Tokens pushed so far.
  [[nodiscard]] std::uint64_t tokens_seen() const noexcept { return seen_; }

  //! Appends one generated token; counts the n-gram it completes. Amortized O(1).
  void push(std::int32_t token) {
    ++seen_;
    if (static_cast<int>(window_.size()) < p_.n) {
      window_.push_back(token);
    } else {
      std::copy(window_.begin() + 1, window_.end(), window_.begin());  // n is small
      window_.back() = token;
    }
    if (static_cast<int>(window_.size()) == p_.n) count(window_.data());
  }

  //! Appends tokens in order (e.g. the accepted tokens of a step). O(tokens.size()) amortized.
  void extend(std::span<const std::int32_t> tokens) {
    for (auto t : tokens) push(t);
  }

  //! Frequency of an n-gram (0 if absent or evicted). gram.size() must equal n.
  [[nodiscard]] std::uint32_t frequency(std::span<const std::int32_t> gram) const {
    require_equal("specdec::ngram_pool::frequency", "gram.size()", static_cast<std::size_t>(p_.n), gram.size());
    const int s = find(gram.data(), hash(gram.data()));
    return s < 0 ? 0u : slots_[static_cast<std::size_t>(s)].count;
  }

  //! Number of distinct stored n-grams beginning with `first` (the m of query's cost). O(1).
  [[nodiscard]] int count_starting_with(std::int32_t first) const {
    const auto it = by_first_.find(first);
    return it == by_first_.end() ? 0 : static_cast<int>(it->second.size());
  }

  //! The k most frequent n-grams beginning with `first` (ranking in the file comment), best first;
  //! fewer when fewer exist. k >= 0. O(m + k log k), m = n-grams starting with `first`.
  [[nodiscard]] std::vector<ngram_candidate> query(std::int32_t first, int k = 20) const {
    require(k >= 0, "specdec::ngram_pool::query", "k", ">= 0", k);
    std::vector<ngram_candidate> out;
    const auto it = by_first_.find(first);
    if (it == by_first_.end() || k == 0) return out;
    std::vector<std::int32_t> ids(it->second);
    const auto better = [&](std::int32_t a, std::int32_t b) {
      const slot& x = slots_[static_cast<std::size_t>(a)];
      const slot& y = slots_[static_cast<std::size_t>(b)];
      if (x.count != y.count) return x.count > y.count;
      if (x.tie != y.tie) return x.tie < y.tie;
      return std::lexicographical_compare(gram(a), gram(a) + p_.n, gram(b), gram(b) + p_.n);
    };
    const std::size_t take = std::min(ids.size(), static_cast<std::size_t>(k));
    if (take < ids.size()) std::nth_element(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(take), ids.end(), better);
    ids.resize(take);
    std::sort(ids.begin(), ids.end(), better);
    for (auto s : ids) out.push_back({std::vector<std::int32_t>(gram(s), gram(s) + p_.n), slots_[static_cast<std::size_t>(s)].count});
    return out;
  }

  //! The seeded tie-break key of an n-gram (smaller ranks first among equal counts). O(n).
  [[nodiscard]] std::uint64_t tie_rank(std::span<const std::int32_t> gram) const {
    require_equal("specdec::ngram_pool::tie_rank", "gram.size()", static_cast<std::size_t>(p_.n), gram.size());
    return tie_key(hash(gram.data()));
  }

  //! Forgets everything (keeps the parameters).
  void clear() {
    index_.clear(), by_first_.clear(), slots_.clear(), grams_.clear(), free_.clear(), window_.clear();
    freqs_.clear(), free_freq_.clear();
    freq_head_ = -1, seen_ = 0;
  }

 private:
  // LFU in O(1) (Shah, Mitra, Matani 2010): a list of frequency nodes in increasing count, each
  // holding its n-grams oldest-raised first; pooled in vectors, so steady state allocates nothing.
  struct slot {
    std::uint32_t count = 0;
    std::uint64_t tie = 0;              // seeded tie-break key
    std::uint64_t h = 0;                // hash of the tokens
    std::int32_t freq = -1;             // frequency node
    std::int32_t prev = -1, next = -1;  // neighbours within the frequency node, oldest at head
    std::int32_t first_pos = -1;        // position in by_first_[first token]
  };
  struct freq_node {
    std::uint32_t count = 0;
    std::int32_t head = -1, tail = -1;  // slots
    std::int32_t prev = -1, next = -1;  // neighbouring frequency nodes (ascending count)
  };

  const std::int32_t* gram(std::int32_t s) const { return grams_.data() + static_cast<std::size_t>(s) * static_cast<std::size_t>(p_.n); }
  std::int32_t* gram(std::int32_t s) { return grams_.data() + static_cast<std::size_t>(s) * static_cast<std::size_t>(p_.n); }

  std::uint64_t hash(const std::int32_t* g) const {
    std::uint64_t h = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < p_.n; ++i) {
      h ^= static_cast<std::uint32_t>(g[i]);
      h *= 0xFF51AFD7ED558CCDull;
      h ^= h >> 32;
    }
    return h;
  }
  std::uint64_t tie_key(std::uint64_t h) const {
    const philox_block b = philox4x32_10(
        philox_block{{static_cast<std::uint32_t>(h), static_cast<std::uint32_t>(h >> 32), 0x6e677261u, 0x6d706f6fu}},
        static_cast<std::uint32_t>(p_.seed), static_cast<std::uint32_t>(p_.seed >> 32));
    return (static_cast<std::uint64_t>(b.v[0]) << 32) | b.v[1];
  }
  int find(const std::int32_t* g, std::uint64_t h) const {
    return index_.find(h, [&](std::int32_t s) { return std::equal(g, g + p_.n, gram(s)); });
  }

  std::int32_t new_freq(std::uint32_t count, std::int32_t after) {  // after = -1: at the head
    std::int32_t f;
    if (!free_freq_.empty()) {
      f = free_freq_.back();
      free_freq_.pop_back();
    } else {
      f = static_cast<std::int32_t>(freqs_.size());
      freqs_.emplace_back();
    }
    freq_node& x = freqs_[static_cast<std::size_t>(f)];
    x = freq_node{};
    x.count = count;
    x.prev = after;
    x.next = after < 0 ? freq_head_ : freqs_[static_cast<std::size_t>(after)].next;
    if (x.next >= 0) freqs_[static_cast<std::size_t>(x.next)].prev = f;
    if (after >= 0) freqs_[static_cast<std::size_t>(after)].next = f; else freq_head_ = f;
    return f;
  }
  void drop_freq_if_empty(std::int32_t f) {
    freq_node& x = freqs_[static_cast<std::size_t>(f)];
    if (x.head >= 0) return;
    if (x.prev >= 0) freqs_[static_cast<std::size_t>(x.prev)].next = x.next; else freq_head_ = x.next;
    if (x.next >= 0) freqs_[static_cast<std::size_t>(x.next)].prev = x.prev;
    free_freq_.push_back(f);
  }
  void unlink(std::int32_t s) {
    slot& x = slots_[static_cast<std::size_t>(s)];
    freq_node& f = freqs_[static_cast<std::size_t>(x.freq)];
    if (x.prev >= 0) slots_[static_cast<std::size_t>(x.prev)].next = x.next; else f.head = x.next;
    if (x.next >= 0) slots_[static_cast<std::size_t>(x.next)].prev = x.prev; else f.tail = x.prev;
    x.prev = x.next = -1;
  }
  void link_tail(std::int32_t s, std::int32_t f) {
    slot& x = slots_[static_cast<std::size_t>(s)];
    freq_node& b = freqs_[static_cast<std::size_t>(f)];
    x.freq = f;
    x.prev = b.tail;
    x.next = -1;
    if (b.tail >= 0) slots_[static_cast<std::size_t>(b.tail)].next = s; else b.head = s;
    b.tail = s;
  }

  void evict_one() {
    const std::int32_t f = freq_head_;  // least frequent; its head was raised longest ago
    const std::int32_t s = freqs_[static_cast<std::size_t>(f)].head;
    unlink(s);
    drop_freq_if_empty(f);
    slot& x = slots_[static_cast<std::size_t>(s)];
    index_.erase(x.h, s);
    auto fit = by_first_.find(gram(s)[0]);  // swap-remove from the first-token list
    auto& lst = fit->second;
    const std::int32_t moved = lst.back();
    lst[static_cast<std::size_t>(x.first_pos)] = moved;
    slots_[static_cast<std::size_t>(moved)].first_pos = x.first_pos;
    lst.pop_back();
    if (lst.empty()) by_first_.erase(fit);
    x = slot{};
    free_.push_back(s);
  }

  void count(const std::int32_t* g) {
    const std::uint64_t h = hash(g);
    const int s = find(g, h);
    if (s >= 0) {
      slot& x = slots_[static_cast<std::size_t>(s)];
      const std::int32_t f = x.freq;
      if (x.count == std::numeric_limits<std::uint32_t>::max()) [[unlikely]] {  // saturated (2^32 - 1
        unlink(s);  // occurrences; a wrap to 0 ranked it last): only its recency is refreshed
        link_tail(s, f);
        return;
      }
      std::int32_t nf = freqs_[static_cast<std::size_t>(f)].next;
      if (nf < 0 || freqs_[static_cast<std::size_t>(nf)].count != x.count + 1) nf = new_freq(x.count + 1, f);
      unlink(s);
      drop_freq_if_empty(f);
      ++x.count;
      link_tail(s, nf);
      return;
    }
    if (size() >= p_.max_entries) evict_one();
    std::int32_t ns;
    if (!free_.empty()) {
      ns = free_.back();
      free_.pop_back();
    } else {
      ns = static_cast<std::int32_t>(slots_.size());
      slots_.emplace_back();
      grams_.resize(grams_.size() + static_cast<std::size_t>(p_.n));
    }
    std::copy(g, g + p_.n, gram(ns));
    slot& x = slots_[static_cast<std::size_t>(ns)];
    x.count = 1;
    x.h = h;
    x.tie = tie_key(h);
    const std::int32_t f1 = (freq_head_ >= 0 && freqs_[static_cast<std::size_t>(freq_head_)].count == 1) ? freq_head_ : new_freq(1, -1);
    link_tail(ns, f1);
    index_.insert(h, ns);
    auto& lst = by_first_[g[0]];
    x.first_pos = static_cast<std::int32_t>(lst.size());
    lst.push_back(ns);
  }

  ngram_pool_params p_;
  detail::hash_slots index_;
  std::unordered_map<std::int32_t, std::vector<std::int32_t>> by_first_;
  std::vector<slot> slots_;
  std::vector<freq_node> freqs_;
  std::vector<std::int32_t> grams_, free_, free_freq_, window_;
  std::int32_t freq_head_ = -1;
  std::uint64_t seen_ = 0;
};

}  // namespace specdec
