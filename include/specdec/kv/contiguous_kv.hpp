#pragma once
//! \file contiguous_kv.hpp
//! Contiguous KV cache: every request owns `capacity` token slots in one dense buffer per K and V.
//!   NHD: [requests, capacity, kv_heads, head_dim]   (token-major; what most engines use for decode)
//!   HND: [requests, kv_heads, capacity, head_dim]   (head-major)

#include <cstdint>

#include "specdec/core/config.hpp"
#include "specdec/core/error.hpp"
#include "specdec/kv/kv_layout.hpp"

namespace specdec {

//! Order of the dimensions inside one request's slab.
enum class kv_order : std::uint8_t { nhd, hnd };

//! Dense per-request KV slabs; `lengths[r]` tokens of request r are valid.
template <class T, kv_order Order = kv_order::nhd>
struct contiguous_kv {
  using value_type = T;
  static constexpr kv_order order = Order;

  T* k = nullptr;                        //!< K buffer, shape per Order
  T* v = nullptr;                        //!< V buffer, same shape
  const std::int32_t* lengths = nullptr; //!< [num_requests] valid tokens per request
  int requests = 0;
  int max_tokens = 0;                    //!< slots per request (the capacity)
  int kv_heads = 0;
  int dim = 0;
  memory_space where = memory_space::host;

  SPECDEC_HOST_DEVICE int num_requests() const noexcept { return requests; }
  SPECDEC_HOST_DEVICE int num_kv_heads() const noexcept { return kv_heads; }
  SPECDEC_HOST_DEVICE int head_dim() const noexcept { return dim; }
  SPECDEC_HOST_DEVICE int length(int r) const noexcept { return lengths[r]; }
  SPECDEC_HOST_DEVICE int capacity(int) const noexcept { return max_tokens; }
  SPECDEC_HOST_DEVICE memory_space space() const noexcept { return where; }

  //! Element offset of (request, token, head) row.
  SPECDEC_HOST_DEVICE std::int64_t row_offset(int r, int t, int h) const noexcept {
    if constexpr (Order == kv_order::nhd)
      return ((static_cast<std::int64_t>(r) * max_tokens + t) * kv_heads + h) * dim;
    else
      return ((static_cast<std::int64_t>(r) * kv_heads + h) * max_tokens + t) * dim;
  }
  SPECDEC_HOST_DEVICE T* k_row(int r, int t, int h) const noexcept { return k + row_offset(r, t, h); }
  SPECDEC_HOST_DEVICE T* v_row(int r, int t, int h) const noexcept { return v + row_offset(r, t, h); }
  //! Distance in elements between consecutive tokens of one (request, head).
  SPECDEC_HOST_DEVICE std::int64_t token_stride() const noexcept {
    return Order == kv_order::nhd ? static_cast<std::int64_t>(kv_heads) * dim : dim;
  }
};

//! Checks pointers, geometry and (for host-accessible memory) every length against the capacity.
inline namespace SPECDEC_HOST_ISA {  // on every entry point's path: see core/isa.hpp
template <class T, kv_order O>
void validate_layout(const contiguous_kv<T, O>& l, std::string_view function, std::string_view argument) {
  require(l.requests >= 0, function, argument, "requests >= 0", l.requests);
  require(l.max_tokens >= 0, function, argument, "max_tokens >= 0", l.max_tokens);
  require(l.kv_heads > 0, function, argument, "kv_heads > 0", l.kv_heads);
  require(l.dim > 0, function, argument, "dim > 0", l.dim);
  const bool empty = static_cast<std::int64_t>(l.requests) * l.max_tokens == 0;
  require(empty || (l.k != nullptr && l.v != nullptr), function, argument, "non-null k and v buffers", "nullptr");
  require(l.requests == 0 || l.lengths != nullptr, function, argument, "non-null lengths", "nullptr");
  if (host_accessible(l.where))
    for (int r = 0; r < l.requests; ++r)
      if (!(l.lengths[r] >= 0 && l.lengths[r] <= l.max_tokens))  // message built only on failure (no allocation)
        throw_invalid_argument(function, argument,
                               "every lengths[r] in [0, max_tokens = " + std::to_string(l.max_tokens) + "]", l.lengths[r]);
}
}  // namespace SPECDEC_HOST_ISA

static_assert(kv_layout<contiguous_kv<float>> && check_kv_layout<contiguous_kv<float>>());
static_assert(writable_kv_layout<contiguous_kv<float, kv_order::hnd>>);
static_assert(kv_layout<contiguous_kv<const float>> && !writable_kv_layout<contiguous_kv<const float>>);

}  // namespace specdec
