// Logits processors and samplers over one row at vocab 32K and 128K, and the 65 rows of a 64-node tree.
// Counters: "GB/s" = logits bytes read (V * 4 per row; in-place processors also write them back),
// "rows/s" = rows processed. In-place processors restore the row outside the timed region.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/sampling/logits_processor.hpp"
#include "specdec/sampling/penalty_context.hpp"
#include "specdec/sampling/sampler.hpp"
#include "specdec/decoder/verifiers.hpp"
#include "specdec/verify/greedy.hpp"
#include "specdec/verify/sample_and_match.hpp"

namespace {

std::vector<float> make_logits(std::int64_t rows, std::int64_t v, std::uint64_t seed) {
  specdec::philox_stream rng(seed, 0);
  std::vector<float> l(static_cast<std::size_t>(rows * v));
  // Zipf-like language-model row: the token of rank k (a random permutation of ids) gets logit
  // -1.1 ln k plus small noise, so probabilities fall as k^-1.1 (top-p 0.9 keeps a few thousand tokens)
  for (std::int64_t r = 0; r < rows; ++r) {
    float* row = l.data() + r * v;
    for (std::int64_t i = 0; i < v; ++i) row[i] = static_cast<float>(i + 1);
    for (std::int64_t i = v - 1; i > 0; --i) std::swap(row[i], row[rng.below(static_cast<std::uint32_t>(i + 1))]);
    for (std::int64_t i = 0; i < v; ++i) row[i] = -1.1f * std::log(row[i]) + 0.1f * rng.uniform();
  }
  return l;
}

std::vector<std::int32_t> make_context(int n, std::int64_t v) {
  specdec::philox_stream rng(7, 7);
  std::vector<std::int32_t> c(static_cast<std::size_t>(n));
  for (auto& t : c) t = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(v)));
  return c;
}

void counters(benchmark::State& st, std::int64_t rows, std::int64_t v) {
  const double bytes = static_cast<double>(st.iterations()) * static_cast<double>(rows * v) * 4.0;
  st.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsRate);
  st.counters["rows/s"] = benchmark::Counter(static_cast<double>(st.iterations() * rows), benchmark::Counter::kIsRate);
}

enum which { temperature, top_k, top_p, min_p, eta, repetition, contextual, tokenswift_chain };

specdec::sampling_params params_for(int w) {
  specdec::sampling_params p;
  switch (w) {
    case temperature: p.temperature = 0.7f; break;
    case top_k: p.top_k = 50; break;
    case top_p: p.top_p = 0.9f; break;
    case min_p: p.min_p = 0.1f; break;
    case eta: p.eta_epsilon = 2e-4f; break;  // TokenSwift Table 13
    case repetition: p.repetition_penalty = 1.2f; break;
    case contextual: p.contextual_penalty = 1.2f; p.penalty_window = 1024; break;
    case tokenswift_chain:  // TokenSwift Table 11 (LLaMA3.1-8b): temp 1, min-p 0.1, penalty 1.2, W 1024
      p.min_p = 0.1f; p.contextual_penalty = 1.2f; p.penalty_window = 1024; break;
  }
  return p;
}

void BM_process_row(benchmark::State& st) {
  const std::int64_t v = st.range(0);
  const auto p = params_for(static_cast<int>(st.range(1)));
  const auto pristine = make_logits(1, v, 1);
  auto row = pristine;
  const auto ctx = make_context(4096, v);
  specdec::sampling_workspace ws;
  for (auto _ : st) {
    st.PauseTiming();
    std::memcpy(row.data(), pristine.data(), row.size() * sizeof(float));
    st.ResumeTiming();
    specdec::process_logits(row, p, ctx, ws);
    benchmark::DoNotOptimize(row.data());
  }
  counters(st, 1, v);
}

void BM_process_tree(benchmark::State& st) {
  const std::int64_t v = st.range(0);
  const int n = 64;
  const auto p = params_for(tokenswift_chain);
  const auto pristine = make_logits(n + 1, v, 2);
  auto rows = pristine;
  const auto ctx = make_context(4096, v);
  std::vector<std::int32_t> tokens(n), parents(n);
  specdec::philox_stream rng(3, 3);
  for (int i = 0; i < n; ++i) {
    tokens[i] = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(v)));
    parents[i] = i < 4 ? -1 : static_cast<std::int32_t>(i - 4);  // 4 chains of depth 16
  }
  specdec::sampling_workspace ws;
  for (auto _ : st) {
    st.PauseTiming();
    std::memcpy(rows.data(), pristine.data(), rows.size() * sizeof(float));
    st.ResumeTiming();
    specdec::process_tree_logits(specdec::make_view<2>(rows.data(), {n + 1, v}), p, ctx, tokens, parents, ws);
    benchmark::DoNotOptimize(rows.data());
  }
  counters(st, n + 1, v);
}

// process_logits_batch with a penalty_context on the same 65 rows, context and parameters as
// BM_process_tree (the form the device verifiers run, here on the host): threads = the host policy's
// (1: against BM_process_tree's one thread; 0: the pool). The context is built once (the builder's
// cost per step is BM_penalty_context_build).
void BM_process_tree_batch(benchmark::State& st) {
  const std::int64_t v = st.range(0);
  const int n = 64;
  const std::vector<specdec::sampling_params> p{params_for(tokenswift_chain)};
  const auto pristine = make_logits(n + 1, v, 2);
  auto rows = pristine;
  const auto ctx = make_context(4096, v);
  std::vector<std::int32_t> tokens(n), parents(n), row_params(n + 1, 0), status(3);
  specdec::philox_stream rng(3, 3);
  for (int i = 0; i < n; ++i) {
    tokens[i] = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(v)));
    parents[i] = i < 4 ? -1 : static_cast<std::int32_t>(i - 4);  // 4 chains of depth 16
  }
  specdec::penalty_context_builder b(static_cast<std::int32_t>(v));
  b.add_tree_rows(b.add_context(ctx), tokens, parents);
  const specdec::host policy{.num_threads = static_cast<int>(st.range(1))};
  for (auto _ : st) {
    st.PauseTiming();
    std::memcpy(rows.data(), pristine.data(), rows.size() * sizeof(float));
    st.ResumeTiming();
    specdec::process_logits_batch(policy, specdec::make_view<2>(rows.data(), {n + 1, v}),
                                  specdec::make_view<1>(p.data(), {1}), specdec::make_view<1>(row_params.data(), {n + 1}),
                                  b.view(), specdec::make_view<1>(status.data(), {3}));
    benchmark::DoNotOptimize(rows.data());
  }
  counters(st, n + 1, v);
}

// Greedy verification of one request's 64-node tree (4 chains of 16) with a repetition and a
// contextual penalty (TokenSwift's 1.2, W = 1024) over a 4096-token context: mode 0 processes the 65
// rows in place (process_logits_batch at temperature 0: one-hot at each penalized argmax; the rows
// restored outside the timed region) and runs the plain array form of verify_greedy_batch on them;
// mode 1 runs its penalized form (penalized_argmax_batch's reading of every row, then the walk), which
// leaves the rows as they are. Each node's token is its parent row's penalized argmax (iterated to a
// fixed point: a node's row depends on its root path), so the 4 chains carry the same tokens and the
// walk accepts one of them to its end (the counter "accepted": 16).
void BM_greedy_penalized_verify(benchmark::State& st) {
  const std::int64_t v = st.range(0);
  const int mode = static_cast<int>(st.range(1)), n = 64;
  specdec::sampling_params sp;
  sp.temperature = 0.0f, sp.repetition_penalty = 1.2f, sp.contextual_penalty = 1.2f, sp.penalty_window = 1024;
  const std::vector<specdec::sampling_params> p{sp};
  const auto pristine = make_logits(n + 1, v, 4);
  auto rows = pristine;
  const auto ctx = make_context(4096, v);
  std::vector<std::int32_t> tokens(n, 0), parents(n), row_params(n + 1, 0), status(3), indptr{0, n};
  for (int i = 0; i < n; ++i) parents[i] = i < 4 ? -1 : i - 4;
  std::vector<std::int32_t> argmax(n + 1), accepted(n), num(1), bonus(1), emitted(n + 1);
  const auto v1 = [](auto& a) { return specdec::make_view<1>(a.data(), {static_cast<std::int64_t>(a.size())}); };
  specdec::penalty_context_builder b(static_cast<std::int32_t>(v));
  for (bool changed = true; changed;) {  // tokens = the penalized argmax of each node's parent row
    b.clear();
    b.add_tree_rows(b.add_context(ctx), tokens, parents);
    specdec::penalized_argmax_batch(specdec::host{}, specdec::make_view<2>(pristine.data(), {n + 1, v}), v1(p),
                                    v1(row_params), b.view(), v1(argmax), v1(status));
    changed = false;
    for (int i = 0; i < n; ++i) {
      const std::int32_t t = argmax[static_cast<std::size_t>(parents[i] + 1)];
      changed = changed || t != tokens[i];
      tokens[i] = t;
    }
  }
  b.clear();
  b.add_tree_rows(b.add_context(ctx), tokens, parents);
  const specdec::host policy{.num_threads = 1};
  for (auto _ : st) {
    if (mode == 0) {
      st.PauseTiming();
      std::memcpy(rows.data(), pristine.data(), rows.size() * sizeof(float));
      st.ResumeTiming();
      const auto lg = specdec::make_view<2>(rows.data(), {n + 1, v});
      specdec::process_logits_batch(policy, lg, v1(p), v1(row_params), b.view(), v1(status));
      specdec::verify_greedy_batch(policy, v1(indptr), v1(tokens), v1(parents), lg, v1(accepted), v1(num), v1(bonus),
                                   v1(emitted), v1(status));
    } else {
      specdec::verify_greedy_batch(policy, v1(indptr), v1(tokens), v1(parents),
                                   specdec::make_view<2>(pristine.data(), {n + 1, v}), v1(p), v1(row_params), b.view(),
                                   v1(accepted), v1(num), v1(bonus), v1(emitted), v1(status));
    }
    benchmark::DoNotOptimize(emitted.data());
  }
  st.counters["accepted"] = num[0];
  counters(st, n + 1, v);
}

// Sample-and-match verification of one request's 64-node tree (4 chains of 16) at temperature 0.8,
// top-p 0.9, repetition and contextual penalty 1.2 (W = 1024) over a 4096-token context: mode 0
// processes the 65 rows in place (process_logits_batch; the rows restored outside the timed region),
// turns them into probabilities (logits_to_probs_batch) and runs the probabilities form of
// verify_sample_and_match_batch; mode 1 runs its logits form (only the visited rows processed, in a
// workspace row). The first 3 nodes of chain 0 carry a token whose logit is raised by 30 in their
// parent's row, so the walk accepts them and stops after the next draw: 4 rows visited (counter
// "visited").
void BM_sample_and_match_verify(benchmark::State& st) {
  const std::int64_t v = st.range(0);
  const int mode = static_cast<int>(st.range(1)), n = 64, accept = 3;
  specdec::sampling_params sp;
  sp.temperature = 0.8f, sp.top_p = 0.9f, sp.repetition_penalty = 1.2f, sp.contextual_penalty = 1.2f;
  sp.penalty_window = 1024;
  const std::vector<specdec::sampling_params> p{sp};
  auto pristine = make_logits(n + 1, v, 5);
  const auto ctx = make_context(4096, v);
  std::vector<std::int32_t> tokens(n), parents(n), row_params(n + 1, 0), status(3), indptr{0, n};
  specdec::philox_stream rng(4, 4);
  for (int i = 0; i < n; ++i) {
    parents[i] = i < 4 ? -1 : i - 4;
    tokens[i] = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(v)));
  }
  for (int k = 0; k < accept; ++k) {  // chain 0's node 4k: its token peaks in its parent's row
    const int node = 4 * k, row = parents[node] + 1;
    pristine[static_cast<std::size_t>(row * v + tokens[node])] += 30.0f;
  }
  std::vector<std::int32_t> accepted(n), num(1), bonus(1), emitted(n + 1);
  std::vector<std::uint64_t> seeds{42}, streams{specdec::stream_id(0, 1)};
  std::vector<float> rows = pristine, work(static_cast<std::size_t>(v));
  const auto v1 = [](auto& a) { return specdec::make_view<1>(a.data(), {static_cast<std::int64_t>(a.size())}); };
  specdec::penalty_context_builder b(static_cast<std::int32_t>(v));
  b.add_tree_rows(b.add_context(ctx), tokens, parents);
  const specdec::host policy{.num_threads = 1};
  for (auto _ : st) {
    if (mode == 0) {
      st.PauseTiming();
      std::memcpy(rows.data(), pristine.data(), rows.size() * sizeof(float));
      st.ResumeTiming();
      const auto lg = specdec::make_view<2>(rows.data(), {n + 1, v});
      specdec::process_logits_batch(policy, lg, v1(p), v1(row_params), b.view(), v1(status));
      specdec::logits_to_probs_batch(policy, lg, lg, v1(status));
      specdec::verify_sample_and_match_batch(policy, v1(indptr), v1(tokens), v1(parents), lg, v1(seeds), v1(streams),
                                             v1(accepted), v1(num), v1(bonus), v1(emitted), v1(status));
    } else {
      specdec::verify_sample_and_match_batch(policy, v1(indptr), v1(tokens), v1(parents),
                                             specdec::make_view<2>(static_cast<const float*>(pristine.data()), {n + 1, v}),
                                             v1(p), v1(row_params), b.view(), v1(seeds), v1(streams),
                                             specdec::make_view<2>(work.data(), {1, v}), v1(accepted), v1(num), v1(bonus),
                                             v1(emitted), v1(status));
    }
    benchmark::DoNotOptimize(emitted.data());
  }
  st.counters["visited"] = num[0] + 1;
  counters(st, n + 1, v);
}

// The decoder's host verification of one request (speculative_batch's step 3), the context and peaks
// of BM_sample_and_match_verify: mode 0 = process_tree_logits on every row in place (the rows restored
// outside the timed region) then the verifier's verify, the path of a verifier without verify_logits;
// mode 1 = its verify_logits (every row checked, the rows the walk reads processed). Verifiers:
//   0 sample_and_match_verifier (T 0.8, top-p 0.9) on the 64-node tree (4 chains of 16);
//   1 greedy_verifier (T 0; chain 0's peaks are then its argmaxes) on the same tree;
//   2 chain_speculative_verifier (T 0.8, top-p 0.9) on chain 0 alone (16 nodes), with the drafter's q
//     rows (uniform: the peaked tokens are accepted, the 4th draws u < p/q by chance);
//   3 multi_draft_verifier (the same) on the 64-node tree read as 4 drafts of 16 with their q rows
//     (with replacement).
// All with repetition and contextual penalty 1.2 (W = 1024).
void BM_decoder_verify(benchmark::State& st) {
  const std::int64_t v = st.range(0);
  const int mode = static_cast<int>(st.range(1)), which = static_cast<int>(st.range(2)), accept = 3;
  const int n = which == 2 ? 16 : 64;
  specdec::sampling_params sp;
  sp.temperature = which == 1 ? 0.0f : 0.8f, sp.top_p = which == 1 ? 1.0f : 0.9f;
  sp.repetition_penalty = 1.2f, sp.contextual_penalty = 1.2f, sp.penalty_window = 1024;
  auto pristine = make_logits(n + 1, v, 5);
  const auto ctx = make_context(4096, v);
  specdec::philox_stream rng(4, 4);
  std::vector<std::int32_t> tokens(64);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(v)));
  specdec::token_tree tree;
  specdec::draft_candidates draft;
  const std::vector<float> uniform(static_cast<std::size_t>(16 * v), 1.0f / static_cast<float>(v));
  if (which == 2) {  // chain 0 of the 4: node j carries tokens[4 j]
    for (int j = 0; j < n; ++j) {
      tree.add(tokens[static_cast<std::size_t>(4 * j)], j - 1);
      draft.chain.push_back({tokens[static_cast<std::size_t>(4 * j)], 0.0f});
    }
    draft.q = uniform;
  } else {
    for (int i = 0; i < n; ++i) tree.add(tokens[static_cast<std::size_t>(i)], i < 4 ? -1 : i - 4);
    for (int c = 0; c < 4; ++c) {  // draft c = chain c: nodes c, c + 4, ...
      std::vector<specdec::draft_token> seq;
      for (int j = 0; j < 16; ++j) seq.push_back({tokens[static_cast<std::size_t>(4 * j + c)], 0.0f});
      if (c == 0) draft.chain = seq, draft.q = uniform;
      else draft.sequences.push_back(seq), draft.sequence_q.push_back(uniform);
    }
    draft.sampled_as = specdec::draft_sampling::with_replacement;
  }
  draft.vocab = static_cast<int>(v);
  for (int k = 0; k < accept; ++k) {  // chain 0's first nodes: each token peaks in its parent's row
    const int node = which == 2 ? k : 4 * k;
    pristine[static_cast<std::size_t>((tree.parent(node) + 1) * v + tree.token(node))] += 30.0f;
  }
  auto rows = pristine;
  specdec::sampling_workspace ws;
  specdec::sample_and_match_verifier sm;
  specdec::greedy_verifier gr;
  specdec::chain_speculative_verifier ch;
  specdec::multi_draft_verifier md;
  specdec::verify_result out;
  for (auto _ : st) {
    specdec::philox_stream r(42, 1);
    if (mode == 0) {
      st.PauseTiming();
      std::memcpy(rows.data(), pristine.data(), rows.size() * sizeof(float));
      st.ResumeTiming();
      const auto lg = specdec::make_view<2>(rows.data(), {n + 1, v});
      specdec::process_tree_logits(lg, sp, ctx, tree.tokens(), tree.parents(), ws);
      const specdec::verify_input in{tree, specdec::strided_view<const float, 2>(lg), draft, r};
      switch (which) {
        case 0: sm.verify(in, out); break;
        case 1: gr.verify(in, out); break;
        case 2: ch.verify(in, out); break;
        default: md.verify(in, out); break;
      }
    } else {
      const specdec::logits_verify_input in{tree, specdec::make_view<2>(static_cast<const float*>(pristine.data()), {n + 1, v}),
                                            sp, ctx, draft, r};
      switch (which) {
        case 0: sm.verify_logits(in, out); break;
        case 1: gr.verify_logits(in, out); break;
        case 2: ch.verify_logits(in, out); break;
        default: md.verify_logits(in, out); break;
      }
    }
    benchmark::DoNotOptimize(out.bonus);
  }
  st.counters["accepted"] = static_cast<double>(out.accepted.size());
  counters(st, n + 1, v);
}

// penalty_context_builder for one request: a committed context of `ctx` tokens and a 64-node tree
// (the device verifiers' per-step host work for each request with a penalty).
void BM_penalty_context_build(benchmark::State& st) {
  const std::int64_t v = st.range(0);
  const auto ctx = make_context(static_cast<int>(st.range(1)), v);
  std::vector<std::int32_t> tokens(64), parents(64);
  for (int i = 0; i < 64; ++i) tokens[i] = i, parents[i] = i < 4 ? -1 : i - 4;
  specdec::penalty_context_builder b(static_cast<std::int32_t>(v));
  for (auto _ : st) {
    b.clear();
    b.add_tree_rows(b.add_context(ctx), tokens, parents);
    benchmark::DoNotOptimize(b.distinct().data());
  }
  st.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(st.iterations()) * static_cast<double>(ctx.size()), benchmark::Counter::kIsRate);
}

// One step of a request kept as a penalty_history (an engine's alternative to rebuilding it): append
// the step's 4 committed tokens to a history of `ctx` tokens, then build the step's context from it
// and a 64-node tree. The history is put back to its `ctx` tokens every 256 steps (untimed).
void BM_penalty_history_step(benchmark::State& st) {
  const std::int64_t v = st.range(0);
  const auto ctx = make_context(static_cast<int>(st.range(1)), v);
  std::vector<std::int32_t> tokens(64), parents(64);
  for (int i = 0; i < 64; ++i) tokens[i] = i, parents[i] = i < 4 ? -1 : i - 4;
  specdec::penalty_history start(static_cast<std::int32_t>(v));
  start.append(ctx);
  auto h = start;
  specdec::penalty_context_builder b(static_cast<std::int32_t>(v));
  specdec::philox_stream rng(9, 9);
  std::vector<std::int32_t> step(4);
  std::int64_t n = 0;
  for (auto _ : st) {
    if (++n % 256 == 0) {
      st.PauseTiming();
      h = start;
      st.ResumeTiming();
    }
    for (auto& t : step) t = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(v)));
    h.append(step);
    b.clear();
    b.add_tree_rows(b.add_context(h), tokens, parents);
    benchmark::DoNotOptimize(b.distinct().data());
  }
}

void BM_greedy_token(benchmark::State& st) {
  const std::int64_t v = st.range(0);
  const auto row = make_logits(1, v, 4);
  for (auto _ : st) benchmark::DoNotOptimize(specdec::greedy_token(row));
  counters(st, 1, v);
}

void BM_sample_token(benchmark::State& st) {
  const std::int64_t v = st.range(0);
  const auto row = make_logits(1, v, 5);
  specdec::philox_stream rng(1, 1);
  for (auto _ : st) benchmark::DoNotOptimize(specdec::sample_token(row, rng));
  counters(st, 1, v);
}

void BM_sample_from_probs(benchmark::State& st) {
  const std::int64_t v = st.range(0);
  const auto l = make_logits(1, v, 6);
  std::vector<float> probs(l.size());
  specdec::logits_to_probs(l, probs);
  specdec::philox_stream rng(1, 1);
  for (auto _ : st) benchmark::DoNotOptimize(specdec::sample_from_probs(probs, rng));
  counters(st, 1, v);
}

void BM_logits_to_probs(benchmark::State& st) {
  const std::int64_t v = st.range(0);
  const auto l = make_logits(1, v, 8);
  std::vector<float> probs(l.size());
  for (auto _ : st) {
    specdec::logits_to_probs(l, probs);
    benchmark::DoNotOptimize(probs.data());
  }
  counters(st, 1, v);
}

void vocab_args(benchmark::internal::Benchmark* b) { b->Arg(32000)->Arg(128256); }
void row_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"V", "proc"});
  for (int w = temperature; w <= tokenswift_chain; ++w) b->Args({32000, w})->Args({128256, w});
}

}  // namespace

// proc: 0 temperature, 1 top-k 50, 2 top-p 0.9, 3 min-p 0.1, 4 eta 2e-4, 5 repetition 1.2 (4096-token
// context), 6 contextual penalty 1.2 W 1024, 7 TokenSwift chain (min-p 0.1 + contextual penalty)
BENCHMARK(BM_process_row)->Apply(row_args)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_process_tree)->Apply(vocab_args)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_process_tree_batch)
    ->ArgNames({"V", "threads"})
    ->ArgsProduct({{32000, 128256}, {1, 0}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_greedy_penalized_verify)
    ->ArgNames({"V", "mode"})
    ->ArgsProduct({{32000, 128256}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_sample_and_match_verify)
    ->ArgNames({"V", "mode"})
    ->ArgsProduct({{32000, 128256}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_decoder_verify)
    ->ArgNames({"V", "mode", "verifier"})
    ->ArgsProduct({{32000, 128256}, {0, 1}, {0, 1, 2, 3}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_penalty_context_build)
    ->ArgNames({"V", "ctx"})
    ->ArgsProduct({{32000, 128256}, {4096, 32768}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_penalty_history_step)
    ->ArgNames({"V", "ctx"})
    ->ArgsProduct({{32000, 128256}, {4096, 32768}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_greedy_token)->Apply(vocab_args)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_sample_token)->Apply(vocab_args)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_sample_from_probs)->Apply(vocab_args)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_logits_to_probs)->Apply(vocab_args)->Unit(benchmark::kMicrosecond);
