#pragma once
//! \file rope_host.hpp
//! The host RoPE kernel behind rope_backend<host> (position/rope.hpp): the rotation of one token's
//! rows by precomputed cos/sin (rope_kernels.inl: 16-bit storage widened in bulk through the vector
//! layer, rotated in fp32; compiled once per run-time dispatch level, core/simd_level.hpp), and the
//! split of a call into token blocks over the thread pool. The entry point, its
//! validation and the backend seam stay in rope.hpp.

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "specdec/core/bfloat16.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/half.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/numeric.hpp"
#include "specdec/core/simd_level.hpp"
#include "specdec/core/thread_pool.hpp"
#include "specdec/core/detail/simd.hpp"

namespace specdec::detail {
inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

// Rows of up to this many rotated dims of 16-bit storage are rotated through a float stack buffer.
inline constexpr int rope_row_buffer = 512;

// Tokens per parallel work item; below min_parallel_elems elements the call stays on one thread
// (a pool wake-up costs more than rotating a few thousand values).
inline constexpr std::int64_t rope_tokens_per_task = 16;
inline constexpr std::int64_t rope_min_parallel_elems = 1 << 16;

template <class F>
void rope_for_tokens(const host& policy, std::int64_t tokens, std::int64_t elems_per_token, F&& body) {
  if (tokens * elems_per_token < rope_min_parallel_elems || policy.num_threads == 1) {
    body(std::int64_t{0}, tokens);
    return;
  }
  const std::int64_t tasks = (tokens + rope_tokens_per_task - 1) / rope_tokens_per_task;
  parallel_for(policy, tasks, [&](std::int64_t task) {
    const std::int64_t b = task * rope_tokens_per_task;
    body(b, std::min(tokens, b + rope_tokens_per_task));
  });
}

}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec::detail

// The rotation at this file's flags and, with run-time dispatch (core/simd_level.hpp), once per level.
#define SPECDEC_ISA_BODIES "specdec/position/detail/rope_kernels.inl"
#include "specdec/core/detail/isa_family.inl"
#undef SPECDEC_ISA_BODIES

namespace specdec::detail {
inline namespace SPECDEC_HOST_ISA {
//! rope_rotate_token (rope_kernels.inl) at the level the call dispatches to.
template <class T>
void rope_rotate_token_at_level(T* base, std::int64_t head_stride, std::int64_t heads, int rotary, bool rotate_half,
                                const float* cs, const float* sn) {
  SPECDEC_ISA_DISPATCH_CALL(rope_rotate_token(base, head_stride, heads, rotary, rotate_half, cs, sn));
}
}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec::detail
