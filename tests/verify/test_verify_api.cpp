// Input validation of every verifier, batch forms vs single-request forms, reproducibility per
// (seed, request, step), and the result type's helpers.
#include <catch2/catch.hpp>

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
  REQUIRE_THROWS_WITH(specdec::verify_sample_and_match(chain, view(neg, 3, v), rng), Contains("'probs'"));
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
}
