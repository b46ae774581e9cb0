#pragma once
//! \file validate.hpp
//! Argument validation shared by the attention entry points of every backend. It runs on the host
//! before any work and throws specdec::invalid_argument naming the function, the argument, the
//! expectation and the value. The execution policy (host or cuda) selects the memory-space rules:
//!   host  tensors host-accessible; q_indptr values, cache lengths and mask words are read and checked.
//!   cuda  tensors device-accessible with 16-byte aligned rows (the kernels copy 16-byte chunks),
//!         32-bit grid limits; device data is never read, so q_indptr values, cache lengths and
//!         mask contents are documented preconditions there.
//! Element types are not checked here at run time: check_attention_types checks them at compile
//! time (one static_assert per argument), so a wrong type never compiles.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "specdec/attention/attention_params.hpp"
#include "specdec/attention/detail/backend.hpp"
#include "specdec/core/bitmask.hpp"
#include "specdec/core/dtype.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/kv/kv_cache.hpp"
#include "specdec/kv/kv_layout.hpp"

namespace specdec::detail {
inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

//! Storage types the attention kernels are instantiated for.
template <class T>
inline constexpr bool attention_storage_v =
    std::is_same_v<std::remove_cv_t<T>, float> || std::is_same_v<std::remove_cv_t<T>, half> ||
    std::is_same_v<std::remove_cv_t<T>, bfloat16>;

//! Storage types the attention kernels of Policy are instantiated for: the cuda kernels run on the
//! tensor cores, which take 16-bit inputs only.
template <class Policy, class T>
inline constexpr bool storage_ok_v =
    on_device_v<Policy> ? (std::is_same_v<std::remove_cv_t<T>, half> || std::is_same_v<std::remove_cv_t<T>, bfloat16>)
                        : attention_storage_v<T>;

//! The cuda kernels copy 16-byte chunks of head_dim rows: a row's start must be 16-byte aligned,
//! so the data pointer must be and the outer strides must be multiples of 16 bytes.
template <class V>
void require_rows_16b_aligned(std::string_view fn, std::string_view argument, const V& v) {
  constexpr std::int64_t per16 = 16 / static_cast<std::int64_t>(sizeof(typename V::element_type));
  const auto addr = reinterpret_cast<std::uintptr_t>(v.data());
  require(addr % 16 == 0, fn, argument, "a 16-byte aligned data pointer (cuda backend)",
          "address % 16 = " + std::to_string(addr % 16));
  for (int i = 0; i + 1 < V::rank; ++i)
    require(v.stride(i) % per16 == 0 || v.extent(i) <= 1, fn, argument,
            "strides in dimension " + std::to_string(i) + " that are multiples of " + std::to_string(per16) +
                " elements (16-byte rows)",
            v.stride(i));
}

//! Checks of the policy object itself.
template <class Policy>
void validate_policy(std::string_view fn, const Policy& policy) {
  if constexpr (!on_device_v<Policy>) require(policy.num_threads >= 0, fn, "policy.num_threads", ">= 0", policy.num_threads);
  else (void)policy, (void)fn;
}

template <class V>
void require_rank(std::string_view fn, std::string_view argument, int want) {
  if (V::rank != want)
    throw_invalid_argument(fn, argument, "a tensor of rank " + std::to_string(want), V::rank);
}

//! Typed null out / lse arguments for the *_workspace_bytes queries, which validate q and q_indptr
//! like their calls but have no outputs.
template <class T>
inline constexpr const strided_view<T, 3>* no_out = nullptr;
inline constexpr const strided_view<float, 2>* no_lse = nullptr;

//! Validates q, q_indptr, out, lse (types already checked by the caller) and fills the io params.
//! `num_requests` is the layout's request count (or -1: take it from q_indptr's extent). On the
//! host q_indptr's values are checked (q_indptr[0] == 0, non-decreasing, last == q.extent(0));
//! on the device they are a precondition.
template <class Policy, class T, class Q, class I, class O, class LS>
attention_io_params<T> validate_io(std::string_view fn, const Q& q, const I& q_indptr, const O* out, const LS* lse,
                                   int num_requests, int num_kv_heads, float scale) {
  require_rank<Q>(fn, "q", 3);
  require_rank<O>(fn, "out", 3);
  require_rank<LS>(fn, "lse", 2);
  require_rank<I>(fn, "q_indptr", 1);
  require_policy_memory<Policy>(fn, "q", q);
  if (out) require_policy_memory<Policy>(fn, "out", *out);
  if (lse) require_policy_memory<Policy>(fn, "lse", *lse);
  require_policy_memory<Policy>(fn, "q_indptr", q_indptr);
  require_array(fn, "q", q);
  const std::int64_t tokens = q.extent(0), hq = q.extent(1), d = q.extent(2);
  require(supported_head_dim(d), fn, "q", "head_dim (extent 2) of 64, 128 or 256", d);
  require(hq > 0, fn, "q", "at least one query head (extent 1)", hq);
  if (!(num_kv_heads > 0 && hq % num_kv_heads == 0))  // messages are built only on failure: no allocation
    throw_invalid_argument(fn, "q",
                           "a number of query heads that is a multiple of the number of kv heads (" +
                               std::to_string(num_kv_heads) + ")",
                           hq);
  require(tokens <= INT32_MAX, fn, "q", "at most 2^31-1 tokens", tokens);
  require(hq <= INT32_MAX, fn, "q", "at most 2^31-1 query heads", hq);
  // Both backends index query rows (token, head) and the plan's rows per kv head in int.
  require(tokens * hq <= INT32_MAX, fn, "q", "tokens * heads below 2^31", tokens * hq);
  if constexpr (on_device_v<Policy>)
    require(num_kv_heads <= 65535, fn, "q", "at most 65535 kv heads (cuda grid limit)", num_kv_heads);
  require_unit_inner_stride(fn, "q", q);
  if (out) {
    require_shape(fn, "out", *out, {tokens, hq, d});
    require_unit_inner_stride(fn, "out", *out);
    require_unique_elements(fn, "out", *out);
  }
  if constexpr (on_device_v<Policy>) {
    if (tokens > 0) {
      require_rows_16b_aligned(fn, "q", q);
      if (out) require_rows_16b_aligned(fn, "out", *out);
    }
  }
  if (lse) {
    require_shape(fn, "lse", *lse, {tokens, hq});
    require_unique_elements(fn, "lse", *lse);
    if (out) require_disjoint(fn, "out", *out, "lse", *lse);  // both written row by row
  }
  // Every query row is read by each kv split and tile of its head while other rows' outputs are
  // written (on other threads, or other blocks on a GPU), so no output may share memory with q or
  // q_indptr, not even exactly (in place). (The tree inputs: require_tree_inputs_apart.)
  if (out) require_outputs_apart(fn, std::forward_as_tuple("out", *out), std::forward_as_tuple("q", q, "q_indptr", q_indptr));
  if (lse) require_outputs_apart(fn, std::forward_as_tuple("lse", *lse), std::forward_as_tuple("q", q, "q_indptr", q_indptr));
  if (num_requests < 0) {  // counted from q_indptr (tree_attention): in int64, before narrowing
    const std::int64_t e = q_indptr.extent(0);
    require(e >= 1 && e <= INT32_MAX, fn, "q_indptr", "between 1 and 2^31 - 1 elements (num_requests + 1)", e);
    num_requests = static_cast<int>(e - 1);
  }
  require_shape(fn, "q_indptr", q_indptr, {static_cast<std::int64_t>(num_requests) + 1});
  const auto* ip = static_cast<const std::int32_t*>(q_indptr.data());
  const std::int64_t ips = q_indptr.stride(0);
  require(ips == 1 || num_requests == 0, fn, "q_indptr", "unit stride", ips);
  if constexpr (!on_device_v<Policy>)
    validate_indptr(fn, "q_indptr", "q_indptr", ip, num_requests, tokens, "the number of query tokens q.extent(0)");
  // the kernels scale by scale * log2(e) (exp2 form): that product must stay finite too
  require(std::isfinite(scale) && std::isfinite(scale * 1.4426950408889634f), fn, "options.scale",
          "a finite value with |scale| * log2(e) < FLT_MAX (0 = 1/sqrt(head_dim))", scale);

  attention_io_params<T> p;
  p.q = static_cast<const T*>(q.data());
  p.q_stride_token = q.stride(0);
  p.q_stride_head = q.stride(1);
  if (out) {
    p.o = const_cast<T*>(static_cast<const T*>(out->data()));
    p.o_stride_token = out->stride(0);
    p.o_stride_head = out->stride(1);
  }
  if (lse) {
    p.lse = const_cast<float*>(static_cast<const float*>(lse->data()));
    p.lse_stride_token = lse->stride(0);
    p.lse_stride_head = lse->stride(1);
  }
  p.q_indptr = ip;
  p.num_requests = num_requests;
  p.total_tokens = static_cast<int>(tokens);
  p.num_qo_heads = static_cast<int>(hq);
  p.num_kv_heads = num_kv_heads;
  p.head_dim = static_cast<int>(d);
  p.scale = scale == 0.0f ? 1.0f / std::sqrt(static_cast<float>(d)) : scale;
  return p;
}

//! True when every element type of an attention call is right for Policy: Q a storage type of
//! Policy (storage_ok_v), the cache's value_type, spec_k, spec_v and out the same type as Q (cv
//! ignored), out and lse non-const, lse float, q_indptr std::int32_t, the mask specdec::mask_word.
//! `KV`, `SK`, `SV`, `M` are void when the call has no such argument.
template <class Policy, class Q, class KV, class SK, class SV, class O, class LS, class I, class M>
inline constexpr bool attention_types_ok =
    storage_ok_v<Policy, Q> && (std::is_void_v<KV> || std::is_same_v<std::remove_cv_t<KV>, std::remove_cv_t<Q>>) &&
    (std::is_void_v<SK> || std::is_same_v<std::remove_cv_t<SK>, std::remove_cv_t<Q>>) &&
    (std::is_void_v<SV> || std::is_same_v<std::remove_cv_t<SV>, std::remove_cv_t<Q>>) &&
    std::is_same_v<std::remove_cv_t<O>, std::remove_cv_t<Q>> && !std::is_const_v<O> &&
    std::is_same_v<LS, float> && std::is_same_v<std::remove_cv_t<I>, std::int32_t> &&
    (std::is_void_v<M> || std::is_same_v<std::remove_cv_t<M>, mask_word>);

//! The element-type check of every attention entry point (decode, tree and hybrid tree attention
//! and their workspace queries), written once over the nine types of a call: the policy, q's
//! element type, the cache's value_type, spec_k's, spec_v's, out's, lse's, q_indptr's and the
//! mask's element types (void for an argument the call does not have). One static_assert per
//! argument, each a sentence naming it, so a wrong type fails to compile with exactly the messages
//! of the wrong arguments. Returns attention_types_ok, so an entry point writes
//!   if constexpr (detail::check_attention_types<P, ...>()) { ... validate and run ... }
//! and its body is not instantiated with wrong types (no cascade of template errors after the
//! messages).
template <class Policy, class Q, class KV, class SK, class SV, class O, class LS, class I, class M>
consteval bool check_attention_types() {
  static_assert(on_device_v<Policy> || attention_storage_v<Q>,
                "specdec attention: q's element type must be float, specdec::half or specdec::bfloat16 (the "
                "storage types of the host kernels)");
  static_assert(!on_device_v<Policy> || storage_ok_v<Policy, Q>,
                "specdec attention: with specdec::cuda, q's element type must be specdec::half or "
                "specdec::bfloat16 (the cuda kernels run on tensor cores; use specdec::host for float)");
  static_assert(std::is_void_v<KV> || std::is_same_v<std::remove_cv_t<KV>, std::remove_cv_t<Q>>,
                "specdec attention: the cache's value_type must equal q's element type (mixed storage is not "
                "supported)");
  static_assert(std::is_void_v<SK> || std::is_same_v<std::remove_cv_t<SK>, std::remove_cv_t<Q>>,
                "specdec attention: spec_k's element type must equal q's element type (mixed storage is not "
                "supported)");
  static_assert(std::is_void_v<SV> || std::is_same_v<std::remove_cv_t<SV>, std::remove_cv_t<Q>>,
                "specdec attention: spec_v's element type must equal q's element type (mixed storage is not "
                "supported)");
  static_assert(std::is_same_v<std::remove_cv_t<O>, std::remove_cv_t<Q>> && !std::is_const_v<O>,
                "specdec attention: out's element type must equal q's element type and be non-const (mixed "
                "storage is not supported; out is written)");
  static_assert(std::is_same_v<LS, float>,
                "specdec attention: lse's element type must be non-const float (the natural-log LSE is written "
                "in fp32)");
  static_assert(std::is_same_v<std::remove_cv_t<I>, std::int32_t>,
                "specdec attention: q_indptr's element type must be std::int32_t");
  static_assert(std::is_void_v<M> || std::is_same_v<std::remove_cv_t<M>, mask_word>,
                "specdec attention: the tree mask's element type must be specdec::mask_word (std::uint64_t, 64 "
                "mask bits per word)");
  return attention_types_ok<Policy, Q, KV, SK, SV, O, LS, I, M>;
}

//! Validates a KV layout against q: q's rank and head_dim first, then the layout (geometry, and
//! on the host lengths within capacity), accessibility and a matching head_dim. On the device, the
//! shipped layouts' base pointers must be 16-byte aligned for the kernels' row copies.
template <class Policy, class L, class Q>
void validate_cache(std::string_view fn, const L& cache, const Q& q) {
  require_rank<Q>(fn, "q", 3);
  require(supported_head_dim(q.extent(2)), fn, "q", "head_dim (extent 2) of 64, 128 or 256", q.extent(2));
  validate_kv_layout(cache, fn, "cache");
  require_policy_memory<Policy>(fn, "cache", cache);
  if (cache.head_dim() != q.extent(2))
    throw_invalid_argument(fn, "cache", "head_dim() equal to q's head_dim " + std::to_string(q.extent(2)),
                           cache.head_dim());
  if constexpr (on_device_v<Policy>) {
    auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
    if constexpr (requires { cache.k; cache.v; })
      require(aligned(cache.k) && aligned(cache.v), fn, "cache", "16-byte aligned k and v buffers (cuda backend)",
              "misaligned");
    // The host passes check each row as they read it; the kernels cannot, so a user layout the host
    // can read (managed memory) has every row it will read checked here (a device-resident one's
    // mapping is not read on the host). Compiled out for the shipped kv_cache layouts.
    if (host_accessible(cache.space()))
      for (int r = 0; r < cache.num_requests(); ++r)
        require_kv_rows(cache, r, 0, cache.length(r), 0, cache.num_kv_heads(), kv_rows_read::keys_and_values, fn,
                        "cache");
  }
}

//! A caller's workspace (options.workspace) is written all through the call (query panels, partials,
//! staging): it must not share memory with the call's tensors, given as name, view pairs (null
//! pointers to views are skipped). Checked against the workspace's [data, data + size_bytes()).
template <class... Args>
void require_workspace_apart(std::string_view fn, const attention_options& options, const Args&... named) {
  const attention_workspace* ws = options.workspace;
  if (ws == nullptr || ws->data() == nullptr || ws->size_bytes() == 0) return;
  const strided_view<const std::byte, 1> bytes(static_cast<const std::byte*>(ws->data()),
                                               {static_cast<std::int64_t>(ws->size_bytes())}, {1});
  const auto apart = [&](std::string_view name, const auto* view) {
    if (view != nullptr && views_overlap(bytes, *view)) [[unlikely]]
      throw_invalid_argument(fn, "options.workspace", "memory disjoint from '" + std::string(name) + "'",
                             "an overlapping workspace");
  };
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    const auto args = std::forward_as_tuple(named...);
    (apart(std::get<2 * I>(args), std::get<2 * I + 1>(args)), ...);
  }(std::make_index_sequence<sizeof...(Args) / 2>{});
}

//! The ranges of attention_options' split fields, checked by every call and workspace query (host and
//! cuda alike), whether or not the call's plan uses them: kv_split_size >= 0, kv_chunks in [0, 1024].
inline void validate_split_options(std::string_view fn, const attention_options& options) {
  require(options.kv_split_size >= 0, fn, "options.kv_split_size", ">= 0 (0 = automatic)", options.kv_split_size);
  require(options.kv_chunks >= 0 && options.kv_chunks <= 1024, fn, "options.kv_chunks", "in [0, 1024] (0 = automatic)",
          options.kv_chunks);
}

//! Validates the arguments of a call over a cache (decode and hybrid attention, and their
//! workspace queries): the policy, the cache against q, then q / q_indptr / out / lse with the
//! cache's request and kv-head counts. out and lse may be null (workspace queries).
template <class Policy, class T, class Q, class L, class I, class O, class LS>
attention_io_params<T> validate_cached_call(std::string_view fn, const Policy& policy, const Q& q, const L& cache,
                                            const I& q_indptr, const O* out, const LS* lse,
                                            const attention_options& options) {
  validate_policy(fn, policy);
  // q_indptr's extent against the layout's request count before the layout scan, which reads every
  // request's length and row corners: a layout claiming INT32_MAX requests over a few requests' arrays
  // was scanned for 18 s (or read past them) before validate_io's shape check, the same check as
  // here, refused the call.
  require_rank<I>(fn, "q_indptr", 1);
  if (const int requests = cache.num_requests(); requests >= 0)
    require_shape(fn, "q_indptr", q_indptr, {static_cast<std::int64_t>(requests) + 1});
  validate_cache<Policy>(fn, cache, q);
  validate_split_options(fn, options);
  const auto io =
      validate_io<Policy, T>(fn, q, q_indptr, out, lse, cache.num_requests(), cache.num_kv_heads(), options.scale);
  require_workspace_apart(fn, options, "q", &q, "q_indptr", &q_indptr, "out", out, "lse", lse);
  // and from the cache: pass 1 writes the workspace before pass 2 reads K/V rows (and a page table);
  // out and lse too: an lse over the cache's lengths or an out over its K/V was written without an
  // error and left the cache corrupt for every later call (and on a GPU races with the reads)
  if constexpr (requires { cache.visit_memory([](std::string_view, const auto&) {}); })
    cache.visit_memory([&](std::string_view name, const auto& view) {
      if (options.workspace != nullptr) require_workspace_apart(fn, options, name, &view);
      if (out != nullptr) require_disjoint(fn, name, view, "out", *out);
      if (lse != nullptr) require_disjoint(fn, name, view, "lse", *lse);
    });
  return io;
}

//! Number of mask words of a batch: sum over requests of n_r * words_per_row(n_r).
[[nodiscard]] inline std::int64_t tree_mask_words(const std::int32_t* q_indptr, int num_requests) {
  std::int64_t w = 0;
  for (int r = 0; r < num_requests; ++r) {
    const int n = q_indptr[r + 1] - q_indptr[r];
    w += static_cast<std::int64_t>(n) * words_per_row(n);
  }
  return w;
}

//! Host check of a packed ragged tree mask: exactly tree_mask_words(q_indptr) words, unit stride,
//! and per request every row with its diagonal bit set and no bit j > i.
template <class T, class M>
void validate_tree_mask(std::string_view fn, const attention_io_params<T>& io, const M& mask) {
  const std::int64_t words = tree_mask_words(io.q_indptr, io.num_requests);
  require_shape(fn, "mask", mask, {words});
  require(mask.stride(0) == 1 || words <= 1, fn, "mask", "unit stride", mask.stride(0));
  const auto* m = static_cast<const mask_word*>(mask.data());
  std::int64_t off = 0;
  for (int r = 0; r < io.num_requests; ++r) {
    const int n = io.q_indptr[r + 1] - io.q_indptr[r];
    const int wpr = words_per_row(n);
    for (int i = 0; i < n; ++i) {
      const mask_word* row = m + off + static_cast<std::int64_t>(i) * wpr;
      if (!test_bit(row, i))
        throw_invalid_argument(fn, "mask",
                               "the diagonal bit set in every row (request " + std::to_string(r) + ", row " +
                                   std::to_string(i) + ": a token always attends to itself)",
                               "bit clear");
      // Bits above the diagonal: the rest of word i/64 above bit i%64, and every later word.
      const int w0 = i >> 6, b0 = i & 63;
      bool upper = b0 < 63 && (row[w0] >> (b0 + 1)) != 0;
      for (int w = w0 + 1; w < wpr && !upper; ++w) upper = row[w] != 0;
      if (upper) {
        int j = i + 1;
        while (j < wpr * 64 && !test_bit(row, j)) ++j;
        throw_invalid_argument(fn, "mask",
                               "no bit j > i (tree tokens in topological order; request " + std::to_string(r) +
                                   ", row " + std::to_string(i) + ")",
                               "bit " + std::to_string(j) + " set");
      }
    }
    off += static_cast<std::int64_t>(n) * wpr;
  }
}

//! Validates spec_k/spec_v ([total_tokens, Hkv, D]) and the packed tree mask. On the host the mask
//! length is checked exactly and, per request, every row's diagonal bit set (a token sees itself)
//! and no bit j > i (topological order: ancestors precede). On the device the mask's length and
//! contents depend on q_indptr's values (device memory) and are a precondition; only "at least one
//! word per token" is checked, with the 16-byte row alignment of spec_k / spec_v.
template <class Policy, class T, class K, class V, class M>
tree_kv_params<T> validate_tree(std::string_view fn, const attention_io_params<T>& io, const K& spec_k,
                                const V& spec_v, const M& mask) {
  require_rank<K>(fn, "spec_k", 3);
  require_rank<V>(fn, "spec_v", 3);
  require_rank<M>(fn, "mask", 1);
  require_policy_memory<Policy>(fn, "spec_k", spec_k);
  require_policy_memory<Policy>(fn, "spec_v", spec_v);
  require_policy_memory<Policy>(fn, "mask", mask);
  require_shape(fn, "spec_k", spec_k, {io.total_tokens, io.num_kv_heads, io.head_dim});
  require_shape(fn, "spec_v", spec_v, {io.total_tokens, io.num_kv_heads, io.head_dim});
  require_unit_inner_stride(fn, "spec_k", spec_k);
  require_unit_inner_stride(fn, "spec_v", spec_v);
  const auto* m = static_cast<const mask_word*>(mask.data());
  if constexpr (on_device_v<Policy>) {
    if (io.total_tokens > 0) {
      require_rows_16b_aligned(fn, "spec_k", spec_k);
      require_rows_16b_aligned(fn, "spec_v", spec_v);
      // At least one word per token: n_r * words_per_row(n_r) >= n_r.
      require(mask.extent(0) >= io.total_tokens, fn, "mask",
              "at least q.extent(0) = " + std::to_string(io.total_tokens) +
                  " words (sum_r n_r * words_per_row(n_r))",
              mask.extent(0));
      require(mask.stride(0) == 1 || mask.extent(0) <= 1, fn, "mask", "unit stride", mask.stride(0));
      require_array(fn, "mask", mask);
    }
  } else {
    validate_tree_mask(fn, io, mask);
  }
  tree_kv_params<T> t;
  t.k = static_cast<const T*>(spec_k.data());
  t.k_stride_token = spec_k.stride(0);
  t.k_stride_head = spec_k.stride(1);
  t.v = static_cast<const T*>(spec_v.data());
  t.v_stride_token = spec_v.stride(0);
  t.v_stride_head = spec_v.stride(1);
  t.mask = m;
  return t;
}

//! out and lse apart from the tree's K, V and mask, which every tile of a head reads while others
//! write their outputs.
template <class O, class LS, class K, class V, class M>
void require_tree_inputs_apart(std::string_view fn, const O& out, const LS& lse, const K& spec_k, const V& spec_v,
                               const M& mask) {
  require_outputs_apart(fn, std::forward_as_tuple("out", out, "lse", lse),
                        std::forward_as_tuple("spec_k", spec_k, "spec_v", spec_v, "mask", mask));
}

//! Validates the arguments of a tree-only call (tree attention): the policy, spec_k's kv-head count,
//! then q / q_indptr / out / lse and the tree K/V and mask.
template <class Policy, class T, class Q, class K, class V, class I, class M, class O, class LS>
std::pair<attention_io_params<T>, tree_kv_params<T>> validate_tree_call(std::string_view fn, const Policy& policy,
                                                                        const Q& q, const K& spec_k, const V& spec_v,
                                                                        const I& q_indptr, const M& mask,
                                                                        const O& out, const LS& lse,
                                                                        const attention_options& options) {
  validate_policy(fn, policy);
  validate_split_options(fn, options);  // ranges checked whether or not a plan uses them, as with a cache
  require_rank<K>(fn, "spec_k", 3);
  const int hkv = static_cast<int>(spec_k.extent(1));
  require(hkv > 0, fn, "spec_k", "at least one kv head (extent 1)", hkv);
  const auto io = validate_io<Policy, T>(fn, q, q_indptr, &out, &lse, -1, hkv, options.scale);
  const auto tree = validate_tree<Policy>(fn, io, spec_k, spec_v, mask);
  require_tree_inputs_apart(fn, out, lse, spec_k, spec_v, mask);
  require_workspace_apart(fn, options, "q", &q, "q_indptr", &q_indptr, "out", &out, "lse", &lse, "spec_k", &spec_k,
                          "spec_v", &spec_v, "mask", &mask);
  return {io, tree};
}

//! The body of decode_attention_workspace_bytes and hybrid_tree_attention_workspace_bytes (a
//! cached call without outputs; HasTree picks the plan): checks the layout concept (its messages are
//! what a non-layout gets) and the element types at compile time, validates like the call and asks
//! the policy's backend.
template <bool HasTree, class P, class Q, class L, class I>
[[nodiscard]] std::size_t cached_attention_workspace_bytes(std::string_view fn, const P& policy, const Q& q,
                                                           const L& cache, const I& q_indptr,
                                                           const attention_options& options) {
  static_assert(check_kv_layout<L>());  // L is unconstrained so that these messages are what a non-layout gets
  if constexpr (kv_layout<L>) {
    using QT = typename Q::element_type;
    using T = std::remove_cv_t<QT>;
    if constexpr (check_attention_types<P, QT, typename L::value_type, void, void, T, float, typename I::element_type,
                                        void>()) {
      const auto io = validate_cached_call<P, T>(fn, policy, q, cache, q_indptr, no_out<T>, no_lse, options);
      return attention_backend<P>::template workspace_bytes<true, HasTree>(fn, policy, io, cache, options);
    }
  }
  return 0;
}

}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec::detail
