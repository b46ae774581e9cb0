#pragma once
//! \file lse_merge.hpp
//! Log-sum-exp merge of partial attention results (LongSpec §3.3 "Aggregation" and Appendix A,
//! Proposition A.1), two-way and n-way, plus converters between natural-log LSE (specdec's
//! convention) and base-2 LSE (FlashInfer's convention).
//!
//! For one query row attending to a key set split into disjoint parts a, b:
//!   LSE   = log(exp(LSE_a) + exp(LSE_b))                                   (Prop. A.1, first line)
//!   O     = O_a * exp(LSE_a - LSE) + O_b * exp(LSE_b - LSE)                (Prop. A.1, second line)
//! and n-way by induction. LSE = -inf means "this part saw no keys": it gets weight 0 (its O is
//! ignored, so even a NaN there does not leak); if every part is -inf, O = 0 and LSE = -inf.

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <tuple>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/detail/backend.hpp"
#include "specdec/attention/detail/host/merge.hpp"
#include "specdec/attention/detail/merge_state.hpp"
#include "specdec/attention/detail/validate.hpp"
#include "specdec/core/config.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/simd_level.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/core/thread_pool.hpp"


namespace specdec {

//! Converts a base-2 LSE (FlashInfer: log2 of the sum of 2^(scaled logit * log2 e)) to specdec's
//! natural-log LSE: multiply by ln 2. -inf maps to -inf. O(1).
SPECDEC_HOST_DEVICE constexpr float lse_base2_to_natural(float lse2) noexcept { return lse2 * 0.6931471805599453f; }

//! Converts a natural-log LSE to base 2 (FlashInfer's convention): multiply by log2 e. -inf stays -inf.
SPECDEC_HOST_DEVICE constexpr float lse_natural_to_base2(float lse) noexcept { return lse * 1.4426950408889634f; }

// ISA-dependent host code is declared in `inline namespace SPECDEC_HOST_ISA` (core/isa.hpp); the
// params struct stays outside it.
namespace detail {
inline namespace SPECDEC_HOST_ISA {
template <class L>
void convert_lse_inplace(std::string_view fn, const L& lse, float factor) {
  static_assert(std::is_same_v<typename L::element_type, float>,
                "specdec::convert_lse_*: lse's element type must be non-const float (converted in place)");
  static_assert(L::rank == 1 || L::rank == 2, "specdec::convert_lse_*: lse must be a tensor of rank 1 or 2");
  if constexpr (std::is_same_v<typename L::element_type, float> && (L::rank == 1 || L::rank == 2)) {
    require_host_accessible(fn, "lse", lse);
    auto v = as_view(lse);
    require_array(fn, "lse", v);
    require_unique_elements(fn, "lse", v);  // scaled in place: a shared element would be scaled twice
    if constexpr (L::rank == 1) {
      for (std::int64_t i = 0; i < v.extent(0); ++i) v(i) *= factor;
    } else {
      for (std::int64_t i = 0; i < v.extent(0); ++i)
        for (std::int64_t j = 0; j < v.extent(1); ++j) v(i, j) *= factor;
    }
  }
}
}  // namespace SPECDEC_HOST_ISA
}  // namespace detail

inline namespace SPECDEC_HOST_ISA {

//! In place: base-2 LSE tensor (rank 1 or 2, fp32, host) -> natural log. O(elements).
template <tensor_like L>
void convert_lse_base2_to_natural(const host&, const L& lse) {
  detail::convert_lse_inplace("specdec::convert_lse_base2_to_natural", lse, 0.6931471805599453f);
}

//! In place: natural-log LSE tensor (rank 1 or 2, fp32, host) -> base 2. O(elements).
template <tensor_like L>
void convert_lse_natural_to_base2(const host&, const L& lse) {
  detail::convert_lse_inplace("specdec::convert_lse_natural_to_base2", lse, 1.4426950408889634f);
}

}  // namespace SPECDEC_HOST_ISA

namespace detail {

//! Params of a merge (n-way or two-way): where the parts live and where the result goes
//! (merge_state.hpp's merge_parts / merge_out, the addressing every merge shares), and the sizes.
//! Both backends consume it as is; the attention backends' merge passes use it too, with fp32
//! partials in (InT = float) and the storage type out.
template <class InT, class OutT = InT>
struct lse_merge_params {
  merge_parts<InT> in;
  merge_out<OutT> out;
  int tokens = 0, heads = 0, head_dim = 0;
};

inline namespace SPECDEC_HOST_ISA {

//! The host backend: one merge_parts_row per (token, head), parallel over tokens, at the level the
//! call dispatches to (core/simd_level.hpp).
template <class T>
void lse_merge_host(const host& policy, const lse_merge_params<T>& p) {
  parallel_for(policy, p.tokens, [&](std::int64_t t) { SPECDEC_ISA_DISPATCH_CALL(merge_parts_heads(p, t)); });
}

//! The element-type check of both lse_merge overloads, written once: one static_assert per argument,
//! each a sentence naming it. OA/LA are o_parts/lse_parts of the n-way merge (OB, LB void) or o_a/lse_a
//! of the two-way one. Both backends take float, half and bfloat16 (the merge needs no tensor cores).
//! Returns true when every type is right, so an entry point instantiates its body only under
//! `if constexpr (check_merge_types<...>())` and a wrong type gives only these messages.
template <class OA, class LA, class OB, class LB, class O, class L>
consteval bool check_merge_types() {
  using T = std::remove_cv_t<O>;
  constexpr bool two_way = !std::is_void_v<OB>;
  constexpr bool out_ok = attention_storage_v<O> && !std::is_const_v<O>;
  constexpr bool lse_out_ok = std::is_same_v<L, float>;
  constexpr bool a_ok = std::is_same_v<std::remove_cv_t<OA>, T>, la_ok = std::is_same_v<std::remove_cv_t<LA>, float>;
  constexpr bool b_ok = !two_way || std::is_same_v<std::remove_cv_t<OB>, T>;
  constexpr bool lb_ok = !two_way || std::is_same_v<std::remove_cv_t<LB>, float>;
  static_assert(out_ok,
                "specdec::lse_merge: out's element type must be non-const float, specdec::half or specdec::bfloat16");
  static_assert(lse_out_ok, "specdec::lse_merge: lse_out's element type must be non-const float");
  static_assert(two_way || a_ok,
                "specdec::lse_merge: o_parts' element type must equal out's element type (mixed storage is not "
                "supported)");
  static_assert(two_way || la_ok, "specdec::lse_merge: lse_parts' element type must be float");
  static_assert(!two_way || a_ok,
                "specdec::lse_merge: o_a's element type must equal out's element type (mixed storage is not "
                "supported)");
  static_assert(!two_way || la_ok, "specdec::lse_merge: lse_a's element type must be float");
  static_assert(b_ok,
                "specdec::lse_merge: o_b's element type must equal out's element type (mixed storage is not "
                "supported)");
  static_assert(lb_ok, "specdec::lse_merge: lse_b's element type must be float");
  return out_ok && lse_out_ok && a_ok && la_ok && b_ok && lb_ok;
}

//! Shape / space / stride checks of the output pair and the fill of the output fields; shared by
//! the n-way and two-way overloads of both backends.
template <class Policy, class T, class O, class L>
void validate_merge_out(std::string_view fn, std::string_view ref_name, const O& out, const L& lse_out,
                        std::int64_t n, std::int64_t h, std::int64_t d, lse_merge_params<T>& p) {
  require_rank<O>(fn, "out", 3);
  require_rank<L>(fn, "lse_out", 2);
  require_policy_memory<Policy>(fn, "out", out);
  require_policy_memory<Policy>(fn, "lse_out", lse_out);
  // n, h >= 0 (the caller's require_shape / require_array); both backends count rows in int.
  // compared before multiplying: the extents of a stride-0 input can be anything up to INT64_MAX
  if (!(n <= INT32_MAX && h <= INT32_MAX && n * h <= INT32_MAX)) [[unlikely]]
    throw_invalid_argument(fn, ref_name, "tokens * heads below 2^31", std::to_string(n) + " x " + std::to_string(h));
  require_shape(fn, "out", out, {n, h, d});
  require_shape(fn, "lse_out", lse_out, {n, h});
  require_unit_inner_stride(fn, "out", out);
  require_unique_elements(fn, "out", out);
  require_unique_elements(fn, "lse_out", lse_out);
  p.out.o = const_cast<T*>(static_cast<const T*>(out.data()));
  p.out.o_stride_token = out.stride(0);
  p.out.o_stride_head = out.stride(1);
  p.out.lse = const_cast<float*>(static_cast<const float*>(lse_out.data()));
  p.out.lse_stride_token = lse_out.stride(0);
  p.out.lse_stride_head = lse_out.stride(1);
  p.tokens = static_cast<int>(n);
  p.heads = static_cast<int>(h);
  p.head_dim = static_cast<int>(d);
}

//! Validates an n-way merge's arguments (types checked by the caller) and fills its params.
template <class Policy, class OP, class LP, class O, class L, class T = std::remove_cv_t<typename O::element_type>>
lse_merge_params<T> validate_merge(std::string_view fn, const OP& o_parts, const LP& lse_parts, const O& out,
                                   const L& lse_out) {
  require_rank<OP>(fn, "o_parts", 4);
  require_rank<LP>(fn, "lse_parts", 3);
  require_policy_memory<Policy>(fn, "o_parts", o_parts);
  require_policy_memory<Policy>(fn, "lse_parts", lse_parts);
  require_array(fn, "o_parts", o_parts);
  const std::int64_t s = o_parts.extent(0), n = o_parts.extent(1), h = o_parts.extent(2), d = o_parts.extent(3);
  require(supported_head_dim(d), fn, "o_parts", "head_dim (extent 3) of 64, 128 or 256", d);
  require(s >= 1 && s <= INT32_MAX, fn, "o_parts", "between 1 and 2^31-1 parts (extent 0)", s);
  require_shape(fn, "lse_parts", lse_parts, {s, n, h});
  require_unit_inner_stride(fn, "o_parts", o_parts);
  lse_merge_params<T> p;
  validate_merge_out<Policy>(fn, "o_parts", out, lse_out, n, h, d, p);
  // out and lse_out are written while the parts are read: each may be exactly part 0 (in place),
  // else apart from every part; and apart from each other and from the other kind of input
  using TP = typename OP::element_type;
  const strided_view<TP, 3> part0(o_parts.data(), {n, h, d}, {o_parts.stride(1), o_parts.stride(2), o_parts.stride(3)});
  const strided_view<typename LP::element_type, 2> lse0(lse_parts.data(), {n, h}, {lse_parts.stride(1), lse_parts.stride(2)});
  require_same_or_apart(fn, "out", out, "o_parts[0]", part0);
  require_same_or_apart(fn, "lse_out", lse_out, "lse_parts[0]", lse0);
  if (s > 1 && n > 0 && h > 0) {  // an empty merge forms no offset pointer (its strides were not checked)
    const strided_view<TP, 4> rest(o_parts.data() + o_parts.stride(0), {s - 1, n, h, d},
                                   {o_parts.stride(0), o_parts.stride(1), o_parts.stride(2), o_parts.stride(3)});
    const strided_view<typename LP::element_type, 3> lse_rest(lse_parts.data() + lse_parts.stride(0), {s - 1, n, h},
                                                              {lse_parts.stride(0), lse_parts.stride(1), lse_parts.stride(2)});
    require_outputs_apart(fn, std::forward_as_tuple("out", out, "lse_out", lse_out),
                          std::forward_as_tuple("o_parts[1..]", rest, "lse_parts[1..]", lse_rest));
  }
  require_disjoint(fn, "out", out, "lse_out", lse_out);
  require_disjoint(fn, "out", out, "lse_parts", lse_parts);
  require_disjoint(fn, "lse_out", lse_out, "o_parts", o_parts);
  p.in.o = static_cast<const T*>(o_parts.data());
  p.in.o_stride_part = o_parts.stride(0);
  p.in.o_stride_token = o_parts.stride(1);
  p.in.o_stride_head = o_parts.stride(2);
  p.in.lse = static_cast<const float*>(lse_parts.data());
  p.in.lse_stride_part = lse_parts.stride(0);
  p.in.lse_stride_token = lse_parts.stride(1);
  p.in.lse_stride_head = lse_parts.stride(2);
  p.in.count = static_cast<int>(s);
  return p;
}

//! Validates a two-way merge's arguments (types checked by the caller) and fills its params.
template <class Policy, class OA, class LA, class OB, class LB, class O, class L,
          class T = std::remove_cv_t<typename O::element_type>>
lse_merge_params<T> validate_merge2(std::string_view fn, const OA& o_a, const LA& lse_a, const OB& o_b,
                                    const LB& lse_b, const O& out, const L& lse_out) {
  require_rank<OA>(fn, "o_a", 3);
  require_rank<OB>(fn, "o_b", 3);
  require_rank<LA>(fn, "lse_a", 2);
  require_rank<LB>(fn, "lse_b", 2);
  require_policy_memory<Policy>(fn, "o_a", o_a);
  require_policy_memory<Policy>(fn, "o_b", o_b);
  require_policy_memory<Policy>(fn, "lse_a", lse_a);
  require_policy_memory<Policy>(fn, "lse_b", lse_b);
  require_array(fn, "o_a", o_a);
  const std::int64_t n = o_a.extent(0), h = o_a.extent(1), d = o_a.extent(2);
  require(supported_head_dim(d), fn, "o_a", "head_dim (extent 2) of 64, 128 or 256", d);
  require_shape(fn, "o_b", o_b, {n, h, d});
  require_shape(fn, "lse_a", lse_a, {n, h});
  require_shape(fn, "lse_b", lse_b, {n, h});
  require_unit_inner_stride(fn, "o_a", o_a);
  require_unit_inner_stride(fn, "o_b", o_b);
  lse_merge_params<T> p;
  validate_merge_out<Policy>(fn, "o_a", out, lse_out, n, h, d, p);
  // out and lse_out are written while the parts are read: each may be exactly one of its inputs
  // (in-place accumulation), else apart from them; and apart from each other and the other kind
  require_same_or_apart(fn, "out", out, "o_a", o_a);
  require_same_or_apart(fn, "out", out, "o_b", o_b);
  require_same_or_apart(fn, "lse_out", lse_out, "lse_a", lse_a);
  require_same_or_apart(fn, "lse_out", lse_out, "lse_b", lse_b);
  require_disjoint(fn, "out", out, "lse_out", lse_out);
  require_disjoint(fn, "out", out, "lse_a", lse_a);
  require_disjoint(fn, "out", out, "lse_b", lse_b);
  require_disjoint(fn, "lse_out", lse_out, "o_a", o_a);
  require_disjoint(fn, "lse_out", lse_out, "o_b", o_b);
  p.in.o = static_cast<const T*>(o_a.data());
  p.in.o_stride_token = o_a.stride(0);
  p.in.o_stride_head = o_a.stride(1);
  p.in.lse = static_cast<const float*>(lse_a.data());
  p.in.lse_stride_token = lse_a.stride(0);
  p.in.lse_stride_head = lse_a.stride(1);
  p.in.o_b = static_cast<const T*>(o_b.data());
  p.in.o_b_stride_token = o_b.stride(0);
  p.in.o_b_stride_head = o_b.stride(1);
  p.in.lse_b = static_cast<const float*>(lse_b.data());
  p.in.lse_b_stride_token = lse_b.stride(0);
  p.in.lse_b_stride_head = lse_b.stride(1);
  p.in.count = 2;
  return p;
}

template <>
struct merge_backend<host> {
  template <class T>
  static void run(const host& policy, const lse_merge_params<T>& p) {
    lse_merge_host(policy, p);
  }
};

}  // namespace SPECDEC_HOST_ISA
}  // namespace detail

inline namespace SPECDEC_HOST_ISA {

//! n-way merge of split partials: o_parts [S, tokens, heads, D] with lse_parts [S, tokens, heads]
//! (natural log) -> out [tokens, heads, D], lse_out [tokens, heads]. Applies Proposition A.1 of
//! LongSpec Appendix A by induction over the S parts. Preconditions: same storage type for o_parts
//! and out (float, half or bfloat16 on both backends: the merge needs no tensor cores), fp32 LSEs,
//! non-const out and lse_out -- element types are checked at compile time, one static_assert
//! sentence per wrong argument (detail::check_merge_types) -- D in {64, 128, 256}, unit inner
//! strides; out/lse_out may alias part 0.
//!   specdec::host: host-accessible memory; parallel over tokens.
//!   specdec::cuda (lse_merge.cuh): device-accessible memory, tokens * heads < 2^31, enqueued on
//!     policy.stream, one warp per (token, head), no scratch.
//! Complexity O(S * tokens * heads * D).
template <execution_policy P, tensor_like OP, tensor_like LP, tensor_like O, tensor_like L>
void lse_merge(const P& policy, const OP& o_parts, const LP& lse_parts, const O& out, const L& lse_out) {
  constexpr std::string_view fn = "specdec::lse_merge";
  if constexpr (detail::check_merge_types<typename OP::element_type, typename LP::element_type, void, void,
                                          typename O::element_type, typename L::element_type>()) {
    detail::validate_policy(fn, policy);
    detail::merge_backend<P>::run(policy, detail::validate_merge<P>(fn, o_parts, lse_parts, out, lse_out));
  }
}

//! Two-way merge (LongSpec Appendix A, Proposition A.1): (o_a, lse_a) and (o_b, lse_b), each
//! [tokens, heads, D] / [tokens, heads], natural-log LSE, -> (out, lse_out). out may alias o_a or
//! o_b and lse_out may alias lse_a or lse_b (in-place accumulation). Both -inf -> out = 0,
//! lse_out = -inf, never NaN. Preconditions and backends as for the n-way overload.
//! Complexity O(tokens * heads * D).
template <execution_policy P, tensor_like OA, tensor_like LA, tensor_like OB, tensor_like LB, tensor_like O,
          tensor_like L>
void lse_merge(const P& policy, const OA& o_a, const LA& lse_a, const OB& o_b, const LB& lse_b, const O& out,
               const L& lse_out) {
  constexpr std::string_view fn = "specdec::lse_merge";
  if constexpr (detail::check_merge_types<typename OA::element_type, typename LA::element_type,
                                          typename OB::element_type, typename LB::element_type,
                                          typename O::element_type, typename L::element_type>()) {
    detail::validate_policy(fn, policy);
    detail::merge_backend<P>::run(policy, detail::validate_merge2<P>(fn, o_a, lse_a, o_b, lse_b, out, lse_out));
  }
}

}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec
