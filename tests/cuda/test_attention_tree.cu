// tree_attention on the cuda backend against the double reference and the host backend: trees of
// 1..1024 nodes (random topologies and a 1024-deep chain = full causal mask), ragged batches with
// empty requests, GQA, fp16 and bf16. Skipped (exit 77) without a GPU.
#include <catch2/catch.hpp>

#include <vector>

#include "cuda/test_attention_common.cuh"
#include "specdec/attention/tree_attention.cuh"

using namespace cuda_attn_test;

namespace {

template <class T>
void run_tree(batch<T>& b) {
  batch<T> host = b;
  specdec::tree_attention(specdec::host{}, host.q_view(), host.k_view(), host.v_view(), host.indptr_view(),
                          host.mask_view(), host.out_view(), host.lse_view());
  const auto ref =
      specdec::reference::tree_attention(b.q_view(), b.k_view(), b.v_view(), b.indptr_view(), b.mask_view());
  device_batch<T> d(b);
  device_workspace ws(specdec::tree_attention_workspace_bytes(specdec::cuda{}, d.q_view(), b.hkv, d.indptr_view()));
  specdec::tree_attention(specdec::cuda{}, d.q_view(), d.k_view(), d.v_view(), d.indptr_view(), d.mask_view(),
                          d.out_view(), d.lse_view(), {.workspace = &ws.ws});
  specdec_test::sync_check("tree_attention(cuda)");
  d.out.download(b.out);
  d.lse.download(b.lse);
  check_cuda(b, host, ref);
}

}  // namespace

TEMPLATE_TEST_CASE("cuda tree_attention: tree sizes 1..1024, ragged", "[cuda][attention]", specdec::bfloat16,
                   specdec::half) {
  int seed = 2000;
  for (std::vector<int> sizes : {std::vector<int>{1}, {2, 63, 64, 65}, {127, 0, 129}, {1024}, {300, 700}, {16, 16, 16, 16}}) {
    DYNAMIC_SECTION("first size " << sizes[0] << " of " << sizes.size()) {
      batch<TestType> b(++seed, 8, 2, 128, std::vector<int>(sizes.size(), 0), sizes);
      run_tree(b);
    }
  }
}

TEST_CASE("cuda tree_attention: a 1024-deep chain is a full causal mask", "[cuda][attention]") {
  batch<specdec::bfloat16> b(2100, 4, 1, 64, {0}, {1024});
  b.mask.clear();
  std::vector<int> chain(1024);
  for (int i = 0; i < 1024; ++i) chain[i] = i - 1;
  attn_test::append_mask(chain, b.mask);
  run_tree(b);
}

TEST_CASE("cuda tree_attention: GQA ratios and head dims", "[cuda][attention]") {
  int seed = 2200;
  for (int ratio : {1, 8})
    for (int d : {64, 256}) {
      DYNAMIC_SECTION("ratio " << ratio << " head_dim " << d) {
        batch<specdec::bfloat16> b(++seed, 2 * ratio, 2, d, {0, 0}, {70, 9});
        run_tree(b);
      }
    }
}
