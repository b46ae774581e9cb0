// speculative_decoder behaviour: EOS and stop sequences stop where the reference output first has them,
// streaming callbacks see exactly the result, ragged batches equal per-request decoding, statistics
// are consistent, and bad options are rejected with messages naming the argument.
#include <catch2/catch.hpp>

#include <functional>
#include <limits>
#include <string>

#include "../../examples/common/llama.hpp"
#include "small_model.hpp"
#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/draft/chain_drafter.hpp"

using namespace specdec;
using namespace specdec::examples;

namespace {
using small_model::cfg;
using small_model::greedy_of;
using small_model::weights;
using decoder = speculative_decoder<llama_model<double>, ngram_drafter, trie_tree_builder, greedy_verifier>;
const std::vector<std::int32_t> prompt{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};
}  // namespace

TEST_CASE("decoder stops on EOS, stop sequences and max tokens", "[decoder]") {
  const auto want = greedy_of(prompt, 120);
  llama_model<double> target(cfg, weights(), 1, 512);
  decoder d(target);
  const auto eos = want[40];
  const auto first = static_cast<std::size_t>(std::find(want.begin(), want.end(), eos) - want.begin());
  const auto a = d.generate(prompt, {.max_new_tokens = 120, .eos = eos});
  CHECK(a.reason == stop_reason::eos);
  CHECK(a.tokens == std::vector<std::int32_t>(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(first) + 1));
  const std::vector<std::int32_t> stop(want.begin() + 50, want.begin() + 53);
  std::size_t at = 0;
  for (std::size_t i = 3; i <= want.size(); ++i)
    if (std::equal(stop.begin(), stop.end(), want.begin() + static_cast<std::ptrdiff_t>(i - 3))) {
      at = i;
      break;
    }
  const auto b = d.generate(prompt, {.max_new_tokens = 120, .stop_sequences = {stop}});
  CHECK(b.reason == stop_reason::stop_sequence);
  CHECK(b.tokens == std::vector<std::int32_t>(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(at)));
  const auto c = d.generate(prompt, {.max_new_tokens = 37});
  CHECK(c.reason == stop_reason::max_tokens);
  CHECK(c.tokens == std::vector<std::int32_t>(want.begin(), want.begin() + 37));
  CHECK(d.generate(prompt, {.max_new_tokens = 0}).tokens.empty());
  std::vector<std::int32_t> ranged;
  for (auto t : d.generate(prompt, {.max_new_tokens = 10})) ranged.push_back(t);
  CHECK(ranged == std::vector<std::int32_t>(want.begin(), want.begin() + 10));
}

TEST_CASE("decoder streams tokens and keeps consistent statistics", "[decoder]") {
  llama_model<double> target(cfg, weights(), 1, 512);
  decoder d(target);
  std::vector<std::int32_t> streamed;
  int calls = 0;
  const auto out = d.generate(prompt, {.max_new_tokens = 200, .draft_depth = 5,
                                       .on_tokens = [&](int r, std::span<const std::int32_t> t) {
                                         CHECK(r == 0);
                                         CHECK(!t.empty());
                                         streamed.insert(streamed.end(), t.begin(), t.end());
                                         ++calls;
                                       }});
  CHECK(streamed == out.tokens);
  const auto& s = d.stats();
  CHECK(calls == s.steps);
  CHECK(s.emitted >= 200);
  CHECK(s.emitted == s.steps + s.accepted);
  CHECK(s.tau() >= 1.0);
  CHECK(s.alpha() >= 0.0);
  CHECK(s.alpha() <= 1.0);
  CHECK(s.accepted <= s.tree_nodes);
  CHECK(s.target_s > 0.0);
  CHECK(d.metrics().steps() == s.steps);  // verify/metrics.hpp sees the same run
  CHECK(d.metrics().tau() == Approx(s.tau()));
  CHECK(d.metrics().accepted_per_step().size() == static_cast<std::size_t>(s.steps));
  CHECK(d.metrics().ms(decode_phase::target) > 0.0);
  d.reset_stats();
  CHECK(d.stats().steps == 0);
  CHECK(d.metrics().steps() == 0);
}

TEST_CASE("decoder runs ragged batches: each request equals its own greedy decoding", "[decoder]") {
  const std::vector<std::vector<std::int32_t>> prompts{prompt, {7, 7, 1}, {2, 4, 8, 16 % 32, 31, 30, 2, 4, 8}};
  llama_model<double> target(cfg, weights(), 3, 512);
  decoder d(target);
  const auto outs = d.generate_batch(prompts, {.max_new_tokens = 90});
  REQUIRE(outs.size() == 3);
  for (std::size_t i = 0; i < prompts.size(); ++i) CHECK(outs[i].tokens == greedy_of(prompts[i], 90));
}

TEST_CASE("decoder rejects bad arguments", "[decoder][errors]") {
  llama_model<double> target(cfg, weights(), 1, 512);
  decoder d(target);
  REQUIRE_THROWS_WITH(d.generate(prompt, {.max_new_tokens = -1}), Catch::Contains("options.max_new_tokens"));
  REQUIRE_THROWS_WITH(d.generate(prompt, {.draft_depth = -2}), Catch::Contains("options.draft_depth"));
  REQUIRE_THROWS_WITH(d.generate(prompt, {.draft_width = 0}), Catch::Contains("options.draft_width"));
  REQUIRE_THROWS_WITH(d.generate(prompt, {.sampling = {.temperature = 0.7f}}), Catch::Contains("options.sampling.temperature"));
  REQUIRE_THROWS_WITH(d.generate(std::vector<std::int32_t>{}), Catch::Contains("prompts[i]"));
  REQUIRE_THROWS_WITH(d.generate(std::vector<std::int32_t>{1, 99}), Catch::Contains("prompts[i][j]"));
  REQUIRE_THROWS_WITH(d.generate(prompt, {.stop_sequences = {{}}}), Catch::Contains("options.stop_sequences"));
  const std::vector<std::vector<std::int32_t>> two{prompt, prompt};
  REQUIRE_THROWS_WITH(d.generate_batch(two, {}), Catch::Contains("prompts.size()"));
  REQUIRE_THROWS_AS(d.generate(prompt, {.sampling = {.temperature = -1.0f}}), specdec::invalid_argument);
}

TEST_CASE("on_tokens callbacks cannot break the run: a nested generate, an added request, a step and an abort are refused", "[decoder][errors]") {
  llama_model<double> target(cfg, weights(), 4, 512);
  decoder d(target);
  // a callback that runs the decoder again (the batch is empty then: both requests finish in step 1)
  const std::vector<std::vector<std::int32_t>> two{prompt, prompt};
  generation_options nested{.max_new_tokens = 1};
  nested.on_tokens = [&](int, std::span<const std::int32_t>) { (void)d.generate(prompt, {.max_new_tokens = 1}); };
  REQUIRE_THROWS_WITH(d.generate_batch(two, nested), Catch::Contains("not called from its own on_tokens callback"));
  CHECK(d.batch().active() == 0);
  // a callback that adds a request the decoder did not start
  generation_options adds{.max_new_tokens = 4};
  bool added = false;
  adds.on_tokens = [&](int, std::span<const std::int32_t>) {
    if (!added) added = true, (void)d.batch().add_request(999, prompt, {.max_new_tokens = 4});
  };
  REQUIRE_THROWS_WITH(d.generate(prompt, adds), Catch::Contains("nor from speculative_decoder's on_tokens callback"));
  CHECK(d.batch().active() == 0);
  CHECK_FALSE(d.batch().abort(999));  // refused before it was added
  // Session 56: a callback that stepped the batch dropped that step's tokens (the output was no
  // longer the target's greedy output), and one that aborted the request ended it early as
  // max_tokens; both are refused now, and the batch is left empty.
  for (const bool abort : {false, true}) {
    generation_options steps{.max_new_tokens = 12};
    steps.on_tokens = [&](int, std::span<const std::int32_t>) {
      if (abort) (void)d.batch().abort(0);
      else (void)d.batch().step();
    };
    REQUIRE_THROWS_WITH(d.generate(prompt, steps), Catch::Contains("nor from speculative_decoder's on_tokens callback"));
    CHECK(d.batch().active() == 0);
  }
  CHECK(d.generate(prompt, {.max_new_tokens = 12}).tokens == greedy_of(prompt, 12));  // the batch still works
  // the callback sees the step's tokens, which the result then holds in the same order
  std::vector<std::int32_t> seen;
  generation_options streams{.max_new_tokens = 12};
  streams.on_tokens = [&](int, std::span<const std::int32_t> t) { seen.insert(seen.end(), t.begin(), t.end()); };
  CHECK(d.generate(prompt, streams).tokens == seen);
}

namespace {
// Policies whose declared traits (decoder/pairing.hpp) promise more than they deliver in a run: a
// builder that declares chains but branches, and a drafter able to draw i.i.d. drafts that gives two
// deterministic sequences without q rows this time (as longspec_drafter does in beam mode).
struct branching_chain_builder {
  static constexpr tree_shape produces = tree_shape::chain;
  cartesian_tree_builder cartesian{{2, 2, 1}};
  void build(const draft_candidates& c, token_tree& out) { cartesian.build(c, out); }
};
struct sequences_as_iid_drafter {
  static constexpr draft_output provides = draft_output::q_rows | draft_output::iid_drafts;
  void reset(int) {}
  void propose(const draft_request&, draft_candidates& out) {
    out.clear();
    out.chain = {{1, 0.0f}, {2, 0.0f}};
    out.sequences = {{{3, 0.0f}, {4, 0.0f}}};
  }
};
}  // namespace

TEST_CASE("verifiers that need a chain or multi-draft tree reject other trees: by type, else at run time", "[decoder][errors]") {
  // Chain speculative sampling verifies chains only, and multi-draft sampling needs children drawn from
  // the draft's q (a Cartesian tree's runner-up siblings were not). Where the policy types say so,
  // speculative_decoder does not compile (check_policy_pairing; its messages are checked by
  // tests/decoder/compile_fail/policy_pairing.cpp) ...
  using cd = chain_drafter<llama_model<double>>;
  static_assert(!policy_pairing<cd, cartesian_tree_builder, chain_speculative_verifier>);
  static_assert(!policy_pairing<cd, cartesian_tree_builder, multi_draft_verifier>);
  static_assert(policy_pairing<cd, multi_draft_tree_builder, multi_draft_verifier>);
  // ... and what the types cannot say still fails loudly at run time rather than emitting from a wrong
  // distribution.
  llama_model<double> target(cfg, weights(), 1, 512);
  const generation_options opts{.max_new_tokens = 8, .sampling = {.temperature = 0.8f}, .seed = 3, .draft_depth = 3, .draft_width = 3};
  speculative_decoder<llama_model<double>, ngram_drafter, branching_chain_builder, chain_speculative_verifier> chain_on_tree(target);
  const std::vector<std::int32_t> repetitive{1, 2, 3, 1, 2, 4, 1, 2, 5, 1, 2};  // n-gram matches give alternatives
  REQUIRE_THROWS_WITH(chain_on_tree.generate(repetitive, opts), Catch::Contains("verify_chain_speculative") && Catch::Contains("a chain"));
  speculative_decoder<llama_model<double>, sequences_as_iid_drafter, multi_draft_tree_builder, multi_draft_verifier> multi_on_topk(target);
  REQUIRE_THROWS_WITH(multi_on_topk.generate(prompt, opts), Catch::Contains("verify_multi_draft") && Catch::Contains("q > 0"));
}

TEST_CASE("tree builders and the n-gram drafter shape their output as documented", "[decoder]") {
  draft_candidates c;
  c.chain = {{5, -0.1f}, {6, -0.2f}, {7, -0.3f}};
  c.alternatives = {{{5, -0.1f}, {8, -1.0f}}, {{6, -0.2f}, {9, -2.0f}}, {{7, -0.3f}}};
  c.sequences = {{{5, 0}, {6, 0}, {1, 0}}, {{2, 0}}};
  token_tree t;
  chain_tree_builder{.max_depth = 2}.build(c, t);
  CHECK(t.size() == 2);
  CHECK(t.parent(1) == 0);
  trie_tree_builder{}.build(c, t);
  CHECK(t.size() == 5);  // 5-6-7, 5-6-1 shares 5-6, and 2
  CHECK(t.find_child(1, 1) == 3);
  trie_tree_builder(4).build(c, t);  // budget: the chain fits, 5-6-1 shares 5-6 and adds 1, 2 is cut
  CHECK(t.size() == 4);
  CHECK(t.find_child(-1, 2) == -1);
  trie_tree_builder(0, 1).build(c, t);  // depth limit 1: the first tokens 5 and 2
  CHECK(t.size() == 2);
  CHECK(t.max_depth() == 0);
  REQUIRE_THROWS_WITH(trie_tree_builder(0, -1), Catch::Contains("max_depth"));
  cartesian_tree_builder cart({2, 2, 1});
  cart.build(c, t);
  CHECK(t.size() == 2 + 4 + 4);
  ngram_drafter ng;
  const std::vector<std::int32_t> ctx{1, 2, 3, 4, 1, 2, 5, 1, 2};
  ng.propose({.request = 0, .tokens = ctx, .depth = 3, .width = 2}, c);
  CHECK(c.chain == std::vector<draft_token>{{5, 0}, {1, 0}, {2, 0}});  // most recent "1 2" match first
  REQUIRE(c.sequences.size() == 1);
  CHECK(c.sequences[0] == std::vector<draft_token>{{3, 0}, {4, 0}, {1, 0}});
  ng.propose({.request = 0, .tokens = std::vector<std::int32_t>{1, 2, 3}, .depth = 3}, c);
  CHECK(c.empty());
}

TEST_CASE("cartesian / tokenswift tree builders refuse a NaN or +inf log-prob whatever the order of repeated tokens",
          "[decoder][errors]") {
  using Catch::Contains;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const auto refused = [](const std::string& arg) {  // one matcher (Catch's && keeps references)
    return Contains("specdec::cartesian_tree_builder::build: argument '" + arg +
                    "': expected a log-probability that is not NaN or +inf (-inf = impossible)");
  };
  draft_candidates c;
  c.chain = {{5, -0.5f}};
  token_tree t;
  // A repeated token was merged with std::max before any check: max(-0.5, NaN) kept -0.5 and the tree
  // was built; max(NaN, -0.5) kept NaN and cartesian_tree threw. Both orders are refused now.
  c.alternatives = {{{5, -0.5f}, {5, nan}, {7, -1.0f}}};
  REQUIRE_THROWS_WITH(cartesian_tree_builder({3}).build(c, t), refused("alternatives[0][1].logprob"));
  REQUIRE_THROWS_WITH(tokenswift_tree_builder({3}).build(c, t), refused("alternatives[0][1].logprob"));
  c.alternatives = {{{5, nan}, {5, -0.5f}, {7, -1.0f}}};
  REQUIRE_THROWS_WITH(cartesian_tree_builder({3}).build(c, t), refused("alternatives[0][0].logprob"));
  c.alternatives = {{{5, -0.5f}, {5, inf}, {7, -1.0f}}};
  REQUIRE_THROWS_WITH(cartesian_tree_builder({3}).build(c, t), refused("alternatives[0][1].logprob"));
  // every alternative the builder scans is checked, also one past the width
  c.alternatives = {{{5, -0.5f}, {7, -1.0f}, {9, nan}}};
  REQUIRE_THROWS_WITH(cartesian_tree_builder({2}).build(c, t), refused("alternatives[0][2].logprob"));
  // the chain token where it stands in for missing alternatives
  c.alternatives = {{{5, -0.5f}}};
  c.chain = {{5, -0.5f}, {6, nan}};
  REQUIRE_THROWS_WITH(cartesian_tree_builder({1, 1}).build(c, t), refused("chain[1].logprob"));
  // -inf (impossible) stays a legal log-prob: the repeat merges to the better one
  c.chain = {{5, -0.5f}};
  for (const auto& alts : {std::vector<draft_token>{{5, -0.5f}, {5, -inf}, {7, -1.0f}},
                           std::vector<draft_token>{{5, -inf}, {5, -0.5f}, {7, -1.0f}}}) {
    c.alternatives = {alts};
    cartesian_tree_builder({3}).build(c, t);
    REQUIRE(t.size() == 2);
    CHECK(t.logprob(0) == -0.5f);
    CHECK(t.token(1) == 7);
  }
}

TEST_CASE("cape_tree_builder: the chain plus S(p) runner-up siblings per depth, in CAPE's order (GLIDE §4.2)", "[decoder][cape]") {
  draft_candidates c;
  // Confidences 0.9, 0.5, 0.2 fall in the §4.2 bins (.8,1], (.3,.6], (0,.3]: K = 1, 5, 7.
  c.chain = {{10, std::log(0.9f)}, {11, std::log(0.5f)}, {12, std::log(0.2f)}};
  for (int d = 0; d < 3; ++d) {
    c.alternatives.emplace_back();
    c.alternatives.back().push_back(c.chain[static_cast<std::size_t>(d)]);
    for (int j = 0; j < 9; ++j) c.alternatives.back().push_back({20 + 10 * d + j, -3.0f - 0.1f * static_cast<float>(j)});
  }
  cape_tree_builder cape;
  token_tree t;
  cape.build(c, t);
  REQUIRE(t.size() == 3 + 1 + 5 + 7);
  CHECK(t.tokens()[0] == 10);
  CHECK(t.parent(1) == 0);
  CHECK(t.parent(2) == 1);
  CHECK(t.tokens()[3] == 20);  // X_1 = {20}: a sibling of chain token 10, under the root
  CHECK(t.parent(3) == -1);
  for (int i = 4; i < 9; ++i) CHECK((t.parent(i) == 0 && t.tokens()[static_cast<std::size_t>(i)] == 30 + i - 4));  // X_2 under 10
  for (int i = 9; i < 16; ++i) CHECK((t.parent(i) == 1 && t.tokens()[static_cast<std::size_t>(i)] == 40 + i - 9));  // X_3 under 11
  cape_proposal p;  // the same proposal through tree/cape.hpp: its Mask_CAPE is the tree's ancestor mask
  cape_expand_ranked<draft_token>(c.chain, c.alternatives, cape_schedule::glide_bins(), 0, p);
  CHECK(p.mask() == t.ancestor_mask());
  cape_tree_builder capped(8);  // the deepest expansions go first: X_3 entirely, X_2 to 4
  capped.build(c, t);
  CHECK(t.size() == 8);
  CHECK(t.parent(7) == 0);
  cape_tree_builder short_chain(2);  // fewer slots than the chain: the chain is cut
  short_chain.build(c, t);
  CHECK(t.size() == 2);
  c.alternatives.resize(1);  // a drafter with alternatives for the first depth only
  cape.build(c, t);
  CHECK(t.size() == 3 + 1);
  REQUIRE_THROWS_WITH(cape_tree_builder(-1), Catch::Contains("max_tokens"));
  cape_tree_builder table(0, cape_schedule::glide_appendix_table());  // Algorithm 1: K = S[floor(10 p)] - 1 = 3, 5, 7
  c.alternatives.resize(3, c.alternatives[0]);  // 9 candidates per depth, none equal to chain tokens 11, 12
  table.build(c, t);
  CHECK(t.size() == 3 + 3 + 5 + 7);
}

TEST_CASE("multi_draft_tree_builder keeps each draft as its own branch", "[decoder][multi_draft]") {
  draft_candidates c;
  c.chain = {{5, 0}, {6, 0}};
  c.sequences = {{{5, 0}, {7, 0}}, {{2, 0}}};
  token_tree t;
  multi_draft_tree_builder{}.build(c, t);
  REQUIRE(t.size() == 5);  // no merging: the two drafts starting with 5 stay separate (i.i.d. draws)
  CHECK(t.tokens()[0] == 5);
  CHECK(t.tokens()[2] == 5);
  CHECK(t.parent(2) == -1);
  CHECK(t.parent(3) == 2);
  CHECK(t.parent(4) == -1);
  multi_draft_tree_builder{.max_depth = 1}.build(c, t);
  CHECK(t.size() == 3);
  REQUIRE_THROWS_WITH(multi_draft_tree_builder{.max_depth = -1}.build(c, t), Catch::Contains("max_depth"));
}

TEST_CASE("multi_draft_verifier takes each node's q row from the draft it came from", "[decoder][multi_draft]") {
  constexpr int V = 4;
  constexpr float inf = std::numeric_limits<float>::infinity();
  draft_candidates c;
  c.vocab = V;
  c.chain = {{0, 0}, {1, 0}};
  c.q = {0.25f, 0.25f, 0.25f, 0.25f, /* after 0 */ 0, 1, 0, 0};
  c.sequences = {{{2, 0}, {3, 0}}};
  c.sequence_q = {{0.25f, 0.25f, 0.25f, 0.25f, /* after 2 */ 0, 0, 0, 1}};
  token_tree t;
  multi_draft_tree_builder{}.build(c, t);  // nodes 0:0 1:1 (chain), 2:2 3:3 (second draft)
  // Target: root -> 2 surely, after 2 -> 3 surely, after 3 -> 1 surely; rows after 0 / 1 uniform.
  const std::vector<float> logits{-inf, -inf, 0, -inf, 0, 0, 0, 0, 0, 0, 0, 0, -inf, -inf, -inf, 0, -inf, 0, -inf, -inf};
  for (auto mode : {draft_sampling::with_replacement, draft_sampling::without_replacement}) {
    c.sampled_as = mode;
    for (std::uint32_t s = 0; s < 20; ++s) {
      philox_stream rng(s, 1);
      verify_result res;
      multi_draft_verifier v;
      v.verify({t, make_view<2>(logits.data(), {5, V}), c, rng}, res);
      // 0 is rejected (p = 0), 2 accepted, then 3 (its row is the second draft's, not the chain's), bonus 1
      CHECK(res.accepted == std::vector<std::int32_t>{2, 3});
      CHECK(res.bonus == 1);
    }
  }
  // A deterministic draft (no q rows) with two different first tokens: one-hot rows cannot have drawn
  // both, so the verifier refuses instead of verifying with the wrong law.
  draft_candidates det;
  det.chain = {{0, 0}};
  det.sequences = {{{1, 0}}};
  trie_tree_builder{}.build(det, t);
  philox_stream rng(1, 1);
  verify_result res;
  multi_draft_verifier v;
  REQUIRE_THROWS_WITH(v.verify({t, make_view<2>(logits.data(), {3, V}), det, rng}, res), Catch::Contains("draft_probs"));
}

TEST_CASE("multi-draft chain drafter draws k drafts with their q rows and restores the draft cache", "[decoder][multi_draft]") {
  llama_model<double> small(cfg, weights(), 1, 512);
  const sampling_params greedy{.temperature = 0.0f};
  for (auto mode : {draft_sampling::with_replacement, draft_sampling::without_replacement}) {
    chain_drafter<llama_model<double>> d(small, multi_draft_params{.mode = mode});
    d.reset(0);
    philox_stream rng(7, 3);
    draft_candidates c;
    d.propose({.request = 0, .tokens = prompt, .depth = 3, .width = 4, .sampling = &greedy, .rng = &rng}, c);
    CHECK(small.cache_length(0) == static_cast<int>(prompt.size()) - 1);  // speculation rolled back
    REQUIRE(c.sampled_as == mode);
    REQUIRE(c.chain.size() == 3);
    REQUIRE(c.sequences.size() == 3);
    REQUIRE(c.sequence_q.size() == 3);
    CHECK(c.q.size() == 3u * cfg.vocab_size);
    std::vector<std::int32_t> firsts{c.chain[0].token};
    for (std::size_t j = 0; j < 3; ++j) {
      CHECK(c.sequences[j].size() == 3);
      REQUIRE(c.sequence_q[j].size() == 3u * cfg.vocab_size);
      CHECK(std::equal(c.q.begin(), c.q.begin() + cfg.vocab_size, c.sequence_q[j].begin()));  // same root row
      for (std::size_t dd = 0; dd < 3; ++dd)  // each token was drawn from its own row: q > 0
        CHECK(c.sequence_q[j][dd * cfg.vocab_size + static_cast<std::size_t>(c.sequences[j][dd].token)] > 0.0f);
      firsts.push_back(c.sequences[j][0].token);
    }
    double sum = 0;
    for (int v = 0; v < cfg.vocab_size; ++v) sum += c.q[static_cast<std::size_t>(v)];
    CHECK(sum == Approx(1.0).epsilon(1e-5));
    if (mode == draft_sampling::without_replacement) {
      std::sort(firsts.begin(), firsts.end());
      CHECK(std::adjacent_find(firsts.begin(), firsts.end()) == firsts.end());  // distinct first tokens
    }
    REQUIRE_THROWS_WITH(d.propose({.request = 0, .tokens = prompt, .depth = 3, .width = 2}, c),
                        Catch::Contains("draft_request.rng"));
    CHECK(small.cache_length(0) == static_cast<int>(prompt.size()) - 1);  // nothing half-done
  }
}

TEST_CASE("multi-draft q rows stay a distribution at a tiny accepted greedy_temperature", "[decoder][multi_draft]") {
  // l / 1e-38 overflows to +-inf for every logit above ~3.4e-0; the rows were NaN (inf - inf) before
  // the drafter used the processors' overflow-safe temperature step.
  llama_model<double> small(cfg, weights(), 1, 512);
  const sampling_params greedy{.temperature = 0.0f};
  chain_drafter<llama_model<double>> d(small, multi_draft_params{.greedy_temperature = 1e-38f});
  d.reset(0);
  philox_stream rng(7, 3);
  draft_candidates c;
  d.propose({.request = 0, .tokens = prompt, .depth = 2, .width = 3, .sampling = &greedy, .rng = &rng}, c);
  REQUIRE(c.q.size() == 2u * cfg.vocab_size);
  for (std::size_t row = 0; row < 2; ++row) {
    double sum = 0;
    bool finite = true;
    for (int v = 0; v < cfg.vocab_size; ++v) {
      const float x = c.q[row * cfg.vocab_size + static_cast<std::size_t>(v)];
      finite = finite && std::isfinite(x) && x >= 0.0f;
      sum += x;
    }
    CHECK(finite);
    CHECK(sum == Approx(1.0).epsilon(1e-5));
  }
}

TEST_CASE("sampled output depends on the request id, not on the slot or the batch", "[decoder][rng]") {
  using sampling_decoder = speculative_decoder<llama_model<double>, ngram_drafter, trie_tree_builder,
                                               sample_and_match_verifier>;
  const generation_options opt{.max_new_tokens = 40, .sampling = {.temperature = 0.9f}, .seed = 11};
  const std::vector<std::int32_t> other{7, 7, 1, 2};
  llama_model<double> one(cfg, weights(), 1, 512);
  sampling_decoder alone(one);
  const auto a = alone.generate(prompt, opt, 7).tokens;
  llama_model<double> three(cfg, weights(), 3, 512);
  sampling_decoder batched(three);
  const std::vector<std::vector<std::int32_t>> prompts{other, prompt, other};
  const std::vector<std::uint32_t> ids{0, 7, 3};
  const auto outs = batched.generate_batch(prompts, opt, ids);
  CHECK(outs[1].tokens == a);  // slot 1 with id 7 == slot 0 with id 7, whatever runs beside it
  // Without ids the slot is the id: the prompt in slot 1 draws as id 1, which differs from id 7 here.
  const auto by_slot = batched.generate_batch(prompts, opt);
  CHECK(by_slot[1].tokens == alone.generate(prompt, opt, 1).tokens);
  CHECK(by_slot[1].tokens != a);
  REQUIRE_THROWS_WITH(batched.generate_batch(prompts, opt, std::vector<std::uint32_t>{1, 2}),
                      Catch::Contains("request_ids"));
  REQUIRE_THROWS_WITH(batched.generate_batch(prompts, opt, std::vector<std::uint32_t>{1, 2, 1}),
                      Catch::Contains("distinct ids"));
}

// What a user's drafter and verifier hand back is checked before the target sees it or a token is
// emitted (found by a session-25 audit: an out-of-vocabulary bonus was emitted, draft tokens reached
// the target's forward unchecked, and a verifier's accepted list was committed before it was read).
namespace user_policy_checks {
constexpr int toy_vocab = 16;
struct toy_target {  // logits favour "previous token + 1"
  using logit_type = float;
  int forwards = 0, commits = 0;
  int vocab_size() const { return toy_vocab; }
  int max_requests() const { return 1; }
  void prefill(int, std::span<const std::int32_t>) {}
  void forward(int, std::int32_t root, const token_tree& tree, std::span<float> logits) {
    ++forwards;
    for (int r = 0; r <= tree.size(); ++r) {
      const int last = r == 0 ? root : tree.token(r - 1);
      REQUIRE((last >= 0 && last < toy_vocab));  // what the checks guarantee a target
      for (int v = 0; v < toy_vocab; ++v) logits[static_cast<std::size_t>(r * toy_vocab + v)] = v == (last + 1) % toy_vocab ? 2.f : 0.f;
    }
  }
  void commit(int, std::span<const std::int32_t>) { ++commits; }
};
struct counting_drafter {  // proposes last+1, last+2, ...; `bad` replaces the second token
  std::int32_t bad = 1;
  void reset(int) {}
  void propose(const draft_request& req, draft_candidates& out) {
    out.clear();
    std::int32_t last = req.tokens.back();
    for (int d = 0; d < req.depth; ++d) {
      last = (last + 1) % toy_vocab;
      out.chain.push_back({d == 1 && bad != 1 ? bad : last, 0.f});
    }
  }
};
std::function<void(verify_result&)> edit;  // the edit under test (the decoder copies its verifier)
struct editing_verifier {  // greedy, then `edit`
  static constexpr bool is_lossless_for_sampling = false;
  void verify(const verify_input& in, verify_result& out) {
    out = verify_greedy(in.tree, in.logits);
    if (edit) edit(out);
  }
};
}  // namespace user_policy_checks

TEST_CASE("decoder checks a user drafter's tokens and a user verifier's result", "[decoder][errors]") {
  using namespace user_policy_checks;
  using Catch::Matchers::Contains;
  const std::vector<std::int32_t> p{1, 2, 3};
  const generation_options opt{.max_new_tokens = 8, .draft_depth = 3};
  toy_target target;
  speculative_decoder<toy_target, counting_drafter, chain_tree_builder, editing_verifier> d(target);
  const auto good = d.generate(p, opt);  // control: the toy target's own greedy continuation
  CHECK(good.tokens == std::vector<std::int32_t>{4, 5, 6, 7, 8, 9, 10, 11});
  for (const std::int32_t bad : {toy_vocab, -2}) {
    d.drafter().bad = bad;
    const int forwards = target.forwards;
    REQUIRE_THROWS_WITH(d.generate(p, opt), Contains("drafted tree") && Contains("vocab = 16"));
    CHECK(target.forwards == forwards);  // the target never saw the token
  }
  d.drafter().bad = 1;
  for (const std::int32_t bonus : {-1, toy_vocab}) {
    edit = [bonus](verify_result& r) { r.bonus = bonus; };
    const int commits = target.commits;
    REQUIRE_THROWS_WITH(d.generate(p, {.max_new_tokens = 1, .draft_depth = 3}), Contains("verify_result.bonus"));
    CHECK(target.commits == commits);
  }
  edit = [](verify_result& r) { r.accepted = {0, 1, 50}; };
  REQUIRE_THROWS_WITH(d.generate(p, opt), Contains("verify_result.accepted") && Contains("root path"));
  edit = [](verify_result& r) { r.accepted = {1, 0}; };
  REQUIRE_THROWS_WITH(d.generate(p, opt), Contains("verify_result.accepted"));
  edit = nullptr;
  CHECK(d.generate(p, opt).tokens == good.tokens);  // usable again after the errors
}

namespace user_policy_checks {
// Proposes last+1, ... with uniform q rows over `q_vocab` tokens, `q_rows` of them (-1: one per token).
struct q_drafter {
  int q_vocab = toy_vocab, q_rows = -1;
  void reset(int) {}
  void propose(const draft_request& req, draft_candidates& out) {
    out.clear();
    std::int32_t last = req.tokens.back();
    for (int d = 0; d < req.depth; ++d) out.chain.push_back({last = (last + 1) % toy_vocab, 0.f});
    const int rows = q_rows < 0 ? req.depth : q_rows;
    out.vocab = q_vocab;
    out.q.assign(static_cast<std::size_t>(rows * q_vocab), 1.0f / static_cast<float>(q_vocab));
  }
};
}  // namespace user_policy_checks

TEST_CASE("chain_speculative_verifier refuses q rows of the wrong shape (it read them as one-hot)", "[decoder][errors]") {
  using namespace user_policy_checks;
  using Catch::Matchers::Contains;
  const std::vector<std::int32_t> p{1, 2, 3};
  const generation_options opt{.max_new_tokens = 6, .sampling = {.temperature = 1.0f}, .draft_depth = 3};
  toy_target target;
  speculative_decoder<toy_target, q_drafter, chain_tree_builder, chain_speculative_verifier> d(target);
  CHECK(d.generate(p, opt).tokens.size() == 6);  // control: well-formed rows
  d.drafter().q_vocab = toy_vocab / 2;
  REQUIRE_THROWS_WITH(d.generate(p, opt), Contains("'draft.q_rows'") && Contains("16 (the vocabulary)"));
  d.drafter().q_vocab = toy_vocab;
  d.drafter().q_rows = 1;
  REQUIRE_THROWS_WITH(d.generate(p, opt), Contains("'draft.q_rows'") && Contains("[>= 3 (the chain)"));
  d.drafter().q_rows = 0;  // no rows: a deterministic drafter, one-hot q
  CHECK(d.generate(p, opt).tokens.size() == 6);
}
