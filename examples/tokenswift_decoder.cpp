// tokenswift_decoder: TokenSwift self-drafting (TokenSwift §3) composed from specdec's policies over
// the reference LLaMA in float: the target drafts for itself on a 256-token partial view of its own
// KV cache (kv/partial_kv.hpp, 16 sinks, Algorithm 1's rebuild rule) with 3 residual heads
// (draft/residual_heads.hpp) and 4-gram token reutilization, TokenSwift's tree (Cartesian heads +
// n-grams, decoder/tree_builders.hpp) and greedy verification. It checks the output against the
// model's own greedy decoding and prints tau, alpha, the partial-cache rebuilds and the draft's
// memory next to the full cache's. Exit code 0 = lossless.
//
//   tokenswift_decoder [--random]
//
// The model is the trained byte-level target of examples/weights with its trained residual heads
// (examples/training/train.py); the prompt is 3072 bytes of a header file the training held out (from
// byte 8192, in its code). --random: the seeded random model with heads fitted by ridge regression on its own greedy text
// (examples/common/tokenswift_draft.hpp), the example's original setting.
#include <cstdio>
#include <exception>
#include <string_view>
#include <vector>

#include "common/demo.hpp"
#include "common/tokenswift_draft.hpp"
#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/decoder/tree_builders.hpp"
#include "specdec/decoder/verifiers.hpp"

namespace {
int tokenswift_decoder_run(bool random) {
  using namespace specdec;
  using namespace specdec::examples;
  llama_config cfg{.vocab_size = 256, .hidden = 64, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 64,
                   .ffn_hidden = 128};
  llama_weights<float> weights;
  residual_head_weights<float> heads;
  std::vector<std::int32_t> prompt;
  auto prompt_of = [&](std::uint64_t seed, int n) {
    philox_stream rng(seed, 3);
    std::vector<std::int32_t> p(static_cast<std::size_t>(n));
    for (auto& t : p) t = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(cfg.vocab_size)));
    return p;
  };
  if (random) {
    weights = random_llama_weights<float>(cfg, /*seed=*/21, {.block_scale = 0.4});
    // heads fitted on 400 greedy positions after another prompt
    heads = fit_residual_heads(greedy_hidden_states(cfg, weights, prompt_of(2, 64), 400), /*gamma=*/3);
    prompt = prompt_of(1, 64);
  } else {
    const auto file = safetensors_file::load(default_weights_dir() + "/target.safetensors");
    cfg = llama_config_from_metadata(file);
    weights = load_llama_weights<float>(file, cfg);
    heads = load_residual_heads<float>(file, cfg.hidden);
    prompt = read_byte_tokens(default_prompt_file(), 3072, 3072, 8192);
  }
  const int new_tokens = random ? 1000 : 400, capacity = static_cast<int>(prompt.size()) + new_tokens + 200;

  // Reference: the model's own autoregressive greedy decoding.
  llama_model<float> reference_model(cfg, weights, 1, capacity);
  const auto reference = greedy_reference(reference_model, 0, prompt, new_tokens);

  // The draft: partial view |B| = 256, |S| = 16.
  llama_model<float> target(cfg, weights, 1, capacity);
  // compact: the draft attends over a dense copy of each layer's view (kv/partial_kv.hpp's
  // compact_partial_kv, what TokenSwift keeps), the fast path on the host.
  tokenswift_self_draft<float> draft(target, {.budget = 256, .sink = 16, .compact = true}, heads);

  using decoder_t = speculative_decoder<llama_model<float>, self_drafter<tokenswift_self_draft<float>>,
                                        tokenswift_tree_builder, greedy_verifier>;
  decoder_t decoder(target, self_drafter<tokenswift_self_draft<float>>(draft), tokenswift_tree_builder({1, 3, 3, 3}, 64));
  const auto out = decoder.generate(prompt, {.max_new_tokens = new_tokens, .draft_depth = 4, .draft_width = 3});

  const bool lossless = out.tokens == reference;
  const auto& st = decoder.stats();
  const double draft_kb = static_cast<double>(draft.draft_bytes()) / 1024.0;
  std::printf("%s\n", random ? "seeded random model, fitted heads" : "trained byte-level target and heads (examples/weights)");
  std::printf("tokenswift decoder: %d tokens in %ld target forwards (tau %.2f, alpha %.2f), lossless: %s\n", new_tokens,
              static_cast<long>(st.steps), st.tau(), st.alpha(), lossless ? "yes" : "NO");
  std::printf("  partial-cache rebuilds: %ld (all layers); draft state (indices + 256-token K/V copies) %.1f KB, "
              "fixed, vs the full KV cache %.1f KB\n",
              draft.rebuilds(), draft_kb,
              // the decoder released the request's slot when it finished: computed, not read back
              static_cast<double>((prompt.size() + out.tokens.size() - 1) * target.kv_bytes_per_token()) / 1024.0);
  return lossless ? 0 : 1;
}
}  // namespace

int main(int argc, char** argv) {
  // one optional argument; anything else (a typo of --random) is an error, not the trained run
  if (argc > 2 || (argc == 2 && std::string_view(argv[1]) != "--random")) {
    std::fprintf(stderr, "tokenswift_decoder: unknown argument %s (usage: tokenswift_decoder [--random])\n",
                 argv[argc > 2 && std::string_view(argv[1]) == "--random" ? 2 : 1]);
    return 2;
  }
  try {
    return tokenswift_decoder_run(argc == 2);
  } catch (const std::exception& e) {  // missing weights or prompt file: a message, not std::terminate
    std::fprintf(stderr, "tokenswift_decoder: %s\n", e.what());
    return 2;
  }
}
