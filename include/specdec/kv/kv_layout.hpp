#pragma once
//! \file kv_layout.hpp
//! The kv_layout concept: how primitives reach a user's KV cache without copying it.
//!
//! A kv_layout is a small copyable object, callable on host and device, that maps
//! (request, token, kv_head) to the K and V rows (head_dim contiguous elements each) and gives each
//! request's current length. Kernels are templated on it, so a user's own cache plugs in unchanged.
//!
//! Most users do not write a kv_layout: they write a *mapping* (where row (r, t, h) lives as an element
//! offset from the K and V base pointers, each request's length, optionally its capacity and a
//! validation hook) and use the shipped `kv_cache<T, Mapping>` (kv/kv_cache.hpp), which supplies the
//! geometry, k_row/v_row, the memory space and validation, and is a kv_layout. A mapping used from CUDA
//! kernels must mark its members SPECDEC_HOST_DEVICE (nvcc rejects the kernel otherwise). The shipped
//! contiguous (NHD/HND), paged (CSR), block-table (vLLM) and ring layouts are mappings over kv_cache.
//! A hand-written type with every member below is a kv_layout too.
//!
//! The concept is split into named parts so a compile error says which member is missing; call
//! check_kv_layout<L>() for one static_assert per part with a readable message. Entry points take
//! the layout type unconstrained and call it first, so those messages are what a wrong type gets.
//!
//! What validation looks at, and what it does not (the non-finite-number policy, design.md):
//! validate_kv_layout checks geometry, lengths (against capacity() where the layout has one) and
//! row pointers, never the values in the rows. Primitives read only rows [0, length(r)) of request
//! r, so rows past a length (a rejected tree's leftovers, padding) never reach a result whatever
//! they hold; NaN or Inf in a visible row propagates to the outputs it reaches, as IEEE arithmetic
//! would. Sizes (lengths, capacities, indptr values) are checked before arithmetic that could
//! overflow the int token index.

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "specdec/core/config.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/tensor.hpp"

namespace specdec {

//! `L::value_type` is the element type of the cached rows (float, half, bfloat16, double; may be const).
template <class L>
concept kv_layout_has_value_type = requires { typename L::value_type; };

//! `num_requests()` returns the number of requests in the batch.
template <class L>
concept kv_layout_has_num_requests = requires(const L& l) {
  { l.num_requests() } -> std::convertible_to<int>;
};
//! `num_kv_heads()` returns the number of KV heads.
template <class L>
concept kv_layout_has_num_kv_heads = requires(const L& l) {
  { l.num_kv_heads() } -> std::convertible_to<int>;
};
//! `head_dim()` returns the number of elements in one K or V row.
template <class L>
concept kv_layout_has_head_dim = requires(const L& l) {
  { l.head_dim() } -> std::convertible_to<int>;
};
//! `num_requests()`, `num_kv_heads()` and `head_dim()` return integers.
template <class L>
concept kv_layout_has_geometry =
    kv_layout_has_num_requests<L> && kv_layout_has_num_kv_heads<L> && kv_layout_has_head_dim<L>;

//! `length(request)` is the number of tokens cached for that request.
template <class L>
concept kv_layout_has_length = requires(const L& l, int r) {
  { l.length(r) } -> std::convertible_to<int>;
};

//! `k_row(request, token, kv_head)` points at head_dim contiguous K elements.
template <class L>
concept kv_layout_has_k_row = kv_layout_has_value_type<L> && requires(const L& l, int r, int t, int h) {
  { l.k_row(r, t, h) } -> std::convertible_to<const typename L::value_type*>;
};
//! `v_row(request, token, kv_head)` points at head_dim contiguous V elements.
template <class L>
concept kv_layout_has_v_row = kv_layout_has_value_type<L> && requires(const L& l, int r, int t, int h) {
  { l.v_row(r, t, h) } -> std::convertible_to<const typename L::value_type*>;
};
//! `k_row(request, token, kv_head)` and `v_row(...)` point at head_dim contiguous elements.
template <class L>
concept kv_layout_has_rows = kv_layout_has_k_row<L> && kv_layout_has_v_row<L>;

//! `space()` says where the rows (and any index arrays) live.
template <class L>
concept kv_layout_has_space = requires(const L& l) {
  { l.space() } -> std::same_as<memory_space>;
};

//! A KV-cache layout usable by every specdec attention primitive.
template <class L>
concept kv_layout = std::copyable<L> && kv_layout_has_value_type<L> && kv_layout_has_geometry<L> &&
                    kv_layout_has_length<L> && kv_layout_has_rows<L> && kv_layout_has_space<L>;

//! `capacity(request)` is the number of token slots the request's rows can hold (optional for reading;
//! when present, validation checks every length against it).
template <class L>
concept kv_layout_has_capacity = requires(const L& l, int r) {
  { l.capacity(r) } -> std::convertible_to<int>;
};

//! A layout whose rows may be written (needed by append and commit).
template <class L>
concept writable_kv_layout = kv_layout<L> && !std::is_const_v<typename L::value_type> && kv_layout_has_capacity<L>;

//! Compile-time check with one readable message per missing part. Entry points take the layout as
//! an unconstrained template parameter and call this first, so a type that is not a kv_layout gets
//! every message below that applies (not an overload-resolution failure naming only the first
//! unsatisfied requirement); they instantiate their body only under `if constexpr (kv_layout<L>)`,
//! so nothing else is reported.
template <class L>
consteval bool check_kv_layout() {
  static_assert(std::copyable<L>, "kv_layout: the layout type must be copyable (it is passed to kernels by value)");
  static_assert(kv_layout_has_value_type<L>, "kv_layout: missing member type 'value_type' (the cached element type)");
  static_assert(kv_layout_has_num_requests<L>, "kv_layout: missing member function 'num_requests()' returning int");
  static_assert(kv_layout_has_num_kv_heads<L>, "kv_layout: missing member function 'num_kv_heads()' returning int");
  static_assert(kv_layout_has_head_dim<L>, "kv_layout: missing member function 'head_dim()' returning int");
  static_assert(kv_layout_has_length<L>, "kv_layout: missing member function 'length(int request)' returning int");
  // Without value_type the row requirements cannot hold; the value_type message above says why.
  static_assert(!kv_layout_has_value_type<L> || kv_layout_has_k_row<L>,
                "kv_layout: missing member function 'k_row(int request, int token, int kv_head)' returning a "
                "pointer to value_type");
  static_assert(!kv_layout_has_value_type<L> || kv_layout_has_v_row<L>,
                "kv_layout: missing member function 'v_row(int request, int token, int kv_head)' returning a "
                "pointer to value_type");
  static_assert(kv_layout_has_space<L>, "kv_layout: missing member function 'space()' returning specdec::memory_space");
  return true;
}

//! check_kv_layout<L>() plus the parts a writable layout (commit, append) needs, each with its own
//! message.
template <class L>
consteval bool check_writable_kv_layout() {
  check_kv_layout<L>();
  if constexpr (kv_layout_has_value_type<L>) {
    static_assert(!std::is_const_v<typename L::value_type>,
                  "writable_kv_layout: value_type must not be const (the rows are written)");
  }
  static_assert(kv_layout_has_capacity<L>,
                "writable_kv_layout: missing member function 'capacity(int request)' returning int (the token slots "
                "a write may fill)");
  return true;
}

namespace detail {
inline namespace SPECDEC_HOST_ISA {  // on every entry point's path: see core/isa.hpp

//! A row pointer the backends may read: non-null and aligned for the layout's value_type (they load
//! its elements as that type; a user layout returning a row at an odd byte offset was undefined
//! behaviour). The one test of validate_kv_layout's corners and kv_cache's require_kv_rows.
template <class L>
[[nodiscard]] bool kv_row_usable(const typename L::value_type* row) noexcept {
  return row != nullptr && reinterpret_cast<std::uintptr_t>(row) % alignof(typename L::value_type) == 0;
}

//! The error for a row kv_row_usable refused: "a non-null <which><where>, aligned to N bytes", got
//! "nullptr" or its address.
template <class L>
[[noreturn]] void throw_unusable_row(std::string_view function, std::string_view argument, const char* which,
                                     const void* row, const std::string& where) {
  throw_invalid_argument(function, argument,
                         std::string("a non-null ") + which + where + ", aligned to " +
                             std::to_string(alignof(typename L::value_type)) + " bytes",
                         row == nullptr ? std::string("nullptr") : address_text(row));
}

//! The generic row check: rows of a visible token must be usable (kv_row_usable: non-null, aligned).
//! Only the corners of a request (first and last visible token, first and last kv head) are looked
//! at, so validation stays O(requests); a null base pointer, the usual mistake, makes the first
//! corner null.
template <class L>
void require_row_corners(const L& l, int r, int length, std::string_view function, std::string_view argument) {
  const int tokens[2] = {0, length - 1}, heads[2] = {0, l.num_kv_heads() - 1};
  for (const int t : tokens)
    for (const int h : heads) {
      const auto at = [&] {  // appended piece by piece: GCC 12's -Wrestrict misfires on "(" + std::string&& at -O3
        std::string a("(");
        a += std::to_string(r), a += ", ", a += std::to_string(t), a += ", ", a += std::to_string(h);
        a += ") (request ", a += std::to_string(r), a += " has length ", a += std::to_string(length), a += ")";
        return a;
      };
      // v_row only once k_row passed (a user layout may form it from a null base)
      if (const typename L::value_type* k = l.k_row(r, t, h); !kv_row_usable<L>(k)) [[unlikely]]
        throw_unusable_row<L>(function, argument, "k_row", k, at());
      if (const typename L::value_type* v = l.v_row(r, t, h); !kv_row_usable<L>(v)) [[unlikely]]
        throw_unusable_row<L>(function, argument, "v_row", v, at());
    }
}

}  // namespace SPECDEC_HOST_ISA
}  // namespace detail

//! Host-side validation every entry point runs on a layout argument, for every layout:
//!  1. geometry: num_requests() >= 0, num_kv_heads() > 0, head_dim() > 0;
//!  2. the layout's own checks, when it has an ADL-found `validate_layout(const L&, function,
//!     argument)` (the shipped layouts check their pointers, index arrays and sizes there; a user
//!     layout may add one). It runs before step 3 so that step 3's calls into the layout are safe;
//!  3. when the layout's memory is host-accessible: every length(r) >= 0 and, if the layout has
//!     capacity(), <= capacity(r); for every non-empty request, non-null k_row/v_row at its corners
//!     (first and last token, first and last kv head).
//! Device-resident layouts are not dereferenced on the host: for them only steps 1 and 2 run (the
//! shipped hooks check the base pointers, which the host can see). O(requests) plus the hook.
inline namespace SPECDEC_HOST_ISA {  // on every entry point's path: see core/isa.hpp
template <class L>
void validate_kv_layout(const L& l, std::string_view function, std::string_view argument) {
  static_assert(check_kv_layout<L>());  // L is unconstrained so that these messages are what a non-layout gets
  if constexpr (kv_layout<L>) {
    require(l.num_requests() >= 0, function, argument, "num_requests() >= 0", l.num_requests());
    require(l.num_kv_heads() > 0, function, argument, "num_kv_heads() > 0", l.num_kv_heads());
    require(l.head_dim() > 0, function, argument, "head_dim() > 0", l.head_dim());
    if constexpr (requires { validate_layout(l, function, argument); }) validate_layout(l, function, argument);
    if (!host_accessible(l.space())) return;
    for (int r = 0; r < l.num_requests(); ++r) {
      const int length = l.length(r);
      require(length >= 0, function, argument, "length(request) >= 0 for every request", length);
      if constexpr (kv_layout_has_capacity<L>) {
        if (length > l.capacity(r)) [[unlikely]]
          throw_invalid_argument(function, argument,
                                 "length(" + std::to_string(r) + ") <= capacity(" + std::to_string(r) +
                                     ") = " + std::to_string(l.capacity(r)),
                                 length);
      }
      if (length > 0) detail::require_row_corners(l, r, length, function, argument);
    }
  }
}
}  // namespace SPECDEC_HOST_ISA

}  // namespace specdec
