// hybrid_tree_attention on the cuda backend (cache part unmasked + tree part masked, merged by LSE)
// against the double reference and the host backend: cache lengths 0/1/non-multiples of tiles,
// trees 1..1024 nodes, ragged batches, GQA, head dims, contiguous, paged and block-table layouts,
// forced splits, fp16 and bf16; NaN/Inf masked or past `length` never reaches a row, visible NaN/Inf
// (tree tokens and cached tokens) does; denormal Q/K/V are ordinary numbers. Skipped (exit 77)
// without a GPU.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "cuda/attention_runner.cuh"
#include "cuda/test_attention_common.cuh"
#include "attention/nonfinite_util.hpp"
#include "kv/block_table_util.hpp"
#include "specdec/attention/decode_attention.cuh"
#include "specdec/attention/hybrid_tree_attention.cuh"
#include "specdec/attention/tree_attention.cuh"

using namespace cuda_attn_test;

namespace {

template <class T>
void run_hybrid(batch<T>& b, layout_kind kind, specdec::attention_options opt = {}, double out_scale = 1.0) {
  batch<T> host = b;
  host.with_layout(kind, [&](auto layout) {
    specdec::hybrid_tree_attention(specdec::host{}, host.q_view(), layout, host.k_view(), host.v_view(),
                                   host.indptr_view(), host.mask_view(), host.out_view(), host.lse_view(), opt);
  });
  const auto ref = specdec::reference::hybrid_tree_attention(b.q_view(), b.nhd(), b.k_view(), b.v_view(),
                                                             b.indptr_view(), b.mask_view(), opt.scale);
  device_batch<T> d(b);
  d.with_layout(kind, [&](auto layout) {
    device_workspace ws(
        specdec::hybrid_tree_attention_workspace_bytes(specdec::cuda{}, d.q_view(), layout, d.indptr_view(), opt));
    auto o = opt;
    o.workspace = &ws.ws;
    specdec::hybrid_tree_attention(specdec::cuda{}, d.q_view(), layout, d.k_view(), d.v_view(), d.indptr_view(),
                                   d.mask_view(), d.out_view(), d.lse_view(), o);
    specdec_test::sync_check("hybrid_tree_attention(cuda)");
  });
  d.out.download(b.out);
  d.lse.download(b.lse);
  check_cuda(b, host, ref, out_scale);
}

}  // namespace

TEMPLATE_TEST_CASE("cuda hybrid_tree_attention: edge cache lengths, ragged trees, contiguous and paged",
                   "[cuda][attention]", specdec::bfloat16, specdec::half) {
  int seed = 3000;
  for (auto kind : {layout_kind::nhd, layout_kind::paged}) {
    DYNAMIC_SECTION(attn_test::name(kind)) {
      batch<TestType> b(++seed, 8, 2, 128, {0, 1, 63, 65, 1000, 2049}, {5, 1, 64, 0, 33, 17});
      run_hybrid(b, kind);
    }
  }
}

// The host block-table test's device twin (tests/kv/test_block_table_kv.cpp): the same data in a
// vLLM block table (shuffled blocks, padded rows, NaN in every slot no request owns) and in a contiguous
// NHD cache give bit-identical outputs on the cuda backend, and both are attention.
TEMPLATE_TEST_CASE("cuda hybrid_tree_attention: block_table_kv is bit-identical to contiguous NHD on ragged batches",
                   "[cuda][attention]", specdec::bfloat16, specdec::half) {
  specdec::philox_stream rng(3500, 0);
  for (int trial = 0; trial < 8; ++trial) {
    const int R = 1 + static_cast<int>(rng.below(5));
    const int dims[3] = {64, 128, 256}, sizes[3] = {1, 16, 32};
    const int hkv = 1 + static_cast<int>(rng.below(2)), hq = hkv * (1 << rng.below(3)), d = dims[rng.below(3)];
    const int bs = sizes[rng.below(3)];
    std::vector<int> lens, trees;
    for (int r = 0; r < R; ++r) {
      lens.push_back(rng.below(4) == 0 ? 0 : static_cast<int>(rng.below(1500)));
      trees.push_back(1 + static_cast<int>(rng.below(64)));
    }
    INFO("trial " << trial << ": R " << R << ", hq " << hq << ", hkv " << hkv << ", d " << d << ", block " << bs);
    batch<TestType> b(3500 + trial, hq, hkv, d, lens, trees);
    kv_test::block_pool<TestType> pool(rng, b.lens, b.capacity, hkv, d, bs);
    for (int r = 0; r < R; ++r) pool.fill_from(b.nhd(), b.lens.data(), r, b.lens[static_cast<std::size_t>(r)]);

    batch<TestType> host = b;
    specdec::hybrid_tree_attention(specdec::host{}, host.q_view(), host.nhd(), host.k_view(), host.v_view(),
                                   host.indptr_view(), host.mask_view(), host.out_view(), host.lse_view());
    const auto ref = specdec::reference::hybrid_tree_attention(b.q_view(), b.nhd(), b.k_view(), b.v_view(),
                                                               b.indptr_view(), b.mask_view());
    device_batch<TestType> d_nhd(b), d_table(b);
    dvec<TestType> kp(pool.k), vp(pool.v);
    dvec<std::int32_t> table(pool.table), allocated(pool.allocated);
    const specdec::block_table_kv<TestType> cache{
        kp.data(), vp.data(),
        {table.data(), d_table.lens.data(), pool.max_blocks, pool.block_size, pool.num_blocks, allocated.data()},
        R, hkv, d, memory_space::device};
    specdec::hybrid_tree_attention(specdec::cuda{}, d_nhd.q_view(), d_nhd.nhd(), d_nhd.k_view(), d_nhd.v_view(),
                                   d_nhd.indptr_view(), d_nhd.mask_view(), d_nhd.out_view(), d_nhd.lse_view());
    specdec::hybrid_tree_attention(specdec::cuda{}, d_table.q_view(), cache, d_table.k_view(), d_table.v_view(),
                                   d_table.indptr_view(), d_table.mask_view(), d_table.out_view(), d_table.lse_view());
    specdec_test::sync_check("hybrid_tree_attention(cuda, block table)");
    batch<TestType> got_nhd = b;
    d_nhd.out.download(got_nhd.out);
    d_nhd.lse.download(got_nhd.lse);
    d_table.out.download(b.out);
    d_table.lse.download(b.lse);
    REQUIRE(std::memcmp(got_nhd.out.data(), b.out.data(), b.out.size() * sizeof(TestType)) == 0);
    REQUIRE(std::memcmp(got_nhd.lse.data(), b.lse.data(), b.lse.size() * sizeof(float)) == 0);
    check_cuda(b, host, ref);
  }
}

// attention_options::kv_chunks: with kv_split_size and kv_chunks fixed, request 0's rows are the same
// bits computed in a batch of four (many query rows, so the automatic chunk count would be small) and
// alone (one request's rows: the automatic count would be large).
TEMPLATE_TEST_CASE("cuda hybrid_tree_attention: fixed kv_split_size and kv_chunks make a request's rows batch invariant",
                   "[cuda][attention]", specdec::half, specdec::bfloat16) {
  specdec::philox_stream rng(3900, 0);
  for (int trial = 0; trial < 4; ++trial) {
    const int hkv = 2, hq = 8, d = trial % 2 == 0 ? 64 : 128;
    const std::vector<int> lens{1000 + static_cast<int>(rng.below(3000)), 700, 2900, 64};
    const std::vector<int> trees{1 + static_cast<int>(rng.below(17)), 40, 64, 9};
    batch<TestType> b(3900 + trial, hq, hkv, d, lens, trees);
    device_batch<TestType> all(b);
    const specdec::attention_options fixed{.kv_split_size = 256, .kv_chunks = 6};
    specdec::hybrid_tree_attention(specdec::cuda{}, all.q_view(), all.nhd(), all.k_view(), all.v_view(),
                                   all.indptr_view(), all.mask_view(), all.out_view(), all.lse_view(), fixed);
    // request 0 alone: its rows, the cache's first request, its mask words (they come first)
    const int n0 = trees[0];
    const auto dev3 = [&](TestType* p, int heads) {
      return specdec::make_view<3>(p, {n0, heads, d}, memory_space::device);
    };
    const specdec::contiguous_kv<TestType> one{all.k_nhd.data(), all.v_nhd.data(), all.lens.data(), 1, b.capacity, hkv, d,
                                               memory_space::device};
    dvec<std::int32_t> ip(std::vector<std::int32_t>{0, n0});
    dvec<TestType> out1(static_cast<std::size_t>(n0) * hq * d);
    dvec<float> lse1(static_cast<std::size_t>(n0) * hq);
    const auto words = static_cast<std::int64_t>(n0) * specdec::words_per_row(n0);
    specdec::hybrid_tree_attention(specdec::cuda{}, specdec::make_view<3>(static_cast<const TestType*>(all.q.data()), {n0, hq, d}, memory_space::device),
                                   one, specdec::make_view<3>(static_cast<const TestType*>(all.k.data()), {n0, hkv, d}, memory_space::device),
                                   specdec::make_view<3>(static_cast<const TestType*>(all.v.data()), {n0, hkv, d}, memory_space::device),
                                   specdec::make_view<1>(static_cast<const std::int32_t*>(ip.data()), {2}, memory_space::device),
                                   specdec::make_view<1>(static_cast<const specdec::mask_word*>(all.mask.data()), {words}, memory_space::device),
                                   dev3(out1.data(), hq), specdec::make_view<2>(lse1.data(), {n0, hq}, memory_space::device), fixed);
    specdec_test::sync_check("hybrid_tree_attention(cuda, kv_chunks)");
    std::vector<TestType> o_all, o_one;
    std::vector<float> l_all, l_one;
    all.out.download(o_all), out1.download(o_one), all.lse.download(l_all), lse1.download(l_one);
    INFO("trial " << trial << ", n0 " << n0 << ", d " << d);
    REQUIRE(std::memcmp(o_all.data(), o_one.data(), o_one.size() * sizeof(TestType)) == 0);
    REQUIRE(std::memcmp(l_all.data(), l_one.data(), l_one.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("cuda hybrid_tree_attention: GQA ratios, head dims, HND", "[cuda][attention]") {
  int seed = 3100;
  for (int ratio : {1, 4, 8})
    for (int d : {64, 128, 256}) {
      DYNAMIC_SECTION("ratio " << ratio << " head_dim " << d) {
        batch<specdec::bfloat16> b(++seed, 2 * ratio, 2, d, {300, 0, 77}, {16, 3, 1});
        run_hybrid(b, seed % 2 ? layout_kind::hnd : layout_kind::nhd);
      }
    }
}

TEST_CASE("cuda hybrid_tree_attention: large trees over a long cache, forced splits", "[cuda][attention]") {
  SECTION("1024-node tree, 5000 cached tokens") {
    batch<specdec::bfloat16> b(3200, 8, 2, 128, {5000}, {1024});
    run_hybrid(b, layout_kind::paged);
  }
  for (int split : {1, 100, 4096}) {
    DYNAMIC_SECTION("split " << split) {
      batch<specdec::bfloat16> b(3300 + split, 8, 2, 128, {1500, 3}, {64, 16});
      run_hybrid(b, layout_kind::paged, {.scale = 0.2f, .kv_split_size = split});
    }
  }
}

TEST_CASE("cuda hybrid_tree_attention: the benchmark shape (32 q / 8 kv heads, batch 8, 64-node trees)",
          "[cuda][attention]") {
  batch<specdec::bfloat16> b(3400, 32, 8, 128, {512, 400, 1, 0, 513, 200, 100, 300},
                             {64, 64, 64, 64, 64, 64, 64, 64});
  run_hybrid(b, layout_kind::paged);
}

TEMPLATE_TEST_CASE("cuda tree and hybrid attention: NaN/Inf a row cannot see never reaches it; what it sees does",
                   "[cuda][attention][nonfinite]", specdec::bfloat16, specdec::half) {
  // The masked-key correction of the tree tiles (zeroed in shared memory, added back for visible
  // pairs) and the NaN-propagating merge, against the same bit-identity checks as the host kernels.
  for (int d : {64, 128, 256}) {
    DYNAMIC_SECTION("head_dim " << d) { attn_test::check_poisoned_grid<TestType>(d, cuda_runner{}); }
  }
}

TEMPLATE_TEST_CASE("cuda decode and hybrid attention: NaN/Inf in a visible cached token reaches every row reading it",
                   "[cuda][attention][nonfinite]", specdec::bfloat16, specdec::half) {
  // The host kernel tests' check on the cuda backend: decode over a 1-token cache with K[0] or V[0]
  // NaN/+inf is non-finite (not out 0, LSE -inf as if the cache were empty; the LSE stays finite
  // when only V is bad), and one NaN key element of cached token 517 makes exactly the rows of its
  // request and kv head NaN (out and LSE), with automatic and 64-token splits.
  for (int d : {64, 128, 256}) {
    DYNAMIC_SECTION("head_dim " << d) { attn_test::check_visible_cache_poison<TestType>(d, cuda_runner{}); }
  }
}

TEMPLATE_TEST_CASE("cuda tree and hybrid attention: denormal Q, K and V are ordinary numbers",
                   "[cuda][attention][nonfinite]", specdec::bfloat16, specdec::half) {
  // Tree tokens and cache alike: against the double reference and the host backend at the existing
  // tolerances, relative to the tiny scale where V is tiny (then also: not flushed to zero); K tiny
  // with q scaled up gives ordinary scores, so flushed keys would show as uniform weights.
  std::uint64_t seed = 3600;
  for (auto what : {denormal_target::q, denormal_target::k, denormal_target::v})
    for (auto kind : {layout_kind::nhd, layout_kind::paged}) {
      DYNAMIC_SECTION(name(what) << ", " << attn_test::name(kind)) {
        batch<TestType> b(++seed, 8, 2, 128, {40, 3, 300, 0}, {6, 2, 17, 5});
        const double scale = make_denormal(b, what);
        run_hybrid(b, kind, {}, scale);
        if (what == denormal_target::v) CHECK(nonzero_outputs(b) > static_cast<int>(b.out.size()) / 2);
      }
    }
}

TEST_CASE("nonfinite_bits finds exactly the NaN/Inf patterns of half and bfloat16 (the device test's host twin)",
          "[cuda][attention][nonfinite][nogpu]") {
  int half_bad = 0, bf16_bad = 0, wrong = 0;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<unsigned short>(b);
    const bool h = specdec::detail::nonfinite_bits<unsigned short>(bits, 0x7c00);
    const bool f = specdec::detail::nonfinite_bits<unsigned short>(bits, 0x7f80);
    wrong += h != !std::isfinite(specdec::detail::half_bits_to_float(bits));
    wrong += f != !std::isfinite(specdec::detail::bf16_bits_to_float(bits));
    half_bad += h;
    bf16_bad += f;
  }
  CHECK(wrong == 0);
  CHECK(half_bad == 2 * 1024);  // sign x 1024 mantissas with the exponent all ones
  CHECK(bf16_bad == 2 * 128);
}
