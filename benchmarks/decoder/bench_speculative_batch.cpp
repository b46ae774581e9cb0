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
//
// BM_demo_target_forward: the cost curve c(n) of one target forward that verifies n tokens, at the
// shape of specdec_demo's trained target (vocab 256, hidden 256, 4 layers, GQA 4/2, head_dim 64,
// ffn 768; random weights: the cost does not depend on their values) over a cache of C tokens: one
// forward_chain of n tokens per iteration, uncommitted, so the cache stays at C. The demo's
// speculative step pays c(n) where decoding pays c(1), so c(n) / c(1) against tau bounds its speedup.
// Counters: "matmul_GFLOP/s" = the projections' and LM head's FLOPs (2 n params) over the whole
// forward's time, "kv_GB/s" = the K/V bytes read over the same time.
// BM_demo_target_matmuls: those projections and the LM head alone for n tokens; "GFLOP/s" and
// "weights_GB/s" (the fp32 weights read once per iteration) against the machine's roofline.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <memory>
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
const llama_config demo_cfg{.vocab_size = 256, .hidden = 256, .layers = 4, .heads = 4, .kv_heads = 2, .head_dim = 64,
                            .ffn_hidden = 768};

// One model per cache length, prefilled once for every tree size (a 16K prefill takes seconds).
llama_model<float>& demo_target(int cache) {
  static const auto w = random_llama_weights<float>(demo_cfg, 7);
  static std::map<int, std::unique_ptr<llama_model<float>>> models;
  auto& m = models[cache];
  if (!m) {
    m = std::make_unique<llama_model<float>>(demo_cfg, w, 1, cache + 16);
    philox_stream rng(9, static_cast<std::uint64_t>(cache));
    std::vector<std::int32_t> prompt(static_cast<std::size_t>(cache) + 1);
    for (auto& t : prompt) t = static_cast<std::int32_t>(rng.below(demo_cfg.vocab_size));
    m->prefill(0, prompt);
  }
  return *m;
}

void BM_demo_target_forward(benchmark::State& state) {
  const int cache = static_cast<int>(state.range(0)), n = static_cast<int>(state.range(1));
  auto& model = demo_target(cache);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) tokens[static_cast<std::size_t>(i)] = (37 * i + 11) % demo_cfg.vocab_size;
  std::vector<float> logits(static_cast<std::size_t>(n) * demo_cfg.vocab_size);
  for (auto _ : state) {
    model.forward_chain(0, tokens, logits);
    benchmark::DoNotOptimize(logits.data());
  }
  const auto& c = demo_cfg;
  const double params = static_cast<double>(c.layers) * (static_cast<double>(c.hidden) * (c.heads + 2 * c.kv_heads) * c.head_dim +
                                                          static_cast<double>(c.heads) * c.head_dim * c.hidden +
                                                          3.0 * c.hidden * c.ffn_hidden) +
                        static_cast<double>(c.vocab_size) * c.hidden;
  const double kv_bytes = 2.0 * c.layers * c.kv_heads * c.head_dim * sizeof(float) * cache;
  const auto iters = static_cast<double>(state.iterations());
  state.counters["matmul_GFLOP/s"] = benchmark::Counter(2.0 * n * params * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["kv_GB/s"] = benchmark::Counter(kv_bytes * iters / 1e9, benchmark::Counter::kIsRate);
}

// The same target's dense part alone: every projection of its 4 layers and the LM head for n tokens
// (matmul_nt, the example models' tiled y = x W^T, both cores), no attention, norms or activations.
// The inputs are the weights' own rows (values do not change the cost).
void BM_demo_target_matmuls(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  static const auto w = random_llama_weights<float>(demo_cfg, 7);
  const auto& c = demo_cfg;
  const int H = c.hidden, Dq = c.heads * c.head_dim, Dk = c.kv_heads * c.head_dim, F = c.ffn_hidden;
  std::vector<float> x(static_cast<std::size_t>(n) * std::max(H, F), 0.25f), y(static_cast<std::size_t>(n) * std::max({F, Dq, c.vocab_size}));
  const auto in = [&](int width) { return std::span<const float>(x.data(), static_cast<std::size_t>(n) * width); };
  double params = static_cast<double>(c.vocab_size) * H;
  for (auto _ : state) {
    for (const auto& L : w.layers) {
      matmul_nt<float>(in(H), L.wq, y, n, Dq, H);
      matmul_nt<float>(in(H), L.wk, y, n, Dk, H);
      matmul_nt<float>(in(H), L.wv, y, n, Dk, H);
      matmul_nt<float>(in(Dq), L.wo, y, n, H, Dq);
      matmul_nt<float>(in(H), L.w_gate, y, n, F, H);
      matmul_nt<float>(in(H), L.w_up, y, n, F, H);
      matmul_nt<float>(in(F), L.w_down, y, n, H, F);
    }
    matmul_nt<float>(in(H), w.lm_head, y, n, c.vocab_size, H);
    benchmark::DoNotOptimize(y.data());
  }
  for (const auto& L : w.layers)
    params += static_cast<double>(L.wq.size() + L.wk.size() + L.wv.size() + L.wo.size() + L.w_gate.size() + L.w_up.size() +
                                  L.w_down.size());
  const auto iters = static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * params * iters / 1e9, benchmark::Counter::kIsRate);
  state.counters["weights_GB/s"] = benchmark::Counter(params * sizeof(float) * iters / 1e9, benchmark::Counter::kIsRate);
}
}  // namespace

BENCHMARK(BM_demo_target_matmuls)->ArgName("tokens")->DenseRange(1, 5)->Arg(8)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_demo_target_forward)
    ->ArgNames({"cache", "tree"})
    ->ArgsProduct({{4096, 16384}, {1, 2, 3, 4, 5, 8}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_step_batched)->Arg(1)->Arg(8)->Arg(32)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_step_round_robin)->Arg(1)->Arg(8)->Arg(32)->Unit(benchmark::kMillisecond)->UseRealTime();
