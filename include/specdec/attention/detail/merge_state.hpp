#pragma once
//! \file merge_state.hpp
//! The log-sum-exp rules every attention path shares, host and CUDA alike: how one part's online
//! softmax ends (its normalised O and natural-log LSE) and how parts merge (LongSpec Appendix A,
//! Proposition A.1, n-way). Written once so the empty-part and non-finite cases agree everywhere:
//!  - a part that saw no visible key (softmax sum exactly 0, LSE = -inf) carries no keys: it gets
//!    weight exactly 0 *by selection*, so whatever its O holds (even NaN) cannot leak;
//!  - a NaN or infinite score or value among *visible* keys makes the sum or LSE NaN (or the LSE
//!    +inf), and that propagates to the merged row (NaN max included): never a finite answer
//!    computed as if the part were empty.

#include <math.h>

#include <cstdint>

#include "specdec/core/config.hpp"

namespace specdec::detail {

//! max(a, b) that returns NaN when either is NaN (std::max and fmaxf return the other operand).
SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE float nan_max(float a, float b) noexcept {
  return (a != a || a > b) ? a : b;
}

//! The end of one part's online softmax in base 2 (running max `m2` of the base-2 scores, sum `l`
//! of 2^(s - m2) over its keys): the factor that normalises its accumulated O and its natural-log
//! LSE = ln 2 * (m2 + log2 l). `has_keys` says whether the part had any key this row may see (a
//! cache part always does unless its range is empty; a tree part always does: the row's own
//! token). The best key contributes 2^0 = 1, so l == 0 happens only without keys (the part is
//! `empty`: O is written as 0 and the LSE is -inf) or when every visible score is -inf (an
//! infinite input): then, as in IEEE arithmetic (exp(-inf - (-inf)) = NaN), inv_l and lse are NaN
//! rather than a finite answer as if the part had no keys. A NaN l gives NaN as well.
struct softmax_part_end {
  float inv_l = 0.0f;
  float lse = -INFINITY;
  bool empty = true;
};
SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE softmax_part_end end_softmax_base2(float m2, float l, bool has_keys) noexcept {
  if (l == 0.0f) {
    if (!has_keys) return {};
    return {NAN, NAN, false};
  }
  return {1.0f / l, 0.6931471805599453f * (m2 + log2f(l)), false};
}

//! Weights of an n-way merge of one query row's parts: pass 1 `observe`s every part's LSE, pass 2
//! `add`s them, then part p contributes `weight(lse_p)` x O_p and the merged LSE is `lse()`:
//!   LSE = max + log sum_p exp(LSE_p - max),   O = sum_p exp(LSE_p - LSE) O_p.
//! Parts with LSE = -inf get weight exactly 0 (selected out, never 0 x O_p); when every part is
//! -inf the row is `empty` (O = 0, LSE = -inf). A NaN LSE makes every weight and the LSE NaN.
struct lse_merge_weights {
  float max = -INFINITY;
  float sum = 0.0f;
  float inv = 0.0f;

  SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE void observe(float lse) noexcept { max = nan_max(max, lse); }
  [[nodiscard]] SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE bool empty() const noexcept { return max == -INFINITY; }
  //! exp(lse - max), exactly 0 for a part without keys. Valid after every observe.
  [[nodiscard]] SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE float unnormalised(float lse) const noexcept {
    return lse == -INFINITY ? 0.0f : expf(lse - max);
  }
  SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE void add(float lse) noexcept { sum += unnormalised(lse); }
  //! Call once after every add (and only for a non-empty row).
  SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE void finish() noexcept { inv = 1.0f / sum; }
  //! The weight of a part in the merged O (after finish). 0 for a part without keys.
  [[nodiscard]] SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE float weight(float lse) const noexcept {
    return unnormalised(lse) * inv;
  }
  //! The merged natural-log LSE (after every add): -inf for an empty row.
  [[nodiscard]] SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE float lse() const noexcept {
    return empty() ? -INFINITY : max + logf(sum);
  }
};

//! Where the parts of a merge live (the one part-addressing rule of every merge, host and CUDA):
//! part q of row (token t, head h) has its head_dim values at
//!   o + q * o_stride_part + t * o_stride_token + h * o_stride_head
//! and its natural-log LSE at the same place in `lse` with the lse_* strides. A two-way merge of
//! two separate tensors gives the second one in o_b / lse_b (part 1 then lives there, any
//! address). The public lse_merge fills it from its tensors; the attention backends describe their
//! fp32 partials in the workspace with it.
template <class T>
struct merge_parts {
  const T* o = nullptr;
  std::int64_t o_stride_part = 0, o_stride_token = 0, o_stride_head = 0;
  const float* lse = nullptr;
  std::int64_t lse_stride_part = 0, lse_stride_token = 0, lse_stride_head = 0;
  int count = 0;  //!< number of parts
  const T* o_b = nullptr;
  std::int64_t o_b_stride_token = 0, o_b_stride_head = 0;
  const float* lse_b = nullptr;
  std::int64_t lse_b_stride_token = 0, lse_b_stride_head = 0;

  //! The parts of row (t, h), addressed once (the one addressing rule; host and CUDA merges walk
  //! parts through it): part 0's and part 1's addresses are computed up front, so each further part
  //! costs an add (what the CUDA merge's inner loop needs).
  struct row_cursor {
    const T* o0;
    const T* o1;
    const float* lse0;
    const float* lse1;
    std::int64_t o_step, lse_step;
    //! Part q's values.
    [[nodiscard]] SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE const T* row(int q) const noexcept {
      return q == 1 ? o1 : o0 + q * o_step;
    }
    //! Part q's LSE.
    [[nodiscard]] SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE float lse(int q) const noexcept {
      return q == 1 ? *lse1 : lse0[q * lse_step];
    }
  };
  [[nodiscard]] SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE row_cursor at(std::int64_t t, std::int64_t h) const noexcept {
    const T* const r0 = o + t * o_stride_token + h * o_stride_head;
    const float* const l0 = lse + t * lse_stride_token + h * lse_stride_head;
    if (count < 2) return {r0, r0, l0, l0, o_stride_part, lse_stride_part};  // no part 1 to address
    return {r0,
            o_b != nullptr ? o_b + t * o_b_stride_token + h * o_b_stride_head : r0 + o_stride_part,
            l0,
            lse_b != nullptr ? lse_b + t * lse_b_stride_token + h * lse_b_stride_head : l0 + lse_stride_part,
            o_stride_part,
            lse_stride_part};
  }
};

//! Where a merge writes: row (t, h)'s head_dim values at o + t * o_stride_token + h * o_stride_head
//! and its LSE at lse + t * lse_stride_token + h * lse_stride_head.
template <class T>
struct merge_out {
  T* o = nullptr;
  std::int64_t o_stride_token = 0, o_stride_head = 0;
  float* lse = nullptr;
  std::int64_t lse_stride_token = 0, lse_stride_head = 0;

  [[nodiscard]] SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE T* row(std::int64_t t, std::int64_t h) const noexcept {
    return o + t * o_stride_token + h * o_stride_head;
  }
  [[nodiscard]] SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE float* lse_at(std::int64_t t, std::int64_t h) const noexcept {
    return lse + t * lse_stride_token + h * lse_stride_head;
  }
};

//! Whether a storage element is NaN or infinite, from its bits (float, IEEE half, bfloat16): the
//! test the tree kernels use to find value rows that need the masked-key correction. `Bits` is the
//! unsigned integer of the storage width.
template <class Bits>
SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE constexpr bool nonfinite_bits(Bits b, Bits exponent_mask) noexcept {
  return (b & exponent_mask) == exponent_mask;
}

}  // namespace specdec::detail
