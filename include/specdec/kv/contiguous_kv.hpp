#pragma once
//! \file contiguous_kv.hpp
//! Contiguous KV cache: every request owns `capacity` token slots in one dense buffer per K and V.
//!   NHD: [requests, capacity, kv_heads, head_dim]   (token-major; what most engines use for decode)
//!   HND: [requests, kv_heads, capacity, head_dim]   (head-major)
//! A mapping (contiguous_mapping) plus the shipped cache type (kv/kv_cache.hpp).

#include <cstdint>
#include <string>

#include "specdec/core/config.hpp"
#include "specdec/core/error.hpp"
#include "specdec/kv/kv_cache.hpp"

namespace specdec {

//! Order of the dimensions inside one request's slab.
enum class kv_order : std::uint8_t { nhd, hnd };

//! Dense per-request slabs of `max_tokens` slots; `lengths[r]` tokens of request r are valid.
template <kv_order Order = kv_order::nhd>
struct contiguous_mapping {
  static constexpr kv_order order = Order;

  const std::int32_t* lengths = nullptr;  //!< [num_requests] valid tokens per request
  int max_tokens = 0;                     //!< slots per request (the capacity)

  SPECDEC_HOST_DEVICE int length(int r) const noexcept { return lengths[r]; }
  SPECDEC_HOST_DEVICE int capacity(int) const noexcept { return max_tokens; }
  SPECDEC_HOST_DEVICE std::int64_t offset(int r, int t, int h, const kv_geometry& g) const noexcept {
    if constexpr (Order == kv_order::nhd)
      return ((static_cast<std::int64_t>(r) * max_tokens + t) * g.num_kv_heads + h) * g.head_dim;
    else
      return ((static_cast<std::int64_t>(r) * g.num_kv_heads + h) * max_tokens + t) * g.head_dim;
  }
  //! Distance in elements between consecutive tokens of one (request, head).
  SPECDEC_HOST_DEVICE std::int64_t token_stride(const kv_geometry& g) const noexcept {
    return Order == kv_order::nhd ? static_cast<std::int64_t>(g.num_kv_heads) * g.head_dim : g.head_dim;
  }
  //! Elements of k (and of v) the offsets reach, and the arrays read (kv_cache::visit_memory).
  //! Geometry validated first (validate_kv_mapping: the product fits int64).
  std::int64_t required_span_size(const kv_geometry& g) const noexcept {
    return static_cast<std::int64_t>(g.num_requests) * max_tokens * g.num_kv_heads * g.head_dim;
  }
  template <class F>
  void visit_arrays(const kv_geometry& g, bool, F&& f) const {
    f("cache.mapping.lengths", lengths, g.num_requests);
  }
};

//! Checks max_tokens (and that the slabs' element count fits int64), the lengths pointer and
//! (host-accessible) every length against max_tokens.
inline namespace SPECDEC_HOST_ISA {  // on every entry point's path: see core/isa.hpp
template <kv_order O>
void validate_kv_mapping(const contiguous_mapping<O>& m, const kv_geometry& g, memory_space where,
                         std::string_view function, std::string_view argument) {
  require(m.max_tokens >= 0, function, argument, "max_tokens >= 0", m.max_tokens);
  // offset() addresses [requests, max_tokens, kv_heads, head_dim] elements in int64
  (void)checked_size_product(function, argument, {g.num_requests, m.max_tokens, g.num_kv_heads, g.head_dim});
  require(g.num_requests == 0 || m.lengths != nullptr, function, argument, "non-null lengths", "nullptr");
  if (host_accessible(where))
    for (int r = 0; r < g.num_requests; ++r)
      if (!(m.lengths[r] >= 0 && m.lengths[r] <= m.max_tokens))  // message built only on failure (no allocation)
        throw_invalid_argument(function, argument,
                               "every lengths[r] in [0, max_tokens = " + std::to_string(m.max_tokens) + "]",
                               m.lengths[r]);
}
}  // namespace SPECDEC_HOST_ISA

//! Dense per-request KV slabs (kv_cache over contiguous_mapping), constructed as before the mapping
//! split: `{k, v, lengths, requests, max_tokens, kv_heads, head_dim[, space]}`.
template <class T, kv_order Order = kv_order::nhd>
struct contiguous_kv : kv_cache<T, contiguous_mapping<Order>> {
  static constexpr kv_order order = Order;

  contiguous_kv() = default;
  SPECDEC_HOST_DEVICE contiguous_kv(T* k, T* v, const std::int32_t* lengths, int requests, int max_tokens,
                                    int kv_heads, int dim, memory_space where = memory_space::host) noexcept
      : kv_cache<T, contiguous_mapping<Order>>{k, v, {lengths, max_tokens}, requests, kv_heads, dim, where} {}

  //! Distance in elements between consecutive tokens of one (request, head).
  SPECDEC_HOST_DEVICE std::int64_t token_stride() const noexcept {
    return this->mapping.token_stride(this->geometry());
  }
};

static_assert(kv_layout<contiguous_kv<float>> && check_kv_layout<contiguous_kv<float>>());
static_assert(writable_kv_layout<contiguous_kv<float, kv_order::hnd>>);
static_assert(kv_layout<contiguous_kv<const float>> && !writable_kv_layout<contiguous_kv<const float>>);

}  // namespace specdec
