// The LongSpec draft model: constant draft state whatever the context, speculative tokens never reach
// the ring (drafting then discarding leaves the next prediction unchanged), float (library
// sliding_window_attention over the ring_kv_cache, library cross_attention) agrees with double (their
// double references) on committed and speculative-chain steps, the window forgets exactly what is
// outside the receptive field, and GLIDE's layer map is checked.
#include <catch2/catch.hpp>

#include <limits>

#include "../../examples/common/longspec_draft.hpp"

using namespace specdec;
using namespace specdec::examples;

namespace {
llama_config cfg() { return {.vocab_size = 40, .hidden = 24, .layers = 3, .heads = 2, .kv_heads = 1, .head_dim = 64, .ffn_hidden = 32}; }
template <class T>
llama_weights<T> convert(const llama_weights<double>& w) {
  return convert_weights<T>(w);
}
}  // namespace

TEST_CASE("GLIDE layer map and draft derivation", "[longspec]") {
  CHECK(glide_layer_map(4, 2) == std::vector<int>{2, 3});
  CHECK(glide_layer_map(3, 1) == std::vector<int>{2});
  REQUIRE_THROWS_WITH(glide_layer_map(2, 3), Catch::Contains("draft_layers"));
  const auto w = random_llama_weights<double>(cfg(), 1);
  longspec_draft_config dc;
  dc.layers = 2;
  const auto dw = derive_longspec_draft(w, dc);
  CHECK(dc.layer_map == std::vector<int>{1, 2});
  CHECK(dw.layers[1].cq == w.layers[2].wq);  // cross-attention query from the mapped target layer
  CHECK(dw.layers[0].wk == w.layers[0].wk);
  dc.layer_map = {0, 7};
  REQUIRE_THROWS_WITH(derive_longspec_draft(w, dc), Catch::Contains("layer_map"));
}

TEST_CASE("LongSpec draft: constant state, speculation discarded, float matches double", "[longspec]") {
  const auto c = cfg();
  const auto wd = random_llama_weights<double>(c, 2);
  llama_model<double> td(c, wd, 1, 512);
  llama_model<float> tf(c, convert<float>(wd), 1, 512);
  std::vector<std::int32_t> prompt(300);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<std::int32_t>((i * 7 + i / 5) % 40);
  td.prefill(0, prompt);
  tf.prefill(0, prompt);
  longspec_draft_config dc;
  dc.window = 32;
  longspec_draft_model<double> dd(td, dc, derive_longspec_draft(wd, dc));
  longspec_draft_model<float> df(tf, dc, derive_longspec_draft(convert<float>(wd), dc));
  const auto bytes = dd.state_bytes();
  CHECK(bytes == 1u * 32 * 1 * 64 * 2 * sizeof(double));
  std::vector<double> a(40), b(40);
  std::vector<float> f(40);
  for (int p = 0; p < 300; ++p) {
    dd.step(0, prompt[p], p, true, p == 299 ? std::span<double>(a) : std::span<double>{});
    df.step(0, prompt[p], p, true, p == 299 ? std::span<float>(f) : std::span<float>{});
  }
  CHECK(dd.state_bytes() == bytes);  // the ring does not grow with the context
  {  // draft weights of another geometry are refused; a window past the target's capacity is cut to it
    auto bad = derive_longspec_draft(wd, dc);
    bad.layers[0].co.clear();
    REQUIRE_THROWS_WITH(longspec_draft_model<double>(td, dc, bad), Catch::Contains("weights.layers[0].co.size()"));
    auto wide = dc;
    wide.window = std::numeric_limits<int>::max();
    const longspec_draft_model<double> cut(td, wide, derive_longspec_draft(wd, wide));
    CHECK(cut.config().window == td.capacity());
  }
  CHECK(dd.absorbed(0) == 300);
  for (int v = 0; v < 40; ++v) REQUIRE(f[v] == Approx(a[v]).margin(2e-3 * (1 + std::abs(a[v]))));
  // Speculate three tokens, discard, and the next committed step is unaffected.
  std::vector<double> spec(40);
  for (int d = 0; d < 3; ++d) dd.step(0, d + 1, 300 + d, false, spec);
  dd.discard_speculation(0);
  longspec_draft_model<double> fresh(td, dc, derive_longspec_draft(wd, dc));
  for (int p = 0; p < 300; ++p) fresh.step(0, prompt[p], p, true, {});
  dd.step(0, 5, 300, true, a);
  fresh.step(0, 5, 300, true, b);
  for (int v = 0; v < 40; ++v) REQUIRE(a[v] == b[v]);
  REQUIRE_THROWS_WITH(dd.step(0, 99, 301, true, a), Catch::Contains("'token'"));
  REQUIRE_THROWS_WITH(dd.step(2, 1, 301, true, a), Catch::Contains("'request'"));
  // Session 56: a committed step at INT_MAX set absorbed to INT_MAX + 1 (signed overflow)
  REQUIRE_THROWS_WITH(dd.step(0, 1, std::numeric_limits<int>::max(), true, a), Catch::Contains("'position'"));
  CHECK(dd.absorbed(0) == 301);
}

TEST_CASE("LongSpec draft: window semantics, speculative chain, float vs double on the chain", "[longspec]") {
  const auto c = cfg();
  const auto wd = random_llama_weights<double>(c, 4);
  llama_model<double> td(c, wd, 2, 512);
  llama_model<float> tf(c, convert<float>(wd), 2, 512);
  std::vector<std::int32_t> prompt(200);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<std::int32_t>((i * 13 + i / 3) % 40);
  td.prefill(1, prompt);
  tf.prefill(1, prompt);
  longspec_draft_config dc;
  dc.layers = 2;
  dc.window = 24;
  longspec_draft_model<double> full(td, dc, derive_longspec_draft(wd, dc)), skip(td, dc, derive_longspec_draft(wd, dc));
  longspec_draft_model<float> df(tf, dc, derive_longspec_draft(convert<float>(wd), dc));
  // Absorb all 200 tokens (the rings wrap ~8 times) vs only the last receptive_field() + 1: identical
  // logits, so the ring shows exactly the window and a jump forgets only what cannot matter.
  std::vector<double> a(40), b(40);
  std::vector<float> f(40);
  const int from = 199 - skip.receptive_field();
  skip.step(1, 3, 7, true, {});  // stale history before the jump
  for (int p = 0; p < 200; ++p) {
    full.step(1, prompt[p], p, true, p == 199 ? std::span<double>(a) : std::span<double>{});
    df.step(1, prompt[p], p, true, p == 199 ? std::span<float>(f) : std::span<float>{});
    if (p >= from) skip.step(1, prompt[p], p, true, p == 199 ? std::span<double>(b) : std::span<double>{});
  }
  for (int v = 0; v < 40; ++v) REQUIRE(a[v] == b[v]);
  CHECK(full.absorbed(0) == 0);  // requests are independent
  // The first speculative token sees what a committed token at its position sees (ring window + itself).
  std::vector<double> s0(40), c0(40);
  full.step(1, 11, 200, false, s0);
  skip.step(1, 11, 200, true, c0);
  for (int v = 0; v < 40; ++v) REQUIRE(s0[v] == c0[v]);
  // A chain of speculative tokens: float (optimized sliding-window + cross attention) vs double (references).
  full.discard_speculation(1);
  for (int d = 0; d < 4; ++d) {
    full.step(1, 5 + d, 200 + d, false, a);
    df.step(1, 5 + d, 200 + d, false, f);
    for (int v = 0; v < 40; ++v) REQUIRE(f[v] == Approx(a[v]).margin(2e-3 * (1 + std::abs(a[v]))));
  }
  // The chain changes deeper predictions (the tree part is really attended to): re-running depth 3 after
  // a different depth-0 token gives different logits.
  full.discard_speculation(1);
  for (int d = 0; d < 4; ++d) full.step(1, d == 0 ? 30 : 5 + d, 200 + d, false, b);
  bool differs = false;
  for (int v = 0; v < 40; ++v) differs = differs || a[v] != b[v];
  CHECK(differs);
  REQUIRE_THROWS_WITH(full.step(1, 1, 210, false, a), Catch::Contains("'position'"));  // not the chain's next
  REQUIRE_THROWS_WITH(full.step(1, 1, 150, true, a), Catch::Contains("'position'"));   // before absorbed
}
