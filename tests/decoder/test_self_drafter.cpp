// TokenSwift's self-drafter policy (draft/self_drafter.hpp) and tree builder
// (tokenswift_tree_builder) over a scripted self_draft_model: rows -> per-depth alternatives and
// chain (raw for greedy requests, after the request's logits processors when sampling), depth capped
// at gamma + 1, token reutilization from the generated text only (not the prompt, unless asked),
// n-grams starting with argmax p_0, reset; the builder's Cartesian + n-gram trie with sources and a
// budget; and the example self-draft model (examples/common/tokenswift_draft.hpp): with a budget
// covering the cache its l_0 is the target's own logits, with a small one it rebuilds on
// Algorithm 1's schedule. Bad inputs named.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "../../examples/common/tokenswift_draft.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/draft/chain_drafter.hpp"
#include "specdec/draft/longspec_drafter.hpp"
#include "specdec/draft/ngram_drafter.hpp"
#include "specdec/draft/self_drafter.hpp"
#include "specdec/decoder/tree_builders.hpp"

namespace {

using namespace specdec;

// gamma + 1 scripted rows over a vocabulary of 8: row d peaks at token (base + d) % 8 with logit 4,
// runner-up (base + d + 1) % 8 at 3, the rest 0. Records what it was asked.
struct scripted_model {
  using logit_type = float;
  int gamma = 2, base = 1, calls = 0, resets = 0;
  std::vector<std::int32_t> last_tokens;
  int vocab_size() const { return 8; }
  int num_draft_heads() const { return gamma; }
  void reset_draft(int) { ++resets; }
  void self_draft(int, std::span<const std::int32_t> tokens, std::span<float> rows) {
    ++calls;
    last_tokens.assign(tokens.begin(), tokens.end());
    REQUIRE(rows.size() == static_cast<std::size_t>(gamma + 1) * 8);
    std::fill(rows.begin(), rows.end(), 0.0f);
    for (int d = 0; d <= gamma; ++d) {
      rows[static_cast<std::size_t>(d) * 8 + (base + d) % 8] = 4.0f;
      rows[static_cast<std::size_t>(d) * 8 + (base + d + 1) % 8] = 3.0f;
    }
  }
};
static_assert(self_draft_model<scripted_model>);
static_assert(check_drafter<self_drafter<scripted_model>>());

std::vector<std::int32_t> tokens_of(const std::vector<draft_token>& s) {
  std::vector<std::int32_t> t;
  for (const auto& x : s) t.push_back(x.token);
  return t;
}

TEST_CASE("self_drafter: rows become per-depth alternatives and the chain", "[self_drafter]") {
  scripted_model m;
  self_drafter<scripted_model> d(m, {.ngram_candidates = 0});
  const std::vector<std::int32_t> toks{7, 7, 7};
  draft_candidates out;
  d.propose({.request = 0, .tokens = toks, .depth = 5, .width = 2}, out);
  CHECK(m.calls == 1);
  CHECK(m.last_tokens == toks);
  // depth capped at gamma + 1 = 3 rows.
  REQUIRE(out.chain.size() == 3);
  REQUIRE(out.alternatives.size() == 3);
  CHECK(tokens_of(out.chain) == std::vector<std::int32_t>{1, 2, 3});
  for (int dd = 0; dd < 3; ++dd) {
    CHECK(tokens_of(out.alternatives[dd]) == std::vector<std::int32_t>{1 + dd, 2 + dd});
    // log-softmax of [4, 3, 0 x 6]: 4 - log(e^4 + e^3 + 6).
    CHECK(out.alternatives[dd][0].logprob == Approx(4 - std::log(std::exp(4.0) + std::exp(3.0) + 6)).epsilon(1e-6));
  }
  CHECK(out.sequences.empty());
  // depth 2 < gamma + 1: two rows used; depth 0: no model call.
  d.propose({.request = 0, .tokens = toks, .depth = 2, .width = 1}, out);
  CHECK(tokens_of(out.chain) == std::vector<std::int32_t>{1, 2});
  CHECK(out.alternatives[0].size() == 1);
  d.propose({.request = 0, .tokens = toks, .depth = 0, .width = 1}, out);
  CHECK(out.empty());
  CHECK(m.calls == 2);
}

TEST_CASE("self_drafter: sampling requests rank the processed rows (contextual penalty)", "[self_drafter]") {
  scripted_model m;
  self_drafter<scripted_model> d(m, {.ngram_candidates = 0});
  // Token 1 (row 0's best) is in the penalty window: Eq. 3 divides its logit by theta = 2 (4 -> 2), so
  // token 2 (logit 3) becomes the best of row 0. Row 1's best is token 2 itself, now drafted at depth 0
  // and so in the window too: 4 -> 2, and token 3 (3) leads.
  const sampling_params sp{.temperature = 1.0f, .contextual_penalty = 2.0f, .penalty_window = 16};
  philox_stream rng(1, 2);
  const std::vector<std::int32_t> toks{5, 1};
  draft_candidates out;
  d.propose({.request = 0, .tokens = toks, .depth = 2, .width = 2, .sampling = &sp, .rng = &rng}, out);
  CHECK(tokens_of(out.chain) == std::vector<std::int32_t>{2, 3});
  // No sampling params: raw rows.
  d.propose({.request = 0, .tokens = toks, .depth = 2, .width = 2}, out);
  CHECK(tokens_of(out.chain) == std::vector<std::int32_t>{1, 2});
  // A greedy request with the penalty: its target row is the argmax of the penalized logits, so the
  // draft ranks by the penalties alone (Algorithm 1, line 8) and keeps its width: the filters (top_k 1
  // here) and the one-hot of temperature 0 are left out. (The rows were ranked raw before.)
  const sampling_params greedy{.temperature = 0.0f, .top_k = 1, .contextual_penalty = 2.0f, .penalty_window = 16};
  d.propose({.request = 0, .tokens = toks, .depth = 2, .width = 2, .sampling = &greedy, .rng = &rng}, out);
  CHECK(tokens_of(out.chain) == std::vector<std::int32_t>{2, 3});
  REQUIRE(out.alternatives.size() == 2);
  CHECK(tokens_of(out.alternatives[0]) == std::vector<std::int32_t>{2, 1});  // 3 against the penalized 2
}

TEST_CASE("self_drafter: token reutilization counts generated n-grams starting with argmax p0", "[self_drafter]") {
  scripted_model m;  // argmax p_0 = 1
  self_drafter<scripted_model> d(m, {.ngram_candidates = 2, .ngram = {.n = 3}});
  // The prompt holds (1, 5, 6) three times, but prompt n-grams are not counted.
  std::vector<std::int32_t> toks{1, 5, 6, 1, 5, 6, 1, 5, 6, 0};
  draft_candidates out;
  d.propose({.request = 0, .tokens = toks, .depth = 4, .width = 1}, out);
  CHECK(out.sequences.empty());
  CHECK(d.pool(0).tokens_seen() == 0);
  // Generated: 1 4 4 1 4 4 1 2 2 -> (1,4,4) twice, (1,2,2) once.
  for (std::int32_t t : {1, 4, 4, 1, 4, 4, 1, 2, 2}) toks.push_back(t);
  d.propose({.request = 0, .tokens = toks, .depth = 4, .width = 1}, out);
  CHECK(d.pool(0).tokens_seen() == 9);
  REQUIRE(out.sequences.size() == 2);
  CHECK(tokens_of(out.sequences[0]) == std::vector<std::int32_t>{1, 4, 4});
  CHECK(tokens_of(out.sequences[1]) == std::vector<std::int32_t>{1, 2, 2});
  // Truncated to the requested depth.
  d.propose({.request = 0, .tokens = toks, .depth = 2, .width = 1}, out);
  REQUIRE(out.sequences.size() == 2);
  CHECK(tokens_of(out.sequences[0]) == std::vector<std::int32_t>{1, 4});
  // reset forgets the pool and tells the model.
  d.reset(0);
  CHECK(m.resets == 1);
  d.propose({.request = 0, .tokens = toks, .depth = 4, .width = 1}, out);
  CHECK(out.sequences.empty());
  // First asked after the 9 tokens were generated (speculative_batch planned depth 0 before, e.g. with
  // adaptive depth): with the prompt's length said, the generated tokens are counted all the same
  // (they were taken as prompt before, and their n-grams never reached the pool; review helper-105).
  d.reset(0);
  d.propose({.request = 0, .tokens = toks, .depth = 4, .width = 1, .prompt_length = 10}, out);
  CHECK(d.pool(0).tokens_seen() == 9);
  REQUIRE(out.sequences.size() == 2);
  CHECK(tokens_of(out.sequences[0]) == std::vector<std::int32_t>{1, 4, 4});
  CHECK_THROWS_WITH(d.propose({.request = 0, .tokens = toks, .depth = 4, .width = 1, .prompt_length = -2}, out),
                    Catch::Contains("'req.prompt_length'"));
  // ngrams_from_prompt counts the prompt too.
  self_drafter<scripted_model> dp(m, {.ngram_candidates = 5, .ngram = {.n = 3}, .ngrams_from_prompt = true});
  dp.propose({.request = 0, .tokens = std::span<const std::int32_t>(toks).first(10), .depth = 3, .width = 1}, out);
  REQUIRE(out.sequences.size() == 1);
  CHECK(tokens_of(out.sequences[0]) == std::vector<std::int32_t>{1, 5, 6});
}

TEST_CASE("drafters' log_softmax: the vectorized float row equals the double computation", "[self_drafter]") {
  // 128263 entries: 16-lane blocks plus a 7-entry tail; some masked (-inf) as a processed row has.
  philox_stream rng(5, 6);
  std::vector<float> row(128263), got(row.size());
  for (auto& x : row) x = 30.0f * rng.uniform() - 10.0f;
  for (std::size_t i = 0; i < row.size(); i += 97) row[i] = -std::numeric_limits<float>::infinity();
  detail::log_softmax(std::span<const float>(row), std::span<float>(got));
  const std::vector<double> rd(row.begin(), row.end());
  std::vector<float> want(row.size());
  detail::log_softmax(std::span<const double>(rd), std::span<float>(want));
  double worst = 0, mass = 0;
  for (std::size_t i = 0; i < row.size(); ++i) {
    if (std::isinf(row[i])) {
      CHECK(std::isinf(got[i]));
      continue;
    }
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
    mass += std::exp(static_cast<double>(got[i]));
  }
  CHECK(worst < 1e-5);
  CHECK(mass == Approx(1.0).epsilon(1e-5));
  // A row with nothing above -inf has no token to propose: an error naming the caller (it was left as
  // it is, and a drafter then proposed a token of log-prob -inf), as a NaN or +inf logit is.
  std::vector<float> dead(20, -std::numeric_limits<float>::infinity()), dout(20);
  CHECK_THROWS_WITH(detail::log_softmax(std::span<const float>(dead), std::span<float>(dout), "caller"),
                    Catch::Matchers::Contains("caller") && Catch::Matchers::Contains("all -inf"));
  dead[7] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(detail::log_softmax(std::span<const float>(dead), std::span<float>(dout), "caller"),
                    Catch::Matchers::Contains("token 7"));
}

TEST_CASE("tokenswift_tree_builder: Cartesian heads then n-grams in one trie", "[self_drafter][tree]") {
  draft_candidates c;
  c.alternatives = {{{1, 0}, {2, 0}}, {{3, 0}, {4, 0}}};
  c.chain = {{1, 0}, {3, 0}};
  c.sequences = {{{1, 0}, {3, 0}, {5, 0}}, {{2, 0}, {6, 0}}, {{7, 0}}};
  tokenswift_tree_builder b({2, 2});
  token_tree t;
  b.build(c, t);
  // Cartesian: 1, 2, 1-3, 1-4, 2-3, 2-4 (6 nodes); n-grams add 1-3-5, 2-6, 7.
  CHECK(t.size() == 9);
  const std::vector<std::int32_t> src(b.sources().begin(), b.sources().end());
  CHECK(std::count(src.begin(), src.end(), 0) == 6);
  CHECK(std::count(src.begin(), src.end(), 1) == 3);
  for (int i = 0; i < t.size(); ++i) CHECK(t.parent(i) < i);
  // A budget of 7: the heads' 6 nodes, then the first n-gram's new node; the rest dropped.
  tokenswift_tree_builder small({2, 2}, 7);
  small.build(c, t);
  CHECK(t.size() == 7);
  CHECK(t.token(6) == 5);
  CHECK(t.depth(6) == 2);
  // Bad configurations are named.
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(tokenswift_tree_builder({2, 2}, -1), Contains("'max_nodes'") && Contains("got -1"));
  tokenswift_tree_builder zero({2, 0});
  CHECK_THROWS_WITH(zero.build(c, t), Contains("'widths[1]'") && Contains("got 0"));
  // a width past the depth this draft reaches is refused too (it was accepted until a deeper draft came)
  draft_candidates shallow;
  shallow.chain = {{3, -0.1f}};
  tokenswift_tree_builder deep_zero({2, 2, 0});
  CHECK_THROWS_WITH(deep_zero.build(shallow, t), Contains("'widths[2]'") && Contains("got 0"));
}

TEST_CASE("tokenswift_self_draft: full budget reproduces the target, small budget rebuilds on schedule", "[self_drafter]") {
  using namespace specdec::examples;
  const llama_config cfg{.vocab_size = 20, .hidden = 16, .layers = 2, .heads = 2, .kv_heads = 1, .head_dim = 64, .ffn_hidden = 16};
  const auto w = random_llama_weights<double>(cfg, 3, {.block_scale = 0.8});
  llama_model<double> target(cfg, w, 1, 200);
  std::vector<std::int32_t> toks{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7};
  target.prefill(0, toks);
  const residual_head_weights<double> none{};
  tokenswift_self_draft<double> full(target, {.budget = 200, .sink = 4}, none);
  std::vector<double> row(20), ref(20);
  full.self_draft(0, toks, row);
  target.forward(0, toks.back(), token_tree{}, ref);
  for (int v = 0; v < 20; ++v) CHECK(row[v] == Approx(ref[v]).margin(1e-12));
  // Budget 8 with 2 sinks: built at the first draft (one rebuild per layer), then Algorithm 1 line 5
  // asks again once more than |B| - |S| = 6 tokens have been placed since.
  tokenswift_self_draft<double> part(target, {.budget = 8, .sink = 2}, none);
  part.self_draft(0, toks, row);
  CHECK(part.rebuilds() == 2);
  CHECK(part.index(0).size(0) == 8);
  int rebuild_steps = 0;
  for (int s = 0; s < 14; ++s) {
    target.commit(0, {});  // the root of the last forward joins the cache
    toks.push_back(static_cast<std::int32_t>(s % 20));
    target.forward(0, toks.back(), token_tree{}, ref);
    const long before = part.rebuilds();
    part.self_draft(0, std::span<const std::int32_t>(toks).first(toks.size()), row);
    if (part.rebuilds() > before) {
      ++rebuild_steps;
      CHECK(part.rebuilds() - before == 2);
    }
    CHECK(part.index(1).size(0) == 8);
  }
  CHECK(rebuild_steps == 2);  // 14 appends: after the 7th and the 14th
  // The draft rows differ from the target's once the view is partial (it is an approximation).
  bool differs = false;
  for (int v = 0; v < 20; ++v) differs |= std::abs(row[v] - ref[v]) > 1e-9;
  CHECK(differs);
}

TEST_CASE("self_drafter and tokenswift_self_draft: bad inputs are named", "[self_drafter]") {
  using Catch::Matchers::Contains;
  scripted_model m;
  CHECK_THROWS_WITH(self_drafter<scripted_model>(m, {.ngram_candidates = -1}), Contains("'params.ngram_candidates'"));
  CHECK_THROWS_WITH(self_drafter<scripted_model>(m, {.ngram = {.n = 1}}), Contains("'params.ngram.n'"));
  self_drafter<scripted_model> d(m);
  CHECK_THROWS_WITH(d.pool(0), Contains("'request'") && Contains("has proposed") && Contains("got 0"));
  draft_candidates out;
  const std::vector<std::int32_t> toks{1};
  CHECK_THROWS_WITH(d.propose({.request = 0, .tokens = {}, .depth = 2}, out), Contains("'req.tokens.size()'"));
  CHECK_THROWS_WITH(d.propose({.request = 0, .tokens = toks, .depth = 2, .width = 0}, out), Contains("'req.width'"));
  CHECK_THROWS_WITH(d.propose({.request = -1, .tokens = toks, .depth = 2}, out), Contains("'req.request'"));
  // sampling_params are checked as process_logits checks them: a NaN or negative temperature is an
  // error, not greedy drafting (a review's finding)
  for (float t : {std::numeric_limits<float>::quiet_NaN(), -2.0f}) {
    const sampling_params bad{.temperature = t};
    CHECK_THROWS_WITH(d.propose({.request = 0, .tokens = toks, .depth = 2, .sampling = &bad}, out),
                      Contains("self_drafter::propose") && Contains("'params.temperature'"));
  }
  {  // tokens outside the model's vocabulary (V = 8) never reach the n-gram pool, so never come back
    // as candidates; from the prompt (ngrams_from_prompt) and from later steps alike
    self_drafter<scripted_model> dp(m, {.ngram_candidates = 2, .ngram = {.n = 3}, .ngrams_from_prompt = true});
    const std::vector<std::int32_t> bad{1, 1000000, -7, 2, 1, 1000000, -7, 3, 1};
    CHECK_THROWS_WITH(dp.propose({.request = 0, .tokens = bad, .depth = 3}, out),
                      Contains("self_drafter::propose") && Contains("'req.tokens") && Contains("got 1000000"));
    self_drafter<scripted_model> dg(m, {.ngram_candidates = 2, .ngram = {.n = 3}});
    std::vector<std::int32_t> grown{1, 2, 3};
    dg.propose({.request = 0, .tokens = grown, .depth = 3}, out);
    grown.push_back(-7);
    CHECK_THROWS_WITH(dg.propose({.request = 0, .tokens = grown, .depth = 3}, out), Contains("got -7"));
    grown.back() = 4;  // the same step with a good token goes through
    dg.propose({.request = 0, .tokens = grown, .depth = 3}, out);
    CHECK(dg.pool(0).tokens_seen() == 1);
  }
  m.gamma = -1;
  CHECK_THROWS_WITH(d.propose({.request = 0, .tokens = toks, .depth = 2}, out), Contains("'model.num_draft_heads()'"));
  m.gamma = std::numeric_limits<int>::max();  // gamma + 1 overflowed before
  CHECK_THROWS_WITH(d.propose({.request = 0, .tokens = toks, .depth = 2}, out), Contains("'model.num_draft_heads()'"));
  using namespace specdec::examples;
  const llama_config cfg{.vocab_size = 20, .hidden = 16, .layers = 1, .heads = 1, .kv_heads = 1, .head_dim = 64, .ffn_hidden = 16};
  llama_model<double> target(cfg, random_llama_weights<double>(cfg, 1), 1, 32);
  CHECK_THROWS_WITH(tokenswift_self_draft<double>(target, {.budget = 8, .sink = 2}, {.gamma = 1, .w = {}, .b = {}}), Contains("'heads.w.size()'"));
  tokenswift_self_draft<double> sd(target, {.budget = 8, .sink = 2}, {});
  std::vector<double> row(20);
  target.prefill(0, std::vector<std::int32_t>{1, 2, 3});
  CHECK_THROWS_WITH(sd.self_draft(0, std::vector<std::int32_t>{1, 2}, row), Contains("'tokens.size()"));
  CHECK_THROWS_WITH(sd.self_draft(0, std::vector<std::int32_t>{1, 2, 3}, std::span<double>(row).first(10)), Contains("'rows.size()'"));
}

}  // namespace

namespace {
// Drafter models that answer what a test sets: chain_drafter's and longspec_drafter's, every logit 0.
// (bad >= 0: that token's logit is `bad_value` instead.)
struct flat_chain_model {
  using logit_type = float;
  int V = 4, bad = -1, truncates = 0;
  float bad_value = std::numeric_limits<float>::quiet_NaN();
  int vocab_size() const { return V; }
  int max_requests() const { return 1; }
  void prefill(int, std::span<const std::int32_t>) {}
  void forward(int, std::int32_t, const token_tree&, std::span<float> l) {
    std::fill(l.begin(), l.end(), 0.0f);
    if (bad >= 0) l[static_cast<std::size_t>(bad)] = bad_value;
  }
  void commit(int, std::span<const std::int32_t>) {}
  int cache_length(int) const { return 0; }
  void truncate(int, int) { ++truncates; }
};
struct flat_longspec_model {
  using logit_type = float;
  int V = 4, absorbed_ = 0, bad = -1;
  int vocab_size() const { return V; }
  int absorbed(int) const { return absorbed_; }
  void reset(int) { absorbed_ = 0; }
  void step(int, std::int32_t, int, bool commit, std::span<float> l) {
    absorbed_ += commit ? 1 : 0;
    std::fill(l.begin(), l.end(), 0.0f);
    if (bad >= 0) l[static_cast<std::size_t>(bad)] = std::numeric_limits<float>::infinity();
  }
  void discard_speculation(int) {}
};
}  // namespace

TEST_CASE("chain_drafter and longspec_drafter: an empty vocabulary and bad sampling_params are named",
          "[self_drafter][validation]") {
  // (A review found vocab_size() == 0 dereferencing an empty top-k, and a NaN temperature drafting
  // greedily while process_logits rejects it.)
  using Catch::Matchers::Contains;
  const std::vector<std::int32_t> toks{1};
  draft_candidates out;
  flat_chain_model cm{.V = 0};
  chain_drafter<flat_chain_model> cd(cm);
  CHECK_THROWS_WITH(cd.propose({.request = 0, .tokens = toks, .depth = 2}, out),
                    Contains("chain_drafter::propose") && Contains("'model.vocab_size()'"));
  flat_longspec_model lm{.V = 0};
  longspec_drafter<flat_longspec_model> ld(lm);
  CHECK_THROWS_WITH(ld.propose({.request = 0, .tokens = toks, .depth = 2}, out),
                    Contains("longspec_drafter::propose") && Contains("'model.vocab_size()'"));
  cm.V = lm.V = 4;
  philox_stream rng(1, 2);
  for (const sampling_params& bad : {sampling_params{.temperature = std::numeric_limits<float>::quiet_NaN()},
                                     sampling_params{.temperature = -1.0f}, sampling_params{.temperature = 1.0f, .top_p = 0.0f}}) {
    const draft_request req{.request = 0, .tokens = toks, .depth = 2, .sampling = &bad, .rng = &rng};
    CHECK_THROWS_WITH(cd.propose(req, out), Contains("chain_drafter::propose") && Contains("'params."));
    CHECK_THROWS_WITH(ld.propose(req, out), Contains("longspec_drafter::propose") && Contains("'params."));
  }
  const sampling_params good{.temperature = 0.7f};
  cd.propose({.request = 0, .tokens = toks, .depth = 2, .sampling = &good, .rng = &rng}, out);
  CHECK(out.chain.size() == 2);
  // multi-draft mode: a draft_sampling value that is no enumerator
  chain_drafter<flat_chain_model> md(cm, multi_draft_params{.mode = static_cast<draft_sampling>(7)});
  CHECK_THROWS_WITH(md.propose({.request = 0, .tokens = toks, .depth = 2, .width = 2, .rng = &rng}, out),
                    Contains("'multi_draft_params.mode'"));
  // and bad logits in multi-draft mode drop the speculation on the way out, as the chain mode does
  chain_drafter<flat_chain_model> md2(cm, multi_draft_params{});
  cm.bad = 1;
  cm.truncates = 0;
  CHECK_THROWS_WITH(md2.propose({.request = 0, .tokens = toks, .depth = 2, .width = 2, .rng = &rng}, out),
                    Contains("token 1"));
  CHECK(cm.truncates == 1);
  cm.bad = -1;
}

TEST_CASE("model drafters: non-finite draft logits are named; request slots are bounded", "[self_drafter][validation]") {
  using Catch::Matchers::Contains;
  const std::vector<std::int32_t> toks{1};
  draft_candidates out;
  flat_chain_model cm{.V = 6, .bad = 4};
  chain_drafter<flat_chain_model> cd(cm);
  CHECK_THROWS_WITH(cd.propose({.request = 0, .tokens = toks, .depth = 2}, out),
                    Contains("chain_drafter::propose") && Contains("'draft logits'") && Contains("token 4"));
  CHECK(cm.truncates == 1);  // the speculation was dropped on the way out
  cm.bad_value = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH(cd.propose({.request = 0, .tokens = toks, .depth = 2}, out), Contains("token 4"));
  cm.bad = -1;
  cd.propose({.request = 0, .tokens = toks, .depth = 2}, out);
  CHECK(out.chain.size() == 2);
  flat_longspec_model lm{.V = 6, .bad = 2};
  longspec_drafter<flat_longspec_model> ld(lm);
  CHECK_THROWS_WITH(ld.propose({.request = 0, .tokens = toks, .depth = 2}, out),
                    Contains("longspec_drafter::propose") && Contains("'draft logits'") && Contains("token 2"));
  // the double path of the drafters' log-softmax
  std::vector<float> lp(3);
  const std::vector<double> all_masked(3, -std::numeric_limits<double>::infinity());
  CHECK_THROWS_WITH(detail::log_softmax(std::span<const double>(all_masked), std::span<float>(lp), "me"),
                    Contains("me") && Contains("above -inf"));
  const std::vector<double> with_nan{0.0, std::nan(""), 1.0};
  CHECK_THROWS_WITH(detail::log_softmax(std::span<const double>(with_nan), std::span<float>(lp), "me"),
                    Contains("token 1"));
  // a log-prob below float's range (a -1e39 logit) is -inf, by definition rather than by the
  // double -> float conversion's undefined behaviour
  const std::vector<double> far{0.0, -1e39, -3.0};
  detail::log_softmax(std::span<const double>(far), std::span<float>(lp), "me");
  CHECK(lp[1] == -std::numeric_limits<float>::infinity());
  CHECK(lp[0] == Approx(-std::log1p(std::exp(-3.0))));
  CHECK(lp[2] == Approx(-3.0 - std::log1p(std::exp(-3.0))));
  // slots
  scripted_model sm;
  self_drafter<scripted_model> sd(sm);
  CHECK_THROWS_WITH(sd.propose({.request = max_request_slot + 1, .tokens = toks, .depth = 2}, out), Contains("'req.request'"));
  CHECK_THROWS_WITH((ngram_drafter{}.propose({.request = std::numeric_limits<int>::max(), .tokens = toks}, out)),
                    Contains("'req.request'") && Contains("max_request_slot"));
}
