#pragma once
//! \file paged_kv.hpp
//! Paged KV cache, the layout vLLM and FlashInfer use: a pool of fixed-size pages
//! [num_pages, page_size, kv_heads, head_dim] for K and for V, and for each request a list of pages
//! given CSR-style (page_indptr[r] .. page_indptr[r+1] index into page_indices).

#include <cstdint>
#include <string>

#include "specdec/core/config.hpp"
#include "specdec/core/error.hpp"
#include "specdec/kv/kv_layout.hpp"

namespace specdec {

//! Paged KV pool. Token t of request r lives in page page_indices[page_indptr[r] + t / page_size],
//! slot t % page_size.
template <class T>
struct paged_kv {
  using value_type = T;

  T* k_pages = nullptr;                      //!< [num_pages, page_size, kv_heads, head_dim]
  T* v_pages = nullptr;                      //!< same shape
  const std::int32_t* page_indptr = nullptr; //!< [requests + 1], non-decreasing, page_indptr[0] = 0
  const std::int32_t* page_indices = nullptr;//!< [page_indptr[requests]], each in [0, num_pages)
  const std::int32_t* lengths = nullptr;     //!< [requests], tokens valid per request
  int requests = 0;
  int num_pages = 0;
  int page_size = 0;
  int kv_heads = 0;
  int dim = 0;
  memory_space where = memory_space::host;

  SPECDEC_HOST_DEVICE int num_requests() const noexcept { return requests; }
  SPECDEC_HOST_DEVICE int num_kv_heads() const noexcept { return kv_heads; }
  SPECDEC_HOST_DEVICE int head_dim() const noexcept { return dim; }
  SPECDEC_HOST_DEVICE int length(int r) const noexcept { return lengths[r]; }
  //! Tokens the request's pages can hold.
  SPECDEC_HOST_DEVICE int capacity(int r) const noexcept { return (page_indptr[r + 1] - page_indptr[r]) * page_size; }
  SPECDEC_HOST_DEVICE memory_space space() const noexcept { return where; }

  SPECDEC_HOST_DEVICE std::int64_t row_offset(int r, int t, int h) const noexcept {
    const std::int64_t page = page_indices[page_indptr[r] + t / page_size];
    return ((page * page_size + t % page_size) * kv_heads + h) * static_cast<std::int64_t>(dim);
  }
  SPECDEC_HOST_DEVICE T* k_row(int r, int t, int h) const noexcept { return k_pages + row_offset(r, t, h); }
  SPECDEC_HOST_DEVICE T* v_row(int r, int t, int h) const noexcept { return v_pages + row_offset(r, t, h); }
};

//! Checks geometry and, for host-accessible index arrays, page_indptr (0 first, non-decreasing), each
//! request's capacity (pages x page_size, computed in 64 bits) fitting the int token index, lengths
//! within capacity and page indices in range. validate_kv_layout adds the generic checks.
inline namespace SPECDEC_HOST_ISA {  // on every entry point's path: see core/isa.hpp
template <class T>
void validate_layout(const paged_kv<T>& l, std::string_view function, std::string_view argument) {
  require(l.requests >= 0, function, argument, "requests >= 0", l.requests);
  require(l.num_pages >= 0, function, argument, "num_pages >= 0", l.num_pages);
  require(l.page_size > 0, function, argument, "page_size > 0", l.page_size);
  require(l.kv_heads > 0, function, argument, "kv_heads > 0", l.kv_heads);
  require(l.dim > 0, function, argument, "dim > 0", l.dim);
  require(l.num_pages == 0 || (l.k_pages != nullptr && l.v_pages != nullptr), function, argument,
          "non-null k_pages and v_pages", "nullptr");
  require(l.page_indptr != nullptr, function, argument, "non-null page_indptr", "nullptr");
  require(l.requests == 0 || l.lengths != nullptr, function, argument, "non-null lengths", "nullptr");
  if (!host_accessible(l.where)) return;
  detail::validate_indptr(function, argument, "page_indptr", l.page_indptr, l.requests);
  for (int r = 0; r < l.requests; ++r) {
    // Messages are built only on failure, so validating on every call does not allocate.
    // capacity() multiplies in int: reject any request whose pages hold more tokens than an int indexes.
    const std::int64_t pages = l.page_indptr[r + 1] - l.page_indptr[r];
    if (pages * l.page_size > INT32_MAX) [[unlikely]]
      throw_invalid_argument(function, argument,
                             "pages x page_size <= 2^31 - 1 tokens per request (request " + std::to_string(r) + ": " +
                                 std::to_string(pages) + " pages of " + std::to_string(l.page_size) + ")",
                             pages * l.page_size);
    if (!(l.lengths[r] >= 0 && l.lengths[r] <= l.capacity(r)))
      throw_invalid_argument(function, argument,
                             "lengths[" + std::to_string(r) + "] in [0, " + std::to_string(l.capacity(r)) +
                                 "] (pages x page_size)",
                             l.lengths[r]);
  }
  require(l.requests == 0 || l.page_indptr[l.requests] == 0 || l.page_indices != nullptr, function, argument,
          "non-null page_indices", "nullptr");
  for (int i = 0; i < l.page_indptr[l.requests]; ++i)
    if (!(l.page_indices[i] >= 0 && l.page_indices[i] < l.num_pages))
      throw_invalid_argument(function, argument, "every page index in [0, num_pages = " + std::to_string(l.num_pages) + ")",
                             l.page_indices[i]);
}
}  // namespace SPECDEC_HOST_ISA

static_assert(kv_layout<paged_kv<float>> && writable_kv_layout<paged_kv<float>>);

}  // namespace specdec
