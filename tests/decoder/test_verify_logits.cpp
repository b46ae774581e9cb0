// The verifiers' verify_logits (decoder/concepts.hpp: rows processed when the walk reads them):
// greedy_verifier, sample_and_match_verifier, chain_speculative_verifier and multi_draft_verifier give
// what process_tree_logits on every row and then verify give, bit for bit, on random trees (chains
// with and without draft q rows; tries of k drafts with q rows, with and without replacement) with
// every processor and both penalties (the per-thread scratch reused across vocabularies and
// parameters), and refuse what verify refuses with its message; every row is still checked (a NaN in
// a row no walk reads is refused with process_tree_logits' message, and nothing is drawn).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <optional>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/decoder/verifiers.hpp"
#include "tree/tree_batch_util.hpp"

using namespace specdec;

namespace {

struct tree_case {
  token_tree tree;
  std::vector<float> logits;  // [n + 1, V]
  std::vector<std::int32_t> committed;
  std::int64_t vocab;
};

//! Logits in [-2, 2) over `c.tree`, with a peak of 3-5 on a random child's token in 3 rows of 4 (so
//! walks go deep), and a committed context of up to 30 tokens 0-5.
void fill_logits(tree_case& c, philox_stream& rng) {
  const int n = c.tree.size();
  const auto V = c.vocab;
  c.logits.clear();
  for (int s = 0; s <= n; ++s) {
    std::vector<float> row(static_cast<std::size_t>(V));
    for (auto& x : row) x = 4.0f * rng.uniform() - 2.0f;
    std::vector<std::int32_t> kids;
    for (int i = 0; i < n; ++i)
      if (c.tree.parent(i) == s - 1) kids.push_back(c.tree.token(i));
    if (!kids.empty() && rng.below(4) != 0)
      row[static_cast<std::size_t>(kids[rng.below(static_cast<std::uint32_t>(kids.size()))])] = 3.0f + 2.0f * rng.uniform();
    c.logits.insert(c.logits.end(), row.begin(), row.end());
  }
  c.committed.clear();
  for (std::uint32_t j = 0, m = rng.below(31); j < m; ++j) c.committed.push_back(static_cast<std::int32_t>(rng.below(6)));
}

//! A tree of up to 40 nodes over tokens 0-3, with fill_logits' logits and context.
tree_case random_case(std::int64_t V, std::uint64_t seed) {
  philox_stream rng(seed, 9);
  tree_case c{{}, {}, {}, V};
  const int n = static_cast<int>(rng.below(41));
  const auto par = specdec_test::random_parents(n, static_cast<int>(rng.below(4)), rng);
  for (int i = 0; i < n; ++i) c.tree.add(static_cast<std::int32_t>(rng.below(4)), par[static_cast<std::size_t>(i)]);
  fill_logits(c, rng);
  return c;
}

sampling_params random_params(philox_stream& rng, bool greedy) {
  sampling_params p;
  p.temperature = greedy ? 0.0f : 0.3f + rng.uniform();
  if (rng.below(2) == 0) p.top_k = 1 + static_cast<int>(rng.below(6));
  if (rng.below(2) == 0) p.top_p = 0.3f + 0.6f * rng.uniform();
  if (rng.below(3) == 0) p.min_p = 0.1f * rng.uniform();
  if (rng.below(3) == 0) p.eta_epsilon = 0.05f * rng.uniform();
  if (rng.below(4) != 0) p.repetition_penalty = 1.0f + 2.0f * rng.uniform();
  if (rng.below(4) != 0) p.contextual_penalty = 1.0f + 2.0f * rng.uniform();
  p.penalty_window = 1 + static_cast<int>(rng.below(8));
  p.contextual_sign_aware = rng.below(2) == 0;
  return p;
}

//! A positive draft row over V tokens for the prefix `prefix` (a function of the prefix only, as a
//! draft model's q is), with a peak on one of the tokens 0-3.
std::vector<float> draft_row(std::span<const std::int32_t> prefix, std::int64_t V) {
  std::uint64_t h = 1469598103934665603ull;
  for (const auto t : prefix) h = (h ^ static_cast<std::uint64_t>(t + 1)) * 1099511628211ull;
  philox_stream rng(h, 3);
  std::vector<float> q(static_cast<std::size_t>(V));
  double sum = 0.0;
  for (auto& x : q) sum += x = 0.05f + rng.uniform();
  q[rng.below(4) % static_cast<std::uint32_t>(V)] += static_cast<float>(sum);
  sum = 0.0;
  for (const float x : q) sum += x;
  for (auto& x : q) x = static_cast<float>(x / sum);
  return q;
}

//! What verify and verify_logits did: the result, or the message they threw.
struct outcome {
  std::optional<verify_result> result;
  std::string error;
  bool operator==(const outcome&) const = default;
};

template <class F>
outcome run(F&& f) {
  outcome o;
  try {
    verify_result r;
    f(r);
    o.result = r;
  } catch (const invalid_argument& e) {
    o.error = e.what();
  }
  return o;
}

//! Fills `c` (tree, logits, committed) and `draft` for verifier Verifier from `seed`.
template <class Verifier>
void make_case(tree_case& c, draft_candidates& draft, std::int64_t V, std::uint64_t seed);

template <>
void make_case<greedy_verifier>(tree_case& c, draft_candidates&, std::int64_t V, std::uint64_t seed) {
  c = random_case(V, seed);
}
template <>
void make_case<sample_and_match_verifier>(tree_case& c, draft_candidates&, std::int64_t V, std::uint64_t seed) {
  c = random_case(V, seed);
}

// A chain of 0-8 tokens 0-3; the drafter's q rows in 2 cases of 3 (in draft.q, or in its own buffer
// with padded rows through q_rows), else none (one-hot rows); 1 case in 20 has a bad q row.
template <>
void make_case<chain_speculative_verifier>(tree_case& c, draft_candidates& draft, std::int64_t V, std::uint64_t seed) {
  philox_stream rng(seed, 11);
  c = tree_case{{}, {}, {}, V};
  const int n = static_cast<int>(rng.below(9));
  std::vector<std::int32_t> prefix;
  const auto how = rng.below(3);
  static thread_local std::vector<float> buffer;  // a drafter's own q buffer, rows V + 5 apart
  buffer.assign(static_cast<std::size_t>(n * (V + 5)), -1.0f);
  for (int i = 0; i < n; ++i) {
    const auto q = draft_row(prefix, V);
    const auto t = static_cast<std::int32_t>(rng.below(4));
    c.tree.add(t, i - 1);
    draft.chain.push_back(draft_token{t, 0.0f});
    if (how == 1) draft.q.insert(draft.q.end(), q.begin(), q.end());
    if (how == 2) std::copy(q.begin(), q.end(), buffer.begin() + static_cast<std::ptrdiff_t>(i * (V + 5)));
    prefix.push_back(t);
  }
  if (how == 1) draft.vocab = static_cast<int>(V);
  if (how == 2 && n > 0) draft.q_rows = strided_view<const float, 2>(buffer.data(), {n, V}, {V + 5, 1});
  if (how != 0 && n > 0 && rng.below(20) == 0) {
    float* q = how == 1 ? draft.q.data() : buffer.data();
    q[rng.below(static_cast<std::uint32_t>(V))] = rng.below(2) == 0 ? std::numeric_limits<float>::quiet_NaN() : -0.5f;
  }
  fill_logits(c, rng);
}

// The trie of k = 1-4 drafts of 1-4 tokens 0-3 (draws in index order under each node), each draft with
// its q rows (a function of the prefix) in 2 cases of 3, else without (one-hot rows, exact on a chain:
// then one draft in half of the cases; verify refuses a branching it cannot read as drawn); with or
// without replacement.
template <>
void make_case<multi_draft_verifier>(tree_case& c, draft_candidates& draft, std::int64_t V, std::uint64_t seed) {
  philox_stream rng(seed, 12);
  c = tree_case{{}, {}, {}, V};
  const bool with_q = rng.below(3) != 0;
  const int k = !with_q && rng.below(2) == 0 ? 1 : 1 + static_cast<int>(rng.below(4));  // one draft: a chain
  draft.vocab = static_cast<int>(V);
  draft.sampled_as = rng.below(2) == 0 ? draft_sampling::with_replacement : draft_sampling::without_replacement;
  for (int s = 0; s < k; ++s) {
    const int len = 1 + static_cast<int>(rng.below(4));
    std::vector<draft_token> seq;
    std::vector<float> q;
    std::vector<std::int32_t> prefix;
    std::int32_t node = -1;
    for (int d = 0; d < len; ++d) {
      const auto row = draft_row(prefix, V);
      q.insert(q.end(), row.begin(), row.end());
      const auto t = static_cast<std::int32_t>(rng.below(4));
      seq.push_back(draft_token{t, 0.0f});
      prefix.push_back(t);
      std::int32_t found = -1;
      for (int i = 0; i < c.tree.size(); ++i)
        if (c.tree.parent(i) == node && c.tree.token(i) == t) found = i;
      node = found >= 0 ? found : static_cast<std::int32_t>(c.tree.add(t, node));
    }
    if (s == 0) {
      draft.chain = seq;
      if (with_q) draft.q = q;
    } else {
      draft.sequences.push_back(seq);
      draft.sequence_q.push_back(with_q ? q : std::vector<float>{});
    }
  }
  fill_logits(c, rng);
}

struct tally {
  int accepted = 0, refused = 0;
};

//! verify_logits against process_tree_logits on a copy and then verify, for verifier Verifier: the
//! same result or the same refusal, and the same Philox words drawn. Returns the nodes accepted and
//! the cases refused.
template <class Verifier>
tally compare(bool greedy) {
  int accepted = 0, refused = 0;
  philox_stream prng(greedy ? 1 : 2, 0);
  for (int trial = 0; trial < 300; ++trial) {
    const std::int64_t V = trial % 3 == 0 ? 7 : trial % 3 == 1 ? 300 : 2053;
    tree_case c;
    draft_candidates draft;
    make_case<Verifier>(c, draft, V, static_cast<std::uint64_t>(trial) + (greedy ? 1000 : 0));
    const sampling_params p = random_params(prng, greedy);
    const std::int64_t rows = c.tree.size() + 1;
    // the reference: every row processed, then verify
    auto processed = c.logits;
    sampling_workspace ws;
    process_tree_logits(make_view<2>(processed.data(), {rows, V}), p, c.committed, c.tree.tokens(), c.tree.parents(), ws);
    philox_stream r1(static_cast<std::uint64_t>(trial), 5), r2(static_cast<std::uint64_t>(trial), 5);
    Verifier ref_v, lazy_v;
    const outcome want = run([&](verify_result& out) {
      ref_v.verify(verify_input{c.tree, make_view<2>(static_cast<const float*>(processed.data()), {rows, V}), draft, r1},
                   out);
    });
    const outcome got = run([&](verify_result& out) {
      lazy_v.verify_logits(logits_verify_input{c.tree, make_view<2>(c.logits.data(), {rows, V}), p, c.committed, draft, r2},
                           out);
    });
    INFO("trial " << trial << " V " << V << " error " << want.error);
    REQUIRE(got == want);
    CHECK(r1.offset() == r2.offset());  // the same words drawn
    if (got.result) accepted += static_cast<int>(got.result->accepted.size());
    else ++refused;
  }
  CHECK(refused < 60);  // most cases verify
  return {accepted, refused};
}
}  // namespace

TEST_CASE("sample_and_match_verifier::verify_logits equals processing every row, then verify", "[decoder][verify]") {
  CHECK(compare<sample_and_match_verifier>(false).accepted > 150);
}

TEST_CASE("greedy_verifier::verify_logits equals processing every row, then verify", "[decoder][verify]") {
  CHECK(compare<greedy_verifier>(true).accepted > 150);
}

TEST_CASE("chain_speculative_verifier::verify_logits equals processing every row, then verify", "[decoder][verify]") {
  const tally t = compare<chain_speculative_verifier>(false);
  CHECK(t.accepted > 150);
  CHECK(t.refused > 0);  // the bad q rows: refused as verify refuses them
}

TEST_CASE("multi_draft_verifier::verify_logits equals processing every row, then verify", "[decoder][verify]") {
  const tally t = compare<multi_draft_verifier>(false);
  CHECK(t.accepted > 150);
  CHECK(t.refused > 0);  // branchings without q rows: refused as verify refuses them
}

TEST_CASE("verify_logits checks every row, as processing them all does", "[decoder][verify][validation]") {
  // root -> node 0 (token 1) -> node 1 (token 2); the root row peaks on a token no node carries, so the
  // walk reads the root row only; a NaN in the last row is still refused, naming that row
  token_tree t;
  t.add(1, -1);
  t.add(2, 0);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> l{0, 0, 0, 9, /**/ 0, 0, 0, 0, /**/ 0, nan, 0, 0};
  const std::vector<std::int32_t> committed{3};
  draft_candidates draft;
  sampling_params greedy{.temperature = 0.0f};
  const auto lv = make_view<2>(static_cast<const float*>(l.data()), {3, 4});
  verify_result out;
  out.bonus = -5;
  philox_stream rng(1, 1);
  CHECK_THROWS_WITH(greedy_verifier{}.verify_logits(logits_verify_input{t, lv, greedy, committed, draft, rng}, out),
                    Catch::Contains("process_tree_logits") && Catch::Contains("row 2"));
  sample_and_match_verifier sm;
  CHECK_THROWS_WITH(sm.verify_logits(logits_verify_input{t, lv, sampling_params{}, committed, draft, rng}, out),
                    Catch::Contains("process_tree_logits") && Catch::Contains("row 2"));
  chain_speculative_verifier chain;
  CHECK_THROWS_WITH(chain.verify_logits(logits_verify_input{t, lv, sampling_params{}, committed, draft, rng}, out),
                    Catch::Contains("process_tree_logits") && Catch::Contains("row 2"));
  multi_draft_verifier multi;
  CHECK_THROWS_WITH(multi.verify_logits(logits_verify_input{t, lv, sampling_params{}, committed, draft, rng}, out),
                    Catch::Contains("process_tree_logits") && Catch::Contains("row 2"));
  CHECK(out.bonus == -5);
  CHECK(rng.offset() == philox_stream(1, 1).offset());  // nothing drawn
  l[9] = 0.0f;  // valid now: the bonus is the root row's argmax
  greedy_verifier{}.verify_logits(logits_verify_input{t, lv, greedy, committed, draft, rng}, out);
  CHECK(out.accepted.empty());
  CHECK(out.bonus == 3);
}

TEST_CASE("process_tree_logits refuses overlapping rows before it reads them", "[decoder][verify][validation]") {
  // rows 0 and 1 are the same memory (row stride 0) and hold a NaN: the overlap is what is named
  // (process_tree_logits' order of checks, kept by its split into tree_rows_processor)
  std::vector<float> l{0.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f};
  token_tree t;
  t.add(0, -1);
  sampling_workspace ws;
  const strided_view<float, 2> rows(l.data(), {2, 3}, {0, 1});
  CHECK_THROWS_WITH(process_tree_logits(rows, sampling_params{}, {}, t.tokens(), t.parents(), ws),
                    Catch::Contains("do not overlap"));
  // greedy_verifier::verify_logits only reads its rows: the same memory twice is fine there, the NaN is not
  draft_candidates draft;
  philox_stream rng(1, 1);
  verify_result out;
  CHECK_THROWS_WITH(greedy_verifier{}.verify_logits(logits_verify_input{t, rows, sampling_params{.temperature = 0.0f}, {},
                                                                        draft, rng},
                                                    out),
                    Catch::Contains("NaN") && Catch::Contains("row 0"));
}
