// The verifiers' verify_logits (decoder/concepts.hpp: rows processed when the walk reads them):
// greedy_verifier and sample_and_match_verifier give what process_tree_logits on every row and then
// verify give, bit for bit, on random trees with every processor and both penalties (the per-thread
// scratch reused across vocabularies and parameters); every row is still checked (a NaN in a row no walk reads is refused with
// process_tree_logits' message, and nothing is drawn).
#include <catch2/catch.hpp>

#include <cmath>
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

//! A tree of up to 40 nodes over tokens 0-3, logits in [-2, 2) with a peak of 3-5 on a random child's
//! token in 3 rows of 4 (so walks go deep), a committed context of up to 30 tokens 0-5.
tree_case random_case(std::int64_t V, std::uint64_t seed) {
  philox_stream rng(seed, 9);
  tree_case c{{}, {}, {}, V};
  const int n = static_cast<int>(rng.below(41));
  const auto par = specdec_test::random_parents(n, static_cast<int>(rng.below(4)), rng);
  for (int i = 0; i < n; ++i) c.tree.add(static_cast<std::int32_t>(rng.below(4)), par[static_cast<std::size_t>(i)]);
  for (int s = 0; s <= n; ++s) {
    std::vector<float> row(static_cast<std::size_t>(V));
    for (auto& x : row) x = 4.0f * rng.uniform() - 2.0f;
    std::vector<std::int32_t> kids;
    for (int i = 0; i < n; ++i)
      if (par[static_cast<std::size_t>(i)] == s - 1) kids.push_back(c.tree.token(i));
    if (!kids.empty() && rng.below(4) != 0)
      row[static_cast<std::size_t>(kids[rng.below(static_cast<std::uint32_t>(kids.size()))])] = 3.0f + 2.0f * rng.uniform();
    c.logits.insert(c.logits.end(), row.begin(), row.end());
  }
  for (std::uint32_t j = 0, m = rng.below(31); j < m; ++j) c.committed.push_back(static_cast<std::int32_t>(rng.below(6)));
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

//! verify_logits against process_tree_logits on a copy and then verify, for verifier Verifier.
template <class Verifier>
int compare(bool greedy) {
  int accepted = 0;
  philox_stream prng(greedy ? 1 : 2, 0);
  for (int trial = 0; trial < 300; ++trial) {
    const std::int64_t V = trial % 3 == 0 ? 7 : trial % 3 == 1 ? 300 : 2053;
    const auto c = random_case(V, static_cast<std::uint64_t>(trial) + (greedy ? 1000 : 0));
    const sampling_params p = random_params(prng, greedy);
    const std::int64_t rows = c.tree.size() + 1;
    draft_candidates draft;
    // the reference: every row processed, then verify
    auto processed = c.logits;
    sampling_workspace ws;
    process_tree_logits(make_view<2>(processed.data(), {rows, V}), p, c.committed, c.tree.tokens(), c.tree.parents(), ws);
    philox_stream r1(static_cast<std::uint64_t>(trial), 5), r2(static_cast<std::uint64_t>(trial), 5);
    Verifier ref_v, lazy_v;
    verify_result want, got;
    ref_v.verify(verify_input{c.tree, make_view<2>(static_cast<const float*>(processed.data()), {rows, V}), draft, r1}, want);
    lazy_v.verify_logits(logits_verify_input{c.tree, make_view<2>(c.logits.data(), {rows, V}), p, c.committed, draft, r2}, got);
    INFO("trial " << trial << " V " << V);
    REQUIRE(got == want);
    CHECK(r1.offset() == r2.offset());  // the same words drawn
    accepted += static_cast<int>(got.accepted.size());
  }
  return accepted;
}

}  // namespace

TEST_CASE("sample_and_match_verifier::verify_logits equals processing every row, then verify", "[decoder][verify]") {
  CHECK(compare<sample_and_match_verifier>(false) > 150);
}

TEST_CASE("greedy_verifier::verify_logits equals processing every row, then verify", "[decoder][verify]") {
  CHECK(compare<greedy_verifier>(true) > 150);
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
