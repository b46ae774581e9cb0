#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "specdec/core/philox.hpp"
#include "specdec/tree/cape.hpp"

using specdec::cape_expand;
using specdec::cape_proposal;
using specdec::cape_schedule;

namespace {

// Algorithm 2 of GLIDE Appendix A, transcribed step by step (0-based, as the pseudo code), with the
// chain block made causal as §4.2 requires. Returns VAM as a dense 0/1 matrix.
std::vector<std::vector<int>> algorithm2_vam(int gamma, const std::vector<std::vector<std::int32_t>>& X,
                                             std::vector<std::int32_t>& input, std::vector<std::int32_t>& input_pi,
                                             const std::vector<std::int32_t>& T) {
  int mask_length = gamma;
  input = T;
  input_pi.clear();
  for (int i = 0; i < gamma; ++i) input_pi.push_back(i);
  for (int i = 0; i < gamma; ++i) {
    for (auto t : X[static_cast<std::size_t>(i)]) {
      input.push_back(t);
      input_pi.push_back(i);
    }
    mask_length += static_cast<int>(X[static_cast<std::size_t>(i)].size());
  }
  const auto L = static_cast<std::size_t>(mask_length);
  std::vector<std::vector<int>> CAM(L, std::vector<int>(L, 0)), VAM(L, std::vector<int>(L, 0));
  for (std::size_t i = 0; i < L; ++i)
    for (std::size_t j = 0; j <= i; ++j) CAM[i][j] = 1;
  for (std::size_t i = 0; i < L; ++i) VAM[i][i] = 1;
  for (std::size_t i = 0; i < static_cast<std::size_t>(gamma); ++i)
    for (std::size_t j = 0; j < static_cast<std::size_t>(gamma); ++j) VAM[i][j] = CAM[i][j];
  for (std::size_t i = static_cast<std::size_t>(gamma); i < L; ++i)
    for (std::size_t j = 0; j < static_cast<std::size_t>(gamma); ++j)
      if (input_pi[i] > static_cast<std::int32_t>(j)) VAM[i][j] = CAM[i][j];
  return VAM;
}

// gamma peaked probability rows of `vocab` entries with random sharpness, so every confidence bin
// is hit; `ties`: logits on 4 levels, so equal probabilities (tie-breaking) occur too.
std::vector<float> random_rows(specdec::philox_stream& rng, int vocab, int gamma, bool ties) {
  std::vector<float> probs(static_cast<std::size_t>(vocab * gamma));
  std::vector<double> e(static_cast<std::size_t>(vocab));
  for (int i = 0; i < gamma; ++i) {
    const double sharp = 0.1 + 8.0 * rng.uniform_double();
    double z = 0;
    for (auto& x : e) {
      const double u = rng.uniform_double();
      z += (x = std::exp(sharp * (ties ? std::floor(4 * u) : u)));
    }
    for (int v = 0; v < vocab; ++v) probs[static_cast<std::size_t>(i * vocab + v)] = static_cast<float>(e[static_cast<std::size_t>(v)] / z);
  }
  return probs;
}

// §4.2's formula with the paper's 1-based indices.
bool mask_cape_formula(const cape_proposal& p, int i1, int j1) {
  return (j1 <= p.gamma && p.pos[static_cast<std::size_t>(i1 - 1)] > j1) || i1 == j1;
}

void check_consistency(const cape_proposal& p, std::int32_t committed) {
  const auto m = p.mask();
  const auto tree = p.tree();
  const auto am = tree.ancestor_mask();
  REQUIRE(m == am);  // the tree form has the same mask, bit for bit
  for (int i = 0; i < p.size(); ++i)
    for (int j = 0; j < p.size(); ++j) REQUIRE(m.test(i, j) == mask_cape_formula(p, i + 1, j + 1));
  REQUIRE(tree.positions(committed) == p.position_ids(committed));
  // Algorithm 2 from the chain and the expansion sets
  std::vector<std::vector<std::int32_t>> X(static_cast<std::size_t>(p.gamma));
  for (int i = p.gamma; i < p.size(); ++i) X[static_cast<std::size_t>(p.pos[static_cast<std::size_t>(i)] - 1)].push_back(p.tokens[static_cast<std::size_t>(i)]);
  std::vector<std::int32_t> input, input_pi;
  const std::vector<std::int32_t> T(p.tokens.begin(), p.tokens.begin() + p.gamma);
  const auto vam = algorithm2_vam(p.gamma, X, input, input_pi, T);
  REQUIRE(input == p.tokens);
  for (std::size_t i = 0; i < input_pi.size(); ++i) REQUIRE(input_pi[i] == p.pos[i] - 1);
  for (int i = 0; i < p.size(); ++i)
    for (int j = 0; j < p.size(); ++j) REQUIRE((vam[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] == 1) == m.test(i, j));
}

}  // namespace

TEST_CASE("cape_schedule: §4.2 bins and Algorithm 1's 12-entry table at their boundaries", "[tree][cape]") {
  const auto s = cape_schedule::glide_bins();
  CHECK(s.expansion_size(1e-6f) == 7);
  CHECK(s.expansion_size(0.3f) == 7);
  CHECK(s.expansion_size(0.3001f) == 5);
  CHECK(s.expansion_size(0.6f) == 5);
  CHECK(s.expansion_size(0.61f) == 3);
  CHECK(s.expansion_size(0.8f) == 3);
  CHECK(s.expansion_size(0.8001f) == 1);
  CHECK(s.expansion_size(1.0f) == 1);
  const auto t = cape_schedule::glide_appendix_table();  // S[floor(10 p)] - 1 (greedy token counted)
  CHECK(t.expansion_size(0.05f) == 7);
  CHECK(t.expansion_size(0.39f) == 7);
  CHECK(t.expansion_size(0.4f) == 5);
  CHECK(t.expansion_size(0.79f) == 5);
  CHECK(t.expansion_size(0.8f) == 3);
  CHECK(t.expansion_size(0.99f) == 3);
  CHECK(t.expansion_size(1.0f) == 1);
  const auto u = cape_schedule::from_table({3, 2}, 2.0f, false);  // user table: [0,.5) -> 3, else 2
  CHECK(u.expansion_size(0.49f) == 3);
  CHECK(u.expansion_size(0.5f) == 2);
  CHECK(u.expansion_size(1.0f) == 2);
  const auto b = cape_schedule::from_bins({0.5f, 1.0f}, {2, 0});
  CHECK(b.expansion_size(0.5f) == 2);
  CHECK(b.expansion_size(0.7f) == 0);
}

TEST_CASE("cape_expand: hand-computed proposal, pos(), Mask_CAPE and tree", "[tree][cape]") {
  // gamma = 2, V = 6.
  // row 1: argmax 1, p = .5 -> K = 5; next best excluding 1: 2 (.2), 4 (.15), 0 (.1), 3 (.05);
  //        token 5 has probability 0 and is skipped, so |X_1| = 4.
  // row 2: argmax 2, p = .85 -> K = 1; tokens 0, 1, 3 tie at .05 -> the lowest id, 0.
  const std::vector<float> probs{0.1f, 0.5f, 0.2f, 0.05f, 0.15f, 0.0f,   //
                                 0.05f, 0.05f, 0.85f, 0.05f, 0.0f, 0.0f};
  const auto p = cape_expand(probs, 6);
  REQUIRE(p.gamma == 2);
  CHECK(p.tokens == std::vector<std::int32_t>{1, 2, 2, 4, 0, 3, 0});
  CHECK(p.pos == std::vector<std::int32_t>{1, 2, 1, 1, 1, 1, 2});
  CHECK(p.expansion_sizes == std::vector<std::int32_t>{4, 1});
  CHECK(p.logprobs[1] == Approx(std::log(0.85)));
  CHECK(p.position_ids(10) == std::vector<std::int32_t>{10, 11, 10, 10, 10, 10, 11});
  const auto m = p.mask();
  // Row bit patterns (LSB = column 0): chain causal; X_1 tokens see only themselves; X_2 sees x_1.
  const std::uint64_t want[7] = {0b0000001, 0b0000011, 0b0000100, 0b0001000, 0b0010000, 0b0100000, 0b1000001};
  for (int i = 0; i < 7; ++i) CHECK(m.row(i)[0] == want[i]);
  const auto t = p.tree();
  CHECK(std::vector<std::int32_t>(t.parents().begin(), t.parents().end()) == std::vector<std::int32_t>{-1, 0, -1, -1, -1, -1, 0});
  check_consistency(p, 10);

  // Appendix table: row 2 has p = .85 -> floor(8.5) = 8 -> S = 4 -> K = 3: X_2 = {0, 1, 3}.
  const auto q = cape_expand(probs, 6, {}, cape_schedule::glide_appendix_table());
  CHECK(q.tokens == std::vector<std::int32_t>{1, 2, 2, 4, 0, 3, 0, 1, 3});
  check_consistency(q, 1);

  // Given (non-greedy) chain: confidence is the chain token's probability (.2 -> K = 7).
  const std::vector<std::int32_t> chain{2, 2};
  const auto c = cape_expand(probs, 6, chain);
  CHECK(c.tokens == std::vector<std::int32_t>{2, 2, 1, 4, 0, 3, 0});
  // Cap of 4 tokens: the chain plus the first two expansion tokens of X_1.
  const auto capped = cape_expand(probs, 6, {}, cape_schedule::glide_bins(), 4);
  CHECK(capped.tokens == std::vector<std::int32_t>{1, 2, 2, 4});
  CHECK(capped.expansion_sizes == std::vector<std::int32_t>{2, 0});
  check_consistency(capped, 3);
}

TEST_CASE("cape_expand: randomized proposals agree with Algorithm 2 and §4.2", "[tree][cape]") {
  for (std::uint64_t seed = 0; seed < 30; ++seed) {
    specdec::philox_stream rng(seed, 3);
    const int vocab = 2 + static_cast<int>(rng.below(40));
    const int gamma = 1 + static_cast<int>(rng.below(7));
    const auto probs = random_rows(rng, vocab, gamma, true);
    for (const auto& sched : {cape_schedule::glide_bins(), cape_schedule::glide_appendix_table()}) {
      const auto p = cape_expand(probs, vocab, {}, sched);
      for (int i = 0; i < gamma; ++i) {
        const std::span<const float> row(probs.data() + i * vocab, static_cast<std::size_t>(vocab));
        const auto order = specdec::topk_indices_by_sort<float>(row, vocab);
        REQUIRE(p.tokens[static_cast<std::size_t>(i)] == order[0]);
        const int k = std::min(sched.expansion_size(row[static_cast<std::size_t>(order[0])]), vocab - 1);
        std::vector<std::int32_t> want(order.begin() + 1, order.begin() + 1 + k), got;
        for (int j = gamma; j < p.size(); ++j)
          if (p.pos[static_cast<std::size_t>(j)] == i + 1) got.push_back(p.tokens[static_cast<std::size_t>(j)]);
        REQUIRE(got == want);
      }
      check_consistency(p, 5);
    }
  }
}

namespace {
struct ranked_token {  // what cape_expand_ranked reads: .token and .logprob (as specdec::draft_token)
  std::int32_t token;
  float logprob;
};
}  // namespace

TEST_CASE("cape_expand_ranked: equals cape_expand on complete ranked lists, a prefix on short ones", "[tree][cape]") {
  specdec::cape_proposal ranked;  // reused across calls: capacity kept, contents replaced
  for (std::uint64_t seed = 0; seed < 30; ++seed) {
    specdec::philox_stream rng(seed, 4);
    const int vocab = 2 + static_cast<int>(rng.below(30));
    const int gamma = 1 + static_cast<int>(rng.below(6));
    const auto probs = random_rows(rng, vocab, gamma, false);
    std::vector<ranked_token> chain;
    std::vector<std::vector<ranked_token>> full(static_cast<std::size_t>(gamma)), shortened(full);
    for (int i = 0; i < gamma; ++i) {
      const std::span<const float> row(probs.data() + i * vocab, static_cast<std::size_t>(vocab));
      for (auto t : specdec::topk_indices_by_sort<float>(row, vocab)) full[static_cast<std::size_t>(i)].push_back({t, std::log(row[static_cast<std::size_t>(t)])});
      chain.push_back(full[static_cast<std::size_t>(i)][0]);
      shortened[static_cast<std::size_t>(i)].assign(full[static_cast<std::size_t>(i)].begin(), full[static_cast<std::size_t>(i)].begin() + std::min(vocab, 3));
    }
    for (const auto& sched : {cape_schedule::glide_bins(), cape_schedule::glide_appendix_table()})
      for (const int cap : {0, gamma, gamma + 3}) {
        INFO("seed " << seed << " cap " << cap);
        const auto want = cape_expand(probs, vocab, {}, sched, cap);
        specdec::cape_expand_ranked<ranked_token>(chain, full, sched, cap, ranked);
        REQUIRE(ranked.gamma == want.gamma);
        REQUIRE(ranked.tokens == want.tokens);
        REQUIRE(ranked.pos == want.pos);
        REQUIRE(ranked.expansion_sizes == want.expansion_sizes);
        REQUIRE(ranked.logprobs == want.logprobs);
        check_consistency(ranked, 7);
        // Two candidates besides the chain token: each X_i is the first min(K_i, 2) of the full X_i.
        specdec::cape_expand_ranked<ranked_token>(chain, shortened, sched, 0, ranked);
        const auto uncapped = cape_expand(probs, vocab, {}, sched);
        REQUIRE(ranked.size() >= gamma);
        for (int i = 0; i < gamma; ++i) {
          std::vector<std::int32_t> got, full_set;
          for (int j = gamma; j < ranked.size(); ++j)
            if (ranked.pos[static_cast<std::size_t>(j)] == i + 1) got.push_back(ranked.tokens[static_cast<std::size_t>(j)]);
          for (int j = gamma; j < uncapped.size(); ++j)
            if (uncapped.pos[static_cast<std::size_t>(j)] == i + 1) full_set.push_back(uncapped.tokens[static_cast<std::size_t>(j)]);
          full_set.resize(std::min<std::size_t>(full_set.size(), 2));
          REQUIRE(got == full_set);
        }
      }
    // Steps past candidates.size() get no expansion set.
    specdec::cape_expand_ranked<ranked_token>(chain, std::span(full).first(1), cape_schedule::glide_bins(), 0, ranked);
    for (int j = gamma; j < ranked.size(); ++j) REQUIRE(ranked.pos[static_cast<std::size_t>(j)] == 1);
  }
}

TEST_CASE("cape: validation", "[tree][cape][validation]") {
  using Catch::Contains;
  const std::vector<float> ok{0.5f, 0.5f, 0.0f};
  REQUIRE_THROWS_WITH(cape_expand(ok, 0), Contains("cape_expand") && Contains("vocab_size"));
  REQUIRE_THROWS_WITH(cape_expand(ok, 2), Contains("probs.size()"));
  REQUIRE_THROWS_WITH(cape_expand(std::vector<float>{0.5f, 0.6f, 0.0f}, 3), Contains("summing to 1"));
  REQUIRE_THROWS_WITH(cape_expand(std::vector<float>{1.5f, -0.5f, 0.0f}, 3), Contains("probs (row 0)"));
  REQUIRE_THROWS_WITH(cape_expand(std::vector<float>{std::nanf(""), 1.0f, 0.0f}, 3), Contains("non-finite"));
  REQUIRE_THROWS_WITH(cape_expand(ok, 3, std::vector<std::int32_t>{3}), Contains("chain[0]"));
  REQUIRE_THROWS_WITH(cape_expand(ok, 3, std::vector<std::int32_t>{2}), Contains("probability > 0"));
  REQUIRE_THROWS_WITH(cape_expand(ok, 3, std::vector<std::int32_t>{0, 1}), Contains("chain.size()"));
  REQUIRE_THROWS_WITH(cape_expand(std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f}, 2, {}, cape_schedule::glide_bins(), 1),
                      Contains("max_tokens"));
  REQUIRE_THROWS_WITH(cape_schedule::from_bins({0.5f, 0.4f, 1.0f}, {1, 2, 3}), Contains("upper_bounds[1]"));
  REQUIRE_THROWS_WITH(cape_schedule::from_bins({0.5f, 0.9f}, {1, 2}), Contains("upper_bounds.back()"));
  REQUIRE_THROWS_WITH(cape_schedule::from_bins({1.0f}, {1, 2}), Contains("sizes.size()"));
  REQUIRE_THROWS_WITH(cape_schedule::from_bins({1.0f}, {-1}), Contains("sizes[0]"));
  REQUIRE_THROWS_WITH(cape_schedule::from_table({}, 10.0f), Contains("entries"));
  REQUIRE_THROWS_WITH(cape_schedule::from_table({0, 2}, 10.0f, true), Contains("entries[0]"));
  REQUIRE_THROWS_WITH(cape_schedule::from_table({2}, 0.0f), Contains("scale"));
  REQUIRE_THROWS_WITH(cape_schedule::glide_bins().expansion_size(0.0f), Contains("'p'"));
  REQUIRE_THROWS_WITH(cape_schedule::glide_bins().expansion_size(1.1f), Contains("'p'"));
  REQUIRE_THROWS_WITH(cape_proposal{}.position_ids(0), Contains("committed_length"));
  cape_proposal out;
  const std::vector<ranked_token> chain{{1, -0.1f}, {2, -0.2f}};
  const std::vector<std::vector<ranked_token>> none;
  REQUIRE_THROWS_WITH(specdec::cape_expand_ranked<ranked_token>(chain, none, cape_schedule::glide_bins(), 1, out),
                      Contains("cape_expand_ranked") && Contains("max_tokens") && Contains(">= gamma = 2"));
  const std::vector<ranked_token> impossible{{1, -INFINITY}};
  REQUIRE_THROWS_WITH(specdec::cape_expand_ranked<ranked_token>(impossible, none, cape_schedule::glide_bins(), 0, out),
                      Contains("chain[0].logprob"));
  out.gamma = 5;  // a rejected call leaves out untouched (validation comes first)
  const std::vector<ranked_token> above_one{{1, -0.1f}, {2, 0.5f}};
  REQUIRE_THROWS_WITH(specdec::cape_expand_ranked<ranked_token>(above_one, none, cape_schedule::glide_bins(), 0, out),
                      Contains("chain[1].logprob") && Contains("(-inf, 0]"));
  CHECK(out.gamma == 5);
}

TEST_CASE("cape_schedule: a huge table scale maps every p to the last entry (no out-of-range float -> size_t)",
          "[tree][cape][validation]") {
  // floor(1e30 * p) does not fit size_t: converting it was undefined (x86-64 gave index 0).
  const auto s = cape_schedule::from_table({1, 2, 3}, 1e30f, false);
  CHECK(s.expansion_size(0.5f) == 3);
  CHECK(s.expansion_size(1e-6f) == 3);
  CHECK(s.expansion_size(1.0f) == 3);
  const auto big = cape_schedule::from_table({5, 6, 7}, std::numeric_limits<float>::max(), true);
  CHECK(big.expansion_size(1.0f) == 6);
  REQUIRE_THROWS_WITH(cape_schedule::from_table({2}, std::numeric_limits<float>::infinity()), Catch::Contains("scale"));
}

TEST_CASE("cape_proposal: position ids near INT32_MAX are rejected instead of overflowing", "[tree][cape][validation]") {
  constexpr std::int32_t imax = std::numeric_limits<std::int32_t>::max();
  const std::vector<float> probs{0.1f, 0.5f, 0.2f, 0.05f, 0.15f, 0.0f,  //
                                 0.05f, 0.05f, 0.85f, 0.05f, 0.0f, 0.0f};
  const auto p = cape_expand(probs, 6);  // gamma = 2: positions committed + {0, 1}
  const auto ids = p.position_ids(imax - 1);
  CHECK(*std::max_element(ids.begin(), ids.end()) == imax);
  REQUIRE_THROWS_WITH(p.position_ids(imax), Catch::Contains("position_ids") && Catch::Contains("committed_length"));
  REQUIRE(p.tree().positions(imax - 1) == ids);  // the same bound as token_tree::positions
}

TEST_CASE("cape_expand_ranked: duplicate candidates become one expansion token (best log-prob); NaN is rejected",
          "[tree][cape][validation]") {
  using Catch::Contains;
  cape_proposal out;
  // One step, confidence .5 -> K = 5 (§4.2 bins). Candidates repeat 7 and the chain token 1.
  const std::vector<ranked_token> chain{{1, std::log(0.5f)}};
  const std::vector<std::vector<ranked_token>> cands{
      {{1, std::log(0.5f)}, {7, -2.0f}, {7, -1.5f}, {1, -1.0f}, {8, -3.0f}, {7, -4.0f}, {9, -5.0f}, {10, -6.0f}, {11, -7.0f}}};
  specdec::cape_expand_ranked<ranked_token>(chain, cands, cape_schedule::glide_bins(), 0, out);
  CHECK(out.tokens == std::vector<std::int32_t>{1, 7, 8, 9, 10, 11});
  CHECK(out.expansion_sizes == std::vector<std::int32_t>{5});
  CHECK(out.logprobs[1] == -1.5f);  // the better of 7's two log-probs
  const auto t = out.tree();
  for (int i = 0; i < t.size(); ++i)
    for (int j = i + 1; j < t.size(); ++j) CHECK_FALSE((t.parent(i) == t.parent(j) && t.token(i) == t.token(j)));
  // NaN / +inf candidate log-probs are errors (-inf = impossible, skipped); out is left untouched.
  out.gamma = 9;
  auto bad = cands;
  bad[0][4].logprob = std::numeric_limits<float>::quiet_NaN();
  REQUIRE_THROWS_WITH(specdec::cape_expand_ranked<ranked_token>(chain, bad, cape_schedule::glide_bins(), 0, out),
                      Contains("cape_expand_ranked") && Contains("candidates[0][4].logprob"));
  bad[0][4].logprob = std::numeric_limits<float>::infinity();
  REQUIRE_THROWS_WITH(specdec::cape_expand_ranked<ranked_token>(chain, bad, cape_schedule::glide_bins(), 0, out),
                      Contains("candidates[0][4].logprob"));
  CHECK(out.gamma == 9);
  bad[0][4].logprob = -std::numeric_limits<float>::infinity();
  specdec::cape_expand_ranked<ranked_token>(chain, bad, cape_schedule::glide_bins(), 0, out);
  CHECK(out.tokens == std::vector<std::int32_t>{1, 7, 9, 10, 11});  // 8 is impossible; only 4 candidates left
}

TEST_CASE("cape_proposal: a hand-built proposal is checked before mask(), tree() and position_ids() index it",
          "[tree][cape][validation]") {
  // (A review found each of these reading or writing past the arrays.)
  using Catch::Contains;
  cape_proposal p;
  p.gamma = 2;
  p.tokens = {5, 6, 7};
  p.pos = {1, 2, 2};
  p.logprobs = {-0.1f, -0.2f, -0.3f};
  CHECK(p.mask().rows() == 3);
  CHECK(p.tree().size() == 3);
  auto q = p;
  q.pos = {1};
  CHECK_THROWS_WITH(q.mask(), Contains("cape_proposal::mask") && Contains("'pos.size()'"));
  q = p;
  q.logprobs.pop_back();
  CHECK_THROWS_WITH(q.tree(), Contains("cape_proposal::tree") && Contains("'logprobs.size()'"));
  CHECK(q.mask().rows() == 3);  // the mask does not read log-probs
  q = p;
  q.gamma = 200;
  CHECK_THROWS_WITH(q.mask(), Contains("'gamma'"));
  q = p;
  q.pos[2] = 150;  // an expansion step past gamma (set a bit outside the matrix before)
  CHECK_THROWS_WITH(q.mask(), Contains("'pos[2]'") && Contains("[1, gamma = 2]"));
  CHECK_THROWS_WITH(q.position_ids(10), Contains("position_ids") && Contains("'pos[2]'"));
  q = p;
  q.pos[1] = 1;  // a chain token not at its own step
  CHECK_THROWS_WITH(q.tree(), Contains("'pos[1]'") && Contains("step 2"));
  q.gamma = -1;
  CHECK_THROWS_WITH(q.tree(), Contains("'gamma'"));
  // a NaN log-prob, and chain log-probs whose cumulative score overflows: named as this function's
  // logprobs[i] (token_tree::add's own name came out before), and out left empty, not half-built
  specdec::token_tree out = p.tree();
  REQUIRE(out.size() == 3);
  q = p;
  q.logprobs[1] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(q.tree(out), Contains("specdec::cape_proposal::tree") && Contains("'logprobs[1]'"));
  CHECK(out.size() == 0);
  q = p;
  q.logprobs = {3e38f, 3e38f, -0.3f};  // not a proposal's log-probs, but nothing else stops a hand-built one
  CHECK_THROWS_WITH(q.tree(out), Contains("'logprobs[1]'") && Contains("cumulative score inf"));
  CHECK(out.size() == 0);
}

TEST_CASE("cape_expand_ranked: token ids >= 0, and a log-probability below float's exp range is the lowest bin",
          "[tree][cape][validation]") {
  using Catch::Contains;
  cape_proposal out;
  const std::vector<std::vector<ranked_token>> cands{{{3, -1.0f}, {4, -2.0f}}};
  REQUIRE_THROWS_WITH(specdec::cape_expand_ranked<ranked_token>(std::vector<ranked_token>{{-7, -0.5f}}, cands,
                                                                cape_schedule::glide_bins(), 0, out),
                      Contains("'chain[0].token'"));
  REQUIRE_THROWS_WITH(specdec::cape_expand_ranked<ranked_token>(std::vector<ranked_token>{{1, -0.5f}},
                                                                std::vector<std::vector<ranked_token>>{{{-9, -1.0f}}},
                                                                cape_schedule::glide_bins(), 0, out),
                      Contains("'candidates[0][0].token'"));
  // p = exp(-110) rounds to 0 in float, but the log-probability is valid: the widest expansion (7).
  specdec::cape_expand_ranked<ranked_token>(std::vector<ranked_token>{{1, -110.0f}}, cands, cape_schedule::glide_bins(),
                                            0, out);
  CHECK(out.tokens == std::vector<std::int32_t>{1, 3, 4});
  CHECK(out.logprobs[0] == -110.0f);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(), 0.5f})
    REQUIRE_THROWS_WITH(specdec::cape_expand_ranked<ranked_token>(std::vector<ranked_token>{{1, bad}}, cands,
                                                                  cape_schedule::glide_bins(), 0, out),
                        Contains("'chain[0].logprob'"));
  // int64 token ids (PyTorch's dtype) past INT32_MAX: cut to int32 silently before (0xFFFFFFFF came out
  // as -1, the padding id, and 2^32 + 7 as 7); refused, naming the entry
  struct wide_token {
    std::int64_t token;
    float logprob;
  };
  const std::vector<std::vector<wide_token>> wide_cands{{{(std::int64_t{1} << 32) + 7, -1.0f}, {9, -2.0f}}};
  REQUIRE_THROWS_WITH(specdec::cape_expand_ranked<wide_token>(std::vector<wide_token>{{0xFFFFFFFFLL, -0.1f}}, wide_cands,
                                                              cape_schedule::glide_bins(), 0, out),
                      Contains("'chain[0].token'") && Contains("INT32_MAX") && Contains("4294967295"));
  REQUIRE_THROWS_WITH(specdec::cape_expand_ranked<wide_token>(std::vector<wide_token>{{5, -0.1f}}, wide_cands,
                                                              cape_schedule::glide_bins(), 0, out),
                      Contains("'candidates[0][0].token'") && Contains("4294967303"));
  specdec::cape_expand_ranked<wide_token>(std::vector<wide_token>{{5, -0.1f}},
                                          std::vector<std::vector<wide_token>>{{{9, -2.0f}}}, cape_schedule::glide_bins(),
                                          0, out);  // in range: the ids as given
  CHECK(out.tokens == std::vector<std::int32_t>{5, 9});
}

TEST_CASE("cape_expand: a row cape_expand accepts (sum within 1e-2) is expanded, a chain p above 1 read as 1",
          "[tree][cape][validation]") {
  // Sum 1.009: accepted by the row-sum tolerance; the chain token's p = 1.004 reads as 1, S(1) = 1
  // (§4.2 bins), so exactly one expansion token of the two with p > 0 (S(.004) would be 7).
  const std::vector<float> row{1.004f, 0.003f, 0.002f};
  const auto p = cape_expand(row, 3);
  CHECK(p.tokens == std::vector<std::int32_t>{0, 1});
  CHECK(p.expansion_sizes == std::vector<std::int32_t>{1});
}
