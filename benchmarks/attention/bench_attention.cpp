// Host attention benchmarks: hybrid_tree_attention, decode_attention, tree_attention, lse_merge at
// D = 128, 32 query heads / 8 KV heads, cache 4K and 32K, tree 1/16/63/64/128, fp16 and fp32 K/V
// (and decode_attention at tree 2/4/8, 32K; hybrid at the demo target's shape, D 64, 4/2 heads, fp32,
// four layers, trees 1-8 at 4K and 16K), plus this machine's roofline (read bandwidth, FMA
// peak) measured the same way, so every figure can be read as a % of roofline. Counters: "GB/s"
// (bytes that must be read/written at least once: cache K/V, tree K/V, Q, O) and "GFLOP/s" (2
// FLOPs per multiply-add of QK^T and PV over the keys each query actually sees). Problem sizes
// are set once per benchmark; the workspace is sized once (no allocation inside the timed loop).
// Two extra decode rows at cache 1K give the kernel's in-cache ceiling for the memory-bound
// (tree = 1) cells.
#include <benchmark/benchmark.h>

#include "common/counters.hpp"

#include <algorithm>
#include <cstring>
#include <cstdint>
#include <string>
#include <vector>

#include "specdec/attention/decode_attention.hpp"
#include "specdec/attention/hybrid_tree_attention.hpp"
#include "specdec/attention/lse_merge.hpp"
#include "specdec/attention/tree_attention.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/simd_level.hpp"
#include "specdec/kv/paged_kv.hpp"

namespace {

// Which kernels ran: the level the attention calls of this binary dispatch to (or its flags' level).
[[maybe_unused]] const int record_simd_level = [] {
  benchmark::AddCustomContext("specdec_simd_level", std::string(specdec::to_string(specdec::active_simd_level())));
  benchmark::AddCustomContext("specdec_isa_dispatch", SPECDEC_ISA_DISPATCH ? "yes" : "no (compiled for this level)");
  return 0;
}();

constexpr int kHq = 32, kHkv = 8, kD = 128, kPage = 16;

//! Heads and head_dim of a problem: #3's grid (32/8 heads, D 128) unless a cell says otherwise.
struct attention_shape {
  int hq = kHq, hkv = kHkv, d = kD;
};
//! The demo target's attention (examples/weights/target.safetensors: 4 query / 2 kv heads, head_dim 64).
constexpr attention_shape demo_target_shape{4, 2, 64};

template <class T>
struct problem {
  int cache = 0, tree = 0;
  attention_shape shape;
  std::vector<T> kp, vp, q, sk, sv, out;
  std::vector<float> lse;
  std::vector<std::int32_t> page_indptr, page_indices, lens, q_indptr;
  std::vector<specdec::mask_word> mask;
  std::int64_t visible_pairs = 0;  // sum over tree rows of set mask bits

  problem(int cache_len, int tree_n, attention_shape s = {}) : cache(cache_len), tree(tree_n), shape(s) {
    specdec::philox_stream rng(1234, 1);
    auto rnd = [&] { return specdec::from_float<T>(2.0f * rng.uniform() - 1.0f); };
    const int pages = (cache + kPage - 1) / kPage;
    kp.resize(static_cast<std::size_t>(std::max(pages, 1)) * kPage * shape.hkv * shape.d);
    vp.resize(kp.size());
    for (auto& x : kp) x = rnd();
    for (auto& x : vp) x = rnd();
    page_indptr = {0, pages};
    page_indices.resize(pages);
    for (int i = 0; i < pages; ++i) page_indices[i] = i;
    lens = {cache};
    q_indptr = {0, tree};
    q.resize(static_cast<std::size_t>(tree) * shape.hq * shape.d);
    for (auto& x : q) x = rnd();
    out.resize(q.size());
    lse.resize(static_cast<std::size_t>(tree) * shape.hq);
    sk.resize(static_cast<std::size_t>(tree) * shape.hkv * shape.d);
    sv.resize(sk.size());
    for (auto& x : sk) x = rnd();
    for (auto& x : sv) x = rnd();
    // A random tree (beam-like: mostly extending recent nodes) and its ancestor mask.
    const int wpr = specdec::words_per_row(tree);
    mask.assign(static_cast<std::size_t>(tree) * wpr, 0);
    for (int i = 0; i < tree; ++i) {
      const int parent = i == 0 ? -1 : static_cast<int>(rng.below(static_cast<std::uint32_t>(i)));
      if (parent >= 0) std::copy_n(&mask[static_cast<std::size_t>(parent) * wpr], wpr, &mask[static_cast<std::size_t>(i) * wpr]);
      specdec::set_bit(&mask[static_cast<std::size_t>(i) * wpr], i);
    }
    for (auto w : mask) visible_pairs += __builtin_popcountll(w);
  }
  specdec::paged_kv<T> layout() {
    return {kp.data(), vp.data(), page_indptr.data(), page_indices.data(), lens.data(), 1,
            static_cast<int>(page_indices.size()), kPage, shape.hkv, shape.d};
  }
  auto qv() { return specdec::make_view<3>(q.data(), {tree, shape.hq, shape.d}); }
  auto ov() { return specdec::make_view<3>(out.data(), {tree, shape.hq, shape.d}); }
  auto lv() { return specdec::make_view<2>(lse.data(), {tree, shape.hq}); }
  auto kv() { return specdec::make_view<3>(sk.data(), {tree, shape.hkv, shape.d}); }
  auto vv() { return specdec::make_view<3>(sv.data(), {tree, shape.hkv, shape.d}); }
  auto iv() { return specdec::make_view<1>(q_indptr.data(), {2}); }
  auto mv() { return specdec::make_view<1>(mask.data(), {static_cast<std::int64_t>(mask.size())}); }
  double cache_bytes() const { return 2.0 * cache * shape.hkv * shape.d * sizeof(T); }
  double tree_bytes() const { return 2.0 * tree * shape.hkv * shape.d * sizeof(T); }
  double qo_bytes() const { return 2.0 * tree * shape.hq * shape.d * sizeof(T) + 4.0 * tree * shape.hq; }
  double cache_flops() const { return 4.0 * tree * shape.hq * static_cast<double>(cache) * shape.d; }
  double tree_flops() const { return 4.0 * shape.hq * static_cast<double>(visible_pairs) * shape.d; }
};

using specdec_bench::set_counters;

// hybrid_tree_attention over `layers` problems of one shape per iteration, each over its own cache: with
// several, the caches stream from memory as a model's layers do (one layer's cache can stay in a large
// L3 across iterations). Args {cache, tree, threads}.
template <class T>
void run_hybrid_tree_attention(benchmark::State& st, attention_shape shape, int layers,
                               specdec::attention_kernel kernel = specdec::attention_kernel::automatic) {
  std::vector<problem<T>> ps;
  for (int l = 0; l < layers; ++l) ps.emplace_back(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)), shape);
  const specdec::host pol{.num_threads = static_cast<int>(st.range(2))};
  specdec::attention_workspace ws(specdec::hybrid_tree_attention_workspace_bytes(pol, ps[0].qv(), ps[0].layout(), ps[0].iv()));
  for (auto _ : st)
    for (auto& p : ps) {
      specdec::hybrid_tree_attention(pol, p.qv(), p.layout(), p.kv(), p.vv(), p.iv(), p.mv(), p.ov(), p.lv(),
                                     {.workspace = &ws, .kernel = kernel});
      benchmark::DoNotOptimize(p.out.data());
    }
  const auto& p = ps[0];
  set_counters(st, layers * (p.cache_bytes() + p.tree_bytes() + p.qo_bytes()), layers * (p.cache_flops() + p.tree_flops()));
}

template <class T>
void BM_hybrid_tree_attention(benchmark::State& st) {
  run_hybrid_tree_attention<T>(st, {}, 1);
}

// The demo target's verification step: its shape, fp32 KV as the demo stores it, and its four layers
// (one layer's 16 MB at 16K stays in a large L3 across iterations, which the model's 67 MB of caches do
// not; with one cache the tile kernel's cells read 2-3x faster than the model runs them). At GQA 2 trees
// 1-4 run the rows kernel (2-8 rows per kv head), trees 5-8 the lanes kernel (10-16 rows).
template <class T>
void BM_hybrid_demo_shape(benchmark::State& st) {
  run_hybrid_tree_attention<T>(st, demo_target_shape, 4);
}

// The same with the cache kernel pinned, args {cache, tree, threads, kernel}: trees 5-8 through the
// tile kernel (2) and the lanes kernel (3, what automatic runs there), side by side in one run.
template <class T>
void BM_hybrid_demo_shape_pinned(benchmark::State& st) {
  run_hybrid_tree_attention<T>(st, demo_target_shape, 4, static_cast<specdec::attention_kernel>(st.range(3)));
}

template <class T>
void run_decode_attention(benchmark::State& st, specdec::attention_kernel kernel) {
  problem<T> p(static_cast<int>(st.range(0)), static_cast<int>(st.range(1)));
  const specdec::host pol{.num_threads = static_cast<int>(st.range(2))};
  const auto cache = p.layout();
  specdec::attention_workspace ws(specdec::decode_attention_workspace_bytes(pol, p.qv(), cache, p.iv()));
  for (auto _ : st) {
    specdec::decode_attention(pol, p.qv(), cache, p.iv(), p.ov(), p.lv(), {.workspace = &ws, .kernel = kernel});
    benchmark::DoNotOptimize(p.out.data());
  }
  set_counters(st, p.cache_bytes() + p.qo_bytes(), p.cache_flops());
}

// args {cache, tree, threads}: the automatic kernel choice
template <class T>
void BM_decode_attention(benchmark::State& st) {
  run_decode_attention<T>(st, specdec::attention_kernel::automatic);
}

// args {cache, tree, threads, kernel}: kernel 1 = rows, 2 = tiles (attention_kernel's values)
template <class T>
void BM_decode_attention_pinned(benchmark::State& st) {
  run_decode_attention<T>(st, static_cast<specdec::attention_kernel>(st.range(3)));
}

template <class T>
void BM_tree_attention(benchmark::State& st) {
  problem<T> p(0, static_cast<int>(st.range(0)));
  const specdec::host pol{.num_threads = static_cast<int>(st.range(1))};
  specdec::attention_workspace ws(specdec::tree_attention_workspace_bytes(pol, p.qv(), p.shape.hkv, p.iv()));
  for (auto _ : st) {
    specdec::tree_attention(pol, p.qv(), p.kv(), p.vv(), p.iv(), p.mv(), p.ov(), p.lv(), {.workspace = &ws});
    benchmark::DoNotOptimize(p.out.data());
  }
  set_counters(st, p.tree_bytes() + p.qo_bytes(), p.tree_flops());
}

//! Two partials and the output of a merge of n tokens x kHq heads.
template <class T>
struct merge_problem {
  // Filled in the body: with the vectors in the member-initializer list, GCC 12 at -O3 reported a
  // false -Wfree-nonheap-object on the unwinding path of the later members.
  explicit merge_problem(int tokens) : n(tokens) {
    const std::size_t rows = static_cast<std::size_t>(tokens) * kHq;
    a.assign(rows * kD, specdec::from_float<T>(0.5f));
    b.assign(rows * kD, specdec::from_float<T>(0.25f));
    o.resize(rows * kD);
    la.assign(rows, 1.0f);
    lb.assign(rows, 2.0f);
    lo.resize(rows);
  }
  auto v3(std::vector<T>& x) const { return specdec::make_view<3>(x.data(), {n, kHq, kD}); }
  auto v2(std::vector<float>& x) const { return specdec::make_view<2>(x.data(), {n, kHq}); }
  int n;
  std::vector<T> a, b, o;
  std::vector<float> la, lb, lo;
};

template <class T>
void BM_lse_merge(benchmark::State& st) {
  const specdec::host pol{.num_threads = static_cast<int>(st.range(1))};
  merge_problem<T> p(static_cast<int>(st.range(0)));
  for (auto _ : st) {
    specdec::lse_merge(pol, p.v3(p.a), p.v2(p.la), p.v3(p.b), p.v2(p.lb), p.v3(p.o), p.v2(p.lo));
    benchmark::DoNotOptimize(p.o.data());
  }
  set_counters(st, 3.0 * p.a.size() * sizeof(T) + 12.0 * p.la.size(), 3.0 * p.a.size());
}

// ---- roofline: read bandwidth (sum a large array) and FMA peak (independent vector FMAs) ----
// The kernels' own 16-lane vector (one zmm with AVX-512, two ymm with AVX2, four xmm otherwise), so
// the peaks below are measured with the code generation the kernels get on this build's target.
using v16 = specdec::detail::vf16;

//! Adds `count` floats (a multiple of 64) from p into four independent 16-lane sums.
inline void sum_floats(const float* p, std::size_t count, v16 (&acc)[4]) {
  for (std::size_t i = 0; i < count; i += 64)
    for (int u = 0; u < 4; ++u) acc[u] += specdec::detail::vload(p + i + 16 * u);
}

void BM_roofline_read_bandwidth(benchmark::State& st) {
  const std::size_t n = std::size_t{256} << 20 >> 2;  // 256 MiB of floats: far beyond the LLC
  std::vector<float> buf(n, 1.0f);
  const specdec::host pol{.num_threads = static_cast<int>(st.range(0))};
  const int threads = specdec::detail::host_threads(pol);
  std::vector<float> sums(threads * 16);
  for (auto _ : st) {
    specdec::parallel_for(pol, threads, [&](std::int64_t t) {
      const std::size_t lo = n / threads * t, hi = n / threads * (t + 1);
      v16 acc[4] = {};
      sum_floats(&buf[lo], (hi - lo) / 64 * 64, acc);
      sums[t * 16] = specdec::detail::vhsum(acc[0] + acc[1] + acc[2] + acc[3]);  // every lane, so no part of the loop is dead
    });
    benchmark::DoNotOptimize(sums.data());
  }
  set_counters(st, 4.0 * n, static_cast<double>(n));
}

// The same 256 MiB read as several sequential streams per thread, advanced in lockstep 4 KB at a
// time (each thread's range cut into `streams` parts). A kernel that reads K and V streams together
// can draw more than one stream gives (seen on a Zen 4 box: two streams ~10% above one on one
// core), so the read roofline to judge against is the larger of this and BM_roofline_read_bandwidth.
void BM_roofline_read_streams(benchmark::State& st) {
  const std::size_t n = std::size_t{256} << 20 >> 2;
  constexpr std::size_t chunk = 1024;  // floats: 4 KB
  std::vector<float> buf(n, 1.0f);
  const specdec::host pol{.num_threads = static_cast<int>(st.range(0))};
  const int threads = specdec::detail::host_threads(pol), streams = static_cast<int>(st.range(1));
  const std::size_t part = n / threads / streams / chunk * chunk;  // floats per stream
  std::vector<float> sums(threads * 16);
  for (auto _ : st) {
    specdec::parallel_for(pol, threads, [&](std::int64_t t) {
      const std::size_t lo = n / threads * t;
      v16 acc[4] = {};
      for (std::size_t off = 0; off < part; off += chunk)
        for (int sidx = 0; sidx < streams; ++sidx) sum_floats(&buf[lo + sidx * part + off], chunk, acc);
      sums[t * 16] = specdec::detail::vhsum(acc[0] + acc[1] + acc[2] + acc[3]);
    });
    benchmark::DoNotOptimize(sums.data());
  }
  const double read = static_cast<double>(part) * streams * threads;
  set_counters(st, 4.0 * read, read);
}

// The read roofline of the decode row kernel's memory order (attend_part_rows), with no arithmetic:
// fp32 K and V of kHkv heads x kD dims (two 128 MiB arrays, [token][head][dim]), in the kernel's
// blocks of dot_block tokens, K read token-major over all heads, then V head by head. Arg: 0 = no
// software prefetch, 1 = V rows prefetched into L2 while K is read, 2 = also K rows kpf_dist
// tokens ahead, 3 = also the next block's V rows prefetched while this block's V is read (the
// kernel's schedule: requests issued through both passes). A tree = 1 cell can only approach
// this, not the one-array roofline.
void BM_roofline_read_kv_order(benchmark::State& st) {
  constexpr int block = specdec::detail::dot_block, ahead = specdec::detail::kpf_dist, tokens = 32768;
  const std::size_t row = static_cast<std::size_t>(kHkv) * kD, n = row * tokens;
  std::vector<float> k(n, 1.0f), v(n, 1.0f);
  const int pf = static_cast<int>(st.range(0));
  float sink = 0.0f;
  for (auto _ : st) {
    v16 acc[kD / 16] = {};
    for (int b = 0; b < tokens; b += block) {
      for (int j = b; j < b + block; ++j)
        for (int h = 0; h < kHkv; ++h) {
          const float* kr = &k[j * row + h * kD];
          if (pf >= 1) specdec::detail::prefetch_row<kD>(&v[j * row + h * kD]);
          if (pf >= 2 && j + ahead < tokens) specdec::detail::prefetch_row<kD>(&k[(j + ahead) * row + h * kD]);
          for (int c = 0; c < kD / 16; ++c) acc[c] += specdec::detail::vload(kr + 16 * c);
        }
      for (int h = 0; h < kHkv; ++h)
        for (int j = b; j < b + block; ++j) {
          if (pf >= 3 && j + block < tokens) specdec::detail::prefetch_row<kD>(&v[(j + block) * row + h * kD]);
          for (int c = 0; c < kD / 16; ++c) acc[c] += specdec::detail::vload(&v[j * row + h * kD + 16 * c]);
        }
    }
    for (const auto& a : acc) sink += specdec::detail::vhsum(a);
    benchmark::DoNotOptimize(sink);
  }
  set_counters(st, 8.0 * n, 2.0 * n);
}

// Independent FMA chains: 12 with AVX-512 (enough to cover 4-cycle latency at 2 per cycle), as
// many as the register file holds with one operand pair to spare elsewhere (6 = 12 ymm on AVX2).
constexpr int fma_chains = specdec::detail::vregs16 >= 14 ? 12 : specdec::detail::vregs16 - 2;

void BM_roofline_fma_peak(benchmark::State& st) {
  const specdec::host pol{.num_threads = static_cast<int>(st.range(0))};
  const int threads = specdec::detail::host_threads(pol);
  constexpr std::int64_t iters = 1 << 20;
  std::vector<float> sink(threads * 16);
  for (auto _ : st) {
    specdec::parallel_for(pol, threads, [&](std::int64_t t) {
      // Distinct lanes: with identical halves the compiler would compute one ymm half for both.
      v16 acc[fma_chains];
      for (int k = 0; k < fma_chains; ++k) {
        float init[16];
        for (int l = 0; l < 16; ++l) init[l] = 0.001f * static_cast<float>(k + 1) + 1e-5f * static_cast<float>(l);
        acc[k] = specdec::detail::vload(init);
      }
      const v16 m = specdec::detail::vbroadcast(0.999f), b = specdec::detail::vbroadcast(0.001f);
      for (std::int64_t i = 0; i < iters; ++i)
        for (int k = 0; k < fma_chains; ++k) acc[k] = acc[k] * m + b;
      v16 s{};
      for (int k = 0; k < fma_chains; ++k) s += acc[k];
      sink[t * 16] = specdec::detail::vhsum(s);  // every lane, so no chain is dead
    });
    benchmark::DoNotOptimize(sink.data());
  }
  set_counters(st, 0.0, 2.0 * 16 * fma_chains * static_cast<double>(iters) * threads);
}

// Last argument: threads (1 = the calling thread only; 0 = every hardware thread). Single-thread
// rows report rates per CPU second of the calling thread (it does all the work), which stays
// meaningful on a shared, oversubscribed machine; all-thread rows must use wall-clock time.
template <int Threads>
void hybrid_args(benchmark::internal::Benchmark* b) {
  for (int cache : {4096, 32768})
    for (int tree : {1, 16, 63, 64, 128}) b->Args({cache, tree, Threads});
  b->ArgNames({"cache", "tree", "threads"})->Unit(benchmark::kMillisecond);
  if (Threads != 1) b->UseRealTime();
}
template <int Threads>
void tree_args(benchmark::internal::Benchmark* b) {
  for (int tree : {1, 16, 63, 64, 128}) b->Args({tree, Threads});
  b->ArgNames({"tree", "threads"})->Unit(benchmark::kMicrosecond);
  if (Threads != 1) b->UseRealTime();
}

// The in-cache ceiling of the memory-bound cells: a decode step (tree = 1) over a 1K-token cache
// (8 MB fp32, 4 MB fp16: L3-resident on the machines in RESULTS.md), one thread. It shows what the
// kernel's own instruction throughput allows with DRAM out of the way, to read the 4K/32K tree = 1
// rows against: a cell cannot reach 70% of the read roofline if this row is not well above that.
void ceiling_args(benchmark::internal::Benchmark* b) {
  b->Args({1024, 1, 1})->ArgNames({"cache", "tree", "threads"})->Unit(benchmark::kMillisecond);
}

// Small trees between the decode step and #3's grid (tree 2, 4, 8 at 32K): a speculative step
// verifies a few tokens, and these cells run the row kernel with 8 rows per kv head (tree 2) or
// the tile kernel with a 16- or 32-row panel. Time per call next to tree = 1 shows what the second,
// fourth or eighth token costs.
template <int Threads>
void small_tree_args(benchmark::internal::Benchmark* b) {
  for (int tree : {2, 4, 8}) b->Args({32768, tree, Threads});
  b->ArgNames({"cache", "tree", "threads"})->Unit(benchmark::kMillisecond);
  if (Threads != 1) b->UseRealTime();
}

// Small trees over a 4K and a larger cache, trees FirstTree..8, the trees a CPU verifies:
// - small_tree_grid<Threads, 32768, 2>: #24 item 4's grid, hybrid fp16 at 32/8 heads (GQA 4): tree 2 runs
//   the rows kernel (8 rows per kv head), trees 3-4 the lanes kernel (12-16 rows), trees 5-8 the lanes
//   kernel's two row vectors at the avx512 level and the tile kernel elsewhere (20-32 rows);
// - small_tree_grid<Threads, 16384, 1>: the demo target's shape (BM_hybrid_demo_shape, four layers per
//   iteration).
template <int Threads, int LargeCache, int FirstTree>
void small_tree_grid(benchmark::internal::Benchmark* b) {
  for (int cache : {4096, LargeCache})
    for (int tree = FirstTree; tree <= 8; ++tree) b->Args({cache, tree, Threads});
  b->ArgNames({"cache", "tree", "threads"})->Unit(benchmark::kMillisecond);
  if (Threads != 1) b->UseRealTime();
}

// BM_hybrid_demo_shape_pinned's cells: trees 5-8 at 16K, kernel 2 (tiles) and 3 (lanes) side by side.
template <int Threads>
void demo_pinned_args(benchmark::internal::Benchmark* b) {
  for (int tree = 5; tree <= 8; ++tree)
    for (int kernel : {2, 3}) b->Args({16384, tree, Threads, kernel});
  b->ArgNames({"cache", "tree", "threads", "kernel"})->Unit(benchmark::kMillisecond);
  if (Threads != 1) b->UseRealTime();
}

// The lanes kernel's two register-blocked steps on one kv head's 32-key block in L1 (D 128, V / K
// rows in storage type), the parts #24 item 4's small-tree cells are made of, against the FMA
// roofline. FLOP counters count the lanes computed, used or not. These call the kernels at the build's
// own ISA level (no run-time dispatch): build with -march=native to measure the avx512 level.
// - BM_pv_step, args {rows, form}: O = alpha O + P V for `rows` query rows; form 0 = pv_blocks in
//   lanes_pv_rows-row blocks (4 at the avx512 level: one widening of each V vector per 4 rows; what
//   the lanes kernel runs on fp32 V there, and on all V elsewhere), 1 = pv_row_groups (what the
//   avx512 level runs on fp16/bf16 V since session 49: one widening per group of up to 16 rows;
//   registered at that level only).
// - BM_score_step, args {rv}: the K rows widened into an L1 buffer (fp16) and score_keys over them,
//   rv row vectors of 16 lanes (the lanes kernel's score step), over 32 keys rounded up to whole
//   score blocks (lanes_score_keys_for: at the avx512 level 16 keys with one row vector and 8 with
//   two, 6 or fewer elsewhere).
constexpr int kStepKeys = 32;

//! n elements of `buf` from a 64-byte boundary, as the kernels' workspace and a cache's pages lie.
template <class E>
E* aligned_elems(std::vector<E>& buf, std::size_t n) {
  constexpr std::size_t per_line = 64 / sizeof(E);
  buf.assign(n + per_line, E{});
  const std::size_t skip = (per_line - reinterpret_cast<std::uintptr_t>(buf.data()) / sizeof(E) % per_line) % per_line;
  return buf.data() + skip;
}

template <class T>
void BM_pv_step(benchmark::State& st) {
  constexpr int PS = 32;  // P's stride: two row vectors
  const int rows = static_cast<int>(st.range(0));
  const bool groups = st.range(1) != 0;
  std::vector<T> vb;
  std::vector<float> pb, ob;
  T* v = aligned_elems(vb, static_cast<std::size_t>(kStepKeys) * kD);
  float* pt = aligned_elems(pb, static_cast<std::size_t>(kStepKeys) * PS);
  float* o = aligned_elems(ob, static_cast<std::size_t>(PS) * kD);
  const std::vector<float> alpha(PS, 1.0f);
  specdec::philox_stream rng(7, 1);
  for (int i = 0; i < kStepKeys * kD; ++i) v[i] = specdec::from_float<T>(2.0f * rng.uniform() - 1.0f);
  for (int i = 0; i < kStepKeys * PS; ++i) pt[i] = rng.uniform();
  const auto vrow = [v](int j) { return v + static_cast<std::ptrdiff_t>(j) * kD; };
  const auto no_prefetch = [](int, int, int) {};
  // O accumulates over the iterations (alpha 1): |O| grows by at most 32 per call, far from overflow.
  for (auto _ : st) {
    if constexpr (specdec::detail::vreg_parts == 1) {
      if (groups) specdec::detail::pv_row_groups<kD, PS>(o, alpha.data(), pt, vrow, kStepKeys, rows, no_prefetch);
    }
    if (!groups) specdec::detail::pv_blocks<kD, PS, specdec::detail::lanes_pv_rows>(o, alpha.data(), pt, vrow, kStepKeys, rows, no_prefetch);
    benchmark::DoNotOptimize(o);
    benchmark::ClobberMemory();
  }
  set_counters(st, static_cast<double>(kStepKeys) * kD * sizeof(T), 2.0 * rows * kD * kStepKeys);
}

template <class T, int RV>
void BM_score_step(benchmark::State& st) {
  constexpr int KB = specdec::detail::lanes_score_keys_for(RV, true), W = RV * 16;
  constexpr int keys = (kStepKeys + KB - 1) / KB * KB;  // whole score blocks
  std::vector<T> kb;
  std::vector<float> qb, wb, sb;
  T* k = aligned_elems(kb, static_cast<std::size_t>(keys) * kD);
  float* qt = aligned_elems(qb, static_cast<std::size_t>(kD) * 32);
  float* kw = aligned_elems(wb, static_cast<std::size_t>(KB) * kD);
  float* s = aligned_elems(sb, static_cast<std::size_t>(keys) * W);
  specdec::philox_stream rng(8, 1);
  for (int i = 0; i < keys * kD; ++i) k[i] = specdec::from_float<T>(2.0f * rng.uniform() - 1.0f);
  for (int i = 0; i < kD * 32; ++i) qt[i] = 2.0f * rng.uniform() - 1.0f;
  for (auto _ : st) {
    for (int j0 = 0; j0 < keys; j0 += KB) {
      const float* kr[KB];
      for (int jj = 0; jj < KB; ++jj) {
        specdec::detail::widen_row(k + static_cast<std::ptrdiff_t>(j0 + jj) * kD, kw + jj * kD, kD);
        kr[jj] = kw + jj * kD;
      }
      specdec::detail::score_keys<kD, RV, KB, W>(qt, kr, s + j0 * W);
    }
    benchmark::DoNotOptimize(s);
    benchmark::ClobberMemory();
  }
  set_counters(st, static_cast<double>(keys) * kD * sizeof(T), 2.0 * W * kD * keys);
}

// Each cache kernel pinned (attention_options::kernel, #21) where both apply: a decode step and a
// tree of 2 (8 query rows per kv head at GQA 4, the rows kernel's limit), 4K and 32K, one thread. The
// automatic choice is the rows kernel in all four; these cells show what the tile kernel would cost.

template <int Threads>
void pinned_kernel_args(benchmark::internal::Benchmark* b) {
  for (int kernel : {1, 2})
    for (int cache : {4096, 32768})
      for (int tree : {1, 2}) b->Args({cache, tree, Threads, kernel});
  b->ArgNames({"cache", "tree", "threads", "kernel"})->Unit(benchmark::kMillisecond);
}

}  // namespace

BENCHMARK(BM_roofline_read_bandwidth)->ArgName("threads")->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_roofline_read_bandwidth)->ArgName("threads")->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_roofline_read_streams)->ArgNames({"threads", "streams"})->Args({1, 2})->Args({1, 4})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_roofline_read_streams)->ArgNames({"threads", "streams"})->Args({0, 2})->Args({0, 4})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_roofline_read_kv_order)->ArgName("prefetch")->DenseRange(0, 3)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_roofline_fma_peak)->ArgName("threads")->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_roofline_fma_peak)->ArgName("threads")->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();
#define SPECDEC_ATTN_BENCH(fn, args)                          \
  BENCHMARK_TEMPLATE(fn, float)->Apply(args<1>);              \
  BENCHMARK_TEMPLATE(fn, specdec::half)->Apply(args<1>);      \
  BENCHMARK_TEMPLATE(fn, float)->Apply(args<0>);              \
  BENCHMARK_TEMPLATE(fn, specdec::half)->Apply(args<0>)
SPECDEC_ATTN_BENCH(BM_hybrid_tree_attention, hybrid_args);
SPECDEC_ATTN_BENCH(BM_decode_attention, hybrid_args);
SPECDEC_ATTN_BENCH(BM_tree_attention, tree_args);
SPECDEC_ATTN_BENCH(BM_lse_merge, tree_args);
SPECDEC_ATTN_BENCH(BM_decode_attention, small_tree_args);
BENCHMARK_TEMPLATE(BM_hybrid_tree_attention, specdec::half)->Apply(small_tree_grid<1, 32768, 2>);
BENCHMARK_TEMPLATE(BM_hybrid_tree_attention, specdec::half)->Apply(small_tree_grid<0, 32768, 2>);
BENCHMARK_TEMPLATE(BM_hybrid_demo_shape, float)->Apply(small_tree_grid<1, 16384, 1>);
BENCHMARK_TEMPLATE(BM_hybrid_demo_shape, float)->Apply(small_tree_grid<0, 16384, 1>);
BENCHMARK_TEMPLATE(BM_hybrid_demo_shape_pinned, float)->Apply(demo_pinned_args<1>);
BENCHMARK_TEMPLATE(BM_hybrid_demo_shape_pinned, float)->Apply(demo_pinned_args<0>);
BENCHMARK_TEMPLATE(BM_decode_attention_pinned, float)->Apply(pinned_kernel_args<1>);
BENCHMARK_TEMPLATE(BM_decode_attention_pinned, specdec::half)->Apply(pinned_kernel_args<1>);
// Form 1 (pv_row_groups) only where it runs: the avx512 level.
const std::vector<std::int64_t> pv_step_forms = specdec::detail::vreg_parts == 1 ? std::vector<std::int64_t>{0, 1}
                                                                                   : std::vector<std::int64_t>{0};
BENCHMARK_TEMPLATE(BM_pv_step, specdec::half)
    ->ArgNames({"rows", "form"})
    ->ArgsProduct({{4, 8, 12, 16, 20, 24, 32}, pv_step_forms})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(BM_pv_step, float)
    ->ArgNames({"rows", "form"})
    ->ArgsProduct({{12, 16, 32}, pv_step_forms})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(BM_score_step, specdec::half, 1)->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(BM_score_step, specdec::half, 2)->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(BM_decode_attention, float)->Apply(ceiling_args);
BENCHMARK_TEMPLATE(BM_decode_attention, specdec::half)->Apply(ceiling_args);
