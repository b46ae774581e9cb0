#pragma once
//! \file dtype.hpp
//! Runtime element-type tags, used where an element type arrives at run time (DLPack) and in messages.

#include <cstdint>
#include <ostream>
#include <string_view>
#include <type_traits>

#include "specdec/core/bfloat16.hpp"
#include "specdec/core/half.hpp"

namespace specdec {

//! Element types the library knows by name.
enum class dtype : std::uint8_t { f32, f64, f16, bf16, i32, i64, u8, i8, u16, u32, u64, i16, boolean };

//! Short name of a dtype ("float32", "bfloat16", ...).
[[nodiscard]] constexpr std::string_view name(dtype t) noexcept {
  switch (t) {
    case dtype::f32: return "float32";
    case dtype::f64: return "float64";
    case dtype::f16: return "float16";
    case dtype::bf16: return "bfloat16";
    case dtype::i32: return "int32";
    case dtype::i64: return "int64";
    case dtype::u8: return "uint8";
    case dtype::i8: return "int8";
    case dtype::u16: return "uint16";
    case dtype::u32: return "uint32";
    case dtype::u64: return "uint64";
    case dtype::i16: return "int16";
    case dtype::boolean: return "bool";
  }
  return "unknown";
}

inline std::ostream& operator<<(std::ostream& os, dtype t) { return os << name(t); }

//! Size in bytes of one element of a dtype.
[[nodiscard]] constexpr int size_of(dtype t) noexcept {
  switch (t) {
    case dtype::f64: case dtype::i64: case dtype::u64: return 8;
    case dtype::f32: case dtype::i32: case dtype::u32: return 4;
    case dtype::f16: case dtype::bf16: case dtype::u16: case dtype::i16: return 2;
    case dtype::u8: case dtype::i8: case dtype::boolean: return 1;
  }
  return 0;
}

template <class T>
struct dtype_of;  // undefined for unsupported types: a compile error names the type
template <> struct dtype_of<float> { static constexpr dtype value = dtype::f32; };
template <> struct dtype_of<double> { static constexpr dtype value = dtype::f64; };
template <> struct dtype_of<half> { static constexpr dtype value = dtype::f16; };
template <> struct dtype_of<bfloat16> { static constexpr dtype value = dtype::bf16; };
template <> struct dtype_of<std::int32_t> { static constexpr dtype value = dtype::i32; };
template <> struct dtype_of<std::int64_t> { static constexpr dtype value = dtype::i64; };
template <> struct dtype_of<std::uint8_t> { static constexpr dtype value = dtype::u8; };
template <> struct dtype_of<std::int8_t> { static constexpr dtype value = dtype::i8; };
template <> struct dtype_of<std::uint16_t> { static constexpr dtype value = dtype::u16; };
template <> struct dtype_of<std::uint32_t> { static constexpr dtype value = dtype::u32; };
template <> struct dtype_of<std::uint64_t> { static constexpr dtype value = dtype::u64; };
template <> struct dtype_of<std::int16_t> { static constexpr dtype value = dtype::i16; };
template <> struct dtype_of<bool> { static constexpr dtype value = dtype::boolean; };
template <class T> struct dtype_of<const T> : dtype_of<T> {};

//! The dtype tag of T (cv-qualifiers ignored).
template <class T>
inline constexpr dtype dtype_v = dtype_of<std::remove_cv_t<T>>::value;

//! Storage types the attention primitives accept.
template <class T>
concept storage_float = std::is_same_v<std::remove_cv_t<T>, float> || std::is_same_v<std::remove_cv_t<T>, half> ||
                        std::is_same_v<std::remove_cv_t<T>, bfloat16> || std::is_same_v<std::remove_cv_t<T>, double>;

}  // namespace specdec
