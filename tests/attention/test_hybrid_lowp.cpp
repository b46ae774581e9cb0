// hybrid/decode/tree attention in fp16 and bf16 storage: compared with the double reference computed
// from the same rounded inputs. Tolerance: one rounding of the output to the storage type (half an
// ulp: 4.9e-4 fp16, 3.9e-3 bf16) plus fp32 accumulation slack; the LSE is fp32 and held to 1e-5.
#include "attention_fixture.hpp"
#include "nonfinite_util.hpp"

#include "specdec/attention/decode_attention.hpp"
#include "specdec/attention/hybrid_tree_attention.hpp"
#include "specdec/attention/tree_attention.hpp"

using namespace attn_test;

TEMPLATE_TEST_CASE("hybrid_tree_attention in reduced precision", "", specdec::half, specdec::bfloat16) {
  int seed = 300;
  for (auto kind : {layout_kind::nhd, layout_kind::paged})
    for (int ratio : {1, 4}) {
      DYNAMIC_SECTION(name(kind) << " ratio " << ratio) {
        batch<TestType> b(++seed, 2 * ratio, 2, 128, {0, 129, 70}, {5, 33, 1});
        b.with_layout(kind, [&](auto layout) {
          specdec::hybrid_tree_attention(specdec::host{}, b.q_view(), layout, b.k_view(), b.v_view(), b.indptr_view(),
                                         b.mask_view(), b.out_view(), b.lse_view());
          check_against(b, specdec::reference::hybrid_tree_attention(b.q_view(), layout, b.k_view(), b.v_view(),
                                                                     b.indptr_view(), b.mask_view()));
        });
      }
    }
}

TEMPLATE_TEST_CASE("decode and tree attention in reduced precision", "", specdec::half, specdec::bfloat16) {
  batch<TestType> b(77, 8, 2, 64, {300, 1, 65}, {2, 3, 70});
  SECTION("decode over HND") {
    specdec::decode_attention(specdec::host{}, b.q_view(), b.hnd(), b.indptr_view(), b.out_view(), b.lse_view());
    check_against(b, specdec::reference::decode_attention(b.q_view(), b.hnd(), b.indptr_view()));
  }
  SECTION("tree") {
    specdec::tree_attention(specdec::host{}, b.q_view(), b.k_view(), b.v_view(), b.indptr_view(), b.mask_view(),
                            b.out_view(), b.lse_view());
    check_against(b, specdec::reference::tree_attention(b.q_view(), b.k_view(), b.v_view(), b.indptr_view(),
                                                        b.mask_view()));
  }
}

TEMPLATE_TEST_CASE("attention in reduced precision: NaN/Inf a row cannot see never reaches it", "", specdec::half,
                   specdec::bfloat16) {
  check_poisoned_grid<TestType>(128);
  check_visible_cache_poison<TestType>(128);
}
