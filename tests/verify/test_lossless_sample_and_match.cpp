// sample_and_match (verify/sample_and_match.hpp) is lossless on ANY tree: random shapes with random
// (duplicate, zero-probability) tokens and deterministic top-k trees. Chi-square of the joint law of the
// first 2-3 emitted tokens vs the exact target law, p > stat::p_threshold.
#include <catch2/catch.hpp>

#include "specdec/verify/sample_and_match.hpp"
#include "verify/lossless_harness.hpp"

namespace {
constexpr std::int64_t trials = 100000;
}

TEST_CASE("sample_and_match on random trees: first 2 tokens, vocab 12") {
  const harness::toy_model p{12, 31, 2, false};
  const auto step = [&](const harness::seq& prefix, specdec::philox_stream& rng, specdec::token_tree& tree) {
    harness::random_tree(tree, 1 + static_cast<int>(rng.below(12)), p.vocab, rng);
    thread_local std::vector<float> pr;
    harness::fill_rows(p, prefix, tree, pr);
    return specdec::verify_sample_and_match(tree, harness::rows_view(pr, tree.size() + 1, p.vocab), rng);
  };
  const auto st = harness::run(step, 2, trials, 555);
  const auto r = harness::check(st, p, 2, trials);
  INFO("chi2 " << r.statistic << " dof " << r.dof << " p " << r.p_value);
  CHECK(r.p_value > stat::p_threshold);
  CHECK(r.dof > 50);
}

TEST_CASE("sample_and_match on a deterministic top-k tree [3, 2, 2]: first 3 tokens, vocab 8") {
  const harness::toy_model p{8, 41, 1, true}, q{8, 42, 0, false};
  const auto step = [&](const harness::seq& prefix, specdec::philox_stream& rng, specdec::token_tree& tree) {
    harness::topk_tree(tree, q, prefix, {3, 2, 2});
    thread_local std::vector<float> pr;
    harness::fill_rows(p, prefix, tree, pr);
    return specdec::verify_sample_and_match(tree, harness::rows_view(pr, tree.size() + 1, p.vocab), rng);
  };
  const auto st = harness::run(step, 3, trials, 556);
  const auto r = harness::check(st, p, 3, trials);
  INFO("chi2 " << r.statistic << " dof " << r.dof << " p " << r.p_value);
  CHECK(r.p_value > stat::p_threshold);
  CHECK(r.dof >= 80);
  INFO("tokens per step " << static_cast<double>(st.emitted) / static_cast<double>(st.steps));
  CHECK(static_cast<double>(st.emitted) / static_cast<double>(st.steps) > 1.1);
}
