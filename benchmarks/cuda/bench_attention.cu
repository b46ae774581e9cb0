// CUDA attention benchmarks with their roofline, all timed with CUDA events (manual time):
//   BM_device_copy      device-to-device copy bandwidth (read + write bytes / s): the memory roof
//   BM_mma_bf16_peak    bf16 mma.sync m16n8k16 rate with register-resident operands: the compute
//                       roof of an mma.sync kernel (cuBLAS is not linked; see RESULTS.md)
//   BM_hybrid_attention hybrid_tree_attention(cuda), bf16, 32 query / 8 KV heads, D = 128, NHD cache
//                       of 4K/32K/128K tokens, trees of 1/16/64 nodes (random topology), batch 1 and 8
// Time: one call's device time, from replays of a CUDA graph of 10 calls (an engine captures its
// decoding step the same way), the calls rotating over enough copies of the cache to read 3x the
// L2 size; eager_us is the median time of one call enqueued between two events, host-side
// validation and launch included. Counters: GB/s (bytes that must move: K/V cache + tree K/V + Q +
// out + LSE), TFLOP/s (4 D per visible (query, key, head) pair), and x_roofline = measured time /
// max(bytes / copy bandwidth, FLOPs / mma peak) with both roofs measured in the same process. The
// binary exits 77 without a GPU (shared main). PyTorch SDPA on the same shapes: sdpa_compare.py.
#include <benchmark/benchmark.h>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "specdec/attention/hybrid_tree_attention.cuh"
#include "specdec/core/bitmask.hpp"
#include "specdec/core/device_types.cuh"
#include "specdec/core/philox.hpp"
#include "specdec/kv/contiguous_kv.hpp"
#include "cuda/bench_util.cuh"

namespace {

using specdec::memory_space;
using specdec_bench::copy_bytes;
using specdec_bench::dmem;
using specdec_bench::time_on_stream;

void fill(void* p, std::size_t n, std::uint32_t seed) {
  specdec_bench::fill_uniform(static_cast<__nv_bfloat16*>(p), n, seed, -1.0f, 1.0f);
}

// --- roofs -----------------------------------------------------------------------------------

constexpr int mma_iters = 256;

//! Each warp keeps 8 independent accumulators busy (enough to cover the mma pipeline latency).
__global__ void __launch_bounds__(256) mma_peak_kernel(float* sink, std::uint32_t seed) {
  std::uint32_t a[4] = {seed, seed ^ 1u, seed ^ 2u, seed ^ 3u};
  const std::uint32_t b0 = seed ^ 0x3f803f80u, b1 = seed ^ 0x3f003f00u;
  float c[8][4] = {};
  for (int i = 0; i < mma_iters; ++i) {
#pragma unroll
    for (int j = 0; j < 8; ++j) specdec::detail::mma_16816<__nv_bfloat16>(c[j], a, b0, b1);
  }
  float s = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
  if (s == 12345.678f) sink[threadIdx.x] = s;  // keeps the work alive; practically never stores
}

double measure_mma_peak(int reps) {  // FLOP per second
  int sms = specdec::detail::cuda_sm_count();
  const int blocks = sms * 4;
  dmem sink(1024 * sizeof(float));
  mma_peak_kernel<<<blocks, 256>>>(sink.as<float>(), 1u);  // warm-up
  SPECDEC_CUDA_CHECK(cudaGetLastError());
  double best = 1e30;
  for (int i = 0; i < reps; ++i)
    best = std::min(best, time_on_stream(nullptr, [&] { mma_peak_kernel<<<blocks, 256>>>(sink.as<float>(), 2u); }));
  const double flops = 2.0 * 16 * 8 * 16 * 8.0 * mma_iters * (blocks * 8.0);
  return flops / best;
}

struct roofs {
  double copy_bw, mma_peak;
};
const roofs& machine_roofs() {
  static const roofs r{specdec_bench::copy_roof(), measure_mma_peak(5)};
  return r;
}

void BM_device_copy(benchmark::State& state) {
  dmem a(copy_bytes), b(copy_bytes);
  SPECDEC_CUDA_CHECK(cudaMemset(a.p, 0, copy_bytes));
  double total = 0;
  for (auto _ : state) {
    const double s = time_on_stream(nullptr, [&] {
      SPECDEC_CUDA_CHECK(cudaMemcpyAsync(b.p, a.p, copy_bytes, cudaMemcpyDeviceToDevice, nullptr));
    });
    state.SetIterationTime(s);
    total += s;
  }
  const double bytes = 2.0 * static_cast<double>(copy_bytes) * static_cast<double>(state.iterations());
  state.counters["GB/s"] = bytes / total * 1e-9;
  state.counters["TFLOP/s"] = 0;
}
BENCHMARK(BM_device_copy)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_mma_bf16_peak(benchmark::State& state) {
  const int blocks = specdec::detail::cuda_sm_count() * 4;
  dmem sink(1024 * sizeof(float));
  double total = 0;
  for (auto _ : state) {
    const double s = time_on_stream(nullptr, [&] { mma_peak_kernel<<<blocks, 256>>>(sink.as<float>(), 3u); });
    SPECDEC_CUDA_CHECK(cudaGetLastError());
    state.SetIterationTime(s);
    total += s;
  }
  const double flops = 2.0 * 16 * 8 * 16 * 8.0 * mma_iters * (blocks * 8.0) * static_cast<double>(state.iterations());
  state.counters["TFLOP/s"] = flops / total * 1e-12;
  state.counters["GB/s"] = 0;
}
BENCHMARK(BM_mma_bf16_peak)->UseManualTime()->Unit(benchmark::kMillisecond);

// --- attention -------------------------------------------------------------------------------

constexpr int hq = 32, hkv = 8, dim = 128;

//! Calls captured in one CUDA graph per timed replay: the per-call time is replay time / this.
constexpr int graph_calls = 10;

void BM_hybrid_attention(benchmark::State& state) {
  const int cache_len = static_cast<int>(state.range(0));
  const int tree = static_cast<int>(state.range(1));
  const int batch = static_cast<int>(state.range(2));
  const int tokens = tree * batch;
  using bf = specdec::bfloat16;

  // Enough copies of the K/V cache that the graph's calls together read at least 3x the L2 size:
  // otherwise a small cache (4K tokens, batch 1: 16 MiB) would be re-read from L2, not memory.
  const std::size_t cache_elems = static_cast<std::size_t>(batch) * cache_len * hkv * dim;
  const std::size_t cache_bytes = cache_elems * 2 * 2;
  const int sets = specdec_bench::l2_rotation_sets(cache_bytes, graph_calls);
  std::vector<std::unique_ptr<dmem>> ks, vs;
  for (int i = 0; i < sets; ++i) {
    ks.push_back(std::make_unique<dmem>(cache_elems * 2));
    vs.push_back(std::make_unique<dmem>(cache_elems * 2));
    fill(ks.back()->p, cache_elems, 1 + 16 * i);
    fill(vs.back()->p, cache_elems, 2 + 16 * i);
  }
  const std::size_t q_elems = static_cast<std::size_t>(tokens) * hq * dim;
  const std::size_t s_elems = static_cast<std::size_t>(tokens) * hkv * dim;
  dmem q(q_elems * 2), out(q_elems * 2), sk(s_elems * 2), sv(s_elems * 2), lse(static_cast<std::size_t>(tokens) * hq * 4);
  fill(q.p, q_elems, 3);
  fill(sk.p, s_elems, 4);
  fill(sv.p, s_elems, 5);

  // Host-side metadata: lengths, q_indptr, random trees' ancestor masks (visible pairs for FLOPs).
  std::vector<std::int32_t> lens(batch, cache_len), indptr(batch + 1);
  for (int r = 0; r <= batch; ++r) indptr[r] = r * tree;
  const int wpr = specdec::words_per_row(tree);
  std::vector<specdec::mask_word> mask;
  specdec::philox_stream rng(42, 0);
  double visible_tree_pairs = 0;
  for (int r = 0; r < batch; ++r) {
    const std::size_t base = mask.size();
    mask.resize(base + static_cast<std::size_t>(tree) * wpr, 0);
    for (int i = 0; i < tree; ++i) {
      specdec::mask_word* row = mask.data() + base + static_cast<std::size_t>(i) * wpr;
      const int parent = i == 0 ? -1 : static_cast<int>(rng.below(static_cast<std::uint32_t>(i)));
      if (parent >= 0) std::copy_n(mask.data() + base + static_cast<std::size_t>(parent) * wpr, wpr, row);
      specdec::set_bit(row, i);
      for (int w = 0; w < wpr; ++w) visible_tree_pairs += __builtin_popcountll(row[w]);
    }
  }
  dmem dlens(lens.size() * 4), dind(indptr.size() * 4), dmask(mask.size() * 8);
  SPECDEC_CUDA_CHECK(cudaMemcpy(dlens.p, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  SPECDEC_CUDA_CHECK(cudaMemcpy(dind.p, indptr.data(), indptr.size() * 4, cudaMemcpyHostToDevice));
  SPECDEC_CUDA_CHECK(cudaMemcpy(dmask.p, mask.data(), mask.size() * 8, cudaMemcpyHostToDevice));

  auto qv = specdec::make_view<3>(q.as<bf>(), {tokens, hq, dim}, memory_space::device);
  auto ov = specdec::make_view<3>(out.as<bf>(), {tokens, hq, dim}, memory_space::device);
  auto kv = specdec::make_view<3>(sk.as<bf>(), {tokens, hkv, dim}, memory_space::device);
  auto vv = specdec::make_view<3>(sv.as<bf>(), {tokens, hkv, dim}, memory_space::device);
  auto lv = specdec::make_view<2>(lse.as<float>(), {tokens, hq}, memory_space::device);
  auto iv = specdec::make_view<1>(dind.as<std::int32_t>(), {batch + 1}, memory_space::device);
  auto mv = specdec::make_view<1>(dmask.as<specdec::mask_word>(), {static_cast<std::int64_t>(mask.size())},
                                  memory_space::device);
  auto cache_of = [&](int set) {
    return specdec::contiguous_kv<bf>{ks[set]->as<bf>(), vs[set]->as<bf>(), dlens.as<std::int32_t>(), batch,
                                      cache_len,         hkv,              dim,
                                      memory_space::device};
  };
  const std::size_t ws_bytes =
      specdec::hybrid_tree_attention_workspace_bytes(specdec::cuda{}, qv, cache_of(0), iv);
  dmem wsmem(ws_bytes);
  specdec::attention_workspace ws(wsmem.p, ws_bytes, memory_space::device);
  cudaStream_t stream;
  SPECDEC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto call = [&](int set) {
    specdec::hybrid_tree_attention(specdec::cuda{.stream = stream}, qv, cache_of(set), kv, vv, iv, mv, ov, lv,
                                   {.workspace = &ws});
  };
  call(0);  // warm-up (module load)
  SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream));

  // Eager: one call between two events, host-side validation and launch overhead included.
  std::vector<double> eager;
  for (int i = 0; i < 20; ++i) eager.push_back(time_on_stream(stream, [&] { call(i % sets); }));
  std::nth_element(eager.begin(), eager.begin() + 10, eager.end());

  // Graph: graph_calls calls captured once (the way an engine replays a decoding step).
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  SPECDEC_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < graph_calls; ++i) call(i % sets);
  SPECDEC_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  SPECDEC_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  SPECDEC_CUDA_CHECK(cudaGraphLaunch(exec, stream));  // warm-up replay
  SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream));

  double total = 0;
  for (auto _ : state) {
    const double s = time_on_stream(stream, [&] { SPECDEC_CUDA_CHECK(cudaGraphLaunch(exec, stream)); }) / graph_calls;
    state.SetIterationTime(s);
    total += s;
  }
  SPECDEC_CUDA_CHECK(cudaGraphExecDestroy(exec));
  SPECDEC_CUDA_CHECK(cudaGraphDestroy(graph));
  SPECDEC_CUDA_CHECK(cudaStreamDestroy(stream));
  const double bytes = static_cast<double>(cache_elems) * 2 * 2 + static_cast<double>(s_elems) * 2 * 2 +
                       static_cast<double>(q_elems) * 2 * 2 + static_cast<double>(tokens) * hq * 4;
  const double flops = 4.0 * dim * hq * (static_cast<double>(tokens) * cache_len + visible_tree_pairs);
  const double per_call = total / static_cast<double>(state.iterations());
  const roofs& rf = machine_roofs();
  const double roof = std::max(bytes / rf.copy_bw, flops / rf.mma_peak);
  state.counters["GB/s"] = bytes / per_call * 1e-9;
  state.counters["TFLOP/s"] = flops / per_call * 1e-12;
  state.counters["x_roofline"] = per_call / roof;
  state.counters["eager_us"] = eager[10] * 1e6;
  state.counters["kv_sets"] = sets;
  state.counters["ws_MiB"] = static_cast<double>(ws_bytes) / (1 << 20);
}
BENCHMARK(BM_hybrid_attention)
    ->ArgNames({"cache", "tree", "batch"})
    ->ArgsProduct({{4096, 32768, 131072}, {1, 16, 64}, {1, 8}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
