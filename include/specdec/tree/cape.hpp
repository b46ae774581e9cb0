#pragma once
//! \file cape.hpp
//! CAPE, confidence-aware proposal expansion (GLIDE with a CAPE, §4.2 and Appendix A, Algorithms 1-2).
//!
//! From a greedy draft chain x_1..x_gamma and the draft distribution p_D(. | x_<i) at each step, CAPE
//! adds an expansion set X_i of the K_i next-best tokens at step i (excluding x_i), K_i = S(p_i) with
//! p_i = the draft's confidence in x_i. Expansion tokens are never extended (they are not fed back
//! to the draft model), so the proposal is a "comb": the chain plus siblings of each chain token.
//! X_i never contains x_i nor repeats a token (equal siblings share one context, so a repeat would be
//! verified twice for nothing): repeated candidates are merged, keeping the better log-prob. The chain
//! need not be greedy (a sampled one, say): X_i is then the best of the same p_D(. | x_<i) other than
//! the drawn x_i, so every expansion token hangs under the prefix it was ranked for.
//!
//! Linearized proposal (§4.2, Algorithm 2): P = (x_1..x_gamma, X_1..., X_2..., ..., X_gamma...),
//! beta = gamma + sum K_i tokens; pos(i) = i for i <= gamma and pos(i) = j for x in X_j (1-based, as
//! in the paper). Mask_CAPE(i, j) is "attend" iff (j <= gamma and pos(i) > j) or i == j, i.e. every
//! token sees the chain tokens before its own step and itself. Algorithm 2's position ids are
//! input_pi = pos - 1 (0-based step), so a token's absolute position is committed_length + pos - 1.
//! In tree form: chain token i is node i-1 with parent i-2, and x in X_j is a child of chain node
//! j-2 (the root for j = 1), stored in linearized order, so token_tree::ancestor_mask() equals
//! Mask_CAPE bit for bit and positions() equals committed + input_pi.
//!
//! Two schedules S are shipped: the §4.2 bins (7, 5, 3, 1 for p in (0,.3], (.3,.6], (.6,.8], (.8,1])
//! and Algorithm 1's 12-entry table S = [8,8,8,8,6,6,6,6,4,4,2,2] indexed by floor(10 p). Algorithm 1
//! takes topk(p_i, S[...]), which contains x_i itself; §4.2 defines X_i without x_i, and a duplicate
//! sibling of x_i could never be accepted instead of x_i, so a table that "counts the greedy token"
//! yields K_i = S[...] - 1 (again 7, 5, 3, 1, on the bins [0,.4), [.4,.8), [.8,1), {1}).
//! Note on Algorithm 2 as printed: "VAM[:, gamma:] <- CAM[:, gamma:]" would let expansion tokens see
//! each other and stop chain tokens from seeing earlier chain tokens, contradicting the §4.2 mask
//! and text; we follow §4.2 (equivalently, Algorithm 2 with the chain block VAM[:gamma, :gamma] set
//! causal), which the tests check step by step.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/core/bitmask.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/topk.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! The expansion-size function S(p) of CAPE: bins (§4.2 style) or an indexed table (Algorithm 1).
class cape_schedule {
 public:
  //! Bins: K = sizes[k] for p in (upper_bounds[k-1], upper_bounds[k]] (lower bound 0 for k = 0).
  //! upper_bounds strictly increasing, last == 1; sizes >= 0. §4.2 uses ({.3,.6,.8,1}, {7,5,3,1}).
  static cape_schedule from_bins(std::vector<float> upper_bounds, std::vector<int> sizes) {
    constexpr std::string_view fn = "specdec::cape_schedule::from_bins";
    require(!upper_bounds.empty(), fn, "upper_bounds", "non-empty", "empty");
    require_equal(fn, "sizes.size()", upper_bounds.size(), sizes.size());
    for (std::size_t k = 0; k < upper_bounds.size(); ++k) {
      const float lo = k == 0 ? 0.0f : upper_bounds[k - 1];
      require(upper_bounds[k] > lo, fn, "upper_bounds[" + std::to_string(k) + "]",
              "> " + std::to_string(lo) + " (strictly increasing, positive)", upper_bounds[k]);
      require(sizes[k] >= 0, fn, "sizes[" + std::to_string(k) + "]", ">= 0", sizes[k]);
    }
    require(upper_bounds.back() == 1.0f, fn, "upper_bounds.back()", "1 (the bins cover (0, 1])", upper_bounds.back());
    cape_schedule s;
    s.bounds_ = std::move(upper_bounds);
    s.sizes_ = std::move(sizes);
    return s;
  }

  //! Table: K = entries[min(floor(scale * p), entries.size() - 1)] - (counts_greedy ? 1 : 0)
  //! (Algorithm 1 with scale 10). entries >= (counts_greedy ? 1 : 0); scale finite and > 0 (any such
  //! scale works: a huge one maps every p to the last entry).
  static cape_schedule from_table(std::vector<int> entries, float scale = 10.0f, bool counts_greedy = true) {
    constexpr std::string_view fn = "specdec::cape_schedule::from_table";
    require(!entries.empty(), fn, "entries", "non-empty", "empty");
    require(scale > 0.0f && std::isfinite(scale), fn, "scale", "a finite value > 0", scale);
    for (std::size_t k = 0; k < entries.size(); ++k) {
      require(entries[k] >= (counts_greedy ? 1 : 0), fn, "entries[" + std::to_string(k) + "]",
              counts_greedy ? ">= 1 (entries count the greedy token)" : ">= 0", entries[k]);
    }
    cape_schedule s;
    s.sizes_ = std::move(entries);
    s.scale_ = scale;
    s.counts_greedy_ = counts_greedy;
    return s;
  }

  //! GLIDE §4.2: S(p) = 7, 5, 3, 1 for p in (0, .3], (.3, .6], (.6, .8], (.8, 1].
  static cape_schedule glide_bins() { return from_bins({0.3f, 0.6f, 0.8f, 1.0f}, {7, 5, 3, 1}); }
  //! GLIDE Appendix A, Algorithm 1: S = [8,8,8,8,6,6,6,6,4,4,2,2], index floor(10 p), greedy included.
  static cape_schedule glide_appendix_table() { return from_table({8, 8, 8, 8, 6, 6, 6, 6, 4, 4, 2, 2}, 10.0f, true); }

  //! K = S(p) for a confidence p in (0, 1] (values in (1, 1 + 1e-4] are rounding and read as 1). O(#bins).
  [[nodiscard]] int expansion_size(float p) const {
    require(p > 0.0f && p <= 1.0f + 1e-4f, "specdec::cape_schedule::expansion_size", "p", "a probability in (0, 1]", p);
    p = std::min(p, 1.0f);
    if (!bounds_.empty()) {
      for (std::size_t k = 0; k < bounds_.size(); ++k)
        if (p <= bounds_[k]) return sizes_[k];
      return sizes_.back();
    }
    // Clamp while still a float: floor(scale * p) may exceed size_t (scale 1e30), and converting an
    // out-of-range float to an integer is undefined.
    const float slot = std::floor(scale_ * p);
    const std::size_t last = sizes_.size() - 1;
    const std::size_t idx = slot >= static_cast<float>(last) ? last : static_cast<std::size_t>(slot);
    return sizes_[idx] - (counts_greedy_ ? 1 : 0);
  }

 private:
  cape_schedule() = default;
  std::vector<float> bounds_;  // empty -> table mode
  std::vector<int> sizes_;
  float scale_ = 10.0f;
  bool counts_greedy_ = false;
};

//! An expanded, linearized CAPE proposal (§4.2): tokens[0..gamma) is the chain, then the expansion
//! sets in step order. pos[i] is the paper's 1-based pos(i).
struct cape_proposal {
  int gamma = 0;
  std::vector<std::int32_t> tokens;           //!< [beta]
  std::vector<std::int32_t> pos;              //!< [beta], 1-based step of each token
  std::vector<float> logprobs;                //!< [beta], log p_D of the token at its step
  std::vector<std::int32_t> expansion_sizes;  //!< [gamma], |X_i| actually used

  [[nodiscard]] int size() const noexcept { return static_cast<int>(tokens.size()); }

  //! Throws invalid_argument naming `function` unless the members describe a linearized proposal
  //! (a hand-built one may not): 0 <= gamma <= size(), pos (and, with `with_logprobs`, logprobs) as
  //! long as tokens, the chain's steps pos[i] = i + 1 for i < gamma and every expansion token's step
  //! in [1, gamma]. mask(), tree() and position_ids() call it. O(beta).
  void validate(std::string_view function, bool with_logprobs = true) const {
    require(gamma >= 0 && gamma <= size(), function, "gamma", "in [0, tokens.size() = " + std::to_string(size()) + "]",
            gamma);
    require_equal(function, "pos.size()", tokens.size(), pos.size());
    if (with_logprobs) require_equal(function, "logprobs.size()", tokens.size(), logprobs.size());
    for (int i = 0; i < size(); ++i) {
      const std::int32_t p = pos[static_cast<std::size_t>(i)];
      const bool ok = i < gamma ? p == i + 1 : p >= 1 && p <= gamma;
      if (!ok) [[unlikely]]
        throw_invalid_argument(function, "pos[" + std::to_string(i) + "]",
                               i < gamma ? "the chain token's step " + std::to_string(i + 1)
                                         : "an expansion step in [1, gamma = " + std::to_string(gamma) + "]",
                               p);
    }
  }

  //! Algorithm 2's input_pi shifted to absolute positions: committed_length + pos(i) - 1 (= the
  //! tree's positions(), depth = pos - 1). Checked like token_tree::positions: committed_length >= 1
  //! and committed_length + max pos - 1 <= INT32_MAX. O(beta).
  [[nodiscard]] std::vector<std::int32_t> position_ids(std::int32_t committed_length) const {
    validate("specdec::cape_proposal::position_ids", false);
    std::int32_t max_pos = 0;
    for (const auto p : pos) max_pos = std::max(max_pos, p);
    detail::check_committed_length("specdec::cape_proposal::position_ids", "committed_length", committed_length,
                                   max_pos - 1);
    std::vector<std::int32_t> out(pos.size());
    // (committed - 1) first: committed + pos alone may be INT32_MAX + 1 at the bound.
    for (std::size_t i = 0; i < pos.size(); ++i) out[i] = (committed_length - 1) + pos[i];
    return out;
  }

  //! Mask_CAPE (§4.2) as a beta x beta bit matrix (bit set = attend): (j < gamma and pos(i) > pos(j))
  //! or i == j, in 0-based indices (pos(j) = j + 1 for chain tokens). O(beta * gamma / 64 + beta).
  [[nodiscard]] bit_matrix mask() const {
    validate("specdec::cape_proposal::mask", false);
    const int beta = size();
    bit_matrix m(beta, beta);
    for (int i = 0; i < beta; ++i) {
      for (int j = 0; j < gamma && j + 1 < pos[static_cast<std::size_t>(i)]; ++j) m.set(i, j);
      m.set(i, i);
    }
    return m;
  }

  //! The equivalent token_tree (same node order as the linearized proposal). O(beta).
  [[nodiscard]] token_tree tree() const {
    token_tree t;
    tree(t);
    return t;
  }
  //! The same, written into out (its capacity reused). O(beta). A log-prob that breaks the score rule
  //! (NaN, +inf, a cumulative score overflowing to +inf) throws naming logprobs[i] and leaves out empty.
  void tree(token_tree& out) const {
    constexpr std::string_view fn = "specdec::cape_proposal::tree";
    validate(fn);
    out.clear();
    out.reserve(size());
    try {
      for (int i = 0; i < size(); ++i) {
        const std::int32_t parent = pos[static_cast<std::size_t>(i)] - 2;  // x in X_j is a child of chain node j-2
        out.add(tokens[static_cast<std::size_t>(i)], parent, logprobs[static_cast<std::size_t>(i)], fn,
                [i] { return "logprobs[" + std::to_string(i) + "]"; });
      }
    } catch (...) {
      out.clear();
      throw;
    }
  }
};

namespace detail {
struct cape_step {
  std::int32_t token;  //!< x_i
  float logprob;       //!< log p_D(x_i | x_<i)
  int k;               //!< K_i = S(p_i)
};
//! Algorithm 1's "Concatenation" into out (capacity reused): the chain x_1..x_gamma (step(i) gives
//! step i's cape_step, 0-based), then X_1, X_2, ... in step order, where expand(i, x_i, n, emit) calls
//! emit(token, logprob) for expansion tokens of step i, best first, until n calls returned true.
//! emit merges duplicates (X_i is a set of siblings of x_i, and equal siblings would be one node
//! verified twice): a token equal to x_i or already in X_i returns false and only raises that
//! member's log-prob to the better of the two. max_tokens > 0 caps beta: expansion tokens are dropped
//! from the end of the linearized order (deepest steps first, the least likely to be reached); the
//! chain is always kept. O(beta * max |X_i|) plus the callbacks.
template <class Step, class Expand>
void cape_assemble(int gamma, Step&& step, Expand&& expand, int max_tokens, cape_proposal& out) {
  out.gamma = gamma;
  out.tokens.clear();
  out.pos.clear();
  out.logprobs.clear();
  out.expansion_sizes.clear();
  for (int i = 0; i < gamma; ++i) {
    const cape_step s = step(i);
    out.tokens.push_back(s.token);
    out.pos.push_back(i + 1);
    out.logprobs.push_back(s.logprob);
    out.expansion_sizes.push_back(s.k);  // requested K_i for now; replaced by |X_i| below
  }
  std::size_t room = max_tokens > 0 ? static_cast<std::size_t>(max_tokens - gamma) : SIZE_MAX;
  for (int i = 0; i < gamma; ++i) {
    auto& size = out.expansion_sizes[static_cast<std::size_t>(i)];
    const auto want = std::min(room, static_cast<std::size_t>(size));
    const std::int32_t x = out.tokens[static_cast<std::size_t>(i)];
    const std::size_t first = out.tokens.size();  // X_i starts here
    std::size_t taken = 0;
    expand(i, x, static_cast<int>(want), [&](std::int32_t t, float lp) {
      if (t == x) return false;
      for (std::size_t j = first; j < out.tokens.size(); ++j)
        if (out.tokens[j] == t) {
          out.logprobs[j] = std::max(out.logprobs[j], lp);
          return false;
        }
      out.tokens.push_back(t);
      out.pos.push_back(i + 1);
      out.logprobs.push_back(lp);
      ++taken;
      return true;
    });
    room -= taken;
    size = static_cast<std::int32_t>(taken);
  }
}
}  // namespace detail

//! Builds the CAPE proposal (Algorithm 1, "Proposal Expansion" and "Concatenation").
//! `probs` holds gamma rows of `vocab_size` draft probabilities p_D(. | x_<i) (row-major). `chain`
//! is the proposal x_1..x_gamma; if empty, it is the argmax of each row (Algorithm 1's greedy
//! search; ties -> lower token id). p_i = probs[i][chain[i]] (= max p_D for a greedy chain).
//! X_i = the K_i = S(p_i) most probable tokens of row i other than chain[i], ties -> lower token id,
//! skipping zero-probability tokens and capped at vocab_size - 1.
//! `max_tokens` > 0 caps beta (the paper verifies at most 32 tokens per step): expansion tokens are
//! dropped from the END of the linearized order (deepest steps first, the least likely to be reached),
//! the chain is always kept (requires max_tokens >= gamma).
//! Preconditions: rows are probabilities (finite, >= 0, each row sums to 1 within 1e-2), chain tokens
//! in range. O(gamma * V).
inline cape_proposal cape_expand(std::span<const float> probs, int vocab_size, std::span<const std::int32_t> chain = {},
                                 const cape_schedule& schedule = cape_schedule::glide_bins(), int max_tokens = 0) {
  constexpr std::string_view fn = "specdec::cape_expand";
  require(vocab_size >= 1, fn, "vocab_size", ">= 1", vocab_size);
  require(probs.size() % static_cast<std::size_t>(vocab_size) == 0, fn, "probs.size()",
          "a multiple of vocab_size = " + std::to_string(vocab_size), probs.size());
  const int gamma = static_cast<int>(probs.size() / static_cast<std::size_t>(vocab_size));
  if (!chain.empty()) require_equal(fn, "chain.size()", static_cast<std::size_t>(gamma), chain.size());
  require(max_tokens == 0 || max_tokens >= gamma, fn, "max_tokens", "0 (no cap) or >= gamma = " + std::to_string(gamma),
          max_tokens);
  const std::size_t v = static_cast<std::size_t>(vocab_size);
  for (int i = 0; i < gamma; ++i) {
    const std::span<const float> row = probs.subspan(static_cast<std::size_t>(i) * v, v);
    double sum = 0;
    bool ok = true;
    for (const float x : row) {
      ok &= (x >= 0.0f) && std::isfinite(x);
      sum += x;
    }
    require(ok, fn, "probs (row " + std::to_string(i) + ")", "finite probabilities >= 0", "a negative or non-finite entry");
    require(std::abs(sum - 1.0) <= 1e-2, fn, "probs (row " + std::to_string(i) + ")", "a row summing to 1 (within 1e-2)", sum);
    if (!chain.empty()) {
      require(chain[static_cast<std::size_t>(i)] >= 0 && chain[static_cast<std::size_t>(i)] < vocab_size, fn,
              "chain[" + std::to_string(i) + "]", "a token in [0, " + std::to_string(vocab_size) + ")",
              chain[static_cast<std::size_t>(i)]);
    }
  }

  cape_proposal out;
  std::vector<std::int32_t> idx;
  std::vector<float> val;
  topk_workspace<float> ws;
  auto step = [&](int i) {
    const std::span<const float> row = probs.subspan(static_cast<std::size_t>(i) * v, v);
    std::int32_t x = 0;
    if (chain.empty()) {
      topk<float>(row, 1, std::span<std::int32_t>(&x, 1), {}, ws);  // Algorithm 1's greedy search
    } else {
      x = chain[static_cast<std::size_t>(i)];
    }
    const float p = row[static_cast<std::size_t>(x)];
    require(p > 0.0f, fn, "chain[" + std::to_string(i) + "]", "a token with draft probability > 0", x);
    // p may exceed 1 by the row sum's tolerance: the schedule reads it as 1.
    return detail::cape_step{x, std::log(p), std::min(schedule.expansion_size(std::min(p, 1.0f)), vocab_size - 1)};
  };
  auto expand = [&](int i, std::int32_t, int k, auto&& emit) {
    const std::span<const float> row = probs.subspan(static_cast<std::size_t>(i) * v, v);
    idx.resize(static_cast<std::size_t>(k + 1));
    val.resize(static_cast<std::size_t>(k + 1));
    topk<float>(row, k + 1, idx, val, ws);  // k + 1 so that excluding x still leaves k
    for (std::size_t j = 0, n = 0; j < idx.size() && n < static_cast<std::size_t>(k); ++j)
      if (val[j] > 0.0f && emit(idx[j], std::log(val[j]))) ++n;  // emit skips x (and duplicates: none here)
  };
  detail::cape_assemble(gamma, step, expand, max_tokens, out);
  return out;
}

//! CAPE from ranked candidates, for engines (and speculative_decoder's cape_tree_builder) that hold a
//! top-k per step instead of full probability rows. Step i has the chain token chain[i] (members
//! .token and .logprob = log p_D(x_i | x_<i)) and candidates[i], its most probable tokens best first
//! (same members; it may contain x_i). X_i = the first K_i = S(exp(chain[i].logprob)) distinct
//! candidates other than x_i with a log-prob above -inf (-inf = impossible, skipped); a token listed
//! twice is one expansion token with the better log-prob (siblings with equal tokens would be one
//! context verified twice). Fewer when candidates[i] is shorter, so keep max S + 1 candidates per step
//! for the full schedule; steps past candidates.size() get no expansion. With complete candidate lists
//! this equals cape_expand on the rows (tested). max_tokens as in cape_expand. Candidate log-probs
//! that are NaN or +inf throw (naming candidates[i][j]) before out is touched.
//! Reuses out's capacity (no allocation in steady state). O(gamma + sum |candidates[i]| + beta * max K).
template <class Candidate>
void cape_expand_ranked(std::span<const Candidate> chain, std::span<const std::vector<Candidate>> candidates,
                        const cape_schedule& schedule, int max_tokens, cape_proposal& out) {
  constexpr std::string_view fn = "specdec::cape_expand_ranked";
  static_assert(std::is_integral_v<std::remove_cvref_t<decltype(std::declval<const Candidate&>().token)>>,
                "specdec::cape_expand_ranked: Candidate::token must be an integer token id");
  const int gamma = static_cast<int>(chain.size());
  require(max_tokens == 0 || max_tokens >= gamma, fn, "max_tokens", "0 (no cap) or >= gamma = " + std::to_string(gamma),
          max_tokens);
  // Validated before out is touched: token ids >= 0, and a log-probability in (-inf, 0] (rounding up to
  // 1e-4 above 0 is read as 0; a finite one below float's exp range, about -103, is a p that rounds to
  // 0 and is read as the smallest positive float: the schedule's lowest bin).
  for (int i = 0; i < gamma; ++i) {
    const auto& x = chain[static_cast<std::size_t>(i)];
    // ids in [0, INT32_MAX]: a wider id (an int64 token, as PyTorch's) was cut to int32 silently
    if (x.token < 0 || !std::in_range<std::int32_t>(x.token)) [[unlikely]]  // the name is built only on failure
      throw_invalid_argument(fn, "chain[" + std::to_string(i) + "].token", "a token id in [0, INT32_MAX]", x.token);
    if (!(x.logprob > -std::numeric_limits<float>::infinity() && x.logprob <= 1e-4f)) [[unlikely]]
      throw_invalid_argument(fn, "chain[" + std::to_string(i) + "].logprob", "a log-probability in (-inf, 0] (p in (0, 1])",
                             x.logprob);
  }
  for (std::size_t i = 0; i < candidates.size() && i < chain.size(); ++i)  // the candidates expand() may read
    for (std::size_t j = 0; j < candidates[i].size(); ++j) {
      const auto& c = candidates[i][j];
      if (c.token < 0 || !std::in_range<std::int32_t>(c.token)) [[unlikely]]
        throw_invalid_argument(fn, "candidates[" + std::to_string(i) + "][" + std::to_string(j) + "].token",
                               "a token id in [0, INT32_MAX]", c.token);
      if (!(c.logprob < std::numeric_limits<float>::infinity())) [[unlikely]]
        throw_invalid_argument(fn, "candidates[" + std::to_string(i) + "][" + std::to_string(j) + "].logprob",
                               "a log-probability that is not NaN or +inf (-inf = impossible)", c.logprob);
    }
  auto step = [&](int i) {
    const auto& x = chain[static_cast<std::size_t>(i)];
    const float p = std::clamp(std::exp(x.logprob), std::numeric_limits<float>::min(), 1.0f);
    return detail::cape_step{static_cast<std::int32_t>(x.token), x.logprob, schedule.expansion_size(p)};
  };
  auto expand = [&](int i, std::int32_t, int k, auto&& emit) {  // emit skips x_i and merges repeats
    if (static_cast<std::size_t>(i) >= candidates.size()) return;
    int n = 0;
    for (const auto& c : candidates[static_cast<std::size_t>(i)]) {
      if (n >= k) break;
      if (c.logprob > -std::numeric_limits<float>::infinity() && emit(static_cast<std::int32_t>(c.token), c.logprob))
        ++n;
    }
  };
  detail::cape_assemble(gamma, step, expand, max_tokens, out);
}

}  // namespace specdec
