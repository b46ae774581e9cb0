#pragma once
//! \file sliding_window_attention.hpp
//! Sliding-window self-attention of the draft model (LongSpec §3.1, window W = 512) with tree-
//! structured queries (§3.3): draft tree token i of request r attends to
//!   - the W newest tokens of the request's ring-buffer cache (ring_kv: length(r) = min(appended, W)),
//!     unmasked, and
//!   - the tree tokens j whose mask bit (i, j) is set (itself and its ancestors),
//! i.e. the draft keeps a constant-size window whatever the context length. Every tree token sees the
//! same window: the window is that of the committed (cached) tokens, not re-slid per depth, so a token
//! at depth d attends to up to W + d + 1 keys, not a strict window of its W predecessors (§3.1 bounds
//! the cache's memory by W; the tree tokens are not cached). sliding_window_decode's chain drafting
//! sees W keys instead (its current tokens are in the ring): the two differ for the same token by the
//! up to d + 1 oldest committed tokens, as a draft trained on either window may care.
//!
//! This is hybrid_tree_attention (attention/hybrid_tree_attention.hpp, owned by the attention
//! component) run over the ring layout: no attention math is duplicated here. What this header adds
//! is the ring-typed entry points and the chain-drafting variant (sliding_window_decode). Its naive
//! double-precision reference, which never looks at the ring, is reference/sliding_window_attention.hpp.
//!
//! Typical draft step (tree drafting, see kv/ring_kv.hpp for the cache's design):
//!   apply_rope(host{}, rope, q, positions); apply_rope(host{}, rope, spec_k, positions);   // pos = committed + depth
//!   sliding_window_attention(host{}, q, ring.layout(), spec_k, spec_v, q_indptr, mask, out, lse);
//!   ... after verification: ring.append_rows(r, spec_k_r, spec_v_r, accepted_path);

#include <cstddef>
#include <string_view>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/decode_attention.hpp"
#include "specdec/attention/hybrid_tree_attention.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/kv/ring_kv.hpp"

namespace specdec {

inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

//! Bytes of workspace sliding_window_attention needs with the same arguments and options (pass an
//! attention_workspace of this size in options to make the call allocation-free). O(requests).
template <execution_policy P, tensor_like Q, class T, tensor_like I>
[[nodiscard]] std::size_t sliding_window_attention_workspace_bytes(const P& policy, const Q& q,
                                                                   const ring_kv<T>& cache, const I& q_indptr,
                                                                   const attention_options& options = {}) {
  constexpr std::string_view fn = "specdec::sliding_window_attention_workspace_bytes";
  validate_kv_layout(cache, fn, "cache");
  return detail::delegate_call(
      fn, [&] { return hybrid_tree_attention_workspace_bytes(policy, q, cache, q_indptr, options); });
}

//! Draft tree tokens vs the ring window plus their own ancestors (see file comment).
//!   q         [T, Hq, D] tree-token queries (RoPE already applied at committed length + depth)
//!   cache     ring_kv<T> of R requests (ring_kv_cache::layout(), or a ring in the caller's memory)
//! Policy: specdec::host, or specdec::cuda with attention/hybrid_tree_attention.cuh included (device
//! memory, 16-bit storage: the cuda attention backend's rules); the ring_kv_cache overload is host only.
//!   spec_k/v  [T, Hkv, D] the tree tokens' own keys/values (not in the ring)
//!   q_indptr  int32 [R + 1]; mask: per-request packed ancestor masks back to back (design brief)
//!   out       [T, Hq, D]; lse fp32 [T, Hq] natural log
//! Preconditions: those of hybrid_tree_attention (D in {64, 128, 256}, Hq % Hkv == 0, same storage
//! type everywhere, mask diagonal set and nothing above it) plus a valid ring (lengths <= window,
//! starts < slots). Violations throw invalid_argument naming this function (and, for checks made by
//! hybrid_tree_attention, that one too). Complexity O(sum_r n_r (min(L_r, W) + n_r) Hq D).
template <execution_policy P, tensor_like Q, class T, tensor_like K, tensor_like V, tensor_like I, tensor_like M,
          tensor_like O, tensor_like LS>
void sliding_window_attention(const P& policy, const Q& q, const ring_kv<T>& cache, const K& spec_k, const V& spec_v,
                              const I& q_indptr, const M& mask, const O& out, const LS& lse,
                              const attention_options& options = {}) {
  constexpr std::string_view fn = "specdec::sliding_window_attention";
  validate_kv_layout(cache, fn, "cache");
  detail::delegate_call(
      fn, [&] { hybrid_tree_attention(policy, q, cache, spec_k, spec_v, q_indptr, mask, out, lse, options); });
}

//! sliding_window_attention over an owning ring_kv_cache.
template <tensor_like Q, class T, tensor_like K, tensor_like V, tensor_like I, tensor_like M, tensor_like O,
          tensor_like LS>
void sliding_window_attention(const host& policy, const Q& q, const ring_kv_cache<T>& cache, const K& spec_k,
                              const V& spec_v, const I& q_indptr, const M& mask, const O& out, const LS& lse,
                              const attention_options& options = {}) {
  sliding_window_attention(policy, q, cache.layout(), spec_k, spec_v, q_indptr, mask, out, lse, options);
}

//! Chain drafting: every query token of request r attends to the whole ring window, unmasked (the
//! caller has appended the current tokens' K/V with ring_kv_cache::append_speculative first, so the
//! window, W newest tokens, already contains them). decode_attention over the ring. Unmasked means
//! not causal among a request's own queries: with several, query i also sees the tokens appended
//! after it; draft one token per request per call (chain drafting), or use sliding_window_attention
//! with a chain mask for several.
//! Preconditions: those of decode_attention plus a valid ring. Complexity O(sum_r n_r min(L_r, W) Hq D).
//! Policy: host, or cuda with attention/decode_attention.cuh included (the ring in device memory).
template <execution_policy P, tensor_like Q, class T, tensor_like I, tensor_like O, tensor_like LS>
void sliding_window_decode(const P& policy, const Q& q, const ring_kv<T>& cache, const I& q_indptr, const O& out,
                           const LS& lse, const attention_options& options = {}) {
  constexpr std::string_view fn = "specdec::sliding_window_decode";
  validate_kv_layout(cache, fn, "cache");
  detail::delegate_call(fn, [&] { decode_attention(policy, q, cache, q_indptr, out, lse, options); });
}

//! sliding_window_decode over an owning ring_kv_cache.
template <tensor_like Q, class T, tensor_like I, tensor_like O, tensor_like LS>
void sliding_window_decode(const host& policy, const Q& q, const ring_kv_cache<T>& cache, const I& q_indptr,
                           const O& out, const LS& lse, const attention_options& options = {}) {
  sliding_window_decode(policy, q, cache.layout(), q_indptr, out, lse, options);
}

}  // namespace SPECDEC_HOST_ISA

}  // namespace specdec
