#pragma once
// Random ragged batches for the array form of verify_sample_and_match_batch (host: tests/verify/
// test_sample_and_match_arrays.cpp, CUDA: tests/cuda/test_verify_sample_and_match.cu). Trees from
// tree_batch_util's shapes with tokens from a small alphabet (so duplicate siblings occur), and
// probability rows that put most of their mass on one of the row's children's tokens, so paths of
// every length are accepted; some rows have zero entries (a top-k / top-p row) and none is
// normalised. The expected result is verify_sample_and_match on each request's token_tree with the
// request's philox_stream(seeds[r], streams[r]). sampled_logits_case: the same trees with logits
// rows and sampling_params, for the logits form.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "sampling/penalty_test_util.hpp"
#include "specdec/core/device_status.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/sampling/logits_processor.hpp"
#include "specdec/sampling/penalty_context.hpp"
#include "specdec/verify/multi_draft.hpp"
#include "specdec/verify/sample_and_match.hpp"
#include "specdec/verify/speculative_sampling.hpp"
#include "tree/tree_batch_util.hpp"
#include "verify/tree_arrays_util.hpp"

namespace specdec_test {

struct sample_and_match_case {
  std::vector<std::int32_t> node_indptr{0}, tokens, parents;
  std::vector<float> probs;  // [N + R, V]
  std::vector<std::uint64_t> seeds, streams;
  std::int64_t vocab = 0;
  specdec::verify_batch_result expected;

  [[nodiscard]] int requests() const { return static_cast<int>(node_indptr.size()) - 1; }
  [[nodiscard]] int nodes() const { return static_cast<int>(tokens.size()); }

  //! verify_sample_and_match per request (the reference for both backends).
  void finish() {
    expected = per_request(node_indptr, tokens, parents, [&](const specdec::token_tree& t, int r, std::int64_t first, std::int64_t n) {
      specdec::philox_stream rng(seeds[r], streams[r]);
      return specdec::verify_sample_and_match(t, specdec::make_view<2>(probs.data() + first * vocab, {n, vocab}), rng);
    });
  }
};

//! R requests of up to max_nodes nodes over a vocabulary of V, tokens from the first `alphabet` ids.
//! Row s (after node s - 1) gets uniform weights in [0, 1) (a quarter of the rows with about half of
//! them zeroed), then a weight of V on a random child's token with probability 3/4. Seeds and
//! streams per request as an engine would set them (one seed, stream_id(request id, step)).
inline sample_and_match_case random_sample_and_match_batch(int R, int max_nodes, std::int64_t V, int alphabet,
                                                           std::uint64_t seed) {
  specdec::philox_stream rng(seed, 3);
  sample_and_match_case c;
  c.vocab = V;
  for (int r = 0; r < R; ++r) {
    const int n = rng.below(8) == 0 ? 0 : 1 + static_cast<int>(rng.below(static_cast<std::uint32_t>(max_nodes)));
    const auto par = random_parents(n, static_cast<int>(rng.below(4)), rng);
    const auto b = static_cast<std::int32_t>(c.tokens.size());
    for (int i = 0; i < n; ++i) {
      c.parents.push_back(par[i]);
      c.tokens.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(alphabet))));
    }
    c.node_indptr.push_back(b + n);
    for (int s = 0; s <= n; ++s) {
      std::vector<float> row(static_cast<std::size_t>(V));
      const bool sparse = rng.below(4) == 0;
      for (auto& x : row) x = sparse && rng.below(2) == 0 ? 0.0f : rng.uniform();
      std::vector<std::int32_t> kids;
      for (int i = s; i < n; ++i)
        if (par[i] == s - 1) kids.push_back(c.tokens[b + i]);
      if (!kids.empty() && rng.below(4) != 0) row[kids[rng.below(static_cast<std::uint32_t>(kids.size()))]] = static_cast<float>(V);
      row[rng.below(static_cast<std::uint32_t>(V))] += 0.5f;  // no row is all zero
      c.probs.insert(c.probs.end(), row.begin(), row.end());
    }
    c.seeds.push_back(seed ^ 0x5eedull);
    c.streams.push_back(specdec::stream_id(static_cast<std::uint32_t>(100 + r), 7));
  }
  c.finish();
  return c;
}

}  // namespace specdec_test


namespace specdec_test {

//! A ragged batch for the logits form of verify_sample_and_match_batch: trees as
//! random_sample_and_match_batch makes them (tokens from a small alphabet), logits rows in
//! [-1, 1) with a peak of 2-6 on a random child's token (3 rows in 4) and a few -inf tokens, and
//! per request sampling_params drawn from everything process_logits_batch applies (temperature,
//! including 0 and tiny values, top-k, top-p, min-p, eta; with `penalties` a repetition and a
//! contextual penalty over a committed context of up to 20 alphabet tokens and each row's root
//! path). `expected` is what the form replaces: process_logits_batch on a copy of the rows,
//! logits_to_probs_batch in place, then the probabilities form (host backends throughout).
//! `kind` says which verifier's logits form the case is for:
//!   sample_and_match  as above;
//!   chain             every tree a chain, with draft rows q (positive weights in [0.01, 1.01), a weight
//!                     of V on the next node's token in half of the rows): verify_chain_speculative_batch;
//!   multi_draft, multi_draft_wor
//!                     the trees above with the same draft rows (a weight of V on a random child's token
//!                     in half of the rows), drawn with replacement, or without (siblings then carry
//!                     distinct tokens: a node whose parent's children already use every token joins
//!                     the node before it instead): verify_multi_draft_batch in that mode.
//! `expected` is then that verifier's composition.
enum class logits_case_kind { sample_and_match, chain, multi_draft, multi_draft_wor };

struct sampled_logits_case {
  std::vector<std::int32_t> node_indptr{0}, tokens, parents;
  std::vector<float> logits;  // [N + R, V]
  std::vector<float> q;       // [N + R, V] draft rows (every kind but sample_and_match)
  std::vector<std::uint64_t> seeds, streams;
  std::int64_t vocab = 0;
  std::vector<specdec::sampling_params> params;
  std::vector<std::int32_t> row_params;
  specdec::penalty_context_builder b;
  bool penalties = false;
  logits_case_kind kind = logits_case_kind::sample_and_match;
  tree_outputs expected;

  [[nodiscard]] int requests() const { return static_cast<int>(node_indptr.size()) - 1; }
  [[nodiscard]] int nodes() const { return static_cast<int>(tokens.size()); }
  [[nodiscard]] std::int64_t rows() const { return static_cast<std::int64_t>(nodes()) + requests(); }

  [[nodiscard]] bool has_draft_rows() const { return kind != logits_case_kind::sample_and_match; }
  [[nodiscard]] specdec::draft_sampling mode() const {
    return kind == logits_case_kind::multi_draft_wor ? specdec::draft_sampling::without_replacement
                                                     : specdec::draft_sampling::with_replacement;
  }

  sampled_logits_case(int R, int max_nodes, std::int64_t V, int alphabet, bool with_penalties, std::uint64_t seed,
                      logits_case_kind k = logits_case_kind::sample_and_match)
      : vocab(V), b(static_cast<std::int32_t>(V)), penalties(with_penalties), kind(k) {
    // tokens come from the first min(alphabet, V) ids: a vocabulary smaller than the alphabet (the
    // CUDA tests' V = 1 cells) drew ids past it, which the host's token check refuses
    alphabet = static_cast<int>(std::min<std::int64_t>(alphabet, V));
    const bool chain_trees = k == logits_case_kind::chain, distinct = k == logits_case_kind::multi_draft_wor;
    specdec::philox_stream rng(seed, 11);
    std::vector<std::int32_t> committed;
    for (int r = 0; r < R; ++r) {
      const int n = rng.below(8) == 0 ? 0 : 1 + static_cast<int>(rng.below(static_cast<std::uint32_t>(max_nodes)));
      const auto shape = static_cast<int>(rng.below(4));
      auto par = random_parents(n, chain_trees ? 1 : shape, rng);
      const auto lo = static_cast<std::int32_t>(tokens.size());
      for (int i = 0; i < n; ++i) {
        auto t = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(alphabet)));
        if (distinct) {  // a token none of the node's earlier siblings carries
          std::vector<bool> used(static_cast<std::size_t>(V), false);
          std::int64_t count = 0;
          for (int j = 0; j < i; ++j)
            if (par[j] == par[i]) used[static_cast<std::size_t>(tokens[static_cast<std::size_t>(lo + j)])] = true, ++count;
          if (count == V) {  // every token taken: a child of the node before instead (it has none yet)
            par[i] = i - 1;
            std::fill(used.begin(), used.end(), false);
          }
          while (used[static_cast<std::size_t>(t)]) t = static_cast<std::int32_t>((t + 1) % V);
        }
        parents.push_back(par[i]);
        tokens.push_back(t);
      }
      node_indptr.push_back(lo + n);
      for (int s = 0; s <= n; ++s) {
        std::vector<float> row(static_cast<std::size_t>(V));
        for (auto& x : row) x = rng.below(64) == 0 ? -std::numeric_limits<float>::infinity() : 2.0f * rng.uniform() - 1.0f;
        std::vector<std::int32_t> kids;
        for (int i = s; i < n; ++i)
          if (par[i] == s - 1) kids.push_back(tokens[static_cast<std::size_t>(lo + i)]);
        if (!kids.empty() && rng.below(4) != 0)
          row[static_cast<std::size_t>(kids[rng.below(static_cast<std::uint32_t>(kids.size()))])] = 2.0f + 4.0f * rng.uniform();
        row[rng.below(static_cast<std::uint32_t>(V))] = 1.5f;  // some logit above -inf
        logits.insert(logits.end(), row.begin(), row.end());
      }
      for (int s = 0; has_draft_rows() && s <= n; ++s) {
        std::vector<float> row(static_cast<std::size_t>(V));
        for (auto& x : row) x = 0.01f + rng.uniform();
        std::vector<std::int32_t> kids;
        for (int i = s; i < n; ++i)
          if (par[i] == s - 1) kids.push_back(tokens[static_cast<std::size_t>(lo + i)]);
        if (!kids.empty() && rng.below(2) == 0)
          row[static_cast<std::size_t>(kids[rng.below(static_cast<std::uint32_t>(kids.size()))])] = static_cast<float>(V);
        q.insert(q.end(), row.begin(), row.end());
      }
      specdec::sampling_params p;
      add_random_processors(p, rng, V);
      if (penalties) {
        add_random_penalties(p, rng, 4, 8);
        committed.clear();
        for (std::uint32_t j = 0, m = rng.below(21); j < m; ++j)
          committed.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(alphabet))));
        b.add_tree_rows(b.add_context(committed), std::span(tokens).subspan(static_cast<std::size_t>(lo), static_cast<std::size_t>(n)),
                        std::span(parents).subspan(static_cast<std::size_t>(lo), static_cast<std::size_t>(n)));
      }
      params.push_back(p);
      for (int s = 0; s <= n; ++s) row_params.push_back(r);
      seeds.push_back(seed ^ 0xabcdull);
      streams.push_back(specdec::stream_id(static_cast<std::uint32_t>(200 + r), 3));
    }
    finish();
  }

  //! The composition (host), into `expected`.
  void finish() {
    const auto v1 = [](auto& a) { return specdec::make_view<1>(a.data(), {static_cast<std::int64_t>(a.size())}); };
    auto probs = logits;
    const auto pr = specdec::make_view<2>(probs.data(), {rows(), vocab});
    std::vector<std::int32_t> st(3);
    const auto sv = specdec::make_view<1>(st.data(), {3});
    const auto pa = specdec::make_view<1>(params.data(), {static_cast<std::int64_t>(params.size())});
    if (penalties)
      specdec::process_logits_batch(specdec::host{}, pr, pa, v1(row_params), b.view(), sv);
    else
      specdec::process_logits_batch(specdec::host{}, pr, pa, v1(row_params), sv);
    specdec::logits_to_probs_batch(specdec::host{}, pr, pr, sv);
    expected = tree_outputs(static_cast<std::size_t>(requests()), tokens.size());
    auto& o = expected;
    const auto qv = specdec::make_view<2>(static_cast<const float*>(q.data()), {has_draft_rows() ? rows() : 0, vocab});
    if (kind == logits_case_kind::chain)
      specdec::verify_chain_speculative_batch(specdec::host{}, v1(node_indptr), v1(tokens), v1(parents), pr, qv,
                                              v1(seeds), v1(streams), v1(o.accepted), v1(o.num_accepted), v1(o.bonus),
                                              v1(o.emitted), v1(o.status));
    else if (has_draft_rows())
      specdec::verify_multi_draft_batch(specdec::host{}, v1(node_indptr), v1(tokens), v1(parents), pr, qv, mode(),
                                        v1(seeds), v1(streams), v1(o.accepted), v1(o.num_accepted), v1(o.bonus),
                                        v1(o.emitted), v1(o.status));
    else
      specdec::verify_sample_and_match_batch(specdec::host{}, v1(node_indptr), v1(tokens), v1(parents), pr, v1(seeds),
                                             v1(streams), v1(o.accepted), v1(o.num_accepted), v1(o.bonus),
                                             v1(o.emitted), v1(o.status));
  }

  //! Whether `o` holds expected's results: status, counts and bonus tokens, and each request's
  //! accepted nodes and emitted tokens (the other slots are unspecified); returns the accepted count.
  [[nodiscard]] int matches(const tree_outputs& o) const {
    CHECK(o.status == std::vector<std::int32_t>{0, -1, -1});
    int total = 0;
    for (int r = 0; r < requests(); ++r) {
      const int k = expected.num_accepted[static_cast<std::size_t>(r)], lo = node_indptr[static_cast<std::size_t>(r)];
      REQUIRE(o.num_accepted[static_cast<std::size_t>(r)] == k);
      CHECK(o.bonus[static_cast<std::size_t>(r)] == expected.bonus[static_cast<std::size_t>(r)]);
      for (int j = 0; j < k; ++j) CHECK(o.accepted[static_cast<std::size_t>(lo + j)] == expected.accepted[static_cast<std::size_t>(lo + j)]);
      for (int j = 0; j <= k; ++j)
        CHECK(o.emitted[static_cast<std::size_t>(lo + r + j)] == expected.emitted[static_cast<std::size_t>(lo + r + j)]);
      total += k;
    }
    return total;
  }
};

//! unread_nan_case's shape for the logits form: root -> {0: token 1, 1: token 2} over V = 5 at
//! temperature 0. The root row's argmax (token 1) is drawn, node 0 accepted, the row after node 0
//! gives the bonus (its argmax 3); the row after node 1 holds NaN and an entry out of range, which
//! would be refused if the walk read it. Expected: emitted {1, 3}, accepted {0}.
inline sampled_logits_case unread_nan_logits_case() {
  sampled_logits_case h(0, 1, 5, 1, false, 1);
  h.node_indptr = {0, 2};
  h.tokens = {1, 2};
  h.parents = {-1, -1};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  h.logits = {0, 9, 1, 2, 3, /**/ 0, 1, 2, 7, 6, /**/ nan, 0, 0, 0, 0};
  specdec::sampling_params p;
  p.temperature = 0.0f;
  h.params = {p};
  h.row_params = {0, 0, 5};
  h.seeds = {3};
  h.streams = {specdec::stream_id(0, 0)};
  return h;
}

//! For a draft kind (chain, multi_draft): root -> node 0 (token 1) -> node 1 (token 2) over V = 5 at
//! temperature 0 with q = 0.2 everywhere. The root row's argmax is token 3, so p(1) = 0 and node 0 is
//! rejected; the residual max(0, p - q) is one-hot at 3, the bonus. Rows 1 and 2 hold NaN and their
//! row_params are out of range: read, they would be refused. Expected: nothing accepted, emitted {3}.
inline sampled_logits_case rejected_root_case(logits_case_kind kind) {
  sampled_logits_case h(0, 1, 5, 1, false, 1, kind);
  h.node_indptr = {0, 2};
  h.tokens = {1, 2};
  h.parents = {-1, 0};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  h.logits = {0, 1, 2, 9, 3, /**/ nan, 0, 0, 0, 0, /**/ 0, nan, 0, 0, 0};
  h.q = std::vector<float>(15, 0.2f);
  specdec::sampling_params p;
  p.temperature = 0.0f;
  h.params = {p};
  h.row_params = {0, 5, 6};
  h.seeds = {3};
  h.streams = {specdec::stream_id(0, 0)};
  return h;
}

//! multi_draft (with replacement): root -> {node 0 (token 1), node 1 (token 3)} over V = 5 at
//! temperature 0 with q = 0.2 everywhere. The root row's argmax is 3: node 0 is rejected (p(1) = 0)
//! and node 1 accepted (at temperature 0 the normalised residual max(0, p - q) is p itself, one-hot at
//! 3: this case checks which rows are read, not the residual, which the random cases cover); row 2
//! (after node 1) gives the bonus, its argmax 4. Node 0's row (row 1) holds NaN and its row_params
//! entry is out of range: never read (a rejected sibling's row). Expected: accepted {1}, emitted {3, 4}.
inline sampled_logits_case rejected_sibling_case() {
  auto h = rejected_root_case(logits_case_kind::multi_draft);
  h.tokens = {1, 3};
  h.parents = {-1, -1};
  h.logits[11] = 0.0f;
  h.logits[14] = 8.0f;  // row 2: argmax 4
  h.row_params = {0, 5, 0};
  return h;
}

//! c with tensor row `row` at -3e38 everywhere, entry `entry`'s repetition penalty 3 (no contextual
//! penalty) and every request's committed context the whole vocabulary: the penalty overflows every
//! admissible logit of that row to -inf, which processing refuses.
inline sampled_logits_case with_overflowing_row(sampled_logits_case c, std::int64_t row, std::size_t entry) {
  for (std::int64_t t = 0; t < c.vocab; ++t) c.logits[static_cast<std::size_t>(row * c.vocab + t)] = -3.0e38f;
  c.params[entry].repetition_penalty = 3.0f;
  c.params[entry].contextual_penalty = 1.0f;
  c.b = specdec::penalty_context_builder(static_cast<std::int32_t>(c.vocab));
  std::vector<std::int32_t> all(static_cast<std::size_t>(c.vocab));
  for (std::int64_t t = 0; t < c.vocab; ++t) all[static_cast<std::size_t>(t)] = static_cast<std::int32_t>(t);
  for (int r = 0; r < c.requests(); ++r) {
    const auto lo = static_cast<std::size_t>(c.node_indptr[static_cast<std::size_t>(r)]),
               n = static_cast<std::size_t>(c.node_indptr[static_cast<std::size_t>(r) + 1]) - lo;
    c.b.add_tree_rows(c.b.add_context(all), std::span(c.tokens).subspan(lo, n), std::span(c.parents).subspan(lo, n));
  }
  return c;
}

//! The logits form of c's kind on the host (with c's penalty context, or `context` when given), into
//! o; the workspace `work` (a fresh one unless given) with rows vocab + pad floats apart, the padding
//! NaN, which the form must leave alone (checked).
inline void run_host_logits(const sampled_logits_case& c, tree_outputs& o, const specdec::host& policy = {},
                            std::int64_t pad = 0, const specdec::penalty_context* context = nullptr,
                            std::vector<float>* work = nullptr) {
  const auto v1 = [](auto& a) { return specdec::make_view<1>(a.data(), {static_cast<std::int64_t>(a.size())}); };
  std::vector<float> own;
  std::vector<float>& w = work != nullptr ? *work : own;
  w.assign(static_cast<std::size_t>(c.requests() * (c.vocab + pad)), std::numeric_limits<float>::quiet_NaN());
  const auto lg = specdec::make_view<2>(c.logits.data(), {c.rows(), c.vocab});
  const auto qv = specdec::make_view<2>(c.q.data(), {c.has_draft_rows() ? c.rows() : 0, c.vocab});
  const auto pa = specdec::make_view<1>(c.params.data(), {static_cast<std::int64_t>(c.params.size())});
  const specdec::strided_view<float, 2> ws(w.data(), {c.requests(), c.vocab}, {c.vocab + pad, 1});
  const auto call = [&](const auto&... ctx) {  // ctx: the penalty context, or nothing
    if (c.kind == logits_case_kind::chain)
      specdec::verify_chain_speculative_batch(policy, v1(c.node_indptr), v1(c.tokens), v1(c.parents), lg, qv, pa,
                                              v1(c.row_params), ctx..., v1(c.seeds), v1(c.streams), ws, v1(o.accepted),
                                              v1(o.num_accepted), v1(o.bonus), v1(o.emitted), v1(o.status));
    else if (c.has_draft_rows())
      specdec::verify_multi_draft_batch(policy, v1(c.node_indptr), v1(c.tokens), v1(c.parents), lg, qv, c.mode(), pa,
                                        v1(c.row_params), ctx..., v1(c.seeds), v1(c.streams), ws, v1(o.accepted),
                                        v1(o.num_accepted), v1(o.bonus), v1(o.emitted), v1(o.status));
    else
      specdec::verify_sample_and_match_batch(policy, v1(c.node_indptr), v1(c.tokens), v1(c.parents), lg, pa,
                                             v1(c.row_params), ctx..., v1(c.seeds), v1(c.streams), ws, v1(o.accepted),
                                             v1(o.num_accepted), v1(o.bonus), v1(o.emitted), v1(o.status));
  };
  if (c.penalties)
    call(context != nullptr ? *context : c.b.view());
  else
    call();
  for (std::int64_t r = 0; r < c.requests(); ++r)
    for (std::int64_t k = c.vocab; k < c.vocab + pad; ++k)
      REQUIRE(std::isnan(w[static_cast<std::size_t>(r * (c.vocab + pad) + k)]));  // the padding is not the form's
}

//! The refusals every logits form makes in request 0's root row (row 0, always read), with entry 0
//! its sampling entry: an infinite logit, an entry out of range, a bad top_p, a row the penalties
//! empty. reject(bad_case, what) runs the form on bad_case and checks that it throws naming `what`
//! and leaves its outputs untouched.
template <class Reject>
void common_logits_refusals(const sampled_logits_case& c, Reject&& reject) {
  REQUIRE((c.penalties && c.requests() > 0 && c.params.size() <= 7));  // entry 7 out of range; a penalty to overflow
  {
    auto bad = c;
    bad.logits[3] = std::numeric_limits<float>::infinity();
    reject(bad, "target_logits");
  }
  {
    auto bad = c;
    bad.row_params[0] = 7;
    reject(bad, "row_params");
  }
  {
    auto bad = c;
    bad.params[0].top_p = 1.5f;
    reject(bad, "top_p");
  }
  reject(with_overflowing_row(c, 0, 0), "after the penalties");  // every admissible logit -> -inf
}

//! The same on the device: what every logits kernel reports for a request's first row `root` (always
//! read; its sampling entry `entry`): a NaN logit, an entry out of range, a row the penalties empty.
//! expect(bad_case, error, request, index) runs the form and checks the status.
template <class Expect>
void common_logits_reports(const sampled_logits_case& c, std::int32_t root, std::size_t entry, Expect&& expect) {
  REQUIRE((c.penalties && entry < c.params.size() && c.params.size() <= 9 && root < c.rows()));
  {
    auto bad = c;
    bad.logits[static_cast<std::size_t>(root * c.vocab + 1)] = std::numeric_limits<float>::quiet_NaN();
    expect(bad, specdec::device_error::row, -1, root);
  }
  {
    auto bad = c;
    bad.row_params[static_cast<std::size_t>(root)] = 9;
    expect(bad, specdec::device_error::params, 9, root);
  }
  expect(with_overflowing_row(c, root, entry), specdec::device_error::row, -1, root);
}

}  // namespace specdec_test
