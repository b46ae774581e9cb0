// One LongSpec beam proposal (widths {4, 16, 16, 16, 16}, LongSpec Appendix B) with the example draft
// (examples/common/longspec_draft.hpp: 1 layer, window 512, cross-attention into a 4000-token target
// cache; float, hidden 512, 8/2 heads of 64, FFN 1024, vocab 4096), one new committed token per
// proposal. Two draft-model interfaces:
//   tree:         step_tree, one forward per beam level over the level's new nodes;
//   path_by_path: step() only (step_tree hidden), each frontier node re-run along its root path.
// Counters: "draft_tokens" = speculative draft tokens run per proposal.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "../../examples/common/longspec_draft.hpp"

namespace {
using namespace specdec;
using namespace specdec::examples;

const llama_config cfg{.vocab_size = 4096, .hidden = 512, .layers = 2, .heads = 8, .kv_heads = 2, .head_dim = 64,
                       .ffn_hidden = 1024};

// Forwards to the draft model, counting speculative tokens; Tree = false hides step_tree.
template <bool Tree>
struct counting_draft {
  using logit_type = float;
  longspec_draft_model<float>* m;
  long long spec_tokens = 0;
  [[nodiscard]] int vocab_size() const { return m->vocab_size(); }
  [[nodiscard]] int absorbed(int r) const { return m->absorbed(r); }
  [[nodiscard]] int receptive_field() const { return m->receptive_field(); }
  void reset(int r) { m->reset(r); }
  void step(int r, std::int32_t tok, int pos, bool commit, std::span<float> logits) {
    spec_tokens += commit ? 0 : 1;
    m->step(r, tok, pos, commit, logits);
  }
  void discard_speculation(int r) { m->discard_speculation(r); }
  void step_tree(int r, std::span<const std::int32_t> tokens, std::span<const std::int32_t> parents,
                 std::span<const std::int32_t> positions, std::span<float> logits)
    requires Tree
  {
    spec_tokens += static_cast<long long>(tokens.size());
    m->step_tree(r, tokens, parents, positions, logits);
  }
};

template <bool Tree>
void BM_beam_proposal(benchmark::State& state) {
  const auto w = random_llama_weights<float>(cfg, 3);
  llama_model<float> target(cfg, w, 1, 8192);
  std::vector<std::int32_t> tokens(4000);
  std::mt19937 rng(1);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % 4096u);
  target.prefill(0, tokens);
  longspec_draft_config dc{.layers = 1, .window = 512, .layer_map = glide_layer_map(cfg.layers, 1)};
  longspec_draft_model<float> model(target, dc, derive_longspec_draft(w, dc));
  counting_draft<Tree> counted{&model};
  longspec_drafter<counting_draft<Tree>> drafter(counted, {4, 16, 16, 16, 16});
  draft_candidates out;
  drafter.propose({.request = 0, .tokens = tokens, .depth = 5}, out);  // absorb the prompt's window once
  counted.spec_tokens = 0;
  std::int64_t proposals = 0;
  for (auto _ : state) {
    state.PauseTiming();
    tokens.push_back(static_cast<std::int32_t>(proposals * 37 % 4096));  // one new committed token
    state.ResumeTiming();
    drafter.propose({.request = 0, .tokens = tokens, .depth = 5}, out);
    benchmark::DoNotOptimize(out.chain.data());
    ++proposals;
  }
  state.counters["draft_tokens"] = proposals ? static_cast<double>(counted.spec_tokens) / static_cast<double>(proposals) : 0.0;
}
}  // namespace

BENCHMARK(BM_beam_proposal<true>)->Name("BM_beam_proposal/tree")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_beam_proposal<false>)->Name("BM_beam_proposal/path_by_path")->Unit(benchmark::kMillisecond)->UseRealTime();
