// What the decoder does when a user's component fails or misbehaves part-way (session-55 review, each
// reproduced first): a prefill that throws inside generate_batch (and, session 65, a release that throws
// in its cleanup; session 66, a drafter reset or an options copy that throws in add_request, a root
// outside a shrunk vocabulary at calibration), a commit that throws after other
// requests of the step committed, a drafter that proposes more levels than asked, an allocation that
// fails after the target committed (session 67); and the step cost curve between points near DBL_MAX.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <span>
#include <stdexcept>
#include <vector>

#include "common/alloc_counter.hpp"
#include "specdec/decoder/adaptive_depth.hpp"
#include "specdec/decoder/speculative_decoder.hpp"

using namespace specdec;
using Catch::Contains;

namespace {
// Next token = (context token + 1) % 16, so a chain of the next tokens is always accepted. Prefill or
// commit of a chosen slot throws; commits past `cap` tokens are counted.
struct counting_target {
  using logit_type = float;
  int slots = 2, cap = 1000;
  int throw_prefill_slot = -1, throw_commit_slot = -1;
  std::vector<int> len = std::vector<int>(2, 0);
  int over_capacity = 0;
  int vocab_size() const { return 16; }
  int max_requests() const { return slots; }
  void prefill(int r, std::span<const std::int32_t> prompt) {
    if (r == throw_prefill_slot) throw std::runtime_error("prefill failed");
    len[static_cast<std::size_t>(r)] = static_cast<int>(prompt.size()) - 1;
  }
  void forward(int, std::int32_t root, const token_tree& t, std::span<float> logits) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    logits[static_cast<std::size_t>((root + 1) % 16)] = 10;
    for (int i = 0; i < t.size(); ++i) logits[static_cast<std::size_t>((i + 1) * 16 + (t.token(i) + 1) % 16)] = 10;
  }
  void commit(int r, std::span<const std::int32_t> accepted) {
    if (r == throw_commit_slot) throw std::runtime_error("commit failed");
    auto& l = len[static_cast<std::size_t>(r)];
    l += 1 + static_cast<int>(accepted.size());
    if (l > cap) ++over_capacity;
  }
};
// Proposes the right next tokens, `extra` more than the request's depth.
struct next_token_drafter {
  int extra = 0;
  void reset(int) {}
  void propose(const draft_request& q, draft_candidates& out) {
    out.clear();
    std::int32_t t = q.tokens.back();
    for (int d = 0; d < q.depth + extra; ++d) out.chain.push_back({t = (t + 1) % 16, -0.1f});
  }
};
// counting_target with a release that throws while throw_release is set.
struct releasing_target : counting_target {
  bool throw_release = true;
  int releases = 0;
  void release(int) {
    ++releases;
    if (throw_release) throw std::runtime_error("release failed");
  }
};
}  // namespace

TEST_CASE("generate_batch's cleanup aborts every request when the target's release throws", "[decoder][errors]") {
  // The cleanup aborted the requests one by one and stopped at the first release that threw: the
  // other requests stayed active (the next generate was refused) and the release error replaced the
  // callback's (session-65 review).
  releasing_target tg;
  speculative_decoder<releasing_target, next_token_drafter, chain_tree_builder, greedy_verifier> dec(tg);
  generation_options opt;
  opt.max_new_tokens = 8;
  opt.on_tokens = [](int, std::span<const std::int32_t>) { throw std::runtime_error("callback failed"); };
  const std::vector<std::vector<std::int32_t>> two{{1, 2}, {3, 4}};
  REQUIRE_THROWS_WITH(dec.generate_batch(two, opt), Contains("callback failed"));
  CHECK(dec.batch().active() == 0);
  CHECK(tg.releases == 2);
  tg.throw_release = false;
  opt.on_tokens = {};
  const auto r = dec.generate_batch(two, opt);
  REQUIRE(r.size() == 2);
  CHECK(r[0].tokens.size() == 8);
}

TEST_CASE("generate_batch after a step whose release threw returns only its own requests' tokens",
          "[decoder][errors]") {
  // The step keeps a finished request's output for the next step when a release throws (no token is
  // lost to an engine driving the batch); generate_batch gives up on the call, so nothing of it may
  // reach the next call, whose ids (0, 1 by default) are the same.
  releasing_target tg;
  speculative_decoder<releasing_target, next_token_drafter, chain_tree_builder, greedy_verifier> dec(tg);
  const std::vector<std::vector<std::int32_t>> two{{1, 2}, {3, 4}};
  generation_options opt;
  opt.max_new_tokens = 1;  // both finish in the first step, whose first release throws
  REQUIRE_THROWS_WITH(dec.generate_batch(two, opt), Contains("release failed"));
  CHECK(dec.batch().active() == 0);
  tg.throw_release = false;
  opt.max_new_tokens = 3;
  const auto r = dec.generate_batch(two, opt);
  REQUIRE(r.size() == 2);
  CHECK(r[0].tokens == std::vector<std::int32_t>{3, 4, 5});  // only this call's tokens
  CHECK(r[1].tokens == std::vector<std::int32_t>{5, 6, 7});
}

namespace {
// next_token_drafter that throws for the request in slot fail_slot.
struct slot_failing_drafter : next_token_drafter {
  int fail_slot = -1;
  void propose(const draft_request& q, draft_candidates& out) {
    if (q.request == fail_slot) throw std::runtime_error("drafter failed");
    next_token_drafter::propose(q, out);
  }
};
// Greedy verification that throws for a tree whose first token is fail_token.
struct token_failing_verifier {
  static constexpr bool is_lossless_for_sampling = false;
  std::int32_t fail_token = -1;
  void verify(const verify_input& in, verify_result& out) const {
    if (in.tree.size() > 0 && in.tree.token(0) == fail_token) throw std::runtime_error("verifier failed");
    out = verify_greedy(in.tree, in.logits);
  }
};
}  // namespace

TEST_CASE("failed_request names the request whose own part of a step threw; aborting it lets the others go on",
          "[decoder][errors]") {
  // Before, an engine got the exception only: one request whose drafter, verifier or commit failed
  // every time failed the whole batch on every retry, and the messages named no request.
  const std::vector<std::int32_t> a{1, 2}, b{3, 4}, c{5, 6};
  auto run = [&](auto& batch, std::uint32_t bad, const char* what) {
    batch.add_request(10, a, {.max_new_tokens = 6, .draft_depth = 2});
    batch.add_request(11, b, {.max_new_tokens = 6, .draft_depth = 2});
    batch.add_request(12, c, {.max_new_tokens = 6, .draft_depth = 2});
    REQUIRE_THROWS_WITH(batch.step(), Contains(what));
    REQUIRE(batch.failed_request().has_value());
    CHECK(*batch.failed_request() == bad);
    CHECK(batch.abort(bad));
    std::map<std::uint32_t, std::vector<std::int32_t>> got;
    while (batch.active() > 0) {
      for (const auto& o : batch.step()) got[o.id].insert(got[o.id].end(), o.tokens.begin(), o.tokens.end());
      CHECK_FALSE(batch.failed_request().has_value());  // a step that did not throw
    }
    for (const auto& [id, prompt] : {std::pair{10u, a}, std::pair{11u, b}, std::pair{12u, c}}) {
      if (id == bad) continue;
      std::vector<std::int32_t> want;
      for (std::int32_t t = prompt.back(); want.size() < 6;) want.push_back(t = (t + 1) % 16);
      CHECK(got[id] == want);  // every token of the others, the failed step's none lost
    }
  };
  {  // its drafter
    counting_target tg;
    tg.slots = 3, tg.len.resize(3);
    speculative_batch<counting_target, slot_failing_drafter, chain_tree_builder, greedy_verifier> batch(tg);
    batch.drafter().fail_slot = 1;
    run(batch, 11u, "drafter failed");
  }
  {  // its verification (the other two verified in parallel)
    counting_target tg;
    tg.slots = 3, tg.len.resize(3);
    speculative_batch<counting_target, next_token_drafter, chain_tree_builder, token_failing_verifier> batch(
        tg, next_token_drafter{}, chain_tree_builder{}, token_failing_verifier{.fail_token = 7});  // c's first draft
    run(batch, 12u, "verifier failed");
  }
  {  // its commit (a target without commit_batch)
    counting_target tg;
    tg.slots = 3, tg.len.resize(3);
    tg.throw_commit_slot = 0;
    speculative_batch<counting_target, next_token_drafter, chain_tree_builder, greedy_verifier> batch(tg);
    run(batch, 10u, "commit failed");
  }
}

namespace {
// next_token_drafter whose reset throws while throw_reset is set.
struct resetting_drafter : next_token_drafter {
  bool throw_reset = true;
  void reset(int) {
    if (throw_reset) throw std::runtime_error("reset failed");
  }
};
}  // namespace

TEST_CASE("add_request releases the prefilled slot when the drafter's reset throws", "[decoder][errors]") {
  // The target's prefill had run and the slot stayed free without a release: a target that holds
  // memory per prefilled slot (pages) leaked it on every such failure (session-65 review lead).
  releasing_target tg;
  tg.throw_release = false;
  speculative_batch<releasing_target, resetting_drafter, chain_tree_builder, greedy_verifier> b(tg);
  REQUIRE_THROWS_WITH(b.add_request(7, std::vector<std::int32_t>{1, 2}), Contains("reset failed"));
  CHECK(tg.releases == 1);
  CHECK(b.active() == 0);
  CHECK(b.free_slots() == 2);
  tg.throw_release = true;  // a release that fails too: the drafter's error is the one reported
  REQUIRE_THROWS_WITH(b.add_request(7, std::vector<std::int32_t>{1, 2}), Contains("reset failed"));
  CHECK(tg.releases == 2);
  tg.throw_release = false;
  b.drafter().throw_reset = false;
  CHECK(b.add_request(7, std::vector<std::int32_t>{1, 2}) == 0);
  CHECK(b.active() == 1);
  CHECK(tg.releases == 2);
}

namespace {
// A callable whose copy throws while copy_throws is set (one that must duplicate a resource).
bool copy_throws = false;
struct throwing_copy_callback {
  throwing_copy_callback() = default;
  throwing_copy_callback(const throwing_copy_callback&) {
    if (copy_throws) throw std::runtime_error("callback copy failed");
  }
  void operator()(int, std::span<const std::int32_t>) const {}
};
}  // namespace

TEST_CASE("add_request whose options fail to copy changes nothing", "[decoder][errors]") {
  // The options and the prompt were copied after the prefill, with the slot already marked used but
  // not counted: the slot was never released, contains(id) was true with active() == 0, the next step
  // drafted from an empty token list (a segfault under ASan), and speculative_decoder's cleanup made
  // active() -1, refusing every later generate (session-66 review).
  releasing_target tg;
  tg.throw_release = false;
  generation_options opt;
  opt.max_new_tokens = 4;
  opt.on_tokens = throwing_copy_callback{};
  {
    speculative_batch<releasing_target, next_token_drafter, chain_tree_builder, greedy_verifier> b(tg);
    copy_throws = true;
    REQUIRE_THROWS_WITH(b.add_request(5, std::vector<std::int32_t>{1, 2}, opt), Contains("callback copy failed"));
    copy_throws = false;
    CHECK_FALSE(b.contains(5));
    CHECK(b.active() == 0);
    CHECK(b.free_slots() == 2);
    CHECK(tg.len[0] == 0);  // no prefill ran
    CHECK(b.add_request(5, std::vector<std::int32_t>{1, 2}, opt) == 0);
    const auto out = b.step();
    REQUIRE(out.size() == 1);
    CHECK(out[0].tokens == std::vector<std::int32_t>{3, 4, 5, 6});
  }
  speculative_decoder<releasing_target, next_token_drafter, chain_tree_builder, greedy_verifier> dec(tg);
  copy_throws = true;
  REQUIRE_THROWS_WITH(dec.generate(std::vector<std::int32_t>{1, 2}, opt), Contains("callback copy failed"));
  copy_throws = false;
  CHECK(dec.batch().active() == 0);
  opt.on_tokens = {};
  CHECK(dec.generate(std::vector<std::int32_t>{1, 2}, opt).tokens == std::vector<std::int32_t>{3, 4, 5, 6});
}

namespace {
// counting_target whose vocabulary the test can shrink; counts forwards given a root outside it.
struct shrinking_target : counting_target {
  int vocab = 32, bad_roots = 0, forwards = 0;
  int vocab_size() const { return vocab; }
  void forward(int, std::int32_t root, const token_tree& t, std::span<float> logits) {
    ++forwards;
    if (root < 0 || root >= vocab) ++bad_roots;
    std::fill(logits.begin(), logits.end(), 0.0f);
    for (int i = 0; i <= t.size(); ++i) logits[static_cast<std::size_t>(i * vocab)] = 10;
  }
};
}  // namespace

TEST_CASE("calibration refuses a root outside the target's vocabulary before a forward", "[decoder][errors]") {
  // With adaptive_depth, the first step's cost calibration ran the target's forward with the request's
  // last token before the step's root check: 9 forwards with root 20 for a vocabulary shrunk to 16
  // (session-66 review). calibrate_costs had no root check at all.
  for (const bool adaptive : {false, true}) {
    INFO("adaptive_depth " << adaptive);
    shrinking_target tg;
    speculative_batch<shrinking_target, next_token_drafter, chain_tree_builder, greedy_verifier> b(tg);
    generation_options opt;
    opt.max_new_tokens = 8;
    opt.adaptive_depth = adaptive;
    b.add_request(1, std::vector<std::int32_t>{3, 20}, opt);
    tg.vocab = 16;
    CHECK_THROWS_WITH(b.step(), Contains("'root (the request's last token)'"));
    CHECK_THROWS_WITH(b.calibrate_costs(1), Contains("'root (the request's last token)'"));
    CHECK(tg.forwards == 0);
    CHECK(tg.bad_roots == 0);
  }
}

TEST_CASE("generate_batch whose second prefill throws leaves the decoder usable", "[decoder][errors]") {
  counting_target tg;
  tg.throw_prefill_slot = 1;
  speculative_decoder<counting_target, next_token_drafter, chain_tree_builder, greedy_verifier> dec(tg);
  generation_options opt;
  opt.max_new_tokens = 4;
  const std::vector<std::vector<std::int32_t>> two{{1, 2}, {3, 4}};
  REQUIRE_THROWS_WITH(dec.generate_batch(two, opt), Contains("prefill failed"));
  CHECK(dec.batch().active() == 0);  // request 0, added before the throw, aborted
  tg.throw_prefill_slot = -1;
  const auto r = dec.generate_batch(two, opt);
  REQUIRE(r.size() == 2);
  CHECK(r[0].tokens == std::vector<std::int32_t>{3, 4, 5, 6});
  CHECK(r[1].tokens == std::vector<std::int32_t>{5, 6, 7, 8});
}

TEST_CASE("a commit that throws after other requests committed loses none of their tokens", "[decoder][errors]") {
  counting_target tg;
  speculative_batch<counting_target, next_token_drafter, chain_tree_builder, greedy_verifier> b(tg);
  generation_options opt;
  opt.max_new_tokens = 6;
  opt.draft_depth = 4;
  opt.eos = 5;
  b.add_request(10, std::vector<std::int32_t>{1, 2}, opt);  // slot 0: 3 4 5, then eos
  b.add_request(11, std::vector<std::int32_t>{7, 8}, opt);  // slot 1
  tg.throw_commit_slot = 1;
  REQUIRE_THROWS_WITH(b.step(), Contains("commit failed"));
  CHECK(b.tokens(10).size() == 5);  // committed: 1 2 3 4 5
  const int slot0_len = tg.len[0];
  tg.throw_commit_slot = -1;
  const auto find = [](const std::vector<step_output>& v, std::uint32_t id) {
    const auto it = std::find_if(v.begin(), v.end(), [&](const step_output& o) { return o.id == id; });
    REQUIRE(it != v.end());
    return *it;
  };
  const auto second = b.step();
  const std::vector<step_output> got(second.begin(), second.end());
  REQUIRE(got.size() == 2);
  const step_output o10 = find(got, 10), o11 = find(got, 11);
  // request 10: the failed step's tokens, reported now, finished by its eos, without another forward
  CHECK(o10.tokens == std::vector<std::int32_t>{3, 4, 5});
  CHECK(o10.finished);
  CHECK(o10.reason == stop_reason::eos);
  CHECK(tg.len[0] == slot0_len);
  // request 11 had not committed: its step runs now (4 drafts and the bonus, 5 of its 6 tokens)
  CHECK(o11.tokens == std::vector<std::int32_t>{9, 10, 11, 12, 13});
  CHECK_FALSE(o11.finished);
  const auto third = b.step();
  REQUIRE(third.size() == 1);
  CHECK(third[0].id == 11);
  CHECK(third[0].tokens == std::vector<std::int32_t>{14});
  CHECK(third[0].finished);
  CHECK(third[0].reason == stop_reason::max_tokens);
  CHECK(b.active() == 0);
}

namespace {
// counting_target whose commit, while `starve` is set, makes every later allocation fail (until the test
// ends the scope): what a step does with memory exhausted right after the target committed.
struct starving_target : counting_target {
  bool starve = false;
  void commit(int r, std::span<const std::int32_t> accepted) {
    counting_target::commit(r, accepted);
    if (starve) specdec_test::allocations_left().store(0);
  }
};
}  // namespace

TEST_CASE("an allocation that fails after the target committed leaves the tokens with the target", "[decoder][errors]") {
  // step appended the committed tokens to the request's list after the commit, growing it: a
  // bad_alloc there left the target's cache ahead of the list, and the next step drafted from the
  // stale list and fed the target a root it already had (session-66 lead). The list's room is now
  // reserved before the first commit.
  starving_target tg;
  speculative_batch<starving_target, next_token_drafter, chain_tree_builder, greedy_verifier> b(tg);
  generation_options opt;
  opt.max_new_tokens = 10;
  opt.draft_depth = 4;
  b.add_request(3, std::vector<std::int32_t>{1, 2}, opt);  // the list holds just the prompt
  tg.starve = true;
  bool threw = false;
  try {
    (void)b.step();
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  specdec_test::allocations_left().store(-1);
  tg.starve = false;
  CHECK(threw);  // the step's outputs need memory
  // The target holds every token but the last one it emitted (counting_target's len), and so does the
  // request: 1 2, then 3 4 5 6 and the bonus 7.
  REQUIRE(b.tokens(3).size() == 7);
  CHECK(static_cast<int>(b.tokens(3).size()) == tg.len[0] + 1);
  std::vector<std::int32_t> out;
  while (b.active() > 0)
    for (const step_output& o : b.step()) out.insert(out.end(), o.tokens.begin(), o.tokens.end());
  CHECK(out == std::vector<std::int32_t>{3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
}

TEST_CASE("a drafter that proposes more levels than asked is refused before the target forwards", "[decoder][errors]") {
  counting_target tg;
  tg.cap = 2 + 3;  // the prompt and max_new_tokens: all a request can need
  next_token_drafter dr{.extra = 10};
  speculative_decoder<counting_target, next_token_drafter, chain_tree_builder, greedy_verifier> dec(tg, dr);
  generation_options opt;
  opt.max_new_tokens = 3;
  opt.draft_depth = 1;
  REQUIRE_THROWS_WITH(dec.generate(std::vector<std::int32_t>{1, 2}, opt),
                      Contains("'drafted tree': expected at most the step's draft depth 1 of levels"));
  CHECK(tg.over_capacity == 0);
  CHECK(dec.batch().active() == 0);
  dec.drafter().extra = 0;  // the same decoder, a well-behaved drafter
  CHECK(dec.generate(std::vector<std::int32_t>{1, 2}, opt).tokens == std::vector<std::int32_t>{3, 4, 5});
}

TEST_CASE("step_cost_curve interpolates finitely between points near DBL_MAX", "[decoder][adaptive]") {
  constexpr double big = 1.7e308;
  step_cost_curve down;
  down.record(1, big);
  down.record(5, 0.0);
  CHECK(std::isfinite(down.seconds(3.0)));
  CHECK(down.seconds(3.0) == Approx(big / 2));
  step_cost_curve up;
  up.record(1, 0.0);
  up.record(5, big);
  CHECK(up.seconds(3.0) == Approx(big / 2));
  CHECK(up.seconds(1 << 24) == std::numeric_limits<double>::max());  // extended past the last point, capped
  step_cost_curve plain;  // ordinary costs keep their values
  plain.record(1, 2e-3);
  plain.record(4, 3.5e-3);
  CHECK(plain.seconds(2.0) == Approx(2.5e-3));
}
