#pragma once
// Shared set-up of the decoder's losslessness tests: a tiny double-precision reference LLaMA, its own
// autoregressive greedy output, and a runner that checks one drafter x builder x verifier combination
// token for token over >= 1000 new tokens for several seeds.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "../../examples/common/longspec_draft.hpp"
#include "specdec/decoder/speculative_decoder.hpp"

namespace lossless {

using namespace specdec;
using namespace specdec::examples;
using model = llama_model<double>;

inline constexpr int new_tokens = 1000;
// A smaller context contribution than the default makes the tiny model predictable enough that model
// drafters are accepted often (fewer, longer steps keep the tests fast) but not always (alpha < 1, so
// rejection paths run).
inline constexpr double block_scale = 0.7;
inline constexpr std::uint64_t seeds[] = {11, 22, 33};

inline llama_config tiny_config() {
  // heads = kv_heads = 1 halves the attention cost; GQA (heads > kv_heads) is covered by tests/examples.
  return {.vocab_size = 48, .hidden = 16, .layers = 2, .heads = 1, .kv_heads = 1, .head_dim = 64, .ffn_hidden = 24};
}

inline std::vector<std::int32_t> prompt_for(std::uint64_t seed, int vocab, int n = 24) {
  philox_stream rng(seed, 99);
  std::vector<std::int32_t> p(static_cast<std::size_t>(n));
  for (auto& t : p) t = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(vocab)));
  return p;
}

//! Everything one seed needs: weights, the prompt and the reference greedy continuation.
struct fixture {
  llama_config cfg = tiny_config();
  llama_weights<double> weights;
  std::vector<std::int32_t> prompt, reference;
  explicit fixture(std::uint64_t seed)
      : weights(random_llama_weights<double>(cfg, seed, {.block_scale = block_scale})),
        prompt(prompt_for(seed, cfg.vocab_size)) {
    model ref(cfg, weights, 1, new_tokens + 64);
    reference = greedy_reference(ref, 0, prompt, new_tokens);
  }
};

//! The fixture of seeds[i % 3], built on first use (each file pays only for the seeds it uses).
inline const fixture& fixture_for(int i) {
  static std::unique_ptr<fixture> f[3];
  auto& slot = f[i % 3];
  if (!slot) slot = std::make_unique<fixture>(seeds[i % 3]);
  return *slot;
}

//! Runs the decoder with the drafter make_drafter(target, fixture) builds and checks that its output
//! equals the reference token for token, for the seeds seed_indices (each combination of a file uses
//! a different seed, so a file covers several seeds).
template <class Verifier, class Builder, class MakeDrafter>
void check_combination(Builder builder, MakeDrafter make_drafter, const char* name, std::vector<int> seed_indices) {
  for (int si : seed_indices) {
    const fixture& fx = fixture_for(si);
    model target(fx.cfg, fx.weights, 1, new_tokens + 64);
    auto drafter_holder = make_drafter(target, fx);  // owns any draft model; .drafter() gives the policy
    auto decoder = speculative_decoder<model, typename decltype(drafter_holder)::policy, Builder, Verifier>(
        target, drafter_holder.policy_object(), builder);
    const auto out = decoder.generate(fx.prompt, {.max_new_tokens = new_tokens, .draft_depth = 4, .draft_width = 3});
    INFO(name << " tau " << decoder.stats().tau());
    REQUIRE(out.tokens.size() == fx.reference.size());
    for (std::size_t i = 0; i < out.tokens.size(); ++i) {
      INFO("token " << i);
      REQUIRE(out.tokens[i] == fx.reference[i]);
    }
    CHECK(decoder.stats().tau() >= 1.0);
    CHECK(decoder.stats().emitted >= new_tokens);
  }
}

// Drafter factories: each returns a holder that keeps the draft model alive.
struct ngram_holder {
  using policy = ngram_drafter;
  policy policy_object() const { return {}; }
};
inline auto make_ngram = [](model&, const fixture&) { return ngram_holder{}; };

struct chain_holder {
  using policy = chain_drafter<model>;
  std::unique_ptr<model> small;
  policy policy_object() const { return policy(*small); }
};
// The chain drafter's model: a 1-layer LLaMA sharing the target's first layer (a cheap approximation).
inline auto make_chain = [](model&, const fixture& fx) {
  auto c = fx.cfg;
  c.layers = 1;
  auto w = fx.weights;
  w.layers.resize(1);
  return chain_holder{std::make_unique<model>(c, std::move(w), 1, new_tokens + 64)};
};

struct longspec_holder {
  using policy = longspec_drafter<longspec_draft_model<double>>;
  std::unique_ptr<longspec_draft_model<double>> draft;
  std::vector<int> beam;
  policy policy_object() const { return policy(*draft, beam); }
};
inline auto make_longspec(std::vector<int> beam) {
  return [beam](model& target, const fixture& fx) {
    longspec_draft_config dc;
    dc.window = 16;
    auto dw = derive_longspec_draft(fx.weights, dc);
    return longspec_holder{std::make_unique<longspec_draft_model<double>>(target, dc, std::move(dw)), beam};
  };
}

}  // namespace lossless
