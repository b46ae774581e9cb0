#pragma once
//! \file block_table_kv.hpp
//! Block-table KV cache, the form vLLM keeps: a pool of fixed-size blocks
//! [num_blocks, block_size, kv_heads, head_dim] for K and for V (separate base pointers), a dense
//! `block_table [requests, max_blocks]` of int32 block ids, each request's sequence length and,
//! optionally, how many leading entries of its row are allocated. Token t of request r lives in block
//! block_table[r][t / block_size], slot t % block_size. The CSR form of the same pool (FlashInfer:
//! indptr + indices) is kv/paged_kv.hpp; both are mappings over the shipped kv_cache.
//!
//! Capacity (what commit may write): blocks_allocated[r] x block_size when blocks_allocated is given,
//! else max_blocks x block_size, every table entry then being a real block of the pool. Pass
//! blocks_allocated when a row's tail is padding (vLLM pads with a null block or garbage): validation
//! then reads only the allocated entries, and a commit cannot write into a block the request does not
//! own.

#include <cstdint>
#include <string>

#include "specdec/core/config.hpp"
#include "specdec/core/error.hpp"
#include "specdec/kv/kv_cache.hpp"

namespace specdec {

//! vLLM's block table as a kv_mapping. Aggregate:
//! `{block_table, seq_lens, max_blocks, block_size, num_blocks[, blocks_allocated]}`.
struct block_table_mapping {
  const std::int32_t* block_table = nullptr;       //!< [requests, max_blocks], row-major block ids
  const std::int32_t* seq_lens = nullptr;          //!< [requests] tokens valid per request
  int max_blocks = 0;                              //!< entries per table row (the row stride)
  int block_size = 0;                              //!< tokens per block
  int num_blocks = 0;                              //!< blocks in the pool; every used id is in [0, num_blocks)
  const std::int32_t* blocks_allocated = nullptr;  //!< optional [requests]: allocated entries of each row

  SPECDEC_HOST_DEVICE int length(int r) const noexcept { return seq_lens[r]; }
  //! Token slots of request r's allocated blocks (all max_blocks when blocks_allocated is null).
  SPECDEC_HOST_DEVICE int capacity(int r) const noexcept {
    return (blocks_allocated != nullptr ? blocks_allocated[r] : max_blocks) * block_size;
  }
  SPECDEC_HOST_DEVICE std::int64_t offset(int r, int t, int h, const kv_geometry& g) const noexcept {
    return pooled_row_offset(block_table[static_cast<std::int64_t>(r) * max_blocks + t / block_size], block_size,
                             t % block_size, h, g);
  }
  //! Elements of each pool the offsets reach, and the arrays read (kv_cache::visit_memory). Geometry
  //! validated first.
  std::int64_t required_span_size(const kv_geometry& g) const noexcept {
    return static_cast<std::int64_t>(num_blocks) * block_size * g.num_kv_heads * g.head_dim;
  }
  template <class F>
  void visit_arrays(const kv_geometry& g, bool, F&& f) const {
    f("cache.mapping.block_table", block_table, static_cast<std::int64_t>(g.num_requests) * max_blocks);
    f("cache.mapping.seq_lens", seq_lens, g.num_requests);
    f("cache.mapping.blocks_allocated", blocks_allocated, g.num_requests);
  }
};

//! Checks the sizes (max_blocks x block_size fits the int token index) and, for host-accessible
//! arrays, every request's allocated block count in [0, max_blocks], its sequence length within its
//! capacity and every allocated block id within the pool. O(requests x allocated blocks).
inline namespace SPECDEC_HOST_ISA {  // on every entry point's path: see core/isa.hpp
inline void validate_kv_mapping(const block_table_mapping& m, const kv_geometry& g, memory_space where,
                                std::string_view function, std::string_view argument) {
  require(m.max_blocks >= 0, function, argument, "max_blocks >= 0", m.max_blocks);
  require(m.block_size > 0, function, argument, "block_size > 0", m.block_size);
  require(m.num_blocks >= 0, function, argument, "num_blocks >= 0", m.num_blocks);
  // pooled_row_offset() addresses [num_blocks, block_size, kv_heads, head_dim] elements in int64
  (void)checked_size_product(function, argument, {m.num_blocks, m.block_size, g.num_kv_heads, g.head_dim});
  // capacity() multiplies in int
  require(static_cast<std::int64_t>(m.max_blocks) * m.block_size <= INT32_MAX, function, argument,
          "max_blocks x block_size <= 2^31 - 1 tokens", static_cast<std::int64_t>(m.max_blocks) * m.block_size);
  require(g.num_requests == 0 || m.seq_lens != nullptr, function, argument, "non-null seq_lens", "nullptr");
  require(g.num_requests == 0 || m.max_blocks == 0 || m.block_table != nullptr, function, argument,
          "non-null block_table", "nullptr");
  if (!host_accessible(where)) return;
  for (int r = 0; r < g.num_requests; ++r) {
    const int allocated = m.blocks_allocated != nullptr ? m.blocks_allocated[r] : m.max_blocks;
    if (!(allocated >= 0 && allocated <= m.max_blocks)) [[unlikely]]  // messages built only on failure
      throw_invalid_argument(function, argument,
                             "blocks_allocated[" + std::to_string(r) + "] in [0, max_blocks = " +
                                 std::to_string(m.max_blocks) + "]",
                             allocated);
    if (!(m.seq_lens[r] >= 0 && m.seq_lens[r] <= m.capacity(r))) [[unlikely]]
      throw_invalid_argument(function, argument,
                             "seq_lens[" + std::to_string(r) + "] in [0, " + std::to_string(m.capacity(r)) + "] (" +
                                 std::to_string(allocated) + " allocated blocks x block_size " +
                                 std::to_string(m.block_size) + ")",
                             m.seq_lens[r]);
    const std::int32_t* row = m.block_table + static_cast<std::int64_t>(r) * m.max_blocks;
    for (int b = 0; b < allocated; ++b)
      if (!(row[b] >= 0 && row[b] < m.num_blocks)) [[unlikely]]
        throw_invalid_argument(function, argument,
                               "block_table[" + std::to_string(r) + "][" + std::to_string(b) +
                                   "] in [0, num_blocks = " + std::to_string(m.num_blocks) + ")",
                               row[b]);
  }
}
}  // namespace SPECDEC_HOST_ISA

//! Block-table KV cache: `block_table_kv<T>{k_pool, v_pool, {block_table, seq_lens, max_blocks,
//! block_size, num_blocks[, blocks_allocated]}, requests, kv_heads, head_dim[, space]}`.
template <class T>
using block_table_kv = kv_cache<T, block_table_mapping>;

static_assert(kv_layout<block_table_kv<float>> && writable_kv_layout<block_table_kv<float>>);
static_assert(kv_layout<block_table_kv<const float>> && !writable_kv_layout<block_table_kv<const float>>);

}  // namespace specdec
