// Multi-draft speculative sampling (verify/multi_draft.hpp) is lossless for trees whose children were
// drawn from the draft, with and without replacement: chi-square of the joint law of the first 3 emitted
// tokens vs the exact target law (p > stat::p_threshold). This file: without replacement.
#include <catch2/catch.hpp>

#include "specdec/verify/multi_draft.hpp"
#include "verify/lossless_harness.hpp"

namespace {
constexpr std::int64_t trials = 100000;

harness::step_fn multi_step(const harness::toy_model& p, const harness::toy_model& q, std::vector<int> branching,
                            specdec::draft_sampling mode) {
  return [&p, &q, branching, mode](const harness::seq& prefix, specdec::philox_stream& rng, specdec::token_tree& tree) {
    harness::drawn_tree(tree, q, prefix, branching, mode == specdec::draft_sampling::with_replacement, rng);
    thread_local std::vector<float> pr, qr;
    harness::fill_rows(p, prefix, tree, pr);
    harness::fill_rows(q, prefix, tree, qr);
    const int n = tree.size();
    return specdec::verify_multi_draft(tree, harness::rows_view(pr, n + 1, p.vocab), harness::rows_view(qr, n + 1, q.vocab),
                                       mode, rng);
  };
}
}  // namespace

TEST_CASE("multi-draft without replacement, branching [4, 2, 2], vocab 8: first 3 tokens") {
  const harness::toy_model p{8, 61, 1, true}, q{8, 62, 2, false};
  const auto st = harness::run(multi_step(p, q, {4, 2, 2}, specdec::draft_sampling::without_replacement), 3, trials, 9002);
  const auto r = harness::check(st, p, 3, trials);
  INFO("chi2 " << r.statistic << " dof " << r.dof << " p " << r.p_value);
  CHECK(r.p_value > stat::p_threshold);
  CHECK(r.dof > 60);
}

TEST_CASE("multi-draft without replacement, wide root (7 of 8 tokens), vocab 8: first 2 tokens") {
  // nearly exhausts the vocabulary at the root: exercises the renormalised proposals q_j deep into the
  // sibling list and the residual's bookkeeping of already-drawn tokens
  const harness::toy_model p{8, 71, 0, false}, q{8, 72, 0, true};
  const auto st = harness::run(multi_step(p, q, {7, 1}, specdec::draft_sampling::without_replacement), 2, trials, 9003);
  const auto r = harness::check(st, p, 2, trials);
  INFO("chi2 " << r.statistic << " dof " << r.dof << " p " << r.p_value);
  CHECK(r.p_value > stat::p_threshold);
}

