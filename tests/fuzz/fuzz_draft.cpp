// Fuzz targets for the model-free drafters (include/specdec/draft/): TokenSwift's n-gram pool and
// prompt lookup, each against a naive model of its documented behaviour: the pool's counts, LFU
// eviction and ranked query; prompt_lookup's incremental index against prompt_lookup_reference.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "specdec/draft/ngram_pool.hpp"
#include "specdec/draft/prompt_lookup.hpp"

namespace {
using specdec_fuzz::input;
using specdec_fuzz::list;

//! ngram_pool's documented behaviour, naively: every stored n-gram with its count and the time its
//! count was last raised; a new n-gram in a full table evicts the least frequent, oldest raised.
struct naive_pool {
  int n = 0, max_entries = 0;
  std::vector<std::int32_t> window;
  std::uint64_t clock = 0, seen = 0;
  struct entry {
    std::uint32_t count;
    std::uint64_t raised;
  };
  std::map<std::vector<std::int32_t>, entry> grams;
  void push(std::int32_t t) {
    ++seen;
    window.push_back(t);
    if (static_cast<int>(window.size()) > n) window.erase(window.begin());
    if (static_cast<int>(window.size()) < n) return;
    ++clock;
    if (auto it = grams.find(window); it != grams.end()) {
      ++it->second.count, it->second.raised = clock;
      return;
    }
    if (static_cast<int>(grams.size()) >= max_entries) {
      auto victim = grams.begin();
      for (auto it = grams.begin(); it != grams.end(); ++it)
        if (it->second.count < victim->second.count ||
            (it->second.count == victim->second.count && it->second.raised < victim->second.raised))
          victim = it;
      grams.erase(victim);
    }
    grams[window] = {1, clock};
  }
};
}  // namespace

SPECDEC_FUZZ_TARGET(ngram_pool, "ngram_pool push/extend/query/frequency/clear vs a naive LFU model") {
  input in(data, size);
  specdec::ngram_pool_params params;
  params.n = in.int32(2, 5);
  params.max_entries = in.int32(1, 24);
  params.seed = in.u64();
  specdec::ngram_pool pool(params);
  naive_pool model{params.n, params.max_entries, {}, 0, 0, {}};
  const auto tok = [&] { return in.chance(95) ? in.range(0, 5) : in.int32(0, 5); };
  for (int op = in.range(1, 40); op > 0 && !in.empty(); --op) {
    const int kind = in.range(0, 9);
    if (kind <= 4) {
      const auto t = tok();
      pool.push(t), model.push(t);
    } else if (kind == 5) {
      const auto ts = in.many(static_cast<std::size_t>(in.range(0, 8)), tok);
      pool.extend(ts);
      for (auto t : ts) model.push(t);
    } else if (kind == 6) {
      const auto first = tok();
      const int k = in.int32(0, 6);
      const auto got = pool.query(first, k);
      std::vector<std::pair<std::vector<std::int32_t>, std::uint32_t>> want;
      for (const auto& [g, e] : model.grams)
        if (g[0] == first) want.emplace_back(g, e.count);
      FUZZ_CHECK(pool.count_starting_with(first) == static_cast<int>(want.size()), "ngram_pool: count_starting_with");
      std::sort(want.begin(), want.end(), [&](const auto& a, const auto& b) {
        if (a.second != b.second) return a.second > b.second;
        const auto ta = pool.tie_rank(a.first), tb = pool.tie_rank(b.first);
        if (ta != tb) return ta < tb;
        return a.first < b.first;
      });
      if (want.size() > static_cast<std::size_t>(k)) want.resize(static_cast<std::size_t>(k));
      FUZZ_CHECK(got.size() == want.size(), "ngram_pool: query returned " + std::to_string(got.size()) + " n-grams, expected " +
                                           std::to_string(want.size()));
      for (std::size_t i = 0; i < got.size(); ++i)
        FUZZ_CHECK(got[i].tokens == want[i].first && got[i].count == want[i].second,
              "ngram_pool: query rank " + std::to_string(i) + " is " + list(got[i].tokens) + " x" +
                  std::to_string(got[i].count) + ", expected " + list(want[i].first) + " x" + std::to_string(want[i].second));
    } else if (kind == 7) {
      auto g = in.many(static_cast<std::size_t>(in.chance(90) ? std::min(params.n, 8) : in.range(0, 6)), tok);
      if (!model.grams.empty() && in.coin()) g = std::next(model.grams.begin(), in.range(0, static_cast<int>(model.grams.size()) - 1))->first;
      const auto it = model.grams.find(g);
      FUZZ_CHECK(pool.frequency(g) == (it == model.grams.end() ? 0u : it->second.count), "ngram_pool: frequency of " + list(g));
    } else if (kind == 8) {
      pool.clear();
      model = naive_pool{params.n, params.max_entries, {}, 0, 0, {}};
    } else {
      (void)pool.tie_rank(in.many(static_cast<std::size_t>(in.chance(90) ? std::min(params.n, 8) : in.range(0, 6)), tok));
    }
    FUZZ_CHECK(pool.size() == static_cast<int>(model.grams.size()), "ngram_pool: size() " + std::to_string(pool.size()) +
                                                                   ", expected " + std::to_string(model.grams.size()));
    FUZZ_CHECK(pool.tokens_seen() == model.seen, "ngram_pool: tokens_seen()");
  }
}

SPECDEC_FUZZ_TARGET(prompt_lookup, "prompt_lookup (incremental) == prompt_lookup_reference after every append") {
  input in(data, size);
  specdec::prompt_lookup_params params;
  params.min_ngram = in.int32(1, 3);
  params.max_ngram = in.int32(params.min_ngram, 5);
  params.num_tokens = in.int32(1, 6);
  // one hash table per n-gram length, allocated up front
  const std::int64_t lengths = std::int64_t{params.max_ngram} - params.min_ngram + 1;
  if (lengths > 64 && lengths <= (1 << 20)) return;  // fine, but slow to fuzz: 64 tables cover the logic
  specdec::prompt_lookup pl(params);
  std::vector<std::int32_t> ctx;
  const auto tok = [&] { return in.chance(95) ? in.range(0, 3) : in.int32(0, 3); };
  for (int op = in.range(1, 40); op > 0 && !in.empty(); --op) {
    const int kind = in.range(0, 9);
    if (kind <= 6) {
      const auto t = tok();
      pl.push(t), ctx.push_back(t);
    } else if (kind == 7) {
      const auto ts = in.many(static_cast<std::size_t>(in.range(0, 8)), tok);
      pl.extend(ts), ctx.insert(ctx.end(), ts.begin(), ts.end());
    } else if (kind == 8) {
      pl.clear(), ctx.clear();
    }
    FUZZ_CHECK(std::equal(ctx.begin(), ctx.end(), pl.context().begin(), pl.context().end()), "prompt_lookup: context()");
    const auto got = pl.propose();
    const auto want = specdec::prompt_lookup_reference(ctx, params);
    FUZZ_CHECK(got == want, "prompt_lookup: proposes " + list(got) + " for " + list(ctx) + ", reference " + list(want));
  }
}
