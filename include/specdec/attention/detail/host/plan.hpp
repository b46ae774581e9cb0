#pragma once
//! \file plan.hpp
//! Level 3 of the host attention backend (see run.hpp): how one call is cut into work -- threads,
//! the split-KV heuristic, head grouping, and the workspace plan (per-request offsets of the query
//! panels and the partials). Depends only on sizes, never on the kernels' arithmetic.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/detail/host/scratch.hpp"
#include "specdec/attention/detail/host/tile.hpp"
#include "specdec/core/bitmask.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/thread_pool.hpp"

namespace specdec::detail {
inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

inline constexpr int min_kv_split = 256;  //!< smallest automatic split-KV chunk


//! Threads a host policy will use (the caller plus pool workers, capped by num_threads).
[[nodiscard]] inline int host_threads(const host& policy) {
  const int avail = thread_pool::global().workers() + 1;
  return policy.num_threads > 0 ? std::min(policy.num_threads, avail) : avail;
}

//! Split-KV heuristic (flash-decoding). Aim for about 4 work items per thread so ragged requests
//! balance, spread evenly over all cached tokens of the batch:
//!   split = roundup64(max(256, ceil(total_cache_tokens * head_groups / (4 * threads))))
//! where head_groups is the number of items one chunk gives (Hkv, or 1 when an item covers all kv
//! heads: see heads_per_item).
//! The 256-token floor keeps each item's fixed cost (writing an M x D partial and merging it) small
//! next to streaming its K/V. A request with L cached tokens gets ceil(L / split) chunks.
[[nodiscard]] inline int choose_kv_split(std::int64_t total_cache_tokens, int head_groups, int threads) {
  const std::int64_t want = 4 * static_cast<std::int64_t>(std::max(threads, 1));
  // a product past int64 (user layouts claiming huge caches) wants the largest split anyway
  if (head_groups > 0 && total_cache_tokens > (INT64_MAX - want) / head_groups) return 1 << 30;
  std::int64_t s = (total_cache_tokens * head_groups + want - 1) / want;
  s = std::max<std::int64_t>(s, min_kv_split);
  s = (s + kv_tile - 1) / kv_tile * kv_tile;
  return static_cast<int>(std::min<std::int64_t>(s, 1 << 30));
}

//! Kv heads one work item processes together: all of them when every request has at most one
//! 32-row panel of query rows (n_r * Hq / Hkv <= 32: decode-like, memory-bound, so read each
//! token's K/V rows of all heads together), else one (compute-bound: keep one head's accumulators
//! cache-resident).
template <class T>
[[nodiscard]] int heads_per_item(const attention_io_params<T>& io) noexcept {
  const int group = io.num_qo_heads / io.num_kv_heads;
  for (int r = 0; r < io.num_requests; ++r)
    if (static_cast<std::int64_t>(io.q_indptr[r + 1] - io.q_indptr[r]) * group > 2 * vlanes) return 1;
  return io.num_kv_heads;
}

//! Resolves options.kv_split_size (0 = heuristic) for a call over `cache`.
template <class L>
int resolve_kv_split(std::string_view fn, const L& cache, int num_requests, int head_groups, int threads, int requested) {
  require(requested >= 0, fn, "options.kv_split_size", ">= 0 (0 = automatic)", requested);
  std::int64_t total = 0, longest = 0;
  for (int r = 0; r < num_requests; ++r) {
    total += cache.length(r);
    longest = std::max<std::int64_t>(longest, cache.length(r));
  }
  // A split longer than the longest cache is one part per request, as that length is: the same
  // plan, and part * split + split then stays below 2 * INT32_MAX (computed in int64). Parts are
  // counted in int: a request's cache parts plus its tree part must stay below 2^31.
  if (requested > 0) {
    if ((longest + requested - 1) / requested >= INT32_MAX) [[unlikely]]
      throw_invalid_argument(fn, "options.kv_split_size",
                             "a split that cuts the longest cache (" + std::to_string(longest) +
                                 " tokens) into fewer than 2^31 - 1 parts",
                             requested);
    return static_cast<int>(std::min<std::int64_t>(requested, std::max<std::int64_t>(longest, 1)));
  }
  return choose_kv_split(total, head_groups, threads);
}


//! Layout of one call's scratch: four int64 arrays of per-request offsets, then the float areas: the
//! query panels and partials per request, then one kernel staging slot per thread and the slots'
//! lease flags (scratch.hpp).
struct host_plan {
  int num_requests = 0, hkv = 0, group = 0, head_dim = 0, split = 1;
  int heads_per_item = 1;  //!< kv heads one work item processes together (1 or hkv)
  bool has_cache = false, has_tree = false;
  int scratch_slots = 1;  //!< threads that may run pass 2 at once (host_threads), one staging slot each
  std::int64_t* item_begin = nullptr;  //!< [R+1] first work item of each request
  std::int64_t* qt_off = nullptr;      //!< [R] float offset of the request's Qt blocks (Hkv of them)
  std::int64_t* part_off = nullptr;    //!< [R] float offset of its partials (Hkv * parts)
  std::int64_t* mask_off = nullptr;    //!< [R] word offset of its mask
  float* floats = nullptr;
  float* scratch = nullptr;  //!< scratch_slots x host_kernel_scratch_floats(head_dim) (64-byte aligned when the workspace is)
  std::int32_t* slot_flags = nullptr;  //!< [scratch_slots] the slots' leases (scratch_lease), after them
  std::int64_t total_items = 0;

  [[nodiscard]] int tokens(const std::int32_t* ip, int r) const noexcept { return ip[r + 1] - ip[r]; }
  //! Rows rounded up to whole 32-row panels (the score microkernel's widest block).
  [[nodiscard]] static int mpad(int rows) noexcept { return padded_rows(rows); }
};

//! Bytes of scratch a call needs; with `ws` non-null also lays the plan out in it. Sizes that would
//! not fit int64 (a user layout claiming caches of 2^31 tokens over many requests and heads) throw
//! invalid_argument naming `fn` and the cache, never wrap into a small workspace.
template <class LengthFn>
std::size_t plan_host_attention(std::string_view fn, host_plan& p, const std::int32_t* q_indptr,
                                LengthFn&& cache_length, void* ws) {
  const auto sum = [&](std::int64_t a, std::int64_t b) {
    std::int64_t s = 0;
    if (__builtin_add_overflow(a, b, &s)) [[unlikely]]
      throw_invalid_argument(fn, "cache", "caches whose attention scratch fits in int64 bytes", "larger caches");
    return s;
  };
  const int R = p.num_requests;
  const std::int64_t header = round_up((static_cast<std::int64_t>(R) * 4 + 1) * 8, 64);
  std::int64_t floats = 0, items = 0;
  auto* base = static_cast<std::byte*>(ws);
  if (ws) {
    auto* h = reinterpret_cast<std::int64_t*>(base);
    p.item_begin = h;
    p.qt_off = h + R + 1;
    p.part_off = h + 2 * R + 1;
    p.mask_off = h + 3 * R + 1;
    p.floats = reinterpret_cast<float*>(base + header);
  }
  std::int64_t mask_words = 0;
  for (int r = 0; r < R; ++r) {
    const int n = q_indptr[r + 1] - q_indptr[r];
    const int mp = host_plan::mpad(n * p.group);
    std::int64_t parts = 0;
    if (n > 0) {
      if (p.has_cache) parts += (static_cast<std::int64_t>(cache_length(r)) + p.split - 1) / p.split;
      if (p.has_tree) parts += 1;
    }
    if (ws) {
      p.item_begin[r] = items;
      p.qt_off[r] = floats;
      p.part_off[r] = floats + static_cast<std::int64_t>(p.hkv) * p.head_dim * mp;
      p.mask_off[r] = mask_words;
    }
    mask_words += static_cast<std::int64_t>(n) * words_per_row(n);  // <= 2^31 * 2^25 in all
    // parts < 2^32 and head_dim + 2 <= 258, so the inner sum fits; the products and sums are checked
    floats = sum(floats, checked_size_product(fn, "cache", {p.hkv, mp, p.head_dim + parts * (p.head_dim + 2)}));
    items = sum(items, checked_size_product(fn, "cache", {p.hkv / p.heads_per_item, parts}));
  }
  if (ws) p.item_begin[R] = items;
  p.total_items = items;
  // The kernels' staging slots (scratch.hpp), one per thread of pass 2, after the partials.
  (void)sum(floats, 15);  // round_up's own sum, checked
  floats = round_up(floats, 16);
  if (ws) p.scratch = p.floats + floats;
  floats = sum(floats, static_cast<std::int64_t>(p.scratch_slots) * static_cast<std::int64_t>(host_kernel_scratch_floats(p.head_dim)));
  if (ws) p.slot_flags = reinterpret_cast<std::int32_t*>(p.floats + floats);
  floats = sum(floats, p.scratch_slots);  // one int32 flag per slot
  return static_cast<std::size_t>(sum(header, checked_size_product(fn, "cache", {floats, 4})));
}

//! Number of parts of request r (derived from the plan's item counts).
[[nodiscard]] inline int plan_parts(const host_plan& p, int r) noexcept {
  return static_cast<int>((p.item_begin[r + 1] - p.item_begin[r]) / (p.hkv / p.heads_per_item));
}

}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec::detail
