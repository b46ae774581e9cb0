// hybrid_tree_attention vs the double reference in fp32 (tolerance 1e-5): randomized shapes, GQA
// ratios 1/2/4/8, head dims 64/128/256, cache lengths 0, 1 and non-multiples of every block size
// (64-token tiles, 256-token splits, 16-token pages), ragged batches, NHD/HND/paged layouts.
#include "attention_fixture.hpp"
#include "nonfinite_util.hpp"

#include "specdec/attention/hybrid_tree_attention.hpp"

using namespace attn_test;

namespace {
template <class T>
void run_hybrid(batch<T>& b, layout_kind kind, specdec::attention_options opt = {}, double otol = 1e-5) {
  b.with_layout(kind, [&](auto layout) {
    b.reset_outputs();
    specdec::hybrid_tree_attention(specdec::host{}, b.q_view(), layout, b.k_view(), b.v_view(), b.indptr_view(),
                                   b.mask_view(), b.out_view(), b.lse_view(), opt);
    const auto ref = specdec::reference::hybrid_tree_attention(b.q_view(), layout, b.k_view(), b.v_view(),
                                                               b.indptr_view(), b.mask_view(), opt.scale);
    check_against(b, ref, otol);
  });
}
}  // namespace

TEST_CASE("hybrid_tree_attention fp32: edge cache lengths and every layout") {
  for (auto kind : {layout_kind::nhd, layout_kind::hnd, layout_kind::paged}) {
    DYNAMIC_SECTION("layout " << name(kind)) {
      // cache lengths 0, 1, 63, 65, 257 (tile 64 +/- 1, split 256 + 1), page size 16 -> partial pages
      batch<float> b(11, 8, 2, 128, {0, 1, 63, 65, 257}, {3, 1, 17, 64, 5});
      run_hybrid(b, kind);
    }
  }
}

TEST_CASE("hybrid_tree_attention fp32: GQA ratios and head dims") {
  int seed = 100;
  for (int ratio : {1, 2, 4, 8})
    for (int d : {64, 128, 256}) {
      DYNAMIC_SECTION("ratio " << ratio << " d " << d) {
        const int hkv = ratio == 8 ? 1 : 2;
        batch<float> b(++seed, hkv * ratio, hkv, d, {37, 130}, {9, 2}, 8);
        run_hybrid(b, seed % 2 ? layout_kind::paged : layout_kind::nhd);
      }
    }
}

TEST_CASE("hybrid_tree_attention fp32: forced small splits equal the reference") {
  batch<float> b(5, 4, 2, 64, {300, 0, 77}, {4, 6, 1});
  for (int split : {1, 7, 64, 100, 1000}) {
    DYNAMIC_SECTION("split " << split) { run_hybrid(b, layout_kind::paged, {.kv_split_size = split}); }
  }
}

TEST_CASE("hybrid_tree_attention fp32: custom scale and large logits stay accurate") {
  // |q|, |k| up to 4: logits reach ~100 and fp32 rounding of a logit alone is ~100 * 6e-8, which
  // the peaked softmax passes on to the output, so this stress case is held to 1e-4.
  batch<float> b(9, 4, 4, 64, {100, 50}, {7, 30}, 16, 4.0f);
  run_hybrid(b, layout_kind::nhd, {.scale = 0.3f}, 1e-4);
  run_hybrid(b, layout_kind::nhd, {}, 1e-4);
}

TEST_CASE("attention fp32: NaN/Inf a row cannot see never reaches it; what it sees does") {
  for (int d : {64, 128}) {
    DYNAMIC_SECTION("d " << d) { check_poisoned_grid<float>(d); }
  }
}

TEST_CASE("attention fp32: a NaN/Inf in a visible cached K or V propagates") {
  check_visible_cache_poison<float>(64);
}

TEST_CASE("attention fp32: denormal values are ordinary numbers") { check_denormal_values(); }
