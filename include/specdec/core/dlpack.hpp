#pragma once
//! \file dlpack.hpp
//! Adapter from DLPack's DLTensor (the exchange format of PyTorch, JAX, CuPy, ...) to strided_view.
//!
//! Needs <dlpack/dlpack.h> (Debian libdlpack-dev; DLPack 0.6 or later, 1.x included). The adapter only
//! reads the DLTensor: no copy, no ownership transfer (a DLManagedTensor's deleter stays the
//! caller's business, and the view is valid as long as the producer keeps the memory alive).
//! The device's type sets the view's memory space; its device_id is not read: specdec::cuda runs on
//! the caller's current device, so make the tensor's device current (cudaSetDevice) before the call.
//! A DLPack 1.x DLManagedTensorVersioned is taken with its version and read-only flag checked; a bare
//! DLTensor carries no flag, so viewing it as non-const elements is the caller's promise to write it.

#include <dlpack/dlpack.h>

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>

#include "specdec/core/dtype.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/tensor.hpp"

//! 1 where the DLPack headers have a bool dtype (kDLBool): 0.8 and later. DLPack 1.x defines
//! DLPACK_MAJOR_VERSION and no longer DLPACK_VERSION (which then reads as 0 in #if).
#if defined(DLPACK_MAJOR_VERSION) || (defined(DLPACK_VERSION) && DLPACK_VERSION >= 80)
#define SPECDEC_DLPACK_HAS_BOOL 1
#else
#define SPECDEC_DLPACK_HAS_BOOL 0
#endif

namespace specdec {

//! The DLPack data type of specdec's dtype `t` (lanes = 1). bool maps to kDLBool where the DLPack
//! headers have it (SPECDEC_DLPACK_HAS_BOOL) and to 8-bit kDLUInt before that.
[[nodiscard]] constexpr DLDataType to_dlpack(dtype t) noexcept {
  const auto bits = static_cast<std::uint8_t>(8 * size_of(t));
  switch (t) {
    case dtype::f32: case dtype::f64: case dtype::f16: return DLDataType{kDLFloat, bits, 1};
    case dtype::bf16: return DLDataType{kDLBfloat, bits, 1};
    case dtype::i8: case dtype::i16: case dtype::i32: case dtype::i64: return DLDataType{kDLInt, bits, 1};
    case dtype::u8: case dtype::u16: case dtype::u32: case dtype::u64: return DLDataType{kDLUInt, bits, 1};
    case dtype::boolean:
#if SPECDEC_DLPACK_HAS_BOOL
      return DLDataType{kDLBool, 8, 1};
#else
      return DLDataType{kDLUInt, 8, 1};
#endif
  }
  return DLDataType{kDLOpaqueHandle, 0, 0};
}

//! The DLPack data type of element type T (cv-qualifiers ignored). Compile error for types specdec
//! does not know (see dtype_of).
template <class T>
[[nodiscard]] constexpr DLDataType dlpack_dtype() noexcept {
  return to_dlpack(dtype_v<T>);
}

//! "code 2 (float), bits 16, lanes 1" for messages.
[[nodiscard]] inline std::string describe_dlpack_dtype(DLDataType t) {
  std::ostringstream os;
  os << "code " << static_cast<int>(t.code);
  switch (t.code) {
    case kDLInt: os << " (int)"; break;
    case kDLUInt: os << " (uint)"; break;
    case kDLFloat: os << " (float)"; break;
    case kDLBfloat: os << " (bfloat)"; break;
    default: break;
  }
  os << ", bits " << static_cast<int>(t.bits) << ", lanes " << t.lanes;
  return os.str();
}

//! Name of a DLPack device type, for messages ("kDLCUDA", ...).
[[nodiscard]] constexpr std::string_view dlpack_device_name(int device_type) noexcept {
  switch (device_type) {
    case kDLCPU: return "kDLCPU";
    case kDLCUDA: return "kDLCUDA";
    case kDLCUDAHost: return "kDLCUDAHost";
    case kDLOpenCL: return "kDLOpenCL";
    case kDLVulkan: return "kDLVulkan";
    case kDLMetal: return "kDLMetal";
    case kDLVPI: return "kDLVPI";
    case kDLROCM: return "kDLROCM";
    case kDLROCMHost: return "kDLROCMHost";
    case kDLExtDev: return "kDLExtDev";
    case kDLCUDAManaged: return "kDLCUDAManaged";
    default: return "unknown device type";
  }
}

//! The memory space of a DLPack device: kDLCPU and kDLCUDAHost (pinned) -> host, kDLCUDA -> device,
//! kDLCUDAManaged -> managed. Any other device type throws invalid_argument naming it.
[[nodiscard]] inline memory_space memory_space_of(DLDevice device, std::string_view function = "specdec::memory_space_of",
                                                  std::string_view argument = "device") {
  switch (device.device_type) {
    case kDLCPU: case kDLCUDAHost: return memory_space::host;
    case kDLCUDA: return memory_space::device;
    case kDLCUDAManaged: return memory_space::managed;
    default: break;
  }
  std::ostringstream got;
  got << "device_type " << static_cast<int>(device.device_type) << " ("
      << dlpack_device_name(static_cast<int>(device.device_type)) << ")";
  throw_invalid_argument(function, argument, "a device of type kDLCPU, kDLCUDA, kDLCUDAHost or kDLCUDAManaged",
                         got.str());
}

//! Element types from_dlpack can view: any type specdec knows (dtype_of), except bool where the DLPack
//! headers have no bool dtype (!SPECDEC_DLPACK_HAS_BOOL: before 0.8, e.g. Debian's 0.6): there a bool view would have
//! to take an 8-bit uint tensor, whose bytes may hold any value, and loading a byte other than 0 or 1
//! as bool is undefined behaviour. View such a tensor as std::uint8_t instead.
template <class T>
concept dlpack_viewable = !std::is_same_v<std::remove_cv_t<T>, bool> || (SPECDEC_DLPACK_HAS_BOOL != 0);

//! Views a DLTensor as strided_view<T, Rank> after checking it: dtype (code, bits, lanes) equals T's,
//! ndim == Rank, the device type is supported (see memory_space_of), shape is non-negative, data is
//! non-null unless the tensor is empty, data + byte_offset does not wrap and is aligned for T. Null
//! strides mean compact row-major (DLPack's convention); otherwise strides are taken as given, in
//! elements, if every element's byte offset fits int64 (require_array).
//! Violations throw specdec::invalid_argument naming `function`, `argument`, the expectation and what
//! was found. O(Rank).
template <class T, int Rank>
  requires dlpack_viewable<T>
[[nodiscard]] strided_view<T, Rank> from_dlpack(const DLTensor& t, std::string_view function = "specdec::from_dlpack",
                                                std::string_view argument = "tensor") {
  const DLDataType want = dlpack_dtype<T>();
  if (t.dtype.code != want.code || t.dtype.bits != want.bits || t.dtype.lanes != want.lanes) {
    throw_invalid_argument(function, argument,
                           "dtype " + std::string(name(dtype_v<T>)) + " (" + describe_dlpack_dtype(want) + ")",
                           "dtype " + describe_dlpack_dtype(t.dtype));
  }
  require(t.ndim == Rank, function, argument, "ndim == " + std::to_string(Rank), t.ndim);
  const memory_space space = memory_space_of(t.device, function, argument);
  require(Rank == 0 || t.shape != nullptr, function, argument, "non-null shape", "nullptr");
  std::int64_t extents[Rank], strides[Rank];
  bool empty = false;
  for (int i = 0; i < Rank; ++i) {
    require(t.shape[i] >= 0, function, argument, "non-negative shape[" + std::to_string(i) + "]", t.shape[i]);
    extents[i] = t.shape[i];
    empty = empty || t.shape[i] == 0;
  }
  // Checked even when a zero extent empties the tensor (the default strides are then 0 outside it).
  detail::require_nonzero_product_fits(function, argument, extents);
  if (t.strides == nullptr) {
    detail::row_major_strides(extents, strides);
  } else {
    for (int i = 0; i < Rank; ++i) strides[i] = t.strides[i];
  }
  require(empty || t.data != nullptr, function, argument, "non-null data for a non-empty tensor", "nullptr");
  char* base = static_cast<char*>(const_cast<void*>(static_cast<const void*>(t.data)));
  if (base != nullptr) {
    const auto at = reinterpret_cast<std::uintptr_t>(base);
    if (!(t.byte_offset <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) &&
          at + t.byte_offset >= at)) [[unlikely]]
      throw_invalid_argument(function, argument, "data + byte_offset within the address space",
                             "byte_offset " + std::to_string(t.byte_offset));
    base += t.byte_offset;
  }
  require(reinterpret_cast<std::uintptr_t>(base) % alignof(T) == 0, function, argument,
          "data + byte_offset aligned to " + std::to_string(alignof(T)) + " bytes",
          "byte_offset " + std::to_string(t.byte_offset));
  const strided_view<T, Rank> view(reinterpret_cast<T*>(base), extents, strides, space);
  require_array(function, argument, view);  // strides whose reach overflows are refused here
  return view;
}

//! from_dlpack on the DLTensor inside a DLManagedTensor (ownership stays with the caller).
template <class T, int Rank>
  requires dlpack_viewable<T>
[[nodiscard]] strided_view<T, Rank> from_dlpack(const DLManagedTensor& t, std::string_view function = "specdec::from_dlpack",
                                                std::string_view argument = "tensor") {
  return from_dlpack<T, Rank>(t.dl_tensor, function, argument);
}

#if defined(DLPACK_MAJOR_VERSION)
//! from_dlpack on the DLTensor inside a DLPack 1.x DLManagedTensorVersioned (ownership stays with the
//! caller), after the checks only this struct allows: its major version is the one these headers
//! define (DLPack: a consumer may read no other field of a tensor of another major version; the caller
//! still owns it and calls its deleter), and a view of non-const elements needs a tensor without
//! DLPACK_FLAG_BITMASK_READ_ONLY (view a read-only tensor as const T).
template <class T, int Rank>
  requires dlpack_viewable<T>
[[nodiscard]] strided_view<T, Rank> from_dlpack(const DLManagedTensorVersioned& t,
                                                std::string_view function = "specdec::from_dlpack",
                                                std::string_view argument = "tensor") {
  require(t.version.major == DLPACK_MAJOR_VERSION, function, argument,
          "DLPack major version " + std::to_string(DLPACK_MAJOR_VERSION) + " (these headers')",
          "version.major " + std::to_string(t.version.major));
  if constexpr (!std::is_const_v<T>)
    require((t.flags & DLPACK_FLAG_BITMASK_READ_ONLY) == 0, function, argument,
            "a writable tensor for a view of non-const elements (view a read-only one as const T)",
            "flags with DLPACK_FLAG_BITMASK_READ_ONLY");
  return from_dlpack<T, Rank>(t.dl_tensor, function, argument);
}
#endif

}  // namespace specdec
