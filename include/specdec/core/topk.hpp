#pragma once
//! \file topk.hpp
//! Top-k selection over a vocabulary row in O(V): one streaming pass with a size-k min-heap, not a
//! full sort. Shared by the tree builders (per-node candidate children) and sampling (top-k filter).
//!
//! Order (deterministic): larger value first; equal values -> lower index (token id) first. NaN
//! ranks below every number, -inf included, so NaNs are only returned when fewer than k non-NaN
//! values exist.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "specdec/core/config.hpp"
#include "specdec/core/detail/bits.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/simd_level.hpp"

namespace specdec {

namespace detail {

template <class T>
SPECDEC_FORCEINLINE bool topk_isnan(T v) noexcept {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else if constexpr (std::is_convertible_v<T, float> && !std::is_integral_v<T>) {
    // half, bfloat16: NaN after widening (exact), so NaN ranks last for them too; a `false` here
    // broke the order (a NaN ranked above numbers, and std::sort got an invalid comparator)
    const float f = static_cast<float>(v);
    return f != f;
  } else {
    return false;
  }
}

//! a ranks strictly before b in the top-k order.
template <class T>
SPECDEC_FORCEINLINE bool topk_before(T av, std::int32_t ai, T bv, std::int32_t bi) noexcept {
  const bool an = topk_isnan(av), bn = topk_isnan(bv);
  if (an != bn) return bn;  // the non-NaN one ranks first
  if (!an && av != bv) return av > bv;
  return ai < bi;
}

//! One unsigned word per float whose order is topk's value order: a larger word ranks first, equal
//! words are equal values (ties: lower index first). NaN is 0, below -inf (0x007FFFFF); -0 is +0.
//! Used where a selection compares integers instead of floats (topk_batch's radix select, the
//! partial KV cache's ranking).
//! Computed on the bits alone, so -ffast-math / --use_fast_math (which flush denormals in float
//! compares and assume no NaN) cannot change it.
[[nodiscard]] SPECDEC_HOST_DEVICE constexpr std::uint32_t topk_key(float v) noexcept {
  const std::uint32_t u = float_bits(v), magnitude = u & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return 0u;          // NaN
  if (magnitude == 0u) return 0x80000000u;         // -0 and +0
  return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}

template <class T>
struct topk_entry {
  T value;
  std::int32_t index;
};

}  // namespace detail
}  // namespace specdec

// The kernels at this file's flags and, with run-time dispatch (core/simd_level.hpp), once per level.
#define SPECDEC_ISA_BODIES "specdec/core/detail/topk.inl"
#include "specdec/core/detail/isa_family.inl"
#undef SPECDEC_ISA_BODIES

namespace specdec {
namespace detail {
inline namespace SPECDEC_HOST_ISA {
//! True if some x[i], i < n, is NaN (topk ranks NaN last; callers that must reject NaN ask first).
inline bool any_nan(const float* x, std::size_t n) noexcept { SPECDEC_ISA_DISPATCH_RETURN(any_nan_kernel(x, n)); }
}  // namespace SPECDEC_HOST_ISA
}  // namespace detail

//! Reusable scratch for topk (holds the size-k heap), so repeated calls do not allocate.
template <class T>
struct topk_workspace {
  std::vector<detail::topk_entry<T>> heap;
};

// topk's code depends on the file's flags and dispatch (topk.inl): in the ISA namespace.
inline namespace SPECDEC_HOST_ISA {

//! Writes the indices (and, if `out_values` is non-empty, the values) of the k best entries of
//! `values` into the first k slots of `out_indices`, best first (order above).
//! Preconditions: 0 <= k <= values.size() <= INT32_MAX, out_indices.size() >= k, out_values empty
//! or of size >= k. Complexity: O(V + k log k log V) — elements that cannot enter the heap cost one
//! comparison (checked 32 at a time so the compiler vectorizes the common rejection path); the
//! heap is touched only O(k log(V/k)) times for values in random order, O(V log k) worst case.
template <class T>
void topk(std::span<const T> values, int k, std::span<std::int32_t> out_indices, std::span<T> out_values,
          topk_workspace<T>& ws) {
  constexpr std::string_view fn = "specdec::topk";
  require(values.size() <= static_cast<std::size_t>(INT32_MAX), fn, "values.size()", "<= INT32_MAX", values.size());
  const auto n = static_cast<std::int32_t>(values.size());
  require_in_range(fn, "k", k, 0, n);
  // Messages are formatted only on failure: topk runs once per vocabulary row.
  if (out_indices.size() < static_cast<std::size_t>(k)) [[unlikely]]
    throw_invalid_argument(fn, "out_indices.size()", ">= k = " + std::to_string(k), out_indices.size());
  if (!out_values.empty() && out_values.size() < static_cast<std::size_t>(k)) [[unlikely]]
    throw_invalid_argument(fn, "out_values.size()", "0 or >= k = " + std::to_string(k), out_values.size());
  if (k == 0) return;
  auto& heap = ws.heap;
  heap.resize(static_cast<std::size_t>(k));
  SPECDEC_ISA_DISPATCH_CALL(topk_select_kernel(values.data(), n, k, heap.data()));
  for (int j = 0; j < k; ++j) {
    out_indices[static_cast<std::size_t>(j)] = heap[static_cast<std::size_t>(j)].index;
    if (!out_values.empty()) out_values[static_cast<std::size_t>(j)] = heap[static_cast<std::size_t>(j)].value;
  }
}

//! Convenience overload: returns the k best indices, best first. O(V) as above; allocates the result.
template <class T>
[[nodiscard]] std::vector<std::int32_t> topk_indices(std::span<const T> values, int k) {
  std::vector<std::int32_t> idx(static_cast<std::size_t>(std::max(k, 0)));
  topk_workspace<T> ws;
  topk<T>(values, k, idx, {}, ws);
  return idx;
}

}  // namespace SPECDEC_HOST_ISA

//! Reference: full stable sort by the same order. O(V log V); tests compare topk against it.
template <class T>
[[nodiscard]] std::vector<std::int32_t> topk_indices_by_sort(std::span<const T> values, int k) {
  std::vector<std::int32_t> idx(values.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<std::int32_t>(i);
  std::sort(idx.begin(), idx.end(),
            [&](std::int32_t a, std::int32_t b) { return detail::topk_before(values[a], a, values[b], b); });
  idx.resize(static_cast<std::size_t>(std::clamp<std::int64_t>(k, 0, static_cast<std::int64_t>(idx.size()))));
  return idx;
}

}  // namespace specdec
