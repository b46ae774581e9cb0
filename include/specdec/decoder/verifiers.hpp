#pragma once
//! \file verifiers.hpp
//! Verifier policies for speculative_decoder, thin adapters over verify/:
//!  - greedy_verifier           verify_greedy: output = the target's greedy output (temperature 0 only);
//!  - sample_and_match_verifier verify_sample_and_match: lossless sampling for ANY tree (one target draw
//!                              per visited node, walk down while a child matches);
//!  - chain_speculative_verifier verify_chain_speculative (Leviathan et al.; GLIDE §3) on chain trees,
//!                              with the draft's q rows, or one-hot q at the drafted tokens when the
//!                              drafter was deterministic (then min(1, p/q) = p(x): still exact).
//!  - multi_draft_verifier      verify_multi_draft (SpecInfer multi-step speculative sampling; Jeon et
//!                              al. 2024 without replacement) on k independent sampled drafts
//!                              (multi-draft drafters + multi_draft_tree_builder), with their q rows.
//! All take the processed target logits (verify_input::logits) and convert them to probabilities.
//! Each also has verify_logits (decoder/concepts.hpp): the unprocessed rows, processed only where its
//! walk reads them (every row still checked, with process_tree_logits' messages); speculative_batch's
//! host path calls it.
//! Each declares the tree shapes it verifies (`accepts`) and whether it needs draft q rows
//! (`needs_draft_q`), so speculative_decoder refuses an illegal builder / drafter at compile time
//! (decoder/pairing.hpp); the verify/ functions keep their run-time checks for what types cannot say.
//!
//! Non-finite numbers (the policy of every token-producing entry point, sampling/sampler.hpp): a
//! logit row with NaN or +inf, or with no logit above -inf, throws specdec::invalid_argument naming the
//! verifier, 'logits', the row and the token (checked in the max pass of the softmax, or by
//! greedy_token on the rows greedy verification reads); -inf logits are legal, denormals ordinary.
//! Draft rows q (draft_candidates) go through the verify/ functions' own checks (verify_result.hpp).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/decoder/concepts.hpp"
#include "specdec/sampling/detail/row_error.hpp"
#include "specdec/sampling/detail/vec.hpp"
#include "specdec/sampling/sampler.hpp"
#include "specdec/verify/greedy.hpp"
#include "specdec/verify/multi_draft.hpp"
#include "specdec/verify/sample_and_match.hpp"
#include "specdec/verify/speculative_sampling.hpp"

namespace specdec {

namespace detail {
//! Softmax of each row of processed logits into `probs` (-inf -> 0), row by row the way
//! logits_to_probs (sampling/logits_processor.hpp) computes one: detail::checked_logit_scan (the
//! non-finite policy; errors name `fn`, 'logits', the row and the token), then detail::exp_sum
//! (vectorised fast_exp, relative error < 2e-7, sum in double), then a scale by 1 / sum. A row with a
//! non-unit token stride is gathered into its output row first and exponentiated there (exp_sum in
//! place), which gives the same bits as the contiguous path. O(rows V).
inline void softmax_rows(const strided_view<const float, 2>& logits, std::vector<float>& probs, std::string_view fn) {
  const auto rows = logits.extent(0), V = logits.extent(1);
  const auto n = static_cast<std::size_t>(V);
  probs.resize(static_cast<std::size_t>(rows * V));
  for (std::int64_t r = 0; r < rows; ++r) {
    float* out = probs.data() + r * V;
    const float* row = logits.data() + r * logits.stride(0);
    const row_ref at{fn, "logits", r};
    double sum = 0.0;
    if (logits.stride(1) == 1 || V <= 1) {
      const float m = checked_logit_scan(std::span<const float>(row, n), at).max;
      sum = exp_sum(row, n, m, out);
    } else {
      for (std::int64_t v = 0; v < V; ++v) out[v] = row[v * logits.stride(1)];
      const float m = checked_logit_scan(std::span<const float>(out, n), at).max;
      sum = exp_sum(out, n, m, out);  // in place: the same bits as from the contiguous row
    }
    const auto inv = static_cast<float>(1.0 / sum);
    for (std::size_t v = 0; v < n; ++v) out[v] *= inv;
  }
}

//! What the stochastic verifiers' verify() checks before reading in.logits or writing a draft row
//! (greedy_verifier's verify_greedy checks the same through to_rows): host-accessible memory, shape
//! [tree size + 1, V] with V >= 1 and non-null data, and the tree's tokens in [0, V) (the one-hot draft
//! rows are written at them). Errors name `fn` and 'logits' (or the token).
inline void check_verify_logits(const verify_input& in, std::string_view fn) {
  const auto& v = in.logits;
  require_host_accessible(fn, "logits", v);
  require_shape(fn, "logits", v, {static_cast<std::int64_t>(in.tree.size()) + 1, -1});
  require(v.extent(1) >= 1, fn, "logits", "vocab (extent 1) >= 1", v.extent(1));  // (require_shape: non-null data)
  check_tokens_in_vocab(in.tree.tokens(), v.extent(1), fn);
}

//! The verifiers' verify_logits: checks every row of `in` (process_tree_logits' checks and messages),
//! then calls walk(processed_row), where processed_row(s) returns local row s processed into a
//! scratch row of this thread (valid until the next call). Scratch per thread, as speculative_batch
//! keeps it for process_tree_logits.
template <class Walk>
void walk_processed_rows(const logits_verify_input& in, Walk&& walk) {
  thread_local sampling_workspace ws;
  thread_local std::vector<float> row;
  tree_rows_processor rows(in.logits, in.sampling, in.committed, in.tree.tokens(), in.tree.parents(), ws,
                           "specdec::process_tree_logits");
  row.resize(static_cast<std::size_t>(rows.vocab()));
  walk([&](std::int64_t s) {
    rows.process(s, row);
    return std::span<float>(row);
  });
}
//! walk_processed_rows' processed_row(s) turned into probabilities (processed_row_to_probs): the
//! verifiers' target row s, named as `fn`'s target_probs row s. Valid until the next processed_row.
template <class ProcessedRow>
walk_row processed_probs_row(ProcessedRow& processed_row, std::string_view fn, std::int64_t s) {
  const std::span<float> row = processed_row(s);
  processed_row_to_probs(row);
  return walk_row{row, {fn, "target_probs", s}};
}

//! A row of V zeros with a one at no more than one token, moved from token to token in O(1): the
//! draft rows of a deterministic drafter (one-hot at its tokens), built when a walk reaches them.
struct one_hot_row {
  std::vector<float> row;
  std::int32_t hot = -1;
  void reset(std::int64_t V) {
    row.assign(static_cast<std::size_t>(V), 0.0f);
    hot = -1;
  }
  //! The row one-hot at `token` (all zero for token < 0); valid until the next call.
  std::span<const float> at(std::int32_t token) {
    if (hot >= 0) row[static_cast<std::size_t>(hot)] = 0.0f;
    hot = token;
    if (hot >= 0) row[static_cast<std::size_t>(hot)] = 1.0f;
    return row;
  }
};
}  // namespace detail

//! Greedy tree verification: longest path whose tokens equal the target argmax; bonus = argmax after it.
//! Only valid at temperature 0 (is_lossless_for_sampling = false: the decoder rejects temperature > 0).
//! O(n + (accepted + 1) V).
struct greedy_verifier {
  static constexpr bool is_lossless_for_sampling = false;
  static constexpr tree_shape accepts = tree_shape::tree;
  static constexpr bool needs_draft_q = false;
  void verify(const verify_input& in, verify_result& out) const { out = verify_greedy(in.tree, in.logits); }
  //! verify on the rows the walk reads, each processed when it is read (logits_verify_input): the
  //! result of process_tree_logits then verify. Every row is checked first (process_tree_logits'
  //! checks); O(rows V) for that scan, O(rows read (V + context)) for the processing. Scratch: a row
  //! and a workspace per thread (as speculative_batch keeps for process_tree_logits), none per copy.
  void verify_logits(const logits_verify_input& in, verify_result& out) const {
    detail::walk_processed_rows(in, [&](auto&& processed_row) {
      out = detail::greedy_walk_by(in.tree.tokens(), in.tree.parents(), [&](std::int64_t s) {
        const std::span<const float> row = processed_row(s);
        const detail::prob_rows one{row.data(), static_cast<std::int64_t>(row.size()), 1,
                                    static_cast<std::int64_t>(row.size())};
        return detail::greedy_row_argmax(one, 0, "specdec::verify_greedy", -1);
      });
    });
  }

};
static_assert(check_verifier<greedy_verifier>());

//! Lossless stochastic verification of any tree (see verify/sample_and_match.hpp). At temperature 0
//! the processed rows are one-hot, so it reduces to greedy verification. O(n + rows V).
struct sample_and_match_verifier {
  static constexpr bool is_lossless_for_sampling = true;
  static constexpr tree_shape accepts = tree_shape::tree;
  static constexpr bool needs_draft_q = false;
  void verify(const verify_input& in, verify_result& out) {
    detail::check_verify_logits(in, "specdec::sample_and_match_verifier");
    detail::softmax_rows(in.logits, probs_, "specdec::sample_and_match_verifier");
    const auto p = make_view<2>(static_cast<const float*>(probs_.data()), {in.logits.extent(0), in.logits.extent(1)});
    out = verify_sample_and_match(in.tree, p, in.rng);
  }
  //! verify on the rows the walk visits, each processed and turned into probabilities when it is
  //! reached (logits_verify_input): the result of process_tree_logits then verify, bit for bit (the
  //! same row functions, the same draws). Every row is checked first (process_tree_logits' checks);
  //! O(rows V) for that scan, O(rows visited (V + context)) for the rest. Scratch: a row and a
  //! workspace per thread, none per copy.
  void verify_logits(const logits_verify_input& in, verify_result& out) const {
    detail::walk_processed_rows(in, [&](auto&& processed_row) {
      out = detail::sample_and_match_walk_by(in.tree.tokens(), in.tree.parents(), [&](std::int64_t s) {
        const detail::walk_row p = detail::processed_probs_row(processed_row, "specdec::verify_sample_and_match", s);
        return detail::draw_from_probs(p.v, in.rng, p.at);
      });
    });
  }


 private:
  std::vector<float> probs_;
};
static_assert(check_verifier<sample_and_match_verifier>());

//! Chain speculative sampling. Precondition: the tree is a chain (use chain_tree_builder; any other
//! builder is refused at compile time by `accepts`, and verify_chain_speculative checks the tree at
//! run time). Uses the draft's q rows when the drafter sampled its chain (draft.q non-empty), else
//! one-hot q at the drafted tokens, which is exact for any drafted token (accept x with probability
//! p(x), else draw from p without x), so q is not required: needs_draft_q = false. O(rows V).
struct chain_speculative_verifier {
  static constexpr bool is_lossless_for_sampling = true;
  static constexpr tree_shape accepts = tree_shape::chain;
  static constexpr bool needs_draft_q = false;
  void verify(const verify_input& in, verify_result& out) {
    detail::check_verify_logits(in, "specdec::chain_speculative_verifier");
    const auto rows = in.logits.extent(0), V = in.logits.extent(1);
    detail::softmax_rows(in.logits, probs_, "specdec::chain_speculative_verifier");
    q_.assign(static_cast<std::size_t>(rows * V), 0.0f);
    const int n = in.tree.size();
    const auto dq = draft_q_rows(in.draft, n, V);
    for (int i = 0; i < n; ++i) {
      float* row = q_.data() + static_cast<std::ptrdiff_t>(i) * V;
      if (dq.data() != nullptr) std::copy_n(dq.data() + i * dq.stride(0), V, row);
      else row[in.tree.token(i)] = 1.0f;
    }
    q_[static_cast<std::size_t>(n * V)] = 1.0f;  // row n is not read; keep it a distribution
    const auto p = make_view<2>(static_cast<const float*>(probs_.data()), {rows, V});
    const auto q = make_view<2>(static_cast<const float*>(q_.data()), {rows, V});
    out = verify_chain_speculative(in.tree, p, q, in.rng);
  }
  //! verify on the rows the walk reads (logits_verify_input): the target's rows 0..accepted, each
  //! processed and turned into probabilities when the walk reaches it; the draft's rows read where
  //! they are (one-hot rows built one at a time). The result of process_tree_logits then verify, bit
  //! for bit, with verify's checks and messages; every target row is checked first. O(rows V) for
  //! that scan, O((accepted + 1)(V + context)) for the rest. Scratch per thread, none per copy.
  void verify_logits(const logits_verify_input& in, verify_result& out) const {
    constexpr std::string_view fn = "specdec::verify_chain_speculative";
    detail::walk_processed_rows(in, [&](auto&& processed_row) {
      const auto V = in.logits.extent(1);
      const int n = in.tree.size();
      const auto dq = draft_q_rows(in.draft, n, V);
      detail::check_tokens_in_vocab(in.tree.tokens(), V, fn);
      const detail::prob_rows q{dq.data(), dq.stride(0), n, V};
      detail::check_chain_speculative(in.tree.tokens(), in.tree.parents(), nullptr, dq.data() != nullptr ? &q : nullptr, fn);
      thread_local detail::one_hot_row one_hot;  // the draft row of the node the walk is at, without q rows
      one_hot.reset(dq.data() != nullptr ? 0 : V);
      out = detail::chain_speculative_walk_by(
          in.tree.tokens(), in.rng,
          [&](std::int64_t i, bool) { return detail::processed_probs_row(processed_row, fn, i); },
          [&](std::int64_t i) {
            const detail::row_ref at{fn, "draft_probs", i};
            if (dq.data() != nullptr) {
              const detail::walk_row r{q.row(i), at};
              detail::check_prob_row(r);
              return r;
            }
            return detail::walk_row{one_hot.at(in.tree.token(static_cast<int>(i))), at};
          });
    });
  }

 private:
  //! The drafter's q rows (in its buffer or in draft.q), checked: one per node over the target's
  //! vocabulary, host-accessible, unit inner stride; an empty view when it has none (a deterministic
  //! drafter: one-hot rows). Rows that are there but of another shape are refused: read as one-hot
  //! they would make sampling inexact without a word.
  static strided_view<const float, 2> draft_q_rows(const draft_candidates& draft, int n, std::int64_t V) {
    const auto dq = draft.chain_q();
    if (n == 0 || dq.extent(0) == 0) return {};
    constexpr std::string_view fn = "specdec::chain_speculative_verifier";
    if (!(dq.extent(1) == V && dq.extent(0) >= n)) [[unlikely]]
      throw_invalid_argument(fn, "draft.q_rows",
                             "[>= " + std::to_string(n) + " (the chain), " + std::to_string(V) + " (the vocabulary)]",
                             shape_string(dq));
    require(host_accessible(dq.space()), fn, "draft.q_rows", "host-accessible memory (this is the host verifier)",
            name(dq.space()));
    require_unit_inner_stride(fn, "draft.q_rows", dq);
    return dq;
  }

  std::vector<float> probs_, q_;
};
static_assert(check_verifier<chain_speculative_verifier>());

namespace detail {

//! Scratch of assign_multi_draft_rows (kept by a verifier: no allocation once warm).
struct multi_draft_rows_scratch {
  std::vector<int> owner, depth;
};

//! The draft rows of a multi-draft tree (multi_draft_verifier's rule, below): for each row that some
//! draft provides, copy(row, q, depth) when that draft has q rows (q: its [len, V] rows, unit inner
//! stride, row `depth` is the one), or one_hot(row, token) when it has none. Rows no draft provides
//! are left alone (never read: the node has no children, or its children fail validation). The tree
//! is tokens[i], parents[i] (local, -1 = the root, parents[i] < i); `host_only` requires the q rows
//! in host-accessible memory (the host verifier; invalid_argument naming `fn`).
template <class Copy, class OneHot>
void assign_multi_draft_rows(std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                             const draft_candidates& d, std::int64_t V, bool host_only, std::string_view fn,
                             multi_draft_rows_scratch& scratch, Copy&& copy, OneHot&& one_hot) {
  const auto n = static_cast<int>(tokens.size());
  const int k = 1 + static_cast<int>(d.sequences.size());
  auto seq = [&](int s) -> const std::vector<draft_token>& { return s == 0 ? d.chain : d.sequences[static_cast<std::size_t>(s - 1)]; };
  // Draft s's q rows (the chain's through chain_q(): the drafter's buffer or d.q); an empty view when
  // it has none of the right shape.
  auto qrows = [&](int s) -> strided_view<const float, 2> {
    const auto rows = static_cast<std::int64_t>(seq(s).size());
    strided_view<const float, 2> q;
    if (s == 0) {
      q = d.chain_q();
    } else if (const auto j = static_cast<std::size_t>(s - 1);
               j < d.sequence_q.size() && d.vocab == V && d.sequence_q[j].size() == static_cast<std::size_t>(rows * V)) {
      q = strided_view<const float, 2>(d.sequence_q[j].data(), {rows, V}, {V, 1});
    }
    if (q.data() == nullptr || q.extent(1) != V || q.extent(0) != rows || rows == 0) return {};
    if (host_only)
      require(host_accessible(q.space()), fn, "draft.q_rows", "host-accessible memory (this is the host verifier)",
              name(q.space()));
    require_unit_inner_stride(fn, "draft.q_rows", q);
    require(rows <= 1 || q.stride(0) >= V, fn, "draft.q_rows", "rows at least vocab apart", q.stride(0));
    return q;
  };
  // Row `row` := q of draft s at depth `depth` (one-hot at its token there when it has no q rows).
  auto fill = [&](std::int64_t row, int s, std::size_t depth) {
    const auto& sq = seq(s);
    if (depth >= sq.size()) return;  // the draft ends here: the row is never read (no children)
    if (const auto q = qrows(s); q.data() != nullptr) {
      copy(row, q, static_cast<std::int64_t>(depth));
    } else {
      const std::int32_t t = sq[depth].token;  // a draft's own token: the tree's were checked, this one not
      require(t >= 0 && t < V, fn, "draft tokens", "token ids in [0, vocab = " + std::to_string(V) + ")", t);
      one_hot(row, t);
    }
  };
  auto& owner = scratch.owner;
  auto& depth_of = scratch.depth;
  owner.assign(static_cast<std::size_t>(n), -1);
  depth_of.assign(static_cast<std::size_t>(n), 0);
  for (int s = 0; s < k; ++s)
    if (!seq(s).empty()) {
      fill(0, s, 0);
      break;
    }
  for (int i = 0; i < n; ++i) {
    const std::int32_t p = parents[static_cast<std::size_t>(i)];
    const auto depth = static_cast<std::size_t>(p < 0 ? 0 : depth_of[static_cast<std::size_t>(p)] + 1);
    depth_of[static_cast<std::size_t>(i)] = static_cast<int>(depth);
    const int ps = p < 0 ? -1 : owner[static_cast<std::size_t>(p)];
    if (p >= 0 && ps < 0) continue;  // not from a draft: its children (if any) fail validation
    int best = -1;
    for (int s = 0; s < k; ++s) {
      const auto& sq = seq(s);
      if (sq.size() <= depth || sq[depth].token != tokens[static_cast<std::size_t>(i)]) continue;
      if (ps >= 0 && !std::equal(sq.begin(), sq.begin() + static_cast<std::ptrdiff_t>(depth), seq(ps).begin(),
                                 [](const draft_token& a, const draft_token& b) { return a.token == b.token; }))
        continue;
      if (best < 0 || (seq(best).size() <= depth + 1 && sq.size() > depth + 1)) best = s;  // prefer one that goes on
    }
    owner[static_cast<std::size_t>(i)] = best;
    if (best >= 0) fill(i + 1, best, depth + 1);
  }
}

}  // namespace detail

//! Multi-draft speculative sampling (verify/multi_draft.hpp) of k independent drafts. The draft rows
//! q come from draft_candidates: node i's row (row i + 1) is q at depth(i) + 1 of a draft (chain =
//! draft 0, sequences[j] = draft j + 1) whose tokens up to depth(i) are node i's path (q depends only
//! on the prefix, so any such draft gives the same row); row 0 is q at depth 0. The mode (with or
//! without replacement) is draft_candidates::sampled_as; a draft without q rows (a deterministic
//! drafter) gives one-hot rows at its own next token, which is exact for a chain tree.
//! Preconditions: every node's children were drawn from its q row in index order (multi-draft
//! drafters + multi_draft_tree_builder, or a chain); violations that show as q = 0 at a child's token
//! throw specdec::invalid_argument from verify_multi_draft. At compile time (decoder/pairing.hpp) the
//! builder must build a chain or i.i.d. drafts (`accepts`) and, for i.i.d. drafts, the drafter must be
//! able to draw them with q rows (`needs_draft_q`); whether it does in this run (multi_draft_params
//! given, temperature) is a run-time choice, left to verify_multi_draft's checks. O(n k depth + rows V).
struct multi_draft_verifier {
  static constexpr bool is_lossless_for_sampling = true;
  static constexpr tree_shape accepts = tree_shape::iid_drafts;
  static constexpr bool needs_draft_q = true;
  void verify(const verify_input& in, verify_result& out) {
    detail::check_verify_logits(in, "specdec::multi_draft_verifier");
    const auto rows = in.logits.extent(0), V = in.logits.extent(1);
    detail::softmax_rows(in.logits, probs_, "specdec::multi_draft_verifier");
    q_.assign(static_cast<std::size_t>(rows * V), 0.0f);
    const int n = in.tree.size();
    tokens_.resize(static_cast<std::size_t>(n)), parents_.resize(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) tokens_[static_cast<std::size_t>(i)] = in.tree.token(i), parents_[static_cast<std::size_t>(i)] = in.tree.parent(i);
    detail::assign_multi_draft_rows(
        tokens_, parents_, in.draft, V, true, "specdec::multi_draft_verifier", rows_,
        [&](std::int64_t row, const strided_view<const float, 2>& q, std::int64_t depth) {
          std::copy_n(q.data() + depth * q.stride(0), V, q_.data() + row * V);
        },
        [&](std::int64_t row, std::int32_t token) { q_[static_cast<std::size_t>(row * V + token)] = 1.0f; });
    const auto p = make_view<2>(static_cast<const float*>(probs_.data()), {rows, V});
    const auto q = make_view<2>(static_cast<const float*>(q_.data()), {rows, V});
    out = verify_multi_draft(in.tree, p, q, in.draft.sampled_as.value_or(draft_sampling::with_replacement), in.rng);
  }
  //! verify on the rows the walk reads (logits_verify_input): the target's row of each node the walk
  //! reaches, processed and turned into probabilities there; the draft's rows read where the drafts
  //! keep them (one-hot rows built one at a time) instead of copied into a [rows, V] matrix. The
  //! result of process_tree_logits then verify, bit for bit, with verify's checks and messages; every
  //! target row is checked first. O(rows V) for that scan, O(n k depth) to find the draft rows,
  //! O(reached (V + context)) for the rest. Scratch per thread, none per copy.
  void verify_logits(const logits_verify_input& in, verify_result& out) const {
    constexpr std::string_view fn = "specdec::verify_multi_draft";
    detail::walk_processed_rows(in, [&](auto&& processed_row) {
      const auto V = in.logits.extent(1);
      const int n = in.tree.size();
      const auto rows = static_cast<std::size_t>(n) + 1;
      // Each draft row's source: a q row of a draft (its entries), or a one-hot token (>= 0), or none
      // (-1: a row no draft provides, all zero as verify's matrix has it).
      struct source {
        const float* q = nullptr;
        std::int32_t token = -1;
      };
      thread_local std::vector<source> src;
      thread_local detail::multi_draft_rows_scratch scratch;
      thread_local detail::multi_draft_scratch walk_scratch;
      thread_local detail::one_hot_row local;  // a one-hot or zero row, built when the walk reaches it
      src.assign(rows, source{});
      const auto tokens = in.tree.tokens(), parents = in.tree.parents();
      detail::assign_multi_draft_rows(
          tokens, parents, in.draft, V, true, "specdec::multi_draft_verifier", scratch,
          [&](std::int64_t row, const strided_view<const float, 2>& q, std::int64_t depth) {
            src[static_cast<std::size_t>(row)] = {q.data() + depth * q.stride(0), -1};
          },
          [&](std::int64_t row, std::int32_t token) { src[static_cast<std::size_t>(row)] = {nullptr, token}; });
      detail::check_tokens_in_vocab(in.tree.tokens(), V, fn);
      const auto mode = in.draft.sampled_as.value_or(draft_sampling::with_replacement);
      detail::validate_multi_draft_by(
          tokens, parents, nullptr,
          [&](std::int64_t row, std::int32_t t) {
            const source& sr = src[static_cast<std::size_t>(row)];
            const float v = sr.q != nullptr ? sr.q[t] : sr.token == t ? 1.0f : 0.0f;
            if (!detail::admissible_prob(v)) [[unlikely]]
              detail::throw_bad_entry(detail::row_ref{fn, "draft_probs", row}, detail::bad_prob_text, t, v);
            return v;
          },
          mode, fn);
      local.reset(V);
      out = detail::multi_draft_walk_by(
          tokens, parents, mode, in.rng, walk_scratch,
          [&](std::int64_t r, bool) { return detail::processed_probs_row(processed_row, fn, r); },
          [&](std::int64_t r, bool decide) {
            const source& sr = src[static_cast<std::size_t>(r)];
            const detail::row_ref at{fn, "draft_probs", r};
            if (sr.q != nullptr) {
              const detail::walk_row row{{sr.q, static_cast<std::size_t>(V)}, at};
              if (decide) detail::check_prob_row(row);
              return row;
            }
            return detail::walk_row{local.at(sr.token), at};
          });
    });
  }

 private:
  std::vector<float> probs_, q_;
  std::vector<std::int32_t> tokens_, parents_;
  detail::multi_draft_rows_scratch rows_;
};
static_assert(check_verifier<multi_draft_verifier>());

}  // namespace specdec
