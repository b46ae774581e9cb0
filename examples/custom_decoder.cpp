// custom_decoder: a speculative decoder written by hand from specdec's primitives, no
// speculative_decoder class: prompt-lookup drafting (draft/prompt_lookup.hpp), a token_tree holding
// the draft, the reference LLaMA's tree forward (hybrid tree attention over its KV cache), logits
// processing and greedy tree verification (verify/greedy.hpp), then commit. It checks the output
// against the model's own greedy decoding and prints tau. Exit code 0 = lossless.
#include <cstdio>
#include <vector>

#include "common/llama.hpp"
#include "specdec/draft/prompt_lookup.hpp"
#include "specdec/sampling/logits_processor.hpp"
#include "specdec/verify/greedy.hpp"

int main() {
  using namespace specdec;
  using namespace specdec::examples;
  const llama_config cfg{.vocab_size = 256, .hidden = 64, .layers = 2, .heads = 2, .kv_heads = 1, .head_dim = 64,
                         .ffn_hidden = 128};
  const auto weights = random_llama_weights<float>(cfg, /*seed=*/7);
  const int new_tokens = 300;

  // A prompt with repetitions, the case prompt lookup is made for (code, documents, chat history).
  std::vector<std::int32_t> prompt;
  philox_stream rng(7, 1);
  std::vector<std::int32_t> phrase(12);
  for (auto& t : phrase) t = static_cast<std::int32_t>(rng.below(256));
  for (int rep = 0; rep < 6; ++rep) {
    prompt.insert(prompt.end(), phrase.begin(), phrase.end());
    prompt.push_back(static_cast<std::int32_t>(rng.below(256)));
  }

  // Reference: the model's own autoregressive greedy decoding.
  llama_model<float> reference_model(cfg, weights, 1, 1024);
  const auto reference = greedy_reference(reference_model, 0, prompt, new_tokens);

  // The hand-written loop.
  llama_model<float> target(cfg, weights, 1, 1024);
  target.prefill(0, prompt);
  prompt_lookup lookup({.min_ngram = 1, .max_ngram = 4, .num_tokens = 6});
  lookup.extend(prompt);
  std::vector<std::int32_t> committed = prompt, output;
  token_tree tree;
  std::vector<float> logits;
  sampling_workspace ws;
  const sampling_params greedy{.temperature = 0.0f};
  int steps = 0;
  while (static_cast<int>(output.size()) < new_tokens) {
    // 1. draft: copy what followed the latest earlier occurrence of the context's suffix.
    tree.clear();
    const auto proposal = lookup.propose();
    for (std::size_t i = 0; i < proposal.size(); ++i) tree.add(proposal[i], static_cast<std::int32_t>(i) - 1);
    // 2. verify: one target forward over root + tree (row 0 at the root, row i + 1 after node i).
    logits.resize(static_cast<std::size_t>(tree.size() + 1) * cfg.vocab_size);
    target.forward(0, committed.back(), tree, logits);
    const auto rows = make_view<2>(logits.data(), {tree.size() + 1, cfg.vocab_size});
    process_tree_logits(rows, greedy, committed, tree.tokens(), tree.parents(), ws);
    const verify_result result = verify_greedy(tree, rows);
    // 3. commit the root's and the accepted nodes' K/V; emit accepted tokens + the bonus token.
    target.commit(0, result.accepted);
    for (auto tok : result.emitted_tokens(tree)) {
      if (static_cast<int>(output.size()) == new_tokens) break;
      output.push_back(tok);
      committed.push_back(tok);
      lookup.push(tok);
    }
    ++steps;
  }

  const bool lossless = output == reference;
  std::printf("custom decoder: %d tokens in %d target forwards (tau %.2f), lossless: %s\n", new_tokens, steps,
              static_cast<double>(new_tokens) / steps, lossless ? "yes" : "NO");
  return lossless ? 0 : 1;
}
