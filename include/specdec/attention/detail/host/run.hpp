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
//!     head_dim (a dot product per key and row) rather than over rows, and streams K token-major.
//!  3. merge: every (request, kv head) combines its parts by log-sum-exp (LongSpec Appendix A,
//!     Proposition A.1, applied n-way) and writes O (storage type) and LSE (natural log).
//!
//! The backend by level (attention/detail/host/): tile.hpp (microkernels on one staged tile),
//! attend_tiles.hpp / attend_rows.hpp (one part of one work item), merge.hpp (one row's parts),
//! plan.hpp (work items and workspace), this file (the three passes of a call and the workspace
//! entry), backend.hpp (the attention_backend<host> the entry points call).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/detail/host/attend_rows.hpp"
#include "specdec/attention/detail/host/attend_tiles.hpp"
#include "specdec/attention/detail/host/merge.hpp"
#include "specdec/attention/detail/host/plan.hpp"
#include "specdec/attention/detail/host/tile.hpp"
#include "specdec/core/bitmask.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/thread_pool.hpp"

namespace specdec::detail {
inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

struct no_cache {};

//! The three passes of a host attention call (see the file comment). `cache` is a kv_layout or
//! no_cache; `tree` may be null when HasTree is false.
template <int D, bool HasCache, bool HasTree, class T, class Layout>
void run_host_attention_d(const host& policy, const attention_io_params<T>& io, const Layout& cache,
                          const tree_kv_params<T>* tree, int split, attention_kernel kernel, void* ws) {
  host_plan p;
  p.num_requests = io.num_requests;
  p.hkv = io.num_kv_heads;
  p.group = io.num_qo_heads / io.num_kv_heads;
  p.head_dim = D;
  p.split = split;
  p.has_cache = HasCache;
  p.has_tree = HasTree;
  p.heads_per_item = heads_per_item(io);
  plan_host_attention(p, io.q_indptr, [&](int r) {
    if constexpr (HasCache) return static_cast<int>(cache.length(r));
    else return 0 * r;
  }, ws);
  const int R = io.num_requests, hkv = p.hkv, G = p.group;
  const float qscale = io.scale * log2e_f;

  // Pass 1: transposed, scaled query blocks per (request, kv head).
  parallel_for(policy, static_cast<std::int64_t>(R) * hkv, [&](std::int64_t idx) {
    const int r = static_cast<int>(idx / hkv), g = static_cast<int>(idx % hkv);
    const int n = p.tokens(io.q_indptr, r), rows = n * G, mp = host_plan::mpad(rows);
    if (n == 0) return;
    float* qt = p.floats + p.qt_off[r] + static_cast<std::int64_t>(g) * D * mp;
    // Panels of 32 rows: row i lives at qt[(i / 32) * D * 32 + d * 32 + i % 32].
    for (int i = 0; i < mp; ++i) {
      float* dst = qt + static_cast<std::int64_t>(i / (2 * vlanes)) * D * (2 * vlanes) + i % (2 * vlanes);
      if (i >= rows) {
        for (int d = 0; d < D; ++d) dst[d * (2 * vlanes)] = 0.0f;
        continue;
      }
      const int t = io.q_indptr[r] + i / G, h = g * G + i % G;
      const T* qrow = io.q + t * io.q_stride_token + h * io.q_stride_head;
      for (int d0 = 0; d0 < D; d0 += vlanes) {
        const vf16 x = vload_as_float(qrow + d0) * qscale;
        for (int d = 0; d < vlanes; ++d) dst[(d0 + d) * (2 * vlanes)] = x[d];
      }
    }
  });

  // Pass 2: items over (request, head group, part); parts = cache chunks, then the tree. A head group
  // is all Hkv heads when every request has at most one 32-row panel of queries (decode-like,
  // memory-bound: read each token's rows of all heads together), else a single head (compute-bound:
  // keep one head's accumulators cache-resident).
  const int hpi = p.heads_per_item;
  const int groups = hkv / hpi;
  parallel_for(policy, p.total_items, [&](std::int64_t item) {
    const int r = static_cast<int>(std::upper_bound(p.item_begin, p.item_begin + R + 1, item) - p.item_begin) - 1;
    const int parts = plan_parts(p, r);
    const std::int64_t local = item - p.item_begin[r];
    const int g0 = static_cast<int>(local / parts) * hpi, part = static_cast<int>(local % parts);
    const int n = p.tokens(io.q_indptr, r), rows = n * G, mp = host_plan::mpad(rows);
    auto qt_of = [&](int hh) { return p.floats + p.qt_off[r] + static_cast<std::int64_t>(g0 + hh) * D * mp; };
    auto part_of = [&](int hh) {
      return p.floats + p.part_off[r] + (static_cast<std::int64_t>(g0 + hh) * parts + part) * mp * (D + 2);
    };
    const int cache_parts = HasTree ? parts - 1 : parts;
    if constexpr (HasCache) {
      if (part < cache_parts) {
        const int k0 = part * split, k1 = std::min<int>(cache.length(r), k0 + split);
        auto krow = [&](int t, int hh) { return static_cast<const T*>(cache.k_row(r, t, g0 + hh)); };
        auto vrow = [&](int t, int hh) { return static_cast<const T*>(cache.v_row(r, t, g0 + hh)); };
        // Few query rows per kv head (decode steps, small trees): vectorise along head_dim.
        // (attention_options::kernel pins one; the backend checked that rows fit the rows kernel.)
        const bool use_rows =
            kernel == attention_kernel::rows || (kernel == attention_kernel::automatic && uses_row_kernel(rows));
        if (use_rows && rows <= 4) attend_part_rows<D, T, 4>(hpi, qt_of, part_of, rows, krow, vrow, k0, k1);
        else if (use_rows) attend_part_rows<D, T, 8>(hpi, qt_of, part_of, rows, krow, vrow, k0, k1);
        else attend_part<D, T, false>(hpi, qt_of, part_of, rows, G, krow, vrow, k0, k1, nullptr, 0);
        return;
      }
    }
    if constexpr (HasTree) {
      const int t0 = io.q_indptr[r];
      attend_part<D, T, true>(
          hpi, qt_of, part_of, rows, G,
          [&](int t, int hh) { return tree->k + (t0 + t) * tree->k_stride_token + (g0 + hh) * tree->k_stride_head; },
          [&](int t, int hh) { return tree->v + (t0 + t) * tree->v_stride_token + (g0 + hh) * tree->v_stride_head; },
          0, n, tree->mask + p.mask_off[r], words_per_row(n));
    }
    (void)cache_parts;
    (void)groups;
  });

  // Pass 3: merge the parts of each query row into O and LSE.
  parallel_for(policy, static_cast<std::int64_t>(R) * hkv, [&](std::int64_t idx) {
    const int r = static_cast<int>(idx / hkv), g = static_cast<int>(idx % hkv);
    const int n = p.tokens(io.q_indptr, r), rows = n * G, mp = host_plan::mpad(rows);
    const int parts = n > 0 ? plan_parts(p, r) : 0;
    // The row's parts in the workspace: part q of row i at base + q * mp * (D + 2) + i * D, their
    // LSEs after the part's mp x D values.
    merge_parts<float> in;
    in.o = p.floats + p.part_off[r] + static_cast<std::int64_t>(g) * parts * mp * (D + 2);
    in.o_stride_part = static_cast<std::int64_t>(mp) * (D + 2);
    in.o_stride_token = D;
    in.lse = in.o + static_cast<std::int64_t>(mp) * D;
    in.lse_stride_part = in.o_stride_part;
    in.lse_stride_token = 1;
    in.count = parts;
    for (int i = 0; i < rows; ++i) {
      const int t = io.q_indptr[r] + i / G, h = g * G + i % G;
      merge_parts_row(in, i, 0, D, io.o + t * io.o_stride_token + h * io.o_stride_head,
                      io.lse + t * io.lse_stride_token + h * io.lse_stride_head);
    }
  });
}

//! Dispatch on head_dim (validated to be 64, 128 or 256).
template <bool HasCache, bool HasTree, class T, class Layout>
void run_host_attention(const host& policy, const attention_io_params<T>& io, const Layout& cache,
                        const tree_kv_params<T>* tree, int split, attention_kernel kernel, void* ws) {
  switch (io.head_dim) {
    case 64: run_host_attention_d<64, HasCache, HasTree>(policy, io, cache, tree, split, kernel, ws); break;
    case 128: run_host_attention_d<128, HasCache, HasTree>(policy, io, cache, tree, split, kernel, ws); break;
    default: run_host_attention_d<256, HasCache, HasTree>(policy, io, cache, tree, split, kernel, ws); break;
  }
}

//! Bytes of scratch host_attention_entry<HasCache, HasTree> needs for these io params and split:
//! the plan it builds. `cache` is a kv_layout, or no_cache when HasCache is false. O(requests).
template <bool HasCache, bool HasTree, class T, class Layout>
[[nodiscard]] std::size_t host_attention_bytes(const attention_io_params<T>& io, const Layout& cache, int split) {
  host_plan p;
  p.num_requests = io.num_requests;
  p.hkv = io.num_kv_heads;
  p.group = io.num_qo_heads / io.num_kv_heads;
  p.head_dim = io.head_dim;
  p.split = split;
  p.has_cache = HasCache;
  p.has_tree = HasTree;
  p.heads_per_item = heads_per_item(io);
  return plan_host_attention(p, io.q_indptr, [&](int r) {
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
  const std::size_t need = host_attention_bytes<HasCache, HasTree>(io, cache, split);
  if (io.total_tokens == 0) return;
  if (ws != nullptr) {
    require(host_accessible(ws->space()), fn, "options.workspace", "host-accessible memory", ws->space());
    if (ws->size_bytes() < need)
      throw_invalid_argument(fn, "options.workspace", "at least " + std::to_string(need) + " bytes (see *_workspace_bytes)",
                             ws->size_bytes());
    run_host_attention<HasCache, HasTree>(policy, io, cache, tree, split, kernel, ws->data());
  } else {
    attention_workspace local(need);
    run_host_attention<HasCache, HasTree>(policy, io, cache, tree, split, kernel, local.data());
  }
}

}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec::detail
