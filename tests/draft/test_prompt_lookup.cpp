#include <catch2/catch.hpp>

#include <limits>

#include "specdec/core/philox.hpp"
#include "specdec/draft/prompt_lookup.hpp"

using specdec::prompt_lookup;
using specdec::prompt_lookup_reference;
using V = std::vector<std::int32_t>;

TEST_CASE("prompt_lookup: longest match first, most recent earlier occurrence", "[draft][pld]") {
  // suffix [5 6 7]: 3-gram occurs at 0 and 8 -> most recent earlier is 8, continuation 9 1 ...
  const V ctx{5, 6, 7, 1, 2, 6, 7, 3, 5, 6, 7, 9, 1, 4, 5, 6, 7};
  const specdec::prompt_lookup_params p{.min_ngram = 1, .max_ngram = 3, .num_tokens = 3};
  CHECK(prompt_lookup_reference(ctx, p) == V{9, 1, 4});
  prompt_lookup pl(p);
  pl.extend(ctx);
  CHECK(pl.propose() == V{9, 1, 4});
  // Only a 2-gram matches ([6 7] at 5): max 3 fails, falls back to m = 2.
  const V ctx2{6, 7, 8, 1, 2, 9, 6, 7};
  CHECK(prompt_lookup_reference(ctx2, p) == V{8, 1, 2});
  // Continuation truncated at the end of the context: [1 2] ... [1 2] at 0 -> continuation up to L.
  const V ctx3{1, 2, 1, 2};
  CHECK(prompt_lookup_reference(ctx3, {.min_ngram = 2, .max_ngram = 2, .num_tokens = 10}) == V{1, 2});
  // No match.
  CHECK(prompt_lookup_reference(V{1, 2, 3}, p).empty());
  CHECK(prompt_lookup_reference(V{}, p).empty());
  CHECK(prompt_lookup_reference(V{4}, p).empty());
}

TEST_CASE("prompt_lookup: incremental index equals the reference scan at every length", "[draft][pld]") {
  for (std::uint64_t seed = 0; seed < 6; ++seed) {
    specdec::philox_stream rng(seed, 11);
    const specdec::prompt_lookup_params p{.min_ngram = 1 + static_cast<int>(seed % 2), .max_ngram = 2 + static_cast<int>(seed % 4),
                                          .num_tokens = 1 + static_cast<int>(seed % 5)};
    prompt_lookup pl(p);
    V ctx;
    for (int i = 0; i < 400; ++i) {
      const auto t = static_cast<std::int32_t>(rng.below(3 + static_cast<std::uint32_t>(seed)));
      ctx.push_back(t);
      pl.push(t);
      REQUIRE(pl.propose() == prompt_lookup_reference(ctx, p));
    }
    REQUIRE(V(pl.context().begin(), pl.context().end()) == ctx);
    pl.clear();
    REQUIRE(pl.propose().empty());
  }
}

TEST_CASE("prompt_lookup: validation", "[draft][pld][validation]") {
  using Catch::Contains;
  REQUIRE_THROWS_WITH(prompt_lookup({.min_ngram = 0}), Contains("params.min_ngram"));
  REQUIRE_THROWS_WITH(prompt_lookup({.min_ngram = 3, .max_ngram = 2}), Contains("params.max_ngram"));
  REQUIRE_THROWS_WITH(prompt_lookup({.num_tokens = 0}), Contains("params.num_tokens"));
  REQUIRE_THROWS_WITH(prompt_lookup_reference(V{1}, {.min_ngram = 0}), Contains("prompt_lookup_reference"));
}

TEST_CASE("prompt_lookup: an n-gram length that could not be indexed is rejected, not allocated", "[draft][pld][validation]") {
  using Catch::Contains;
  constexpr int imax = std::numeric_limits<int>::max();
  // Used to throw std::bad_alloc (one hash index per length in [min_ngram, max_ngram]).
  REQUIRE_THROWS_WITH(prompt_lookup({1, imax, 4}), Contains("specdec::prompt_lookup") && Contains("params.max_ngram") &&
                                                        Contains("<= 256"));
  REQUIRE_THROWS_WITH(prompt_lookup_reference(V{1, 2, 1}, {1, imax, 4}), Contains("prompt_lookup_reference"));
  REQUIRE_THROWS_WITH(prompt_lookup({imax, imax, 4}), Contains("params.min_ngram"));
  prompt_lookup longest({1, 256, imax});  // the bound itself works, and num_tokens may be anything
  longest.extend(V{4, 5, 6, 4, 5});
  CHECK(longest.propose() == V{6, 4, 5});
}

TEST_CASE("prompt_lookup: latest_match / previous_match walk every earlier occurrence, newest first", "[draft][pld]") {
  for (std::uint64_t seed = 0; seed < 6; ++seed) {
    specdec::philox_stream rng(seed, 13);
    const specdec::prompt_lookup_params p{.min_ngram = 1 + static_cast<int>(seed % 3), .max_ngram = 3 + static_cast<int>(seed % 3)};
    prompt_lookup pl(p);
    V ctx;
    for (int i = 0; i < 300; ++i) {
      const auto t = static_cast<std::int32_t>(rng.below(2 + static_cast<std::uint32_t>(seed)));
      ctx.push_back(t);
      pl.push(t);
      const auto L = static_cast<std::int64_t>(ctx.size());
      for (int m = p.min_ngram; m <= p.max_ngram; ++m) {
        V want;  // starts s < L - m with ctx[s, s+m) == the last m tokens, descending
        for (std::int64_t s = L - m - 1; s >= 0; --s)
          if (std::equal(ctx.begin() + s, ctx.begin() + s + m, ctx.end() - m)) want.push_back(static_cast<std::int32_t>(s));
        V got;
        for (auto s = pl.latest_match(m); s >= 0; s = pl.previous_match(m, s)) got.push_back(s);
        REQUIRE(got == want);
      }
    }
    pl.clear();
    CHECK(pl.latest_match(p.min_ngram) == -1);
  }
  using Catch::Contains;
  prompt_lookup pl({.min_ngram = 2, .max_ngram = 3});
  pl.extend(V{1, 2, 1, 2});
  CHECK(pl.latest_match(2) == 0);
  CHECK(pl.previous_match(2, 0) == -1);
  REQUIRE_THROWS_WITH(pl.latest_match(1), Contains("prompt_lookup::latest_match") && Contains("'m'"));
  REQUIRE_THROWS_WITH(pl.previous_match(4, 0), Contains("prompt_lookup::previous_match") && Contains("'m'"));
  REQUIRE_THROWS_WITH(pl.previous_match(3, 2), Contains("prompt_lookup::previous_match") && Contains("'s'"));
}

TEST_CASE("prompt_lookup: extend with tokens viewing its own context reads a copy", "[draft][pld]") {
  // Appending tokens copied from context() (an accepted proposal, say): the reserve moved the
  // context and the loop read the freed copy (a use-after-free under ASan).
  prompt_lookup pl({.min_ngram = 1, .max_ngram = 2});
  pl.extend(V{1, 2, 3, 4});
  for (int round = 0; round < 4; ++round) pl.extend(pl.context().subspan(0, 3));  // capacity grows each time
  const auto ctx = pl.context();
  CHECK(V(ctx.begin(), ctx.end()) == V{1, 2, 3, 4, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3});
  CHECK(pl.latest_match(2) == 11);  // "2 3" at 1, 5, 8, 11 before the one that ends the context (14)
}
