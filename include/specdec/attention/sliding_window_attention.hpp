#pragma once
//! \file sliding_window_attention.hpp
//! Sliding-window self-attention of the draft model (LongSpec §3.1, window W = 512) with tree-
//! structured queries (§3.3): draft tree token i of request r attends to
//!   - the W newest tokens of the request's ring-buffer cache (ring_kv: length(r) = min(appended, W)),
//!     unmasked, and
//!   - the tree tokens j whose mask bit (i, j) is set (itself and its ancestors),
//! i.e. the draft keeps a constant-size window whatever the context length. Every tree token sees the
//! same window: the window is that of the committed (cached) tokens, not re-slid per depth.
//!
//! This is hybrid_tree_attention (attention/hybrid_tree_attention.hpp, owned by the attention
//! component) run over the ring layout: no attention math is duplicated here. What this header adds
//! is the ring-typed entry points, the chain-drafting variant (sliding_window_decode) and a naive
//! double-precision reference that never looks at the ring (it keeps the full token history).
//!
//! Typical draft step (tree drafting, see kv/ring_kv.hpp for the cache's design):
//!   apply_rope(host{}, rope, q, positions); apply_rope(host{}, rope, spec_k, positions);   // pos = committed + depth
//!   sliding_window_attention(host{}, q, ring.layout(), spec_k, spec_v, q_indptr, mask, out, lse);
//!   ... after verification: ring.append_rows(r, spec_k_r, spec_v_r, accepted_path);

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/decode_attention.hpp"
#include "specdec/attention/hybrid_tree_attention.hpp"
#include "specdec/core/bitmask.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/numeric.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/kv/ring_kv.hpp"
#include "specdec/reference/attention.hpp"

namespace specdec {

namespace detail {
//! Runs `f` (a delegated attention call) and re-throws its invalid_argument prefixed with `fn`, so a
//! message names the entry point the user called as well as the primitive that checked.
template <class F>
void delegate_attention(std::string_view fn, F&& f) {
  try {
    f();
  } catch (const invalid_argument& e) {
    throw invalid_argument(std::string(fn) + " -> " + e.what());
  }
}
}  // namespace detail

inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

//! Bytes of workspace sliding_window_attention needs with the same arguments and options (pass an
//! attention_workspace of this size in options to make the call allocation-free). O(requests).
template <tensor_like Q, class T, tensor_like I>
[[nodiscard]] std::size_t sliding_window_attention_workspace_bytes(const host& policy, const Q& q,
                                                                   const ring_kv<T>& cache, const I& q_indptr,
                                                                   const attention_options& options = {}) {
  constexpr std::string_view fn = "specdec::sliding_window_attention_workspace_bytes";
  validate_kv_layout(cache, fn, "cache");
  std::size_t bytes = 0;
  detail::delegate_attention(
      fn, [&] { bytes = hybrid_tree_attention_workspace_bytes(policy, q, cache, q_indptr, options); });
  return bytes;
}

//! Draft tree tokens vs the ring window plus their own ancestors (see file comment).
//!   q         [T, Hq, D] tree-token queries (RoPE already applied at committed length + depth)
//!   cache     ring_kv<T> of R requests (ring_kv_cache::layout()), host memory
//!   spec_k/v  [T, Hkv, D] the tree tokens' own keys/values (not in the ring)
//!   q_indptr  int32 [R + 1]; mask: per-request packed ancestor masks back to back (design brief)
//!   out       [T, Hq, D]; lse fp32 [T, Hq] natural log
//! Preconditions: those of hybrid_tree_attention (D in {64, 128, 256}, Hq % Hkv == 0, same storage
//! type everywhere, mask diagonal set and nothing above it) plus a valid ring (lengths <= window,
//! starts < slots). Violations throw invalid_argument naming this function (and, for checks made by
//! hybrid_tree_attention, that one too). Complexity O(sum_r n_r (min(L_r, W) + n_r) Hq D).
template <tensor_like Q, class T, tensor_like K, tensor_like V, tensor_like I, tensor_like M, tensor_like O,
          tensor_like LS>
void sliding_window_attention(const host& policy, const Q& q, const ring_kv<T>& cache, const K& spec_k, const V& spec_v,
                              const I& q_indptr, const M& mask, const O& out, const LS& lse,
                              const attention_options& options = {}) {
  constexpr std::string_view fn = "specdec::sliding_window_attention";
  validate_kv_layout(cache, fn, "cache");
  detail::delegate_attention(
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
//! window, W newest tokens, already contains them). decode_attention over the ring.
//! Preconditions: those of decode_attention plus a valid ring. Complexity O(sum_r n_r min(L_r, W) Hq D).
template <tensor_like Q, class T, tensor_like I, tensor_like O, tensor_like LS>
void sliding_window_decode(const host& policy, const Q& q, const ring_kv<T>& cache, const I& q_indptr, const O& out,
                           const LS& lse, const attention_options& options = {}) {
  constexpr std::string_view fn = "specdec::sliding_window_decode";
  validate_kv_layout(cache, fn, "cache");
  detail::delegate_attention(fn, [&] { decode_attention(policy, q, cache, q_indptr, out, lse, options); });
}

//! sliding_window_decode over an owning ring_kv_cache.
template <tensor_like Q, class T, tensor_like I, tensor_like O, tensor_like LS>
void sliding_window_decode(const host& policy, const Q& q, const ring_kv_cache<T>& cache, const I& q_indptr,
                           const O& out, const LS& lse, const attention_options& options = {}) {
  sliding_window_decode(policy, q, cache.layout(), q_indptr, out, lse, options);
}

}  // namespace SPECDEC_HOST_ISA

namespace reference {

//! Naive double reference of sliding_window_attention that never touches a ring: for request r it
//! takes the last min(|history_r|, W) tokens of the full history, appends the tree tokens selected
//! by the mask row (all of them when `mask` is null: sliding_window_decode with spec_k == nullptr
//! means no tree part), and computes a max-subtracted softmax. All tensors row-major:
//!   q [T, Hq, D], spec_k/spec_v [T, Hkv, D] (or null), q_indptr [R + 1].
//! Returns out [T, Hq, D] and natural-log lse [T, Hq] (-inf for a row with no keys).
template <class S>
attention_result sliding_window_attention(const std::vector<double>& q, int hq, int head_dim,
                                          const std::vector<sliding_window_history<S>>& history, const double* spec_k,
                                          const double* spec_v, const std::vector<std::int32_t>& q_indptr,
                                          const mask_word* mask, double scale = 0.0) {
  const int requests = static_cast<int>(history.size());
  const int hkv = requests ? history[0].kv_heads : 1;
  const int group = hq / hkv, d = head_dim;
  if (scale == 0.0) scale = 1.0 / std::sqrt(static_cast<double>(d));
  const int tokens = q_indptr.back();
  attention_result res;
  res.tokens = tokens;
  res.heads = hq;
  res.dim = d;
  res.out.assign(static_cast<std::size_t>(tokens) * hq * d, 0.0);
  res.lse.assign(static_cast<std::size_t>(tokens) * hq, -std::numeric_limits<double>::infinity());
  std::size_t mask_off = 0;
  for (int r = 0; r < requests; ++r) {
    const auto& hist = history[r];
    const int t0 = q_indptr[r], n = q_indptr[r + 1] - t0, wpr = words_per_row(n);
    for (int i = 0; i < n; ++i)
      for (int h = 0; h < hq; ++h) {
        const int g = h / group;
        const double* qr = &q[(static_cast<std::size_t>(t0 + i) * hq + h) * d];
        std::vector<double> logits;
        std::vector<const double*> tree_v;
        std::vector<const S*> win_v;
        for (int t = 0; t < hist.length(); ++t) {  // the window: the newest min(n, W) history tokens
          const S* kr = hist.k_row(t, g);
          double s = 0;
          for (int c = 0; c < d; ++c) s += qr[c] * static_cast<double>(to_float(kr[c]));
          logits.push_back(s * scale);
          win_v.push_back(hist.v_row(t, g));
        }
        if (spec_k != nullptr)
          for (int j = 0; j < n; ++j) {
            if (mask != nullptr && !test_bit(mask + mask_off + static_cast<std::size_t>(i) * wpr, j)) continue;
            const double* kr = spec_k + (static_cast<std::size_t>(t0 + j) * hkv + g) * d;
            double s = 0;
            for (int c = 0; c < d; ++c) s += qr[c] * kr[c];
            logits.push_back(s * scale);
            tree_v.push_back(spec_v + (static_cast<std::size_t>(t0 + j) * hkv + g) * d);
          }
        if (logits.empty()) continue;
        double mx = -std::numeric_limits<double>::infinity();
        for (double s : logits) mx = std::max(mx, s);
        double z = 0;
        for (double s : logits) z += std::exp(s - mx);
        double* o = &res.out[(static_cast<std::size_t>(t0 + i) * hq + h) * d];
        for (std::size_t k = 0; k < logits.size(); ++k) {
          const double p = std::exp(logits[k] - mx) / z;
          if (k < win_v.size())
            for (int c = 0; c < d; ++c) o[c] += p * static_cast<double>(to_float(win_v[k][c]));
          else
            for (int c = 0; c < d; ++c) o[c] += p * tree_v[k - win_v.size()][c];
        }
        res.lse[static_cast<std::size_t>(t0 + i) * hq + h] = mx + std::log(z);
      }
    mask_off += static_cast<std::size_t>(n) * wpr;
  }
  return res;
}

}  // namespace reference

}  // namespace specdec
