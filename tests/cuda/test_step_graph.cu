// One speculative decode step composed of the library's device primitives, captured in a CUDA graph
// and replayed (issue #23 item 6): build_tree_batch (root_and_nodes) -> hybrid_tree_attention -> a trivial LM head
// (logits = the attention output rows widened to fp32, vocab = Hq * D) -> verify_greedy_batch ->
// kv_commit_in_place_batch, for R = 3 requests with random trees of 1..8 nodes (N = 12 in all, so
// every round has the captured shapes) over a one-layer fp16 contiguous cache, all on one stream with
// no host synchronisation. Each replay, with new q/k/v, cache, trees and tokens uploaded before it,
// equals the same step run eagerly on a second copy of the inputs bit for bit (attention included:
// its split-KV parts go to the workspace and are merged in a fixed order, no atomic accumulation),
// and its integer results equal the host backends of build_tree_batch, verify_greedy_batch (on the
// device's logits) and kv_commit_in_place_batch; its attention is within fp16 tolerance of the host
// backend's. A [nogpu] case checks the root augmentation below against build_tree_batch on the
// plain trees and against its root_and_nodes rows (what the step builds, from the plain trees), and
// that the cuda entry points refuse the composition mistakes it avoids.
//
// Root rows. verify_greedy_batch reads N + R logits rows (request r's root row, then one per node,
// from row node_indptr[r] + r); attention gives one row per query token. So each request's queries
// are its root and then its nodes: an augmented tree of n_r + 1 nodes (node 0 the root; parents -1,
// then p + 1) with offsets node_indptr[r] + r (the logits layout) and committed length c_r - 1 (the
// root is the last committed token, at position c_r - 1; build_tree_batch then gives node i the plain
// tree's position c_r + depth, checked below). The attention's cache length is c_r - 1 too (the
// tokens before the root); its spec K/V rows are the root's (a copy of cache row c_r - 1) and the
// nodes' (the rows an engine's tree forward appended at c_r + i, which the in-place commit moves),
// so each query sees its causal context exactly once. The plain trees go to verify and commit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.cuh"
#include "specdec/attention/hybrid_tree_attention.cuh"
#include "specdec/core/half.hpp"
#include "specdec/kv/commit.cuh"
#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/tree/tree_batch.cuh"
#include "specdec/verify/greedy.cuh"
#include "tree/tree_batch_util.hpp"

using f16 = specdec::half;  // not `half`: cuda_fp16.h declares ::half (= __half)
using specdec::mask_word;
using specdec::memory_space;
using specdec_test::device_buffer;
using specdec_test::dv;

namespace {

constexpr int R = 3, N = 12, ROWS = N + R, HQ = 2, HKV = 1, D = 64, V = HQ * D, CAP = 160;
constexpr int QN = ROWS * HQ * D, KN = R * CAP * HKV * D, SN = ROWS * HKV * D;
using cache_t = specdec::contiguous_kv<f16>;

template <class E>
specdec::strided_view<E, 1> hv(std::vector<E>& x) {
  return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())});
}
template <class E>
bool same_bits(const std::vector<E>& a, const std::vector<E>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(E)) == 0;
}

// One round's inputs: the plain trees (build with root_and_nodes, verify, commit) and their
// root-augmented form (the attention's q_indptr and cache lengths; the [nogpu] cross-check).
struct round_data {
  std::vector<std::int32_t> ni{0}, parents, tokens, committed, ai{0}, aparents, acommitted;
  std::vector<f16> q, k, v, sk, sv;  // q [ROWS, HQ, D]; cache [R, CAP, HKV, D]; spec [ROWS, HKV, D]
};

round_data make_round(specdec::philox_stream& rng) {
  round_data x;
  int n[R];
  do {
    for (int& s : n) s = 1 + static_cast<int>(rng.below(8));
  } while (n[0] + n[1] + n[2] != N);
  const auto noise = [&](int count) {
    std::vector<f16> h(static_cast<std::size_t>(count));
    for (auto& e : h) e = f16(2.0f * rng.uniform() - 1.0f);
    return h;
  };
  x.q = noise(QN), x.k = noise(KN), x.v = noise(KN), x.sk.resize(SN), x.sv.resize(SN);
  for (int r = 0; r < R; ++r) {
    const auto p = specdec_test::random_parents(n[r], static_cast<int>(rng.below(4)), rng);
    const int c = 2 + static_cast<int>(rng.below(CAP - 10));  // c + n_r <= CAP - 1
    x.parents.insert(x.parents.end(), p.begin(), p.end());
    x.ni.push_back(x.ni.back() + n[r]);
    x.committed.push_back(c);
    x.aparents.push_back(-1);
    for (const std::int32_t pi : p) x.aparents.push_back(pi + 1);
    x.ai.push_back(x.ni.back() + r + 1);
    x.acommitted.push_back(c - 1);
    for (int j = 0; j <= n[r]; ++j) {  // spec row ai[r] + j = cache row c - 1 + j: the root, then the nodes
      const std::ptrdiff_t src = (static_cast<std::ptrdiff_t>(r) * CAP + c - 1 + j) * HKV * D,
                           dst = static_cast<std::ptrdiff_t>(x.ai[r] + j) * HKV * D;
      std::copy_n(x.k.begin() + src, HKV * D, x.sk.begin() + dst);
      std::copy_n(x.v.begin() + src, HKV * D, x.sv.begin() + dst);
    }
  }
  x.tokens.assign(N, 0);
  return x;
}

// The "LM head": logits row t is attention output row t (all heads back to back) widened to fp32.
__global__ void lm_head_kernel(const f16* out, float* logits, int n) {
  const int step = static_cast<int>(gridDim.x * blockDim.x);
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += step)
    logits[i] = static_cast<float>(out[i]);
}

struct results {
  std::vector<std::int32_t> de, po, bst, acc, nacc, bon, emi, vst, nl, cst;
  std::vector<std::int64_t> mi;
  std::vector<mask_word> ma;
  std::vector<f16> out, k, v;
  std::vector<float> lse, lg;
};

// The step's device arrays: load() uploads a round and resets every output to markers, enqueue() is
// the step.
struct step_buffers {
  device_buffer<std::int32_t> ni{R + 1}, par{N}, tok{N}, cl{R}, ai{R + 1}, acl{R};
  device_buffer<std::int32_t> de{ROWS}, po{ROWS}, bst{3}, acc{N}, nacc{R}, bon{R}, emi{ROWS}, vst{3}, nl{R}, cst{3};
  device_buffer<std::int64_t> mi{R + 1};
  device_buffer<mask_word> ma{ROWS};  // n_r + 1 <= 9 mask rows of one word each
  device_buffer<f16> q{QN}, k{KN}, v{KN}, sk{SN}, sv{SN}, out{QN};
  device_buffer<float> lse{ROWS * HQ}, lg{ROWS * V};
  device_buffer<unsigned char> ws_mem;
  specdec::attention_workspace ws;

  step_buffers()
      : ws_mem(specdec::hybrid_tree_attention_workspace_bytes(specdec::cuda{}, qv(), attention_cache(), dv(ai))),
        ws(ws_mem.data(), ws_mem.size(), memory_space::device) {}
  specdec::strided_view<const f16, 3> qv() const {
    return specdec::make_view<3>(static_cast<const f16*>(q.data()), {ROWS, HQ, D}, memory_space::device);
  }
  // The attention's view of the cache: lengths c_r - 1 (acl), the tokens before the root.
  cache_t attention_cache() const { return {k.data(), v.data(), acl.data(), R, CAP, HKV, D, memory_space::device}; }

  void enqueue(cudaStream_t s) {
    const specdec::cuda pol{.stream = s};
    // the verification rows' masks and positions from the plain trees (each request's root row first)
    specdec::build_tree_batch(pol, dv(ni), dv(par), dv(cl), dv(de), dv(po), dv(mi), dv(ma), dv(bst),
                              specdec::tree_batch_rows::root_and_nodes);
    const auto spec = [](const device_buffer<f16>& b) {
      return specdec::make_view<3>(static_cast<const f16*>(b.data()), {ROWS, HKV, D}, memory_space::device);
    };
    specdec::hybrid_tree_attention(pol, qv(), attention_cache(), spec(sk), spec(sv), dv(ai), dv(ma),
                                   specdec::make_view<3>(out.data(), {ROWS, HQ, D}, memory_space::device),
                                   specdec::make_view<2>(lse.data(), {ROWS, HQ}, memory_space::device),
                                   {.workspace = &ws});
    lm_head_kernel<<<8, 256, 0, s>>>(out.data(), lg.data(), ROWS * V);
    SPECDEC_CUDA_CHECK(cudaGetLastError());
    const auto logits = specdec::make_view<2>(static_cast<const float*>(lg.data()), {ROWS, V}, memory_space::device);
    specdec::verify_greedy_batch(pol, dv(ni), dv(tok), dv(par), logits, dv(acc), dv(nacc), dv(bon), dv(emi), dv(vst));
    // The commit's view: the tree's K/V at c_r + i, moved from the device-side accepted path.
    const cache_t layer{k.data(), v.data(), cl.data(), R, CAP, HKV, D, memory_space::device};
    specdec::kv_commit_in_place_batch(pol, std::span<const cache_t>(&layer, 1), dv(cl), dv(ni), dv(acc), dv(nacc),
                                      dv(nl), dv(cst));
  }
  void load(const round_data& x) {
    ni.upload(x.ni), par.upload(x.parents), tok.upload(x.tokens), cl.upload(x.committed);
    ai.upload(x.ai), acl.upload(x.acommitted);
    q.upload(x.q), k.upload(x.k), v.upload(x.v), sk.upload(x.sk), sv.upload(x.sv);
    for (auto* b : {&de, &po, &acc, &nacc, &bon, &emi, &nl}) b->upload(std::vector<std::int32_t>(b->size(), -9));
    for (auto* b : {&bst, &vst, &cst}) b->upload({5, 5, 5});
    mi.upload(std::vector<std::int64_t>(R + 1, -9));
    ma.upload(std::vector<mask_word>(ROWS, 0xDEADBEEFDEADBEEFull));
    out.upload(std::vector<f16>(QN, f16(-7.0f)));
    lse.upload(std::vector<float>(ROWS * HQ, -7.0f));
    lg.upload(std::vector<float>(ROWS * V, std::numeric_limits<float>::quiet_NaN()));
  }
  results download() const {
    return {de.download(),  po.download(), bst.download(), acc.download(), nacc.download(), bon.download(),
            emi.download(), vst.download(), nl.download(),  cst.download(), mi.download(),   ma.download(),
            out.download(), k.download(),   v.download(),   lse.download(), lg.download()};
  }
};

// The graph's results against the eager run's, bit for bit, and every status clear.
void check_same(const results& g, const results& e) {
  CHECK(g.de == e.de);
  CHECK(g.po == e.po);
  CHECK(g.mi == e.mi);
  CHECK(g.ma == e.ma);
  CHECK(same_bits(g.out, e.out));
  CHECK(same_bits(g.lse, e.lse));
  CHECK(same_bits(g.lg, e.lg));
  CHECK(g.acc == e.acc);
  CHECK(g.nacc == e.nacc);
  CHECK(g.bon == e.bon);
  CHECK(g.emi == e.emi);
  CHECK(g.nl == e.nl);
  CHECK(same_bits(g.k, e.k));
  CHECK(same_bits(g.v, e.v));
  for (const auto* s : {&g.bst, &g.vst, &g.cst, &e.bst, &e.vst, &e.cst})
    CHECK(*s == std::vector<std::int32_t>{0, -1, -1});
}

// The graph's results against the host backends on the same inputs (verify on the device's logits).
void check_host(const round_data& x, const results& g) {
  auto ai = x.ai, acl = x.acommitted, ni = x.ni, tok = x.tokens, par = x.parents, cl = x.committed;
  std::vector<std::int32_t> de(ROWS), po(ROWS), st(3);
  std::vector<std::int64_t> mi(R + 1);
  std::vector<mask_word> ma(ROWS);
  specdec::build_tree_batch(specdec::host{}, hv(ni), hv(par), hv(cl), hv(de), hv(po), hv(mi), hv(ma), hv(st),
                            specdec::tree_batch_rows::root_and_nodes);
  CHECK(g.de == de);
  CHECK(g.po == po);
  CHECK(g.mi == mi);
  CHECK(g.ma == ma);
  // Attention: both backends accumulate in fp32 and round once to fp16; each is within 1.5e-3 of the
  // double reference for outputs in [-1, 1] (out_tol<half> of the attention tests), so within 3e-3 of
  // each other. Not bit for bit: the host and device sum in different orders.
  auto k = x.k, v = x.v;
  std::vector<f16> out(QN);
  std::vector<float> lse(ROWS * HQ);
  const cache_t hc{k.data(), v.data(), acl.data(), R, CAP, HKV, D};
  specdec::hybrid_tree_attention(specdec::host{}, specdec::make_view<3>(x.q.data(), {ROWS, HQ, D}), hc,
                                 specdec::make_view<3>(x.sk.data(), {ROWS, HKV, D}),
                                 specdec::make_view<3>(x.sv.data(), {ROWS, HKV, D}), hv(ai), hv(ma),
                                 specdec::make_view<3>(out.data(), {ROWS, HQ, D}),
                                 specdec::make_view<2>(lse.data(), {ROWS, HQ}));
  double worst = 0;
  for (int i = 0; i < QN; ++i) worst = std::max(worst, std::abs(double(float(out[i])) - double(float(g.out[i]))));
  CHECK(worst <= 3e-3);
  auto lg = g.lg;
  std::vector<std::int32_t> acc(N, -9), nacc(R, -9), bon(R, -9), emi(ROWS, -9), vst(3);
  specdec::verify_greedy_batch(specdec::host{}, hv(ni), hv(tok), hv(par),
                               specdec::make_view<2>(static_cast<const float*>(lg.data()), {ROWS, V}), hv(acc),
                               hv(nacc), hv(bon), hv(emi), hv(vst));
  CHECK(g.nacc == nacc);
  CHECK(g.bon == bon);
  int differ = 0;  // the specified slots only: the rest are the device backend's scratch
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < nacc[r]; ++j) differ += g.acc[ni[r] + j] != acc[ni[r] + j];
    for (int j = 0; j <= nacc[r]; ++j) differ += g.emi[ni[r] + r + j] != emi[ni[r] + r + j];
  }
  CHECK(differ == 0);
  std::vector<std::int32_t> nl(R), cst(3);
  const cache_t layer{k.data(), v.data(), cl.data(), R, CAP, HKV, D};
  specdec::kv_commit_in_place_batch(specdec::host{}, std::span<const cache_t>(&layer, 1), hv(cl), hv(ni), hv(acc),
                                    hv(nacc), hv(nl), hv(cst));
  CHECK(g.nl == nl);
  CHECK(same_bits(g.k, k));
  CHECK(same_bits(g.v, v));
}

}  // namespace

TEST_CASE("cuda decode step (tree build, attention, verify, commit) replayed from a CUDA graph equals eager and host",
          "[cuda][step]") {
  constexpr int reps = 4;
  specdec::philox_stream rng(23, 6);
  step_buffers graph, eager;
  cudaStream_t es;
  SPECDEC_CUDA_CHECK(cudaStreamCreateWithFlags(&es, cudaStreamNonBlocking));
  const auto run_eager = [&] {
    SPECDEC_CUDA_CHECK(cudaDeviceSynchronize());  // the uploads have landed (cuda_test_util.cuh)
    eager.enqueue(es);
    SPECDEC_CUDA_CHECK(cudaStreamSynchronize(es));
  };
  round_data x;
  int rounds = 0, accepted = 0;
  specdec_test::replay_in_graph(
      reps, [&](cudaStream_t s) { graph.enqueue(s); },
      [&] {
        x = make_round(rng);
        // Tokens: the logits do not depend on them, so a first eager run gives the rows; 3 in 4 nodes
        // carry their parent row's argmax (the lowest id on ties, the verifier's rule), the rest miss.
        eager.load(x);
        run_eager();
        const auto lg = eager.lg.download();
        for (int r = 0; r < R; ++r)
          for (int i = x.ni[r]; i < x.ni[r + 1]; ++i) {
            const float* row = lg.data() + static_cast<std::ptrdiff_t>(x.ni[r] + r + x.parents[i] + 1) * V;
            const auto am = static_cast<std::int32_t>(std::max_element(row, row + V) - row);
            const auto miss = static_cast<std::int32_t>(1 + rng.below(V - 1));
            x.tokens[i] = rng.below(4) != 0 ? am : (am + miss) % V;
          }
        eager.load(x);
        graph.load(x);
        run_eager();
      },
      [&] {
        const results g = graph.download(), e = eager.download();
        check_same(g, e);
        check_host(x, g);
        for (const std::int32_t k : g.nacc) accepted += k;
        ++rounds;
      });
  SPECDEC_CUDA_CHECK(cudaStreamDestroy(es));
  CHECK(rounds == reps);
  CHECK(accepted > 0);           // the rounds accepted nodes ...
  CHECK(accepted < rounds * N);  // ... and rejected some
}

TEST_CASE("step graph: root-augmented trees keep build_tree_batch's positions and masks, as root_and_nodes builds "
          "them; cuda refuses plain-tree rows",
          "[cuda][step][nogpu]") {
  specdec::philox_stream rng(7, 7);
  int bad = 0;
  for (int t = 0; t < 40; ++t) {
    round_data x = make_round(rng);
    std::vector<std::int32_t> de(N), po(N), st(3), ade(ROWS), apo(ROWS), ast(3);
    std::vector<std::int64_t> mi(R + 1), ami(R + 1);
    std::vector<mask_word> ma(N), ama(ROWS);  // trees of at most 64 nodes: one word per mask row
    specdec::build_tree_batch(specdec::host{}, hv(x.ni), hv(x.parents), hv(x.committed), hv(de), hv(po), hv(mi),
                              hv(ma), hv(st));
    specdec::build_tree_batch(specdec::host{}, hv(x.ai), hv(x.aparents), hv(x.acommitted), hv(ade), hv(apo), hv(ami),
                              hv(ama), hv(ast));
    // the library's root_and_nodes rows (what the step builds) are the augmented trees' build
    std::vector<std::int32_t> rde(ROWS), rpo(ROWS), rst(3);
    std::vector<std::int64_t> rmi(R + 1);
    std::vector<mask_word> rma(ROWS);
    specdec::build_tree_batch(specdec::host{}, hv(x.ni), hv(x.parents), hv(x.committed), hv(rde), hv(rpo), hv(rmi),
                              hv(rma), hv(rst), specdec::tree_batch_rows::root_and_nodes);
    bad += rpo != apo || rma != ama || rmi != ami;
    for (int i = 0; i < ROWS; ++i) bad += rde[i] != ade[i] - 1;
    for (int r = 0; r < R; ++r) {
      const int a = x.ai[r], b = x.ni[r];
      bad += apo[a] != x.committed[r] - 1 || ade[a] != 0 || ama[a] != 1u;  // the root: itself only
      for (int i = 0; i < x.ni[r + 1] - b; ++i)  // node i: the plain tree's position, one deeper, the root added
        bad += apo[a + 1 + i] != po[b + i] || ade[a + 1 + i] != de[b + i] + 1 ||
               ama[a + 1 + i] != ((ma[b + i] << 1) | 1u);
    }
  }
  CHECK(bad == 0);
  // The cuda entry points refuse, on the host and before any CUDA call (there is no device here), the
  // mistakes the augmentation avoids. Host arrays marked device stand in for device memory.
  round_data x = make_round(rng);
  const auto dev = [](auto& vec) {
    return specdec::make_view<1>(vec.data(), {static_cast<std::int64_t>(vec.size())}, memory_space::device);
  };
  std::vector<std::int32_t> acc(N), nacc(R), bon(R), emi(ROWS), st(3);
  std::vector<float> per_node(N * V);  // attention rows of the plain trees: no root rows
  CHECK_THROWS_WITH(specdec::verify_greedy_batch(
                        specdec::cuda{}, dev(x.ni), dev(x.tokens), dev(x.parents),
                        specdec::make_view<2>(static_cast<const float*>(per_node.data()), {N, V}, memory_space::device),
                        dev(acc), dev(nacc), dev(bon), dev(emi), dev(st)),
                    Catch::Contains("target_logits") && Catch::Contains("shape [" + std::to_string(ROWS) + ", *]"));
  std::vector<f16> out(QN);
  std::vector<float> lse(ROWS * HQ);
  const cache_t cache{x.k.data(), x.v.data(), x.acommitted.data(), R, CAP, HKV, D, memory_space::device};
  const auto attend = [&](auto mask) {
    const auto t3 = [](std::vector<f16>& h, int heads) {
      return specdec::make_view<3>(h.data(), {ROWS, heads, D}, memory_space::device);
    };
    specdec::hybrid_tree_attention(specdec::cuda{}, t3(x.q, HQ), cache, t3(x.sk, HKV), t3(x.sv, HKV), dev(x.ai), mask,
                                   t3(out, HQ), specdec::make_view<2>(lse.data(), {ROWS, HQ}, memory_space::device));
  };
  std::vector<mask_word> plain(N, 1), augmented(ROWS, 1);
  // The plain trees' masks (N words) under the augmented queries (N + R rows): too short.
  CHECK_THROWS_WITH(attend(dev(plain)),
                    Catch::Contains("mask") && Catch::Contains("at least q.extent(0) = " + std::to_string(ROWS)));
  // The host build_tree_batch's masks left in host memory.
  CHECK_THROWS_WITH(attend(hv(augmented)), Catch::Contains("mask") && Catch::Contains("device-accessible"));
}
