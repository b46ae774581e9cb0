// Compiled by compile_fail.cmake (never built as part of the project): a plain C++ translation unit
// that calls the attention primitives. With USE_CUDA_POLICY it passes specdec::cuda without having
// included the .cuh backend headers, which must fail with the backend seam's static_assert message
// (detail/backend.hpp) rather than a cascade of template errors; without it (the positive control)
// the same calls with specdec::host compile.
#include <cstdint>
#include <vector>

#include "specdec/attention/decode_attention.hpp"
#include "specdec/attention/hybrid_tree_attention.hpp"
#include "specdec/attention/lse_merge.hpp"
#include "specdec/kv/contiguous_kv.hpp"

#ifdef USE_CUDA_POLICY
#define POLICY specdec::cuda
#else
#define POLICY specdec::host
#endif

void call() {
  std::vector<specdec::half> q(8 * 64), out(8 * 64), kc(16 * 2 * 64);
  std::vector<float> lse(8);
  std::vector<std::int32_t> indptr{0, 1}, len{4};
  std::vector<specdec::mask_word> mask{1};
  const specdec::contiguous_kv<const specdec::half> cache{kc.data(), kc.data(), len.data(), 1, 16, 2, 64,
                                                          specdec::memory_space::host};
  const auto qv = specdec::make_view<3>(q.data(), {1, 8, 64});
  const auto ov = specdec::make_view<3>(out.data(), {1, 8, 64});
  const auto lv = specdec::make_view<2>(lse.data(), {1, 8});
  const auto iv = specdec::make_view<1>(indptr.data(), {2});
  const auto kv = specdec::make_view<3>(kc.data(), {1, 2, 64});
  specdec::decode_attention(POLICY{}, qv, cache, iv, ov, lv);
  specdec::hybrid_tree_attention(POLICY{}, qv, cache, kv, kv, iv, specdec::make_view<1>(mask.data(), {1}), ov, lv);
  specdec::lse_merge(POLICY{}, ov, lv, ov, lv, ov, lv);
}
