// speculative_batch's step on the reference LLaMA (examples/common/llama.hpp, float, vocab 32000,
// hidden 256, 2 layers, GQA 4/2, head_dim 64), greedy verification of a 4-token chain per request,
// B = 1, 8, 32 requests kept active (a request that nears its capacity is replaced between
// iterations, untimed). Each iteration is one step(). Two targets:
//   batched:     llama_model's forward_batch, one transformer pass over all rows of the step;
//   round_robin: the same model seen through its per-request forward only (batched_target_adapter
//                runs one forward per request), what speculative_decoder did before the step API.
// The drafter proposes the last `depth` committed tokens again as a chain (a fixed-size tree every step,
// so each request contributes depth + 1 = 5 query rows; the random model accepts almost none).
// Counters: "tok/s" = emitted tokens per second; "overhead_%" = the batch's own work per step
// (drafting + tree building + logits processing and verification) over the target's forward time;
// "commit_%" = the target's KV commit over its forward (model work, reported apart); "rows" = mean
// query rows per forward.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "../../examples/common/llama.hpp"
#include "specdec/decoder/speculative_batch.hpp"

namespace {
using namespace specdec;
using namespace specdec::examples;

const llama_config cfg{.vocab_size = 32000, .hidden = 256, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 64,
                       .ffn_hidden = 512};
constexpr int capacity = 512;

const llama_weights<float>& weights() {
  static const auto w = random_llama_weights<float>(cfg, 3);
  return w;
}

// The model through its per-request interface only (no forward_batch): the adapter's round robin.
struct per_request_only {
  llama_model<float>* m;
  using logit_type = float;
  [[nodiscard]] int vocab_size() const { return m->vocab_size(); }
  [[nodiscard]] int max_requests() const { return m->max_requests(); }
  void prefill(int r, std::span<const std::int32_t> p) { m->prefill(r, p); }
  void forward(int r, std::int32_t root, const token_tree& t, std::span<float> logits) { m->forward(r, root, t, logits); }
  void commit(int r, std::span<const std::int32_t> a) { m->commit(r, a); }
};

// Proposes the last req.depth committed tokens as the chain: a 4-node tree every step, no model cost.
struct repeat_drafter {
  static constexpr draft_output provides = draft_output::none;
  void reset(int) {}
  void propose(const draft_request& req, draft_candidates& out) const {
    out.clear();
    const auto n = std::min(req.tokens.size(), static_cast<std::size_t>(req.depth));
    for (auto t : req.tokens.last(n)) out.chain.push_back({t, 0.0f});
  }
};

std::vector<std::int32_t> prompt_for(std::uint32_t id) {
  philox_stream rng(5, id);
  std::vector<std::int32_t> phrase(8), p;
  for (auto& t : phrase) t = static_cast<std::int32_t>(rng.below(cfg.vocab_size));
  for (int rep = 0; rep < 8; ++rep) p.insert(p.end(), phrase.begin(), phrase.end());
  return p;
}

template <class Target>
void run(benchmark::State& state, llama_model<float>& model, Target& target) {
  const int B = static_cast<int>(state.range(0));
  speculative_batch<Target, repeat_drafter, chain_tree_builder, greedy_verifier> batch(target);
  const generation_options opt{.max_new_tokens = 1 << 30, .draft_depth = 4, .draft_width = 1};
  std::uint32_t next_id = 0;
  std::vector<std::uint32_t> live;
  for (int b = 0; b < B; ++b) batch.add_request(next_id, prompt_for(next_id), opt), live.push_back(next_id++);
  batch.reset_stats();
  std::int64_t emitted = 0;
  for (auto _ : state) {
    for (const auto& out : batch.step()) emitted += static_cast<std::int64_t>(out.tokens.size());
    state.PauseTiming();
    for (auto& id : live)
      if (batch.tokens(id).size() + 16 > static_cast<std::size_t>(capacity)) {
        batch.abort(id);
        batch.add_request(next_id, prompt_for(next_id), opt);
        id = next_id++;
      }
    state.ResumeTiming();
  }
  const auto& s = batch.stats();
  state.counters["tok/s"] = benchmark::Counter(static_cast<double>(emitted), benchmark::Counter::kIsRate);
  state.counters["overhead_%"] = s.target_s > 0 ? 100.0 * (s.draft_s + s.build_s + s.verify_s) / s.target_s : 0.0;
  state.counters["commit_%"] = s.target_s > 0 ? 100.0 * s.commit_s / s.target_s : 0.0;
  state.counters["rows"] = s.batch_steps ? static_cast<double>(s.tree_nodes + s.steps) / static_cast<double>(s.batch_steps) : 0.0;
  state.counters["tau"] = s.tau();
  (void)model;
}

void BM_step_batched(benchmark::State& state) {
  llama_model<float> model(cfg, weights(), static_cast<int>(state.range(0)), capacity);
  run(state, model, model);
}
void BM_step_round_robin(benchmark::State& state) {
  llama_model<float> model(cfg, weights(), static_cast<int>(state.range(0)), capacity);
  per_request_only target{&model};
  run(state, model, target);
}
}  // namespace

BENCHMARK(BM_step_batched)->Arg(1)->Arg(8)->Arg(32)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_step_round_robin)->Arg(1)->Arg(8)->Arg(32)->Unit(benchmark::kMillisecond)->UseRealTime();
