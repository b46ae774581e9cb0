// serving_loop: an engine's loop over specdec::speculative_batch (continuous batching). Sixteen
// requests with different prompts, lengths and draft trees arrive over time at a 4-slot reference
// LLaMA; each step drafts for every active request, runs the target once for all of them, verifies
// and commits; finished requests leave and waiting ones take their slots. Every output is checked
// against that request's own greedy decoding. Exit code 0 = every request lossless.
#include <cstdio>
#include <deque>
#include <exception>
#include <map>
#include <span>
#include <vector>

#include "common/llama.hpp"
#include "specdec/decoder/speculative_batch.hpp"

int main() {
  using namespace specdec;
  using namespace specdec::examples;
  const llama_config cfg{.vocab_size = 256, .hidden = 64, .layers = 2, .heads = 2, .kv_heads = 1, .head_dim = 64,
                         .ffn_hidden = 128};
  const auto weights = random_llama_weights<float>(cfg, /*seed=*/7);

  struct request {
    std::uint32_t id;
    int arrives;  // the step before which it arrives
    std::vector<std::int32_t> prompt;
    generation_options options;
  };
  std::deque<request> waiting;
  philox_stream rng(11, 0);
  for (std::uint32_t i = 0; i < 16; ++i) {
    std::vector<std::int32_t> phrase(4 + rng.below(12)), prompt;  // repeated phrases: prompt lookup finds them
    for (auto& t : phrase) t = static_cast<std::int32_t>(rng.below(256));
    for (std::uint64_t rep = 0, n = 2 + rng.below(6); rep < n; ++rep) prompt.insert(prompt.end(), phrase.begin(), phrase.end());
    waiting.push_back({100 + i, static_cast<int>(3 * i), prompt,
                       {.max_new_tokens = 40 + static_cast<int>(rng.below(120)),
                        .draft_depth = 2 + static_cast<int>(rng.below(5)),    // tree depth
                        .draft_width = 1 + static_cast<int>(rng.below(3))}});  // and branching
  }
  const std::vector<request> all(waiting.begin(), waiting.end());

  llama_model<float> target(cfg, weights, /*max_requests=*/4, /*capacity=*/1024);
  speculative_batch<llama_model<float>, ngram_drafter, trie_tree_builder, greedy_verifier> batch(target);
  std::map<std::uint32_t, std::vector<std::int32_t>> output;
  int step = 0, most_active = 0;
  while (!waiting.empty() || batch.active() > 0) {
    while (!waiting.empty() && waiting.front().arrives <= step && batch.free_slots() > 0) {  // joins
      batch.add_request(waiting.front().id, waiting.front().prompt, waiting.front().options);
      waiting.pop_front();
    }
    most_active = std::max(most_active, batch.active());
    std::span<const step_output> outputs;
    try {
      outputs = batch.step();  // one batched target forward
    } catch (const std::exception& e) {
      // One request's own drafter, verifier or commit failed: drop it and step the others again.
      // A failure of the whole batch (the forward) has no request to blame: give up.
      const auto id = batch.failed_request();
      if (!id) throw;
      std::printf("step %3d: request %u failed (%s), aborted\n", step, *id, e.what());
      batch.abort(*id);
      continue;
    }
    for (const step_output& out : outputs) {
      auto& tokens = output[out.id];
      tokens.insert(tokens.end(), out.tokens.begin(), out.tokens.end());
      if (out.finished)
        std::printf("step %3d: request %u done, %3zu tokens, tau %.2f\n", step, out.id, tokens.size(), out.stats.tau());
    }
    ++step;
  }

  int lossless = 0;
  for (const auto& r : all) {
    llama_model<float> alone(cfg, weights, 1, 1024);
    lossless += output[r.id] == greedy_reference(alone, 0, r.prompt, r.options.max_new_tokens);
  }
  const auto& s = batch.stats();
  std::printf("%d steps, up to %d requests per target forward, %lld request-steps, tau %.2f; lossless %d/16\n", step,
              most_active, static_cast<long long>(s.steps), s.tau(), lossless);
  return lossless == 16 ? 0 : 1;
}
