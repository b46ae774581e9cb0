// llama_model with paged KV storage (paged_kv, Philox-shuffled block table) against contiguous storage:
// bit-identical logits over a prefill, several tree forwards and commits of accepted paths, in float
// (library hybrid_tree_attention) and double (its reference); bit-identical cached K/V rows; the LongSpec
// draft reads a paged target in place with identical results; bad options are rejected.
#include <catch2/catch.hpp>

#include <algorithm>

#include "../../examples/common/longspec_draft.hpp"

using namespace specdec;
using namespace specdec::examples;

namespace {
llama_config cfg() { return {.vocab_size = 48, .hidden = 32, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 64, .ffn_hidden = 40}; }

template <class T>
void require_same_cache(const llama_model<T>& c, const llama_model<T>& p, int r) {
  REQUIRE(c.cache_length(r) == p.cache_length(r));
  for (int l = 0; l < cfg().layers; ++l) {
    const auto a = c.layer_kv(l);
    const auto b = p.paged_layer_kv(l);
    for (int t = 0; t < c.cache_length(r); ++t)
      for (int h = 0; h < cfg().kv_heads; ++h) {
        REQUIRE(std::equal(a.k_row(r, t, h), a.k_row(r, t, h) + 64, b.k_row(r, t, h)));
        REQUIRE(std::equal(a.v_row(r, t, h), a.v_row(r, t, h) + 64, b.v_row(r, t, h)));
      }
  }
}

template <class T>
void paged_equals_contiguous() {
  const auto c = cfg();
  const auto w = random_llama_weights<T>(c, 17);
  // capacity 100 is not a multiple of the page size: the last page of each request is partly unused.
  llama_model<T> cm(c, w, 2, 100);
  llama_model<T> pm(c, w, 2, 100, {.storage = kv_storage::paged, .page_size = 16, .page_seed = 5});
  REQUIRE(pm.storage() == kv_storage::paged);
  const auto pl = pm.paged_layer_kv(0);
  REQUIRE(pl.mapping.num_pages == 2 * 7);
  // The block table is a non-trivial permutation: request 1's pages are not the identity order.
  std::vector<int> pages(pl.mapping.page_indices + pl.mapping.page_indptr[1],
                         pl.mapping.page_indices + pl.mapping.page_indptr[2]);
  CHECK(!std::is_sorted(pages.begin(), pages.end()));
  CHECK(pages != std::vector<int>{7, 8, 9, 10, 11, 12, 13});
  philox_stream rng(3, 1);
  std::vector<std::int32_t> prompt(37);
  for (auto& t : prompt) t = static_cast<std::int32_t>(rng.below(48));
  cm.prefill(1, prompt, 10);  // chunks straddle page boundaries
  pm.prefill(1, prompt, 10);
  cm.prefill(0, std::span(prompt).first(5));
  pm.prefill(0, std::span(prompt).first(5));
  require_same_cache(cm, pm, 1);
  const auto tree = token_tree::from_parents(std::vector<std::int32_t>{1, 2, 3, 4, 5, 6, 7},
                                             std::vector<std::int32_t>{-1, -1, 0, 0, 2, 4, 1});
  const std::vector<std::vector<std::int32_t>> paths = {{0, 2, 4, 5}, {}, {1, 6}, {0, 3}, {0, 2, 4, 5}, {1}, {0, 2}};
  std::int32_t root = prompt.back();
  for (std::size_t step = 0; step < paths.size(); ++step) {
    const int r = step % 3 == 2 ? 0 : 1;  // interleave the requests in the shared pool
    std::vector<T> a(static_cast<std::size_t>(tree.size() + 1) * c.vocab_size), b(a.size());
    cm.forward(r, root, tree, a);
    pm.forward(r, root, tree, b);
    REQUIRE(a == b);  // bit-identical logits
    cm.commit(r, paths[step]);
    pm.commit(r, paths[step]);
    require_same_cache(cm, pm, r);
    root = paths[step].empty() ? 9 : tree.token(paths[step].back());
  }
  CHECK(cm.cache_length(1) > 16 * 3);  // the sequence crossed several pages
  // A chain forward (no logits) and a truncate/continue behave the same.
  pm.truncate(1, 30);
  cm.truncate(1, 30);
  std::vector<T> a(static_cast<std::size_t>(c.vocab_size)), b(a.size());
  cm.forward(1, 4, token_tree{}, a);
  pm.forward(1, 4, token_tree{}, b);
  REQUIRE(a == b);
  // The LongSpec draft's cache-free cross-attention reads the paged target in place.
  longspec_draft_config dc;
  dc.window = 8;
  longspec_draft_model<T> dc_(cm, dc, derive_longspec_draft(w, dc)), dp(pm, dc, derive_longspec_draft(w, dc));
  for (int p = 0; p < 31; ++p) {
    const std::int32_t tok = p < 30 ? prompt[static_cast<std::size_t>(p) % prompt.size()] : 4;
    dc_.step(1, tok, p, true, p == 30 ? std::span<T>(a) : std::span<T>{});
    dp.step(1, tok, p, true, p == 30 ? std::span<T>(b) : std::span<T>{});
  }
  REQUIRE(a == b);
}
}  // namespace

TEST_CASE("llama paged KV == contiguous KV, bit for bit (float)", "[llama][paged]") { paged_equals_contiguous<float>(); }
TEST_CASE("llama paged KV == contiguous KV, bit for bit (double)", "[llama][paged]") { paged_equals_contiguous<double>(); }

TEST_CASE("llama storage options are validated", "[llama][paged][errors]") {
  const auto c = cfg();
  const auto w = random_llama_weights<float>(c, 1);
  REQUIRE_THROWS_WITH((llama_model<float>(c, w, 1, 8, {.storage = kv_storage::paged, .page_size = 0})),
                      Catch::Contains("options.page_size"));
  // pages per request counted in int64 (capacity + page_size - 1 overflowed int), and the cache's
  // element count checked (max_requests * capacity * kv_heads * head_dim wrapped size_t to a tiny cache)
  REQUIRE_THROWS_WITH((llama_model<float>(c, w, 2, INT32_MAX, {.storage = kv_storage::paged, .page_size = 2})),
                      Catch::Contains("'capacity'") && Catch::Contains("INT32_MAX"));
  REQUIRE_THROWS_WITH((llama_model<float>(c, w, INT32_MAX, INT32_MAX)),
                      Catch::Contains("'capacity'") && Catch::Contains("fits in int64"));
  llama_model<float> p(c, w, 1, 8, {.storage = kv_storage::paged});
  REQUIRE_THROWS_WITH(p.layer_kv(0), Catch::Contains("'storage'"));
  llama_model<float> q(c, w, 1, 8);
  REQUIRE_THROWS_WITH(q.paged_layer_kv(0), Catch::Contains("'storage'"));
  REQUIRE_THROWS_WITH(q.with_layer_kv(2, [](const auto&) { return 0; }), Catch::Contains("'layer'"));
  CHECK(q.with_layer_kv(1, [](const auto& l) { return l.head_dim(); }) == 64);
  CHECK(p.with_layer_kv(1, [](const auto& l) { return l.num_requests(); }) == 1);
}
