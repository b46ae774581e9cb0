// CUDA benchmarks of the speculative step's non-attention kernels (issue #23), timed like
// bench_attention.cu: one call's device time from replays of a CUDA graph of 10 calls, rotating
// over enough input copies to read 3x the L2 size, with the memory roof (device-to-device copy,
// read + write bytes / s) measured in the same process.
//   BM_verify_greedy_batch  verify_greedy_batch(cuda) on float logits [batch * (tree + 1), V]:
//                           bytes = the logits read once (the floor: every row's argmax) + the
//                           trees and outputs; read_us = logits bytes / copy bandwidth (reading
//                           them once); #23's target is time <= 2 read_us at tree 64, V = 128K, batch 8
//   BM_verify_sample_and_match_batch
//                           verify_sample_and_match_batch(cuda) on float probabilities
//                           [batch * (tree + 1), V], chain trees whose first `accept` nodes carry
//                           nearly all the mass of their parent's row (so accept + 1 rows are
//                           visited per request): bytes = the visited rows read once; read_us = those
//                           bytes / copy bandwidth
//   BM_verify_multi_draft_batch
//                           verify_multi_draft_batch(cuda), with replacement, on float probabilities
//                           [batch * (children + 1), V]: every request's root has `children` children
//                           carrying one token that p gives 0, so all are rejected, each rejection
//                           re-sums the residual over the vocabulary (the device keeps it as its list
//                           of updates, O(V x rejections so far) per rejection), and the bonus is drawn
//                           from it: bytes = the root's p and q rows read once per rejection and for
//                           the draw; read_us = those bytes / copy bandwidth
//   BM_sampled_step_batch   what cuda_sample_and_match_verifier enqueues for a step, on float logits
//                           [batch * (tree + 1), V] (uniform in [-8, 8)): a copy of the rows to the
//                           work buffer, process_logits_batch (mode 0: temperature 0.8; 1: and
//                           top-p 0.9; 2: and top-k 50 first; 3: and min-p 0.05 and eta 0.02; 4:
//                           mode 3 with a repetition penalty 1.1 and a contextual penalty 1.2 over
//                           W = 1024, each request's committed context 32K random tokens and each
//                           row's root path, the penalty_context uploaded once: the host's per-step
//                           build and upload of it are not timed),
//                           logits_to_probs_batch in place, verify_sample_and_match_batch (random
//                           trees: the walk stops early). bytes = the logits read once; read_us =
//                           those bytes / copy bandwidth (#23's target for the verification alone:
//                           within 2 read_us at tree 64, V = 128K, batch 8). accept = 3: nodes 0-2 a
//                           chain whose tokens peak in their parents' rows (the walk accepts them);
//                           path 1: the logits form instead (no copy; each request's 4 visited rows
//                           processed one after another in a [batch, V] workspace: cuda_sample_and_
//                           match_verifier's sampled_rows::visited_rows); rows_visited per request.
//                           GB/s and read_us count every row's bytes on both paths (the step's
//                           logits, the target's reference): compare the paths by time
//   BM_chain_step_batch, BM_multi_draft_step_batch
//                           chain / multi-draft speculative sampling of a step (chains of 8; two
//                           drafts of 4; uniform q rows): every row processed (path 0) against the
//                           logits form (path 1); see draft_step_batch
//   BM_greedy_penalized_step_batch
//                           greedy verification with a repetition penalty 1.1 and a contextual
//                           penalty 1.2 (W = 1024) over a 32K-token committed context per request, on
//                           float logits [batch * (tree + 1), V] (uniform in [-8, 8)): mode 0 = what
//                           cuda_greedy_verifier enqueued before session 46 (a copy of the rows,
//                           process_logits_batch with the context, the plain verify_greedy_batch on
//                           the one-hot rows), mode 1 = the penalized verify_greedy_batch (each row's
//                           penalized argmax read in place, then the walk). bytes = the logits read
//                           once; read_us = those bytes / copy bandwidth (#23's 2 read_us target)
//   BM_topk_batch           topk_batch(cuda) on float rows [batch, V] (uniform values; kind 5 of
//                           the tests, a fifth of them one tied maximum, with `ties` = 1): bytes = the
//                           rows read once; read_us = those bytes / copy bandwidth. The radix select
//                           reads each row four times and the gather once more, one block per row:
//                           ~5 read_us is the floor only when the batch fills the SMs (below that,
//                           one SM's bandwidth per row bounds it; L2 serves the re-reads of small rows)
//   BM_kv_importance_batch  kv_importance_batch(cuda) (TokenSwift Eq. 2) on a bf16 NHD contiguous
//                           cache, 32 query / 8 kv heads, D = 128, every request `context` tokens
//                           long: bytes = the K rows read once + the scores written; read_us = those
//                           bytes / copy bandwidth (the kernel reads nothing else of size)
//   BM_partial_kv_select_batch
//                           partial_kv_select_batch(cuda) (TokenSwift's partial-cache selection) on
//                           random float scores [batch, 8 kv heads, context], |B| = 4096, |S| = 64,
//                           per kv head: a block per (request, kv head) reads its row four times
//                           (radix select) and once more (gather), then sorts 4032 keys. bytes = the
//                           scores read once + the lists written; read_us = those bytes / copy
//                           bandwidth (the re-reads are L2 hits at these sizes)
//   BM_kv_commit_batch      kv_commit_in_place_batch(cuda) over 32 layers of bf16 NHD contiguous caches
//                           (8 kv heads, D = 128): every request moves its accepted path (nodes 0, 4,
//                           8, ... of a 64-node tree; node 0 is already in place) to the committed
//                           slots. bytes = the moved K and V rows read and written; the work is tiny,
//                           so this measures the launches (a check and a copy kernel per layer) that a
//                           graph replays: step_torch_compare.py times index_select + index_copy_ per
//                           layer on the same rows
//   BM_build_tree_batch     build_tree_batch(cuda): depths, positions and ancestor masks of random
//                           trees; bytes = parents read + masks and arrays written
// The binary exits 77 without a GPU (shared main).
#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cuda/bench_util.cuh"
#include "specdec/core/philox.hpp"
#include "specdec/core/topk_batch.cuh"
#include "specdec/kv/commit.cuh"
#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/kv/partial_kv.cuh"
#include "specdec/sampling/logits_processor.cuh"
#include "specdec/sampling/penalty_context.hpp"
#include "specdec/tree/tree_batch.cuh"
#include "specdec/verify/greedy.cuh"
#include "specdec/verify/multi_draft.cuh"
#include "specdec/verify/sample_and_match.cuh"
#include "specdec/verify/speculative_sampling.cuh"

namespace {

using specdec::memory_space;
using specdec_bench::dmem;
using specdec_bench::time_on_stream;

constexpr int graph_calls = 10;

//! Random local parents of `batch` trees of `tree` nodes (parent uniform in [-1, i)), as node_indptr + parents.
void random_trees(int batch, int tree, std::vector<std::int32_t>& indptr, std::vector<std::int32_t>& parents) {
  specdec::philox_stream rng(7, 0);
  indptr.assign(1, 0);
  parents.clear();
  for (int r = 0; r < batch; ++r) {
    for (int i = 0; i < tree; ++i) parents.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(i + 1))) - 1);
    indptr.push_back(indptr.back() + tree);
  }
}

template <class F>
void graph_time(benchmark::State& state, cudaStream_t stream, F&& call) {
  call(0);  // warm-up (module load)
  SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  SPECDEC_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < graph_calls; ++i) call(i);
  SPECDEC_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  SPECDEC_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  SPECDEC_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (auto _ : state)
    state.SetIterationTime(time_on_stream(stream, [&] { SPECDEC_CUDA_CHECK(cudaGraphLaunch(exec, stream)); }) /
                           graph_calls);
  SPECDEC_CUDA_CHECK(cudaGraphExecDestroy(exec));
  SPECDEC_CUDA_CHECK(cudaGraphDestroy(graph));
}

//! The end of a benchmark whose primitive reports into a device status array `st`: skips with an
//! error when it reported one, destroys the stream, and sets GB/s and read_us (bytes / copy
//! bandwidth) from `bytes` per call.
void finish_with_status(benchmark::State& state, cudaStream_t stream, const dmem& st, const char* what, double bytes) {
  std::int32_t status[3];
  SPECDEC_CUDA_CHECK(cudaMemcpy(status, st.p, 12, cudaMemcpyDeviceToHost));
  if (status[0] != 0) state.SkipWithError((std::string(what) + " reported a device error").c_str());
  SPECDEC_CUDA_CHECK(cudaStreamDestroy(stream));
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["read_us"] = bytes / specdec_bench::copy_roof() * 1e6;
}

//! The tree arrays and outputs of an array-form verifier in device memory (uploaded once), and their
//! views: node_indptr, tokens, parents, per-request seeds / streams (when given); accepted,
//! num_accepted, bonus, emitted, status.
struct device_tree_io {
  std::int64_t R, N;
  dmem ind, tok, par, acc, nacc, bon, emi, st, seed, stream;
  device_tree_io(const std::vector<std::int32_t>& indptr, const std::vector<std::int32_t>& tokens,
                 const std::vector<std::int32_t>& parents, const std::vector<std::uint64_t>& seeds = {},
                 const std::vector<std::uint64_t>& streams = {})
      : R(static_cast<std::int64_t>(indptr.size()) - 1), N(static_cast<std::int64_t>(tokens.size())),
        ind(indptr.size() * 4), tok(tokens.size() * 4), par(parents.size() * 4), acc(tokens.size() * 4),
        nacc(static_cast<std::size_t>(R) * 4), bon(static_cast<std::size_t>(R) * 4),
        emi((tokens.size() + static_cast<std::size_t>(R)) * 4), st(12), seed(std::max<std::size_t>(seeds.size(), 1) * 8),
        stream(std::max<std::size_t>(streams.size(), 1) * 8) {
    SPECDEC_CUDA_CHECK(cudaMemcpy(ind.p, indptr.data(), indptr.size() * 4, cudaMemcpyHostToDevice));
    SPECDEC_CUDA_CHECK(cudaMemcpy(tok.p, tokens.data(), tokens.size() * 4, cudaMemcpyHostToDevice));
    SPECDEC_CUDA_CHECK(cudaMemcpy(par.p, parents.data(), parents.size() * 4, cudaMemcpyHostToDevice));
    if (!seeds.empty()) SPECDEC_CUDA_CHECK(cudaMemcpy(seed.p, seeds.data(), seeds.size() * 8, cudaMemcpyHostToDevice));
    if (!streams.empty())
      SPECDEC_CUDA_CHECK(cudaMemcpy(stream.p, streams.data(), streams.size() * 8, cudaMemcpyHostToDevice));
  }
  static auto i32(const dmem& m, std::int64_t n) {
    return specdec::make_view<1>(m.as<std::int32_t>(), {n}, memory_space::device);
  }
  static auto u64(const dmem& m, std::int64_t n) {
    return specdec::make_view<1>(m.as<const std::uint64_t>(), {n}, memory_space::device);
  }
  auto indptr() const { return i32(ind, R + 1); }
  auto tokens() const { return i32(tok, N); }
  auto parents() const { return i32(par, N); }
  auto seeds() const { return u64(seed, R); }
  auto streams() const { return u64(stream, R); }
  auto accepted() const { return i32(acc, N); }
  auto num_accepted() const { return i32(nacc, R); }
  auto bonus() const { return i32(bon, R); }
  auto emitted() const { return i32(emi, N + R); }
  auto status() const { return i32(st, 3); }
  //! The status word after the timed calls (0: no device error).
  [[nodiscard]] std::int32_t error() const {
    std::int32_t v[3];
    SPECDEC_CUDA_CHECK(cudaMemcpy(v, st.p, 12, cudaMemcpyDeviceToHost));
    return v[0];
  }
  [[nodiscard]] std::vector<std::int32_t> accepted_counts() const {
    std::vector<std::int32_t> h(static_cast<std::size_t>(R));
    SPECDEC_CUDA_CHECK(cudaMemcpy(h.data(), nacc.p, h.size() * 4, cudaMemcpyDeviceToHost));
    return h;
  }
};

void BM_verify_greedy_batch(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0)), tree = static_cast<int>(state.range(1));
  const std::int64_t V = state.range(2);
  const std::int64_t rows = static_cast<std::int64_t>(batch) * (tree + 1);
  const std::size_t logit_bytes = static_cast<std::size_t>(rows * V) * sizeof(float);
  const int sets = specdec_bench::l2_rotation_sets(logit_bytes, graph_calls);
  std::vector<std::unique_ptr<dmem>> logits;
  for (int i = 0; i < sets; ++i) {
    logits.push_back(std::make_unique<dmem>(logit_bytes));
    specdec_bench::fill_uniform(logits.back()->as<float>(), static_cast<std::size_t>(rows * V), 11u + i, -8.0f, 8.0f);
  }
  std::vector<std::int32_t> indptr, parents;
  random_trees(batch, tree, indptr, parents);
  std::vector<std::int32_t> tokens(parents.size());
  specdec::philox_stream rng(5, 0);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(V)));
  const std::int64_t N = static_cast<std::int64_t>(parents.size());
  const device_tree_io io(indptr, tokens, parents);
  cudaStream_t stream;
  SPECDEC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  graph_time(state, stream, [&](int i) {
    const auto lg = specdec::make_view<2>(logits[i % sets]->as<const float>(), {rows, V}, memory_space::device);
    specdec::verify_greedy_batch(specdec::cuda{.stream = stream}, io.indptr(), io.tokens(), io.parents(), lg,
                                 io.accepted(), io.num_accepted(), io.bonus(), io.emitted(), io.status());
  });
  if (io.error() != 0) state.SkipWithError("verify_greedy_batch reported a device error");
  SPECDEC_CUDA_CHECK(cudaStreamDestroy(stream));
  const double bytes = static_cast<double>(logit_bytes) + 4.0 * (3.0 * N + 2.0 * batch + 1) + 4.0 * (2.0 * N + 3.0 * batch);
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  // The time to read the logits once at the copy's DRAM rate (copy_roof counts read + written bytes).
  state.counters["read_us"] = static_cast<double>(logit_bytes) / specdec_bench::copy_roof() * 1e6;
  state.counters["logits_MiB"] = static_cast<double>(logit_bytes) / (1 << 20);
}
BENCHMARK(BM_verify_greedy_batch)
    ->ArgNames({"batch", "tree", "vocab"})
    ->ArgsProduct({{1, 8}, {16, 64}, {32768, 131072}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

void BM_verify_sample_and_match_batch(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0)), tree = static_cast<int>(state.range(1));
  const std::int64_t V = state.range(2);
  const int accept = static_cast<int>(std::min<std::int64_t>(state.range(3), tree));
  const std::int64_t rows = static_cast<std::int64_t>(batch) * (tree + 1);
  const std::size_t prob_bytes = static_cast<std::size_t>(rows * V) * sizeof(float);
  const int sets = specdec_bench::l2_rotation_sets(prob_bytes, graph_calls);
  // Chains: node i's parent is i - 1; its token gets weight V in its parent's row for i < accept
  // (the other entries are uniform in [0, 1e-3)), so the walk accepts `accept` nodes and almost
  // surely stops there.
  std::vector<std::int32_t> indptr{0}, parents, tokens;
  specdec::philox_stream rng(5, 0);
  for (int r = 0; r < batch; ++r) {
    for (int i = 0; i < tree; ++i) {
      parents.push_back(i - 1);
      tokens.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(V))));
    }
    indptr.push_back(indptr.back() + tree);
  }
  std::vector<std::unique_ptr<dmem>> probs;
  const float big = static_cast<float>(V);
  for (int i = 0; i < sets; ++i) {
    probs.push_back(std::make_unique<dmem>(prob_bytes));
    specdec_bench::fill_uniform(probs.back()->as<float>(), static_cast<std::size_t>(rows * V), 11u + i, 0.0f, 1e-3f);
    for (int r = 0; r < batch; ++r)
      for (int k = 0; k < accept; ++k) {
        const std::int64_t row = static_cast<std::int64_t>(r) * (tree + 1) + k;  // the row after node k - 1
        SPECDEC_CUDA_CHECK(cudaMemcpy(probs.back()->as<float>() + row * V + tokens[static_cast<std::size_t>(r * tree + k)],
                                      &big, sizeof(float), cudaMemcpyHostToDevice));
      }
  }
  std::vector<std::uint64_t> seeds(static_cast<std::size_t>(batch), 42), streams(static_cast<std::size_t>(batch));
  for (int r = 0; r < batch; ++r) streams[static_cast<std::size_t>(r)] = specdec::stream_id(static_cast<std::uint32_t>(r), 1);
  const device_tree_io io(indptr, tokens, parents, seeds, streams);
  cudaStream_t stream;
  SPECDEC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  graph_time(state, stream, [&](int i) {
    const auto pr = specdec::make_view<2>(probs[i % sets]->as<const float>(), {rows, V}, memory_space::device);
    specdec::verify_sample_and_match_batch(specdec::cuda{.stream = stream}, io.indptr(), io.tokens(), io.parents(), pr,
                                           io.seeds(), io.streams(), io.accepted(), io.num_accepted(), io.bonus(),
                                           io.emitted(), io.status());
  });
  if (io.error() != 0) state.SkipWithError("verify_sample_and_match_batch reported a device error");
  double visited = 0;
  for (const auto k : io.accepted_counts()) visited += k + 1;
  SPECDEC_CUDA_CHECK(cudaStreamDestroy(stream));
  const double bytes = visited * static_cast<double>(V) * sizeof(float);
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["read_us"] = bytes / specdec_bench::copy_roof() * 1e6;
  state.counters["rows_visited"] = visited / batch;
}
BENCHMARK(BM_verify_sample_and_match_batch)
    ->ArgNames({"batch", "tree", "vocab", "accept"})
    ->ArgsProduct({{1, 8, 64}, {16}, {32768, 131072}, {0, 4}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

//! A step benchmark's cell from its arguments (batch, tree, vocab, mode): the [batch * (tree + 1), V]
//! float rows, their bytes and the input copies that rotate through the L2.
struct step_cell {
  int batch, tree, mode;
  std::int64_t V, rows;
  std::size_t bytes_rows;
  int sets;
  explicit step_cell(const benchmark::State& state)
      : batch(static_cast<int>(state.range(0))), tree(static_cast<int>(state.range(1))),
        mode(static_cast<int>(state.range(3))), V(state.range(2)), rows(static_cast<std::int64_t>(batch) * (tree + 1)),
        bytes_rows(static_cast<std::size_t>(rows * V) * sizeof(float)),
        sets(specdec_bench::l2_rotation_sets(bytes_rows, graph_calls)) {}
};

//! The penalty context of a step on the device: each request's committed context (`committed`
//! random tokens; none when 0) and its tree's rows (penalty_context_builder::add_tree_rows),
//! uploaded once (an engine's per-step host build and upload are not timed).
struct device_penalties {
  std::vector<std::unique_ptr<dmem>> arrays;
  specdec::penalty_context context;
  device_penalties(int committed, std::int64_t V, const std::vector<std::int32_t>& indptr,
                   const std::vector<std::int32_t>& tokens, const std::vector<std::int32_t>& parents,
                   specdec::philox_stream& rng) {
    specdec::penalty_context_builder ctx(static_cast<std::int32_t>(V));
    if (committed > 0) {
      std::vector<std::int32_t> c(static_cast<std::size_t>(committed));
      for (std::size_t r = 0; r + 1 < indptr.size(); ++r) {
        for (auto& t : c) t = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(V)));
        const auto lo = static_cast<std::size_t>(indptr[r]), n = static_cast<std::size_t>(indptr[r + 1]) - lo;
        ctx.add_tree_rows(ctx.add_context(c), std::span(tokens).subspan(lo, n), std::span(parents).subspan(lo, n));
      }
    }
    const auto up = [&](std::span<const std::int32_t> h) {
      arrays.push_back(std::make_unique<dmem>(std::max<std::size_t>(h.size_bytes(), 4)));
      if (!h.empty()) SPECDEC_CUDA_CHECK(cudaMemcpy(arrays.back()->p, h.data(), h.size_bytes(), cudaMemcpyHostToDevice));
      return specdec::make_view<1>(arrays.back()->as<const std::int32_t>(), {static_cast<std::int64_t>(h.size())},
                                   memory_space::device);
    };
    context = {up(ctx.distinct()),       up(ctx.last()),        up(ctx.context_indptr()), up(ctx.context_length()),
               up(ctx.row_context()),    up(ctx.path_indptr()), up(ctx.path())};
  }
};

//! A sampled step's inputs on the device (BM_sampled_step_batch, BM_chain_step_batch) for the trees
//! `tokens` / `parents` (`tree` nodes per request): `sets` copies of float logits [rows, V], uniform
//! in [-8, 8), in which each request's rows 0 .. accept - 1 peak (logit 40) at node k's token, k = the
//! row (its parent's row: node k's parent is node k - 1 there); one sampling entry per request (T 0.8;
//! mode >= 1 top-p 0.9; >= 2 top-k 50; >= 3 min-p 0.05 and eta 0.02; >= 4 the penalties 1.1 / 1.2
//! over W = 1024 with a 32K-token committed context per request, uploaded once); seeds and streams;
//! the tree io; the work buffer (path 0: a copy of the rows, [rows, V]; path 1: the logits form's
//! workspace, [batch, V]); two status words for the composition's calls.
struct sampled_step_inputs {
  std::vector<std::unique_ptr<dmem>> logits;
  std::vector<std::int32_t> row_params;
  device_penalties pen;
  device_tree_io io;
  dmem work, dparams, drp, st1, st2;
  specdec::strided_view<const specdec::sampling_params, 1> params_view;
  specdec::strided_view<const std::int32_t, 1> row_params_view;
  sampled_step_inputs(const step_cell& cell, int accept, int path, const std::vector<std::int32_t>& indptr,
                      const std::vector<std::int32_t>& tokens, const std::vector<std::int32_t>& parents,
                      specdec::philox_stream& rng, std::uint32_t fill_seed)
      : row_params(rows_of(cell)),
        pen(cell.mode >= 4 ? 32768 : 0, cell.V, indptr, tokens, parents, rng),
        io(indptr, tokens, parents, std::vector<std::uint64_t>(static_cast<std::size_t>(cell.batch), 42),
           streams_of(cell.batch)),
        work(path == 0 ? cell.bytes_rows : static_cast<std::size_t>(cell.batch * cell.V) * sizeof(float)),
        dparams(static_cast<std::size_t>(cell.batch) * sizeof(specdec::sampling_params)),
        drp(row_params.size() * 4), st1(12), st2(12) {
    const float peak = 40.0f;  // exp((40 - 8) / 0.8) = e^40 times any other token's weight: drawn
    for (int i = 0; i < cell.sets; ++i) {
      logits.push_back(std::make_unique<dmem>(cell.bytes_rows));
      specdec_bench::fill_uniform(logits.back()->as<float>(), static_cast<std::size_t>(cell.rows * cell.V), fill_seed + i,
                                  -8.0f, 8.0f);
      for (int r = 0; r < cell.batch; ++r)
        for (int k = 0; k < accept; ++k) {
          const std::int64_t row = static_cast<std::int64_t>(r) * (cell.tree + 1) + k;
          SPECDEC_CUDA_CHECK(cudaMemcpy(logits.back()->as<float>() + row * cell.V +
                                            tokens[static_cast<std::size_t>(r * cell.tree + k)],
                                        &peak, sizeof(float), cudaMemcpyHostToDevice));
        }
    }
    specdec::sampling_params sp{.temperature = 0.8f};
    if (cell.mode >= 1) sp.top_p = 0.9f;
    if (cell.mode >= 2) sp.top_k = 50;
    if (cell.mode >= 3) sp.min_p = 0.05f, sp.eta_epsilon = 0.02f;
    if (cell.mode >= 4) sp.repetition_penalty = 1.1f, sp.contextual_penalty = 1.2f, sp.penalty_window = 1024;
    const std::vector<specdec::sampling_params> params(static_cast<std::size_t>(cell.batch), sp);
    SPECDEC_CUDA_CHECK(cudaMemcpy(dparams.p, params.data(), params.size() * sizeof(specdec::sampling_params),
                                  cudaMemcpyHostToDevice));
    SPECDEC_CUDA_CHECK(cudaMemcpy(drp.p, row_params.data(), row_params.size() * 4, cudaMemcpyHostToDevice));
    params_view = specdec::make_view<1>(dparams.as<const specdec::sampling_params>(), {cell.batch}, memory_space::device);
    row_params_view = specdec::make_view<1>(drp.as<const std::int32_t>(), {cell.rows}, memory_space::device);
  }
  static std::vector<std::int32_t> rows_of(const step_cell& cell) {
    std::vector<std::int32_t> rp;
    for (int r = 0; r < cell.batch; ++r)
      for (int i = 0; i <= cell.tree; ++i) rp.push_back(r);
    return rp;
  }
  static std::vector<std::uint64_t> streams_of(int batch) {
    std::vector<std::uint64_t> st(static_cast<std::size_t>(batch));
    for (int r = 0; r < batch; ++r) st[static_cast<std::size_t>(r)] = specdec::stream_id(static_cast<std::uint32_t>(r), 1);
    return st;
  }
  [[nodiscard]] bool has_penalties(const step_cell& cell) const { return cell.mode >= 4; }
  //! path 0's composition before the verification: the rows of set i copied into the work buffer,
  //! processed (process_logits_batch, with the context when mode >= 4) and turned into
  //! probabilities; returns them.
  specdec::strided_view<float, 2> process_copy(const step_cell& cell, int i, cudaStream_t stream) {
    const specdec::cuda pol{.stream = stream};
    SPECDEC_CUDA_CHECK(cudaMemcpyAsync(work.p, logits[static_cast<std::size_t>(i % cell.sets)]->p, cell.bytes_rows,
                                       cudaMemcpyDeviceToDevice, stream));
    const auto lg = specdec::make_view<2>(work.as<float>(), {cell.rows, cell.V}, memory_space::device);
    const auto sv = specdec::make_view<1>(st1.as<std::int32_t>(), {3}, memory_space::device);
    if (has_penalties(cell))
      specdec::process_logits_batch(pol, lg, params_view, row_params_view, pen.context, sv);
    else
      specdec::process_logits_batch(pol, lg, params_view, row_params_view, sv);
    specdec::logits_to_probs_batch(pol, lg, lg, specdec::make_view<1>(st2.as<std::int32_t>(), {3}, memory_space::device));
    return lg;
  }
  //! Set i's logits, and the logits form's workspace.
  auto logits_of(const step_cell& cell, int i) const {
    return specdec::make_view<2>(logits[static_cast<std::size_t>(i % cell.sets)]->as<const float>(), {cell.rows, cell.V},
                                 memory_space::device);
  }
  auto workspace(const step_cell& cell) { return specdec::make_view<2>(work.as<float>(), {cell.batch, cell.V}, memory_space::device); }
  //! Whether a call reported a device error (the status words of path 0's composition too).
  [[nodiscard]] bool failed(int path) const {
    std::int32_t s1[3] = {0, -1, -1}, s2[3] = {0, -1, -1};
    if (path == 0) {
      SPECDEC_CUDA_CHECK(cudaMemcpy(s1, st1.p, 12, cudaMemcpyDeviceToHost));
      SPECDEC_CUDA_CHECK(cudaMemcpy(s2, st2.p, 12, cudaMemcpyDeviceToHost));
    }
    return io.error() != 0 || s1[0] != 0 || s2[0] != 0;
  }
  //! The rows each request's walk reached (accepted + 1), averaged.
  [[nodiscard]] double rows_reached(int batch) const {
    double n = 0;
    for (const auto k : io.accepted_counts()) n += k + 1;
    return n / batch;
  }
};

void BM_sampled_step_batch(benchmark::State& state) {
  const step_cell cell(state);
  const int batch = cell.batch, tree = cell.tree;
  const int accept = static_cast<int>(std::min<std::int64_t>(state.range(4), tree)), path = static_cast<int>(state.range(5));
  const std::int64_t V = cell.V;
  std::vector<std::int32_t> indptr{0}, parents, tokens;
  specdec::philox_stream rng(8, 0);
  for (int r = 0; r < batch; ++r) {
    for (int i = 0; i < tree; ++i) {  // nodes 0 .. accept - 1 a chain from the root, the rest random
      parents.push_back(i == 0 ? -1 : i < accept ? i - 1 : static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(i))));
      tokens.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(V))));
    }
    indptr.push_back(indptr.back() + tree);
  }
  sampled_step_inputs in(cell, accept, path, indptr, tokens, parents, rng, 21u);
  const auto& io = in.io;
  cudaStream_t stream;
  SPECDEC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  graph_time(state, stream, [&](int i) {
    const specdec::cuda pol{.stream = stream};
    if (path == 1) {  // the logits form: the visited rows only, each in its request's workspace row
      if (in.has_penalties(cell))
        specdec::verify_sample_and_match_batch(pol, io.indptr(), io.tokens(), io.parents(), in.logits_of(cell, i),
                                               in.params_view, in.row_params_view, in.pen.context, io.seeds(),
                                               io.streams(), in.workspace(cell), io.accepted(), io.num_accepted(),
                                               io.bonus(), io.emitted(), io.status());
      else
        specdec::verify_sample_and_match_batch(pol, io.indptr(), io.tokens(), io.parents(), in.logits_of(cell, i),
                                               in.params_view, in.row_params_view, io.seeds(), io.streams(),
                                               in.workspace(cell), io.accepted(), io.num_accepted(), io.bonus(),
                                               io.emitted(), io.status());
      return;
    }
    const auto probs = in.process_copy(cell, i, stream);
    specdec::verify_sample_and_match_batch(pol, io.indptr(), io.tokens(), io.parents(), probs, io.seeds(), io.streams(),
                                           io.accepted(), io.num_accepted(), io.bonus(), io.emitted(), io.status());
  });
  if (in.failed(path)) state.SkipWithError("the sampled step reported a device error");
  SPECDEC_CUDA_CHECK(cudaStreamDestroy(stream));
  const double bytes = static_cast<double>(cell.bytes_rows);
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["read_us"] = bytes / specdec_bench::copy_roof() * 1e6;
  state.counters["rows_visited"] = in.rows_reached(batch);
}
//! The cells: session 31's grid (random trees, the walk stops early; every row processed), then
//! both paths where the walk accepts a 3-node chain (batch 1 / 8 / 64, V = 128K, modes 1 and 4).
void sampled_step_cells(benchmark::internal::Benchmark* b) {
  b->ArgNames({"batch", "tree", "vocab", "mode", "accept", "path"});
  for (const int batch : {1, 8})
    for (const int v : {32768, 131072})
      for (const int mode : {0, 1, 2, 3, 4}) b->Args({batch, 64, v, mode, 0, 0});
  for (const int batch : {1, 8, 64})
    for (const int mode : {1, 4})
      for (const int path : {0, 1}) b->Args({batch, 64, 131072, mode, 3, path});
}
BENCHMARK(BM_sampled_step_batch)->Apply(sampled_step_cells)->UseManualTime()->Unit(benchmark::kMicrosecond);

// Speculative sampling of a step with draft rows, on float logits [batch * (tree + 1), V] (uniform in
// [-8, 8)) with uniform draft rows q = 1 / V. Multi = false: chain speculative sampling of chains of
// `tree` nodes (BM_chain_step_batch); true: multi-draft speculative sampling, with replacement, of two
// drafts of tree / 2 nodes each under the root (nodes 0 .. tree/2 - 1 the first, drawn first; the rest
// the second: BM_multi_draft_step_batch). Path 0 = what the verifier (cuda_chain_speculative_verifier /
// cuda_multi_draft_verifier) enqueues with sampled_rows::every_row (a copy of the rows,
// process_logits_batch, logits_to_probs_batch, the probabilities form), path 1 = the logits form
// (only the rows the walk reaches processed, in a [batch, V] workspace: sampled_rows::visited_rows).
// Modes as BM_sampled_step_batch's (sampled_step_inputs). Nodes 0-2 (the first draft's) peak in their
// parents' rows (accepted: p ~ 1 >= q), node 3 is almost surely rejected, so 4 rows are reached per
// request (the multi-draft root also rejects nothing: its first child is accepted). bytes, read_us as
// BM_sampled_step_batch's (every row's bytes).
template <bool Multi>
void draft_step_batch(benchmark::State& state) {
  const step_cell cell(state);
  const int batch = cell.batch, tree = cell.tree, accept = std::min(3, Multi ? tree / 2 : tree);
  const int path = static_cast<int>(state.range(4));
  const std::int64_t V = cell.V;
  std::vector<std::int32_t> indptr{0}, parents, tokens;
  specdec::philox_stream rng(9, 0);
  for (int r = 0; r < batch; ++r) {
    for (int i = 0; i < tree; ++i) {
      const bool second_root = Multi && i == tree / 2;  // the second draft's first node
      parents.push_back(i == 0 || second_root ? -1 : i - 1);
      tokens.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(V))));
    }
    indptr.push_back(indptr.back() + tree);
  }
  sampled_step_inputs in(cell, accept, path, indptr, tokens, parents, rng, 31u);
  const auto& io = in.io;
  dmem q(cell.bytes_rows);
  const float uniform = 1.0f / static_cast<float>(V);
  specdec_bench::fill_uniform(q.as<float>(), static_cast<std::size_t>(cell.rows * V), 7u, uniform, uniform);
  const auto qv = specdec::make_view<2>(q.as<const float>(), {cell.rows, V}, memory_space::device);
  const auto mode = specdec::draft_sampling::with_replacement;
  cudaStream_t stream;
  SPECDEC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  // the verification on `rows` (probabilities, or logits with `logits...` = params, row_params[,
  // context] and the workspace in between: the two forms' argument lists)
  const auto verify = [&](const auto& rows, const auto&... logits) {
    const specdec::cuda pol{.stream = stream};
    if constexpr (Multi)
      specdec::verify_multi_draft_batch(pol, io.indptr(), io.tokens(), io.parents(), rows, qv, mode, logits...,
                                        io.accepted(), io.num_accepted(), io.bonus(), io.emitted(), io.status());
    else
      specdec::verify_chain_speculative_batch(pol, io.indptr(), io.tokens(), io.parents(), rows, qv, logits...,
                                              io.accepted(), io.num_accepted(), io.bonus(), io.emitted(), io.status());
  };
  graph_time(state, stream, [&](int i) {
    if (path == 1) {
      if (in.has_penalties(cell))
        verify(in.logits_of(cell, i), in.params_view, in.row_params_view, in.pen.context, io.seeds(), io.streams(),
               in.workspace(cell));
      else
        verify(in.logits_of(cell, i), in.params_view, in.row_params_view, io.seeds(), io.streams(), in.workspace(cell));
      return;
    }
    verify(in.process_copy(cell, i, stream), io.seeds(), io.streams());
  });
  if (in.failed(path)) state.SkipWithError("the step reported a device error");
  SPECDEC_CUDA_CHECK(cudaStreamDestroy(stream));
  const double bytes = static_cast<double>(cell.bytes_rows);
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["read_us"] = bytes / specdec_bench::copy_roof() * 1e6;
  state.counters["rows_reached"] = in.rows_reached(batch);
}
void BM_chain_step_batch(benchmark::State& state) { draft_step_batch<false>(state); }
void BM_multi_draft_step_batch(benchmark::State& state) { draft_step_batch<true>(state); }
BENCHMARK(BM_chain_step_batch)
    ->ArgNames({"batch", "tree", "vocab", "mode", "path"})
    ->ArgsProduct({{1, 8, 64}, {8}, {131072}, {1, 4}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_multi_draft_step_batch)
    ->ArgNames({"batch", "tree", "vocab", "mode", "path"})
    ->ArgsProduct({{1, 8, 64}, {8}, {131072}, {1, 4}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

void BM_greedy_penalized_step_batch(benchmark::State& state) {
  const step_cell cell(state);
  const int batch = cell.batch, tree = cell.tree, mode = cell.mode, sets = cell.sets;
  const std::int64_t V = cell.V, rows = cell.rows;
  const std::size_t bytes_rows = cell.bytes_rows;
  std::vector<std::int32_t> indptr, parents, row_params;
  random_trees(batch, tree, indptr, parents);
  std::vector<std::int32_t> tokens(parents.size());
  specdec::philox_stream rng(9, 0);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(V)));
  for (int r = 0; r < batch; ++r)
    for (int i = 0; i <= tree; ++i) row_params.push_back(r);
  std::vector<std::unique_ptr<dmem>> logits;
  for (int i = 0; i < sets; ++i) {
    logits.push_back(std::make_unique<dmem>(bytes_rows));
    specdec_bench::fill_uniform(logits.back()->as<float>(), static_cast<std::size_t>(rows * V), 31u + i, -8.0f, 8.0f);
  }
  specdec::sampling_params sp{.temperature = 0.0f, .repetition_penalty = 1.1f, .contextual_penalty = 1.2f,
                              .penalty_window = 1024};
  const std::vector<specdec::sampling_params> params(static_cast<std::size_t>(batch), sp);
  const device_penalties pen(32768, V, indptr, tokens, parents, rng);
  const device_tree_io io(indptr, tokens, parents);
  dmem work(mode == 0 ? bytes_rows : 4), dparams(params.size() * sizeof(specdec::sampling_params)),
      drp(row_params.size() * 4), st1(12);
  SPECDEC_CUDA_CHECK(cudaMemcpy(dparams.p, params.data(), params.size() * sizeof(specdec::sampling_params),
                                cudaMemcpyHostToDevice));
  SPECDEC_CUDA_CHECK(cudaMemcpy(drp.p, row_params.data(), row_params.size() * 4, cudaMemcpyHostToDevice));
  cudaStream_t stream;
  SPECDEC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const auto pv = specdec::make_view<1>(dparams.as<const specdec::sampling_params>(), {batch}, memory_space::device);
  const auto rv = specdec::make_view<1>(drp.as<const std::int32_t>(), {rows}, memory_space::device);
  graph_time(state, stream, [&](int i) {
    const specdec::cuda pol{.stream = stream};
    if (mode == 0) {  // the copy, the rows processed (one-hot at each penalized argmax), the plain walk
      SPECDEC_CUDA_CHECK(cudaMemcpyAsync(work.p, logits[i % sets]->p, bytes_rows, cudaMemcpyDeviceToDevice, stream));
      const auto lg = specdec::make_view<2>(work.as<float>(), {rows, V}, memory_space::device);
      specdec::process_logits_batch(pol, lg, pv, rv, pen.context,
                                    specdec::make_view<1>(st1.as<std::int32_t>(), {3}, memory_space::device));
      specdec::verify_greedy_batch(pol, io.indptr(), io.tokens(), io.parents(), lg, io.accepted(), io.num_accepted(),
                                   io.bonus(), io.emitted(), io.status());
    } else {  // the penalized form: each row's penalized argmax read in place, then the walk
      const auto lg = specdec::make_view<2>(logits[i % sets]->as<const float>(), {rows, V}, memory_space::device);
      specdec::verify_greedy_batch(pol, io.indptr(), io.tokens(), io.parents(), lg, pv, rv, pen.context, io.accepted(),
                                   io.num_accepted(), io.bonus(), io.emitted(), io.status());
    }
  });
  std::int32_t s1[3] = {0, -1, -1};
  if (mode == 0) SPECDEC_CUDA_CHECK(cudaMemcpy(s1, st1.p, 12, cudaMemcpyDeviceToHost));
  if (io.error() != 0 || s1[0] != 0) state.SkipWithError("the penalized greedy step reported a device error");
  SPECDEC_CUDA_CHECK(cudaStreamDestroy(stream));
  const double bytes = static_cast<double>(bytes_rows);
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["read_us"] = bytes / specdec_bench::copy_roof() * 1e6;
}
BENCHMARK(BM_greedy_penalized_step_batch)
    ->ArgNames({"batch", "tree", "vocab", "mode"})
    ->ArgsProduct({{1, 8}, {64}, {32768, 131072}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

void BM_verify_multi_draft_batch(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0)), children = static_cast<int>(state.range(1));
  const std::int64_t V = state.range(2);
  const std::int64_t rows = static_cast<std::int64_t>(batch) * (children + 1);
  const std::size_t row_bytes = static_cast<std::size_t>(rows * V) * sizeof(float);
  std::vector<std::int32_t> indptr{0}, parents, tokens;
  specdec::philox_stream rng(6, 0);
  for (int r = 0; r < batch; ++r) {
    const auto x = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(V)));
    for (int i = 0; i < children; ++i) parents.push_back(-1), tokens.push_back(x);
    indptr.push_back(indptr.back() + children);
  }
  // p in [0.5, 1) and q in [0, 1e-4) (unnormalised rows, used as given): the residual p - c q stays
  // positive through every rejection, and stays 0 at the children's token, where p = 0 and q = 1.
  dmem p(row_bytes), q(row_bytes);
  specdec_bench::fill_uniform(p.as<float>(), static_cast<std::size_t>(rows * V), 21u, 0.5f, 1.0f);
  specdec_bench::fill_uniform(q.as<float>(), static_cast<std::size_t>(rows * V), 22u, 0.0f, 1e-4f);
  const float zero = 0.0f, one = 1.0f;
  for (int r = 0; r < batch; ++r) {
    const std::int64_t at = static_cast<std::int64_t>(r) * (children + 1) * V + tokens[static_cast<std::size_t>(r * children)];
    SPECDEC_CUDA_CHECK(cudaMemcpy(p.as<float>() + at, &zero, sizeof(float), cudaMemcpyHostToDevice));
    SPECDEC_CUDA_CHECK(cudaMemcpy(q.as<float>() + at, &one, sizeof(float), cudaMemcpyHostToDevice));
  }
  std::vector<std::uint64_t> seeds(static_cast<std::size_t>(batch), 43), streams(static_cast<std::size_t>(batch));
  for (int r = 0; r < batch; ++r) streams[static_cast<std::size_t>(r)] = specdec::stream_id(static_cast<std::uint32_t>(r), 1);
  const device_tree_io io(indptr, tokens, parents, seeds, streams);
  cudaStream_t stream;
  SPECDEC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  graph_time(state, stream, [&](int) {
    const auto pv = specdec::make_view<2>(p.as<const float>(), {rows, V}, memory_space::device);
    const auto qv = specdec::make_view<2>(q.as<const float>(), {rows, V}, memory_space::device);
    specdec::verify_multi_draft_batch(specdec::cuda{.stream = stream}, io.indptr(), io.tokens(), io.parents(), pv, qv,
                                      specdec::draft_sampling::with_replacement, io.seeds(), io.streams(),
                                      io.accepted(), io.num_accepted(), io.bonus(), io.emitted(), io.status());
  });
  if (io.error() != 0) state.SkipWithError("verify_multi_draft_batch reported a device error");
  const auto nacc_h = io.accepted_counts();
  if (std::any_of(nacc_h.begin(), nacc_h.end(), [](std::int32_t k) { return k != 0; }))
    state.SkipWithError("a child was accepted: the setup is broken");
  SPECDEC_CUDA_CHECK(cudaStreamDestroy(stream));
  // per request: both root rows at the check, then per rejection both rows again, and p and q for the draw
  const double bytes = static_cast<double>(batch) * (children + 2) * 2.0 * static_cast<double>(V) * sizeof(float);
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["read_us"] = bytes / specdec_bench::copy_roof() * 1e6;
}
BENCHMARK(BM_verify_multi_draft_batch)
    ->ArgNames({"batch", "children", "vocab"})
    ->ArgsProduct({{1, 8}, {1, 4, 16}, {32768, 131072}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

void BM_topk_batch(benchmark::State& state) {
  const std::int64_t batch = state.range(0), V = state.range(1);
  const int k = static_cast<int>(state.range(2));
  const bool ties = state.range(3) != 0;
  const std::size_t bytes = static_cast<std::size_t>(batch * V) * sizeof(float);
  const int sets = specdec_bench::l2_rotation_sets(bytes, graph_calls);
  std::vector<std::unique_ptr<dmem>> rows;
  std::vector<float> h(static_cast<std::size_t>(batch * V));
  for (int i = 0; i < sets; ++i) {
    specdec::philox_stream rng(31u + i, 0);
    for (auto& x : h) x = ties && rng.below(5) == 0 ? 1.0f : rng.uniform();
    rows.push_back(std::make_unique<dmem>(bytes));
    SPECDEC_CUDA_CHECK(cudaMemcpy(rows.back()->p, h.data(), bytes, cudaMemcpyHostToDevice));
  }
  dmem idx(static_cast<std::size_t>(batch * k) * 4), val(static_cast<std::size_t>(batch * k) * 4);
  cudaStream_t stream;
  SPECDEC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  graph_time(state, stream, [&](int i) {
    specdec::topk_batch(specdec::cuda{.stream = stream},
                        specdec::make_view<2>(rows[i % sets]->as<const float>(), {batch, V}, memory_space::device), k,
                        specdec::make_view<2>(idx.as<std::int32_t>(), {batch, std::int64_t{k}}, memory_space::device),
                        specdec::make_view<2>(val.as<float>(), {batch, std::int64_t{k}}, memory_space::device));
  });
  SPECDEC_CUDA_CHECK(cudaStreamDestroy(stream));
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["read_us"] = static_cast<double>(bytes) / specdec_bench::copy_roof() * 1e6;
}
BENCHMARK(BM_topk_batch)
    ->ArgNames({"batch", "vocab", "k", "ties"})
    ->ArgsProduct({{1, 8, 64}, {32768, 131072}, {50, 1024}, {0, 1}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

void BM_kv_importance_batch(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0)), context = static_cast<int>(state.range(1));
  constexpr int hq = 32, hkv = 8, d = 128;
  const std::size_t k_bytes = static_cast<std::size_t>(batch) * context * hkv * d * sizeof(specdec::bfloat16);
  const std::size_t s_bytes = static_cast<std::size_t>(batch) * hkv * context * sizeof(float);
  const int sets = specdec_bench::l2_rotation_sets(k_bytes, graph_calls);
  // Only K is read (Eq. 2 scores keys); V is a placeholder the layout needs. The values do not change
  // the work, so the caches are a byte pattern.
  std::vector<std::unique_ptr<dmem>> ks;
  for (int i = 0; i < sets; ++i) {
    ks.push_back(std::make_unique<dmem>(k_bytes));
    SPECDEC_CUDA_CHECK(cudaMemset(ks.back()->p, 0x3c + i, k_bytes));
  }
  std::vector<specdec::bfloat16> hqv(static_cast<std::size_t>(batch) * hq * d);
  specdec::philox_stream rng(5, 0);
  for (auto& x : hqv) x = specdec::from_float<specdec::bfloat16>(2.0f * rng.uniform() - 1.0f);
  const std::vector<std::int32_t> lens(static_cast<std::size_t>(batch), context);
  dmem q(hqv.size() * 2), len(lens.size() * 4), scores(s_bytes), st(12);
  SPECDEC_CUDA_CHECK(cudaMemcpy(q.p, hqv.data(), hqv.size() * 2, cudaMemcpyHostToDevice));
  SPECDEC_CUDA_CHECK(cudaMemcpy(len.p, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  cudaStream_t stream;
  SPECDEC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  graph_time(state, stream, [&](int i) {
    const auto* k = ks[i % sets]->as<const specdec::bfloat16>();
    const specdec::contiguous_kv<const specdec::bfloat16> cache{k, k, len.as<const std::int32_t>(), batch, context,
                                                                hkv, d, memory_space::device};
    specdec::kv_importance_batch(
        specdec::cuda{.stream = stream},
        specdec::make_view<3>(q.as<const specdec::bfloat16>(), {batch, hq, d}, memory_space::device), cache,
        specdec::make_view<3>(scores.as<float>(), {batch, hkv, context}, memory_space::device),
        specdec::make_view<1>(st.as<std::int32_t>(), {3}, memory_space::device));
  });
  finish_with_status(state, stream, st, "kv_importance_batch", static_cast<double>(k_bytes + s_bytes));
}
//! The partial-KV benchmarks' cells: batch 1 and 8 at 32K and 128K tokens.
void partial_kv_cells(benchmark::internal::Benchmark* b) {
  b->ArgNames({"batch", "context"})->ArgsProduct({{1, 8}, {32768, 131072}});
}
BENCHMARK(BM_kv_importance_batch)->Apply(partial_kv_cells)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_partial_kv_select_batch(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0)), context = static_cast<int>(state.range(1));
  constexpr int hkv = 8, budget = 4096, sink = 64;
  const std::size_t s_bytes = static_cast<std::size_t>(batch) * hkv * context * sizeof(float);
  const int sets = specdec_bench::l2_rotation_sets(s_bytes, graph_calls);
  std::vector<std::unique_ptr<dmem>> scores;
  for (int i = 0; i < sets; ++i) {
    scores.push_back(std::make_unique<dmem>(s_bytes));
    specdec_bench::fill_uniform(scores.back()->as<float>(), static_cast<std::size_t>(batch) * hkv * context, 31u + i,
                                -1.0f, 1.0f);
  }
  const std::vector<std::int32_t> lens(static_cast<std::size_t>(batch), context);
  const std::size_t list_bytes = static_cast<std::size_t>(batch) * hkv * (2 * budget - sink) * 4;
  dmem k(static_cast<std::size_t>(batch) * context * hkv * 4), len(lens.size() * 4),
      index(static_cast<std::size_t>(batch) * hkv * budget * 4), evict(static_cast<std::size_t>(batch) * hkv * (budget - sink) * 4),
      sizes(static_cast<std::size_t>(batch) * 4), seen(static_cast<std::size_t>(batch) * 4),
      placed(static_cast<std::size_t>(batch) * 4), st(12);
  SPECDEC_CUDA_CHECK(cudaMemcpy(len.p, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  const specdec::contiguous_kv<const float> cache{k.as<const float>(), k.as<const float>(), len.as<const std::int32_t>(),
                                                  batch, context, hkv, 1, memory_space::device};
  cudaStream_t stream;
  SPECDEC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  graph_time(state, stream, [&](int i) {
    specdec::partial_kv_select_batch(
        specdec::cuda{.stream = stream},
        specdec::make_view<3>(scores[i % sets]->as<const float>(), {batch, hkv, context}, memory_space::device), cache, budget,
        sink, specdec::partial_kv_selection::per_kv_head,
        specdec::make_view<3>(index.as<std::int32_t>(), {batch, hkv, budget}, memory_space::device),
        specdec::make_view<3>(evict.as<std::int32_t>(), {batch, hkv, budget - sink}, memory_space::device),
        specdec::make_view<1>(sizes.as<std::int32_t>(), {batch}, memory_space::device),
        specdec::make_view<1>(seen.as<std::int32_t>(), {batch}, memory_space::device),
        specdec::make_view<1>(placed.as<std::int32_t>(), {batch}, memory_space::device),
        specdec::make_view<1>(st.as<std::int32_t>(), {3}, memory_space::device));
  });
  finish_with_status(state, stream, st, "partial_kv_select_batch", static_cast<double>(s_bytes + list_bytes));
}
BENCHMARK(BM_partial_kv_select_batch)->Apply(partial_kv_cells)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_kv_commit_batch(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0)), accept = static_cast<int>(state.range(1));
  constexpr int layers = 32, hkv = 8, d = 128, tree = 64, cap = 256, committed = cap - tree;
  using T = specdec::bfloat16;
  const std::size_t layer_bytes = static_cast<std::size_t>(batch) * cap * hkv * d * sizeof(T);
  std::vector<std::unique_ptr<dmem>> kv;
  std::vector<std::int32_t> indptr{0}, accepted, num(static_cast<std::size_t>(batch), accept),
      com(static_cast<std::size_t>(batch), committed), lens(static_cast<std::size_t>(batch), committed);
  for (int r = 0; r < batch; ++r) {
    for (int j = 0; j < tree; ++j) accepted.push_back(j < accept ? 4 * j : 0);
    indptr.push_back(indptr.back() + tree);
  }
  dmem dlen(lens.size() * 4), dcom(com.size() * 4), dind(indptr.size() * 4), dacc(accepted.size() * 4),
      dnum(num.size() * 4), dnew(num.size() * 4), st(12);
  SPECDEC_CUDA_CHECK(cudaMemcpy(dlen.p, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  SPECDEC_CUDA_CHECK(cudaMemcpy(dcom.p, com.data(), com.size() * 4, cudaMemcpyHostToDevice));
  SPECDEC_CUDA_CHECK(cudaMemcpy(dind.p, indptr.data(), indptr.size() * 4, cudaMemcpyHostToDevice));
  SPECDEC_CUDA_CHECK(cudaMemcpy(dacc.p, accepted.data(), accepted.size() * 4, cudaMemcpyHostToDevice));
  SPECDEC_CUDA_CHECK(cudaMemcpy(dnum.p, num.data(), num.size() * 4, cudaMemcpyHostToDevice));
  std::vector<specdec::contiguous_kv<T>> caches;
  for (int l = 0; l < layers; ++l) {
    kv.push_back(std::make_unique<dmem>(layer_bytes));
    kv.push_back(std::make_unique<dmem>(layer_bytes));
    SPECDEC_CUDA_CHECK(cudaMemset(kv[2 * l]->p, 0x3c, layer_bytes));
    SPECDEC_CUDA_CHECK(cudaMemset(kv[2 * l + 1]->p, 0x3d, layer_bytes));
    caches.push_back({kv[2 * l]->as<T>(), kv[2 * l + 1]->as<T>(), dlen.as<std::int32_t>(), batch, cap, hkv, d,
                      memory_space::device});
  }
  auto v1 = [](const dmem& m, std::int64_t n) { return specdec::make_view<1>(m.as<std::int32_t>(), {n}, memory_space::device); };
  const std::int64_t N = static_cast<std::int64_t>(accepted.size());
  cudaStream_t stream;
  SPECDEC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  graph_time(state, stream, [&](int) {
    specdec::kv_commit_in_place_batch(specdec::cuda{.stream = stream}, std::span<const specdec::contiguous_kv<T>>(caches),
                                      v1(dcom, batch), v1(dind, batch + 1), v1(dacc, N), v1(dnum, batch),
                                      v1(dnew, batch), v1(st, 3));
  });
  std::int32_t status[3];
  SPECDEC_CUDA_CHECK(cudaMemcpy(status, st.p, 12, cudaMemcpyDeviceToHost));
  if (status[0] != 0) state.SkipWithError("kv_commit_in_place_batch reported a device error");
  SPECDEC_CUDA_CHECK(cudaStreamDestroy(stream));
  const double bytes = 2.0 * 2 * layers * batch * (accept - 1) * hkv * d * sizeof(T);
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["launches"] = 2.0 * layers;
}
BENCHMARK(BM_kv_commit_batch)
    ->ArgNames({"batch", "accept"})
    ->ArgsProduct({{1, 8, 64}, {4, 16}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

void BM_build_tree_batch(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0)), tree = static_cast<int>(state.range(1));
  std::vector<std::int32_t> indptr, parents;
  random_trees(batch, tree, indptr, parents);
  const std::vector<std::int32_t> committed(static_cast<std::size_t>(batch), 1000);
  const std::int64_t N = static_cast<std::int64_t>(parents.size());
  const std::int64_t words = static_cast<std::int64_t>(batch) * tree * specdec::words_per_row(tree);
  dmem dind(indptr.size() * 4), dpar(parents.size() * 4), dcom(committed.size() * 4), dep(N * 4), pos(N * 4),
      mind((batch + 1) * 8), mask(words * 8), st(12);
  SPECDEC_CUDA_CHECK(cudaMemcpy(dind.p, indptr.data(), indptr.size() * 4, cudaMemcpyHostToDevice));
  SPECDEC_CUDA_CHECK(cudaMemcpy(dpar.p, parents.data(), parents.size() * 4, cudaMemcpyHostToDevice));
  SPECDEC_CUDA_CHECK(cudaMemcpy(dcom.p, committed.data(), committed.size() * 4, cudaMemcpyHostToDevice));
  auto v1 = [](const dmem& m, std::int64_t n) { return specdec::make_view<1>(m.as<std::int32_t>(), {n}, memory_space::device); };
  cudaStream_t stream;
  SPECDEC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  graph_time(state, stream, [&](int) {
    specdec::build_tree_batch(specdec::cuda{.stream = stream}, v1(dind, batch + 1), v1(dpar, N), v1(dcom, batch),
                              v1(dep, N), v1(pos, N),
                              specdec::make_view<1>(mind.as<std::int64_t>(), {batch + 1}, memory_space::device),
                              specdec::make_view<1>(mask.as<specdec::mask_word>(), {words}, memory_space::device),
                              v1(st, 3));
  });
  std::int32_t status[3];
  SPECDEC_CUDA_CHECK(cudaMemcpy(status, st.p, 12, cudaMemcpyDeviceToHost));
  if (status[0] != 0) state.SkipWithError("build_tree_batch reported a device error");
  SPECDEC_CUDA_CHECK(cudaStreamDestroy(stream));
  const double bytes = 4.0 * (N + 2 * batch + 1) + 8.0 * words + 4.0 * 2 * N + 8.0 * (batch + 1);
  state.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["mask_KiB"] = 8.0 * static_cast<double>(words) / 1024;
}
BENCHMARK(BM_build_tree_batch)
    ->ArgNames({"batch", "tree"})
    ->ArgsProduct({{1, 8, 64}, {16, 64, 1024}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
