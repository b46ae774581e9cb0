// This machine's host roofline, the yardstick every other benchmark is read against:
//   BM_read_bandwidth/threads:T   sum of a 256 MiB float array (far beyond the caches): "GB/s"
//   BM_fma_peak_<isa>/threads:T   independent FMA chains in registers: "GFLOP/s" (1 FMA = 2 FLOPs)
// threads:1 is one core (CPU time); threads:0 means every hardware thread (specdec::parallel_for's
// pool; wall time).
// Also Philox4x32-10 throughput (the generator every sampler uses): "GB/s" of random output.
#include <benchmark/benchmark.h>

#include <time.h>

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "specdec/core/philox.hpp"
#include "specdec/core/thread_pool.hpp"

namespace {

int resolve_threads(std::int64_t arg) {
  return arg > 0 ? static_cast<int>(arg) : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// CPU time of the calling thread, in seconds. On a shared machine the wall-clock rate of an
// all-threads run is diluted by other processes; rate / (slowest thread's own CPU time) -- reported as
// the "_busy" counters -- estimates what the threads achieve while they actually run.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// ---- read bandwidth -------------------------------------------------------------------------------
constexpr std::size_t read_elems = std::size_t{1} << 26;  // 256 MiB of float

const std::vector<float>& read_array() {
  static const std::vector<float> a = [] {
    std::vector<float> v(read_elems);
    specdec::parallel_for(specdec::host{}, 64, [&](std::int64_t c) {  // first touch from the pool
      const std::size_t n = read_elems / 64, b = static_cast<std::size_t>(c) * n;
      for (std::size_t i = b; i < b + n; ++i) v[i] = static_cast<float>(i & 1023) * 0.001f;
    });
    return v;
  }();
  return a;
}

// 16 independent partial sums: the compiler turns them into full-width vector adds, so the loop is
// limited by loads, not by the add latency chain.
float sum_range(const float* p, std::size_t n) {
  float acc[16] = {};
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) acc[j] += p[i + static_cast<std::size_t>(j)];
  float s = 0;
  for (; i < n; ++i) s += p[i];
  for (float x : acc) s += x;
  return s;
}

void BM_read_bandwidth(benchmark::State& st) {
  const auto& a = read_array();
  const int threads = resolve_threads(st.range(0));
  const std::size_t chunk = (read_elems / static_cast<std::size_t>(threads) + 15) / 16 * 16;
  std::vector<float> partial(static_cast<std::size_t>(threads));
  std::vector<double> busy(static_cast<std::size_t>(threads));
  double busy_total = 0;
  for (auto _ : st) {
    specdec::parallel_for(specdec::host{threads}, threads, [&](std::int64_t t) {
      const double t0 = thread_cpu_seconds();
      const std::size_t b = std::min(read_elems, static_cast<std::size_t>(t) * chunk);
      const std::size_t e = std::min(read_elems, b + chunk);
      partial[static_cast<std::size_t>(t)] = sum_range(a.data() + b, e - b);
      busy[static_cast<std::size_t>(t)] = thread_cpu_seconds() - t0;
    });
    busy_total += *std::max_element(busy.begin(), busy.end());
    benchmark::DoNotOptimize(partial.data());
    benchmark::ClobberMemory();
  }
  const double bytes = static_cast<double>(read_elems) * sizeof(float);
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * static_cast<std::int64_t>(bytes));
  st.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GB/s_busy"] = bytes * static_cast<double>(st.iterations()) / 1e9 / std::max(busy_total, 1e-12);
  st.counters["threads"] = threads;
}
// threads:1 is timed in CPU time (robust when the machine is shared: descheduled time is not counted);
// threads:0 must use wall time, since the helpers' CPU time is not the calling thread's.
BENCHMARK(BM_read_bandwidth)->ArgName("threads")->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_read_bandwidth)->ArgName("threads")->Arg(0)->UseRealTime()->Unit(benchmark::kMillisecond);

// ---- FMA peak -----------------------------------------------------------------------------------------
constexpr int fma_iters = 1 << 16;

// Generic: 16 chains x 16 floats written so the compiler vectorizes to the widest FMA it has.
float fma_kernel_generic(float seed) {
  float acc[16][16];
  for (int c = 0; c < 16; ++c)
    for (int l = 0; l < 16; ++l) acc[c][l] = seed + static_cast<float>(c * 16 + l) * 1e-6f;
  const float m = 0.999999f, a = 1e-7f;
  for (int i = 0; i < fma_iters; ++i)
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c)
#pragma GCC unroll 16
      for (int l = 0; l < 16; ++l) acc[c][l] = acc[c][l] * m + a;
  float s = 0;
  for (auto& row : acc)
    for (float x : row) s += x;
  return s;
}
constexpr double generic_flops = 2.0 * 16 * 16 * fma_iters;

#if defined(__AVX2__) && defined(__FMA__)
// 12 independent 8-wide chains: enough to cover 4-cycle latency on 2 FMA ports (needs >= 8).
__attribute__((noinline)) float fma_kernel_avx2(float seed) {
  __m256 acc[12];
  for (int c = 0; c < 12; ++c) acc[c] = _mm256_set1_ps(seed + static_cast<float>(c) * 1e-6f);
  const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < fma_iters; ++i)
#pragma GCC unroll 12
    for (int c = 0; c < 12; ++c) acc[c] = _mm256_fmadd_ps(acc[c], m, a);
  __m256 s = acc[0];
  for (int c = 1; c < 12; ++c) s = _mm256_add_ps(s, acc[c]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  return out[0] + out[7];
}
constexpr double avx2_flops = 2.0 * 12 * 8 * fma_iters;
#endif

#if defined(__AVX512F__)
__attribute__((noinline)) float fma_kernel_avx512(float seed) {
  __m512 acc[12];
  for (int c = 0; c < 12; ++c) acc[c] = _mm512_set1_ps(seed + static_cast<float>(c) * 1e-6f);
  const __m512 m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < fma_iters; ++i)
#pragma GCC unroll 12
    for (int c = 0; c < 12; ++c) acc[c] = _mm512_fmadd_ps(acc[c], m, a);
  __m512 s = acc[0];
  for (int c = 1; c < 12; ++c) s = _mm512_add_ps(s, acc[c]);
  alignas(64) float out[16];  // (not _mm512_reduce_add_ps: GCC 12 warns inside it under -Werror)
  _mm512_store_ps(out, s);
  return out[0] + out[15];
}
constexpr double avx512_flops = 2.0 * 12 * 16 * fma_iters;
#endif

template <float (*Kernel)(float), const double* Flops>
void BM_fma(benchmark::State& st) {
  const int threads = resolve_threads(st.range(0));
  std::vector<float> out(static_cast<std::size_t>(threads));
  std::vector<double> busy(static_cast<std::size_t>(threads));
  double busy_total = 0;
  for (auto _ : st) {
    specdec::parallel_for(specdec::host{threads}, threads, [&](std::int64_t t) {
      const double t0 = thread_cpu_seconds();
      out[static_cast<std::size_t>(t)] = Kernel(1.0f + static_cast<float>(t));
      busy[static_cast<std::size_t>(t)] = thread_cpu_seconds() - t0;
    });
    busy_total += *std::max_element(busy.begin(), busy.end());
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["GFLOP/s"] =
      benchmark::Counter(*Flops * threads / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOP/s_busy"] = *Flops * threads * static_cast<double>(st.iterations()) / 1e9 / std::max(busy_total, 1e-12);
  st.counters["threads"] = threads;
}
constexpr double generic_flops_v = generic_flops;
BENCHMARK(BM_fma<fma_kernel_generic, &generic_flops_v>)
    ->Name("BM_fma_peak_autovec")->ArgName("threads")->Arg(1);
BENCHMARK(BM_fma<fma_kernel_generic, &generic_flops_v>)
    ->Name("BM_fma_peak_autovec")->ArgName("threads")->Arg(0)->UseRealTime();
#if defined(__AVX2__) && defined(__FMA__)
constexpr double avx2_flops_v = avx2_flops;
BENCHMARK(BM_fma<fma_kernel_avx2, &avx2_flops_v>)->Name("BM_fma_peak_avx2")->ArgName("threads")->Arg(1);
BENCHMARK(BM_fma<fma_kernel_avx2, &avx2_flops_v>)->Name("BM_fma_peak_avx2")->ArgName("threads")->Arg(0)->UseRealTime();
#endif
#if defined(__AVX512F__)
constexpr double avx512_flops_v = avx512_flops;
BENCHMARK(BM_fma<fma_kernel_avx512, &avx512_flops_v>)
    ->Name("BM_fma_peak_avx512")->ArgName("threads")->Arg(1);
BENCHMARK(BM_fma<fma_kernel_avx512, &avx512_flops_v>)
    ->Name("BM_fma_peak_avx512")->ArgName("threads")->Arg(0)->UseRealTime();
#endif

// ---- Philox throughput ----------------------------------------------------------------------------
constexpr std::size_t philox_words = 1 << 16;

// Sequential next_u32 from one stream (one block computed per word: the simple per-draw API).
void BM_philox_next_u32(benchmark::State& st) {
  std::vector<std::uint32_t> out(philox_words);
  std::uint64_t step = 0;
  for (auto _ : st) {
    specdec::philox_stream s(42, specdec::stream_id(0, static_cast<std::uint32_t>(step++)));
    for (auto& w : out) w = s.next_u32();
    benchmark::DoNotOptimize(out.data());
  }
  const double bytes = philox_words * 4.0;
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * philox_words));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * philox_words * 4));
  st.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_philox_next_u32);

// Whole blocks (4 words per Philox evaluation): the bulk-generation rate.
void BM_philox_blocks(benchmark::State& st) {
  std::vector<specdec::philox_block> out(philox_words / 4);
  std::uint32_t stream = 0;
  for (auto _ : st) {
    ++stream;
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] = specdec::philox4x32_10({{static_cast<std::uint32_t>(i), 0u, stream, 0u}}, 42u, 0u);
    benchmark::DoNotOptimize(out.data());
  }
  const double bytes = philox_words * 4.0;
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * philox_words));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * philox_words * 4));
  st.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_philox_blocks);

// Uniform floats in [0, 1) (what samplers draw).
void BM_philox_uniform(benchmark::State& st) {
  std::vector<float> out(philox_words);
  std::uint64_t step = 0;
  for (auto _ : st) {
    specdec::philox_stream s(7, step++);
    for (auto& x : out) x = s.uniform();
    benchmark::DoNotOptimize(out.data());
  }
  const double bytes = philox_words * 4.0;
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * philox_words));
  st.counters["GB/s"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_philox_uniform);

}  // namespace
