#pragma once
//! \file paged_kv.hpp
//! Paged KV cache in FlashInfer's CSR form: a pool of fixed-size pages
//! [num_pages, page_size, kv_heads, head_dim] for K and for V, and for each request a list of pages
//! given CSR-style (page_indptr[r] .. page_indptr[r+1] index into page_indices). A mapping
//! (paged_mapping) plus the shipped cache type (kv/kv_cache.hpp). vLLM's block-table form of the same
//! pool is kv/block_table_kv.hpp.

#include <cstdint>
#include <string>

#include "specdec/core/config.hpp"
#include "specdec/core/error.hpp"
#include "specdec/kv/kv_cache.hpp"

namespace specdec {

//! Token t of request r lives in page page_indices[page_indptr[r] + t / page_size], slot t % page_size.
struct paged_mapping {
  const std::int32_t* page_indptr = nullptr;   //!< [requests + 1], non-decreasing, page_indptr[0] = 0
  const std::int32_t* page_indices = nullptr;  //!< [page_indptr[requests]], each in [0, num_pages)
  const std::int32_t* lengths = nullptr;       //!< [requests], tokens valid per request
  int num_pages = 0;
  int page_size = 0;

  SPECDEC_HOST_DEVICE int length(int r) const noexcept { return lengths[r]; }
  //! Tokens the request's pages can hold.
  SPECDEC_HOST_DEVICE int capacity(int r) const noexcept { return (page_indptr[r + 1] - page_indptr[r]) * page_size; }
  SPECDEC_HOST_DEVICE std::int64_t offset(int r, int t, int h, const kv_geometry& g) const noexcept {
    return pooled_row_offset(page_indices[page_indptr[r] + t / page_size], page_size, t % page_size, h, g);
  }
  //! Elements of each pool the offsets reach, and the arrays read (kv_cache::visit_memory; page_indices
  //! only when `readable`: its size is page_indptr[requests]). Geometry validated first.
  std::int64_t required_span_size(const kv_geometry& g) const noexcept {
    return static_cast<std::int64_t>(num_pages) * page_size * g.num_kv_heads * g.head_dim;
  }
  template <class F>
  void visit_arrays(const kv_geometry& g, bool readable, F&& f) const {
    f("cache.mapping.page_indptr", page_indptr, std::int64_t{g.num_requests} + 1);
    f("cache.mapping.lengths", lengths, g.num_requests);
    // size 0 where knowing it would take a read (unreadable memory, or no page_indptr)
    f("cache.mapping.page_indices", page_indices, readable && page_indptr != nullptr ? page_indptr[g.num_requests] : 0);
  }
};

//! Checks sizes and, for host-accessible index arrays, page_indptr (0 first, non-decreasing), each
//! request's capacity (pages x page_size, computed in 64 bits) fitting the int token index, lengths
//! within capacity and page indices in range. kv_cache and validate_kv_layout add the generic checks.
inline namespace SPECDEC_HOST_ISA {  // on every entry point's path: see core/isa.hpp
inline void validate_kv_mapping(const paged_mapping& m, const kv_geometry& g, memory_space where,
                                std::string_view function, std::string_view argument) {
  require(m.num_pages >= 0, function, argument, "num_pages >= 0", m.num_pages);
  require(m.page_size > 0, function, argument, "page_size > 0", m.page_size);
  // pooled_row_offset() addresses [num_pages, page_size, kv_heads, head_dim] elements in int64
  (void)checked_size_product(function, argument, {m.num_pages, m.page_size, g.num_kv_heads, g.head_dim});
  require(m.page_indptr != nullptr, function, argument, "non-null page_indptr", "nullptr");
  require(g.num_requests == 0 || m.lengths != nullptr, function, argument, "non-null lengths", "nullptr");
  if (!host_accessible(where)) return;
  detail::validate_indptr(function, argument, "page_indptr", m.page_indptr, g.num_requests);
  for (int r = 0; r < g.num_requests; ++r) {
    // Messages are built only on failure, so validating on every call does not allocate.
    // capacity() multiplies in int: reject any request whose pages hold more tokens than an int indexes.
    const std::int64_t pages = m.page_indptr[r + 1] - m.page_indptr[r];
    if (pages * m.page_size > INT32_MAX) [[unlikely]]
      throw_invalid_argument(function, argument,
                             "pages x page_size <= 2^31 - 1 tokens per request (request " + std::to_string(r) + ": " +
                                 std::to_string(pages) + " pages of " + std::to_string(m.page_size) + ")",
                             pages * m.page_size);
    if (!(m.lengths[r] >= 0 && m.lengths[r] <= m.capacity(r)))
      throw_invalid_argument(function, argument,
                             "lengths[" + std::to_string(r) + "] in [0, " + std::to_string(m.capacity(r)) +
                                 "] (pages x page_size)",
                             m.lengths[r]);
  }
  require(g.num_requests == 0 || m.page_indptr[g.num_requests] == 0 || m.page_indices != nullptr, function, argument,
          "non-null page_indices", "nullptr");
  for (int i = 0; i < m.page_indptr[g.num_requests]; ++i)
    if (!(m.page_indices[i] >= 0 && m.page_indices[i] < m.num_pages))
      throw_invalid_argument(function, argument,
                             "every page index in [0, num_pages = " + std::to_string(m.num_pages) + ")",
                             m.page_indices[i]);
}
}  // namespace SPECDEC_HOST_ISA

//! Paged KV pool (kv_cache over paged_mapping), constructed as before the mapping split:
//! `{k_pages, v_pages, page_indptr, page_indices, lengths, requests, num_pages, page_size, kv_heads,
//! head_dim[, space]}`. The pools are the cache's k and v.
template <class T>
struct paged_kv : kv_cache<T, paged_mapping> {
  paged_kv() = default;
  SPECDEC_HOST_DEVICE paged_kv(T* k_pages, T* v_pages, const std::int32_t* page_indptr,
                               const std::int32_t* page_indices, const std::int32_t* lengths, int requests,
                               int num_pages, int page_size, int kv_heads, int dim,
                               memory_space where = memory_space::host) noexcept
      : kv_cache<T, paged_mapping>{k_pages, v_pages, {page_indptr, page_indices, lengths, num_pages, page_size},
                                   requests, kv_heads, dim, where} {}
};

static_assert(kv_layout<paged_kv<float>> && writable_kv_layout<paged_kv<float>>);

}  // namespace specdec
