#pragma once
//! \file kv_layout.hpp
//! The kv_layout concept: how primitives reach a user's KV cache without copying it.
//!
//! A kv_layout is a small copyable object, callable on host and device, that maps
//! (request, token, kv_head) to the K and V rows (head_dim contiguous elements each) and gives each
//! request's current length. Kernels are templated on it, so a user's own cache plugs in unchanged.
//! The concept is split into named parts so a compile error says which member is missing; call
//! check_kv_layout<L>() for one static_assert per part with a readable message.

#include <concepts>
#include <cstdint>
#include <type_traits>

#include "specdec/core/config.hpp"
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

//! A layout whose rows may be written (needed by append and commit).
template <class L>
concept writable_kv_layout = kv_layout<L> && !std::is_const_v<typename L::value_type> &&
                             requires(const L& l, int r) {
                               { l.capacity(r) } -> std::convertible_to<int>;
                             };

//! Compile-time check with one readable message per missing part. Entry points call this first.
template <class L>
consteval bool check_kv_layout() {
  static_assert(std::copyable<L>, "kv_layout: the layout type must be copyable (it is passed to kernels by value)");
  static_assert(kv_layout_has_value_type<L>, "kv_layout: missing member type 'value_type' (the cached element type)");
  static_assert(kv_layout_has_num_requests<L>, "kv_layout: missing member function 'num_requests()' returning int");
  static_assert(kv_layout_has_num_kv_heads<L>, "kv_layout: missing member function 'num_kv_heads()' returning int");
  static_assert(kv_layout_has_head_dim<L>, "kv_layout: missing member function 'head_dim()' returning int");
  static_assert(kv_layout_has_length<L>, "kv_layout: missing member function 'length(int request)' returning int");
  static_assert(kv_layout_has_k_row<L>,
                "kv_layout: missing member function 'k_row(int request, int token, int kv_head)' returning a "
                "pointer to value_type");
  static_assert(kv_layout_has_v_row<L>,
                "kv_layout: missing member function 'v_row(int request, int token, int kv_head)' returning a "
                "pointer to value_type");
  static_assert(kv_layout_has_space<L>, "kv_layout: missing member function 'space()' returning specdec::memory_space");
  return true;
}

//! Host-side validation every entry point runs on a layout argument: geometry positive, and, when the
//! layout's memory is host-accessible, every length non-negative. Shipped layouts add their own checks
//! through an ADL-found `validate_layout(const L&, function, argument)`.
inline namespace SPECDEC_HOST_ISA {  // on every entry point's path: see core/isa.hpp
template <kv_layout L>
void validate_kv_layout(const L& l, std::string_view function, std::string_view argument) {
  require(l.num_requests() >= 0, function, argument, "num_requests() >= 0", l.num_requests());
  require(l.num_kv_heads() > 0, function, argument, "num_kv_heads() > 0", l.num_kv_heads());
  require(l.head_dim() > 0, function, argument, "head_dim() > 0", l.head_dim());
  if constexpr (requires { validate_layout(l, function, argument); }) {
    validate_layout(l, function, argument);
  } else if (host_accessible(l.space())) {
    for (int r = 0; r < l.num_requests(); ++r)
      require(l.length(r) >= 0, function, argument, "length(request) >= 0 for every request", l.length(r));
  }
}
}  // namespace SPECDEC_HOST_ISA

}  // namespace specdec
