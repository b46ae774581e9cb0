#pragma once
//! \file tensor.hpp
//! The tensor_like concept and specdec's own non-owning strided_view.
//!
//! Public functions accept any tensor_like (a data pointer, a rank, extents, strides in elements,
//! an element type and a memory space) and convert it with as_view() to a strided_view, whose
//! members work on host and device.

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "specdec/core/config.hpp"
#include "specdec/core/dtype.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"

namespace specdec {

//! Where a buffer lives. `managed` memory is accessible from host and device.
enum class memory_space : std::uint8_t { host, device, managed };

[[nodiscard]] constexpr std::string_view name(memory_space s) noexcept {
  switch (s) {
    case memory_space::host: return "host";
    case memory_space::device: return "device";
    case memory_space::managed: return "managed";
  }
  return "unknown";
}
inline std::ostream& operator<<(std::ostream& os, memory_space s) { return os << name(s); }

//! True when memory in space `s` may be dereferenced by host code.
[[nodiscard]] constexpr bool host_accessible(memory_space s) noexcept { return s != memory_space::device; }
//! True when memory in space `s` may be dereferenced by device code.
[[nodiscard]] constexpr bool device_accessible(memory_space s) noexcept { return s != memory_space::host; }

//! A tensor_like type exposes its element type, a static rank, a data pointer, extents and strides
//! (in elements), and its memory space.
template <class V>
concept tensor_like = requires(const V& v, int i) {
  typename V::element_type;
  { V::rank } -> std::convertible_to<int>;
  { v.data() } -> std::convertible_to<const volatile void*>;
  { v.extent(i) } -> std::convertible_to<std::int64_t>;
  { v.stride(i) } -> std::convertible_to<std::int64_t>;
  { v.space() } -> std::same_as<memory_space>;
};

namespace detail {
//! Row-major strides of `extents` (the last dimension contiguous), multiplied in uint64: extents whose
//! product does not fit int64 give strides that wrap, without undefined behaviour (require_array
//! refuses such a view; make_view and from_dlpack refuse the extents first, require_nonzero_product_fits).
template <int Rank>
constexpr void row_major_strides(const std::int64_t (&extents)[Rank], std::int64_t (&strides)[Rank]) noexcept {
  std::uint64_t s = 1;
  for (int i = Rank - 1; i >= 0; --i) {
    strides[i] = static_cast<std::int64_t>(s);
    s *= static_cast<std::uint64_t>(extents[i]);
  }
}

inline namespace SPECDEC_HOST_ISA {  // on every entry point's path: see core/isa.hpp
//! Throws invalid_argument unless the product of the non-zero values of `extents` (non-negative; the
//! caller checks that with its own message) fits int64: with a zero extent the array is empty, and
//! its other extents are held to the same bound as a non-empty array's.
template <int Rank>
void require_nonzero_product_fits(std::string_view function, std::string_view argument,
                                  const std::int64_t (&extents)[Rank]) {
  std::int64_t n = 1;
  for (const std::int64_t e : extents)
    if (e != 0) n = checked_size_product(function, argument, {n, e});
}
}  // namespace SPECDEC_HOST_ISA
}  // namespace detail

//! Non-owning view of a Rank-dimensional array with element strides. Copyable, host/device usable.
template <class T, int Rank>
class strided_view {
  static_assert(Rank >= 1, "strided_view: Rank must be at least 1");

 public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  static constexpr int rank = Rank;

  strided_view() = default;
  //! View of `data` with the given extents and strides (elements).
  SPECDEC_HOST_DEVICE strided_view(T* data, const std::int64_t (&extents)[Rank], const std::int64_t (&strides)[Rank],
                                   memory_space space = memory_space::host) noexcept
      : data_(data), space_(space) {
    for (int i = 0; i < Rank; ++i) {
      extents_[i] = extents[i];
      strides_[i] = strides[i];
    }
  }

  //! Row-major contiguous view of `data` with the given extents. Extents whose product does not fit
  //! int64 give strides that wrap (computed in uint64, so without undefined behaviour): such a view
  //! describes no array, and require_array (every entry point's check) refuses it; make_view refuses
  //! it first.
  static strided_view contiguous(T* data, const std::int64_t (&extents)[Rank],
                                 memory_space space = memory_space::host) noexcept {
    std::int64_t strides[Rank];
    detail::row_major_strides(extents, strides);
    return strided_view(data, extents, strides, space);
  }

  //! Implicit conversion from a view of mutable elements to a view of const elements (same geometry).
  //! A converting constructor rather than a conversion operator: nvcc warns (#554) about an operator
  //! that would convert a const view to its own type.
  template <class U>
    requires(std::is_const_v<T> && std::is_same_v<const U, T> && !std::is_const_v<U>)
  SPECDEC_HOST_DEVICE strided_view(const strided_view<U, Rank>& other) noexcept : data_(other.data()), space_(other.space()) {
    for (int i = 0; i < Rank; ++i) {
      extents_[i] = other.extent(i);
      strides_[i] = other.stride(i);
    }
  }

  SPECDEC_HOST_DEVICE T* data() const noexcept { return data_; }
  SPECDEC_HOST_DEVICE std::int64_t extent(int i) const noexcept { return extents_[i]; }
  SPECDEC_HOST_DEVICE std::int64_t stride(int i) const noexcept { return strides_[i]; }
  SPECDEC_HOST_DEVICE memory_space space() const noexcept { return space_; }
  //! Number of elements. Precondition: non-negative extents whose product fits int64 (make_view and
  //! from_dlpack check it; otherwise the product wraps, computed in uint64 without undefined behaviour).
  SPECDEC_HOST_DEVICE std::int64_t size() const noexcept {
    std::uint64_t n = 1;
    for (int i = 0; i < Rank; ++i) n *= static_cast<std::uint64_t>(extents_[i]);
    return static_cast<std::int64_t>(n);
  }
  //! True when strides are exactly row-major over the extents (size-1 dims ignored).
  //! A negative extent is not; a row-major stride past INT64_MAX (which no stride can equal) is not
  //! computed (no signed overflow).
  SPECDEC_HOST_DEVICE bool is_contiguous() const noexcept {
    std::int64_t s = 1;
    bool past = false;  // the row-major stride of the next dimension left int64
    for (int i = Rank - 1; i >= 0; --i) {
      const std::int64_t e = extents_[i];
      if (e < 0 || (e != 1 && (past || strides_[i] != s))) return false;
      if (e > 1 && s > INT64_MAX / e)
        past = true;
      else
        s *= e;
    }
    return true;
  }
  //! Element at the given indices (no bounds check: validate shapes at the API boundary).
  template <class... I>
    requires(sizeof...(I) == Rank && (std::integral<I> && ...))
  SPECDEC_HOST_DEVICE T& operator()(I... idx) const noexcept {
    const std::int64_t ii[Rank] = {static_cast<std::int64_t>(idx)...};
    std::int64_t off = 0;
    for (int i = 0; i < Rank; ++i) off += ii[i] * strides_[i];
    return data_[off];
  }

 private:
  T* data_ = nullptr;
  std::int64_t extents_[Rank] = {};
  std::int64_t strides_[Rank] = {};
  memory_space space_ = memory_space::host;
};

static_assert(tensor_like<strided_view<float, 3>>);

//! Row-major contiguous view over a raw pointer: make_view(ptr, {tokens, heads, dim}). Throws
//! invalid_argument for a negative extent, or extents whose product of non-zero extents does not fit
//! int64 (no array has that many elements; the strides would wrap).
template <int Rank, class T>
[[nodiscard]] strided_view<T, Rank> make_view(T* data, const std::int64_t (&extents)[Rank],
                                              memory_space space = memory_space::host) {
  for (int i = 0; i < Rank; ++i)
    require(extents[i] >= 0, "specdec::make_view", "extents", "non-negative extents", extents[i]);
  detail::require_nonzero_product_fits("specdec::make_view", "extents", extents);
  return strided_view<T, Rank>::contiguous(data, extents, space);
}

//! Converts any tensor_like to a strided_view of the same element type and rank.
template <tensor_like V>
[[nodiscard]] auto as_view(const V& v) {
  using T = typename V::element_type;
  constexpr int R = V::rank;
  std::int64_t e[R], s[R];
  for (int i = 0; i < R; ++i) {
    e[i] = static_cast<std::int64_t>(v.extent(i));
    s[i] = static_cast<std::int64_t>(v.stride(i));
  }
  return strided_view<T, R>(const_cast<T*>(static_cast<const T*>(v.data())), e, s, v.space());
}

namespace detail {
//! A 1-D tensor of int32 (const or not), and one the primitive may write: the offsets, parents,
//! tokens and outputs of the array-form primitives (build_tree_batch, verify_greedy_batch, ...).
template <class V>
concept int32_array =
    tensor_like<V> && (V::rank == 1) && std::is_same_v<std::remove_cv_t<typename V::element_type>, std::int32_t>;
template <class V>
concept int32_output = int32_array<V> && !std::is_const_v<typename V::element_type>;
//! A 1-D int64 tensor the primitive may write (per-request token counters).
template <class V>
concept int64_output = tensor_like<V> && (V::rank == 1) &&
                       std::is_same_v<typename V::element_type, std::int64_t>;
//! A 1-D tensor of uint64 (const or not): per-request Philox seeds and stream ids.
template <class V>
concept uint64_array =
    tensor_like<V> && (V::rank == 1) && std::is_same_v<std::remove_cv_t<typename V::element_type>, std::uint64_t>;

//! True when every element of a non-empty v lies within int64 bytes of data() and at an address
//! that does not wrap: the sum over the dimensions of (extent - 1) |stride|, times the element size,
//! fits int64, and the lowest and highest bytes any index reaches lie between 0 and UINTPTR_MAX (a
//! view past that wraps the address arithmetic of every kernel and of the overlap checks;
//! require_array refuses it). Extents non-negative.
template <class V>
[[nodiscard]] bool addressable(const V& v) noexcept {
  constexpr auto size = static_cast<std::int64_t>(sizeof(typename V::element_type));
  const std::int64_t limit = std::numeric_limits<std::int64_t>::max() / size;
  std::int64_t reach = 0, down = 0;  // elements: all dimensions' reach, and the negative strides' part
  for (int d = 0; d < V::rank; ++d) {
    const std::int64_t e = v.extent(d) - 1, s = v.stride(d);
    if (e <= 0 || s == 0) continue;
    if (s == std::numeric_limits<std::int64_t>::min()) return false;
    const std::int64_t a = s < 0 ? -s : s;
    if (e > (limit - reach) / a) return false;
    reach += e * a;
    if (s < 0) down += e * a;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(v.data());
  const auto below = static_cast<std::uintptr_t>(down * size);
  const auto above = static_cast<std::uintptr_t>((reach - down) * size) + static_cast<std::uintptr_t>(size - 1);
  return below <= base && above <= std::numeric_limits<std::uintptr_t>::max() - base;
}

//! The first and last byte any index of v reaches ({1, 0}, empty, when an extent is 0; the whole
//! address space when the view is not addressable, so that it overlaps everything).
template <class V>
[[nodiscard]] std::pair<std::uintptr_t, std::uintptr_t> view_byte_span(const V& v) noexcept {
  for (int d = 0; d < V::rank; ++d)
    if (v.extent(d) <= 0) return {1, 0};
  if (!addressable(v)) return {0, std::numeric_limits<std::uintptr_t>::max()};
  std::int64_t lo = 0, hi = 0;
  for (int d = 0; d < V::rank; ++d) {
    const std::int64_t reach = (v.extent(d) - 1) * v.stride(d);
    (reach < 0 ? lo : hi) += reach;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(v.data());
  const auto size = static_cast<std::int64_t>(sizeof(typename V::element_type));
  // hi * size fits (addressable: every reach <= INT64_MAX / size); + size - 1 is added unsigned
  return {base + static_cast<std::uintptr_t>(lo * size),
          base + static_cast<std::uintptr_t>(hi * size) + static_cast<std::uintptr_t>(size - 1)};
}

//! "address 0x1f2e" for messages about a pointer's value (a misaligned row or view).
[[nodiscard]] inline std::string address_text(const volatile void* p) {
  std::ostringstream os;
  os << "address 0x" << std::hex << reinterpret_cast<std::uintptr_t>(p);
  return os.str();
}

using named_span = std::pair<std::string_view, std::pair<std::uintptr_t, std::uintptr_t>>;
inline void collect_spans(named_span*) noexcept {}
template <class V, class... Rest>
void collect_spans(named_span* out, std::string_view name, const V& v, const Rest&... rest) noexcept {
  *out = {name, view_byte_span(v)};
  collect_spans(out + 1, rest...);
}
}  // namespace detail

// Validation helpers on every entry point's path: inside the ISA namespace (core/isa.hpp).
inline namespace SPECDEC_HOST_ISA {

//! "[a, b, c]" for messages.
template <class V>
[[nodiscard]] std::string shape_string(const V& v) {
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < V::rank; ++i) os << (i ? ", " : "") << v.extent(i);
  os << ']';
  return os.str();
}

//! Validates that v describes an array: no negative extent (a view built with one describes no
//! array; every size computed from it would be wrong), and, unless some extent is 0, a non-null data
//! pointer aligned for the element type (the backends load elements as that type: a misaligned
//! pointer from a user's own tensor type, e.g. a float view at an odd byte offset into a buffer, was
//! undefined behaviour; from_dlpack refuses one too) and element offsets whose bytes fit int64.
//! Throws naming function and argument.
template <class V>
void require_array(std::string_view function, std::string_view argument, const V& v) {
  bool empty = false;
  for (int i = 0; i < V::rank; ++i) {
    if (v.extent(i) < 0) [[unlikely]]
      throw_invalid_argument(function, argument, "non-negative extents", shape_string(v));
    empty = empty || v.extent(i) == 0;
  }
  if (!empty && v.data() == nullptr) [[unlikely]]
    throw_invalid_argument(function, argument, "a non-null data pointer (the view has elements)", "nullptr");
  constexpr std::size_t align = alignof(std::remove_cvref_t<typename V::element_type>);
  if (!empty && reinterpret_cast<std::uintptr_t>(v.data()) % align != 0) [[unlikely]]
    throw_invalid_argument(function, argument, std::string("a data pointer aligned to ") + std::to_string(align) + " bytes",
                           detail::address_text(v.data()));
  if (!empty && !detail::addressable(v)) [[unlikely]] {
    std::ostringstream os;
    os << "strides [";
    for (int i = 0; i < V::rank; ++i) os << (i ? ", " : "") << v.stride(i);
    os << "] for shape " << shape_string(v);
    throw_invalid_argument(function, argument,
                           "element offsets whose bytes fit int64, at addresses that do not wrap", os.str());
  }
}

//! True when distinct indices of v address distinct elements, so a view written by several threads
//! (or read-modify-written) is free of races. A sufficient test, exact for the layouts arrays have:
//! the dimensions with more than one index, ordered by |stride|, each step past the whole reach of
//! the ones inside it. Extents must be non-negative (require_array).
template <class V>
[[nodiscard]] bool has_unique_elements(const V& v) noexcept {
  std::int64_t stride[V::rank > 0 ? V::rank : 1], extent[V::rank > 0 ? V::rank : 1];
  int m = 0;
  for (int i = 0; i < V::rank; ++i) {
    if (v.extent(i) == 0) return true;  // no elements
    if (v.extent(i) == 1) continue;
    const std::int64_t s = v.stride(i);
    if (s == std::numeric_limits<std::int64_t>::min()) return false;
    int j = m++;  // insertion by |stride|
    for (; j > 0 && stride[j - 1] > (s < 0 ? -s : s); --j) {
      stride[j] = stride[j - 1];
      extent[j] = extent[j - 1];
    }
    stride[j] = s < 0 ? -s : s;
    extent[j] = v.extent(i);
  }
  std::int64_t reach = 0;  // the largest element offset the inner dimensions span
  for (int j = 0; j < m; ++j) {
    if (stride[j] <= reach) return false;
    if (extent[j] - 1 > (std::numeric_limits<std::int64_t>::max() - reach) / stride[j])
      return false;  // spans more than 2^63 elements: no array does
    reach += (extent[j] - 1) * stride[j];
  }
  return true;
}

//! Validates that v is an output whose elements do not overlap (has_unique_elements): a view with
//! stride 0, or strides shorter than the rows inside them, would have several threads write one
//! element. Throws naming function and argument.
template <class V>
void require_unique_elements(std::string_view function, std::string_view argument, const V& v) {
  if (!has_unique_elements(v)) [[unlikely]] {
    std::ostringstream os;
    os << "strides [";
    for (int i = 0; i < V::rank; ++i) os << (i ? ", " : "") << v.stride(i);
    os << "] for shape " << shape_string(v);
    throw_invalid_argument(function, argument, "an output whose elements do not overlap", os.str());
  }
}

//! True when the memory spans of a and b (first to last byte any index reaches) intersect.
template <class A, class B>
[[nodiscard]] bool views_overlap(const A& a, const B& b) noexcept {
  const auto [a0, a1] = detail::view_byte_span(a);
  const auto [b0, b1] = detail::view_byte_span(b);
  return a0 <= a1 && b0 <= b1 && a0 <= b1 && b0 <= a1;
}

//! Arrays a primitive writes (and what it reads while writing them) must not share memory:
//! require_disjoint(fn, "index", index, "evict", evict, ...) takes name, view pairs and throws
//! invalid_argument naming function and the later argument of the first pair whose memory spans
//! intersect (views_overlap).
template <class... Args>
void require_disjoint(std::string_view function, const Args&... args) {
  static_assert(sizeof...(Args) % 2 == 0, "require_disjoint: name, view pairs");
  constexpr std::size_t n = sizeof...(Args) / 2;
  detail::named_span spans[n];
  detail::collect_spans(spans, args...);
  for (std::size_t j = 1; j < n; ++j)
    for (std::size_t i = 0; i < j; ++i) {
      const auto [a0, a1] = spans[i].second;
      const auto [b0, b1] = spans[j].second;
      if (a0 <= a1 && b0 <= b1 && a0 <= b1 && b0 <= a1) [[unlikely]]
        throw_invalid_argument(function, spans[j].first, "memory disjoint from '" + std::string(spans[i].first) + "'",
                               "an overlapping view");
    }
}

//! An output that may be written in place over one input: `in` is either exactly `out` (the same
//! data pointer, extents and strides) or disjoint from it (views_overlap); anything between (a shifted
//! or partly overlapping view) throws invalid_argument naming function and `in_name`.
template <class O, class I>
void require_same_or_apart(std::string_view function, std::string_view out_name, const O& out,
                           std::string_view in_name, const I& in) {
  bool same = static_cast<const void*>(out.data()) == static_cast<const void*>(in.data()) && O::rank == I::rank;
  if constexpr (O::rank == I::rank)
    for (int i = 0; same && i < O::rank; ++i) same = out.extent(i) == in.extent(i) && out.stride(i) == in.stride(i);
  if (!same && views_overlap(out, in)) [[unlikely]]
    throw_invalid_argument(function, in_name,
                           "memory disjoint from '" + std::string(out_name) + "', or exactly '" + std::string(out_name) +
                               "' (in place)",
                           "a partly overlapping view");
}

//! require_disjoint for a primitive's outputs and inputs, each a tuple of name, view pairs
//! (std::forward_as_tuple("depths", depths, ...)): the outputs pairwise disjoint, and every input
//! disjoint from every output. Inputs may share memory with each other: they are only read.
template <class... Out, class... In>
void require_outputs_apart(std::string_view function, const std::tuple<Out...>& outputs, const std::tuple<In...>& inputs) {
  static_assert(sizeof...(Out) % 2 == 0 && sizeof...(In) % 2 == 0, "require_outputs_apart: name, view pairs");
  std::apply([&](const auto&... o) { require_disjoint(function, o...); }, outputs);
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    const auto apart = [&](std::string_view name, const auto& in) {
      std::apply([&](const auto&... o) { require_disjoint(function, o..., name, in); }, outputs);
    };
    (apart(std::get<2 * I>(inputs), std::get<2 * I + 1>(inputs)), ...);
  }(std::make_index_sequence<sizeof...(In) / 2>{});
}

//! Validates v's extents against `expected` (-1 = any), and that v describes an array
//! (require_array). Throws naming function and argument.
template <class V>
void require_shape(std::string_view function, std::string_view argument, const V& v,
                   std::initializer_list<std::int64_t> expected) {
  require_array(function, argument, v);
  bool ok = static_cast<int>(expected.size()) == V::rank;
  int i = 0;
  for (auto e : expected) {
    if (ok && e >= 0 && v.extent(i) != e) ok = false;
    ++i;
  }
  if (!ok) {
    std::ostringstream os;
    os << "shape [";
    i = 0;
    for (auto e : expected) {
      os << (i++ ? ", " : "");
      if (e < 0) os << '*'; else os << e;
    }
    os << ']';
    throw_invalid_argument(function, argument, os.str(), shape_string(v));
  }
}

//! Validates that the innermost dimension is unit-stride (rows of head_dim are contiguous).
template <class V>
void require_unit_inner_stride(std::string_view function, std::string_view argument, const V& v) {
  require(v.stride(V::rank - 1) == 1 || v.extent(V::rank - 1) <= 1, function, argument,
          "unit stride in the last dimension", v.stride(V::rank - 1));
}

//! Validates the memory space is host-accessible.
template <class V>
void require_host_accessible(std::string_view function, std::string_view argument, const V& v) {
  require(host_accessible(v.space()), function, argument, "host-accessible memory (host or managed)", v.space());
}

//! Throws unless `x` (a view, or a KV layout: anything with space()) lives where code running under
//! Policy can dereference it: device-accessible memory for specdec::cuda, host-accessible otherwise.
template <class Policy, class X>
void require_policy_memory(std::string_view function, std::string_view argument, const X& x) {
  if constexpr (on_device_v<Policy>)
    require(device_accessible(x.space()), function, argument, "device-accessible memory (device or managed)", x.space());
  else
    require(host_accessible(x.space()), function, argument, "host-accessible memory (host or managed)", x.space());
}

//! The sizes of an array-form batch call: R requests (from the extent of a per-request array, < 2^31 - 1
//! so R + 1 offsets fit int32) and N tree nodes in all (from a per-node array; N + R <= 2^31 - 1 when
//! `plus_requests`, i.e. when the call also has one row per request, e.g. logits [N + R, V]).
struct batch_counts {
  std::int64_t requests, nodes;
};
template <class RV, class NV>
[[nodiscard]] batch_counts require_batch_counts(std::string_view function, std::string_view per_request,
                                                const RV& r, std::string_view per_node, const NV& n,
                                                bool plus_requests = false) {
  constexpr std::int64_t imax = std::numeric_limits<std::int32_t>::max();
  const std::int64_t R = r.extent(0), N = n.extent(0);
  require(R >= 0 && R < imax, function, per_request, "extent(0) in [0, INT32_MAX) (one per request)", R);
  if (plus_requests)
    require(N >= 0 && N <= imax - R, function, per_node, "extent(0) + requests <= INT32_MAX", N);  // R < imax: no overflow
  else
    require(N >= 0 && N <= imax, function, per_node, "extent(0) in [0, INT32_MAX]", N);
  return {R, N};
}

//! The checks of a 1-D array argument of a primitive that runs under Policy (host or cuda): memory
//! the policy can dereference, extent(0) == extent (-1: any), unit stride, and a non-null pointer
//! when non-empty. Throws invalid_argument naming function and argument.
template <class Policy, class V>
void require_policy_array(std::string_view function, std::string_view argument, const V& v, std::int64_t extent) {
  static_assert(V::rank == 1, "require_policy_array: 1-D arrays only");
  require_policy_memory<Policy>(function, argument, v);
  require_array(function, argument, v);
  if (extent >= 0 && v.extent(0) != extent) [[unlikely]]
    throw_invalid_argument(function, argument, "extent(0) == " + std::to_string(extent), v.extent(0));
  require(v.extent(0) <= 1 || v.stride(0) == 1, function, argument, "unit stride", v.stride(0));
}

}  // namespace SPECDEC_HOST_ISA

}  // namespace specdec
