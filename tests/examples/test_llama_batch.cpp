// llama_model::forward_batch (one transformer pass over every entry's root and tree rows) against the
// per-request forward (the losslessness reference): for double and float, contiguous and paged storage,
// batches of requests with different cache lengths (an empty cache included) and different tree shapes
// (an empty tree included), in shuffled slot order and over several steps with commits in between:
// bit-identical logit rows, and commit after forward_batch leaves the same cache as commit after forward
// (identical cached K/V rows, identical logits of a following forward). Bad batches throw
// specdec::invalid_argument and change nothing; release() empties a slot.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <type_traits>

#include "../../examples/common/llama.hpp"

using namespace specdec;
using namespace specdec::examples;

namespace {
llama_config cfg() {
  return {.vocab_size = 48, .hidden = 32, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 64, .ffn_hidden = 40};
}
constexpr int kSlots = 6, kCapacity = 1700;

std::vector<std::int32_t> random_tokens(philox_stream& rng, int n) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(cfg().vocab_size)));
  return t;
}

// n nodes, each the child of the root or of a random earlier node (shape 0: chain, 1: random, 2: wide).
token_tree random_tree(philox_stream& rng, int n, int shape) {
  std::vector<std::int32_t> parents(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    parents[static_cast<std::size_t>(i)] = shape == 0   ? i - 1
                                           : shape == 2 ? (i < 3 ? -1 : static_cast<std::int32_t>(rng.below(3)))
                                                        : static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(i + 1))) - 1;
  return token_tree::from_parents(random_tokens(rng, n), parents);
}

// A root-to-leaf path ending at a random node (or empty).
std::vector<std::int32_t> random_path(philox_stream& rng, const token_tree& t) {
  std::vector<std::int32_t> p;
  const int pick = static_cast<int>(rng.below(static_cast<std::uint32_t>(t.size() + 1))) - 1;
  for (int i = pick; i >= 0; i = t.parent(i)) p.push_back(i);
  std::reverse(p.begin(), p.end());
  return p;
}

template <class T>
bool same_bits(const T* a, const T* b, std::size_t n) {
  return std::memcmp(a, b, n * sizeof(T)) == 0;
}

template <class T>
void require_same_cache(const llama_model<T>& a, const llama_model<T>& b, int r) {
  REQUIRE(a.cache_length(r) == b.cache_length(r));
  const int D = cfg().head_dim;
  for (int l = 0; l < cfg().layers; ++l)
    a.with_layer_kv(l, [&](const auto& ka) {
      b.with_layer_kv(l, [&](const auto& kb) {
        for (int t = 0; t < a.cache_length(r); ++t)
          for (int h = 0; h < cfg().kv_heads; ++h) {
            REQUIRE(same_bits(ka.k_row(r, t, h), kb.k_row(r, t, h), static_cast<std::size_t>(D)));
            REQUIRE(same_bits(ka.v_row(r, t, h), kb.v_row(r, t, h), static_cast<std::size_t>(D)));
          }
      });
    });
}

struct batch_input {
  std::vector<int> slots;
  std::vector<std::int32_t> roots, row_indptr;
  std::vector<token_tree> trees;
  token_tree_batch tb;
  template <class T>
  void build(const llama_model<T>& m) {
    tb.clear();
    row_indptr.assign(1, 0);
    for (std::size_t e = 0; e < slots.size(); ++e) {
      tb.push_back(trees[e], m.cache_length(slots[e]) + 1);
      row_indptr.push_back(row_indptr.back() + trees[e].size() + 1);
    }
  }
  [[nodiscard]] target_batch view() const { return {slots, roots, tb, row_indptr, {}}; }
};

template <class T>
void batch_equals_per_request(kv_storage storage) {
  const auto c = cfg();
  const auto w = random_llama_weights<T>(c, 23);
  const llama_options o{.storage = storage, .page_size = 16, .page_seed = 9};
  llama_model<T> batched(c, w, kSlots, kCapacity, o), single(c, w, kSlots, kCapacity, o);
  philox_stream rng(41, 2);
  // Slots 4, 0, 2, 5 with prompts of 1 (empty cache: the root only), 9, long and 20 tokens. float:
  // slot 2's cache spans several split-KV parts (llama_model::attention_kv_split = 256), and is long
  // enough that the automatic split of a batch (it looks at the batch's total cache) differs from a
  // lone request's on a 2-thread host: this test fails if the model leaves the split automatic.
  // double (the reference attention, O(L^2) per prefill) keeps it shorter.
  const std::vector<int> slots = {4, 0, 2, 5};
  const std::vector<int> prompt_len = {1, 9, std::is_same_v<T, float> ? 1500 : 300, 20};
  std::vector<std::int32_t> roots(slots.size());
  for (std::size_t e = 0; e < slots.size(); ++e) {
    const auto p = random_tokens(rng, prompt_len[e]);
    batched.prefill(slots[e], p, 64);
    single.prefill(slots[e], p, 64);
    roots[e] = p.back();
  }
  REQUIRE(batched.cache_length(4) == 0);
  for (int step = 0; step < 6; ++step) {
    INFO("step " << step);
    batch_input in;
    // Every entry in a shuffled order; on odd steps one entry sits the step out.
    std::vector<std::size_t> order(slots.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(static_cast<std::uint32_t>(i))]);
    if (step % 2 == 1) order.pop_back();
    for (std::size_t k = 0; k < order.size(); ++k) {
      const std::size_t e = order[k];
      in.slots.push_back(slots[e]);
      in.roots.push_back(roots[e]);
      // One empty tree per step (rotating), the others 1..24 nodes of varying shape (more than 16 query
      // rows x 2 heads per kv head switches the float attention's head grouping for the whole call).
      const int n = (step + static_cast<int>(e)) % 4 == 0 ? 0 : 1 + static_cast<int>(rng.below(24));
      in.trees.push_back(random_tree(rng, n, static_cast<int>(rng.below(3))));
    }
    in.build(batched);
    const auto logits = batched.forward_batch(in.view());
    REQUIRE(logits.extent(0) == in.row_indptr.back());
    REQUIRE(logits.extent(1) == c.vocab_size);
    REQUIRE(logits.stride(0) == c.vocab_size);
    REQUIRE(logits.stride(1) == 1);
    for (std::size_t k = 0; k < in.slots.size(); ++k) {
      const auto& tree = in.trees[k];
      std::vector<T> ref(static_cast<std::size_t>(tree.size() + 1) * c.vocab_size);
      single.forward(in.slots[k], in.roots[k], tree, ref);
      const T* rows = logits.data() + static_cast<std::ptrdiff_t>(in.row_indptr[k]) * c.vocab_size;
      REQUIRE(same_bits(rows, ref.data(), ref.size()));  // bit-identical, float and double
    }
    // Commit a random accepted path of every entry on both models (forward_batch's logits stay valid
    // until the next forward, so read them first: done above).
    for (std::size_t k = 0; k < in.slots.size(); ++k) {
      const auto path = random_path(rng, in.trees[k]);
      batched.commit(in.slots[k], path);
      single.commit(in.slots[k], path);
      require_same_cache(batched, single, in.slots[k]);
      const auto e = static_cast<std::size_t>(std::find(slots.begin(), slots.end(), in.slots[k]) - slots.begin());
      roots[e] = path.empty() ? static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(c.vocab_size)))
                              : in.trees[k].token(path.back());
    }
  }
  // A following per-request forward gives identical logits on both models.
  const auto tree = token_tree::from_parents(std::vector<std::int32_t>{1, 2, 3, 4}, std::vector<std::int32_t>{-1, 0, 0, -1});
  for (std::size_t e = 0; e < slots.size(); ++e) {
    std::vector<T> a(static_cast<std::size_t>(tree.size() + 1) * c.vocab_size), b(a.size());
    batched.forward(slots[e], roots[e], tree, a);
    single.forward(slots[e], roots[e], tree, b);
    REQUIRE(same_bits(a.data(), b.data(), a.size()));
  }
  CHECK(batched.cache_length(2) > 300);
}

template <class T>
void bad_batches_change_nothing() {
  const auto c = cfg();
  const auto w = random_llama_weights<T>(c, 5);
  llama_model<T> model(c, w, 3, 24), twin(c, w, 3, 24);
  philox_stream rng(8, 3);
  const auto p0 = random_tokens(rng, 6), p1 = random_tokens(rng, 20);
  for (auto* m : {&model, &twin}) m->prefill(0, p0), m->prefill(1, p1);
  // One valid step on both (the state a failing call must leave alone).
  batch_input ok;
  ok.slots = {1, 0};
  ok.roots = {p1.back(), p0.back()};
  ok.trees = {random_tree(rng, 2, 0), random_tree(rng, 5, 1)};
  ok.build(model);
  const auto view = model.forward_batch(ok.view());
  const std::vector<T> before(view.data(), view.data() + view.extent(0) * view.extent(1));
  (void)twin.forward_batch(ok.view());

  auto fails = [&](batch_input& bad) { REQUIRE_THROWS_AS(model.forward_batch(bad.view()), invalid_argument); };
  {  // row_indptr one row short for entry 1
    batch_input bad = ok;
    bad.build(model);
    bad.row_indptr[2] -= 1;
    fails(bad);
  }
  {  // row_indptr not starting at 0
    batch_input bad = ok;
    bad.build(model);
    for (auto& x : bad.row_indptr) x += 1;
    fails(bad);
  }
  {  // row_indptr of the wrong size
    batch_input bad = ok;
    bad.build(model);
    bad.row_indptr.pop_back();
    fails(bad);
  }
  {  // duplicate slots
    batch_input bad = ok;
    bad.slots = {1, 1};
    bad.build(model);
    fails(bad);
  }
  {  // slot out of range
    batch_input bad = ok;
    bad.build(model);
    bad.slots = {1, 3};
    fails(bad);
  }
  {  // capacity: slot 1 holds 19 tokens of 24; 5 nodes + root do not fit
    batch_input bad = ok;
    bad.trees[0] = random_tree(rng, 5, 1);
    bad.build(model);
    fails(bad);
  }
  {  // root token out of range
    batch_input bad = ok;
    bad.roots[1] = c.vocab_size;
    bad.build(model);
    fails(bad);
  }
  {  // a node token out of range
    batch_input bad = ok;
    bad.trees[1] = token_tree::from_parents(std::vector<std::int32_t>{1, -1}, std::vector<std::int32_t>{-1, 0});
    bad.build(model);
    fails(bad);
  }
  {  // trees built for other committed lengths (positions would disagree with the cache)
    batch_input bad = ok;
    bad.build(model);
    bad.tb.clear();
    bad.tb.push_back(bad.trees[0], model.cache_length(1) + 1);
    bad.tb.push_back(bad.trees[1], model.cache_length(0) + 2);
    fails(bad);
  }
  {  // roots and trees of different counts than slots
    batch_input bad = ok;
    bad.build(model);
    bad.roots.pop_back();
    fails(bad);
    bad = ok;
    bad.slots.pop_back();
    bad.roots.pop_back();
    bad.build(model);
    bad.slots = ok.slots;
    bad.roots = ok.roots;
    fails(bad);
  }
  // Nothing changed: the returned logits, the caches, and the kept tree K/V (commit as on the twin).
  REQUIRE(same_bits(view.data(), before.data(), before.size()));
  for (int r = 0; r < 2; ++r) {
    const auto path = random_path(rng, ok.trees[static_cast<std::size_t>(1 - r)]);
    model.commit(r, path);
    twin.commit(r, path);
    require_same_cache(model, twin, r);
  }
  // release() empties the slot and forgets its last forward.
  model.release(1);
  CHECK(model.cache_length(1) == 0);
  CHECK(model.cache_length(0) == twin.cache_length(0));
  REQUIRE_THROWS_AS(model.commit(1, {}), invalid_argument);
  REQUIRE_THROWS_AS(model.release(3), invalid_argument);
  // An empty batch is a no-op returning no rows.
  batch_input none;
  none.build(model);
  const auto empty = model.forward_batch(none.view());
  CHECK(empty.extent(0) == 0);
  CHECK(empty.extent(1) == c.vocab_size);
}
}  // namespace

TEST_CASE("llama forward_batch equals per-request forward (double)", "[llama][batch]") {
  batch_equals_per_request<double>(kv_storage::contiguous);
  batch_equals_per_request<double>(kv_storage::paged);
}

TEST_CASE("llama forward_batch equals per-request forward (float)", "[llama][batch]") {
  batch_equals_per_request<float>(kv_storage::contiguous);
  batch_equals_per_request<float>(kv_storage::paged);
}

TEST_CASE("llama forward_batch rejects bad batches and changes nothing", "[llama][batch]") {
  bad_batches_change_nothing<double>();
  bad_batches_change_nothing<float>();
}
