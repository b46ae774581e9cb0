// Fuzz targets for the verifiers (include/specdec/verify/): greedy, chain speculative sampling,
// sample-and-match and multi-draft rejection sampling, single and ragged-batch forms. Every result
// must be a root path of the tree plus a bonus token in the vocabulary that the documented rule can
// produce (exact for greedy; support checks for the stochastic ones), each batch result must equal
// the single-request call on its slice, and a row the verifier read that holds NaN, +inf or (for
// probabilities) a negative value must have been rejected (the notes' policy 3). The logits form of
// verify_sample_and_match_batch must equal processing every row and then the probabilities form.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/sampling/logits_processor.hpp"
#include "specdec/sampling/penalty_context.hpp"
#include "specdec/verify/greedy.hpp"
#include "specdec/verify/multi_draft.hpp"
#include "specdec/verify/sample_and_match.hpp"
#include "specdec/verify/speculative_sampling.hpp"

namespace {
using specdec::token_tree;
using specdec::verify_result;
using specdec_fuzz::input;
constexpr float inf = std::numeric_limits<float>::infinity();

//! Rows [rows, vocab] of logits or probabilities; `probs` draws normalised probability rows most of
//! the time (with zeros), otherwise raw values from the palette.
std::vector<float> fuzz_rows(input& in, std::size_t rows, int vocab, bool probs) {
  std::vector<float> out(rows * static_cast<std::size_t>(vocab));
  for (std::size_t r = 0; r < rows; ++r) {
    const std::span<float> row(out.data() + r * static_cast<std::size_t>(vocab), static_cast<std::size_t>(vocab));
    const int mode = in.range(0, 9);
    double s = 0;
    for (float& x : row) {
      if (!probs) x = mode == 0 ? -inf : in.logit();
      else x = in.chance(30) ? 0.0f : in.prob();
      s += x;
    }
    if (probs && mode < 8 && s > 0 && std::isfinite(s))
      for (float& x : row) x = static_cast<float>(x / s);
  }
  return out;
}

std::span<const float> row_of(const std::vector<float>& rows, int vocab, std::int64_t r) {
  return {rows.data() + r * vocab, static_cast<std::size_t>(vocab)};
}

//! A value a probability row must not hold.
bool bad_prob(float x) { return !(x >= 0.0f) || x == inf; }
bool bad_logit(float x) { return std::isnan(x) || x == inf; }

bool tokens_in_vocab(const token_tree& t, int vocab) {
  return std::all_of(t.tokens().begin(), t.tokens().end(), [&](std::int32_t x) { return x >= 0 && x < vocab; });
}

//! `res.accepted` is a root path (each node's parent is the previous one) and the bonus is in vocab.
void check_path(const token_tree& t, const verify_result& res, int vocab, const std::string& who) {
  std::int32_t prev = -1;
  for (auto a : res.accepted) {
    FUZZ_CHECK(a >= 0 && a < t.size() && t.parent(a) == prev, who + ": accepted nodes are not a root path");
    prev = a;
  }
  FUZZ_CHECK(res.bonus >= 0 && res.bonus < vocab, who + ": bonus token " + std::to_string(res.bonus) + " outside [0, " +
                                                 std::to_string(vocab) + ")");
}

//! Rows read by a tree walk: the root's and each accepted node's (row = node + 1).
std::vector<std::int64_t> walked_rows(const verify_result& res) {
  std::vector<std::int64_t> rows{0};
  for (auto a : res.accepted) rows.push_back(a + 1);
  return rows;
}

//! The batch a target builds: 1-3 fuzzed trees and their rows back to back (n_r + 1 each).
struct batch_case {
  std::vector<token_tree> trees;
  specdec::token_tree_batch batch;
  std::vector<std::int64_t> first_row;  // request r's rows start here
};

batch_case fuzz_batch(input& in, int vocab) {
  batch_case b;
  const int requests = in.range(1, 3);
  std::int64_t row = 0;
  for (int r = 0; r < requests; ++r) {
    b.trees.push_back(in.tree(8, vocab));
    b.batch.push_back(b.trees.back(), in.range(1, 100));
    b.first_row.push_back(row);
    row += b.trees.back().size() + 1;
  }
  b.first_row.push_back(row);
  return b;
}

void check_batch_equals(const specdec::verify_batch_result& got, const std::vector<verify_result>& want,
                        const std::string& who) {
  FUZZ_CHECK(got.num_requests() == static_cast<int>(want.size()), who + ": request count");
  for (std::size_t r = 0; r < want.size(); ++r)
    FUZZ_CHECK(got.request(static_cast<int>(r)) == want[r], who + ": request " + std::to_string(r) + " differs from the single call");
}
}  // namespace

SPECDEC_FUZZ_TARGET(verify_greedy, "verify_greedy (exact rule) and verify_greedy_batch (== per-request calls)") {
  input in(data, size);
  const int vocab = in.range(1, 12);
  if (in.coin()) {
    const token_tree t = in.tree(12, vocab);
    const std::int64_t rows = t.size() + 1 + (in.chance(3) ? 1 : 0);
    const auto logits = fuzz_rows(in, static_cast<std::size_t>(rows), vocab, false);
    const auto res = specdec::verify_greedy(t, specdec::make_view<2>(logits.data(), {rows, vocab}));
    FUZZ_CHECK(tokens_in_vocab(t, vocab), "verify_greedy: accepted a tree token outside the vocabulary");
    check_path(t, res, vocab, "verify_greedy");
    for (auto r : walked_rows(res)) {
      const auto row = row_of(logits, vocab, r);
      FUZZ_CHECK(std::none_of(row.begin(), row.end(), bad_logit), "verify_greedy: used a row with NaN or +inf (row " +
                                                                  std::to_string(r) + ") without rejecting it");
    }
    // exact rule (verify/greedy.hpp): a node is reachable when every token on its root path is the
    // first argmax of its parent's row; the path ends at the deepest reachable node (lowest index
    // among equally deep ones), the bonus is the first argmax of that node's row
    const auto argmax = [&](std::int32_t node) {
      const auto row = row_of(logits, vocab, node + 1);
      return static_cast<std::int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    };
    std::vector<int> reach(static_cast<std::size_t>(t.size()), -1);
    std::int32_t best = -1;
    int best_depth = -1;
    for (int i = 0; i < t.size(); ++i) {
      const std::int32_t par = t.parent(i);
      if (par >= 0 && reach[static_cast<std::size_t>(par)] < 0) continue;
      if (t.token(i) != argmax(par)) continue;
      reach[static_cast<std::size_t>(i)] = par < 0 ? 0 : reach[static_cast<std::size_t>(par)] + 1;
      if (reach[static_cast<std::size_t>(i)] > best_depth) best = i, best_depth = reach[static_cast<std::size_t>(i)];
    }
    std::vector<std::int32_t> want;
    for (std::int32_t v = best; v >= 0; v = t.parent(v)) want.insert(want.begin(), v);
    FUZZ_CHECK(res.accepted == want && res.bonus == argmax(best), "verify_greedy: result differs from the greedy rule");
  } else {
    const auto b = fuzz_batch(in, vocab);
    const auto logits = fuzz_rows(in, static_cast<std::size_t>(b.first_row.back()), vocab, false);
    const auto got = specdec::verify_greedy_batch(specdec::host{1}, b.batch,
                                                  specdec::make_view<2>(logits.data(), {b.first_row.back(), vocab}));
    std::vector<verify_result> want;
    for (std::size_t r = 0; r < b.trees.size(); ++r) {
      const auto n = b.first_row[r + 1] - b.first_row[r];
      want.push_back(specdec::verify_greedy(b.trees[r], specdec::make_view<2>(logits.data() + b.first_row[r] * vocab, {n, vocab})));
    }
    check_batch_equals(got, want, "verify_greedy_batch");
  }
}

SPECDEC_FUZZ_TARGET(verify_chain, "verify_chain_speculative: accepted prefix, residual/bonus support, bad rows rejected") {
  input in(data, size);
  const int vocab = in.range(1, 12);
  const int n = in.range(0, 8);
  token_tree t;
  const auto par = in.parents(n);
  const bool chain_shape = std::all_of(par.begin(), par.end(), [i = 0](std::int32_t p) mutable { return p == i++ - 1; });
  for (int i = 0; i < n; ++i) t.add(in.token(vocab), par[static_cast<std::size_t>(i)]);
  const auto p = fuzz_rows(in, static_cast<std::size_t>(n + 1), vocab, true);
  const auto q = fuzz_rows(in, static_cast<std::size_t>(n + 1), vocab, true);
  specdec::philox_stream rng(in.u64(), in.u64());
  const auto res = specdec::verify_chain_speculative(t, specdec::make_view<2>(p.data(), {n + 1, vocab}),
                                                     specdec::make_view<2>(q.data(), {n + 1, vocab}), rng);
  FUZZ_CHECK(chain_shape && tokens_in_vocab(t, vocab), "verify_chain_speculative: accepted a non-chain tree or a bad token");
  check_path(t, res, vocab, "verify_chain_speculative");
  const auto a = static_cast<std::int64_t>(res.accepted.size());
  for (std::int64_t r = 0; r <= a; ++r) {
    const auto pr = row_of(p, vocab, r);
    FUZZ_CHECK(std::none_of(pr.begin(), pr.end(), bad_prob), "verify_chain_speculative: used target row " + std::to_string(r) +
                                                            " with a negative, NaN or +inf entry without rejecting it");
  }
  for (std::int64_t i = 0; i < a; ++i)
    FUZZ_CHECK(p[static_cast<std::size_t>(i * vocab + t.token(static_cast<int>(i)))] > 0.0f,
          "verify_chain_speculative: accepted a token the target gives probability 0");
  const auto b = static_cast<std::size_t>(res.bonus);
  if (a < n) {
    const auto pr = row_of(p, vocab, a), qr = row_of(q, vocab, a);
    FUZZ_CHECK(std::none_of(qr.begin(), qr.end(), bad_prob), "verify_chain_speculative: used draft row " + std::to_string(a) +
                                                            " with a negative, NaN or +inf entry without rejecting it");
    bool residual = false;
    for (int v = 0; v < vocab; ++v) residual |= static_cast<double>(pr[static_cast<std::size_t>(v)]) > qr[static_cast<std::size_t>(v)];
    FUZZ_CHECK(residual ? static_cast<double>(pr[b]) > qr[b] : pr[b] > 0.0f,
          "verify_chain_speculative: the token after a rejection is outside norm(max(0, p - q))'s support");
  } else {
    FUZZ_CHECK(p[static_cast<std::size_t>(n) * static_cast<std::size_t>(vocab) + b] > 0.0f,
          "verify_chain_speculative: bonus token with target probability 0");
  }
}

SPECDEC_FUZZ_TARGET(verify_sample_and_match, "verify_sample_and_match (+ batch == per-request calls): support of every draw") {
  input in(data, size);
  const int vocab = in.range(1, 12);
  if (in.coin()) {
    const token_tree t = in.tree(12, vocab);
    const auto p = fuzz_rows(in, static_cast<std::size_t>(t.size() + 1), vocab, true);
    specdec::philox_stream rng(in.u64(), in.u64());
    const auto res = specdec::verify_sample_and_match(t, specdec::make_view<2>(p.data(), {t.size() + 1, vocab}), rng);
    FUZZ_CHECK(tokens_in_vocab(t, vocab), "verify_sample_and_match: accepted a tree token outside the vocabulary");
    check_path(t, res, vocab, "verify_sample_and_match");
    // The walk over classes of duplicate siblings (verify/sample_and_match.hpp): class j = the nodes
    // whose root-path tokens are the first j drawn tokens; it draws from its lowest node's row and
    // moves to every child of the class carrying the draw.
    std::vector<std::int32_t> drawn;
    for (auto a : res.accepted) drawn.push_back(t.token(a));
    drawn.push_back(res.bonus);
    std::vector<std::int32_t> cls{-1};
    for (std::size_t j = 0; j < drawn.size(); ++j) {
      const std::int32_t front = *std::min_element(cls.begin(), cls.end());
      const auto row = row_of(p, vocab, front + 1);
      FUZZ_CHECK(std::none_of(row.begin(), row.end(), bad_prob), "verify_sample_and_match: used row " +
                                                                std::to_string(front + 1) +
                                                                " with a negative, NaN or +inf entry without rejecting it");
      FUZZ_CHECK(row[static_cast<std::size_t>(drawn[j])] > 0.0f, "verify_sample_and_match: drew a token of probability 0");
      std::vector<std::int32_t> next;
      for (int i = 0; i < t.size(); ++i)
        if (std::find(cls.begin(), cls.end(), t.parent(i)) != cls.end() && t.token(i) == drawn[j]) next.push_back(i);
      if (j + 1 == drawn.size()) {
        FUZZ_CHECK(next.empty(), "verify_sample_and_match: stopped although a child of the class carries the bonus");
        FUZZ_CHECK(res.accepted.empty() || res.accepted.back() == front,
                   "verify_sample_and_match: the accepted path does not end at the last class's lowest node");
      } else {
        FUZZ_CHECK(!next.empty(), "verify_sample_and_match: accepted a token no child of the class carries");
      }
      cls = next;
    }
  } else {
    const auto b = fuzz_batch(in, vocab);
    const auto p = fuzz_rows(in, static_cast<std::size_t>(b.first_row.back()), vocab, true);
    const std::uint64_t seed = in.u64();
    const std::uint32_t step = static_cast<std::uint32_t>(in.u64());
    std::vector<std::uint32_t> ids;
    if (in.coin()) ids = in.many(b.trees.size() + (in.chance(5) ? 1 : 0), [&] { return static_cast<std::uint32_t>(in.u64()); });
    const auto got = specdec::verify_sample_and_match_batch(
        specdec::host{1}, b.batch, specdec::make_view<2>(p.data(), {b.first_row.back(), vocab}), seed, step, ids);
    std::vector<verify_result> want;
    for (std::size_t r = 0; r < b.trees.size(); ++r) {
      specdec::philox_stream rng(seed, specdec::stream_id(ids.empty() ? static_cast<std::uint32_t>(r) : ids[r], step));
      const auto n = b.first_row[r + 1] - b.first_row[r];
      want.push_back(specdec::verify_sample_and_match(b.trees[r], specdec::make_view<2>(p.data() + b.first_row[r] * vocab, {n, vocab}), rng));
    }
    check_batch_equals(got, want, "verify_sample_and_match_batch");
  }
}

SPECDEC_FUZZ_TARGET(verify_multi_draft, "verify_multi_draft (+ batch == per-request calls), both draft_sampling modes") {
  input in(data, size);
  const int vocab = in.range(1, 12);
  const auto mode = in.coin() ? specdec::draft_sampling::with_replacement : specdec::draft_sampling::without_replacement;
  if (in.coin()) {
    const token_tree t = in.tree(12, vocab);
    const auto p = fuzz_rows(in, static_cast<std::size_t>(t.size() + 1), vocab, true);
    const auto q = fuzz_rows(in, static_cast<std::size_t>(t.size() + 1), vocab, true);
    specdec::philox_stream rng(in.u64(), in.u64());
    const auto res = specdec::verify_multi_draft(t, specdec::make_view<2>(p.data(), {t.size() + 1, vocab}),
                                                 specdec::make_view<2>(q.data(), {t.size() + 1, vocab}), mode, rng);
    FUZZ_CHECK(tokens_in_vocab(t, vocab), "verify_multi_draft: accepted a tree token outside the vocabulary");
    check_path(t, res, vocab, "verify_multi_draft");
    const auto rows = walked_rows(res);
    for (std::size_t j = 0; j < rows.size(); ++j) {
      const auto pr = row_of(p, vocab, rows[j]), qr = row_of(q, vocab, rows[j]);
      // q's row is the drafts' distribution: read only where drafts were drawn (the node has children).
      bool drafted = false;
      for (int i = 0; i < t.size(); ++i) drafted = drafted || t.parent(i) == static_cast<std::int32_t>(rows[j]) - 1;
      FUZZ_CHECK(std::none_of(pr.begin(), pr.end(), bad_prob) && (!drafted || std::none_of(qr.begin(), qr.end(), bad_prob)),
            "verify_multi_draft: used row " + std::to_string(rows[j]) + " with a negative, NaN or +inf entry without rejecting it");
      const auto drawn = static_cast<std::size_t>(j < res.accepted.size() ? t.token(res.accepted[j]) : res.bonus);
      FUZZ_CHECK(pr[drawn] > 0.0f || qr[drawn] > 0.0f, "verify_multi_draft: emitted a token neither p nor q can produce");
    }
  } else {
    const auto b = fuzz_batch(in, vocab);
    const auto p = fuzz_rows(in, static_cast<std::size_t>(b.first_row.back()), vocab, true);
    const auto q = fuzz_rows(in, static_cast<std::size_t>(b.first_row.back()), vocab, true);
    const std::uint64_t seed = in.u64();
    const std::uint32_t step = static_cast<std::uint32_t>(in.u64());
    const auto got = specdec::verify_multi_draft_batch(specdec::host{1}, b.batch,
                                                       specdec::make_view<2>(p.data(), {b.first_row.back(), vocab}),
                                                       specdec::make_view<2>(q.data(), {b.first_row.back(), vocab}), mode,
                                                       seed, step);
    std::vector<verify_result> want;
    for (std::size_t r = 0; r < b.trees.size(); ++r) {
      specdec::philox_stream rng(seed, specdec::stream_id(static_cast<std::uint32_t>(r), step));
      const auto n = b.first_row[r + 1] - b.first_row[r];
      want.push_back(specdec::verify_multi_draft(b.trees[r], specdec::make_view<2>(p.data() + b.first_row[r] * vocab, {n, vocab}),
                                                 specdec::make_view<2>(q.data() + b.first_row[r] * vocab, {n, vocab}), mode, rng));
    }
    check_batch_equals(got, want, "verify_multi_draft_batch");
  }
}

namespace {
//! Raw arrays of an array-form verification: offsets, parents and tokens that may be invalid.
struct raw_batch {
  std::vector<std::int32_t> node_indptr{0}, tokens, parents;
  bool valid = true;  // offsets, parents and tokens all valid
  bool chains = true; // every request a chain
};

raw_batch fuzz_raw_batch(input& in, int vocab) {
  raw_batch b;
  const int requests = in.range(0, 3);
  for (int r = 0; r < requests; ++r) {
    const int n = in.range(0, 6);
    const auto par = in.parents(n, /*allow_invalid=*/true);
    for (int i = 0; i < n; ++i) b.parents.push_back(par[static_cast<std::size_t>(i)]), b.tokens.push_back(in.token(vocab));
    b.node_indptr.push_back(b.node_indptr.back() + n);
  }
  if (requests > 0 && in.chance(10))  // a corrupt offset
    b.node_indptr[static_cast<std::size_t>(in.range(0, requests))] = in.int32(-2, static_cast<std::int32_t>(b.tokens.size()) + 2);
  // Validity from the final arrays (a changed offset moves nodes between requests).
  const auto N = static_cast<std::int32_t>(b.tokens.size());
  b.valid = b.node_indptr.front() == 0 && b.node_indptr.back() == N;
  for (std::size_t r = 0; r + 1 < b.node_indptr.size(); ++r) b.valid &= b.node_indptr[r] <= b.node_indptr[r + 1];
  if (!b.valid) return b;
  for (std::size_t r = 0; r + 1 < b.node_indptr.size(); ++r)
    for (std::int32_t i = b.node_indptr[r]; i < b.node_indptr[r + 1]; ++i) {
      const std::int32_t local = i - b.node_indptr[r], p = b.parents[static_cast<std::size_t>(i)];
      const std::int32_t t = b.tokens[static_cast<std::size_t>(i)];
      b.valid &= p >= -1 && p < local && t >= 0 && t < vocab;
      b.chains &= p == local - 1;
    }
  return b;
}

template <class T>
specdec::strided_view<T, 1> v1(std::vector<T>& x) {
  return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())});
}
}  // namespace

SPECDEC_FUZZ_TARGET(verify_arrays, "verify_{greedy,sample_and_match,chain_speculative}_batch array forms == token_tree forms, or a clean throw") {
  input in(data, size);
  const int vocab = in.range(1, 10);
  const int kind = in.range(0, 2);  // 0 greedy, 1 sample_and_match, 2 chain
  raw_batch b = fuzz_raw_batch(in, vocab);
  const auto R = static_cast<std::int64_t>(b.node_indptr.size()) - 1, N = static_cast<std::int64_t>(b.tokens.size());
  auto p = fuzz_rows(in, static_cast<std::size_t>(N + R), vocab, kind != 0);
  auto q = fuzz_rows(in, static_cast<std::size_t>(N + R), vocab, true);
  std::vector<std::uint64_t> seeds, streams;
  for (std::int64_t r = 0; r < R; ++r) seeds.push_back(in.u64()), streams.push_back(in.u64());
  std::vector<std::int32_t> acc(static_cast<std::size_t>(N), -7), nacc(static_cast<std::size_t>(R), -7),
      bon(static_cast<std::size_t>(R), -7), emi(static_cast<std::size_t>(N + R), -7), st{9, 9, 9};
  const auto fresh = std::vector{acc, nacc, bon, emi, st};
  const auto pv = specdec::make_view<2>(p.data(), {N + R, vocab});
  const auto qv = specdec::make_view<2>(q.data(), {N + R, vocab});
  bool threw = false;
  try {
    if (kind == 0)
      specdec::verify_greedy_batch(specdec::host{1}, v1(b.node_indptr), v1(b.tokens), v1(b.parents), pv, v1(acc), v1(nacc),
                                   v1(bon), v1(emi), v1(st));
    else if (kind == 1)
      specdec::verify_sample_and_match_batch(specdec::host{1}, v1(b.node_indptr), v1(b.tokens), v1(b.parents), pv, v1(seeds),
                                             v1(streams), v1(acc), v1(nacc), v1(bon), v1(emi), v1(st));
    else
      specdec::verify_chain_speculative_batch(specdec::host{1}, v1(b.node_indptr), v1(b.tokens), v1(b.parents), pv, qv,
                                              v1(seeds), v1(streams), v1(acc), v1(nacc), v1(bon), v1(emi), v1(st));
  } catch (const specdec::invalid_argument&) {
    threw = true;
  }
  if (threw) FUZZ_CHECK((std::vector{acc, nacc, bon, emi, st}) == fresh, "verify arrays: a call that threw wrote its outputs");
  if (!b.valid || (kind == 2 && !b.chains)) {
    FUZZ_CHECK(threw, "verify arrays: accepted invalid offsets, parents or tokens (or a non-chain for chain speculative)");
    return;
  }
  // The reference: the token_tree form per request; the array form throws iff some request's does.
  bool ref_threw = false;
  std::vector<verify_result> want;
  for (std::int64_t r = 0; r < R && !ref_threw; ++r) {
    const auto lo = b.node_indptr[static_cast<std::size_t>(r)], hi = b.node_indptr[static_cast<std::size_t>(r) + 1];
    token_tree t;
    for (auto i = lo; i < hi; ++i) t.add(b.tokens[static_cast<std::size_t>(i)], b.parents[static_cast<std::size_t>(i)]);
    const auto rows_p = specdec::make_view<2>(p.data() + (lo + r) * vocab, {hi - lo + 1, vocab});
    const auto rows_q = specdec::make_view<2>(q.data() + (lo + r) * vocab, {hi - lo + 1, vocab});
    specdec::philox_stream rng(seeds.empty() ? 0 : seeds[static_cast<std::size_t>(r)],
                               streams.empty() ? 0 : streams[static_cast<std::size_t>(r)]);
    try {
      want.push_back(kind == 0   ? specdec::verify_greedy(t, rows_p)
                     : kind == 1 ? specdec::verify_sample_and_match(t, rows_p, rng)
                                 : specdec::verify_chain_speculative(t, rows_p, rows_q, rng));
    } catch (const specdec::invalid_argument&) {
      ref_threw = true;
    }
  }
  FUZZ_CHECK(threw == ref_threw, "verify arrays: threw where the token_tree form did not, or the other way round");
  if (threw) return;
  FUZZ_CHECK(st == (std::vector<std::int32_t>{0, -1, -1}), "verify arrays: status is not {0, -1, -1} after success");
  for (std::int64_t r = 0; r < R; ++r) {
    const auto lo = b.node_indptr[static_cast<std::size_t>(r)];
    const auto& w = want[static_cast<std::size_t>(r)];
    const auto k = static_cast<std::int32_t>(w.accepted.size());
    FUZZ_CHECK(nacc[static_cast<std::size_t>(r)] == k && bon[static_cast<std::size_t>(r)] == w.bonus,
               "verify arrays: num_accepted or bonus differs from the token_tree form");
    for (std::int32_t j = 0; j < k; ++j)
      FUZZ_CHECK(acc[static_cast<std::size_t>(lo + j)] == w.accepted[static_cast<std::size_t>(j)] &&
                     emi[static_cast<std::size_t>(lo + r + j)] == b.tokens[static_cast<std::size_t>(lo + w.accepted[static_cast<std::size_t>(j)])],
                 "verify arrays: accepted or emitted differs from the token_tree form");
    FUZZ_CHECK(emi[static_cast<std::size_t>(lo + r + k)] == w.bonus, "verify arrays: the last emitted token is not the bonus");
  }
}

SPECDEC_FUZZ_TARGET(sample_and_match_logits, "verify_{sample_and_match,chain_speculative,multi_draft}_batch from logits == process_logits_batch, logits_to_probs_batch, then the probabilities form") {
  // Raw (possibly invalid) trees, fuzzed logits rows (NaN, +inf, -inf rows, near FLT_MAX), one or two
  // sampling entries with any processors (penalties through a penalty_context when the trees are
  // valid), entries out of range now and then; then the verifier (read last, so inputs written before
  // it existed still fuzz sample-and-match): sample-and-match, chain speculative sampling, or
  // multi-draft with or without replacement, with fuzzed draft rows. Where the composition succeeds
  // the logits form must give the same outputs; where it refuses, the logits form (which checks only
  // the rows its walks reach) either refuses too, leaving its outputs untouched, or gives root paths.
  input in(data, size);
  const int vocab = in.range(1, 12);
  raw_batch b = fuzz_raw_batch(in, vocab);
  const auto R = static_cast<std::int64_t>(b.node_indptr.size()) - 1, N = static_cast<std::int64_t>(b.tokens.size());
  const std::int64_t rows = N + R;
  auto logits = fuzz_rows(in, static_cast<std::size_t>(rows), vocab, false);
  if (in.chance(10) && rows > 0) logits[static_cast<std::size_t>(in.range(0, static_cast<int>(rows * vocab) - 1))] = in.real(3e38f, 3.4e38f, 50);
  const bool penalties = b.valid && in.coin();
  std::vector<specdec::sampling_params> params(static_cast<std::size_t>(in.range(1, 2)));
  for (auto& p : params) {
    p.temperature = in.chance(20) ? 0.0f : in.chance(30) ? 1.0f : in.real(0.05f, 4.0f);
    p.top_k = in.chance(50) ? 0 : in.int32(1, vocab + 1);
    p.top_p = in.chance(50) ? 1.0f : in.real(0.01f, 1.0f);
    p.min_p = in.chance(60) ? 0.0f : in.prob();
    p.eta_epsilon = in.chance(60) ? 0.0f : in.real(0.0f, 0.5f);
    if (penalties || in.chance(5)) {
      p.repetition_penalty = in.chance(50) ? 1.0f : in.real(1.0f, 3.0f);
      p.contextual_penalty = in.chance(50) ? 1.0f : in.real(1.0f, 3.0f);
      p.penalty_window = in.int32(0, 12);
      p.contextual_sign_aware = in.coin();
    }
  }
  std::vector<std::int32_t> row_params(static_cast<std::size_t>(rows), 0);
  for (auto& e : row_params) e = in.chance(3) ? in.int32(-1, 3) : in.int32(0, static_cast<std::int32_t>(params.size()) - 1);
  specdec::penalty_context_builder ctx(vocab);
  if (penalties)
    for (std::int64_t r = 0; r < R; ++r) {
      std::vector<std::int32_t> committed(static_cast<std::size_t>(in.range(0, 12)));
      for (auto& t : committed) t = in.token(vocab);
      const auto lo = static_cast<std::size_t>(b.node_indptr[static_cast<std::size_t>(r)]),
                 n = static_cast<std::size_t>(b.node_indptr[static_cast<std::size_t>(r) + 1]) - lo;
      ctx.add_tree_rows(in.coin() ? ctx.add_context(committed) : -1, std::span(b.tokens).subspan(lo, n),
                        std::span(b.parents).subspan(lo, n));
    }
  std::vector<std::uint64_t> seeds, streams;
  for (std::int64_t r = 0; r < R; ++r) seeds.push_back(in.u64()), streams.push_back(in.u64());
  const int kind = in.range(0, 3);  // 0 sample_and_match, 1 chain, 2 multi-draft, 3 multi-draft without replacement
  const std::string form = kind == 0   ? "verify_sample_and_match_batch"
                           : kind == 1 ? "verify_chain_speculative_batch"
                           : kind == 2 ? "verify_multi_draft_batch"
                                       : "verify_multi_draft_batch (without replacement)";  // for findings
  const auto mode = kind == 3 ? specdec::draft_sampling::without_replacement : specdec::draft_sampling::with_replacement;
  auto q = kind == 0 ? std::vector<float>{} : fuzz_rows(in, static_cast<std::size_t>(rows), vocab, true);
  const auto qv = specdec::make_view<2>(static_cast<const float*>(q.data()), {kind == 0 ? 0 : rows, vocab});
  struct outs {
    std::vector<std::int32_t> acc, nacc, bon, emi, st{9, 9, 9};
    bool operator==(const outs&) const = default;
  };
  const outs fresh{std::vector<std::int32_t>(static_cast<std::size_t>(N), -7), std::vector<std::int32_t>(static_cast<std::size_t>(R), -7),
                   std::vector<std::int32_t>(static_cast<std::size_t>(R), -7), std::vector<std::int32_t>(static_cast<std::size_t>(rows), -7)};
  outs got = fresh, want = fresh;
  std::vector<float> work(static_cast<std::size_t>(std::max<std::int64_t>(R, 1) * vocab));
  const auto lg = specdec::make_view<2>(static_cast<const float*>(logits.data()), {rows, vocab});
  const auto pa = specdec::make_view<1>(static_cast<const specdec::sampling_params*>(params.data()), {static_cast<std::int64_t>(params.size())});
  const auto before = logits;
  bool threw = false, ref_threw = false;
  try {
    const auto w = specdec::make_view<2>(work.data(), {R, vocab});
    const specdec::host h{1};
    if (penalties && kind == 0)
      specdec::verify_sample_and_match_batch(h, v1(b.node_indptr), v1(b.tokens), v1(b.parents), lg, pa, v1(row_params),
                                             ctx.view(), v1(seeds), v1(streams), w, v1(got.acc), v1(got.nacc),
                                             v1(got.bon), v1(got.emi), v1(got.st));
    else if (kind == 0)
      specdec::verify_sample_and_match_batch(h, v1(b.node_indptr), v1(b.tokens), v1(b.parents), lg, pa, v1(row_params),
                                             v1(seeds), v1(streams), w, v1(got.acc), v1(got.nacc), v1(got.bon),
                                             v1(got.emi), v1(got.st));
    else if (penalties && kind == 1)
      specdec::verify_chain_speculative_batch(h, v1(b.node_indptr), v1(b.tokens), v1(b.parents), lg, qv, pa,
                                              v1(row_params), ctx.view(), v1(seeds), v1(streams), w, v1(got.acc),
                                              v1(got.nacc), v1(got.bon), v1(got.emi), v1(got.st));
    else if (kind == 1)
      specdec::verify_chain_speculative_batch(h, v1(b.node_indptr), v1(b.tokens), v1(b.parents), lg, qv, pa,
                                              v1(row_params), v1(seeds), v1(streams), w, v1(got.acc), v1(got.nacc),
                                              v1(got.bon), v1(got.emi), v1(got.st));
    else if (penalties)
      specdec::verify_multi_draft_batch(h, v1(b.node_indptr), v1(b.tokens), v1(b.parents), lg, qv, mode, pa,
                                        v1(row_params), ctx.view(), v1(seeds), v1(streams), w, v1(got.acc),
                                        v1(got.nacc), v1(got.bon), v1(got.emi), v1(got.st));
    else
      specdec::verify_multi_draft_batch(h, v1(b.node_indptr), v1(b.tokens), v1(b.parents), lg, qv, mode, pa,
                                        v1(row_params), v1(seeds), v1(streams), w, v1(got.acc), v1(got.nacc),
                                        v1(got.bon), v1(got.emi), v1(got.st));
  } catch (const specdec::invalid_argument&) {
    threw = true;
  }
  FUZZ_CHECK(before == logits || (before.size() == logits.size() &&
                                  std::memcmp(before.data(), logits.data(), logits.size() * sizeof(float)) == 0),
             form + " from logits wrote its logits");  // == fails on NaN: then the bits

  try {
    auto probs = logits;
    const auto pv = specdec::make_view<2>(probs.data(), {rows, vocab});
    std::vector<std::int32_t> st(3);
    const auto sv = specdec::make_view<1>(st.data(), {3});
    if (penalties)
      specdec::process_logits_batch(specdec::host{1}, pv, pa, v1(row_params), ctx.view(), sv);
    else
      specdec::process_logits_batch(specdec::host{1}, pv, pa, v1(row_params), sv);
    specdec::logits_to_probs_batch(specdec::host{1}, pv, pv, sv);
    if (kind == 0)
      specdec::verify_sample_and_match_batch(specdec::host{1}, v1(b.node_indptr), v1(b.tokens), v1(b.parents), pv,
                                             v1(seeds), v1(streams), v1(want.acc), v1(want.nacc), v1(want.bon),
                                             v1(want.emi), v1(want.st));
    else if (kind == 1)
      specdec::verify_chain_speculative_batch(specdec::host{1}, v1(b.node_indptr), v1(b.tokens), v1(b.parents), pv, qv,
                                              v1(seeds), v1(streams), v1(want.acc), v1(want.nacc), v1(want.bon),
                                              v1(want.emi), v1(want.st));
    else
      specdec::verify_multi_draft_batch(specdec::host{1}, v1(b.node_indptr), v1(b.tokens), v1(b.parents), pv, qv, mode,
                                        v1(seeds), v1(streams), v1(want.acc), v1(want.nacc), v1(want.bon), v1(want.emi),
                                        v1(want.st));
  } catch (const specdec::invalid_argument&) {
    ref_threw = true;
  }
  if (threw) {
    FUZZ_CHECK(got == fresh, form + " from logits: a call that threw wrote its outputs");
    FUZZ_CHECK(ref_threw, form + " from logits refused a batch the composition takes");
    return;
  }
  FUZZ_CHECK(b.valid, form + " from logits accepted invalid offsets, parents or tokens");
  if (!ref_threw) {
    FUZZ_CHECK(got.st == want.st && got.nacc == want.nacc && got.bon == want.bon,
               form + " from logits: status, counts or bonus tokens differ from the composition");
    for (std::int64_t r = 0; r < R; ++r) {
      const auto lo = b.node_indptr[static_cast<std::size_t>(r)], k = want.nacc[static_cast<std::size_t>(r)];
      for (std::int32_t j = 0; j < k; ++j)
        FUZZ_CHECK(got.acc[static_cast<std::size_t>(lo + j)] == want.acc[static_cast<std::size_t>(lo + j)],
                   form + " from logits: accepted nodes differ from the composition");
      for (std::int32_t j = 0; j <= k; ++j)
        FUZZ_CHECK(got.emi[static_cast<std::size_t>(lo + r + j)] == want.emi[static_cast<std::size_t>(lo + r + j)],
                   form + " from logits: emitted tokens differ from the composition");
    }
    return;
  }
  for (std::int64_t r = 0; r < R; ++r) {  // the composition refused a row this call did not visit: root paths
    const auto lo = b.node_indptr[static_cast<std::size_t>(r)], n = b.node_indptr[static_cast<std::size_t>(r) + 1] - lo;
    const auto k = got.nacc[static_cast<std::size_t>(r)];
    FUZZ_CHECK(k >= 0 && k <= n, form + " from logits: an accepted count outside [0, n]");
    std::int32_t prev = -1;
    for (std::int32_t j = 0; j < k; ++j) {
      const auto v = got.acc[static_cast<std::size_t>(lo + j)];
      FUZZ_CHECK(v >= 0 && v < n && b.parents[static_cast<std::size_t>(lo + v)] == prev, form + " from logits: not a root path");
      prev = v;
    }
    FUZZ_CHECK(got.bon[static_cast<std::size_t>(r)] >= 0 && got.bon[static_cast<std::size_t>(r)] < vocab,
               form + " from logits: a bonus token outside the vocabulary");
  }
}
