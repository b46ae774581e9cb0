// ngram_drafter over the incremental prompt_lookup index proposes exactly what its former O(L * n)
// scan proposed (kept below as the oracle), step after step, across request slots, resets and
// parameter changes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/draft/ngram_drafter.hpp"

using namespace specdec;
using V = std::vector<std::int32_t>;

namespace {

// The former ngram_drafter::propose, verbatim but for the struct around it.
void oracle_propose(int max_ngram, int min_ngram, int search_window, const draft_request& req, draft_candidates& out) {
  out.clear();
  const auto& t = req.tokens;
  const auto L = static_cast<std::int64_t>(t.size());
  if (req.depth <= 0) return;
  const std::int64_t lo = search_window > 0 ? std::max<std::int64_t>(0, L - search_window) : 0;
  for (int n = max_ngram; n >= min_ngram && out.empty(); --n) {
    if (L <= n) continue;
    for (std::int64_t s = L - n - 1; s >= lo; --s) {  // match t[s .. s+n) == t[L-n .. L), s+n < L
      if (!std::equal(t.begin() + s, t.begin() + s + n, t.end() - n)) continue;
      std::vector<draft_token> seq;
      for (std::int64_t j = s + n; j < L && static_cast<int>(seq.size()) < req.depth; ++j) seq.push_back({t[static_cast<std::size_t>(j)], 0.0f});
      if (seq.empty()) continue;
      bool dup = out.chain == seq;
      for (const auto& q : out.sequences) dup |= q == seq;
      if (dup) continue;
      if (out.chain.empty()) out.chain = seq;
      else out.sequences.push_back(seq);
      for (std::size_t d = 0; d < seq.size(); ++d) {
        if (out.alternatives.size() <= d) out.alternatives.emplace_back();
        auto& a = out.alternatives[d];
        if (std::none_of(a.begin(), a.end(), [&](const draft_token& x) { return x.token == seq[d].token; }))
          a.push_back(seq[d]);
      }
      if (static_cast<int>(out.sequences.size()) + 1 >= req.width) break;
    }
  }
}

bool same(const draft_candidates& a, const draft_candidates& b) {
  return a.chain == b.chain && a.sequences == b.sequences && a.alternatives == b.alternatives && a.q.empty() && b.q.empty() &&
         !a.sampled_as && !b.sampled_as;
}

V random_tokens(philox_stream& rng, std::uint32_t vocab, std::uint32_t n) {
  V v(n);
  for (auto& x : v) x = static_cast<std::int32_t>(rng.below(vocab));
  return v;
}

}  // namespace

TEST_CASE("ngram_drafter: equals the former scan over growing streams, slots and resets", "[decoder][ngram]") {
  int nonempty = 0, with_sequences = 0, calls = 0;
  for (std::uint64_t seed = 0; seed < 48; ++seed) {
    philox_stream rng(seed, 23);
    ngram_drafter ng;
    ng.min_ngram = 1 + static_cast<int>(seed % 3);
    ng.max_ngram = ng.min_ngram + static_cast<int>(seed / 3 % 4);
    const int windows[] = {0, 0, 7, 25};
    ng.search_window = windows[seed / 12 % 4];
    const auto vocab = 2 + static_cast<std::uint32_t>(seed % 5);  // small: matches everywhere
    constexpr int slots = 3;
    std::vector<V> streams(slots);
    for (int r = 0; r < slots; ++r) {
      streams[static_cast<std::size_t>(r)] = random_tokens(rng, vocab, 1 + rng.below(20));
      ng.reset(r);
    }
    draft_candidates got, want;
    for (int step = 0; step < 300; ++step) {
      const int r = static_cast<int>(rng.below(slots));
      auto& t = streams[static_cast<std::size_t>(r)];
      if (rng.below(40) == 0) {  // the request ends; a new prompt takes its slot
        t = random_tokens(rng, vocab, 1 + rng.below(30));
        ng.reset(r);
      } else {  // accepted drafts plus the bonus token; sometimes a repeat of a recent span
        const auto k = 1 + rng.below(5);
        for (std::uint32_t i = 0; i < k; ++i) {
          if (t.size() > 8 && rng.below(3) == 0) t.push_back(t[t.size() - 1 - rng.below(8)]);
          else t.push_back(static_cast<std::int32_t>(rng.below(vocab)));
        }
      }
      const draft_request req{.request = r, .tokens = t, .depth = static_cast<int>(rng.below(7)),
                              .width = 1 + static_cast<int>(rng.below(5))};
      ng.propose(req, got);
      oracle_propose(ng.max_ngram, ng.min_ngram, ng.search_window, req, want);
      INFO("seed " << seed << " step " << step << " request " << r << " L " << t.size() << " depth " << req.depth
                   << " width " << req.width);
      REQUIRE(same(got, want));
      ++calls;
      nonempty += !got.empty();
      with_sequences += !got.sequences.empty();
    }
  }
  CHECK(nonempty > calls / 2);  // the comparison is not vacuous
  CHECK(with_sequences > calls / 10);
}

TEST_CASE("ngram_drafter: long streams, wide requests (many occurrences walked per call)", "[decoder][ngram]") {
  for (std::uint64_t seed = 0; seed < 4; ++seed) {
    philox_stream rng(seed, 29);
    ngram_drafter ng{.max_ngram = 4, .min_ngram = 1, .search_window = seed == 3 ? 500 : 0};
    V t = random_tokens(rng, 2 + static_cast<std::uint32_t>(seed), 4);
    draft_candidates got, want;
    while (t.size() < 3000) {
      const auto k = 1 + rng.below(4);
      for (std::uint32_t i = 0; i < k; ++i) t.push_back(static_cast<std::int32_t>(rng.below(2 + static_cast<std::uint32_t>(seed))));
      const draft_request req{.request = 0, .tokens = t, .depth = 1 + static_cast<int>(rng.below(8)),
                              .width = 1 + static_cast<int>(rng.below(64))};
      ng.propose(req, got);
      oracle_propose(ng.max_ngram, ng.min_ngram, ng.search_window, req, want);
      INFO("seed " << seed << " L " << t.size());
      REQUIRE(same(got, want));
    }
  }
}

TEST_CASE("ngram_drafter: the chain is prompt lookup's proposal", "[decoder][ngram]") {
  philox_stream rng(5, 31);
  ngram_drafter ng{.max_ngram = 3, .min_ngram = 1};
  V t{1};
  draft_candidates got;
  for (int i = 0; i < 400; ++i) {
    t.push_back(static_cast<std::int32_t>(rng.below(4)));
    ng.propose({.request = 0, .tokens = t, .depth = 5, .width = 3}, got);
    const auto want = prompt_lookup_reference(t, {.min_ngram = 1, .max_ngram = 3, .num_tokens = 5});
    V chain;
    for (const auto& x : got.chain) chain.push_back(x.token);
    REQUIRE(chain == want);
  }
}

TEST_CASE("ngram_drafter: a context that does not extend the indexed one, or new n-gram bounds, re-index", "[decoder][ngram]") {
  ngram_drafter ng;
  draft_candidates got, want;
  const auto check = [&](const V& t, int depth, int width) {
    const draft_request req{.request = 1, .tokens = t, .depth = depth, .width = width};
    ng.propose(req, got);
    oracle_propose(ng.max_ngram, ng.min_ngram, ng.search_window, req, want);
    REQUIRE(same(got, want));
  };
  check({1, 2, 3, 4, 1, 2, 5, 1, 2}, 3, 2);
  CHECK(got.chain == std::vector<draft_token>{{5, 0}, {1, 0}, {2, 0}});
  check({1, 2, 3}, 3, 2);  // shorter, no reset
  CHECK(got.empty());
  check({7, 2, 3, 7, 2}, 2, 2);  // same length class, different first token
  CHECK(got.chain == std::vector<draft_token>{{3, 0}, {7, 0}});
  check({7, 2, 3, 7, 2, 3, 9, 9, 7, 2, 3}, 4, 4);
  ng.max_ngram = 2;  // parameters are public: a change rebuilds the index
  check({7, 2, 3, 7, 2, 3, 9, 9, 7, 2, 3}, 4, 4);
  ng.min_ngram = 2;
  ng.max_ngram = 5;
  check({7, 2, 3, 7, 2, 3, 9, 9, 7, 2, 3, 7}, 4, 4);
  ng.reset(1);
  ng.reset(99);  // a slot never used: nothing to forget
  check({4, 4, 4, 4}, 3, 3);
  check({}, 3, 3);
  CHECK(got.empty());
}

TEST_CASE("ngram_drafter: validation", "[decoder][ngram][validation]") {
  using Catch::Contains;
  draft_candidates out;
  const V t{1, 2, 1};
  REQUIRE_THROWS_WITH((ngram_drafter{.max_ngram = 3, .min_ngram = 0}.propose({.tokens = t}, out)),
                      Contains("specdec::ngram_drafter::propose") && Contains("min_ngram/max_ngram"));
  REQUIRE_THROWS_WITH((ngram_drafter{.max_ngram = 1, .min_ngram = 2}.propose({.tokens = t}, out)), Contains("min_ngram/max_ngram"));
  REQUIRE_THROWS_WITH((ngram_drafter{.max_ngram = 257}.propose({.tokens = t}, out)),
                      Contains("specdec::ngram_drafter::propose") && Contains("'max_ngram'") && Contains("256"));
  REQUIRE_THROWS_WITH((ngram_drafter{}.propose({.request = -1, .tokens = t}, out)), Contains("req.request"));
  REQUIRE_THROWS_WITH((ngram_drafter{.search_window = -5}.propose({.tokens = t}, out)),
                      Contains("'search_window'") && Contains(">= 0"));
  ngram_drafter{.max_ngram = 256}.propose({.tokens = t}, out);
  CHECK(out.chain == std::vector<draft_token>{{2, 0}, {1, 0}});
}
