// custom_decoder: a user-written drafter and verifier under the library's decoder. The drafter keeps
// a prompt-lookup index per request slot (draft/prompt_lookup.hpp); the verifier accepts the longest
// path whose tokens are the target's argmax (verify/greedy.hpp). speculative_decoder checks both
// against its policy concepts, then drives them with the reference LLaMA. Exit code 0 = lossless.
#include <algorithm>
#include <cstdio>
#include <vector>

#include "common/llama.hpp"
#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/draft/prompt_lookup.hpp"
#include "specdec/verify/greedy.hpp"

struct lookup_drafter {  // the drafter policy: reset(slot) and propose(request, candidates)
  std::vector<specdec::prompt_lookup> slots;
  void reset(int r) {  // a new request in slot r
    if (slots.size() <= static_cast<std::size_t>(r)) slots.resize(r + 1, specdec::prompt_lookup({.num_tokens = 6}));
    slots[r].clear();
  }
  void propose(const specdec::draft_request& req, specdec::draft_candidates& out) {
    auto& index = slots[req.request];  // feed the tokens committed since the last call
    index.extend(req.tokens.subspan(index.context().size()));
    out.clear();
    for (auto t : index.propose()) out.chain.push_back({t, 0.0f});
    out.chain.resize(std::min<std::size_t>(out.chain.size(), static_cast<std::size_t>(req.depth)));
  }
};

struct argmax_verifier {  // the verifier policy: greedy only, so the decoder requires temperature 0
  static constexpr bool is_lossless_for_sampling = false;
  void verify(const specdec::verify_input& in, specdec::verify_result& out) const {
    out = specdec::verify_greedy(in.tree, in.logits);
  }
};

int main() {
  using namespace specdec;
  using namespace specdec::examples;
  const llama_config cfg{.vocab_size = 256, .hidden = 64, .layers = 2, .heads = 2, .kv_heads = 1, .head_dim = 64,
                         .ffn_hidden = 128};
  const auto weights = random_llama_weights<float>(cfg, /*seed=*/7);
  std::vector<std::int32_t> phrase(12), prompt;  // repetitions: what prompt lookup is made for
  philox_stream rng(7, 1);
  for (auto& t : phrase) t = static_cast<std::int32_t>(rng.below(256));
  for (int rep = 0; rep < 6; ++rep) prompt.insert(prompt.end(), phrase.begin(), phrase.end());

  llama_model<float> reference_model(cfg, weights, 1, 1024), target(cfg, weights, 1, 1024);
  const auto reference = greedy_reference(reference_model, 0, prompt, 300);
  speculative_decoder<llama_model<float>, lookup_drafter, chain_tree_builder, argmax_verifier> decoder(target);
  const auto out = decoder.generate(prompt, {.max_new_tokens = 300, .draft_depth = 6});
  const bool lossless = out.tokens == reference;
  std::printf("custom decoder: %zu tokens in %lld target forwards (tau %.2f), lossless: %s\n", out.tokens.size(),
              static_cast<long long>(decoder.stats().steps), decoder.stats().tau(), lossless ? "yes" : "NO");
  return lossless ? 0 : 1;
}
