// Adaptive draft depth (decoder/adaptive_depth.hpp, issue #26 item 4): the step cost curve
// (interpolation, extrapolation, its text form and bad input), the acceptance estimates, the depth
// choice (the exhaustive optimum for one request, a local optimum for a batch), and the batch
// driving it: a perfect drafter under a flat cost goes to full depth, under a cost linear in the rows
// it never drafts, calibration times the target without changing it, and outputs stay the target's
// greedy decoding whatever the depths; a drafter of two sources (one always accepted, one never) is
// planned per source.
#include <catch2/catch.hpp>

#include <chrono>
#include <random>
#include <string>
#include <thread>

#include "../../examples/common/llama.hpp"
#include "small_model.hpp"
#include "specdec/decoder/adaptive_depth.hpp"
#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/draft/chain_drafter.hpp"

using namespace specdec;
using namespace specdec::examples;
using Catch::Matchers::Contains;

namespace {
using small_model::cfg;
using small_model::greedy_of;
using small_model::weights;

step_cost_curve curve_of(std::initializer_list<std::pair<int, double>> points) {
  step_cost_curve c;
  for (auto [r, s] : points) c.record(r, s);
  return c;
}

// tokens / (cost(rows) + draft) for given depths (the objective choose_depths maximises).
double ratio(std::span<const depth_choice_input> in, const step_cost_curve& cost, const std::vector<int>& d) {
  double t = 0, rows = 0, s = 0;
  for (std::size_t r = 0; r < in.size(); ++r) {
    const auto i = static_cast<std::size_t>(d[r]);
    t += in[r].tokens[i], rows += 1 + in[r].nodes[i], s += in[r].draft_s[i];
  }
  return t / (cost.seconds(rows) + s);
}
}  // namespace

TEST_CASE("step_cost_curve: measured points, linear between, last slope beyond, first below", "[decoder][adaptive]") {
  step_cost_curve c;
  CHECK(c.empty());
  CHECK_THROWS_WITH(c.seconds(1), Contains("at least one measured point"));
  c.record(2, 1.0);
  CHECK(c.seconds(1) == 1.0);  // below the first point: its cost
  CHECK(c.seconds(7) == 1.0);  // one point: flat
  c.record(4, 2.0);
  c.record(8, 3.0);
  CHECK(c.points() == 3);
  CHECK(c.seconds(3) == Approx(1.5));
  CHECK(c.seconds(6) == Approx(2.5));
  CHECK(c.seconds(16) == Approx(3.0 + 8 * 0.25));  // the 4 -> 8 slope
  CHECK(c.seconds(8) == 3.0);
  c.record(8, 5.0);  // the median of the latest window (9) measurements: {3, 5}
  CHECK(c.seconds(8) == Approx(4.0));
  c.record(8, 100.0);  // one outlier moves the median to 5, not towards 100
  CHECK(c.seconds(8) == Approx(5.0));
  for (int i = 0; i < 9; ++i) c.record(8, 2.0);  // the window forgets the old ones
  CHECK(c.seconds(8) == Approx(2.0));
  // a measured row count costs exactly its value, also after a steep segment (found by fuzz cost_curve)
  const auto steep = step_cost_curve::from_text("9 4.0031\n17 0.0055\n");
  CHECK(steep.seconds(17) == 0.0055);
  c.record(10, 1.0);  // a falling last segment extends flat, never below
  CHECK(c.seconds(50) == Approx(1.0));

  CHECK_THROWS_WITH(c.record(0, 1.0), Contains("rows"));
  CHECK_THROWS_WITH(c.record(3, std::nan("")), Contains("finite"));
  CHECK_THROWS_WITH(c.record(3, -1.0), Contains("finite value >= 0"));
  CHECK_THROWS_WITH(step_cost_curve(0), Contains("window"));
  CHECK_THROWS_WITH(c.record(step_cost_curve::max_rows + 1, 1.0), Contains("rows"));
  CHECK_THROWS_WITH(c.seconds(step_cost_curve::max_rows + 1.0), Contains("rows"));
  // points are kept sparsely: a curve with a huge row count is as small and fast as any other
  const auto far = step_cost_curve::from_text("1 0.001\n16777216 0.5\n");
  CHECK(far.points() == 2);
  CHECK(far.seconds(8388608.5) == Approx(0.001 + 0.499 * (8388608.5 - 1) / (16777216 - 1)));
  CHECK(step_cost_curve::from_text("1 0.5\n", 3).seconds(1) == 0.5);
  CHECK_THROWS_WITH(c.seconds(0.5), Contains("rows"));
  CHECK_THROWS_WITH(c.seconds(std::numeric_limits<double>::infinity()), Contains("rows"));
}

TEST_CASE("step_cost_curve: the text form round-trips and bad text is named", "[decoder][adaptive]") {
  const auto c = curve_of({{1, 0.0125}, {2, 0.013}, {5, 0.02}, {33, 0.1}});
  const auto d = step_cost_curve::from_text(c.to_text());
  CHECK(d.to_text() == c.to_text());
  for (double r : {1.0, 1.5, 3.0, 17.0, 40.0}) CHECK(d.seconds(r) == c.seconds(r));
  CHECK(step_cost_curve::from_text("\n 3 0.5\r\n\n").seconds(3) == 0.5);
  CHECK(step_cost_curve::from_text("").empty());
  CHECK_THROWS_WITH(step_cost_curve::from_text("1 0.1\n2\n"), Contains("line 2"));
  CHECK_THROWS_WITH(step_cost_curve::from_text("1 0.1 x\n"), Contains("line 1"));
  CHECK_THROWS_WITH(step_cost_curve::from_text("0 0.1\n"), Contains("line 1 rows"));
  CHECK_THROWS_WITH(step_cost_curve::from_text("2 -1\n"), Contains("line 1 seconds"));
  CHECK_THROWS_WITH(step_cost_curve::from_text("2 nan\n"), Contains("line 1 seconds"));
  CHECK_THROWS_WITH(step_cost_curve::from_text("2 1\n2 1\n"), Contains("each row count once"));
  CHECK_THROWS_WITH(step_cost_curve::from_text("2 1\n7 3\n\n2 1\n"), Contains("line 4 rows"));
  // lines in any order give the sorted curve; 20000 descending lines parse in linear-log time (each
  // was inserted at the front before: quadratic, 26 s for 100000 lines)
  CHECK(step_cost_curve::from_text("33 0.1\n5 0.02\n1 0.0125\n2 0.013\n").to_text() == c.to_text());
  std::string many;
  for (int r = 20000; r >= 1; --r) many += std::to_string(r) + " 0.001\n";
  const auto m = step_cost_curve::from_text(many);
  CHECK(m.seconds(1) == 0.001);
  CHECK(m.seconds(20000) == 0.001);
}

TEST_CASE("acceptance_estimate: conditional counts, decay, and priors", "[decoder][adaptive]") {
  adaptive_depth_options o;
  o.prior_weight = 1.0;
  o.prior_acceptance = 0.5;
  acceptance_estimate a;
  std::vector<double> q;
  a.conditional(3, nullptr, o, q);  // nothing seen: the prior at every depth
  CHECK(q[1] == 0.5);
  CHECK(q[3] == 0.5);
  a.record(3, 1, 1.0);  // depth 1 accepted, depth 2 rejected, depth 3 untested
  a.record(3, 3, 1.0);  // all three accepted
  CHECK(a.trials(1) == 2);
  CHECK(a.successes(1) == 2);
  CHECK(a.trials(2) == 2);
  CHECK(a.successes(2) == 1);
  CHECK(a.trials(3) == 1);
  a.conditional(4, nullptr, o, q);
  CHECK(q[1] == Approx((2 + 0.5) / 3));
  CHECK(q[2] == Approx((1 + q[1]) / 3));
  CHECK(q[3] == Approx((1 + q[2]) / 2));
  CHECK(q[4] == Approx(q[3]));  // unseen: inherits the depth above
  a.record(1, 0, 0.5);          // decay halves depth 1's earlier counts only
  CHECK(a.trials(1) == 2);
  CHECK(a.successes(1) == 1);
  CHECK(a.trials(2) == 2);
  // a prior that has seen depth 4 pulls an unseen depth towards its own estimate
  acceptance_estimate prior;
  for (int i = 0; i < 50; ++i) prior.record(4, 4, 1.0);
  a.conditional(4, &prior, o, q);
  std::vector<double> pq;
  prior.conditional(4, nullptr, o, pq);
  CHECK(q[4] == Approx(pq[4]));
  std::vector<double> q2;  // the same from a precomputed prior q; a too-short one is refused
  a.conditional(4, &prior, pq, o, q2);
  CHECK(q2 == q);
  CHECK_THROWS_WITH(a.conditional(4, &prior, std::span<const double>(pq).first(3), o, q2), Contains("prior_q"));
  CHECK_THROWS_WITH(a.record(2, 3, 1.0), Contains("accepted"));
  CHECK_THROWS_WITH(a.record(-1, 0, 1.0), Contains("'depth'"));
  CHECK_THROWS_WITH(a.record(2, 1, 0.0), Contains("decay"));
  per_depth_median m;
  CHECK_THROWS_WITH(m.record(1, std::nan("")), Contains("finite"));
  CHECK_THROWS_WITH(m.record(-1, 1.0), Contains("depth"));

  std::vector<double> tok;
  expected_tokens(std::vector<double>{1.0, 0.5, 0.5, 1.0}, tok);
  CHECK(tok == std::vector<double>{1.0, 1.5, 1.75, 2.0});
}

TEST_CASE("choose_depths: the exact optimum for one request, a local optimum for a batch", "[decoder][adaptive]") {
  std::mt19937 g(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 200; ++trial) {
    const int B = 1 + trial % 4;
    const int D = 1 + static_cast<int>(g() % 6);
    std::vector<std::vector<double>> tok(B), nodes(B), draft(B);
    std::vector<depth_choice_input> in;
    for (int r = 0; r < B; ++r) {
      std::vector<double> q(D + 1);
      for (auto& x : q) x = u(g);
      expected_tokens(q, tok[r]);
      nodes[r].push_back(0), draft[r].push_back(0);
      for (int d = 1; d <= D; ++d) nodes[r].push_back(nodes[r].back() + 1 + (g() % 3)), draft[r].push_back(draft[r].back() + 0.01 * u(g));
      in.push_back({tok[r], nodes[r], draft[r]});
    }
    step_cost_curve cost;  // a concave-then-linear machine: flat to 8 rows, then 0.05 s per row
    cost.record(1, 0.1);
    cost.record(8, 0.1 + 0.2 * u(g));
    cost.record(9, cost.seconds(8) + 0.05);
    std::vector<int> got;
    choose_depths(in, cost, got);
    const double best = ratio(in, cost, got);
    if (B == 1) {
      for (int d = 0; d <= D; ++d) CHECK(ratio(in, cost, {d}) <= best * (1 + 1e-9));
    } else {  // no single change improves it, and it beats plain decoding
      CHECK(best >= ratio(in, cost, std::vector<int>(B, 0)) * (1 - 1e-12));
      for (int r = 0; r < B; ++r)
        for (int d = 0; d <= D; ++d) {
          auto alt = got;
          alt[r] = d;
          CHECK(ratio(in, cost, alt) <= best * (1 + 1e-9));
        }
    }
  }
  // a fixed request (one candidate) keeps it; mismatched sizes are refused
  const std::vector<double> one{3.0}, n4{4.0}, z{0.0};
  std::vector<int> got;
  choose_depths(std::vector<depth_choice_input>{{one, n4, z}}, curve_of({{1, 1.0}}), got);
  CHECK(got == std::vector<int>{0});
  const std::vector<double> two{1.0, 2.0};
  CHECK_THROWS_WITH(choose_depths(std::vector<depth_choice_input>{{two, n4, z}}, curve_of({{1, 1.0}}), got),
                    Contains("one non-zero size"));
  const std::vector<double> nan2{1.0, std::nan("")}, neg2{0.0, -1.0}, z2{0.0, 0.0};
  CHECK_THROWS_WITH(choose_depths(std::vector<depth_choice_input>{{two, z2, z2}, {nan2, z2, z2}}, curve_of({{1, 1.0}}), got),
                    Contains("input[1]"));
  CHECK_THROWS_WITH(choose_depths(std::vector<depth_choice_input>{{two, neg2, z2}}, curve_of({{1, 1.0}}), got),
                    Contains("input[0]"));
  CHECK_THROWS_WITH(choose_depths(std::vector<depth_choice_input>{{two, z2, z2}}, curve_of({{1, 1.0}}), got, -1.0),
                    Contains("per_row"));
  // a curve of zeros (a free target): still a choice, the one with more tokens
  const std::vector<double> n01{0.0, 1.0};
  CHECK(std::isfinite(choose_depths(std::vector<depth_choice_input>{{two, n01, z2}}, curve_of({{1, 0.0}}), got)));
  CHECK(got == std::vector<int>{1});
  // verification time per row (per_row) makes rows dearer: a flat curve then pays for depth 1 only
  // while the token it adds is worth more than the row
  const std::vector<double> tok{1.0, 1.5};
  choose_depths(std::vector<depth_choice_input>{{tok, n01, z2}}, curve_of({{1, 1.0}}), got, 0.1);
  CHECK(got == std::vector<int>{1});  // 1.5 / 1.2 > 1 / 1.1
  choose_depths(std::vector<depth_choice_input>{{tok, n01, z2}}, curve_of({{1, 1.0}}), got, 1.0);
  CHECK(got == std::vector<int>{0});  // 1.5 / 3 < 1 / 2
}

TEST_CASE("choose_depths: Leviathan et al.'s expected speedup (GLIDE §5.1) where its assumptions hold",
          "[decoder][adaptive]") {
  // constant acceptance alpha, a target that costs T whatever the rows, a draft costing c T per token:
  // the best proposal length maximises (1 - alpha^(g+1)) / ((1 - alpha)(g c + 1))
  const double T = 0.01;
  const auto cost = curve_of({{1, T}, {64, T}});
  for (double alpha : {0.3, 0.6, 0.8, 0.9, 0.95})
    for (double c : {0.02, 0.1, 0.3, 0.7, 1.5}) {
      const int G = 12;
      std::vector<double> q(G + 1, alpha), tok, nodes, draft;
      expected_tokens(q, tok);
      int want = 0;
      double best = 0;
      for (int g = 0; g <= G; ++g) {
        nodes.push_back(g), draft.push_back(g * c * T);
        const double spd = (1 - std::pow(alpha, g + 1)) / ((1 - alpha) * (g * c + 1));
        CHECK(tok[static_cast<std::size_t>(g)] / (T + draft.back()) == Approx(spd / T));
        if (spd > best * (1 + 1e-9)) best = spd, want = g;
      }
      std::vector<int> got;
      const double rate = choose_depths(std::vector<depth_choice_input>{{tok, nodes, draft}}, cost, got);
      INFO("alpha " << alpha << ", c " << c);
      CHECK(got[0] == want);
      CHECK(rate * T == Approx(best));
    }
}

namespace {
using target_t = llama_model<double>;
using drafter_t = chain_drafter<llama_model<double>>;
using decoder_t = speculative_decoder<target_t, drafter_t, chain_tree_builder, greedy_verifier>;
const std::vector<std::int32_t> prompt{3, 1, 4, 1, 5, 9, 2, 6};
}  // namespace

TEST_CASE("adaptive depth: a perfect drafter goes to full depth when verifying is free, never drafts when it is linear",
          "[decoder][adaptive]") {
  const int n = 60;
  const auto want = greedy_of(prompt, n);
  for (const bool flat : {true, false}) {
    target_t target(cfg, weights(), 1, 256);
    target_t same(cfg, weights(), 1, 256);  // the target itself as the draft: every draft token is accepted
    decoder_t dec(target, drafter_t(same));
    adaptive_depth_options o;
    o.learn_costs = false;  // the given curve stays: decisions depend on it, not on this machine's timing
    dec.batch().set_adaptive_options(o);
    dec.batch().set_cost_curve(flat ? curve_of({{1, 1.0}, {64, 1.0}}) : curve_of({{1, 1.0}, {2, 2.0}}));
    const auto out = dec.generate(prompt, {.max_new_tokens = n, .draft_depth = 5, .adaptive_depth = true});
    CHECK(out.tokens == want);
    const auto& st = dec.stats();
    CHECK(st.calibrate_s == 0.0);  // a curve was given
    INFO("flat " << flat << ": steps " << st.steps << ", nodes " << st.tree_nodes << ", tau " << st.tau());
    if (flat) {
      CHECK(st.tau() > 5.0);  // 6 tokens a step but the first and the last
      CHECK(st.steps <= n / 6 + 2);
    } else {
      CHECK(st.tree_nodes == 0);  // a prior tau of at most 2 never pays for rows that cost 1 s each
      CHECK(st.steps == n);
    }
  }
}

TEST_CASE("adaptive depth: calibration times the target without changing it; mixed batches stay lossless",
          "[decoder][adaptive]") {
  const int n = 40;
  target_t target(cfg, weights(), 4, 512);
  target_t same(cfg, weights(), 4, 512);
  speculative_batch<target_t, drafter_t, chain_tree_builder, greedy_verifier> batch(target, drafter_t(same));
  adaptive_depth_options o;
  o.calibration_rows = 9;
  o.calibration_reps = 1;
  batch.set_adaptive_options(o);
  const std::vector<std::vector<std::int32_t>> prompts{prompt, {7, 7, 2}, {1, 2, 3, 4, 5}, {30, 0, 30}};
  for (std::uint32_t i = 0; i < 4; ++i)
    batch.add_request(i, prompts[i], {.max_new_tokens = n, .draft_depth = 3 + static_cast<int>(i), .adaptive_depth = i % 2 == 0});
  batch.calibrate_costs(1);
  CHECK(batch.cost_curve().points() == 5);  // rows 1, 2, 3, 5, 9
  CHECK(batch.stats().calibrate_s > 0.0);
  for (int rows : {1, 2, 3, 5, 9}) CHECK(batch.cost_curve().seconds(rows) > 0.0);
  const auto before = batch.cost_curve().to_text();
  std::vector<std::vector<std::int32_t>> out(4);
  while (batch.active() > 0)
    for (const auto& s : batch.step()) out[s.id].insert(out[s.id].end(), s.tokens.begin(), s.tokens.end());
  for (std::size_t i = 0; i < 4; ++i) CHECK(out[i] == greedy_of(prompts[i], n));
  CHECK(batch.cost_curve().to_text() != before);  // learn_costs: refined by the steps
  CHECK_THROWS_WITH(batch.calibrate_costs(9), Contains("active request"));
  batch.add_request(20, prompt, {.max_new_tokens = 0, .adaptive_depth = true});
  CHECK_THROWS_WITH(batch.calibrate_costs(20), Contains("tokens left to generate"));
  CHECK_THROWS_WITH(batch.add_request(21, prompt, {.draft_depth = 65, .adaptive_depth = true}), Contains("draft_depth"));
  adaptive_depth_options bad;
  bad.decay = 0.0;
  CHECK_THROWS_WITH(batch.set_adaptive_options(bad), Contains("decay"));
  bad = {};
  bad.calibration_rows = 1;
  CHECK_THROWS_WITH(batch.set_adaptive_options(bad), Contains("calibration_rows"));
}

TEST_CASE("adaptive depth: a target sized for prompt + max_new_tokens has room for the calibration", "[decoder][adaptive]") {
  // calibration times star trees of up to calibration_rows rows; it stops at the rows of the longest
  // chain the request may still draft, which a target sized like this always holds
  for (const int n : {1, 2, 5, 40}) {
    target_t target(cfg, weights(), 1, static_cast<int>(prompt.size()) + n);
    target_t same(cfg, weights(), 1, static_cast<int>(prompt.size()) + n);
    decoder_t dec(target, drafter_t(same));
    const auto out = dec.generate(prompt, {.max_new_tokens = n, .draft_depth = 4, .adaptive_depth = true});
    CHECK(out.tokens == greedy_of(prompt, n));
    // calibrated rows 1, 2, 3, 5, 9, 17 up to n (one new token: nothing to draft, no calibration),
    // then the row counts the steps ran
    CHECK(dec.batch().cost_curve().points() >= (n == 1 ? 0 : n == 2 ? 2 : n == 5 ? 4 : 6));
    CHECK((dec.stats().calibrate_s > 0.0) == (n > 1));
  }
}

namespace {
// A one-request decoder over the small model, its drafter D made by make(a copy of the target), planning
// from the given cost curve alone: no cost learning, no probes.
template <class D>
struct planned_decoder {
  target_t target{cfg, weights(), 1, 512}, same{cfg, weights(), 1, 512};
  speculative_decoder<target_t, D, chain_tree_builder, greedy_verifier> dec;
  template <class Make>
  planned_decoder(Make make, step_cost_curve curve, double prior_acceptance = 0.5) : dec(target, make(same)) {
    adaptive_depth_options o;
    o.learn_costs = false;
    o.explore_budget = 0.0;
    o.prior_acceptance = prior_acceptance;
    dec.batch().set_adaptive_options(o);
    dec.batch().set_cost_curve(std::move(curve));
  }
};

// A drafter of two sources (draft/drafter.hpp): where tokens.size() % 7 < 4 the target's own chain
// (source 0: always accepted), elsewhere that chain with every token shifted (source 1: never
// accepted). It counts the proposals of each source and the depths source 0 was asked for.
struct two_source_drafter {
  static constexpr int draft_sources = 2;
  explicit two_source_drafter(drafter_t d) : inner(std::move(d)) {}
  drafter_t inner;
  int proposals[2] = {0, 0};
  std::vector<int> good_depths;
  static int source_of(std::size_t len) { return len % 7 < 4 ? 0 : 1; }
  void reset(int r) { inner.reset(r); }
  int draft_source(const draft_request& req) const { return source_of(req.tokens.size()); }
  void propose(const draft_request& req, draft_candidates& out) {
    inner.propose(req, out);
    const int k = source_of(req.tokens.size());
    ++proposals[k];
    if (k == 0) {
      good_depths.push_back(req.depth);
      return;
    }
    for (auto& t : out.chain) t.token = (t.token + 1) % cfg.vocab_size;
    for (auto& a : out.alternatives)
      for (auto& t : a) t.token = (t.token + 1) % cfg.vocab_size;
  }
};
static_assert(draft_sources_v<two_source_drafter> == 2 && draft_sources_v<drafter_t> == 1);

struct bad_source_drafter : two_source_drafter {
  using two_source_drafter::two_source_drafter;
  int draft_source(const draft_request&) const { return 2; }
};
}  // namespace

TEST_CASE("adaptive depth: a drafter's sources are planned apart (the accepted one deep, the rejected one not at all)",
          "[decoder][adaptive]") {
  const int n = 120;
  // each row costs half a target forward: a depth-d draft pays only while it adds more than d/2 tokens;
  // a prior acceptance of 0.8: both sources start out worth drafting
  planned_decoder<two_source_drafter> p([](target_t& m) { return two_source_drafter(drafter_t(m)); },
                                        curve_of({{1, 1.0}, {2, 1.5}, {9, 5.0}}), 0.8);
  auto& dec = p.dec;
  const auto out = dec.generate(prompt, {.max_new_tokens = n, .draft_depth = 5, .adaptive_depth = true});
  CHECK(out.tokens == greedy_of(prompt, n));
  const auto& d = dec.batch().drafter();
  INFO("proposals: accepted source " << d.proposals[0] << ", rejected source " << d.proposals[1]);
  // the rejected source: its estimate falls below the break-even after one to three misses, and it is
  // never asked again (18 and 1 proposals here). With one estimate for both (the same drafter without
  // draft_sources), the misses pull the shared estimate below the break-even within three steps and
  // neither source is asked again (1 and 2 proposals): the checks on source 0 below fail.
  CHECK(d.proposals[1] >= 1);
  CHECK(d.proposals[1] <= 3);
  // the accepted source: full depth once its first steps were accepted (a shorter depth only where
  // the request had fewer tokens left)
  REQUIRE(d.proposals[0] >= 10);
  int full = 0;
  for (const int depth : d.good_depths) full += depth == 5;
  CHECK(full >= d.proposals[0] - 4);

  // a source outside [0, draft_sources) is named before anything is drafted
  target_t t2(cfg, weights(), 1, 512);
  target_t s2(cfg, weights(), 1, 512);
  speculative_decoder<target_t, bad_source_drafter, chain_tree_builder, greedy_verifier> bad(
      t2, bad_source_drafter(drafter_t(s2)));
  CHECK_THROWS_WITH(bad.generate(prompt, {.max_new_tokens = 8, .draft_depth = 3}), Contains("draft_source"));
}

namespace {
// Two perfect sources that alternate step by step (so neither drafts twice in a row). Both propose the
// target's own greedy continuation, read from `text` (no model runs, so source 0 costs microseconds in
// any build); source 1 sleeps `sleep_ms` on its proposals after its first (its first pass is cheap),
// or, with `sleep_once`, on its second only.
struct alternating_drafter {
  static constexpr int draft_sources = 2;
  explicit alternating_drafter(std::vector<std::int32_t> t, int sleep = 200, bool once = false)
      : text(std::move(t)), sleep_ms(sleep), sleep_once(once) {}
  std::vector<std::int32_t> text;  //!< the prompt and its greedy continuation
  int sleep_ms;
  bool sleep_once;
  int asked = 0, proposals[2] = {0, 0};
  int current = 0;
  std::string depths;  //!< source 1's depths, in order
  void reset(int) {}
  int draft_source(const draft_request&) { return current = asked++ % 2; }
  void propose(const draft_request& req, draft_candidates& out) {
    out.clear();
    for (std::size_t i = req.tokens.size(); i < std::min(text.size(), req.tokens.size() + static_cast<std::size_t>(req.depth)); ++i)
      out.chain.push_back({text[i], 0.0f});
    if (current == 1) {
      if (sleep_once ? proposals[1] == 1 : proposals[1] > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
      depths += std::to_string(req.depth) + " ";
    }
    ++proposals[current];
  }
};
}  // namespace

TEST_CASE("adaptive depth: a source that never drafts twice in a row is priced by its resumed steps", "[decoder][adaptive]") {
  const int n = 80;
  // 10 ms a step, nearly flat in the rows: a perfect draft at depth 5 is worth 6 tokens for 12 ms plus
  // its drafting time (source 0: microseconds), but not for 200 ms more
  const auto want = greedy_of(prompt, n);
  std::vector<std::int32_t> text = prompt;
  text.insert(text.end(), want.begin(), want.end());
  planned_decoder<alternating_drafter> p([&](target_t&) { return alternating_drafter(text); },
                                         curve_of({{1, 10e-3}, {6, 12e-3}}));
  auto& dec = p.dec;
  const auto out = dec.generate(prompt, {.max_new_tokens = n, .draft_depth = 5, .adaptive_depth = true});
  CHECK(out.tokens == want);
  const auto& d = dec.batch().drafter();
  INFO("proposals: free source " << d.proposals[0] << ", 200 ms source " << d.proposals[1] << " of " << d.asked
                                 << " steps asked");
  CHECK(d.proposals[0] >= 6);
  // the first (cheap) pass and one measured 200 ms step; unpriced, it would draft on every other step
  CHECK(d.proposals[1] >= 1);
  CHECK(d.proposals[1] <= 3);
}

TEST_CASE("adaptive depth: a source priced out by one slow resumed step is probed on its own savings and recovers",
          "[decoder][adaptive]") {
  const int n = 120;
  const auto want = greedy_of(prompt, n);
  std::vector<std::int32_t> text = prompt;
  text.insert(text.end(), want.begin(), want.end());
  // a 50 ms step scale: a pause of the machine of a few ms inside a cheap draft (a loaded CI box) stays
  // far below a level's worth, so it cannot price a source out by itself (at 10 ms it could)
  // source 1 sleeps 1 s once, on its second proposal (its first resumed step), and drafts in
  // microseconds otherwise
  planned_decoder<alternating_drafter> p([&](target_t&) { return alternating_drafter(text, 1000, true); },
                                         curve_of({{1, 50e-3}, {6, 60e-3}}));
  auto& dec = p.dec;
  adaptive_depth_options o = dec.batch().adaptive_options();
  o.explore_budget = 1.0;  // the 1 s step sets aside 1 s for its source's probes
  dec.batch().set_adaptive_options(o);
  const auto out = dec.generate(prompt, {.max_new_tokens = n, .draft_depth = 5, .adaptive_depth = true});
  CHECK(out.tokens == want);
  const auto& d = dec.batch().drafter();
  INFO("proposals: source 0 " << d.proposals[0] << ", source 1 " << d.proposals[1] << " of " << d.asked
                                << " steps asked; source 1's depths: " << d.depths);
  // Both sources are perfect and cheap but for that one step. Before the fix source 1 drafted twice (with
  // 200 ms on a 10 ms scale):
  // its first resumed time stood as its steady price for good (later resumed steps were read as
  // catch-up against it and never recorded), and the savings of its slow step were spent by source 0's
  // cheap probes one level shallower (one purse per request).
  CHECK(d.proposals[0] >= 6);
  CHECK(d.proposals[1] * 3 >= d.asked / 2 * 2);
}
