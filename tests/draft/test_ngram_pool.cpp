#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "specdec/core/philox.hpp"
#include "specdec/draft/ngram_pool.hpp"

using specdec::ngram_pool;

namespace {

// Brute force: keeps every n-gram with (count, time its count was last raised) and applies the
// documented LFU rule by linear scans.
struct brute_pool {
  int n, cap;
  std::vector<std::int32_t> window;
  std::map<std::vector<std::int32_t>, std::pair<std::uint32_t, std::uint64_t>> table;
  std::uint64_t clock = 0;
  void push(std::int32_t t) {
    window.push_back(t);
    if (static_cast<int>(window.size()) > n) window.erase(window.begin());
    if (static_cast<int>(window.size()) < n) return;
    ++clock;
    auto it = table.find(window);
    if (it != table.end()) {
      it->second.first++;
      it->second.second = clock;
      return;
    }
    if (static_cast<int>(table.size()) >= cap) {
      auto victim = table.begin();
      for (auto j = table.begin(); j != table.end(); ++j)
        if (j->second < victim->second) victim = j;  // (count, last raised) smallest
      table.erase(victim);
    }
    table[window] = {1u, clock};
  }
  std::vector<specdec::ngram_candidate> query(const ngram_pool& pool, std::int32_t first, int k) const {
    std::vector<specdec::ngram_candidate> all;
    for (const auto& [g, c] : table)
      if (g[0] == first) all.push_back({g, c.first});
    std::sort(all.begin(), all.end(), [&](const auto& a, const auto& b) {
      if (a.count != b.count) return a.count > b.count;
      const auto ta = pool.tie_rank(a.tokens), tb = pool.tie_rank(b.tokens);
      if (ta != tb) return ta < tb;
      return a.tokens < b.tokens;
    });
    if (static_cast<int>(all.size()) > k) all.resize(static_cast<std::size_t>(k));
    return all;
  }
};

bool same(const std::vector<specdec::ngram_candidate>& a, const std::vector<specdec::ngram_candidate>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].tokens != b[i].tokens || a[i].count != b[i].count) return false;
  return true;
}

}  // namespace

TEST_CASE("ngram_pool: two continuations with the same count are both kept and returned", "[draft][ngram]") {
  ngram_pool pool;  // n = 4
  pool.extend(std::vector<std::int32_t>{1, 2, 3, 4, 1, 2, 3, 5});
  const auto r = pool.query(1);
  REQUIRE(r.size() == 2);
  std::set<std::vector<std::int32_t>> got{r[0].tokens, r[1].tokens};
  CHECK(got == std::set<std::vector<std::int32_t>>{{1, 2, 3, 4}, {1, 2, 3, 5}});
  CHECK(r[0].count == 1);
  CHECK(r[1].count == 1);
  // a third occurrence raises one of them above the other
  pool.extend(std::vector<std::int32_t>{9, 1, 2, 3, 5});
  const auto r2 = pool.query(1);
  REQUIRE(r2.size() == 2);
  CHECK(r2[0].tokens == std::vector<std::int32_t>{1, 2, 3, 5});
  CHECK(r2[0].count == 2);
  CHECK(pool.frequency(std::vector<std::int32_t>{1, 2, 3, 4}) == 1);
  CHECK(pool.frequency(std::vector<std::int32_t>{7, 7, 7, 7}) == 0);
  CHECK(pool.query(42).empty());
  CHECK(pool.query(1, 1).size() == 1);
  CHECK(pool.count_starting_with(1) == 2);
  CHECK(pool.count_starting_with(42) == 0);
  CHECK(pool.tokens_seen() == 13);
}

TEST_CASE("ngram_pool: seeded tie-break is deterministic and seed-dependent", "[draft][ngram]") {
  std::vector<std::int32_t> toks;
  for (int i = 0; i < 30; ++i) toks.insert(toks.end(), {7, 100 + i, 200 + i, 300 + i});  // 30 tied 4-grams from 7
  ngram_pool a({.n = 4, .seed = 1}), b({.n = 4, .seed = 1}), c({.n = 4, .seed = 2});
  a.extend(toks), b.extend(toks), c.extend(toks);
  const auto ra = a.query(7, 30), rb = b.query(7, 30), rc = c.query(7, 30);
  REQUIRE(ra.size() == 30);
  REQUIRE(same(ra, rb));
  REQUIRE_FALSE(same(ra, rc));  // 30! orders; equal by chance with negligible probability
  for (std::size_t i = 1; i < ra.size(); ++i) REQUIRE(a.tie_rank(ra[i - 1].tokens) < a.tie_rank(ra[i].tokens));
}

TEST_CASE("ngram_pool: matches brute force with and without the memory cap", "[draft][ngram]") {
  for (int n : {2, 3, 4}) {
    for (int cap : {1, 5, 37, 1 << 20}) {
      for (std::uint64_t seed = 0; seed < 3; ++seed) {
        specdec::philox_stream rng(seed, static_cast<std::uint64_t>(n * 1000 + cap % 1000));
        ngram_pool pool({.n = n, .max_entries = cap, .seed = seed});
        brute_pool ref{n, cap, {}, {}, 0};
        const std::uint32_t vocab = 3 + static_cast<std::uint32_t>(seed) * 2;
        for (int i = 0; i < 600; ++i) {
          const auto t = static_cast<std::int32_t>(rng.below(vocab));
          pool.push(t);
          ref.push(t);
          REQUIRE(pool.size() == static_cast<int>(ref.table.size()));
          if (i % 37 == 0 || i == 599) {
            for (std::int32_t f = 0; f < static_cast<std::int32_t>(vocab); ++f)
              for (int k : {1, 3, 20}) REQUIRE(same(pool.query(f, k), ref.query(pool, f, k)));
            for (const auto& [g, c] : ref.table) REQUIRE(pool.frequency(g) == c.first);
          }
        }
      }
    }
  }
}

TEST_CASE("ngram_pool: clear and validation", "[draft][ngram][validation]") {
  using Catch::Contains;
  REQUIRE_THROWS_WITH(ngram_pool({.n = 1}), Contains("ngram_pool") && Contains("params.n"));
  REQUIRE_THROWS_WITH(ngram_pool({.n = 4, .max_entries = 0}), Contains("params.max_entries"));
  ngram_pool pool;
  pool.extend(std::vector<std::int32_t>{1, 2, 3, 4, 5});
  REQUIRE(pool.size() == 2);
  REQUIRE_THROWS_WITH(pool.query(1, -1), Contains("'k'"));
  REQUIRE_THROWS_WITH(pool.frequency(std::vector<std::int32_t>{1, 2}), Contains("gram.size()"));
  REQUIRE_THROWS_WITH(pool.tie_rank(std::vector<std::int32_t>{1}), Contains("gram.size()"));
  pool.clear();
  REQUIRE(pool.size() == 0);
  REQUIRE(pool.query(1).empty());
  pool.extend(std::vector<std::int32_t>{1, 2, 3, 4});
  REQUIRE(pool.query(1).size() == 1);
}
