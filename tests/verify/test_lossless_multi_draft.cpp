// Multi-draft speculative sampling (verify/multi_draft.hpp) is lossless for trees whose children were
// drawn from the draft, with and without replacement: chi-square of the joint law of the first 3 emitted
// tokens vs the exact target law (p > stat::p_threshold). Also: it reduces to chain speculative sampling
// on a chain (same stream, same result).
#include <catch2/catch.hpp>

#include "specdec/verify/multi_draft.hpp"
#include "specdec/verify/speculative_sampling.hpp"
#include "verify/lossless_harness.hpp"

namespace {
constexpr std::int64_t trials = 100000;

harness::step_fn multi_step(const harness::toy_model& p, const harness::toy_model& q, std::vector<int> branching,
                            specdec::draft_sampling mode) {
  return [&p, &q, branching, mode](const harness::seq& prefix, specdec::philox_stream& rng, specdec::token_tree& tree) {
    // empty branching: a random shape per step (1-3 children at depth 0 and 1, 0-2 at depth 2)
    std::vector<int> shape = branching;
    if (shape.empty())
      shape = {1 + static_cast<int>(rng.below(3)), 1 + static_cast<int>(rng.below(3)), static_cast<int>(rng.below(3))};
    harness::drawn_tree(tree, q, prefix, shape, mode == specdec::draft_sampling::with_replacement, rng);
    thread_local std::vector<float> pr, qr;
    harness::fill_rows(p, prefix, tree, pr);
    harness::fill_rows(q, prefix, tree, qr);
    const int n = tree.size();
    return specdec::verify_multi_draft(tree, harness::rows_view(pr, n + 1, p.vocab), harness::rows_view(qr, n + 1, q.vocab),
                                       mode, rng);
  };
}
}  // namespace

TEST_CASE("multi-draft with replacement, random shapes up to [3, 3, 2], vocab 8: first 3 tokens") {
  const harness::toy_model p{8, 51, 1, false}, q{8, 52, 1, true};
  const auto st = harness::run(multi_step(p, q, {}, specdec::draft_sampling::with_replacement), 3, trials, 9001);
  const auto r = harness::check(st, p, 3, trials);
  INFO("chi2 " << r.statistic << " dof " << r.dof << " p " << r.p_value);
  CHECK(r.p_value > stat::p_threshold);
  CHECK(r.dof > 100);
  CHECK(static_cast<double>(st.emitted) / static_cast<double>(st.steps) > 1.3);
}

TEST_CASE("multi-draft on a chain is chain speculative sampling") {
  const harness::toy_model p{10, 81, 1, false}, q{10, 82, 1, false};
  int differ = 0;
  for (std::uint32_t t = 0; t < 2000; ++t) {
    specdec::philox_stream g(5, t);
    const auto tree = harness::drawn_tree(q, {}, {1, 1, 1, 1}, true, g);
    thread_local std::vector<float> pr, qr;
    harness::fill_rows(p, {}, tree, pr);
    harness::fill_rows(q, {}, tree, qr);
    specdec::philox_stream a(6, t), b(6, t);
    const auto ra = specdec::verify_multi_draft(tree, harness::rows_view(pr, 5, 10), harness::rows_view(qr, 5, 10),
                                                specdec::draft_sampling::with_replacement, a);
    const auto rb = specdec::verify_chain_speculative(tree, harness::rows_view(pr, 5, 10), harness::rows_view(qr, 5, 10), b);
    differ += !(ra == rb);
  }
  CHECK(differ == 0);
}
