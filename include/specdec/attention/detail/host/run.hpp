#pragma once
//! \file run.hpp
//! Host backend of decode_attention, tree_attention and hybrid_tree_attention.
//!
//! One call = three parallel_for passes over a plan laid out in the workspace:
//!  1. prepare: per (request, kv head) the G = Hq/Hkv query heads of every query token of the request
//!     are gathered into one transposed, pre-scaled block Qt[d][row] (row = token * G + head-in-group),
//!     so each K/V row is read once for all query heads that share it (GQA grouping).
//!  2. attend: one work item per (request, kv-head group, part), a part being one split-KV chunk of
//!     the cache (flash-decoding) or the request's tree tokens under their ancestor mask (LongSpec
//!     §3.3). The head group is all Hkv heads for decode-like calls (<= 32 query rows per request:
//!     memory-bound, so each token's rows of all heads are read together) and one head otherwise
//!     (compute-bound: that head's accumulators stay in L2); see heads_per_item.
//!     The item streams KV tiles of 64 tokens (staged and widened to fp32 once) and runs an online
//!     softmax over row blocks of 16/32 query rows: S^T = K_tile Qt_block (broadcast-FMA
//!     microkernel, 8 keys x 1-2 row vectors), masking, exp2, then O_block += P^T V_tile (4 rows x 64
//!     columns microkernel). The item writes a normalised partial (O, LSE) into the workspace.
//!     A cache part of a request with at most max_dot_rows (8) query rows per kv head (a decode
//!     step: one token x the GQA group) runs attend_part_rows instead, which vectorises along
//!     head_dim (a dot product per key and row) rather than over rows, and streams K token-major;
//!     one with 9-16 rows (a small tree; 17-32 at the avx512 level, lanes_auto_rows) runs
//!     attend_part_lanes: the rows in the lanes of one or two vectors like the tiles, but K/V read
//!     in place and streamed token-major like the rows kernel's.
//!  3. merge: every (request, kv head) combines its parts by log-sum-exp (LongSpec Appendix A,
//!     Proposition A.1, applied n-way) and writes O (storage type) and LSE (natural log).
//!
//! The backend by level (attention/detail/host/): tile.hpp (microkernels on a few K/V rows),
//! attend_tiles.hpp / attend_rows.hpp / attend_lanes.hpp (one part of one work item), merge.hpp
//! (one row's parts), plan.hpp (work items and workspace), this file (the three passes of a call
//! and the workspace entry), backend.hpp (the attention_backend<host> the entry points call).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/detail/host/attend_lanes.hpp"
#include "specdec/attention/detail/host/attend_rows.hpp"
#include "specdec/attention/detail/host/attend_tiles.hpp"
#include "specdec/attention/detail/host/merge.hpp"
#include "specdec/attention/detail/host/plan.hpp"
#include "specdec/attention/detail/host/tile.hpp"
#include "specdec/core/bitmask.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/simd_level.hpp"
#include "specdec/core/thread_pool.hpp"
#include "specdec/kv/kv_cache.hpp"

namespace specdec::detail {
inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp
struct no_cache {};

}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec::detail

// The three passes at this file's own flags (the path without run-time dispatch).
#define SPECDEC_ISA_BODIES "specdec/attention/detail/host/passes.inl"
#include "specdec/core/detail/isa_native.inl"
#undef SPECDEC_ISA_BODIES

// With run-time dispatch (core/simd_level.hpp): the whole backend -- simd.inl, the microkernels,
// the rows/tiles/merge passes and the three passes of a call -- once per level, in
// detail::SPECDEC_HOST_ISA::lvl_{portable,avx2,avx512}.
#define SPECDEC_ISA_BODIES "specdec/attention/detail/host/kernels.inl"
#include "specdec/core/detail/isa_levels.inl"
#undef SPECDEC_ISA_BODIES

namespace specdec::detail {
inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

//! The three passes for one head_dim, at the level this call dispatches to (one relaxed atomic
//! load and a switch per call; see core/simd_level.hpp), or at this file's flags without dispatch.
template <int D, bool HasCache, bool HasTree, class T, class Layout>
void run_host_attention_at_level(const host& policy, const attention_io_params<T>& io, const Layout& cache,
                                 const tree_kv_params<T>* tree, int split, attention_kernel kernel, void* ws,
                                 std::size_t ws_bytes) {
  SPECDEC_ISA_DISPATCH_CALL(
      run_host_attention_d<D, HasCache, HasTree>(policy, io, cache, tree, split, kernel, ws, ws_bytes));
}

//! Dispatch on head_dim (validated to be 64, 128 or 256, and one this file compiles: only those
//! SPECDEC_HOST_HEAD_DIMS keeps are instantiated; see host_head_dim_compiled).
template <bool HasCache, bool HasTree, class T, class Layout>
void run_host_attention(const host& policy, const attention_io_params<T>& io, const Layout& cache,
                        const tree_kv_params<T>* tree, int split, attention_kernel kernel, void* ws,
                        std::size_t ws_bytes) {
  if constexpr (host_head_dim_compiled(64))
    if (io.head_dim == 64)
      return run_host_attention_at_level<64, HasCache, HasTree>(policy, io, cache, tree, split, kernel, ws, ws_bytes);
  if constexpr (host_head_dim_compiled(128))
    if (io.head_dim == 128)
      return run_host_attention_at_level<128, HasCache, HasTree>(policy, io, cache, tree, split, kernel, ws, ws_bytes);
  if constexpr (host_head_dim_compiled(256))
    if (io.head_dim == 256)
      return run_host_attention_at_level<256, HasCache, HasTree>(policy, io, cache, tree, split, kernel, ws, ws_bytes);
}

//! Bytes of scratch host_attention_entry<HasCache, HasTree> needs for these io params and split:
//! the plan it builds. `cache` is a kv_layout, or no_cache when HasCache is false. O(requests).
template <bool HasCache, bool HasTree, class T, class Layout>
[[nodiscard]] std::size_t host_attention_bytes(std::string_view fn, const host& policy, const attention_io_params<T>& io,
                                               const Layout& cache, int split) {
  host_plan p;
  p.scratch_slots = host_threads(policy);
  p.num_requests = io.num_requests;
  p.hkv = io.num_kv_heads;
  p.group = io.num_qo_heads / io.num_kv_heads;
  p.head_dim = io.head_dim;
  p.split = split;
  p.has_cache = HasCache;
  p.has_tree = HasTree;
  p.heads_per_item = heads_per_item(io);
  return plan_host_attention(fn, p, io.q_indptr, [&](int r) {
    if constexpr (HasCache) return static_cast<int>(cache.length(r));
    else return 0 * r;
  }, nullptr);
}

//! Sizes/obtains the workspace for a call and runs it. With a caller workspace: checks its size and
//! memory space (no allocation); otherwise allocates one internally.
template <bool HasCache, bool HasTree, class T, class Layout>
void host_attention_entry(std::string_view fn, const host& policy, const attention_io_params<T>& io,
                          const Layout& cache, const tree_kv_params<T>* tree, int split,
                          attention_kernel kernel, attention_workspace* ws) {
  if (!host_head_dim_compiled(io.head_dim))
    throw_invalid_argument(fn, "q",
                           "a head_dim (extent 2) this file compiles the host kernels for (SPECDEC_HOST_HEAD_DIMS = " SPECDEC_HOST_HEAD_DIMS_STRING
                           "; core/isa.hpp)",
                           io.head_dim);
  const std::size_t need = host_attention_bytes<HasCache, HasTree>(fn, policy, io, cache, split);
  if (io.total_tokens == 0) return;
  if (ws != nullptr) {
    require(host_accessible(ws->space()), fn, "options.workspace", "host-accessible memory", ws->space());
    if (ws->size_bytes() < need)
      throw_invalid_argument(fn, "options.workspace", "at least " + std::to_string(need) + " bytes (see *_workspace_bytes)",
                             ws->size_bytes());
    // The plan's offset arrays are int64 at the start of the scratch (plan.hpp).
    require(ws->data() != nullptr, fn, "options.workspace", "non-null data", "nullptr");
    require(reinterpret_cast<std::uintptr_t>(ws->data()) % alignof(std::int64_t) == 0, fn, "options.workspace",
            "memory aligned to 8 bytes (64 is best)", "a misaligned pointer");
    run_host_attention<HasCache, HasTree>(policy, io, cache, tree, split, kernel, ws->data(), ws->size_bytes());
  } else {
    attention_workspace local(need);
    run_host_attention<HasCache, HasTree>(policy, io, cache, tree, split, kernel, local.data(), need);
  }
}

}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec::detail
