#pragma once
//! \file ring_kv.hpp
//! Ring-buffer KV cache for the draft model's sliding-window self-attention (LongSpec §3.1: "the
//! self-attention memory footprint does not exceed the window size, which we set to 512").
//!
//! Design
//! ------
//! Each request owns S = W + P token slots (W = window, P = speculative capacity), allocated once;
//! memory never grows with the generated length. Tokens are appended in order; token number n (0-based
//! count of all tokens ever appended to that request) lives in slot n % S. The attention view
//! (`ring_kv`, a kv_layout) shows the newest min(appended, W) tokens, oldest first:
//!   length(r) = min(appended_r, W),  k_row(r, t, h) = slot (appended_r - length(r) + t) % S.
//!
//! Rollback of rejected speculative tokens. Slots a wrapped ring overwrote cannot be restored, so the
//! cache distinguishes committed tokens from pending (speculative) ones and never lets a pending token
//! overwrite a slot that a rollback would need again:
//!   - append(r, k, v)            appends committed tokens (prefill, accepted tokens); needs no pending
//!                                tokens (commit or roll them back first).
//!   - append_speculative(r, ...) appends pending tokens, at most P pending in all. Because the
//!                                physical ring holds the newest W + P tokens and at most P of them are
//!                                pending, the W newest *committed* tokens are always still present.
//!   - rollback(r, k)             drops the newest k pending tokens; the view is then exactly what it was
//!                                before they were appended (tested after the ring wrapped many times).
//!   - commit(r, accepted)        keeps the oldest `accepted` pending tokens as committed, drops the rest.
//! Two drafting styles use this:
//!   (a) tree drafting (LongSpec): the tree tokens' K/V are never written to the ring; they go to
//!       sliding_window_attention as spec_k/spec_v (each tree token sees the W-token window plus its
//!       ancestors) and after verification only the accepted path is appended (append_rows()). P = 0
//!       suffices.
//!   (b) chain drafting: each drafted token is appended with append_speculative() so the next draft
//!       step sees it; after verification commit(r, accepted). Needs P >= the draft length.
//!
//! Rows are stored as given: K rows are expected already rotated by RoPE at their absolute positions
//! (appended(r) is the next token's index when the request started at position 0), so the window
//! needs no position bookkeeping at attention time.
//!
//! Storage per request: [S, kv_heads, head_dim] (token-major, NHD), requests back to back.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "specdec/core/config.hpp"
#include "specdec/core/dtype.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/kv/kv_cache.hpp"

namespace specdec {

//! Default draft window (LongSpec §3.1).
inline constexpr int longspec_default_window = 512;

//! Where the rows of a ring buffer live (see file comment): token t (0 = oldest visible) of request r
//! is in slot (starts[r] + t) mod slots of request r's [slots, kv_heads, head_dim] slab.
//!   starts[r] slot of the oldest visible token, in [0, slots)
//!   lengths[r] visible tokens, in [0, window]
struct ring_mapping {
  const std::int32_t* starts = nullptr;   //!< [requests]
  const std::int32_t* lengths = nullptr;  //!< [requests]
  int slots = 0;   //!< physical slots per request (window + speculative capacity)
  int window = 0;  //!< W: the most tokens visible at once

  SPECDEC_HOST_DEVICE int length(int r) const noexcept { return lengths[r]; }
  //! Slot of visible token t of request r (one add and one conditional subtract; no division).
  SPECDEC_HOST_DEVICE int slot(int r, int t) const noexcept {
    // starts[r] < slots and t < slots, both below 2^31: the sum fits unsigned (not int).
    unsigned s = static_cast<unsigned>(starts[r]) + static_cast<unsigned>(t);
    if (s >= static_cast<unsigned>(slots)) s -= static_cast<unsigned>(slots);
    return static_cast<int>(s);
  }
  SPECDEC_HOST_DEVICE std::int64_t offset(int r, int t, int h, const kv_geometry& g) const noexcept {
    return slot_offset(r, slot(r, t), h, g);
  }
  //! Element offset of physical slot `s` of request r, head h (the one addressing rule of the ring's
  //! [requests, slots, kv_heads, head_dim] storage; writers such as ring_append_batch use it too).
  SPECDEC_HOST_DEVICE std::int64_t slot_offset(int r, int s, int h, const kv_geometry& g) const noexcept {
    return ((static_cast<std::int64_t>(r) * slots + s) * g.num_kv_heads + h) * g.head_dim;
  }
  //! Elements of k (and of v) the offsets reach, and the arrays read (kv_cache::visit_memory).
  //! Geometry validated first.
  std::int64_t required_span_size(const kv_geometry& g) const noexcept {
    return static_cast<std::int64_t>(g.num_requests) * slots * g.num_kv_heads * g.head_dim;
  }
  template <class F>
  void visit_arrays(const kv_geometry& g, bool, F&& f) const {
    f("cache.mapping.starts", starts, g.num_requests);
    f("cache.mapping.lengths", lengths, g.num_requests);
  }
};

//! Checks window and slots and (host-accessible) per-request starts/lengths. Found by ADL from the
//! kv_cache's validation, so every attention entry point runs it on a ring_kv argument.
inline namespace SPECDEC_HOST_ISA {  // on every entry point's path: see core/isa.hpp
inline void validate_kv_mapping(const ring_mapping& m, const kv_geometry& g, memory_space where,
                                std::string_view function, std::string_view argument) {
  require(m.window >= 1, function, argument, "window >= 1", m.window);
  if (!(m.slots >= m.window)) [[unlikely]]
    throw_invalid_argument(function, argument, "slots >= window = " + std::to_string(m.window), m.slots);
  // slot_offset() addresses [requests, slots, kv_heads, head_dim] elements in int64
  (void)checked_size_product(function, argument, {g.num_requests, m.slots, g.num_kv_heads, g.head_dim});
  require(g.num_requests == 0 || (m.starts != nullptr && m.lengths != nullptr), function, argument,
          "non-null starts and lengths", "nullptr");
  if (!host_accessible(where)) return;
  for (int r = 0; r < g.num_requests; ++r) {
    if (!(m.lengths[r] >= 0 && m.lengths[r] <= m.window)) [[unlikely]]
      throw_invalid_argument(function, argument,
                             "lengths[" + std::to_string(r) + "] in [0, window = " + std::to_string(m.window) + "]",
                             m.lengths[r]);
    if (!(m.starts[r] >= 0 && m.starts[r] < m.slots)) [[unlikely]]
      throw_invalid_argument(function, argument,
                             "starts[" + std::to_string(r) + "] in [0, slots = " + std::to_string(m.slots) + ")",
                             m.starts[r]);
  }
}
}  // namespace SPECDEC_HOST_ISA

//! Non-owning kv_layout over a ring buffer (kv_cache over ring_mapping; see file comment). Usually
//! obtained from ring_kv_cache::layout(); can also describe a user's own ring memory:
//! `{k, v, starts, lengths, requests, slots, window, kv_heads, head_dim[, space]}`, k and v
//! [requests, slots, kv_heads, head_dim].
template <class T>
struct ring_kv : kv_cache<T, ring_mapping> {
  ring_kv() = default;
  SPECDEC_HOST_DEVICE ring_kv(T* k, T* v, const std::int32_t* starts, const std::int32_t* lengths, int requests,
                              int slots, int window, int kv_heads, int dim,
                              memory_space where = memory_space::host) noexcept
      : kv_cache<T, ring_mapping>{k, v, {starts, lengths, slots, window}, requests, kv_heads, dim, where} {}
};

static_assert(kv_layout<ring_kv<float>> && check_kv_layout<ring_kv<float>>());
static_assert(kv_layout<ring_kv<const float>>);

//! Geometry of a ring_kv_cache.
struct ring_kv_config {
  int requests = 1;
  int kv_heads = 0;
  int head_dim = 0;
  int window = longspec_default_window;  //!< W (LongSpec §3.1 uses 512)
  int speculative_capacity = 0;          //!< P: most pending (rollback-able) tokens per request
};

//! Owning ring-buffer KV cache (see file comment for the design). Allocates
//! requests * (window + speculative_capacity) * kv_heads * head_dim elements for K and for V once, in
//! the constructor; no member function allocates afterwards. Host memory. Not thread-safe for
//! concurrent mutation of the same request; distinct requests may be appended from distinct threads.
template <class T>
class ring_kv_cache {
  static_assert(storage_float<T> && !std::is_const_v<T>,
                "ring_kv_cache: T must be float, double, specdec::half or specdec::bfloat16");

 public:
  using value_type = T;

  //! Allocates the ring. Throws invalid_argument on non-positive geometry or negative capacity.
  explicit ring_kv_cache(const ring_kv_config& c) : cfg_(c) {
    constexpr std::string_view fn = "specdec::ring_kv_cache";
    require(c.requests >= 0, fn, "config.requests", ">= 0", c.requests);
    require(c.kv_heads > 0, fn, "config.kv_heads", "> 0", c.kv_heads);
    require(c.head_dim > 0, fn, "config.head_dim", "> 0", c.head_dim);
    require(c.window >= 1, fn, "config.window", ">= 1", c.window);
    require(c.speculative_capacity >= 0, fn, "config.speculative_capacity", ">= 0", c.speculative_capacity);
    require(static_cast<std::int64_t>(c.window) + c.speculative_capacity <= INT32_MAX, fn,
            "config.speculative_capacity", "window + speculative_capacity <= INT32_MAX", c.speculative_capacity);
    slots_ = c.window + c.speculative_capacity;
    const auto n = static_cast<std::size_t>(checked_size_product(fn, "config", {c.requests, slots_, c.kv_heads, c.head_dim}));
    row_ = static_cast<std::size_t>(c.kv_heads) * static_cast<std::size_t>(c.head_dim);
    k_.assign(n, T{});
    v_.assign(n, T{});
    appended_.assign(static_cast<std::size_t>(c.requests), 0);
    committed_.assign(static_cast<std::size_t>(c.requests), 0);
    starts_.assign(static_cast<std::size_t>(c.requests), 0);
    lengths_.assign(static_cast<std::size_t>(c.requests), 0);
  }

  [[nodiscard]] const ring_kv_config& config() const noexcept { return cfg_; }
  //! config().requests; 0 for a moved-from cache (its storage went with the move), so that every
  //! call on it throws instead of indexing storage it no longer has.
  [[nodiscard]] int num_requests() const noexcept { return static_cast<int>(lengths_.size()); }
  [[nodiscard]] int window() const noexcept { return cfg_.window; }
  [[nodiscard]] int slots() const noexcept { return slots_; }
  //! Bytes held by the K and V buffers together; constant for the object's lifetime.
  [[nodiscard]] std::size_t bytes() const noexcept { return (k_.capacity() + v_.capacity()) * sizeof(T); }
  [[nodiscard]] const T* k_data() const noexcept { return k_.data(); }
  [[nodiscard]] const T* v_data() const noexcept { return v_.data(); }

  //! Visible tokens of request r: min(appended, W).
  [[nodiscard]] int length(int r) const { return lengths_[checked(r, "specdec::ring_kv_cache::length")]; }
  //! Tokens ever appended to request r (committed + pending); the next token's sequence index.
  [[nodiscard]] std::int64_t appended(int r) const { return appended_[checked(r, "specdec::ring_kv_cache::appended")]; }
  //! Committed tokens ever appended to request r.
  [[nodiscard]] std::int64_t committed(int r) const {
    return committed_[checked(r, "specdec::ring_kv_cache::committed")];
  }
  //! Pending (speculative, rollback-able) tokens of request r.
  [[nodiscard]] int pending(int r) const {
    const auto i = checked(r, "specdec::ring_kv_cache::pending");
    return static_cast<int>(appended_[i] - committed_[i]);
  }

  //! The kv_layout view over the current contents (valid until the cache is destroyed; it reflects
  //! later appends since it points at the cache's own start/length arrays).
  [[nodiscard]] ring_kv<T> layout() noexcept {
    return {k_.data(), v_.data(),   starts_.data(), lengths_.data(), num_requests(),
            slots_,    cfg_.window, cfg_.kv_heads,  cfg_.head_dim,   memory_space::host};
  }
  //! Read-only view.
  [[nodiscard]] ring_kv<const T> layout() const noexcept {
    return {k_.data(), v_.data(),   starts_.data(), lengths_.data(), num_requests(),
            slots_,    cfg_.window, cfg_.kv_heads,  cfg_.head_dim,   memory_space::host};
  }

  //! Appends committed tokens: k, v are [n, kv_heads, head_dim] of T (any strides with unit inner
  //! stride, host memory). Only the newest min(n, slots) rows are written. Preconditions: request in
  //! range, shapes match, no pending tokens. O(min(n, slots) * kv_heads * head_dim).
  template <tensor_like K, tensor_like V>
  void append(int request, const K& k, const V& v) {
    constexpr std::string_view fn = "specdec::ring_kv_cache::append";
    const auto r = checked(request, fn);
    const std::int64_t n = validate_rows(fn, k, v);
    require(appended_[r] == committed_[r], fn, "request",
            "a request with no pending speculative tokens (commit or rollback first); pending",
            appended_[r] - committed_[r]);
    write(fn, r, as_view(k), as_view(v), n, [](std::int64_t i) { return i; });
    committed_[r] = appended_[r];
  }

  //! Appends rows `rows[i]` of k, v ([*, kv_heads, head_dim]) as committed tokens, in the order given
  //! (e.g. the accepted path of a draft tree, whose K/V were passed to sliding_window_attention as
  //! spec_k/spec_v). Preconditions as append(), and every index in [0, k.extent(0)). O(|rows| * row).
  template <tensor_like K, tensor_like V>
  void append_rows(int request, const K& k, const V& v, std::span<const std::int32_t> rows) {
    constexpr std::string_view fn = "specdec::ring_kv_cache::append_rows";
    const auto r = checked(request, fn);
    const std::int64_t n = validate_rows(fn, k, v);
    for (std::size_t i = 0; i < rows.size(); ++i)
      if (!(rows[i] >= 0 && rows[i] < n)) [[unlikely]]
        throw_invalid_argument(
            fn, "rows",
            "every row index in [0, k.extent(0) = " + std::to_string(n) + ") (at " + std::to_string(i) + ")", rows[i]);
    require(appended_[r] == committed_[r], fn, "request",
            "a request with no pending speculative tokens (commit or rollback first); pending",
            appended_[r] - committed_[r]);
    write(fn, r, as_view(k), as_view(v), static_cast<std::int64_t>(rows.size()),
          [&](std::int64_t i) { return static_cast<std::int64_t>(rows[static_cast<std::size_t>(i)]); });
    committed_[r] = appended_[r];
  }

  //! Appends pending (speculative) tokens that a later rollback()/commit() may drop. Preconditions as
  //! append() except pending tokens are allowed: pending(request) + n <= speculative_capacity.
  template <tensor_like K, tensor_like V>
  void append_speculative(int request, const K& k, const V& v) {
    constexpr std::string_view fn = "specdec::ring_kv_cache::append_speculative";
    const auto r = checked(request, fn);
    const std::int64_t n = validate_rows(fn, k, v);
    const std::int64_t pend = appended_[r] - committed_[r];
    if (!(n <= cfg_.speculative_capacity - pend)) [[unlikely]]  // (pend + n overflowed for n near 2^63)
      throw_invalid_argument(
          fn, "k",
          "at most speculative_capacity - pending = " + std::to_string(cfg_.speculative_capacity - pend) +
              " tokens (more would overwrite slots a rollback needs); tokens",
          n);
    write(fn, r, as_view(k), as_view(v), n, [](std::int64_t i) { return i; });
  }

  //! Drops the newest `count` pending tokens; the view is exactly as before they were appended.
  //! Preconditions: 0 <= count <= pending(request). O(1).
  void rollback(int request, int count) {
    constexpr std::string_view fn = "specdec::ring_kv_cache::rollback";
    const auto r = checked(request, fn);
    require_in_range(fn, "count", static_cast<std::int64_t>(count), std::int64_t{0}, appended_[r] - committed_[r]);
    appended_[r] -= count;
    update_view(r);
  }

  //! Keeps the oldest `accepted` pending tokens as committed and drops the others.
  //! Preconditions: 0 <= accepted <= pending(request). O(1).
  void commit(int request, int accepted) {
    constexpr std::string_view fn = "specdec::ring_kv_cache::commit";
    const auto r = checked(request, fn);
    require_in_range(fn, "accepted", static_cast<std::int64_t>(accepted), std::int64_t{0},
                     appended_[r] - committed_[r]);
    appended_[r] = committed_[r] + accepted;
    committed_[r] = appended_[r];
    update_view(r);
  }

  //! Empties request r (a new sequence); its slots are reused. O(1).
  void reset(int request) {
    const auto r = checked(request, "specdec::ring_kv_cache::reset");
    appended_[r] = committed_[r] = 0;
    update_view(r);
  }

 private:
  std::size_t checked(int r, std::string_view fn) const {
    if (!(r >= 0 && r < num_requests())) [[unlikely]]
      throw_invalid_argument(fn, "request", "a request index in [0, " + std::to_string(num_requests()) + ")", r);
    return static_cast<std::size_t>(r);
  }

  template <class K, class V>
  std::int64_t validate_rows(std::string_view fn, const K& k, const V& v) const {
    static_assert(K::rank == 3 && V::rank == 3, "ring_kv_cache: k and v must be rank-3 [tokens, kv_heads, head_dim]");
    static_assert(std::is_same_v<std::remove_cv_t<typename K::element_type>, T> &&
                      std::is_same_v<std::remove_cv_t<typename V::element_type>, T>,
                  "ring_kv_cache: k and v must have the cache's element type");
    require_host_accessible(fn, "k", k);
    require_host_accessible(fn, "v", v);
    require_shape(fn, "k", k, {-1, cfg_.kv_heads, cfg_.head_dim});
    require_shape(fn, "v", v, {k.extent(0), cfg_.kv_heads, cfg_.head_dim});
    require_unit_inner_stride(fn, "k", k);
    require_unit_inner_stride(fn, "v", v);
    require(k.extent(0) == 0 || (k.data() != nullptr && v.data() != nullptr), fn, "k", "non-null k and v data",
            "nullptr");
    // Rows are copied slot by slot: a source inside the ring's own storage (its k_data(), say) could
    // be overwritten before it is read.
    const strided_view<const T, 1> ring_k(k_.data(), {static_cast<std::int64_t>(k_.size())}, {1}),
        ring_v(v_.data(), {static_cast<std::int64_t>(v_.size())}, {1});
    require_outputs_apart(fn, std::forward_as_tuple("the cache's K slots", ring_k, "the cache's V slots", ring_v),
                          std::forward_as_tuple("k", k, "v", v));
    return k.extent(0);
  }

  // Writes n source rows (source index src(i)) as the next tokens. When n exceeds the slots only the
  // newest `slots` are written: older ones would be overwritten within this same call. The appended
  // count must stay an int64 (a broadcast view of 2^63 - 1 rows is a valid k).
  template <class KV, class VV, class Src>
  void write(std::string_view fn, std::size_t r, const KV& k, const VV& v, std::int64_t n, Src src) {
    if (n > std::numeric_limits<std::int64_t>::max() - appended_[r]) [[unlikely]]
      throw_invalid_argument(fn, "k",
                             "at most 2^63 - 1 - appended(request) = " +
                                 std::to_string(std::numeric_limits<std::int64_t>::max() - appended_[r]) + " tokens",
                             n);
    const std::int64_t skip = std::max<std::int64_t>(0, n - slots_);
    const std::int64_t base = appended_[r];
    for (std::int64_t i = skip; i < n; ++i) {
      const std::int64_t slot = (base + i) % slots_;
      T* kd = k_.data() + (r * static_cast<std::size_t>(slots_) + static_cast<std::size_t>(slot)) * row_;
      T* vd = v_.data() + (kd - k_.data());
      const std::int64_t s = src(i);
      for (int h = 0; h < cfg_.kv_heads; ++h) {
        const auto* ks = &k(s, h, 0);
        const auto* vs = &v(s, h, 0);
        std::copy(ks, ks + cfg_.head_dim, kd + static_cast<std::size_t>(h) * cfg_.head_dim);
        std::copy(vs, vs + cfg_.head_dim, vd + static_cast<std::size_t>(h) * cfg_.head_dim);
      }
    }
    appended_[r] = base + n;
    update_view(r);
  }

  void update_view(std::size_t r) {
    const std::int64_t len = std::min<std::int64_t>(appended_[r], cfg_.window);
    lengths_[r] = static_cast<std::int32_t>(len);
    starts_[r] = static_cast<std::int32_t>((appended_[r] - len) % slots_);
  }

  ring_kv_config cfg_;
  int slots_ = 0;
  std::size_t row_ = 0;
  std::vector<T> k_, v_;
  std::vector<std::int64_t> appended_, committed_;
  std::vector<std::int32_t> starts_, lengths_;
};

}  // namespace specdec
