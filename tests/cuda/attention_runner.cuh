#pragma once
// The cuda backend as a runner for the shared non-finite checks of tests/attention/nonfinite_util.hpp
// (attn_test::check_poisoned_grid, check_visible_cache_poison) and for the CUDA tests' own poisoned
// runs. Only included by tests/cuda/test_attention_*.cu.
#include "cuda/test_attention_common.cuh"
#include "specdec/attention/decode_attention.cuh"
#include "specdec/attention/hybrid_tree_attention.cuh"
#include "specdec/attention/tree_attention.cuh"

namespace cuda_attn_test {

//! The cuda backend as a runner for check_poisoned_tree and check_visible_cache_poison (the twin of
//! attn_test::host_runner): uploads the (possibly poisoned) batch, runs hybrid or tree-only attention
//! (operator()) or decode_attention (decode()), downloads out and lse.
struct cuda_runner {
  template <class T>
  void operator()(batch<T>& b, layout_kind kind, bool with_cache, const specdec::attention_options& opt) const {
    b.reset_outputs();
    device_batch<T> d(b);
    if (with_cache) {
      d.with_layout(kind, [&](auto layout) {
        specdec::hybrid_tree_attention(specdec::cuda{}, d.q_view(), layout, d.k_view(), d.v_view(), d.indptr_view(),
                                       d.mask_view(), d.out_view(), d.lse_view(), opt);
      });
    } else {
      specdec::tree_attention(specdec::cuda{}, d.q_view(), d.k_view(), d.v_view(), d.indptr_view(), d.mask_view(),
                              d.out_view(), d.lse_view(), opt);
    }
    specdec_test::sync_check("poisoned attention(cuda)");
    d.out.download(b.out);
    d.lse.download(b.lse);
  }
  template <class T>
  void decode(batch<T>& b, layout_kind kind, const specdec::attention_options& opt) const {
    b.reset_outputs();
    device_batch<T> d(b);
    d.with_layout(kind, [&](auto layout) {
      specdec::decode_attention(specdec::cuda{}, d.q_view(), layout, d.indptr_view(), d.out_view(), d.lse_view(), opt);
    });
    specdec_test::sync_check("poisoned decode_attention(cuda)");
    d.out.download(b.out);
    d.lse.download(b.lse);
  }
};

}  // namespace cuda_attn_test
