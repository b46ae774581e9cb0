// Input validation of every verifier, batch forms vs single-request forms, reproducibility per
// (seed, request, step), and the result type's helpers.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "specdec/decoder/verifiers.hpp"
#include "specdec/verify/greedy.hpp"
#include "specdec/verify/multi_draft.hpp"
#include "specdec/verify/sample_and_match.hpp"
#include "specdec/verify/speculative_sampling.hpp"
#include "verify/lossless_harness.hpp"

namespace {
auto view(std::vector<float>& r, std::int64_t rows, std::int64_t v) { return specdec::make_view<2>(r.data(), {rows, v}); }
}  // namespace

TEST_CASE("verifiers validate their inputs") {
  const int v = 4;
  const auto chain = specdec::token_tree::from_parents(std::vector<std::int32_t>{1, 2}, std::vector<std::int32_t>{-1, 0});
  const auto fork = specdec::token_tree::from_parents(std::vector<std::int32_t>{1, 1}, std::vector<std::int32_t>{-1, -1});
  std::vector<float> p(3 * v, 0.25f), q(3 * v, 0.25f), small(2 * v, 0.25f);
  specdec::philox_stream rng(1, 1);
  using Catch::Contains;
  REQUIRE_THROWS_WITH(specdec::verify_greedy(chain, view(small, 2, v)),
                      Contains("specdec::verify_greedy") && Contains("'target_logits'"));
  REQUIRE_THROWS_AS(specdec::verify_greedy(chain, view(small, 2, v)), specdec::invalid_argument);
  REQUIRE_THROWS_WITH(specdec::verify_sample_and_match(chain, view(small, 2, v), rng), Contains("'target_probs'"));
  REQUIRE_THROWS_WITH(specdec::verify_chain_speculative(chain, view(p, 3, v), view(small, 2, v), rng), Contains("'draft_probs'"));
  REQUIRE_THROWS_WITH(specdec::verify_chain_speculative(fork, view(p, 3, v), view(q, 3, v), rng),
                      Contains("'tree'") && Contains("chain"));
  // token outside the vocabulary
  const auto bad_tok = specdec::token_tree::from_parents(std::vector<std::int32_t>{1, 9}, std::vector<std::int32_t>{-1, 0});
  REQUIRE_THROWS_WITH(specdec::verify_greedy(bad_tok, view(p, 3, v)), Contains("tree.tokens[1]"));
  REQUIRE_THROWS_WITH(specdec::verify_multi_draft(bad_tok, view(p, 3, v), view(q, 3, v),
                                                  specdec::draft_sampling::with_replacement, rng),
                      Contains("tree.tokens[1]"));
  // a drafted token with q = 0 cannot have been drawn from q
  auto q0 = q;
  q0[0 * v + 1] = 0.0f;
  REQUIRE_THROWS_WITH(specdec::verify_chain_speculative(chain, view(p, 3, v), view(q0, 3, v), rng),
                      Contains("'draft_probs'") && Contains("q_i(x_i) > 0"));
  REQUIRE_THROWS_WITH(specdec::verify_multi_draft(fork, view(p, 3, v), view(q0, 3, v),
                                                  specdec::draft_sampling::with_replacement, rng),
                      Contains("'draft_probs'"));
  // without replacement: siblings must be distinct
  REQUIRE_THROWS_WITH(specdec::verify_multi_draft(fork, view(p, 3, v), view(q, 3, v),
                                                  specdec::draft_sampling::without_replacement, rng),
                      Contains("'tree'") && Contains("distinct sibling"));
  REQUIRE_NOTHROW(specdec::verify_multi_draft(fork, view(p, 3, v), view(q, 3, v),
                                              specdec::draft_sampling::with_replacement, rng));
  // vocab mismatch between target and draft
  std::vector<float> q5(3 * 5, 0.2f);
  REQUIRE_THROWS_WITH(specdec::verify_multi_draft(chain, view(p, 3, v), view(q5, 3, 5),
                                                  specdec::draft_sampling::with_replacement, rng),
                      Contains("draft_probs vocab"));
  // a non-unit inner stride is rejected
  const specdec::strided_view<const float, 2> strided(p.data(), {3, 2}, {4, 2});
  REQUIRE_THROWS_WITH(specdec::verify_greedy(chain, strided), Contains("unit stride"));
  // negative probabilities in a visited row
  auto neg = p;
  neg[1] = -1.0f;
  REQUIRE_THROWS_WITH(specdec::verify_sample_and_match(chain, view(neg, 3, v), rng), Contains("'target_probs'"));
  // batch: wrong row count and request_ids size
  const specdec::token_tree_batch batch(std::vector<specdec::token_tree>{chain, fork}, std::vector<std::int32_t>{5, 5});
  std::vector<float> rows(6 * v, 0.25f);
  REQUIRE_THROWS_WITH(specdec::verify_greedy_batch(specdec::host{}, batch, view(rows, 5, v)), Contains("'target_logits'"));
  const std::vector<std::uint32_t> ids{1};
  REQUIRE_THROWS_WITH(specdec::verify_sample_and_match_batch(specdec::host{}, batch, view(rows, 6, v), 1, 0, ids),
                      Contains("request_ids.size()"));
  REQUIRE_THROWS_WITH(specdec::verify_multi_draft_batch(specdec::host{}, batch, view(rows, 6, v), view(rows, 6, v),
                                                        specdec::draft_sampling::without_replacement, 1, 0),
                      Contains("distinct sibling"));
}

TEST_CASE("stochastic batch verifiers equal single-request calls on the (seed, request, step) streams") {
  const harness::toy_model p{10, 201, 1, false}, q{10, 202, 1, false};
  specdec::philox_stream g(4, 4);
  std::vector<specdec::token_tree> trees;
  std::vector<float> pall, qall;
  for (int r = 0; r < 6; ++r) {
    const harness::seq prefix{static_cast<std::int32_t>(r)};
    trees.push_back(harness::drawn_tree(q, prefix, {3, 2}, false, g));
    std::vector<float> pr, qr;
    harness::fill_rows(p, prefix, trees.back(), pr);
    harness::fill_rows(q, prefix, trees.back(), qr);
    pall.insert(pall.end(), pr.begin(), pr.end());
    qall.insert(qall.end(), qr.begin(), qr.end());
  }
  const specdec::token_tree_batch batch(trees, std::vector<std::int32_t>(6, 3));
  const auto rows = static_cast<std::int64_t>(pall.size() / 10);
  const std::vector<std::uint32_t> ids{10, 11, 12, 13, 14, 15};
  for (int threads : {1, 3}) {
    const auto sm = specdec::verify_sample_and_match_batch(specdec::host{threads}, batch, view(pall, rows, 10), 99, 7, ids);
    const auto md = specdec::verify_multi_draft_batch(specdec::host{threads}, batch, view(pall, rows, 10), view(qall, rows, 10),
                                                      specdec::draft_sampling::without_replacement, 99, 7, ids);
    std::int64_t off = 0;
    for (int r = 0; r < 6; ++r) {
      const int n = trees[static_cast<std::size_t>(r)].size();
      std::vector<float> pr(pall.begin() + off * 10, pall.begin() + (off + n + 1) * 10);
      std::vector<float> qr(qall.begin() + off * 10, qall.begin() + (off + n + 1) * 10);
      off += n + 1;
      specdec::philox_stream a(99, specdec::stream_id(ids[static_cast<std::size_t>(r)], 7)), b = a;
      CHECK(sm.request(r) == specdec::verify_sample_and_match(trees[static_cast<std::size_t>(r)], view(pr, n + 1, 10), a));
      CHECK(md.request(r) == specdec::verify_multi_draft(trees[static_cast<std::size_t>(r)], view(pr, n + 1, 10),
                                                         view(qr, n + 1, 10), specdec::draft_sampling::without_replacement, b));
    }
  }
}

TEST_CASE("verify_result helpers") {
  specdec::verify_result a{{0, 2}, 7}, b{{}, 3};
  CHECK(a.num_emitted() == 3);
  const std::vector<std::int32_t> toks{5, 6, 8};
  CHECK(a.emitted_tokens(toks) == std::vector<std::int32_t>{5, 8, 7});
  REQUIRE_THROWS_AS(specdec::verify_result({{4}, 1}).emitted_tokens(toks), specdec::invalid_argument);
  const auto batch = specdec::verify_batch_result::from(std::vector<specdec::verify_result>{a, b});
  CHECK(batch.accepted_indptr == std::vector<std::int32_t>{0, 2, 2});
  CHECK(batch.request(0) == a);
  CHECK(batch.request(1) == b);
  REQUIRE_THROWS_WITH(batch.accepted_nodes(2), Catch::Contains("'r'"));
  // Session 56: a hand-built result whose offsets disagree with its arrays was read past accepted
  // (or past accepted_indptr) by accepted_nodes and request.
  specdec::verify_batch_result bad;
  bad.accepted_indptr = {0, 5};
  bad.accepted = {1};
  bad.bonus = {7};
  REQUIRE_THROWS_WITH(bad.request(0), Catch::Contains("'accepted_indptr'") && Catch::Contains("accepted.size() = 1"));
  bad.accepted_indptr = {0};
  REQUIRE_THROWS_WITH(bad.accepted_nodes(0), Catch::Contains("'accepted_indptr.size()'"));
  bad.accepted_indptr = {1, 0};
  REQUIRE_THROWS_WITH(bad.accepted_nodes(0), Catch::Contains("'accepted_indptr'"));
  bad.accepted_indptr = {0, 1};
  CHECK(bad.request(0) == specdec::verify_result{{1}, 7});
}

namespace {
const float nan_f = std::numeric_limits<float>::quiet_NaN(), inf_f = std::numeric_limits<float>::infinity();
const float den = std::numeric_limits<float>::denorm_min();
// The kinds of bad probability the non-finite policy rejects.
const float bad_probs[] = {nan_f, inf_f, -inf_f, -0.25f};
}  // namespace

TEST_CASE("multi-draft without replacement: +inf in a draft row is an error, not bonus -1 (issue #20 item 8)") {
  // The filer's case: four root children drawn without replacement; q(0) = +inf made the residual NaN
  // (inf x 0) and the inverse CDF found no positive weight, returning token -1.
  const int v = 5;
  const auto tree = specdec::token_tree::from_parents(std::vector<std::int32_t>{2, 1, 3, 0},
                                                      std::vector<std::int32_t>{-1, -1, -1, -1});
  std::vector<float> p(5 * v, 0.2f), q(5 * v, 0.2f);
  const float p0[] = {0.0f, 0.782508433f, 0.11807251f, 0.323281467f, 0.920479357f};
  const float q0[] = {inf_f, 0.168055192f, 0.945263207f, 0.372467756f, 0.686796784f};
  std::copy(std::begin(p0), std::end(p0), p.begin());
  std::copy(std::begin(q0), std::end(q0), q.begin());
  specdec::philox_stream rng(5213, 1);
  REQUIRE_THROWS_WITH(specdec::verify_multi_draft(tree, view(p, 5, v), view(q, 5, v),
                                                  specdec::draft_sampling::without_replacement, rng),
                      Catch::Contains("'draft_probs'") && Catch::Contains("row 0, token 0") && Catch::Contains("inf"));
}

TEST_CASE("chain speculative sampling follows the non-finite policy") {
  using Catch::Contains;
  const int v = 4;
  const auto chain = specdec::token_tree::from_parents(std::vector<std::int32_t>{1, 2}, std::vector<std::int32_t>{-1, 0});
  specdec::philox_stream rng(2, 2);
  auto run = [&](const std::vector<float>& p, const std::vector<float>& q) {
    return specdec::verify_chain_speculative(chain, specdec::make_view<2>(p.data(), {3, v}),
                                             specdec::make_view<2>(q.data(), {3, v}), rng);
  };
  const std::vector<float> uni(3 * v, 0.25f);
  for (const float bad : bad_probs) {
    INFO("bad value " << bad);
    auto p = uni, q = uni;
    p[1 * v + 2] = bad;  // p_1(x_1): checked up front, whatever the draws
    REQUIRE_THROWS_WITH(run(p, q), Contains("'target_probs'") && Contains("row 1, token 2"));
    p = uni;
    q[0 * v + 1] = bad;  // q_0(x_0)
    REQUIRE_THROWS_WITH(run(p, q), Contains("'draft_probs'") && Contains("row 0, token 1"));
    // an entry the residual pass reads: node 0 is rejected for sure (p_0(x_0) = 0)
    q = uni;
    p[0 * v + 1] = 0.0f;
    p[0 * v + 3] = bad;
    REQUIRE_THROWS_WITH(run(p, q), Contains("'target_probs'") && Contains("row 0, token 3"));
    p = uni;
    p[0 * v + 1] = 0.0f;
    q[0 * v + 0] = bad;
    REQUIRE_THROWS_WITH(run(p, q), Contains("'draft_probs'") && Contains("row 0, token 0"));
  }
  // the row to draw from has no admissible token
  auto p = uni;
  std::fill(p.begin(), p.begin() + v, 0.0f);
  REQUIRE_THROWS_WITH(run(p, uni), Contains("'target_probs'") && Contains("row 0") && Contains("positive sum"));
  // entries never read cannot influence the result and are not checked: draft row 2 is never read
  auto q = uni;
  q[2 * v + 0] = nan_f;
  REQUIRE_NOTHROW(run(uni, q));
  // denormal-only target rows: ordinary numbers; the result is a token of positive probability
  p.assign(3 * v, 0.0f);
  for (int r = 0; r < 3; ++r) p[r * v + 3] = den, p[r * v + 2] = 2 * den;
  for (int t = 0; t < 50; ++t) {
    const auto res = run(p, uni);
    CHECK(res.accepted.size() <= 2);
    CHECK((res.bonus == 2 || res.bonus == 3));
  }
}

TEST_CASE("sample_and_match follows the non-finite policy, naming the request in a batch") {
  using Catch::Contains;
  const int v = 4;
  const auto chain = specdec::token_tree::from_parents(std::vector<std::int32_t>{1, 2}, std::vector<std::int32_t>{-1, 0});
  specdec::philox_stream rng(2, 2);
  const std::vector<float> uni(3 * v, 0.25f);
  for (const float bad : bad_probs) {
    auto p = uni;
    p[0 * v + 3] = bad;  // the root row is always drawn from
    REQUIRE_THROWS_WITH(specdec::verify_sample_and_match(chain, view(p, 3, v), rng),
                        Contains("specdec::verify_sample_and_match") && Contains("'target_probs'") &&
                            Contains("row 0, token 3"));
    // batch: request 1's root row is row 3 of the tensor
    std::vector<float> all(6 * v, 0.25f);
    all[3 * v + 3] = bad;
    const specdec::token_tree_batch batch(std::vector<specdec::token_tree>{chain, chain}, std::vector<std::int32_t>{5, 5});
    REQUIRE_THROWS_WITH(specdec::verify_sample_and_match_batch(specdec::host{}, batch, view(all, 6, v), 1, 0),
                        Contains("row 3 = request 1's row 0, token 3"));
  }
  auto p = uni;
  std::fill(p.begin(), p.begin() + v, 0.0f);
  REQUIRE_THROWS_WITH(specdec::verify_sample_and_match(chain, view(p, 3, v), rng), Contains("row 0") && Contains("positive sum"));
  // denormal-only rows: drawn exactly like any other (only tokens of positive probability come out)
  p.assign(3 * v, 0.0f);
  for (int r = 0; r < 3; ++r) p[r * v + 1] = den, p[r * v + 2] = den;
  for (int t = 0; t < 50; ++t) {
    const auto res = specdec::verify_sample_and_match(chain, view(p, 3, v), rng);
    CHECK((res.bonus == 1 || res.bonus == 2));
  }
}

TEST_CASE("multi-draft verification follows the non-finite policy") {
  using Catch::Contains;
  const int v = 4;
  // root children 1 and 2 (distinct: valid in both modes), node 0 has child 3
  const auto tree = specdec::token_tree::from_parents(std::vector<std::int32_t>{1, 2, 3}, std::vector<std::int32_t>{-1, -1, 0});
  specdec::philox_stream rng(4, 4);
  const std::vector<float> uni(4 * v, 0.25f);
  for (auto mode : {specdec::draft_sampling::with_replacement, specdec::draft_sampling::without_replacement}) {
    auto run = [&](const std::vector<float>& p, const std::vector<float>& q) {
      return specdec::verify_multi_draft(tree, view(const_cast<std::vector<float>&>(p), 4, v),
                                         view(const_cast<std::vector<float>&>(q), 4, v), mode, rng);
    };
    for (const float bad : bad_probs) {
      INFO("mode " << static_cast<int>(mode) << " bad value " << bad);
      auto p = uni, q = uni;
      p[1 * v + 3] = bad;  // p at node 2's token in node 0's row: checked up front
      REQUIRE_THROWS_WITH(run(p, q), Contains("'target_probs'") && Contains("row 1, token 3"));
      p = uni;
      q[0 * v + 2] = bad;
      REQUIRE_THROWS_WITH(run(p, q), Contains("'draft_probs'") && Contains("row 0, token 2"));
      // entries the first residual pass reads: both root children are rejected for sure (p = 0 there)
      q = uni;
      p[0 * v + 1] = p[0 * v + 2] = 0.0f;
      p[0 * v + 0] = bad;
      REQUIRE_THROWS_WITH(run(p, q), Contains("'target_probs'") && Contains("row 0, token 0"));
      p[0 * v + 0] = 0.5f;
      q[0 * v + 3] = bad;
      REQUIRE_THROWS_WITH(run(p, q), Contains("'draft_probs'") && Contains("row 0, token 3"));
    }
    // a root row without an admissible token
    auto p = uni;
    std::fill(p.begin(), p.begin() + v, 0.0f);
    REQUIRE_THROWS_WITH(run(p, uni), Contains("'target_probs'") && Contains("row 0") && Contains("positive sum"));
    // denormal-only target rows: every result is a token of positive target probability
    p.assign(4 * v, 0.0f);
    for (int r = 0; r < 4; ++r) p[r * v + 0] = den, p[r * v + 3] = 3 * den;
    for (int t = 0; t < 100; ++t) {
      const auto res = run(p, uni);
      CHECK((res.bonus == 0 || res.bonus == 3));
    }
    // batch: the request is named
    std::vector<float> pa(8 * v, 0.25f), qa(8 * v, 0.25f);
    qa[4 * v + 1] = nan_f;
    const specdec::token_tree_batch batch(std::vector<specdec::token_tree>{tree, tree}, std::vector<std::int32_t>{5, 5});
    REQUIRE_THROWS_WITH(specdec::verify_multi_draft_batch(specdec::host{}, batch, view(pa, 8, v), view(qa, 8, v), mode, 1, 0),
                        Contains("'draft_probs'") && Contains("row 4 = request 1's row 0, token 1"));
  }
}

TEST_CASE("decoder verifier policies follow the non-finite policy on target logits") {
  using Catch::Contains;
  const int v = 4;
  const auto chain = specdec::token_tree::from_parents(std::vector<std::int32_t>{1, 2}, std::vector<std::int32_t>{-1, 0});
  specdec::draft_candidates draft;
  draft.chain = {{1, 0.0f}, {2, 0.0f}};
  specdec::philox_stream rng(6, 6);
  specdec::verify_result out;
  auto verify_all = [&](const std::vector<float>& logits) {
    const specdec::verify_input in{chain, specdec::strided_view<const float, 2>(specdec::make_view<2>(logits.data(), {3, v})),
                                   draft, rng};
    specdec::sample_and_match_verifier a;
    specdec::chain_speculative_verifier b;
    specdec::multi_draft_verifier c;
    specdec::greedy_verifier g;
    std::vector<std::string> errors;
    for (int k = 0; k < 4; ++k) {
      try {
        if (k == 0) a.verify(in, out);
        if (k == 1) b.verify(in, out);
        if (k == 2) c.verify(in, out);
        if (k == 3) g.verify(in, out);
        errors.emplace_back();
      } catch (const specdec::invalid_argument& e) {
        errors.emplace_back(e.what());
      }
    }
    return errors;
  };
  std::vector<float> logits(3 * v, 0.0f);
  for (const float bad : {nan_f, inf_f}) {
    auto l = logits;
    l[0 * v + 2] = bad;  // the root row: every verifier reads it
    const auto errors = verify_all(l);
    for (std::size_t k = 0; k < 3; ++k) {
      INFO("verifier " << k << ": " << errors[k]);
      CHECK_THAT(errors[k], Contains("'logits'") && Contains("row 0, token 2"));
    }
    CHECK_THAT(errors[3], Contains("token 2"));  // greedy verification rejects it through greedy_token
  }
  auto l = logits;
  l[1] = 1.0f;  // greedy verification accepts node 0 and reads row 1
  std::fill(l.begin() + v, l.begin() + 2 * v, -inf_f);
  for (const auto& e : verify_all(l)) CHECK_THAT(e, Contains("all -inf"));
  // -inf logits are legal, denormal logits ordinary numbers
  l = logits;
  l[0] = -inf_f;
  l[1] = den;
  for (const auto& e : verify_all(l)) CHECK(e.empty());
}

TEST_CASE("sample_and_match walks duplicate siblings as one node (their subtrees united)") {
  // Root children 0:'5' and 1:'5' (duplicates); 2:'7' under 0, 3:'8' under 1, 4:'9' under 3.
  // One-hot target rows make every draw certain: 5 at the root, then 8, then 9, then 2. Following
  // only the first matching sibling (node 0) stopped after one token; the united walk accepts the
  // path 1 -> 3 -> 4 of the given tree. Rows: row 0 = root, row i + 1 = after node i; the class
  // {0, 1} draws from row 1 (its lowest node), so row 2 must not be read.
  const auto tree = specdec::token_tree::from_parents(std::vector<std::int32_t>{5, 5, 7, 8, 9},
                                                      std::vector<std::int32_t>{-1, -1, 0, 1, 3});
  const int v = 10;
  std::vector<float> rows(6 * v, 0.0f);
  const int want[6] = {5, 8, -1, 0, 9, 2};  // row 2 (after node 1) left all-zero: unread
  for (int r = 0; r < 6; ++r)
    if (want[r] >= 0) rows[static_cast<std::size_t>(r * v + want[r])] = 1.0f;
  specdec::philox_stream rng(1, 2);
  const auto res = specdec::verify_sample_and_match(tree, specdec::make_view<2>(rows.data(), {6, v}), rng);
  CHECK(res.accepted == std::vector<std::int32_t>{1, 3, 4});
  CHECK(res.bonus == 2);
}

TEST_CASE("stochastic verifiers check every row they decide on in full, not just the entries a decision reads") {
  // p(x) = q(x) = 1 makes the acceptance certain whatever else the rows hold; a NaN elsewhere in the
  // row means it is not a distribution, and must be reported even though the decision never reads it.
  const auto chain = specdec::token_tree::from_parents(std::vector<std::int32_t>{0}, std::vector<std::int32_t>{-1});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> p{1.0f, 0.0f, nan, 0.5f, 0.5f, 0.0f}, q{1.0f, 0.0f, 0.0f, 1.0f, 0.0f, 0.0f};
  specdec::philox_stream rng(3, 4);
  REQUIRE_THROWS_WITH(specdec::verify_chain_speculative(chain, specdec::make_view<2>(p.data(), {2, 3}),
                                                        specdec::make_view<2>(q.data(), {2, 3}), rng),
                      Catch::Contains("target_probs") && Catch::Contains("row 0") && Catch::Contains("token 2"));
  REQUIRE_THROWS_WITH(specdec::verify_multi_draft(chain, specdec::make_view<2>(p.data(), {2, 3}),
                                                  specdec::make_view<2>(q.data(), {2, 3}),
                                                  specdec::draft_sampling::with_replacement, rng),
                      Catch::Contains("target_probs") && Catch::Contains("row 0") && Catch::Contains("token 2"));
  p[2] = 0.0f;
  q[2] = -1.0f;  // a negative draft probability at a token no decision reads
  REQUIRE_THROWS_WITH(specdec::verify_chain_speculative(chain, specdec::make_view<2>(p.data(), {2, 3}),
                                                        specdec::make_view<2>(q.data(), {2, 3}), rng),
                      Catch::Contains("draft_probs") && Catch::Contains("token 2"));
  q[2] = 0.0f;
  const auto ok = specdec::verify_chain_speculative(chain, specdec::make_view<2>(p.data(), {2, 3}),
                                                    specdec::make_view<2>(q.data(), {2, 3}), rng);
  CHECK(ok.accepted == std::vector<std::int32_t>{0});
}

TEST_CASE("token_tree verifiers refuse a vocabulary past INT32_MAX and take a batch of 0 requests with null rows") {
  // A row of 2^31 + 8 entries (over one float: the check comes before any read) would hand back a token
  // id cut to int32, negative for an argmax at 2^31; every verifier's rows come through one check.
  float one = 1.0f;
  const std::int64_t big = std::int64_t{1} << 31;
  const auto huge = specdec::make_view<2>(static_cast<const float*>(&one), {1, big + 8});
  specdec::philox_stream rng(1, 2);
  const specdec::token_tree empty;
  REQUIRE_THROWS_WITH(specdec::verify_greedy(empty, huge),
                      Catch::Contains("target_logits") && Catch::Contains("INT32_MAX"));
  REQUIRE_THROWS_WITH(specdec::verify_sample_and_match(empty, huge, rng),
                      Catch::Contains("target_probs") && Catch::Contains("INT32_MAX"));
  REQUIRE_THROWS_WITH(specdec::verify_chain_speculative(empty, huge, huge, rng), Catch::Contains("INT32_MAX"));
  REQUIRE_THROWS_WITH(specdec::verify_multi_draft(empty, huge, huge, specdec::draft_sampling::with_replacement, rng),
                      Catch::Contains("INT32_MAX"));
  // 0 requests: an empty vector's data() is null, and no row is read (the array forms take it too)
  const std::vector<float> none;
  const auto rows = specdec::make_view<2>(none.data(), {0, 5});
  const specdec::token_tree_batch batch;
  CHECK(specdec::verify_greedy_batch(specdec::host{}, batch, rows).num_requests() == 0);
  CHECK(specdec::verify_sample_and_match_batch(specdec::host{}, batch, rows, 1, 0).num_requests() == 0);
  CHECK(specdec::verify_multi_draft_batch(specdec::host{}, batch, rows, rows, specdec::draft_sampling::with_replacement, 1, 0)
            .num_requests() == 0);
  // a null pointer with rows to read is still refused
  REQUIRE_THROWS_WITH(specdec::verify_greedy(empty, specdec::make_view<2>(none.data(), {1, 5})),
                      Catch::Contains("non-null data"));
}
