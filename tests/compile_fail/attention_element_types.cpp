// Compiled by compile_fail.cmake (never built as part of the project): every attention entry point
// that takes element-typed tensors, called with one argument of a wrong element type per define. Each
// must fail with the static_assert sentence naming that argument (detail::check_attention_types in
// attention/detail/validate.hpp, detail::check_merge_types in attention/lse_merge.hpp) and no other
// error: the bodies are instantiated only when every type is right.
//   Q_DOUBLE        q (and the rest of the storage) double: not a host storage type
//   CUDA_FLOAT      specdec::cuda with float storage: the cuda kernels take half / bfloat16 only
//   CACHE_HALF      a half cache under float q            SPEC_K_HALF / SPEC_V_HALF   likewise spec_k / spec_v
//   OUT_HALF        a half out under float q              OUT_CONST                   a read-only out
//   LSE_DOUBLE      a double lse                          LSE_CONST                   a read-only lse
//   INDPTR_INT64    an int64 q_indptr                     MASK_UINT32                 a uint32 tree mask
//   MERGE_O_PARTS_HALF, MERGE_LSE_PARTS_DOUBLE   the n-way lse_merge's inputs
//   MERGE_O_B_HALF, MERGE_LSE_A_DOUBLE           the two-way lse_merge's inputs
//   MERGE_OUT_CONST, MERGE_LSE_OUT_DOUBLE        lse_merge's outputs
//   CONVERT_LSE_DOUBLE                           convert_lse_base2_to_natural on a double tensor
//   (none)          the positive control: the same calls with the right types compile.
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/attention/cross_attention.hpp"
#include "specdec/attention/decode_attention.hpp"
#include "specdec/attention/hybrid_tree_attention.hpp"
#include "specdec/attention/lse_merge.hpp"
#include "specdec/attention/tree_attention.hpp"
#include "specdec/kv/contiguous_kv.hpp"

namespace sd = specdec;

#ifdef CUDA_FLOAT
using policy = sd::cuda;
#else
using policy = sd::host;
#endif
#ifdef Q_DOUBLE
using S = double;
#else
using S = float;
#endif
#ifdef CACHE_HALF
using cache_t = sd::half;
#else
using cache_t = S;
#endif
#ifdef SPEC_K_HALF
using k_t = sd::half;
#else
using k_t = S;
#endif
#ifdef SPEC_V_HALF
using v_t = sd::half;
#else
using v_t = S;
#endif
#if defined(OUT_HALF)
using out_t = sd::half;
#elif defined(OUT_CONST)
using out_t = const S;
#else
using out_t = S;
#endif
#if defined(LSE_DOUBLE)
using lse_t = double;
#elif defined(LSE_CONST)
using lse_t = const float;
#else
using lse_t = float;
#endif
#ifdef INDPTR_INT64
using indptr_t = std::int64_t;
#else
using indptr_t = std::int32_t;
#endif
#ifdef MASK_UINT32
using mask_t = std::uint32_t;
#else
using mask_t = sd::mask_word;
#endif

// A view of element type T (possibly const) over `n` elements of a vector of the unqualified type.
template <class T, std::size_t Rank>
struct buffer {
  std::vector<std::remove_const_t<T>> data;
  sd::strided_view<T, Rank> view(const std::int64_t (&extents)[Rank]) {
    std::int64_t n = 1;
    for (auto e : extents) n *= e;
    data.resize(static_cast<std::size_t>(n));
    return sd::strided_view<T, Rank>::contiguous(data.data(), extents);
  }
};

void attention_calls() {
  buffer<S, 3> q;
  buffer<k_t, 3> k;
  buffer<v_t, 3> v;
  buffer<out_t, 3> out;
  buffer<lse_t, 2> lse;
  buffer<indptr_t, 1> indptr;
  buffer<mask_t, 1> mask;
  std::vector<cache_t> kc(16 * 2 * 64);
  std::vector<std::int32_t> len{4}, committed{4};
  const sd::contiguous_kv<const cache_t> cache{kc.data(), kc.data(), len.data(), 1, 16, 2, 64, sd::memory_space::host};
  const auto qv = q.view({1, 8, 64});
  const auto kv = k.view({1, 2, 64});
  const auto vv = v.view({1, 2, 64});
  const auto ov = out.view({1, 8, 64});
  const auto lv = lse.view({1, 8});
  const auto iv = indptr.view({2});
  const auto mv = mask.view({1});
  sd::decode_attention(policy{}, qv, cache, iv, ov, lv);
  (void)sd::decode_attention_workspace_bytes(policy{}, qv, cache, iv);
  sd::tree_attention(policy{}, qv, kv, vv, iv, mv, ov, lv);
  (void)sd::tree_attention_workspace_bytes(policy{}, qv, 2, iv);
  sd::hybrid_tree_attention(policy{}, qv, cache, kv, vv, iv, mv, ov, lv);
  (void)sd::hybrid_tree_attention_workspace_bytes(policy{}, qv, cache, iv);
  sd::cross_attention(sd::host{}, qv, cache, std::span<const std::int32_t>(committed), iv, ov, lv);
}

#ifdef MERGE_O_PARTS_HALF
using parts_t = sd::half;
#else
using parts_t = float;
#endif
#ifdef MERGE_LSE_PARTS_DOUBLE
using lse_parts_t = double;
#else
using lse_parts_t = float;
#endif
#ifdef MERGE_O_B_HALF
using o_b_t = sd::half;
#else
using o_b_t = float;
#endif
#ifdef MERGE_LSE_A_DOUBLE
using lse_a_t = double;
#else
using lse_a_t = float;
#endif
#ifdef MERGE_OUT_CONST
using merge_out_t = const float;
#else
using merge_out_t = float;
#endif
#ifdef MERGE_LSE_OUT_DOUBLE
using merge_lse_out_t = double;
#else
using merge_lse_out_t = float;
#endif
#ifdef CONVERT_LSE_DOUBLE
using convert_t = double;
#else
using convert_t = float;
#endif

void merge_calls() {
  buffer<parts_t, 4> o_parts;
  buffer<lse_parts_t, 3> lse_parts;
  buffer<float, 3> o_a;
  buffer<lse_a_t, 2> lse_a;
  buffer<o_b_t, 3> o_b;
  buffer<float, 2> lse_b;
  buffer<merge_out_t, 3> out;
  buffer<merge_lse_out_t, 2> lse_out;
  buffer<convert_t, 2> convert;
  sd::lse_merge(sd::host{}, o_parts.view({2, 1, 8, 64}), lse_parts.view({2, 1, 8}), out.view({1, 8, 64}),
                lse_out.view({1, 8}));
  sd::lse_merge(sd::host{}, o_a.view({1, 8, 64}), lse_a.view({1, 8}), o_b.view({1, 8, 64}), lse_b.view({1, 8}),
                out.view({1, 8, 64}), lse_out.view({1, 8}));
  sd::convert_lse_base2_to_natural(sd::host{}, convert.view({1, 8}));
}

int main() { return 0; }
