// tree_attention (masked, tree tokens only) and hybrid attention with large trees: 1 to 1024 nodes,
// random trees and the worst case (a deep chain, i.e. a full causal mask), ragged batches,
// against the double reference in fp32 (1e-5).
#include "attention_fixture.hpp"

#include "specdec/attention/hybrid_tree_attention.hpp"
#include "specdec/attention/tree_attention.hpp"

using namespace attn_test;

TEST_CASE("tree_attention fp32: tree sizes 1..1024, ragged") {
  int seed = 500;
  for (std::vector<int> sizes : {std::vector<int>{1}, {2, 63, 64, 65}, {127, 0, 129}, {1024}, {300, 700}}) {
    DYNAMIC_SECTION("first size " << sizes[0] << " of " << sizes.size()) {
      batch<float> b(++seed, 4, 2, 64, std::vector<int>(sizes.size(), 0), sizes);
      specdec::tree_attention(specdec::host{}, b.q_view(), b.k_view(), b.v_view(), b.indptr_view(), b.mask_view(),
                              b.out_view(), b.lse_view());
      check_against(b, specdec::reference::tree_attention(b.q_view(), b.k_view(), b.v_view(), b.indptr_view(),
                                                          b.mask_view()));
    }
  }
}

TEST_CASE("tree_attention fp32: a 600-deep chain is a full causal mask") {
  // 600 (not 1024) keeps the O(n^2) double reference fast under ASan; 1024-node trees are covered above.
  batch<float> b(9, 2, 1, 64, {0}, {600});
  b.mask.clear();
  std::vector<int> chain(600);
  for (int i = 0; i < 600; ++i) chain[i] = i - 1;
  append_mask(chain, b.mask);
  specdec::tree_attention(specdec::host{}, b.q_view(), b.k_view(), b.v_view(), b.indptr_view(), b.mask_view(),
                          b.out_view(), b.lse_view());
  check_against(b, specdec::reference::tree_attention(b.q_view(), b.k_view(), b.v_view(), b.indptr_view(),
                                                      b.mask_view()));
}

TEST_CASE("tree_attention: token 0 of every tree sees only itself") {
  // Row 0 has only the diagonal bit: out must be exactly v of that token (softmax of one key).
  batch<float> b(12, 2, 2, 64, {0, 0}, {5, 3});
  specdec::tree_attention(specdec::host{}, b.q_view(), b.k_view(), b.v_view(), b.indptr_view(), b.mask_view(),
                          b.out_view(), b.lse_view());
  for (int r = 0; r < 2; ++r) {
    const int t = b.q_indptr[r];
    for (int h = 0; h < 2; ++h)
      for (int c = 0; c < 64; ++c)
        CHECK(b.out[(static_cast<std::size_t>(t) * 2 + h) * 64 + c] ==
              Approx(b.spec_v[(static_cast<std::size_t>(t) * 2 + h) * 64 + c]).margin(1e-6));
  }
}

TEST_CASE("hybrid_tree_attention fp32: large trees over a cache, paged and contiguous") {
  batch<float> b(31, 8, 2, 64, {70, 1, 0}, {1024, 200, 64}, 32);
  for (auto kind : {layout_kind::paged, layout_kind::hnd}) {
    DYNAMIC_SECTION(name(kind)) {
      b.with_layout(kind, [&](auto layout) {
        b.reset_outputs();
        specdec::hybrid_tree_attention(specdec::host{}, b.q_view(), layout, b.k_view(), b.v_view(), b.indptr_view(),
                                       b.mask_view(), b.out_view(), b.lse_view());
        check_against(b, specdec::reference::hybrid_tree_attention(b.q_view(), layout, b.k_view(), b.v_view(),
                                                                   b.indptr_view(), b.mask_view()));
      });
    }
  }
}
