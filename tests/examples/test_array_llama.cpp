// array_llama<host_ops<>> (examples/common/array_llama.hpp), the step written over the library's array
// primitives that examples/gpu_decode.cu runs with cuda_ops: its logits equal llama_model<float>'s
// (the same weights, root and tree rows, several steps with commits between) within float rounding;
// speculative_batch over it decodes greedy requests (joins, different trees, commit_batch) to exactly
// its own autoregressive greedy output (draft depth 0: the same model one row per request), i.e. its
// rows do not depend on which rows share a step; the per-request commit keeps what commit_batch
// keeps; bad slots, trees past a slot's capacity and bad tokens are refused before anything changes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "../../examples/common/array_llama.hpp"
#include "specdec/decoder/speculative_batch.hpp"

using namespace specdec;
using namespace specdec::examples;

namespace {

llama_config cfg() {
  return {.vocab_size = 64, .hidden = 48, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 64, .ffn_hidden = 56};
}

std::vector<std::int32_t> random_tokens(philox_stream& rng, int n) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(cfg().vocab_size)));
  return t;
}

token_tree random_tree(philox_stream& rng, int n) {
  std::vector<std::int32_t> parents(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    parents[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(i + 1))) - 1;
  return token_tree::from_parents(random_tokens(rng, n), parents);
}

}  // namespace

TEST_CASE("array_llama<host_ops<>>: the same logits as llama_model<float> over steps with commits", "[examples][array_llama]") {
  const auto w = random_llama_weights<float>(cfg(), 5);
  array_llama<host_ops<>> a(cfg(), w, 3, 300);
  llama_model<float> ref(cfg(), w, 3, 300);
  philox_stream rng(3, 1);
  // slots 2 and 0 with prompts of 70 and 1 tokens (a 64-token prefill chunk and a bit; an empty cache)
  const std::vector<int> slots{2, 0};
  std::vector<std::vector<std::int32_t>> prompt{random_tokens(rng, 70), random_tokens(rng, 1)};
  for (std::size_t e = 0; e < slots.size(); ++e) {
    a.prefill(slots[e], prompt[e]);
    ref.prefill(slots[e], prompt[e]);
    CHECK(a.cached(slots[e]) == static_cast<int>(prompt[e].size()) - 1);
  }
  std::vector<std::int32_t> roots{prompt[0].back(), prompt[1].back()};
  double worst = 0;
  for (int step = 0; step < 4; ++step) {
    std::vector<token_tree> trees{random_tree(rng, static_cast<int>(rng.below(9))), random_tree(rng, 1 + static_cast<int>(rng.below(5)))};
    std::vector<std::int32_t> committed{a.cached(2) + 1, a.cached(0) + 1};
    const token_tree_batch tb(trees, committed);
    std::vector<std::int32_t> row_indptr{0};
    for (const auto& t : trees) row_indptr.push_back(row_indptr.back() + t.size() + 1);
    const token_tree* tp[] = {&trees[0], &trees[1]};
    const target_batch b{slots, roots, tb, row_indptr, tp};
    const auto got = a.forward_batch(b);
    const auto want = ref.forward_batch(b);
    REQUIRE(got.extent(0) == want.extent(0));
    REQUIRE(got.extent(1) == cfg().vocab_size);
    for (std::int64_t i = 0; i < got.extent(0); ++i)
      for (std::int64_t v = 0; v < got.extent(1); ++v)
        worst = std::max(worst, static_cast<double>(std::abs(got(i, v) - want(i, v))) /
                                    (1.0 + std::abs(static_cast<double>(want(i, v)))));
    // commit a random root path of each tree in both, then the next roots
    verify_batch_result res;
    for (std::size_t e = 0; e < trees.size(); ++e) {
      std::vector<std::int32_t> path;
      const int pick = static_cast<int>(rng.below(static_cast<std::uint32_t>(trees[e].size() + 1))) - 1;
      for (int i = pick; i >= 0; i = trees[e].parent(i)) path.push_back(i);
      std::reverse(path.begin(), path.end());
      res.push_back(verify_result{path, static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(cfg().vocab_size)))});
      ref.commit(slots[e], path);
      roots[e] = res.bonus[e];
    }
    const int before = a.cached(2);
    a.commit_batch(b, res);
    CHECK(a.cached(2) == before + 1 + static_cast<int>(res.accepted_nodes(0).size()));
  }
  CHECK(a.cached(2) == ref.cache_length(2));
  CHECK(a.cached(0) == ref.cache_length(0));
  CHECK(worst < 1e-4);
}

TEMPLATE_TEST_CASE("array_llama<host_ops<KV>> under speculative_batch: greedy output identical to its own "
                   "autoregressive decoding",
                   "[examples][array_llama]", float, specdec::half) {
  const auto w = random_llama_weights<float>(cfg(), 9);
  philox_stream rng(7, 2);
  struct req {
    std::uint32_t id;
    std::vector<std::int32_t> prompt;
    generation_options opt;
  };
  std::vector<req> reqs;
  for (std::uint32_t i = 0; i < 7; ++i) {
    std::vector<std::int32_t> phrase = random_tokens(rng, 3 + static_cast<int>(rng.below(6))), prompt;
    for (int k = 0; k < 3; ++k) prompt.insert(prompt.end(), phrase.begin(), phrase.end());  // prompt lookup finds it
    reqs.push_back({100 + i, prompt,
                    {.max_new_tokens = 20 + static_cast<int>(rng.below(30)), .draft_depth = 1 + static_cast<int>(rng.below(5)),
                     .draft_width = 1 + static_cast<int>(rng.below(3))}});
  }
  const auto decode = [&](bool speculative) {
    array_llama<host_ops<TestType>> model(cfg(), w, 3, 256);
    speculative_batch<array_llama<host_ops<TestType>>, ngram_drafter, trie_tree_builder, greedy_verifier> batch(model);
    std::map<std::uint32_t, std::vector<std::int32_t>> out;
    std::size_t next = 0;
    int accepted = 0;
    while (next < reqs.size() || batch.active() > 0) {
      while (next < reqs.size() && batch.free_slots() > 0) {
        auto o = reqs[next].opt;
        if (!speculative) o.draft_depth = 0;
        batch.add_request(reqs[next].id, reqs[next].prompt, o);
        ++next;
      }
      for (const auto& s : batch.step()) {
        out[s.id].insert(out[s.id].end(), s.tokens.begin(), s.tokens.end());
        if (s.finished) accepted += static_cast<int>(s.stats.accepted);
      }
    }
    return std::pair{out, accepted};
  };
  const auto [ar, none] = decode(false);
  const auto [spec, accepted] = decode(true);
  CHECK(none == 0);
  CHECK(accepted > 20);  // drafts were accepted: the rows of several-row steps were compared too
  REQUIRE(ar.size() == reqs.size());
  CHECK(spec == ar);
}

TEST_CASE("array_llama<host_ops<>>: the per-request commit equals commit_batch; refusals change nothing", "[examples][array_llama]") {
  const auto w = random_llama_weights<float>(cfg(), 11);
  array_llama<host_ops<>> a(cfg(), w, 2, 40), b(cfg(), w, 2, 40);
  const std::vector<std::int32_t> p0{1, 2, 3, 4, 5}, p1{6, 7};
  for (auto* m : {&a, &b}) m->prefill(0, p0), m->prefill(1, p1);
  const std::vector<token_tree> trees{token_tree::from_parents(std::vector<std::int32_t>{8, 9, 10}, std::vector<std::int32_t>{-1, 0, 0}),
                                      token_tree::from_parents(std::vector<std::int32_t>{11}, std::vector<std::int32_t>{-1})};
  const std::vector<std::int32_t> committed{5, 2}, roots{5, 7}, row_indptr{0, 4, 6};
  const std::vector<int> slots{0, 1};
  const token_tree_batch tb(trees, committed);
  const token_tree* tp[] = {&trees[0], &trees[1]};
  const target_batch batch{slots, roots, tb, row_indptr, tp};
  a.forward_batch(batch);
  b.forward_batch(batch);
  verify_batch_result res;
  res.push_back(verify_result{{0, 2}, 1});
  res.push_back(verify_result{{}, 1});
  a.commit_batch(batch, res);
  b.commit(0, std::vector<std::int32_t>{0, 2});
  b.commit(1, {});
  CHECK(a.cached(0) == 4 + 3);
  CHECK(b.cached(0) == a.cached(0));
  CHECK(a.cached(1) == 1 + 1);
  CHECK(b.cached(1) == a.cached(1));
  // the next step's logits agree bit for bit (the caches hold the same rows)
  const std::vector<token_tree> none(2);
  const std::vector<std::int32_t> committed2{a.cached(0) + 1, a.cached(1) + 1}, roots2{3, 4}, rows2{0, 1, 2};
  const token_tree_batch tb2(none, committed2);
  const token_tree* tp2[] = {&none[0], &none[1]};
  const target_batch next{slots, roots2, tb2, rows2, tp2};
  const auto la = a.forward_batch(next);
  const auto lb = b.forward_batch(next);
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t v = 0; v < cfg().vocab_size; ++v) REQUIRE(la(i, v) == lb(i, v));
  // refusals
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(a.prefill(2, p0), Contains("'request'"));
  CHECK_THROWS_WITH(a.prefill(0, std::vector<std::int32_t>{1, 64}), Contains("'prompt'"));
  CHECK_THROWS_WITH(a.prefill(0, std::vector<std::int32_t>(41, 1)), Contains("capacity"));
  std::vector<std::int32_t> deep_parents(40);
  for (int i = 0; i < 40; ++i) deep_parents[static_cast<std::size_t>(i)] = i - 1;
  const std::vector<token_tree> deep{token_tree::from_parents(std::vector<std::int32_t>(40, 1), deep_parents), token_tree{}};
  const std::vector<std::int32_t> committed3{a.cached(0) + 1, a.cached(1) + 1}, rows3{0, 41, 42};
  const token_tree_batch tb3(deep, committed3);
  const token_tree* tp3[] = {&deep[0], &deep[1]};
  const int before = a.cached(0);
  CHECK_THROWS_WITH(a.forward_batch(target_batch{slots, roots2, tb3, rows3, tp3}), Contains("capacity"));
  const std::vector<std::int32_t> stale{a.cached(0), a.cached(1) + 1};  // a committed length the cache does not hold
  const token_tree_batch tb4(none, stale);
  CHECK_THROWS_WITH(a.forward_batch(target_batch{slots, roots2, tb4, rows2, tp2}), Contains("committed lengths"));
  CHECK(a.cached(0) == before);
  // a batch's shape: roots and trees one per slot, distinct slots, rows = nodes + 1
  const std::vector<std::int32_t> one_root{3};
  CHECK_THROWS_WITH(a.forward_batch(target_batch{slots, one_root, tb2, rows2, tp2}), Contains("roots.size()"));
  const std::vector<int> twice{0, 0};
  CHECK_THROWS_WITH(a.forward_batch(target_batch{twice, roots2, tb2, rows2, tp2}), Contains("distinct slots"));
  const std::vector<std::int32_t> bad_rows{0, 2, 3};
  CHECK_THROWS_WITH(a.forward_batch(target_batch{slots, roots2, tb2, bad_rows, tp2}), Contains("row_indptr"));
  // none of the refused forwards changed what the next commit sees: one forward, a refused commit,
  // then a good commit_batch moves both slots as before
  const auto la2 = a.forward_batch(next);
  CHECK(la2.extent(0) == 2);
  const int c0 = a.cached(0), c1 = a.cached(1);
  CHECK_THROWS(a.commit(1, std::vector<std::int32_t>{7}));  // node 7 of an empty tree
  CHECK(a.cached(1) == c1);
  verify_batch_result none_accepted;
  none_accepted.push_back(verify_result{{}, 0});
  none_accepted.push_back(verify_result{{}, 0});
  a.commit_batch(next, none_accepted);
  CHECK(a.cached(0) == c0 + 1);
  CHECK(a.cached(1) == c1 + 1);
  // Session 56: a forward was committed twice (its rows moved again, counted again), after its slot's
  // release, or through a result whose offsets disagree with its arrays (read out of bounds)
  CHECK_THROWS_WITH(a.commit_batch(next, none_accepted), Contains("not yet committed"));
  CHECK_THROWS_WITH(a.commit(0, {}), Contains("not yet committed"));
  CHECK(a.cached(0) == c0 + 1);
  const std::vector<std::int32_t> committed5{a.cached(0) + 1, a.cached(1) + 1};
  const token_tree_batch tb5(none, committed5);
  const target_batch fifth{slots, roots2, tb5, rows2, tp2};
  a.forward_batch(fifth);
  verify_batch_result torn;
  torn.accepted_indptr = {0, 2, 2};
  torn.accepted = {0};
  torn.bonus = {0, 0};
  CHECK_THROWS_WITH(a.commit_batch(fifth, torn), Contains("'accepted_indptr'"));
  a.release(1);
  CHECK_THROWS_WITH(a.commit(1, {}), Contains("not yet committed"));
  a.commit(0, {});  // entry 0 of the same forward is still pending
  CHECK(a.cached(0) == c0 + 2);
  CHECK(a.cached(1) == 0);
}

TEST_CASE("array_llama refuses a cache whose size wraps", "[examples][array_llama]") {
  // slots x capacity x kv_heads x head_dim = 1012625 x 1111862641 x 256 x 64 elements: 2^64 + 2^14,
  // which wrapped size_t to a one-row cache that the first prefill wrote past
  auto c = cfg();
  c.heads = c.kv_heads = 256;
  CHECK_THROWS_WITH(array_llama<host_ops<>>(c, random_llama_weights<float>(c, 1), 1012625, 1111862641),
                    Catch::Matchers::Contains("'capacity'"));
}
