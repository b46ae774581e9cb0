#pragma once
//! \file rope_host.hpp
//! The host RoPE kernel behind rope_backend<host> (position/rope.hpp): the rotation of one token's
//! rows by precomputed cos/sin (16-bit storage widened in bulk through row_convert.hpp, rotated in
//! fp32) and the split of a call into token blocks over the thread pool. The entry point, its
//! validation and the backend seam stay in rope.hpp.

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "specdec/core/bfloat16.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/half.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/numeric.hpp"
#include "specdec/core/thread_pool.hpp"
#include "specdec/position/detail/row_convert.hpp"

namespace specdec::detail {
inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

// Rows of up to this many rotated dims of 16-bit storage are rotated through a float stack buffer.
inline constexpr int rope_row_buffer = 512;

// Rotates one token's rows (all heads) by the given per-pair cos/sin (float, R/2 each); pairs
// (i, i + R/2) when rotate_half (rope_style::rotate_half), else (2i, 2i + 1) (interleaved).
template <class T>
void rope_rotate_token(T* base, std::int64_t head_stride, std::int64_t heads, int rotary, bool rotate_half,
                       const float* cs, const float* sn) {
  using A = accum_t<T>;
  const int half_r = rotary / 2;
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    // 16-bit storage: widen the rotated part of each row in bulk, rotate in float (vectorizes),
    // narrow back. Same float operations as the scalar loop below, so the same results.
    if (rotary <= rope_row_buffer) {
      float buf[rope_row_buffer];
      for (std::int64_t h = 0; h < heads; ++h) {
        T* x = base + h * head_stride;
        load_row_as_float(x, buf, rotary);
        if (rotate_half) {
          float* y = buf + half_r;
          for (int i = 0; i < half_r; ++i) {
            const float a = buf[i], b = y[i];
            buf[i] = a * cs[i] - b * sn[i];
            y[i] = b * cs[i] + a * sn[i];
          }
        } else {
          for (int i = 0; i < half_r; ++i) {
            const float a = buf[2 * i], b = buf[2 * i + 1];
            buf[2 * i] = a * cs[i] - b * sn[i];
            buf[2 * i + 1] = b * cs[i] + a * sn[i];
          }
        }
        store_row_from_float(buf, x, rotary);
      }
      return;
    }
  }
  for (std::int64_t h = 0; h < heads; ++h) {
    T* x = base + h * head_stride;
    if (rotate_half) {
      T* y = x + half_r;
      for (int i = 0; i < half_r; ++i) {
        const A a = static_cast<A>(to_float(x[i])), b = static_cast<A>(to_float(y[i]));
        if constexpr (std::is_same_v<std::remove_cv_t<T>, double>) {
          x[i] = a * cs[i] - b * sn[i];
          y[i] = b * cs[i] + a * sn[i];
        } else {
          x[i] = from_float<T>(a * cs[i] - b * sn[i]);
          y[i] = from_float<T>(b * cs[i] + a * sn[i]);
        }
      }
    } else {
      for (int i = 0; i < half_r; ++i) {
        const A a = static_cast<A>(to_float(x[2 * i])), b = static_cast<A>(to_float(x[2 * i + 1]));
        if constexpr (std::is_same_v<std::remove_cv_t<T>, double>) {
          x[2 * i] = a * cs[i] - b * sn[i];
          x[2 * i + 1] = b * cs[i] + a * sn[i];
        } else {
          x[2 * i] = from_float<T>(a * cs[i] - b * sn[i]);
          x[2 * i + 1] = from_float<T>(b * cs[i] + a * sn[i]);
        }
      }
    }
  }
}

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
