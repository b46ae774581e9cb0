#pragma once
//! \file partial_kv.hpp
//! TokenSwift's dynamic partial KV cache (TokenSwift §3.3, Eq. 2, Algorithm 1 lines 2, 5-6): the
//! self-drafting target reads at most a fixed budget |B| of its own cached tokens per kv head, so a
//! draft step's KV traffic stays constant however long the context grows.
//!
//! Four parts, usable alone or together:
//!  - kv_importance(policy, q, cache, request, scores): Eq. 2, the importance of every cached token
//!    of one request for each kv head: the sum over the kv head's query group of q_j . K_i;
//!    kv_importance_batch(policy, q, cache, scores, status) for every request at once, on the host
//!    or a CUDA device (kv/partial_kv.cuh).
//!  - indexed_kv<L>: a kv_layout that shows, per request and kv head, a list of token indices of
//!    another layout L, read in place (no copy). Any attention primitive runs on it unchanged.
//!  - compact_partial_kv<T>: a dense copy of the view, kept in sync slot by slot (what TokenSwift
//!    itself keeps), for draft attention over contiguous memory.
//!  - partial_kv_index: the budgeted index lists and TokenSwift's update policy. Slots [0, |S|) hold
//!    the first |S| tokens (attention sinks); slots [|S|, |B|) hold the |B| - |S| most important
//!    other tokens. New committed tokens fill free slots, then replace the least important ones
//!    first (§3.3: "starting from the least important ones at position |B| - 1 and moving towards
//!    position |S|"). Where the cache had free slots at the rebuild (shorter than |B|, which §3.3's
//!    long prompts never are), the eviction order starts at those slots, from |B| - 1 down, as the
//!    quoted positions do: the first replacements then take the tokens that filled them, newest
//!    first, before the least important selected ones (a choice left as is: on tests/decoder's model,
//!    the other order moved tau within noise); once more than |B| - |S| of them have replaced slots since the last
//!    rebuild, needs_rebuild() turns true (§3.3's trigger; Algorithm 1, line 5's |C_full| - e >
//!    |B| - |S| when the cache was full at the rebuild, see partial_kv_needs_rebuild) and the caller
//!    recomputes the selection from a fresh query (rebuild(), line 6). Further tokens before that
//!    rebuild replace in the same order again (the newest win), so the view is always valid.
//!    partial_kv_select_batch(policy, scores, cache, ...) computes rebuild()'s lists for every
//!    request at once from kv_importance_batch's scores into the caller's arrays, on the host or a
//!    CUDA device (kv/partial_kv.cuh), for an engine that keeps the index on the GPU; indexed_kv
//!    shows them in place; partial_kv_append_batch then places each step's new tokens on those
//!    lists, as append() does.
//!
//! Where this differs from the paper's picture, and why: §3.3 stores the selected pairs in
//! decreasing importance. Here a rebuild stores them in token order and keeps the replacement
//! order (least important first, free slots first of all, newest-filled first) in a separate
//! eviction list, so exactly the same token is replaced at every step, but the view reads the
//! cache in address order: in importance order every row is a random gather, which made a fp16
//! decode over a 4096-token view of a 32K cache slower than over the whole cache (session 10).
//!
//! Index storage is [requests, kv_heads, |B|] int32 plus the eviction lists [requests, kv_heads,
//! |B| - |S|], allocated once; appends never allocate. A rebuild needs O(length * kv_heads) floats
//! and int32s of scratch (scores and the per-head selection order), kept between calls; it selects
//! the heads in parallel on the host pool.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "specdec/core/bfloat16.hpp"
#include "specdec/core/config.hpp"
#include "specdec/core/detail/simd.hpp"
#include "specdec/core/device_status.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/half.hpp"
#include "specdec/core/numeric.hpp"
#include "specdec/core/simd_level.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/core/thread_pool.hpp"
#include "specdec/core/topk.hpp"
#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/kv/kv_cache.hpp"
#include "specdec/kv/kv_layout.hpp"

namespace specdec {

//! A kv_layout showing, for each request r and kv head h, the tokens
//! index[(r * kv_heads + h) * budget + t] (t < lengths[r]) of `base`, in that order, read in place.
//! Every kv head of a request shows the same number of tokens (lengths[r]), not the same tokens.
//! Obtained from partial_kv_index::layout(); can also wrap a user's own index arrays.
template <kv_layout L>
struct indexed_kv {
  using value_type = typename L::value_type;

  L base;
  const std::int32_t* index = nullptr;    //!< [requests, kv_heads, budget], each in [0, base.length(r))
  const std::int32_t* lengths = nullptr;  //!< [requests], each in [0, budget]
  int budget = 0;                         //!< index slots per (request, kv head)

  SPECDEC_HOST_DEVICE int num_requests() const noexcept { return base.num_requests(); }
  SPECDEC_HOST_DEVICE int num_kv_heads() const noexcept { return base.num_kv_heads(); }
  SPECDEC_HOST_DEVICE int head_dim() const noexcept { return base.head_dim(); }
  SPECDEC_HOST_DEVICE int length(int r) const noexcept { return lengths[r]; }
  SPECDEC_HOST_DEVICE memory_space space() const noexcept { return base.space(); }
  SPECDEC_HOST_DEVICE int source(int r, int t, int h) const noexcept {
    return index[(static_cast<std::int64_t>(r) * base.num_kv_heads() + h) * budget + t];
  }
  SPECDEC_HOST_DEVICE auto k_row(int r, int t, int h) const noexcept { return base.k_row(r, source(r, t, h), h); }
  SPECDEC_HOST_DEVICE auto v_row(int r, int t, int h) const noexcept { return base.v_row(r, source(r, t, h), h); }
};

}  // namespace specdec

// The kernels at this file's flags and, with run-time dispatch (core/simd_level.hpp), once per level.
#define SPECDEC_ISA_BODIES "specdec/kv/detail/partial_kv_kernels.inl"
#include "specdec/core/detail/isa_family.inl"
#undef SPECDEC_ISA_BODIES

namespace specdec {

inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

//! Validates the base layout, then (host memory) budget >= 1, non-null arrays, every length in
//! [0, budget] and every shown index in [0, base.length(r)).
template <class L>
void validate_layout(const indexed_kv<L>& l, std::string_view function, std::string_view argument) {
  validate_kv_layout(l.base, function, argument);
  const int requests = l.base.num_requests();
  if (requests == 0) return;
  require(l.budget >= 1, function, argument, "budget >= 1", l.budget);
  require(l.index != nullptr, function, argument, "non-null index array", "nullptr");
  require(l.lengths != nullptr, function, argument, "non-null lengths array", "nullptr");
  if (!host_accessible(l.base.space())) return;
  for (int r = 0; r < requests; ++r) {
    if (!(l.lengths[r] >= 0 && l.lengths[r] <= l.budget)) [[unlikely]]
      throw_invalid_argument(function, argument,
                             "length of request " + std::to_string(r) + " in [0, budget " + std::to_string(l.budget) + "]",
                             l.lengths[r]);
    for (int h = 0; h < l.base.num_kv_heads(); ++h)
      for (int t = 0; t < l.lengths[r]; ++t) {
        const int s = l.source(r, t, h);
        if (!(s >= 0 && s < l.base.length(r))) [[unlikely]]
          throw_invalid_argument(function, argument,
                                 "index (request " + std::to_string(r) + ", kv head " + std::to_string(h) + ", slot " +
                                     std::to_string(t) + ") in [0, base length " + std::to_string(l.base.length(r)) + ")",
                                 s);
      }
  }
}

}  // namespace SPECDEC_HOST_ISA

namespace detail {

//! sum over kv head h's query group of q_j, in fp32, j in increasing order (the host's and the
//! CUDA kernel's qsum: the same floats). qd: [Hq, D] rows `q_stride` apart.
template <class QT>
SPECDEC_HOST_DEVICE inline float importance_qsum(const QT* qd, std::int64_t q_stride, int group, int h, int c) noexcept {
  float s = 0.0f;
  for (int j = h * group; j < (h + 1) * group; ++j) s += to_float(qd[j * q_stride + c]);
  return s;
}

inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

//! The scores of one request (kv_importance's work, after its checks): sd[h * s_stride + i] for
//! i < len. Token-major over all kv heads (a token's rows of all heads are adjacent in NHD and paged
//! layouts, so the rows stream), parallel over chunks of 256 tokens on the host pool.
template <class KT, class QT, class L>
void kv_importance_request(const host& policy, const QT* qd, std::int64_t q_stride, int hq, const L& cache,
                           int request, int len, float* sd, std::int64_t s_stride) {
  const int hkv = cache.num_kv_heads(), d = cache.head_dim(), group = hq / hkv;
  // sum_j q_j . K_i = (sum_j q_j) . K_i: one dot per (token, kv head) instead of G.
  std::vector<float> qsum(static_cast<std::size_t>(hkv) * d);
  for (int h = 0; h < hkv; ++h)
    for (int c = 0; c < d; ++c) qsum[static_cast<std::size_t>(h) * d + c] = importance_qsum(qd, q_stride, group, h, c);
  constexpr int chunk = 256;
  parallel_for(policy, (std::int64_t{len} + chunk - 1) / chunk, [&](std::int64_t ci) {
    const int i0 = static_cast<int>(ci * chunk), i1 = static_cast<int>(std::min<std::int64_t>(len, (ci + 1) * chunk));
    SPECDEC_ISA_DISPATCH_CALL(kv_importance_tokens<KT>(cache, request, i0, i1, hkv, d, qsum.data(), sd, s_stride));
  });
}


//! kv_importance after its layout checks, at the length `len` its caller read once from
//! cache.length(request) (partial_kv_index::rebuild ranks the same `len` tokens it scores: a layout
//! whose answer changed between two reads had tokens ranked on scratch scores never computed).
template <tensor_like Q, class L, tensor_like S>
void kv_importance_at(const host& policy, const Q& q, const L& cache, int request, int len, const S& scores) {
  constexpr std::string_view fn = "specdec::kv_importance";
  using QT = std::remove_cv_t<typename Q::element_type>;
  using KT = std::remove_cv_t<typename L::value_type>;
  static_assert(std::is_same_v<QT, KT> || std::is_same_v<QT, float>,
                "specdec::kv_importance: q must have the cache's storage type or float");
  static_assert(std::is_same_v<std::remove_cv_t<typename S::element_type>, float>,
                "specdec::kv_importance: scores must be float");
  static_assert(!std::is_const_v<typename S::element_type>, "specdec::kv_importance: scores must be writable");
  static_assert(Q::rank == 2 && S::rank == 2, "specdec::kv_importance: q is [Hq, D] and scores [Hkv, length]");
  require(len >= 0, fn, "cache", "cache.length(request) >= 0", len);
  const int hkv = cache.num_kv_heads(), d = cache.head_dim();
  require_host_accessible(fn, "q", q);
  require_host_accessible(fn, "scores", scores);
  require_shape(fn, "q", q, {-1, d});
  require(q.extent(0) <= INT32_MAX, fn, "q", "at most 2^31-1 heads", q.extent(0));
  const int hq = static_cast<int>(q.extent(0));
  if (!(hq >= hkv && hq % hkv == 0)) [[unlikely]]
    throw_invalid_argument(fn, "q", "a head count that is a multiple of cache.num_kv_heads() = " + std::to_string(hkv), hq);
  require_unit_inner_stride(fn, "q", q);
  require_shape(fn, "scores", scores, {hkv, -1});
  require_unique_elements(fn, "scores", scores);
  if (scores.extent(1) < len) [[unlikely]]
    throw_invalid_argument(fn, "scores", "at least cache.length(request) = " + std::to_string(len) + " columns",
                           scores.extent(1));
  require_unit_inner_stride(fn, "scores", scores);
  require_disjoint(fn, "q", q, "scores", scores);
  require_kv_rows(cache, request, 0, len, 0, hkv, kv_rows_read::keys, fn, "cache");
  require_outputs_apart_from_keys(cache, request, request + 1, len, fn, "scores", scores);  // written while K is read
  const auto* qd = static_cast<const QT*>(q.data());
  float* sd = const_cast<float*>(static_cast<const float*>(scores.data()));
  kv_importance_request<KT>(policy, qd, q.stride(0), hq, cache, request, len, sd, scores.stride(0));
}
}  // namespace SPECDEC_HOST_ISA
}  // namespace detail

inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

//! TokenSwift Eq. 2: scores[h][i] = sum over the query heads j of kv head h's group
//! (j in [h * G, (h + 1) * G), G = Hq / Hkv) of q_j . K_i, for every cached token i of `request`
//! (i < cache.length(request)). The raw dot product, as Eq. 2 writes it (no softmax scale: only
//! the ranking matters). Computed as (sum_j q_j) . K_i in fp32, each K row read once.
//!
//! Arguments: q [Hq, D], the storage type of the cache or float, unit inner stride, host memory
//! (usually the newest token's post-RoPE queries); cache host-accessible; request in
//! [0, cache.num_requests()); scores float [Hkv, >= cache.length(request)], unit inner stride, apart
//! from q and from the K rows it reads (detail::require_outputs_apart_from_keys).
//! Hq a multiple of Hkv, D = cache.head_dim(). Violations throw specdec::invalid_argument.
//! Parallel over chunks of 256 tokens on the host pool. O(length * Hkv * D + Hq * D) FLOPs, each
//! K row read once.
template <tensor_like Q, class L, tensor_like S>
void kv_importance(const host& policy, const Q& q, const L& cache, int request, const S& scores) {
  static_assert(check_kv_layout<L>());  // L is unconstrained so that these messages are what a non-layout gets
  if constexpr (kv_layout<L>) {
    constexpr std::string_view fn = "specdec::kv_importance";
    validate_kv_layout(cache, fn, "cache");
    require(host_accessible(cache.space()), fn, "cache", "host-accessible memory", cache.space());
    require_in_range(fn, "request", request, 0, cache.num_requests() - 1);
    detail::kv_importance_at(policy, q, cache, request, cache.length(request), scores);
  }
}

}  // namespace SPECDEC_HOST_ISA

namespace detail {

//! kv_importance_batch's arguments, as pointers and the layout (a kernel parameter).
template <class QT, class L>
struct kv_importance_batch_args {
  const QT* q = nullptr;
  std::int64_t q_stride_request = 0, q_stride_head = 0;
  int hq = 0;
  L cache;
  float* scores = nullptr;
  std::int64_t s_stride_request = 0, s_stride_head = 0, columns = 0;
  std::int32_t* status = nullptr;
};

//! The seam between kv_importance_batch and its backends:
//!   template <class QT, class L> static void run(const Policy&, const kv_importance_batch_args<QT, L>&);
//! The host backend is below, the cuda one in kv/partial_kv.cuh.
SPECDEC_BACKEND_SEAM(kv_importance_backend, "kv_importance_batch", "specdec/kv/partial_kv.cuh");

//! Every request's cache.length(r), each read once (a user's layout whose answer changes between
//! reads would otherwise be checked at one length and worked at another), checked against the
//! `columns` of a scores array: the host batch forms' first step.
template <class L>
[[nodiscard]] std::vector<int> lengths_within(std::string_view fn, const L& cache, std::int64_t columns) {
  std::vector<int> lens(static_cast<std::size_t>(cache.num_requests()));
  for (int r = 0; r < cache.num_requests(); ++r) {
    const int len = lens[static_cast<std::size_t>(r)] = cache.length(r);
    if (len < 0) [[unlikely]]  // (validate_kv_layout saw an earlier answer of a layout that may change it)
      throw_invalid_argument(fn, "cache", "cache.length(r) >= 0 for every request (request " + std::to_string(r) + ")",
                             len);
    if (len > columns) [[unlikely]]
      throw_invalid_argument(fn, "scores",
                             "at least cache.length(r) columns for every request (request " + std::to_string(r) +
                                 " has length " + std::to_string(len) + ")",
                             columns);
  }
  return lens;
}

template <>
struct kv_importance_backend<host> {
  template <class QT, class L>
  static void run(const host& policy, const kv_importance_batch_args<QT, L>& a) {
    constexpr std::string_view fn = "specdec::kv_importance_batch";
    const int R = a.cache.num_requests();
    // every length and row first: a rejected call writes no score
    const std::vector<int> lens = lengths_within(fn, a.cache, a.columns);
    for (int r = 0; r < R; ++r)
      require_kv_rows(a.cache, r, 0, lens[static_cast<std::size_t>(r)], 0, a.cache.num_kv_heads(), kv_rows_read::keys,
                      fn, "cache");
    for (int r = 0; r < R; ++r)
      kv_importance_request<std::remove_cv_t<typename L::value_type>>(
          policy, a.q + r * a.q_stride_request, a.q_stride_head, a.hq, a.cache, r, lens[static_cast<std::size_t>(r)],
          a.scores + r * a.s_stride_request, a.s_stride_head);
    a.status[0] = 0, a.status[1] = -1, a.status[2] = -1;
  }
};

//! Largest kv_heads x head_dim of kv_importance_batch under specdec::cuda (the kernel keeps the
//! summed queries in 48 KiB of shared memory).
inline constexpr std::int64_t importance_max_qsum_device = 12288;

}  // namespace detail

//! TokenSwift Eq. 2 for every request of a batch at once (the form a GPU engine calls, e.g. before
//! it rebuilds the partial caches of the requests that need it): scores[r][h][i] = sum over kv head
//! h's query group of q[r][j] . K_i, for i < cache.length(r), as kv_importance computes it per request.
//! Entries past cache.length(r) are not written.
//!   q       [R, Hq, D], the cache's storage type or float, unit inner stride (each request's newest
//!           token's post-RoPE queries); R = cache.num_requests(), Hq a multiple of Hkv, D = head_dim
//!   cache   any kv_layout (float, half or bfloat16 rows)
//!   scores  float [R, Hkv, columns], unit inner stride; columns >= every cache.length(r)
//!   status  int32 [3]: {0, -1, -1}, or the device's report (device_error::length: a request whose
//!           length exceeds the columns or is negative; its scores are not written)
//! specdec::host: host-accessible memory; lengths checked before any score is written
//! (invalid_argument); the scores equal kv_importance's bit for bit.
//! specdec::cuda (needs kv/partial_kv.cuh and nvcc): device-accessible memory; a layout used there
//! marks its members SPECDEC_HOST_DEVICE; Hkv x D <= 12288. The summed queries are the host's floats
//! (same order); each dot product is summed in another order (a warp's lanes), so a score can differ
//! from the host's in its last bits, and a ranking built on them can differ where two scores are that
//! close. Enqueued on policy.stream without synchronisation, graph-capturable.
//! O(sum_r length_r x Hkv x D + R x Hq x D) FLOPs, each K row read once.
template <execution_policy Policy, tensor_like Q, class L, tensor_like S, class ST>
  requires(detail::int32_output<ST>)
void kv_importance_batch(const Policy& policy, const Q& q_in, const L& cache, const S& scores_in, const ST& status_in) {
  static_assert(check_kv_layout<L>());  // L is unconstrained so that these messages are what a non-layout gets
  if constexpr (kv_layout<L>) {
    constexpr std::string_view fn = "specdec::kv_importance_batch";
    using QT = std::remove_cv_t<typename Q::element_type>;
    using KT = std::remove_cv_t<typename L::value_type>;
    static_assert(std::is_same_v<KT, float> || std::is_same_v<KT, half> || std::is_same_v<KT, bfloat16>,
                  "specdec::kv_importance_batch: the cache's rows must be float, half or bfloat16");
    static_assert(std::is_same_v<QT, KT> || std::is_same_v<QT, float>,
                  "specdec::kv_importance_batch: q must have the cache's storage type or float");
    static_assert(std::is_same_v<typename S::element_type, float>,
                  "specdec::kv_importance_batch: scores must be a writable tensor of float");
    static_assert(Q::rank == 3 && S::rank == 3,
                  "specdec::kv_importance_batch: q is [requests, Hq, D] and scores [requests, Hkv, columns]");
    validate_kv_layout(cache, fn, "cache");
    require_policy_memory<Policy>(fn, "cache", cache);
    const auto q = as_view(q_in);
    const auto scores = as_view(scores_in);
    const auto status = as_view(status_in);
    const int R = cache.num_requests(), hkv = cache.num_kv_heads(), d = cache.head_dim();
    require_policy_memory<Policy>(fn, "q", q);
    require_policy_memory<Policy>(fn, "scores", scores);
    require_policy_array<Policy>(fn, "status", status, 3);
    require_shape(fn, "q", q, {R, -1, d});
    require(q.extent(1) <= INT32_MAX, fn, "q", "at most 2^31-1 heads", q.extent(1));
    const int hq = static_cast<int>(q.extent(1));
    if (!(hq >= hkv && hq % hkv == 0)) [[unlikely]]
      throw_invalid_argument(fn, "q", "a head count (extent 1) that is a multiple of cache.num_kv_heads() = " +
                                          std::to_string(hkv), hq);
    require_unit_inner_stride(fn, "q", q);
    require_shape(fn, "scores", scores, {R, hkv, -1});
    require_unit_inner_stride(fn, "scores", scores);
    require_unique_elements(fn, "scores", scores);
    require_outputs_apart(fn, std::forward_as_tuple("scores", scores, "status", status), std::forward_as_tuple("q", q));
    detail::require_outputs_apart_from_keys(cache, 0, R, scores.extent(2), fn, "scores", scores, "status", status);  // written while K is read
    if constexpr (on_device_v<Policy>)
      require(static_cast<std::int64_t>(hkv) * d <= detail::importance_max_qsum_device, fn, "cache",
              "num_kv_heads() x head_dim() <= " + std::to_string(detail::importance_max_qsum_device) +
                  " under specdec::cuda",
              static_cast<std::int64_t>(hkv) * d);
    require(R == 0 || q.data() != nullptr, fn, "q", "a non-null data pointer", "nullptr");
    require(R == 0 || scores.extent(2) == 0 || scores.data() != nullptr, fn, "scores", "a non-null data pointer",
            "nullptr");
    detail::kv_importance_batch_args<QT, L> a{q.data(), q.stride(0), q.stride(1), hq, cache,
                                              scores.data(), scores.stride(0), scores.stride(1), scores.extent(2),
                                              status.data()};
    detail::kv_importance_backend<Policy>::run(policy, a);
  }
}

//! Which tokens a rebuild keeps per kv head.
enum class partial_kv_selection : std::uint8_t {
  //! Each kv head its own top-(|B| - |S|) by its own Eq. 2 score (TokenSwift §3.3; the default).
  per_kv_head,
  //! One set for all kv heads of a request, ranked by the sum of their Eq. 2 scores. Not the
  //! paper's rule: an engine opts in for locality. A token-major pass then reads each shown token's
  //! rows of all heads together (adjacent in NHD and paged layouts) instead of gathering one row per
  //! head from unrelated pages; on the host that made a fp16 decode over a 4096-token view of a 32K
  //! cache several times faster (benchmarks/RESULTS.md, partial KV cache).
  shared,
};

namespace detail {

//! A rebuild's ranking key of token t with Eq. 2 score s, larger = more important: the score in
//! topk's order as an unsigned integer (topk_key: -0 is +0, a NaN score, from a NaN in the key row,
//! ranks below every number) above the complemented token index (ties: lower index first). The keys
//! of distinct tokens differ, so the selection is unique whatever the scores.
[[nodiscard]] SPECDEC_HOST_DEVICE constexpr std::uint64_t partial_kv_rank_key(float s, std::int32_t t) noexcept {
  return (static_cast<std::uint64_t>(topk_key(s)) << 32) | (0xFFFFFFFFu - static_cast<std::uint32_t>(t));
}

//! Tokens a rebuild shows for a request of `len` cached tokens (the same for every kv head): the
//! min(|S|, len) sinks, then min(|B| - |S|, len - sinks) selected tokens.
[[nodiscard]] SPECDEC_HOST_DEVICE constexpr int partial_kv_shown(int len, int sink, int budget) noexcept {
  const int keep = len < sink ? len : sink;
  return keep + (budget - sink < len - keep ? budget - sink : len - keep);
}

//! The shared selection's score of token t: the kv heads' Eq. 2 scores s[h * head_stride + t] added
//! in head order, in float (rebuild, the batch form's host backend and its cuda kernel: the same
//! float).
[[nodiscard]] SPECDEC_HOST_DEVICE inline float partial_kv_shared_score(const float* s, std::int64_t head_stride, int heads,
                                                                       std::int64_t t) noexcept {
  float sum = s[t];
  for (int h = 1; h < heads; ++h) sum += s[h * head_stride + t];
  return sum;
}

//! Largest |B|: the appends' replacement count, kept at most 2 (|B| - |S|), stays an int32.
inline constexpr int partial_kv_max_budget = (1 << 30) - 1;

//! The rebuild trigger: more than |B| - |S| tokens have replaced slots since the last rebuild (never
//! when |S| = |B|: new tokens are not shown then). This is §3.3's rule ("once replacements extend
//! beyond the |S| position"). Algorithm 1, line 5 writes it as |C_full| - e > |B| - |S|, counting every
//! token added since the rebuild: the two agree when the partial cache was full at the rebuild; when
//! it had free slots, the tokens that fill them replace nothing, and this fires later by that many
//! tokens (until then every new token is still shown, so a rebuild would change nothing they read).
[[nodiscard]] SPECDEC_HOST_DEVICE constexpr bool partial_kv_needs_rebuild(std::int32_t placed, int budget, int sink) noexcept {
  return budget > sink && placed > budget - sink;
}

//! The replacement count after one more replacement, kept in [0, 2 (|B| - |S|)] (n = |B| - |S|).
[[nodiscard]] SPECDEC_HOST_DEVICE constexpr std::int32_t partial_kv_advance(std::int32_t placed, int n) noexcept {
  return placed + 1 > 2 * n ? placed + 1 - n : placed + 1;
}

//! Whether the eviction slots that one request's appends (partial_kv_place, same arguments) would use
//! all lie in [0, |B|): each token seen .. len - 1 past the free slots takes the next slot of each kv
//! head's eviction order, evict[h][placed mod (|B| - |S|)]. Reads only; the batch form's host backend
//! checks every request with it before it writes any. Preconditions: len >= seen, 0 <= placed.
//! O(min(replacements, |B| - |S|) x heads).
SPECDEC_HOST_DEVICE inline bool partial_kv_evictions_ok(int len, int heads, int budget, int sink, const std::int32_t* evict,
                                                        std::int64_t e_stride, std::int32_t size, std::int32_t seen,
                                                        std::int32_t placed) noexcept {
  // The p-th replacement since the rebuild (p from 0) takes eviction_order[p mod (|B| - |S|)], which
  // differs per kv head. The count is kept at most 2 (|B| - |S|), lowered by |B| - |S| past that
  // (its residue and whether it exceeds |B| - |S| are all that count), so no number of appends
  // overflows it: 2 (|B| - |S|) <= 2^31 - 2 for |B| < 2^30 (checked by every caller).
  const int n = budget - sink;
  if (n <= 0) return true;  // |S| = |B|: new tokens past the free slots are not shown
  const int fills = budget - size < len - seen ? budget - size : len - seen;
  const int count = len - seen - fills;  // the replacements' slots cycle: the first min(count, n) are all there are
  std::int32_t pl = placed;
  for (int k = 0; k < count && k < n; ++k, pl = partial_kv_advance(pl, n))
    for (int h = 0; h < heads; ++h) {
      const std::int32_t slot = evict[h * e_stride + pl % n];
      if (slot < 0 || slot >= budget) return false;
    }
  return true;
}

//! One request's appends (partial_kv_index::append, partial_kv_append_batch's backends): each token
//! seen .. len - 1 takes slot `size` while size < |B|, else (|B| > |S|) the next slot of each kv
//! head's eviction order, evict[h][placed mod (|B| - |S|)] (placed counts the replacements since the
//! rebuild, kept in [0, 2 (|B| - |S|)]), else it is not shown. index[h * i_stride + slot],
//! evict[h * e_stride + p]. Returns false, having written nothing, when an eviction slot the walk
//! would use is outside [0, |B|) (partial_kv_evictions_ok; the lists are the caller's arrays in the
//! batch form). Preconditions: len >= seen, 0 <= placed. O((len - seen) x heads).
//! partial_kv_place's writes, for callers that have run partial_kv_evictions_ok on the same state.
SPECDEC_HOST_DEVICE inline void partial_kv_place_checked(int len, int heads, int budget, int sink, std::int32_t* index,
                                                         std::int64_t i_stride, const std::int32_t* evict,
                                                         std::int64_t e_stride, std::int32_t& size, std::int32_t& seen,
                                                         std::int32_t& placed) noexcept {
  const int n = budget - sink;
  for (int t = seen; t < len; ++t) {
    if (size < budget) {
      const int slot = size++;
      for (int h = 0; h < heads; ++h) index[h * i_stride + slot] = t;
    } else if (n > 0) {
      const int p = placed % n;
      placed = partial_kv_advance(placed, n);
      for (int h = 0; h < heads; ++h) index[h * i_stride + evict[h * e_stride + p]] = t;
    }
  }
  seen = len;
}

SPECDEC_HOST_DEVICE inline bool partial_kv_place(int len, int heads, int budget, int sink, std::int32_t* index,
                                                 std::int64_t i_stride, const std::int32_t* evict, std::int64_t e_stride,
                                                 std::int32_t& size, std::int32_t& seen, std::int32_t& placed) noexcept {
  if (!partial_kv_evictions_ok(len, heads, budget, sink, evict, e_stride, size, seen, placed)) return false;
  partial_kv_place_checked(len, heads, budget, sink, index, i_stride, evict, e_stride, size, seen, placed);
  return true;
}

//! One (request, kv head)'s lists after a rebuild (partial_kv_index::rebuild, partial_kv_select_batch's
//! host backend; the cuda kernel computes the same lists): slots[0, keep) = the sinks 0 .. keep - 1,
//! slots[keep, keep + rest) = the rest tokens of [keep, len) with the largest partial_kv_rank_key of
//! s[t], in token order; evict[0, |B| - |S|) = the slots left free (from |B| - 1 down), then the
//! selected tokens' slots from the least important up. Slots past keep + rest are not written.
//! `order`: scratch of len - keep keys. O(len + rest log rest).
inline void partial_kv_select_lists(const float* s, int len, int sink, int budget, std::int32_t* slots,
                                    std::int32_t* evict, std::uint64_t* order) {
  const int keep = std::min(sink, len), rest = partial_kv_shown(len, sink, budget) - keep;
  std::iota(slots, slots + keep, 0);
  // The keys are plain integers in contiguous memory: the selection compares them instead of
  // chasing scores by index.
  const auto olen = static_cast<std::size_t>(len - keep);
  for (std::size_t i = 0; i < olen; ++i) {
    const int t = keep + static_cast<int>(i);
    order[i] = partial_kv_rank_key(s[t], t);
  }
  auto token = [](std::uint64_t key) { return static_cast<std::int32_t>(0xFFFFFFFFu - static_cast<std::uint32_t>(key)); };
  // Select, then rank the selected: O(length + k log k), k = |B| - |S| (a partial_sort, O(length
  // log k), made a 32K-token rebuild 3-4x slower than the importance scores themselves).
  if (static_cast<std::size_t>(rest) < olen) std::nth_element(order, order + rest, order + olen, std::greater<>{});
  std::sort(order, order + rest, std::greater<>{});
  // Token order in the slots; the eviction list: free slots (newest-filled first), then the
  // selected tokens' slots from the least important up.
  for (int i = 0; i < rest; ++i) slots[keep + i] = token(order[i]);
  std::sort(slots + keep, slots + keep + rest);
  int e = 0;
  for (int slot = budget - 1; slot >= keep + rest && slot >= sink; --slot) evict[e++] = slot;
  for (int i = rest - 1; i >= 0; --i)
    evict[e++] = keep + static_cast<int>(std::lower_bound(slots + keep, slots + keep + rest, token(order[i])) - (slots + keep));
}

}  // namespace detail

//! Budgeted per-(request, kv head) token lists of TokenSwift's dynamic partial KV cache, and the
//! update policy of §3.3 (see the file comment). Owns its index memory (fixed size); reads the full
//! cache only through the kv_layout passed to rebuild() and through layout().
class partial_kv_index {
 public:
  //! `budget` = |B| >= 1 slots per (request, kv head), of which the first `sink` = |S| in [0, |B|]
  //! keep the request's first tokens; `selection` says whether each kv head ranks its own tokens
  //! (the paper) or all share one set. Throws specdec::invalid_argument naming the bad argument.
  partial_kv_index(int requests, int kv_heads, int budget, int sink,
                   partial_kv_selection selection = partial_kv_selection::per_kv_head)
      : heads_(kv_heads), budget_(budget), sink_(sink), selection_(selection) {
    constexpr std::string_view fn = "specdec::partial_kv_index";
    require(selection == partial_kv_selection::per_kv_head || selection == partial_kv_selection::shared, fn, "selection",
            "partial_kv_selection::per_kv_head or ::shared", static_cast<int>(selection));
    require(requests >= 0, fn, "requests", ">= 0", requests);
    require(kv_heads >= 1, fn, "kv_heads", ">= 1", kv_heads);
    require(budget >= 1 && budget <= detail::partial_kv_max_budget, fn, "budget", "in [1, 2^30 - 1] (|B|, TokenSwift §3.3)",
            budget);
    if (!(sink >= 0 && sink <= budget)) [[unlikely]]
      throw_invalid_argument(fn, "sink", "in [0, budget = " + std::to_string(budget) + "] (|S|)", sink);
    index_.assign(static_cast<std::size_t>(checked_size_product(fn, "budget", {requests, kv_heads, budget})), 0);
    evict_.assign(static_cast<std::size_t>(requests) * kv_heads * (budget - sink), 0);  // <= index_'s size
    size_.assign(static_cast<std::size_t>(requests), 0);
    seen_.assign(static_cast<std::size_t>(requests), 0);
    placed_.assign(static_cast<std::size_t>(requests), 0);
    for (int r = 0; r < requests; ++r) clear(r);  // the eviction lists before any rebuild
  }

  //! The requests it was built for; 0 once moved from (its arrays went with the move, so every call
  //! then throws instead of indexing arrays it no longer has).
  [[nodiscard]] int num_requests() const noexcept { return static_cast<int>(size_.size()); }
  [[nodiscard]] int num_kv_heads() const noexcept { return heads_; }
  [[nodiscard]] int budget() const noexcept { return budget_; }
  [[nodiscard]] int sink() const noexcept { return sink_; }
  [[nodiscard]] partial_kv_selection selection() const noexcept { return selection_; }
  //! Tokens shown for request r (the same for every kv head): min(|B|, tokens seen).
  [[nodiscard]] int size(int r) const { return size_.at(check_request(r, "size")); }
  //! Full-cache tokens of request r accounted for (the length at the last rebuild or append).
  [[nodiscard]] int seen(int r) const { return seen_.at(check_request(r, "seen")); }
  //! True once more than |B| - |S| tokens have replaced slots since the last rebuild (§3.3's trigger;
  //! Algorithm 1, line 5's when the cache was full at the rebuild: partial_kv_needs_rebuild).
  [[nodiscard]] bool needs_rebuild(int r) const {
    return detail::partial_kv_needs_rebuild(placed_.at(check_request(r, "needs_rebuild")), budget_, sink_);
  }
  //! The full-cache token indices shown for (r, kv head h), slots 0 .. size(r) - 1.
  [[nodiscard]] std::span<const std::int32_t> indices(int r, int h) const {
    check_request(r, "indices");
    require_in_range("specdec::partial_kv_index::indices", "kv_head", h, 0, heads_ - 1);
    return {index_.data() + (static_cast<std::size_t>(r) * heads_ + h) * budget_, static_cast<std::size_t>(size_[r])};
  }

  //! Recomputes request r's selection from the query `q` [Hq, D] of its newest token and the full
  //! cache (Algorithm 1, line 2 at prefill and line 6): per kv head, the first min(|S|, length)
  //! tokens, then the min(|B| - |S|, length - |S|) other tokens of highest Eq. 2 importance (ties:
  //! lower token index first), stored in token order; their eviction order is the slots left free
  //! (from |B| - 1 down), then the selected ones by increasing importance.
  //! O(length * Hkv * D + length * log |B|).
  template <tensor_like Q, class L>
  void rebuild(const host& policy, int r, const Q& q, const L& cache) {
    static_assert(check_kv_layout<L>());  // L is unconstrained so that these messages are what a non-layout gets
    if constexpr (kv_layout<L>) {
      constexpr std::string_view fn = "specdec::partial_kv_index::rebuild";
      check_request(r, "rebuild");
      // cache.length(r) is read below: validate (host-accessible, lengths sane) first
      validate_kv_layout(cache, fn, "cache");
      require(host_accessible(cache.space()), fn, "cache", "host-accessible memory", cache.space());
      require_equal(fn, "cache.num_kv_heads()", heads_, cache.num_kv_heads());
      if (r >= cache.num_requests()) [[unlikely]]
        throw_invalid_argument(fn, "cache.num_requests()", "> request " + std::to_string(r), cache.num_requests());
      // length read once: the tokens scored are the tokens ranked
      const int len = cache.length(r), cols = std::max(len, 1);  // a [heads, 0] view is still [heads, 1]
      scores_.resize(static_cast<std::size_t>(heads_) * cols);
      detail::kv_importance_at(policy, q, cache, r, len, make_view<2>(scores_.data(), {heads_, cols}));
      const int keep = std::min(sink_, len), n = budget_ - sink_;
      if (selection_ == partial_kv_selection::shared)  // rank by the heads' summed scores, in row 0
        for (int i = 0; i < len; ++i) scores_[static_cast<std::size_t>(i)] = detail::partial_kv_shared_score(scores_.data(), cols, heads_, i);
      // One selection per kv head (only head 0's when shared), in parallel on the pool; each head
      // uses its own row of the order_ scratch.
      const int ranked = selection_ == partial_kv_selection::shared ? 1 : heads_;
      const auto olen = static_cast<std::size_t>(len - keep);
      order_.resize(static_cast<std::size_t>(ranked) * olen);
      parallel_for(policy, ranked, [&](std::int64_t hi) {
        const int h = static_cast<int>(hi);
        detail::partial_kv_select_lists(scores_.data() + static_cast<std::size_t>(h) * cols, len, sink_, budget_,
                                        index_.data() + (static_cast<std::size_t>(r) * heads_ + h) * budget_,
                                        evict_.data() + (static_cast<std::size_t>(r) * heads_ + h) * n,
                                        order_.data() + static_cast<std::size_t>(h) * olen);
      });
      for (int h = ranked; h < heads_; ++h) {  // shared: every head shows head 0's lists
        const std::size_t h0 = static_cast<std::size_t>(r) * heads_;
        std::copy_n(index_.data() + h0 * budget_, budget_, index_.data() + (h0 + h) * budget_);
        std::copy_n(evict_.data() + h0 * n, n, evict_.data() + (h0 + h) * n);
      }
      size_[r] = detail::partial_kv_shown(len, sink_, budget_);
      seen_[r] = len;
      placed_[r] = 0;
    }
  }

  //! Forgets request r's selection, as constructed: nothing shown (size 0), nothing seen, the eviction
  //! lists as before any rebuild. For a request slot whose cache was released (its length drops to 0,
  //! and layout() would otherwise show rows the cache no longer has, which attention's layout check
  //! refuses for every request of the call) or that a new request takes. O(|B| Hkv).
  void clear(int r) {
    check_request(r, "clear");
    const int n = budget_ - sink_;  // before any rebuild: the slots above |S|, newest-filled first
    for (int h = 0; h < heads_; ++h)
      for (int i = 0; i < n; ++i) evict_[(static_cast<std::size_t>(r) * heads_ + h) * n + i] = budget_ - 1 - i;
    size_[r] = 0;
    seen_[r] = 0;
    placed_[r] = 0;
  }

  //! The eviction order of (r, kv head h): the slots new tokens take once the |B| slots are full,
  //! the first one first (then cyclically; see append). |B| - |S| entries.
  [[nodiscard]] std::span<const std::int32_t> eviction_order(int r, int h) const {
    check_request(r, "eviction_order");
    require_in_range("specdec::partial_kv_index::eviction_order", "kv_head", h, 0, heads_ - 1);
    const std::size_t n = static_cast<std::size_t>(budget_ - sink_);
    return {evict_.data() + (static_cast<std::size_t>(r) * heads_ + h) * n, n};
  }

  //! Accounts for request r's full cache having grown to `new_length` committed tokens: each new
  //! token (seen(r) .. new_length - 1) takes a free slot, else replaces the next slot of each kv
  //! head's eviction order (cyclically). With |S| = |B| new tokens are never shown. Never
  //! allocates. new_length < seen(r) throws (rebuild after truncating a cache).
  void append(int r, int new_length) {
    constexpr std::string_view fn = "specdec::partial_kv_index::append";
    check_request(r, "append");
    if (new_length < seen_[r]) [[unlikely]]
      throw_invalid_argument(fn, "new_length", ">= seen(request) = " + std::to_string(seen_[r]), new_length);
    const std::size_t rh = static_cast<std::size_t>(r) * heads_;
    // the lists are this object's own (slots in range): the walk always succeeds
    (void)detail::partial_kv_place(new_length, heads_, budget_, sink_, index_.data() + rh * budget_, budget_,
                                   evict_.data() + rh * (budget_ - sink_), budget_ - sink_, size_[r], seen_[r], placed_[r]);
  }

  //! The partial view of `cache` (a kv_layout over the same requests and kv heads), read in place.
  //! Valid while this object lives and is not modified.
  //! Returns indexed_kv<L>.
  template <class L>
  [[nodiscard]] auto layout(const L& cache) const {
    static_assert(check_kv_layout<L>());  // L is unconstrained so that these messages are what a non-layout gets
    if constexpr (kv_layout<L>) {
      constexpr std::string_view fn = "specdec::partial_kv_index::layout";
      require_equal(fn, "cache.num_kv_heads()", heads_, cache.num_kv_heads());
      require_equal(fn, "cache.num_requests()", num_requests(), cache.num_requests());
      return indexed_kv<L>{cache, index_.data(), size_.data(), budget_};
    }
  }

  //! Bytes of index state: the slots and the eviction lists (fixed at construction; the rebuild
  //! scratch is separate).
  [[nodiscard]] std::size_t index_bytes() const noexcept {
    return (index_.capacity() + evict_.capacity()) * sizeof(std::int32_t);
  }
  //! Address of the index storage (stable for the object's life: appends never reallocate).
  [[nodiscard]] const std::int32_t* index_data() const noexcept { return index_.data(); }

 private:
  int check_request(int r, std::string_view member) const {
    if (r < 0 || r >= num_requests()) [[unlikely]]  // the name is built only on failure: appends never allocate
      require_in_range(std::string("specdec::partial_kv_index::") + std::string(member), "request", r, 0, num_requests() - 1);
    return r;
  }

  int heads_, budget_, sink_;
  partial_kv_selection selection_;
  std::vector<std::int32_t> index_;                  // [requests, heads, budget]
  std::vector<std::int32_t> evict_;                  // [requests, heads, budget - sink]: eviction order
  std::vector<std::int32_t> size_, seen_, placed_;  // placed_: replacements since the rebuild
  std::vector<float> scores_;                        // rebuild scratch [heads, length]
  std::vector<std::uint64_t> order_;                 // rebuild scratch [ranked heads, length]: ranking keys
};

namespace detail {

//! The checks partial_kv_select_batch and partial_kv_append_batch share: |B| in [1, 2^30 - 1], |S| in
//! [0, |B|], and the lists index [R, Hkv, |B|] and evict [R, Hkv, |B| - |S|] in Policy's memory with
//! unit inner stride (index written: elements that do not overlap). Throws invalid_argument.
template <class Policy, class IV, class EV>
void check_partial_kv_lists(std::string_view fn, int budget, int sink, const IV& index, const EV& evict, int R, int hkv) {
  require(budget >= 1 && budget <= partial_kv_max_budget, fn, "budget", "in [1, 2^30 - 1] (|B|, TokenSwift §3.3)",
          budget);
  if (!(sink >= 0 && sink <= budget)) [[unlikely]]
    throw_invalid_argument(fn, "sink", "in [0, budget = " + std::to_string(budget) + "] (|S|)", sink);
  require_policy_memory<Policy>(fn, "index", index);
  require_shape(fn, "index", index, {R, hkv, budget});
  require_unit_inner_stride(fn, "index", index);
  require_unique_elements(fn, "index", index);
  require(R == 0 || index.data() != nullptr, fn, "index", "a non-null data pointer", "nullptr");
  require_policy_memory<Policy>(fn, "evict", evict);
  require_shape(fn, "evict", evict, {R, hkv, budget - sink});
  require_unit_inner_stride(fn, "evict", evict);
  require(R == 0 || budget == sink || evict.data() != nullptr, fn, "evict", "a non-null data pointer", "nullptr");
}

//! partial_kv_select_batch's arguments, as pointers and the layout (a kernel parameter).
template <class L>
struct partial_kv_select_args {
  const float* scores = nullptr;
  std::int64_t s_stride_request = 0, s_stride_head = 0, columns = 0;
  L cache;
  int budget = 0, sink = 0;
  bool shared = false;
  std::int32_t* index = nullptr;  //!< [R, Hkv, budget]
  std::int64_t i_stride_request = 0, i_stride_head = 0;
  std::int32_t* evict = nullptr;  //!< [R, Hkv, budget - sink]
  std::int64_t e_stride_request = 0, e_stride_head = 0;
  std::int32_t* sizes = nullptr;   //!< [R]
  std::int32_t* seen = nullptr;    //!< [R]
  std::int32_t* placed = nullptr;  //!< [R]
  std::int32_t* status = nullptr;
};

//! The seam between partial_kv_select_batch and its backends:
//!   template <class L> static void run(const Policy&, const partial_kv_select_args<L>&);
//! The host backend is below, the cuda one in kv/partial_kv.cuh.
SPECDEC_BACKEND_SEAM(partial_kv_select_backend, "partial_kv_select_batch", "specdec/kv/partial_kv.cuh");

template <>
struct partial_kv_select_backend<host> {
  template <class L>
  static void run(const host& policy, const partial_kv_select_args<L>& a) {
    constexpr std::string_view fn = "specdec::partial_kv_select_batch";
    const int R = a.cache.num_requests(), hkv = a.cache.num_kv_heads(), n = a.budget - a.sink;
    const std::vector<int> lens = lengths_within(fn, a.cache, a.columns);  // a rejected call writes nothing
    const int ranked = a.shared ? 1 : hkv;
    std::vector<float> sum;
    std::vector<std::uint64_t> order;
    for (int r = 0; r < R; ++r) {
      const int len = lens[static_cast<std::size_t>(r)], keep = std::min(a.sink, len);
      const float* s = a.scores + r * a.s_stride_request;
      if (a.shared) {
        sum.resize(static_cast<std::size_t>(len));
        for (int i = 0; i < len; ++i) sum[static_cast<std::size_t>(i)] = partial_kv_shared_score(s, a.s_stride_head, hkv, i);
      }
      const auto olen = static_cast<std::size_t>(len - keep);
      order.resize(static_cast<std::size_t>(ranked) * olen);
      parallel_for(policy, ranked, [&](std::int64_t h) {
        partial_kv_select_lists(a.shared ? sum.data() : s + h * a.s_stride_head, len, a.sink, a.budget,
                                a.index + r * a.i_stride_request + h * a.i_stride_head,
                                a.evict + r * a.e_stride_request + h * a.e_stride_head,
                                order.data() + static_cast<std::size_t>(h) * olen);
      });
      for (int h = ranked; h < hkv; ++h) {  // shared: every head shows head 0's lists
        std::copy_n(a.index + r * a.i_stride_request, partial_kv_shown(len, a.sink, a.budget),
                    a.index + r * a.i_stride_request + h * a.i_stride_head);
        std::copy_n(a.evict + r * a.e_stride_request, n, a.evict + r * a.e_stride_request + h * a.e_stride_head);
      }
      a.sizes[r] = partial_kv_shown(len, a.sink, a.budget), a.seen[r] = len, a.placed[r] = 0;
    }
    a.status[0] = 0, a.status[1] = -1, a.status[2] = -1;
  }
};

//! Largest |B| - |S| of partial_kv_select_batch under specdec::cuda (the kernel ranks a request's
//! selected tokens in one block-wide sort in shared memory).
inline constexpr int partial_kv_select_max_device = 4096;

}  // namespace detail

//! TokenSwift's partial-cache selection (§3.3; Algorithm 1, line 2 at prefill and line 6) for every
//! request of a batch at once, from Eq. 2 scores (kv_importance_batch's output): the slot and eviction
//! lists partial_kv_index::rebuild computes, written to the caller's arrays, so a GPU engine rebuilds
//! its requests' partial caches without a copy to the host. Per request r (length len = cache.length(r))
//! and kv head h, ranked by scores[r][h] (per_kv_head) or by the heads' scores added in head order
//! (shared; every head gets the same lists):
//!   index[r][h][0, keep)            the sinks 0 .. keep - 1, keep = min(|S|, len)
//!   index[r][h][keep, sizes[r])     the min(|B| - |S|, len - keep) other tokens of highest score
//!                                   (ties: lower token index; a NaN score ranks below every number),
//!                                   in token order; slots past sizes[r] are not written
//!   evict[r][h][0, |B| - |S|)       the slots new tokens replace once the |B| slots are full: those
//!                                   left free (from |B| - 1 down), then the selected tokens' slots,
//!                                   least important first (partial_kv_index::eviction_order)
//!   sizes[r]                        the tokens shown, keep + min(|B| - |S|, len - keep)
//!   seen[r], placed[r]              len and 0: partial_kv_append_batch's state (the tokens accounted
//!                                   for, the replacements since this selection)
//! indexed_kv{cache, index, sizes, budget} over contiguous index arrays shows the selection in place.
//! The arrays (scores included) must not share memory (checked).
//!   scores  float [R, Hkv, columns], unit inner stride; columns >= every cache.length(r)
//!   cache   any kv_layout (only its lengths and head count are read); R = cache.num_requests()
//!   budget  |B| in [1, 2^30 - 1]; sink |S| in [0, budget]
//!   index   int32 [R, Hkv, budget], evict int32 [R, Hkv, budget - sink], unit inner stride
//!   sizes, seen, placed  int32 [R], written
//!   status  int32 [3]: {0, -1, -1}, or the device's report (device_error::length: a request whose
//!           length exceeds the columns or is negative; nothing of it is written)
//! specdec::host: host-accessible memory; lengths checked before anything is written
//! (invalid_argument). The lists equal partial_kv_index::rebuild's for the same scores.
//! specdec::cuda (needs kv/partial_kv.cuh and nvcc): device-accessible memory; |B| - |S| <= 4096; a
//! block per (request, ranked kv head): a radix select of the threshold key, an ordered gather and a
//! block sort of the selected keys. The lists equal the host backend's for the same scores (a selection
//! by keys and indices only, no arithmetic but the shared mode's sum, the same float with IEEE
//! denormals, nvcc's default, not under -ftz=true / --use_fast_math). Enqueued on
//! policy.stream without synchronisation, graph-capturable.
//! O(sum_r length_r x ranked heads) plus a sort of |B| - |S| keys per (request, ranked head).
template <execution_policy Policy, tensor_like S, class L, tensor_like I, tensor_like E, class Z, class N, class P,
          class ST>
  requires(detail::int32_output<Z> && detail::int32_output<N> && detail::int32_output<P> && detail::int32_output<ST>)
void partial_kv_select_batch(const Policy& policy, const S& scores_in, const L& cache, int budget, int sink,
                             partial_kv_selection selection, const I& index_in, const E& evict_in, const Z& sizes_in,
                             const N& seen_in, const P& placed_in, const ST& status_in) {
  static_assert(check_kv_layout<L>());  // L is unconstrained so that these messages are what a non-layout gets
  if constexpr (kv_layout<L>) {
    constexpr std::string_view fn = "specdec::partial_kv_select_batch";
    static_assert(std::is_same_v<std::remove_cv_t<typename S::element_type>, float> && S::rank == 3,
                  "specdec::partial_kv_select_batch: scores must be a float tensor [requests, Hkv, columns]");
    static_assert(std::is_same_v<typename I::element_type, std::int32_t> && I::rank == 3,
                  "specdec::partial_kv_select_batch: index must be a writable int32 tensor [requests, Hkv, budget]");
    static_assert(std::is_same_v<typename E::element_type, std::int32_t> && E::rank == 3,
                  "specdec::partial_kv_select_batch: evict must be a writable int32 tensor [requests, Hkv, budget - sink]");
    validate_kv_layout(cache, fn, "cache");
    require_policy_memory<Policy>(fn, "cache", cache);
    const auto scores = as_view(scores_in);
    const auto index = as_view(index_in);
    const auto evict = as_view(evict_in);
    const auto sizes = as_view(sizes_in);
    const auto seen = as_view(seen_in);
    const auto placed = as_view(placed_in);
    const auto status = as_view(status_in);
    const int R = cache.num_requests(), hkv = cache.num_kv_heads();
    detail::check_partial_kv_lists<Policy>(fn, budget, sink, index, evict, R, hkv);
    require_unique_elements(fn, "evict", evict);  // written here
    require(selection == partial_kv_selection::per_kv_head || selection == partial_kv_selection::shared, fn,
            "selection", "partial_kv_selection::per_kv_head or ::shared", static_cast<int>(selection));
    if constexpr (on_device_v<Policy>)
      require(budget - sink <= detail::partial_kv_select_max_device, fn, "budget",
              "budget - sink <= " + std::to_string(detail::partial_kv_select_max_device) + " under specdec::cuda",
              budget - sink);
    require_policy_memory<Policy>(fn, "scores", scores);
    require_shape(fn, "scores", scores, {R, hkv, -1});
    require_unit_inner_stride(fn, "scores", scores);
    require(R == 0 || scores.extent(2) == 0 || scores.data() != nullptr, fn, "scores", "a non-null data pointer",
            "nullptr");
    require_policy_array<Policy>(fn, "sizes", sizes, R);
    require_policy_array<Policy>(fn, "seen", seen, R);
    require_policy_array<Policy>(fn, "placed", placed, R);
    require_policy_array<Policy>(fn, "status", status, 3);
    // the kernel reads back the slots it wrote and re-reads the scores between its passes
    require_disjoint(fn, "scores", scores, "index", index, "evict", evict, "sizes", sizes, "seen", seen, "placed", placed,
                     "status", status);
    if constexpr (on_device_v<Policy>)  // written while other blocks still read the lengths through the layout
      detail::require_outputs_apart_from_mapping(cache, true, fn, "index", index, "evict", evict, "sizes", sizes, "seen", seen,
                                                 "placed", placed, "status", status);
    detail::partial_kv_select_args<L> a{scores.data(),   scores.stride(0), scores.stride(1), scores.extent(2),
                                        cache,           budget,           sink,             selection == partial_kv_selection::shared,
                                        index.data(),    index.stride(0),  index.stride(1),  evict.data(),
                                        evict.stride(0), evict.stride(1),  sizes.data(),     seen.data(),
                                        placed.data(),   status.data()};
    detail::partial_kv_select_backend<Policy>::run(policy, a);
  }
}

namespace detail {

//! partial_kv_append_batch's arguments, as pointers and the layout (a kernel parameter).
template <class L>
struct partial_kv_append_args {
  L cache;
  int budget = 0, sink = 0;
  std::int32_t* index = nullptr;  //!< [R, Hkv, budget]
  std::int64_t i_stride_request = 0, i_stride_head = 0;
  const std::int32_t* evict = nullptr;  //!< [R, Hkv, budget - sink]
  std::int64_t e_stride_request = 0, e_stride_head = 0;
  std::int32_t* sizes = nullptr;   //!< [R]
  std::int32_t* seen = nullptr;    //!< [R]
  std::int32_t* placed = nullptr;  //!< [R]
  std::int32_t* status = nullptr;
};

//! Whether request r's state admits its appends (the host backend throws, the kernel reports
//! device_error::partial_state otherwise): length >= seen >= 0, size in [0, |B|], placed in
//! [0, 2 (|B| - |S|)].
SPECDEC_HOST_DEVICE inline bool partial_kv_state_ok(int len, std::int32_t size, std::int32_t seen, std::int32_t placed,
                                                    int budget, int sink) noexcept {
  return seen >= 0 && len >= seen && size >= 0 && size <= budget && placed >= 0 && placed <= 2 * (budget - sink);
}

//! The seam between partial_kv_append_batch and its backends:
//!   template <class L> static void run(const Policy&, const partial_kv_append_args<L>&);
//! The host backend is below, the cuda one in kv/partial_kv.cuh.
SPECDEC_BACKEND_SEAM(partial_kv_append_backend, "partial_kv_append_batch", "specdec/kv/partial_kv.cuh");

template <>
struct partial_kv_append_backend<host> {
  template <class L>
  static void run(const host&, const partial_kv_append_args<L>& a) {
    constexpr std::string_view fn = "specdec::partial_kv_append_batch";
    const int R = a.cache.num_requests(), hkv = a.cache.num_kv_heads();
    // Each length read once: the one checked is the one placed (a user's layout may answer
    // differently from call to call; a length below seen would rewind the state).
    std::vector<int> lens(static_cast<std::size_t>(std::max(R, 0)));
    for (int r = 0; r < R; ++r) {  // every request's state and eviction slots before any write
      const int len = lens[static_cast<std::size_t>(r)] = a.cache.length(r);
      if (!partial_kv_state_ok(len, a.sizes[r], a.seen[r], a.placed[r], a.budget, a.sink)) [[unlikely]]
        throw_invalid_argument(fn, "sizes, seen, placed",
                               "for request " + std::to_string(r) +
                                   ": cache length >= seen >= 0, sizes in [0, budget], placed in [0, 2 (budget - sink)]",
                               "length " + std::to_string(len) + ", size " + std::to_string(a.sizes[r]) +
                                   ", seen " + std::to_string(a.seen[r]) + ", placed " + std::to_string(a.placed[r]));
      if (!partial_kv_evictions_ok(len, hkv, a.budget, a.sink, a.evict + r * a.e_stride_request, a.e_stride_head,
                                   a.sizes[r], a.seen[r], a.placed[r])) [[unlikely]]
        throw_invalid_argument(fn, "evict",
                               "slots in [0, budget = " + std::to_string(a.budget) + ") where request " +
                                   std::to_string(r) + "'s appends use them",
                               "a slot outside");
    }
    for (int r = 0; r < R; ++r) {
      std::int32_t size = a.sizes[r], seen = a.seen[r], placed = a.placed[r];
      // its slots were checked above, and no index write reaches evict (disjoint, checked)
      partial_kv_place_checked(lens[static_cast<std::size_t>(r)], hkv, a.budget, a.sink, a.index + r * a.i_stride_request,
                               a.i_stride_head, a.evict + r * a.e_stride_request, a.e_stride_head, size, seen, placed);
      a.sizes[r] = size, a.seen[r] = seen, a.placed[r] = placed;
    }
    a.status[0] = 0, a.status[1] = -1, a.status[2] = -1;
  }
};

}  // namespace detail

//! partial_kv_index::append for every request of a batch at once, on lists in the caller's arrays
//! (partial_kv_select_batch's outputs): each request's cache has grown to cache.length(r) committed
//! tokens, and each new token seen[r] .. length - 1 takes slot sizes[r] while sizes[r] < |B|, else
//! the next slot of each kv head's eviction order (evict[r][h][placed[r] mod (|B| - |S|)]), else
//! (|S| = |B|) it is not shown. sizes, seen and placed (as partial_kv_select_batch left them, or
//! all 0 before any selection, with evict then |B| - 1 down to |S| as partial_kv_index starts) are
//! updated. placed counts the replacements since the selection, kept in [0, 2 (|B| - |S|)] (lowered
//! by |B| - |S| past that); TokenSwift's trigger (§3.3; Algorithm 1, line 5) is placed[r] > |B| - |S|
//! (detail::partial_kv_needs_rebuild). The arrays must not share memory (checked).
//!   cache   any kv_layout (only its lengths and head count are read); R = cache.num_requests()
//!   budget  |B| in [1, 2^30 - 1]; sink |S| in [0, budget]
//!   index   int32 [R, Hkv, budget], evict int32 [R, Hkv, budget - sink] (read only), unit inner stride
//!   sizes, seen, placed  int32 [R], read and written
//!   status  int32 [3]: {0, -1, -1}, or the device's report (device_error::partial_state: a length below
//!           seen[r], a state entry out of range, or an eviction slot the appends would use outside
//!           [0, |B|); that request is left as it was)
//! specdec::host: host-accessible memory; every request's state and the eviction slots its appends
//! use checked before anything is written (invalid_argument; a refused call writes nothing). The same lists as
//! partial_kv_index::append.
//! specdec::cuda (needs kv/partial_kv.cuh and nvcc): device-accessible memory; a thread per request
//! walks its new tokens (a step's few; a long jump is what a selection is for). Enqueued on
//! policy.stream without synchronisation, graph-capturable. O(sum_r new tokens_r x Hkv).
template <execution_policy Policy, class L, tensor_like I, tensor_like E, class Z, class N, class P, class ST>
  requires(detail::int32_output<Z> && detail::int32_output<N> && detail::int32_output<P> && detail::int32_output<ST>)
void partial_kv_append_batch(const Policy& policy, const L& cache, int budget, int sink, const I& index_in,
                             const E& evict_in, const Z& sizes_in, const N& seen_in, const P& placed_in,
                             const ST& status_in) {
  static_assert(check_kv_layout<L>());  // L is unconstrained so that these messages are what a non-layout gets
  if constexpr (kv_layout<L>) {
    constexpr std::string_view fn = "specdec::partial_kv_append_batch";
    static_assert(std::is_same_v<typename I::element_type, std::int32_t> && I::rank == 3,
                  "specdec::partial_kv_append_batch: index must be a writable int32 tensor [requests, Hkv, budget]");
    static_assert(std::is_same_v<std::remove_cv_t<typename E::element_type>, std::int32_t> && E::rank == 3,
                  "specdec::partial_kv_append_batch: evict must be an int32 tensor [requests, Hkv, budget - sink]");
    validate_kv_layout(cache, fn, "cache");
    require_policy_memory<Policy>(fn, "cache", cache);
    const auto index = as_view(index_in);
    const auto evict = as_view(evict_in);
    const int R = cache.num_requests(), hkv = cache.num_kv_heads();
    detail::check_partial_kv_lists<Policy>(fn, budget, sink, index, evict, R, hkv);
    const auto sizes = as_view(sizes_in);
    const auto seen = as_view(seen_in);
    const auto placed = as_view(placed_in);
    const auto status = as_view(status_in);
    require_policy_array<Policy>(fn, "sizes", sizes, R);
    require_policy_array<Policy>(fn, "seen", seen, R);
    require_policy_array<Policy>(fn, "placed", placed, R);
    require_policy_array<Policy>(fn, "status", status, 3);
    // the walk reads evict and the state while it writes index (an index write into evict would
    // turn a token into a slot)
    require_disjoint(fn, "index", index, "evict", evict, "sizes", sizes, "seen", seen, "placed", placed, "status", status);
    detail::partial_kv_append_args<L> a{cache,        budget,          sink,          index.data(), index.stride(0),
                                        index.stride(1), evict.data(), evict.stride(0), evict.stride(1), sizes.data(),
                                        seen.data(),  placed.data(),   status.data()};
    detail::partial_kv_append_backend<Policy>::run(policy, a);
  }
}

//! A compacted copy of a partial_kv_index's view: the rows it shows for each (request, kv head),
//! stored densely in their slot order as a contiguous NHD cache [requests, |B|, kv_heads, D], kept
//! in sync slot by slot. TokenSwift's own partial cache is such a copy (|B| tokens of K/V per layer);
//! indexed_kv reads the full cache in place instead. The copy costs |B| tokens of KV per layer and
//! one row copy per changed slot, and gives the draft's attention a dense layout: on the host a
//! decode step over 4096 scattered tokens per kv head ran 3x (fp32) to 14x (fp16) slower through indexed_kv than
//! the same number of contiguous tokens (benchmarks/RESULTS.md, partial KV cache).
//! Host memory only. Storage type T: the full cache's (float, half, bfloat16 or double).
template <class T>
class compact_partial_kv {
 public:
  //! Geometry must match the partial_kv_index it will follow (checked by sync). Allocates the
  //! whole copy: 2 * requests * budget * kv_heads * head_dim elements.
  compact_partial_kv(int requests, int kv_heads, int budget, int head_dim)
      : heads_(kv_heads), budget_(budget), dim_(head_dim) {
    constexpr std::string_view fn = "specdec::compact_partial_kv";
    require(requests >= 0, fn, "requests", ">= 0", requests);
    require(kv_heads >= 1, fn, "kv_heads", ">= 1", kv_heads);
    require(budget >= 1, fn, "budget", ">= 1", budget);
    require(head_dim >= 1, fn, "head_dim", ">= 1", head_dim);
    const auto n = static_cast<std::size_t>(checked_size_product(fn, "head_dim", {requests, budget, kv_heads, head_dim}));
    k_.assign(n, T{});
    v_.assign(n, T{});
    shown_.assign(static_cast<std::size_t>(requests) * kv_heads * budget, -1);
    lengths_.assign(static_cast<std::size_t>(requests), 0);
  }

  //! Brings request r's copy up to date with `index` over the full cache `full` (the layout the
  //! index was built over): copies the K and V rows of every (kv head, slot) whose shown token
  //! changed since the last sync. Returns the number of rows copied (per kv head; K and V count
  //! once). After a rebuild that is every slot; after an append, the replaced or filled slots. The
  //! copy trusts that a full-cache token's rows never change once committed: after truncating or
  //! rewriting the full cache, call invalidate(r). Every argument and every shown token is checked
  //! before the first row is copied, so a rejected sync leaves the copy (rows and bookkeeping) as it
  //! was. Never allocates. O(|B| * kv_heads) compares plus the copies.
  template <class L>
  std::int64_t sync(const partial_kv_index& index, const L& full, int r) {
    static_assert(check_kv_layout<L>());  // L is unconstrained so that these messages are what a non-layout gets
    if constexpr (kv_layout<L>) {
      constexpr std::string_view fn = "specdec::compact_partial_kv::sync";
      static_assert(std::is_same_v<std::remove_cv_t<typename L::value_type>, T>,
                    "specdec::compact_partial_kv::sync: the full cache must hold the copy's storage type T");
      if (r < 0 || r >= num_requests()) [[unlikely]]
        throw_invalid_argument(fn, "request", "in [0, " + std::to_string(num_requests() - 1) + "]", r);
      require_equal(fn, "index.num_kv_heads()", heads_, index.num_kv_heads());
      require_equal(fn, "index.budget()", budget_, index.budget());
      require_equal(fn, "index.num_requests()", num_requests(), index.num_requests());
      require_equal(fn, "full.num_kv_heads()", heads_, full.num_kv_heads());
      require_equal(fn, "full.head_dim()", dim_, full.head_dim());
      require(host_accessible(full.space()), fn, "full", "host-accessible memory", full.space());
      validate_kv_layout(full, fn, "full");
      if (r >= full.num_requests()) [[unlikely]]
        throw_invalid_argument(fn, "full.num_requests()", "> request " + std::to_string(r), full.num_requests());
      const int n = index.size(r), len = full.length(r);
      // All shown tokens that will be copied, checked before the first copy.
      for (int h = 0; h < heads_; ++h) {
        const auto shown = index.indices(r, h);
        const std::int32_t* have = shown_.data() + (static_cast<std::size_t>(r) * heads_ + h) * budget_;
        for (int t = 0; t < n; ++t) {
          const std::int32_t tok = shown[static_cast<std::size_t>(t)];
          if (have[t] == tok) continue;
          if (!(tok >= 0 && tok < len)) [[unlikely]]
            throw_invalid_argument(fn, "index", "shown tokens in [0, full.length(request) = " + std::to_string(len) + ")",
                                   tok);
          detail::require_kv_rows(full, r, tok, tok + 1, h, h + 1, detail::kv_rows_read::keys_and_values, fn, "full");
        }
      }
      std::int64_t copied = 0;
      for (int h = 0; h < heads_; ++h) {
        const auto shown = index.indices(r, h);
        std::int32_t* have = shown_.data() + (static_cast<std::size_t>(r) * heads_ + h) * budget_;
        for (int t = 0; t < n; ++t) {
          const std::int32_t tok = shown[static_cast<std::size_t>(t)];
          if (have[t] == tok) continue;
          std::copy_n(full.k_row(r, tok, h), dim_, k_.data() + offset(r, t, h));
          std::copy_n(full.v_row(r, tok, h), dim_, v_.data() + offset(r, t, h));
          have[t] = tok;
          ++copied;
        }
      }
      lengths_[static_cast<std::size_t>(r)] = n;
      return copied;
    } else {
      return 0;
    }
  }

  //! Forgets what request r's copy holds: the next sync copies every shown row.
  void invalidate(int r) {
    if (r < 0 || r >= num_requests()) [[unlikely]]
      throw_invalid_argument("specdec::compact_partial_kv::invalidate", "request",
                             "in [0, " + std::to_string(num_requests() - 1) + "]", r);
    std::fill_n(shown_.data() + static_cast<std::size_t>(r) * heads_ * budget_, static_cast<std::size_t>(heads_) * budget_, -1);
    lengths_[static_cast<std::size_t>(r)] = 0;
  }

  //! The copy as a read-only contiguous NHD layout (request r shows lengths = its last sync's size).
  [[nodiscard]] contiguous_kv<const T> layout() const {
    return {k_.data(), v_.data(), lengths_.data(), num_requests(), budget_, heads_, dim_, memory_space::host};
  }
  //! The requests it was built for; 0 once moved from (its storage went with the move, so every call
  //! then throws instead of indexing storage it no longer has).
  [[nodiscard]] int num_requests() const noexcept { return static_cast<int>(lengths_.size()); }
  //! Bytes of K/V held (fixed at construction).
  [[nodiscard]] std::size_t bytes() const noexcept { return (k_.size() + v_.size()) * sizeof(T); }

 private:
  [[nodiscard]] std::size_t offset(int r, int t, int h) const noexcept {
    return ((static_cast<std::size_t>(r) * budget_ + t) * heads_ + h) * dim_;
  }
  int heads_, budget_, dim_;
  std::vector<T> k_, v_;
  std::vector<std::int32_t> shown_;    // [requests, heads, budget]: full-cache token each slot holds (-1: none)
  std::vector<std::int32_t> lengths_;  // [requests]
};

}  // namespace specdec
