#pragma once
//! \file execution.hpp
//! Execution policies: the first argument of every primitive picks where it runs.
//!   specdec::host{.num_threads = 8}   runs on the calling thread plus a built-in pool
//!   specdec::cuda{.stream = s}         enqueues on a CUDA stream (needs the matching .cuh header)

#include <concepts>
#include <type_traits>

struct CUstream_st;  // cudaStream_t is CUstream_st*; declared here so host code needs no CUDA headers

namespace specdec {

//! Run on the host. num_threads = 0 uses every hardware thread; 1 runs on the calling thread only.
struct host {
  int num_threads = 0;
};

//! Run on a CUDA device, enqueued on `stream` (nullptr = legacy default stream). No host
//! synchronisation happens inside a primitive.
struct cuda {
  CUstream_st* stream = nullptr;
};

//! True for the execution policies specdec ships.
template <class P>
concept execution_policy = std::same_as<std::remove_cvref_t<P>, host> || std::same_as<std::remove_cvref_t<P>, cuda>;

//! True when Policy runs on a CUDA device: validation then follows the device rules (device-accessible
//! memory; device data is never read on the host).
template <class Policy>
inline constexpr bool on_device_v = std::is_same_v<std::remove_cvref_t<Policy>, cuda>;

namespace detail {
//! False for every type, but only once a template argument is known: the condition of a backend
//! seam's static_assert (attention/detail/backend.hpp, position/rope.hpp), which must fire only when
//! a primary template without a backend is instantiated.
template <class>
inline constexpr bool dependent_false_v = false;
}  // namespace detail

}  // namespace specdec

//! Declares the primary template of a backend seam: `template <class Policy> struct NAME` whose use
//! with a policy that has no specialisation in the translation unit stops the build with one
//! sentence naming the primitive and the .cuh header that holds its cuda backend (and no cascade:
//! its `run` accepts anything). Specialisations for host and cuda follow it. PRIMITIVE and HEADER
//! are string literals, e.g. SPECDEC_BACKEND_SEAM(rope_backend, "apply_rope", "specdec/position/rope.cuh").
#define SPECDEC_BACKEND_SEAM(NAME, PRIMITIVE, HEADER)                                                          \
  template <class Policy>                                                                                     \
  struct NAME {                                                                                               \
    static_assert(::specdec::detail::dependent_false_v<Policy>,                                               \
                  "specdec: no " PRIMITIVE " backend for this execution policy in this translation unit. For " \
                  "specdec::cuda include <" HEADER "> (or <specdec/specdec.cuh>) and compile the file with "  \
                  "nvcc.");                                                                                   \
    template <class... A>                                                                                     \
    static void run(const A&...) {}                                                                           \
  }

namespace specdec {

}  // namespace specdec
