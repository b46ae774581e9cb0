// TokenSwift's Algorithm 1 (lines 11-13) samples target tokens independently for every candidate group
// (root-to-leaf path) and keeps the longest exact match. The caution in shared/papers/README.md: that
// biases the output. Here the same trees and target are verified both ways; the joint law of the first
// 2 tokens passes chi-square for specdec's sample_and_match and fails it by a huge margin for the
// Algorithm-1 scheme.
#include <catch2/catch.hpp>

#include "specdec/verify/sample_and_match.hpp"
#include "verify/lossless_harness.hpp"

namespace {
constexpr std::int64_t trials = 100000;

// Algorithm 1, lines 12-13, on a tree: each leaf's root path d is a group; y^i_j ~ p(. | d_<j) drawn
// independently per group; a group's accepted length a = matching prefix of d and y^i; the longest wins
// (ties: uniformly at random); it emits d_<a followed by y^i_a.
specdec::verify_result tokenswift_alg1(const specdec::token_tree& tree, const std::vector<float>& rows, int v,
                                       specdec::philox_stream& rng) {
  const auto leaves = tree.leaves();
  int best_len = -1, ties = 0;
  specdec::verify_result best;
  for (auto leaf : leaves) {
    const auto path = tree.path(leaf);
    specdec::verify_result r;
    std::int32_t parent = -1;
    for (std::size_t j = 0;; ++j) {
      const std::int32_t y = harness::draw(rows.data() + static_cast<std::size_t>((parent + 1) * v), v, rng);
      if (j < path.size() && tree.token(path[j]) == y) {
        r.accepted.push_back(path[j]);
        parent = path[j];
        continue;
      }
      r.bonus = y;
      break;
    }
    const int len = static_cast<int>(r.accepted.size());
    if (len > best_len) {
      best_len = len;
      best = r;
      ties = 1;
    } else if (len == best_len && rng.below(static_cast<std::uint32_t>(++ties)) == 0) {
      best = r;  // reservoir choice: uniform among the longest
    }
  }
  return best;
}
}  // namespace

TEST_CASE("TokenSwift Algorithm 1 is biased; sample_and_match on the same trees is not") {
  const harness::toy_model p{10, 91, 1, false}, q{10, 92, 0, false};
  const std::vector<int> shape{3, 2};  // 6 candidate groups of length 2
  const auto ours = [&](const harness::seq& prefix, specdec::philox_stream& rng, specdec::token_tree& tree) {
    harness::topk_tree(tree, q, prefix, shape);
    thread_local std::vector<float> pr;
    harness::fill_rows(p, prefix, tree, pr);
    return specdec::verify_sample_and_match(tree, harness::rows_view(pr, tree.size() + 1, p.vocab), rng);
  };
  const auto alg1 = [&](const harness::seq& prefix, specdec::philox_stream& rng, specdec::token_tree& tree) {
    harness::topk_tree(tree, q, prefix, shape);
    thread_local std::vector<float> pr;
    harness::fill_rows(p, prefix, tree, pr);
    return tokenswift_alg1(tree, pr, p.vocab, rng);
  };
  const auto exact = harness::exact_joint(p, 2);
  const auto r_ours = stat::chi_square(harness::run(ours, 2, trials, 31337).counts, exact, trials);
  const auto st_alg1 = harness::run(alg1, 2, trials, 31337);
  const auto r_alg1 = stat::chi_square(st_alg1.counts, exact, trials);
  INFO("sample_and_match: chi2 " << r_ours.statistic << " dof " << r_ours.dof << " p " << r_ours.p_value);
  INFO("Algorithm 1:      chi2 " << r_alg1.statistic << " dof " << r_alg1.dof << " p " << r_alg1.p_value);
  CHECK(r_ours.p_value > stat::p_threshold);
  CHECK(r_alg1.p_value < 1e-30);
  CHECK(r_alg1.statistic > 20 * r_ours.statistic);
  // the direction of the bias: the first token lands on the tree's root children more often than p says
  const auto root = harness::topk_tree(q, {}, shape).children(-1);
  const auto p0 = p.dist({});
  double covered = 0.0;
  std::int64_t hits = 0;
  for (auto c : root) covered += p0[static_cast<std::size_t>(harness::topk_tree(q, {}, shape).token(c))];
  for (const auto& [s, n] : st_alg1.counts)
    for (auto c : root)
      if (s[0] == harness::topk_tree(q, {}, shape).token(c)) hits += n;
  INFO("P(first token in root children): exact " << covered << ", Algorithm 1 " << double(hits) / trials);
  CHECK(static_cast<double>(hits) / trials > covered + 0.02);
}
