#pragma once
//! \file topk_batch.hpp
//! topk_batch: the k best entries of every row of a float [rows, n] tensor, best first, in topk's
//! order (core/topk.hpp: larger value first, equal values by lower index, NaN below every number,
//! -0 equal to +0). The form a GPU engine calls: a batch of rows (logits rows for a top-k filter,
//! tree candidates, TokenSwift importance scores) in one launch.
//!   specdec::host: topk per row on the policy's threads.
//!   specdec::cuda (needs core/topk_batch.cuh and nvcc): one thread block per row. A radix select
//!   finds the k-th key in four passes of 256-bin histograms over the row (each key one 32-bit
//!   unsigned word whose order is topk's: topk_key), the entries above it and the lowest-index ties
//!   are gathered (a CUB block scan keeps the ties in index order), and a CUB block radix sort orders
//!   the k of them by (key, index). k <= 1024 there (the sort is in shared memory).
//! The selection logic (topk_key, topk_digit_pick) is shared by the kernel and its serial host twin
//! (tests/core/test_topk_batch.cpp), which is checked against the sort-based reference.

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "specdec/core/config.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/core/thread_pool.hpp"
#include "specdec/core/topk.hpp"

namespace specdec {
namespace detail {

//! Largest k of topk_batch under specdec::cuda (its block sort holds 1024 keys).
inline constexpr int topk_batch_max_k_device = 1024;

//! One radix-select step: hist[d] counts the entries whose key matches the prefix so far and has
//! digit d here; `need` (>= 1) entries are still to be chosen among them. Returns the digit of the
//! need-th largest key and lowers `need` by the entries with larger digits (all chosen).
[[nodiscard]] SPECDEC_HOST_DEVICE inline int topk_digit_pick(const std::int32_t* hist, std::int32_t& need) noexcept {
  std::int32_t above = 0;
  for (int d = 255; d > 0; --d) {
    if (above + hist[d] >= need) {
      need -= above;
      return d;
    }
    above += hist[d];
  }
  need -= above;
  return 0;
}

//! The arrays of one topk_batch call (a kernel parameter).
struct topk_batch_args {
  const float* values = nullptr;
  std::int64_t rows = 0, n = 0, value_stride = 0;
  int k = 0;
  std::int32_t* out_indices = nullptr;
  std::int64_t index_stride = 0;
  float* out_values = nullptr;
  std::int64_t out_value_stride = 0;
};

//! The seam between topk_batch and its backends: static void run(const Policy&, const topk_batch_args&).
//! The host backend is below, the cuda one in core/topk_batch.cuh.
SPECDEC_BACKEND_SEAM(topk_batch_backend, "topk_batch", "specdec/core/topk_batch.cuh");

template <>
struct topk_batch_backend<host> {
  static void run(const host& policy, const topk_batch_args& a) {
    parallel_for(policy, a.rows, [&](std::int64_t r) {
      thread_local topk_workspace<float> ws;
      const auto k = static_cast<std::size_t>(a.k);
      topk<float>(std::span<const float>(a.values + r * a.value_stride, static_cast<std::size_t>(a.n)), a.k,
                  std::span<std::int32_t>(a.out_indices + r * a.index_stride, k),
                  std::span<float>(a.out_values + r * a.out_value_stride, k), ws);
    });
  }
};

}  // namespace detail

//! The k best entries of each row of `values` (float [rows, n], unit inner stride) into
//! `out_indices` (int32 [rows, k]) and `out_values` (float [rows, k]), best first, in topk's order
//! (see the file comment). 0 <= k <= n; under specdec::cuda k <= 1024 as well. Validation (shapes,
//! strides, memory spaces, k) on the host; throws specdec::invalid_argument. specdec::cuda enqueues
//! one kernel on policy.stream without synchronisation (graph-capturable).
//! Complexity: host O(rows x (n + k log k log n)); cuda O(n) reads of each row per radix pass (4).
template <execution_policy Policy, tensor_like Values, tensor_like Indices, tensor_like OutValues>
void topk_batch(const Policy& policy, const Values& values_in, int k, const Indices& out_indices_in,
                const OutValues& out_values_in) {
  constexpr std::string_view fn = "specdec::topk_batch";
  static_assert(Values::rank == 2 && std::is_same_v<std::remove_cv_t<typename Values::element_type>, float>,
                "specdec::topk_batch: values must be a rank-2 tensor of float [rows, n]");
  static_assert(Indices::rank == 2 && std::is_same_v<typename Indices::element_type, std::int32_t>,
                "specdec::topk_batch: out_indices must be a writable rank-2 tensor of int32 [rows, k]");
  static_assert(OutValues::rank == 2 && std::is_same_v<typename OutValues::element_type, float>,
                "specdec::topk_batch: out_values must be a writable rank-2 tensor of float [rows, k]");
  const auto values = as_view(values_in);
  const auto out_indices = as_view(out_indices_in);
  const auto out_values = as_view(out_values_in);
  require_policy_memory<Policy>(fn, "values", values);
  require_policy_memory<Policy>(fn, "out_indices", out_indices);
  require_policy_memory<Policy>(fn, "out_values", out_values);
  require_array(fn, "values", values);  // non-negative extents, non-null data when non-empty, addressable
  const std::int64_t rows = values.extent(0), n = values.extent(1);
  require(n <= INT32_MAX, fn, "values", "at most 2^31 - 1 entries per row (extent 1)", n);
  require_in_range(fn, "k", k, 0, static_cast<int>(n));
  if constexpr (on_device_v<Policy>)
    require(k <= detail::topk_batch_max_k_device, fn, "k",
            "at most " + std::to_string(detail::topk_batch_max_k_device) + " under specdec::cuda", k);
  require_shape(fn, "out_indices", out_indices, {rows, k});
  require_shape(fn, "out_values", out_values, {rows, k});
  require_unit_inner_stride(fn, "values", values);
  require_unit_inner_stride(fn, "out_indices", out_indices);
  require_unit_inner_stride(fn, "out_values", out_values);
  require_unique_elements(fn, "out_indices", out_indices);
  require_unique_elements(fn, "out_values", out_values);
  require_outputs_apart(fn, std::forward_as_tuple("out_indices", out_indices, "out_values", out_values),
                        std::forward_as_tuple("values", values));
  if (rows == 0 || k == 0) return;
  require(out_indices.data() != nullptr && out_values.data() != nullptr, fn, "out_indices", "non-null outputs",
          "nullptr");
  detail::topk_batch_args a;
  a.values = values.data(), a.rows = rows, a.n = n, a.value_stride = values.stride(0), a.k = k;
  a.out_indices = out_indices.data(), a.index_stride = out_indices.stride(0);
  a.out_values = out_values.data(), a.out_value_stride = out_values.stride(0);
  detail::topk_batch_backend<Policy>::run(policy, a);
}

}  // namespace specdec
