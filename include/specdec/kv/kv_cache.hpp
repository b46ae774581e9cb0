#pragma once
//! \file kv_cache.hpp
//! KV caches mdspan-style: the *mapping* a user writes (where row (request, token, kv_head) lives and
//! how many tokens each request holds) and the cache type the library ships over it (`kv_cache<T,
//! Mapping>`: K and V base pointers, geometry, memory space, k_row/v_row and validation). A kv_cache
//! is a kv_layout (kv/kv_layout.hpp), so every primitive takes it; the shipped layouts (contiguous NHD
//! and HND, paged CSR, block table, ring) are mappings plus this type.
//!
//! A mapping `M` is a small copyable object with
//!   - `offset(int r, int t, int h)` or `offset(int r, int t, int h, const kv_geometry& g)`: the
//!     element offset (std::int64_t) of the head_dim contiguous elements of row (r, t, h) from the K
//!     base pointer; V rows are at the same offset from the V base pointer. The second form receives
//!     the cache's geometry (requests, kv heads, head_dim), so the mapping need not repeat it;
//!   - `length(int r)`: tokens visible for request r;
//!   - optionally `capacity(int r)`: token slots request r can hold (then the cache is writable and
//!     validation checks every length against it);
//!   - optionally an ADL-found `validate_kv_mapping(const M&, const kv_geometry&, memory_space,
//!     std::string_view function, std::string_view argument)` that checks the mapping's own arrays
//!     (read them only when host_accessible(space)) and throws specdec::invalid_argument.
//!   - optionally `required_span_size(const kv_geometry&)`: the elements of K (and of V) its offsets
//!     reach (every row lies in [0, that)), as mdspan's mappings report it, and `visit_arrays(const
//!     kv_geometry&, bool readable, F&& f)`: f(name, pointer, count) for every index array it reads
//!     (readable: the arrays may be read to size the others; count 0 where the size would need a read
//!     and readable is false). With them, kv_cache::visit_memory names the cache's memory, and a
//!     call's workspace is checked apart from it (host reads through a workspace that pass 1 had
//!     written were silently wrong, or out of bounds for a page table); validation refuses an index
//!     array not aligned for int32 before anything reads it.
//! A mapping used from CUDA kernels must mark offset/length/capacity `SPECDEC_HOST_DEVICE`
//! (core/config.hpp): the kernels call them on the device, and nvcc rejects a __host__ function
//! called from device code (tests/compile_fail: nvcc_kv_mapping_host_only).
//!
//! Example (vLLM-style block table, 16-token blocks; 6 lines):
//! \code
//!   struct my_blocks {
//!     const std::int32_t* table; const std::int32_t* lens; int max_blocks;
//!     SPECDEC_HOST_DEVICE std::int64_t offset(int r, int t, int h, const specdec::kv_geometry& g) const {
//!       return ((std::int64_t{table[r * max_blocks + t / 16]} * 16 + t % 16) * g.num_kv_heads + h) * g.head_dim; }
//!     SPECDEC_HOST_DEVICE int length(int r) const { return lens[r]; }
//!   };
//!   specdec::kv_cache<float, my_blocks> cache{k_pool, v_pool, {table, lens, max_blocks}, requests, kv_heads, dim};
//! \endcode

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "specdec/core/config.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/kv/kv_layout.hpp"

namespace specdec {

//! The geometry a kv_cache supplies; passed to a mapping's four-argument offset().
struct kv_geometry {
  int num_requests = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
};

//! Element offset of the row of kv head h for token slot `slot` of page (block) `page` in a pool of
//! pages of `page_size` tokens laid out [page][slot][kv head][head_dim] (FlashInfer's NHD pages,
//! vLLM's blocks): the row rule the paged and block-table mappings share. 64-bit throughout.
[[nodiscard]] SPECDEC_HOST_DEVICE constexpr std::int64_t pooled_row_offset(std::int64_t page, int page_size, int slot,
                                                                          int h, const kv_geometry& g) noexcept {
  return ((page * page_size + slot) * g.num_kv_heads + h) * static_cast<std::int64_t>(g.head_dim);
}

//! `offset(request, token, kv_head)` returns the element offset of the row.
template <class M>
concept kv_mapping_has_plain_offset = requires(const M& m, int r, int t, int h) {
  { m.offset(r, t, h) } -> std::convertible_to<std::int64_t>;
};
//! `offset(request, token, kv_head, geometry)` returns the element offset of the row.
template <class M>
concept kv_mapping_has_geometry_offset = requires(const M& m, int r, int t, int h, const kv_geometry& g) {
  { m.offset(r, t, h, g) } -> std::convertible_to<std::int64_t>;
};
//! Either form of offset().
template <class M>
concept kv_mapping_has_offset = kv_mapping_has_plain_offset<M> || kv_mapping_has_geometry_offset<M>;
//! `length(request)` is the number of tokens visible for that request.
template <class M>
concept kv_mapping_has_length = requires(const M& m, int r) {
  { m.length(r) } -> std::convertible_to<int>;
};
//! `capacity(request)` is the number of token slots the request can hold (optional).
template <class M>
concept kv_mapping_has_capacity = requires(const M& m, int r) {
  { m.capacity(r) } -> std::convertible_to<int>;
};

//! Where the rows of a KV cache live: what a user writes to plug their cache into kv_cache.
template <class M>
concept kv_mapping = std::copyable<M> && kv_mapping_has_offset<M> && kv_mapping_has_length<M>;

//! Compile-time check with one readable message per missing part (kv_cache runs it on its mapping).
template <class M>
consteval bool check_kv_mapping() {
  static_assert(std::copyable<M>, "kv_mapping: the mapping type must be copyable (it is passed to kernels by value)");
  static_assert(kv_mapping_has_offset<M>,
                "kv_mapping: missing member function 'offset(int request, int token, int kv_head)' (or 'offset(int "
                "request, int token, int kv_head, const specdec::kv_geometry&)') returning std::int64_t");
  static_assert(kv_mapping_has_length<M>, "kv_mapping: missing member function 'length(int request)' returning int");
  return true;
}

namespace detail {
#if defined(__CUDACC__)
// Device code reaches a mapping through these __device__ functions rather than directly from
// kv_cache's __host__ __device__ members: nvcc only warns (#20011-D) when a __host__ __device__
// function calls a __host__ one, and the call then fails at run time; from a __device__ function it is
// a compile error ("calling a __host__ function ... from a __device__ function is not allowed"), which
// is what a mapping without SPECDEC_HOST_DEVICE used in a kernel should get.
template <class M>
SPECDEC_DEVICE int device_mapping_length(const M& m, int r) {
  return m.length(r);
}
template <class M>
SPECDEC_DEVICE int device_mapping_capacity(const M& m, int r) {
  return m.capacity(r);
}
template <class M>
SPECDEC_DEVICE std::int64_t device_mapping_offset(const M& m, int r, int t, int h, const kv_geometry& g) {
  if constexpr (kv_mapping_has_geometry_offset<M>)
    return static_cast<std::int64_t>(m.offset(r, t, h, g));
  else
    return static_cast<std::int64_t>(m.offset(r, t, h));
}
#endif
}  // namespace detail

namespace detail {
//! A visit_arrays callback that ignores what it is given (to ask whether a mapping has visit_arrays).
struct ignore_array {
  void operator()(std::string_view, const std::int32_t*, std::int64_t) const noexcept {}
};
}  // namespace detail

//! The cache type over a mapping: K and V base pointers (same mapping, separate buffers), geometry and
//! memory space. Satisfies kv_layout, and writable_kv_layout when T is not const and the mapping has
//! capacity(). Rows: k_row(r, t, h) = k + mapping offset, v_row likewise from v. Aggregate:
//! `kv_cache<T, M>{k, v, mapping, requests, kv_heads, head_dim[, space]}`. O(1) per row (plus the
//! mapping's own cost).
template <class T, class Mapping>
struct kv_cache {
  static_assert(check_kv_mapping<Mapping>());
  using value_type = T;
  using mapping_type = Mapping;

  T* k = nullptr;          //!< K base pointer
  T* v = nullptr;          //!< V base pointer (rows at the same offsets as K's)
  Mapping mapping{};       //!< where each row lives, and each request's length
  int requests = 0;        //!< requests in the batch
  int kv_heads = 0;        //!< KV heads
  int dim = 0;             //!< head_dim: elements per K or V row
  memory_space where = memory_space::host;  //!< where the rows and the mapping's arrays live

  SPECDEC_HOST_DEVICE int num_requests() const noexcept { return requests; }
  SPECDEC_HOST_DEVICE int num_kv_heads() const noexcept { return kv_heads; }
  SPECDEC_HOST_DEVICE int head_dim() const noexcept { return dim; }
  SPECDEC_HOST_DEVICE memory_space space() const noexcept { return where; }
  SPECDEC_HOST_DEVICE kv_geometry geometry() const noexcept { return {requests, kv_heads, dim}; }
  SPECDEC_HOST_DEVICE int length(int r) const {
#if SPECDEC_IN_DEVICE_CODE
    return detail::device_mapping_length(mapping, r);
#else
    return mapping.length(r);
#endif
  }
  SPECDEC_HOST_DEVICE int capacity(int r) const
    requires kv_mapping_has_capacity<Mapping>
  {
#if SPECDEC_IN_DEVICE_CODE
    return detail::device_mapping_capacity(mapping, r);
#else
    return mapping.capacity(r);
#endif
  }
  //! Element offset of row (r, t, h) from k (and from v).
  SPECDEC_HOST_DEVICE std::int64_t row_offset(int r, int t, int h) const {
#if SPECDEC_IN_DEVICE_CODE
    return detail::device_mapping_offset(mapping, r, t, h, geometry());
#else
    if constexpr (kv_mapping_has_geometry_offset<Mapping>)
      return static_cast<std::int64_t>(mapping.offset(r, t, h, geometry()));
    else
      return static_cast<std::int64_t>(mapping.offset(r, t, h));
#endif
  }
  SPECDEC_HOST_DEVICE T* k_row(int r, int t, int h) const { return k + row_offset(r, t, h); }
  SPECDEC_HOST_DEVICE T* v_row(int r, int t, int h) const { return v + row_offset(r, t, h); }

  //! The memory the cache reads, for overlap checks (host code, after validate_kv_layout): f(name,
  //! view) with a 1-D strided_view over K and over V (when the mapping reports required_span_size)
  //! and over each index array of the mapping (when it has visit_arrays; an array in memory the host
  //! cannot read is visited only when its size needs no read). f must take any view type. O(1).
  template <class F>
  void visit_memory(F&& f) const {
    if constexpr (requires(const kv_geometry& g) {
                    { mapping.required_span_size(g) } -> std::convertible_to<std::int64_t>;
                  }) {
      const std::int64_t n = mapping.required_span_size(geometry());
      if (k != nullptr && n > 0) f(std::string_view("cache.k"), strided_view<const T, 1>(k, {n}, {1}, where));
      if (v != nullptr && n > 0) f(std::string_view("cache.v"), strided_view<const T, 1>(v, {n}, {1}, where));
    }
    if constexpr (requires { mapping.visit_arrays(geometry(), true, detail::ignore_array{}); })
      mapping.visit_arrays(geometry(), host_accessible(where),
                           [&](std::string_view name, const std::int32_t* p, std::int64_t n) {
                             if (p != nullptr && n > 0) f(name, strided_view<const std::int32_t, 1>(p, {n}, {1}, where));
                           });
  }
};

namespace detail {
template <class T, class M>
kv_cache<T, M> kv_cache_base_of(const kv_cache<T, M>*);  // declared only: the kv_cache a layout is or derives from
//! True when L is a kv_cache, or derives from one without hiding its k_row/v_row: every row is a
//! base pointer plus an offset, and validate_layout checked the bases, so no row is null. The host
//! attention checks the row pointers of other layouts as it reads them (attention/detail/host/passes.inl).
template <class L>
inline constexpr bool kv_rows_from_bases = [] {
  if constexpr (requires(const L* p) { kv_cache_base_of(p); }) {
    using B = decltype(kv_cache_base_of(static_cast<const L*>(nullptr)));
    if constexpr (requires { &L::k_row; &L::v_row; })
      return std::is_same_v<decltype(&L::k_row), decltype(&B::k_row)> &&
             std::is_same_v<decltype(&L::v_row), decltype(&B::v_row)>;
    else
      return false;
  } else {
    return false;
  }
}();

//! Which rows require_kv_rows checks: the keys only (a scan that reads K), or keys and values.
enum class kv_rows_read { keys, keys_and_values };

//! The rows a host primitive is about to read through a layout, tokens [t0, t1) and kv heads
//! [h0, h1) of `request`, are usable (kv_row_usable: non-null, aligned): a user's own layout may return
//! null or misaligned rows between the corners validate_kv_layout checks. Throws invalid_argument
//! naming `function`, `argument` and the first such row, before anything is read through it (the kernels are noexcept). Compiled out for
//! layouts whose rows are base + offset (kv_rows_from_bases: a kv_cache). O((t1 - t0) (h1 - h0)).
template <class L>
void require_kv_rows(const L& cache, int request, int t0, int t1, int h0, int h1, kv_rows_read read,
                     std::string_view function, std::string_view argument) {
  if constexpr (!kv_rows_from_bases<L>) {
    for (int t = t0; t < t1; ++t)
      for (int h = h0; h < h1; ++h) {
        const typename L::value_type* k = cache.k_row(request, t, h);
        const bool k_bad = !kv_row_usable<L>(k);
        if (k_bad || (read == kv_rows_read::keys_and_values && !kv_row_usable<L>(cache.v_row(request, t, h))))
            [[unlikely]] {
          std::string at(" for every row read (request ");  // appended: see require_row_corners
          at += std::to_string(request), at += ", token ", at += std::to_string(t), at += ", kv head ";
          at += std::to_string(h), at += ")";
          if (k_bad) throw_unusable_row<L>(function, argument, "k_row", k, at);
          throw_unusable_row<L>(function, argument, "v_row", cache.v_row(request, t, h), at);
        }
      }
  }
}

//! Outputs a host or device primitive writes while it reads keys through a layout (kv_importance
//! writes each token's score while later K rows are still to be read) lie apart from what it reads:
//! for a layout that reports its memory (kv_cache::visit_memory) the K buffer and the mapping's
//! arrays (page tables, lengths), O(1); for another host-accessible layout every key row read,
//! tokens [0, min(length(r), max_tokens)) of requests [r0, r1) and every kv head (max_tokens: the
//! tokens the call can read, e.g. its output's columns), O(sum length x Hkv) compares. `outputs` are
//! name, view pairs; throws invalid_argument naming `function` and the first overlapping output.
//! (A device layout that does not report its memory is not compared: its rows may come from tables
//! the host cannot read.)
template <class L, class... Out>
void require_outputs_apart_from_keys(const L& cache, int r0, int r1, std::int64_t max_tokens, std::string_view function,
                                     const Out&... outputs) {
  static_assert(sizeof...(Out) % 2 == 0, "require_outputs_apart_from_keys: name, view pairs");
  constexpr std::size_t n = sizeof...(Out) / 2;
  named_span spans[n];
  collect_spans(spans, outputs...);
  const auto check = [&](const std::string& what, std::uintptr_t lo, std::uintptr_t hi) {
    for (const auto& [name, s] : spans)
      if (s.first <= s.second && lo <= hi && s.first <= hi && lo <= s.second) [[unlikely]]
        throw_invalid_argument(function, name, "memory apart from what the call reads (" + what + ")",
                               "an overlapping view");
  };
  bool whole_k = false;
  if constexpr (requires { cache.visit_memory([](std::string_view, const auto&) {}); })
    cache.visit_memory([&](std::string_view name, const auto& view) {
      if (name == "cache.v") return;  // values are not read
      whole_k = whole_k || name == "cache.k";
      const auto [lo, hi] = view_byte_span(view);
      check(std::string(name), lo, hi);
    });
  if (whole_k || !host_accessible(cache.space())) return;
  using T = std::remove_cv_t<typename L::value_type>;
  const auto row_bytes = static_cast<std::uintptr_t>(cache.head_dim()) * sizeof(T);
  for (int r = r0; r < r1; ++r)
    for (std::int64_t t = 0, len = std::min<std::int64_t>(cache.length(r), max_tokens); t < len; ++t)
      for (int h = 0; h < cache.num_kv_heads(); ++h) {
        const auto lo = reinterpret_cast<std::uintptr_t>(cache.k_row(r, static_cast<int>(t), h));
        check("the key row of request " + std::to_string(r) + ", token " + std::to_string(t) + ", kv head " +
                  std::to_string(h),
              lo, lo + (row_bytes - 1));
      }
}

//! Outputs a device primitive writes while other threads still read the layout's index arrays (page
//! tables; the lengths too when `lengths_read`) lie apart from those arrays: for a layout that reports
//! them (kv_cache::visit_memory; K and V are not compared here). The host backends read what they
//! need first, so this is for on_device_v policies. `outputs`: name, view pairs. O(arrays x outputs).
template <class L, class... Out>
void require_outputs_apart_from_mapping(const L& cache, bool lengths_read, std::string_view function,
                                        const Out&... outputs) {
  if constexpr (requires { cache.visit_memory([](std::string_view, const auto&) {}); })
    cache.visit_memory([&](std::string_view name, const auto& view) {
      if (name == "cache.k" || name == "cache.v" || (!lengths_read && name == "cache.mapping.lengths")) return;
      require_disjoint(function, name, view, outputs...);
    });
}
}  // namespace detail

//! The kv_cache's own checks, found by ADL from validate_kv_layout (which checks geometry before and
//! lengths, capacities and row corners after): first the mapping's validate_kv_mapping hook when it
//! has one, then non-null k and v unless the cache holds no rows. A host-accessible cache holds rows
//! when some request has a positive length or capacity (read after the hook has checked the mapping's
//! arrays); a device-resident one is not read, so it needs its bases whenever it has requests.
//! O(requests) plus the hook.
inline namespace SPECDEC_HOST_ISA {  // on every entry point's path: see core/isa.hpp
template <class T, class M>
void validate_layout(const kv_cache<T, M>& c, std::string_view function, std::string_view argument) {
  // The mapping's index arrays aligned for int32 before the hook reads them (a lengths pointer at an
  // odd byte offset was read misaligned, undefined behaviour, by the hook itself).
  if constexpr (requires { c.mapping.visit_arrays(c.geometry(), false, detail::ignore_array{}); })
    c.mapping.visit_arrays(c.geometry(), false, [&](std::string_view name, const std::int32_t* p, std::int64_t) {
      if (reinterpret_cast<std::uintptr_t>(p) % alignof(std::int32_t) != 0) [[unlikely]]
        throw_invalid_argument(function, argument,
                               std::string(name) + " aligned to " + std::to_string(alignof(std::int32_t)) + " bytes",
                               detail::address_text(p));
    });
  if constexpr (requires { validate_kv_mapping(c.mapping, c.geometry(), c.where, function, argument); })
    validate_kv_mapping(c.mapping, c.geometry(), c.where, function, argument);
  const bool k_misaligned = reinterpret_cast<std::uintptr_t>(c.k) % alignof(T) != 0;  // null is aligned
  if (k_misaligned || reinterpret_cast<std::uintptr_t>(c.v) % alignof(T) != 0) [[unlikely]]
    throw_invalid_argument(function, argument, std::string("k and v buffers aligned to ") + std::to_string(alignof(T)) + " bytes",
                           k_misaligned ? "a misaligned k" : "a misaligned v");
  if (c.k != nullptr && c.v != nullptr) return;
  bool holds_rows = c.requests > 0;
  if (holds_rows && host_accessible(c.where)) {
    holds_rows = false;
    for (int r = 0; r < c.requests && !holds_rows; ++r) {
      holds_rows = c.length(r) > 0;
      if constexpr (kv_mapping_has_capacity<M>) holds_rows = holds_rows || c.capacity(r) > 0;
    }
  }
  require(!holds_rows, function, argument, "non-null k and v buffers", "nullptr");
}
}  // namespace SPECDEC_HOST_ISA

}  // namespace specdec
