// Host-side validation of the cuda attention entry points: every kind of bad input throws
// specdec::invalid_argument naming the function and the argument, before any CUDA call (the views
// point at fake, never dereferenced device addresses). The workspace checks follow the SM-count
// query, so they need a device. NOTE: the shared CUDA test main exits 77 before running any test
// when no GPU is present, so on CPU-only machines these run only if the main learns to run
// [nogpu]-tagged tests first (see the CUDA section of benchmarks/RESULTS.md). fp32 storage on cuda
// does not compile (compile_fail.attention_element_types_cuda_float).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "cuda/cuda_test_util.cuh"
#include "cuda/test_attention_common.cuh"
#include "specdec/attention/decode_attention.cuh"
#include "specdec/attention/hybrid_tree_attention.cuh"
#include "specdec/attention/lse_merge.cuh"
#include "specdec/attention/tree_attention.cuh"

namespace {

using specdec::memory_space;
using bf = specdec::bfloat16;
using Catch::Matchers::Contains;

template <class T>
T* fake(std::uintptr_t a) {
  return reinterpret_cast<T*>(a);  // never dereferenced: validation rejects the call first
}

constexpr int T_ = 4, HQ = 8, HKV = 2, D = 128;

struct args {
  specdec::strided_view<bf, 3> q = specdec::make_view<3>(fake<bf>(0x100000), {T_, HQ, D}, memory_space::device);
  specdec::strided_view<bf, 3> out = specdec::make_view<3>(fake<bf>(0x200000), {T_, HQ, D}, memory_space::device);
  specdec::strided_view<bf, 3> k = specdec::make_view<3>(fake<bf>(0x300000), {T_, HKV, D}, memory_space::device);
  specdec::strided_view<bf, 3> v = specdec::make_view<3>(fake<bf>(0x400000), {T_, HKV, D}, memory_space::device);
  specdec::strided_view<float, 2> lse = specdec::make_view<2>(fake<float>(0x500000), {T_, HQ}, memory_space::device);
  specdec::strided_view<std::int32_t, 1> ip =
      specdec::make_view<1>(fake<std::int32_t>(0x600000), {2}, memory_space::device);
  specdec::strided_view<specdec::mask_word, 1> mask =
      specdec::make_view<1>(fake<specdec::mask_word>(0x700000), {T_}, memory_space::device);
  specdec::contiguous_kv<bf> cache{fake<bf>(0x800000), fake<bf>(0x900000), fake<std::int32_t>(0xa00000), 1, 64, HKV, D,
                                   memory_space::device};
};

#define EXPECT_ARG(call, fn, arg)                                            \
  do {                                                                       \
    REQUIRE_THROWS_AS(call, specdec::invalid_argument);                      \
    REQUIRE_THROWS_WITH(call, Contains(fn) && Contains(std::string(arg))); \
  } while (0)

}  // namespace

TEST_CASE("cuda decode_attention rejects bad inputs before any CUDA call", "[cuda][attention][validation][nogpu]") {
  args a;
  const char* fn = "specdec::decode_attention";
  auto run = [&](const auto& q, const auto& cache, const auto& ip, const auto& out, const auto& lse,
                 specdec::attention_options o = {}) { specdec::decode_attention(specdec::cuda{}, q, cache, ip, out, lse, o); };
  SECTION("host memory") {
    auto qh = specdec::make_view<3>(fake<bf>(0x100000), {T_, HQ, D}, memory_space::host);
    EXPECT_ARG(run(qh, a.cache, a.ip, a.out, a.lse), fn, "'q'");
    auto ch = a.cache;
    ch.where = memory_space::host;
    ch.mapping.lengths = nullptr;
    ch.requests = 0;
    EXPECT_ARG(run(a.q, ch, specdec::make_view<1>(fake<std::int32_t>(0x600000), {1}, memory_space::device), a.out, a.lse),
               fn, "'cache'");
    auto lh = specdec::make_view<2>(fake<float>(0x500000), {T_, HQ}, memory_space::host);
    EXPECT_ARG(run(a.q, a.cache, a.ip, a.out, lh), fn, "'lse'");
  }
  SECTION("shapes") {
    auto q96 = specdec::make_view<3>(fake<bf>(0x100000), {T_, HQ, 96}, memory_space::device);
    EXPECT_ARG(run(q96, a.cache, a.ip, a.out, a.lse), fn, "'q'");
    auto q7 = specdec::make_view<3>(fake<bf>(0x100000), {T_, 7, D}, memory_space::device);
    EXPECT_ARG(run(q7, a.cache, a.ip, a.out, a.lse), fn, "'q'");
    auto o2 = specdec::make_view<3>(fake<bf>(0x200000), {T_ + 1, HQ, D}, memory_space::device);
    EXPECT_ARG(run(a.q, a.cache, a.ip, o2, a.lse), fn, "'out'");
    auto l2 = specdec::make_view<2>(fake<float>(0x500000), {T_, HQ + 1}, memory_space::device);
    EXPECT_ARG(run(a.q, a.cache, a.ip, a.out, l2), fn, "'lse'");
    auto ip3 = specdec::make_view<1>(fake<std::int32_t>(0x600000), {3}, memory_space::device);
    EXPECT_ARG(run(a.q, a.cache, ip3, a.out, a.lse), fn, "'q_indptr'");
    auto c2 = a.cache;
    c2.dim = 64;
    EXPECT_ARG(run(a.q, c2, a.ip, a.out, a.lse), fn, "'cache'");
  }
  SECTION("alignment for 16-byte row copies") {
    auto qm = specdec::make_view<3>(fake<bf>(0x100002), {T_, HQ, D}, memory_space::device);
    EXPECT_ARG(run(qm, a.cache, a.ip, a.out, a.lse), fn, "'q'");
    std::int64_t ext[3] = {T_, HQ, D}, str[3] = {HQ * (D + 4), D + 4, 1};
    specdec::strided_view<bf, 3> qs(fake<bf>(0x100000), ext, str, memory_space::device);
    EXPECT_ARG(run(qs, a.cache, a.ip, a.out, a.lse), fn, "'q'");
    auto cm = a.cache;
    cm.k = fake<bf>(0x800008);
    EXPECT_ARG(run(a.q, cm, a.ip, a.out, a.lse), fn, "'cache'");
  }
  SECTION("a user layout in managed memory with a null row between its corners") {
    std::vector<bf> rows(static_cast<std::size_t>(3) * HKV * D);  // never read
    specdec_test::holed_layout<bf> holed{.rows = rows.data(), .tokens = 3, .hole = 1, .kv_heads = HKV, .dim = D};
    EXPECT_ARG(run(a.q, holed, a.ip, a.out, a.lse), fn, "non-null k_row for every row read (request 0, token 1");
    EXPECT_ARG(specdec::hybrid_tree_attention(specdec::cuda{}, a.q, holed, a.k, a.v, a.ip, a.mask, a.out, a.lse),
               "specdec::hybrid_tree_attention", "token 1");
  }
  SECTION("options") {
    EXPECT_ARG(run(a.q, a.cache, a.ip, a.out, a.lse, {.scale = std::numeric_limits<float>::infinity()}), fn,
               "'options.scale'");
    EXPECT_ARG(run(a.q, a.cache, a.ip, a.out, a.lse, {.kv_split_size = -1}), fn, "'options.kv_split_size'");
    EXPECT_ARG(run(a.q, a.cache, a.ip, a.out, a.lse, {.kv_chunks = -1}), fn, "'options.kv_chunks'");
    EXPECT_ARG(run(a.q, a.cache, a.ip, a.out, a.lse, {.kv_chunks = 2000}), fn, "'options.kv_chunks'");
  }
}

TEST_CASE("cuda tree_attention and hybrid_tree_attention reject bad inputs", "[cuda][attention][validation][nogpu]") {
  args a;
  SECTION("tree") {
    const char* fn = "specdec::tree_attention";
    auto k3 = specdec::make_view<3>(fake<bf>(0x300000), {T_ + 1, HKV, D}, memory_space::device);
    EXPECT_ARG(specdec::tree_attention(specdec::cuda{}, a.q, a.k, k3, a.ip, a.mask, a.out, a.lse), fn, "'spec_v'");
    auto m2 = specdec::make_view<1>(fake<specdec::mask_word>(0x700000), {T_ - 1}, memory_space::device);
    EXPECT_ARG(specdec::tree_attention(specdec::cuda{}, a.q, a.k, a.v, a.ip, m2, a.out, a.lse), fn, "'mask'");
    auto mh = specdec::make_view<1>(fake<specdec::mask_word>(0x700000), {T_}, memory_space::host);
    EXPECT_ARG(specdec::tree_attention(specdec::cuda{}, a.q, a.k, a.v, a.ip, mh, a.out, a.lse), fn, "'mask'");
    auto k5 = specdec::make_view<3>(fake<bf>(0x300000), {T_, 3, D}, memory_space::device);
    EXPECT_ARG(specdec::tree_attention(specdec::cuda{}, a.q, k5, k5, a.ip, a.mask, a.out, a.lse), fn, "'q'");
  }
  SECTION("hybrid") {
    const char* fn = "specdec::hybrid_tree_attention";
    auto kh = specdec::make_view<3>(fake<bf>(0x300000), {T_, HKV, D}, memory_space::host);
    EXPECT_ARG(specdec::hybrid_tree_attention(specdec::cuda{}, a.q, a.cache, kh, a.v, a.ip, a.mask, a.out, a.lse), fn,
               "'spec_k'");
    auto c2 = a.cache;
    c2.kv_heads = 3;
    EXPECT_ARG(specdec::hybrid_tree_attention(specdec::cuda{}, a.q, c2, a.k, a.v, a.ip, a.mask, a.out, a.lse), fn,
               "'q'");
    EXPECT_ARG(specdec::hybrid_tree_attention(specdec::cuda{}, a.q, a.cache, a.k, a.v, a.ip, a.mask, a.out, a.lse,
                                              {.kv_split_size = -5}),
               fn, "'options.kv_split_size'");
  }
  SECTION("outputs over the inputs (session 55): in place over q, over the tree's keys and mask") {
    auto oq = specdec::make_view<3>(fake<bf>(0x100000), {T_, HQ, D}, memory_space::device);
    EXPECT_ARG(specdec::hybrid_tree_attention(specdec::cuda{}, a.q, a.cache, a.k, a.v, a.ip, a.mask, oq, a.lse),
               "specdec::hybrid_tree_attention", "'q': expected memory disjoint from 'out'");
    EXPECT_ARG(specdec::decode_attention(specdec::cuda{}, a.q, a.cache, a.ip, oq, a.lse), "specdec::decode_attention",
               "'q': expected memory disjoint from 'out'");
    auto ok = specdec::make_view<3>(fake<bf>(0x300000 + 64), {T_, HQ, D}, memory_space::device);
    EXPECT_ARG(specdec::hybrid_tree_attention(specdec::cuda{}, a.q, a.cache, a.k, a.v, a.ip, a.mask, ok, a.lse),
               "specdec::hybrid_tree_attention", "'spec_k': expected memory disjoint from 'out'");
    auto lm = specdec::make_view<2>(fake<float>(0x700000), {T_, HQ}, memory_space::device);
    EXPECT_ARG(specdec::tree_attention(specdec::cuda{}, a.q, a.k, a.v, a.ip, a.mask, a.out, lm), "specdec::tree_attention",
               "'mask': expected memory disjoint from 'lse'");
  }
  SECTION("lse_merge") {
    const char* fn = "specdec::lse_merge";
    auto ob = specdec::make_view<3>(fake<bf>(0x300000), {T_, HQ + 1, D}, memory_space::device);
    EXPECT_ARG(specdec::lse_merge(specdec::cuda{}, a.q, a.lse, ob, a.lse, a.out, a.lse), fn, "'o_b'");
    auto oh = specdec::make_view<3>(fake<bf>(0x300000), {T_, HQ, D}, memory_space::host);
    EXPECT_ARG(specdec::lse_merge(specdec::cuda{}, oh, a.lse, a.q, a.lse, a.out, a.lse), fn, "'o_a'");
  }
}

TEST_CASE("cuda attention workspace: too small or host memory is an error", "[cuda][attention][validation]") {
  // Real (tiny) device buffers: the workspace check runs after the plan, which queries the SM count.
  cuda_attn_test::batch<bf> b(5, 8, 2, 128, {100}, {2});
  cuda_attn_test::device_batch<bf> d(b);
  const std::size_t need =
      specdec::decode_attention_workspace_bytes(specdec::cuda{}, d.q_view(), d.nhd(), d.indptr_view());
  REQUIRE(need > 0);
  cuda_attn_test::device_workspace small(need - 1);
  EXPECT_ARG(specdec::decode_attention(specdec::cuda{}, d.q_view(), d.nhd(), d.indptr_view(), d.out_view(),
                                       d.lse_view(), {.workspace = &small.ws}),
             "specdec::decode_attention", "'options.workspace'");
  specdec::attention_workspace host_ws(need);
  EXPECT_ARG(specdec::decode_attention(specdec::cuda{}, d.q_view(), d.nhd(), d.indptr_view(), d.out_view(),
                                       d.lse_view(), {.workspace = &host_ws}),
             "specdec::decode_attention", "'options.workspace'");
}

TEST_CASE("cuda split-KV walk: the key tiles of all parts cover the cache exactly once", "[cuda][attention][nogpu]") {
  // detail::cache_chunk_walk is the code the kernel runs (host/device) to find its key tiles.
  for (int bn : {32, 64})
    for (int length : {0, 1, 31, 63, 64, 65, 1000, 4097, 131072})
      for (int chunks : {1, 2, 7, 33, 264, 1024})
        for (int user : {0, 1, 17, 64, 100, 5000, 1 << 30}) {
          std::vector<int> hits(static_cast<std::size_t>(length), 0);
          long long iterations = 0;
          bool ok = true;
          for (int part = 0; part < chunks; ++part) {
            const specdec::detail::cache_chunk_walk w(length, chunks, user, part, bn);
            if (user == 0 && w.n_iter > w.tpc) ok = false;  // automatic split: at most one chunk per part
            iterations += w.n_iter;
            for (int it = 0; it < w.n_iter; ++it) {
              int kb = -1, ke = -1;
              w.range(it, bn, kb, ke);
              if (!(0 <= kb && kb <= ke && ke <= length && ke - kb <= bn)) ok = false;
              for (int k = kb; k < ke && ok; ++k) ++hits[static_cast<std::size_t>(k)];
            }
          }
          const long long tiles = (length + bn - 1) / bn;
          const long long nchunks = user > 0 ? (length + user - 1LL) / user : chunks;
          INFO("bn " << bn << " length " << length << " chunks " << chunks << " split " << user);
          REQUIRE(ok);
          REQUIRE(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
          // No blow-up from a huge or tiny split: each chunk wastes at most one partial tile.
          REQUIRE(iterations <= 2 * tiles + nchunks);
        }
}

#undef EXPECT_ARG  // (the CUDA CHECK build compiles this file in a bundle with others)
