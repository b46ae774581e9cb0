// Chain speculative sampling (verify/speculative_sampling.hpp) is lossless: the joint law of the first
// 3 emitted tokens equals autoregressive sampling from the target (chi-square, p > stat::p_threshold),
// and its acceptance behaviour matches the closed forms.
#include <catch2/catch.hpp>

#include <cmath>

#include "specdec/verify/speculative_sampling.hpp"
#include "verify/lossless_harness.hpp"

namespace {
constexpr std::int64_t trials = 100000;

// A chain of gamma tokens drawn from q, verified against p.
harness::step_fn chain_step(const harness::toy_model& p, const harness::toy_model& q, int gamma) {
  return [&p, &q, gamma](const harness::seq& prefix, specdec::philox_stream& rng, specdec::token_tree& tree) {
    std::vector<int> branching(static_cast<std::size_t>(gamma), 1);
    harness::drawn_tree(tree, q, prefix, branching, true, rng);
    thread_local std::vector<float> pr, qr;
    harness::fill_rows(p, prefix, tree, pr);
    harness::fill_rows(q, prefix, tree, qr);
    const int n = tree.size();
    return specdec::verify_chain_speculative(tree, harness::rows_view(pr, n + 1, p.vocab),
                                             harness::rows_view(qr, n + 1, q.vocab), rng);
  };
}

// E[accepted draft tokens] for a gamma-chain: sum_k P(first k accepted), P(first k accepted) =
// sum over x_1..x_k of prod_i min(p, q)(x_i | x_<i) (each draft token is accepted w.p. min(1, p/q)).
double expected_accepted(const harness::toy_model& p, const harness::toy_model& q, harness::seq& ctx, int left) {
  if (left == 0) return 0.0;
  const auto pd = p.dist(ctx), qd = q.dist(ctx);
  double e = 0.0;
  for (int x = 0; x < p.vocab; ++x) {
    const double m = std::min(pd[x], qd[x]);
    if (m <= 0.0) continue;
    ctx.push_back(x);
    e += m * (1.0 + expected_accepted(p, q, ctx, left - 1));
    ctx.pop_back();
  }
  return e;
}
}  // namespace

TEST_CASE("chain speculative sampling: joint law of the first 3 tokens is the target's") {
  const harness::toy_model p{8, 11, 1, false}, q{8, 12, 1, false};
  const auto st = harness::run(chain_step(p, q, 3), 3, trials, 1001);
  const auto r = harness::check(st, p, 3, trials);
  INFO("chi2 " << r.statistic << " dof " << r.dof << " p " << r.p_value);
  CHECK(r.p_value > stat::p_threshold);
  CHECK(r.dof > 100);  // the 512-cell joint law is actually resolved
  // speculation helps: more than one token per step on average
  CHECK(static_cast<double>(st.emitted) / static_cast<double>(st.steps) > 1.2);
}

TEST_CASE("chain speculative sampling: acceptance matches sum_x min(p, q)") {
  const harness::toy_model p{12, 21, 2, true}, q{12, 22, 1, false};
  // gamma = 1 from the empty context: acceptance probability alpha = sum_x min(p(x), q(x))
  const auto pd = p.dist({}), qd = q.dist({});
  double alpha = 0.0;
  for (int x = 0; x < 12; ++x) alpha += std::min(pd[x], qd[x]);
  std::int64_t accepted = 0;
  std::vector<float> pr, qr;
  specdec::token_tree tree;
  const std::vector<int> one{1};
  for (std::int64_t t = 0; t < trials; ++t) {
    specdec::philox_stream rng(77, specdec::stream_id(static_cast<std::uint32_t>(t), 0));
    harness::drawn_tree(tree, q, {}, one, true, rng);
    harness::fill_rows(p, {}, tree, pr);
    harness::fill_rows(q, {}, tree, qr);
    const auto res = specdec::verify_chain_speculative(tree, harness::rows_view(pr, 2, 12), harness::rows_view(qr, 2, 12), rng);
    accepted += static_cast<std::int64_t>(res.accepted.size());
  }
  const double rate = static_cast<double>(accepted) / trials;
  const double sigma = std::sqrt(alpha * (1 - alpha) / trials);
  INFO("observed " << rate << " closed form " << alpha << " sigma " << sigma);
  CHECK(std::fabs(rate - alpha) < 5 * sigma);
  CHECK(alpha > 0.2);
  CHECK(alpha < 0.9);

  // gamma = 4: mean accepted length against its exact value by enumeration
  harness::seq ctx;
  const double e4 = expected_accepted(p, q, ctx, 4);
  const auto st = harness::run(chain_step(p, q, 4), 1, trials / 2, 4242);
  // every trial here takes exactly one step (K = 1): emitted - 1 = accepted
  const double mean = static_cast<double>(st.emitted - st.steps) / static_cast<double>(st.steps);
  INFO("mean accepted " << mean << " exact " << e4);
  CHECK(st.steps == trials / 2);
  CHECK(std::fabs(mean - e4) < 0.02);
}
