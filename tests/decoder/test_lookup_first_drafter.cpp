// lookup_first_drafter: the lookup's proposal wherever the context's last min_ngram+ tokens occurred
// before (the model drafter then not run), the model drafter's everywhere else, with the same request;
// reset reaches both; draft_source names the part propose then uses; its pairing traits. Losslessness over a real draft model is in
// test_lossless_longspec_greedy.cpp.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/draft/lookup_first_drafter.hpp"
#include "specdec/draft/longspec_drafter.hpp"
#include "specdec/draft/ngram_drafter.hpp"

using namespace specdec;
using V = std::vector<std::int32_t>;

namespace {

// A model drafter that records its calls and proposes a chain naming the call: depth tokens 100 + calls.
struct recording_drafter {
  struct log {
    std::vector<int> resets;
    std::vector<V> contexts;  // tokens of each propose() call
    std::vector<int> depths, widths, requests;
  };
  log* calls;
  void reset(int r) { calls->resets.push_back(r); }
  void propose(const draft_request& req, draft_candidates& out) {
    out.clear();
    calls->contexts.emplace_back(req.tokens.begin(), req.tokens.end());
    calls->depths.push_back(req.depth);
    calls->widths.push_back(req.width);
    calls->requests.push_back(req.request);
    for (int d = 0; d < req.depth; ++d) out.chain.push_back({100 + static_cast<std::int32_t>(calls->contexts.size()), -0.5f});
  }
};
static_assert(check_drafter<recording_drafter>());
static_assert(check_drafter<lookup_first_drafter<recording_drafter>>());
static_assert(draft_sources_v<lookup_first_drafter<recording_drafter>> == 2);  // 0: the lookup, 1: the model

// A drafter declaring both outputs (as longspec_drafter does).
struct q_drafter : recording_drafter {
  static constexpr draft_output provides = draft_output::q_rows | draft_output::iid_drafts;
};

}  // namespace

TEST_CASE("lookup_first_drafter: the lookup's proposal where it matches, else the model's", "[decoder][ngram]") {
  int lookup_calls = 0, model_calls = 0;
  for (std::uint64_t seed = 0; seed < 24; ++seed) {
    philox_stream rng(seed, 41);
    recording_drafter::log log;
    const int min_n = 1 + static_cast<int>(seed % 4), max_n = min_n + static_cast<int>(seed / 4 % 3);
    const ngram_drafter params{.max_ngram = max_n, .min_ngram = min_n, .search_window = seed % 5 == 4 ? 30 : 0};
    lookup_first_drafter<recording_drafter> d(recording_drafter{&log}, params);
    ngram_drafter oracle = params;  // its own index: the same proposals as the combinator's lookup
    constexpr int slots = 2;
    std::vector<V> streams(slots);
    const auto vocab = 3 + static_cast<std::uint32_t>(seed % 6);
    draft_candidates got, want;
    std::int64_t want_lookup = 0, want_model = 0;
    for (int step = 0; step < 200; ++step) {
      const int r = static_cast<int>(rng.below(slots));
      auto& t = streams[static_cast<std::size_t>(r)];
      for (std::uint32_t i = 0, k = 1 + rng.below(4); i < k; ++i) t.push_back(static_cast<std::int32_t>(rng.below(vocab)));
      const draft_request req{.request = r, .tokens = t, .depth = static_cast<int>(rng.below(6)),
                              .width = 1 + static_cast<int>(rng.below(3))};
      const std::size_t before = log.contexts.size();
      // draft_source, asked on half the steps before propose (as speculative_batch does), runs the
      // lookup only and changes nothing that propose then does
      const bool ask = req.depth >= 1 && rng.below(2) == 0;
      const int source = ask ? d.draft_source(req) : -1;
      CHECK(log.contexts.size() == before);
      d.propose(req, got);
      oracle.propose(req, want);
      if (ask) CHECK(source == (want.empty() ? 1 : 0));
      INFO("seed " << seed << " step " << step << " L " << t.size() << " depth " << req.depth);
      if (req.depth <= 0) {
        CHECK(got.empty());
        CHECK(log.contexts.size() == before);  // never asked for nothing
      } else if (!want.empty()) {
        REQUIRE(got.chain == want.chain);
        REQUIRE(got.sequences == want.sequences);
        REQUIRE(got.alternatives == want.alternatives);
        CHECK(log.contexts.size() == before);  // the model drafter did not run
        ++want_lookup, ++lookup_calls;
      } else {
        REQUIRE(log.contexts.size() == before + 1);  // the model drafter ran, on the same request
        CHECK(log.contexts.back() == t);
        CHECK(log.depths.back() == req.depth);
        CHECK(log.widths.back() == req.width);
        CHECK(log.requests.back() == r);
        REQUIRE(got.chain.size() == static_cast<std::size_t>(req.depth));
        CHECK(got.chain.front().token == 100 + static_cast<std::int32_t>(log.contexts.size()));
        ++want_model, ++model_calls;
      }
      if (rng.below(50) == 0) {  // a new prompt in slot r: both parts forget it
        d.reset(r);
        oracle.reset(r);
        CHECK(log.resets.back() == r);
        t.clear();
      }
    }
    CHECK(d.lookup_steps() == want_lookup);
    CHECK(d.model_steps() == want_model);
  }
  CHECK(lookup_calls > 500);  // both branches ran often
  CHECK(model_calls > 500);
}

TEST_CASE("lookup_first_drafter: a short context or a fresh one goes to the model drafter", "[decoder][ngram]") {
  recording_drafter::log log;
  lookup_first_drafter<recording_drafter> d{recording_drafter{&log}};  // lookup: 3-4-grams
  CHECK(d.lookup().min_ngram == 3);
  CHECK(d.lookup().max_ngram == 4);
  draft_candidates out;
  const V a{5, 6, 7, 8, 5, 6};  // only a 2-gram repeats: below the default threshold
  d.propose({.request = 0, .tokens = a, .depth = 3}, out);
  CHECK(out.chain == std::vector<draft_token>{{101, -0.5f}, {101, -0.5f}, {101, -0.5f}});
  const V b{5, 6, 7, 8, 5, 6, 7};  // "5 6 7" repeats: the lookup proposes what followed it
  d.propose({.request = 0, .tokens = b, .depth = 3}, out);
  CHECK(out.chain == std::vector<draft_token>{{8, 0.0f}, {5, 0.0f}, {6, 0.0f}});
  CHECK(d.lookup_steps() == 1);
  CHECK(d.model_steps() == 1);
  d.reset(0);
  CHECK(log.resets == std::vector<int>{0});
}

TEST_CASE("lookup_first_drafter: pairing traits and the lookup's validation", "[decoder][ngram][validation]") {
  // the model drafter's q rows stay declared, its i.i.d. drafts do not (a lookup step is one chain)
  STATIC_REQUIRE(draft_output_v<lookup_first_drafter<q_drafter>> == draft_output::q_rows);
  STATIC_REQUIRE(draft_output_v<lookup_first_drafter<recording_drafter>> == draft_output::none);
  STATIC_REQUIRE(policy_pairing<lookup_first_drafter<q_drafter>, chain_tree_builder, chain_speculative_verifier>);
  STATIC_REQUIRE(!policy_pairing<lookup_first_drafter<q_drafter>, multi_draft_tree_builder, multi_draft_verifier>);
  STATIC_REQUIRE(policy_pairing<q_drafter, multi_draft_tree_builder, multi_draft_verifier>);  // the control

  using Catch::Contains;
  recording_drafter::log log;
  lookup_first_drafter<recording_drafter> bad(recording_drafter{&log}, ngram_drafter{.max_ngram = 2, .min_ngram = 3});
  draft_candidates out;
  const V t{1, 2, 1};
  REQUIRE_THROWS_WITH(bad.propose({.tokens = t, .depth = 2}, out),
                      Contains("specdec::ngram_drafter::propose") && Contains("min_ngram/max_ngram"));
  CHECK(log.contexts.empty());
}
