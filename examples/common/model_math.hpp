#pragma once
//! \file model_math.hpp
//! Dense building blocks of the example models: RMSNorm and y = x W^T matmuls (attention is the
//! library's). Each output element is computed by the same code path whatever the number of tokens m,
//! so a 1-token step and an m-token tree step give bit-identical rows for identical inputs.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/execution.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/numeric.hpp"
#include "specdec/core/simd_level.hpp"
#include "specdec/core/thread_pool.hpp"

// The kernels at this file's own flags, where the library keeps its own (detail::...::lvl_native),
// and once per dispatch level (detail::SPECDEC_HOST_ISA::lvl_<level>), so a build with the
// compiler's default flags runs them with AVX2/AVX-512 where the CPU has it (core/simd_level.hpp).
// (A quoted include is looked up next to the file that includes it, core/detail/isa_family.inl and
// isa_levels.inl, first: this path works whatever include directories the including program has.)
#define SPECDEC_ISA_BODIES "../../../../examples/common/model_math.inl"
#include "specdec/core/detail/isa_family.inl"
#undef SPECDEC_ISA_BODIES

namespace specdec::examples {
// Entry points whose code depends on the file's flags and on its dispatch: in the ISA namespace
// (core/isa.hpp), like the library's, so files built differently keep separate copies.
inline namespace SPECDEC_HOST_ISA {

using ::specdec::detail::lvl_native::dot;

//! matmul_impl at the level the library's dispatch chooses (the file's own flags without dispatch).
template <class T, bool Add>
void matmul_dispatch(std::span<const T> x, std::span<const T> W, std::span<T> y, int m, int out, int in) {
  SPECDEC_ISA_DISPATCH_CALL(matmul_impl<T, Add>(x, W, y, m, out, in));
}
template <class T>
void matmul_nt(std::span<const T> x, std::span<const T> W, std::span<T> y, int m, int out, int in) {
  matmul_dispatch<T, false>(x, W, y, m, out, in);
}
template <class T>
void matmul_nt_add(std::span<const T> x, std::span<const T> W, std::span<T> y, int m, int out, int in) {
  matmul_dispatch<T, true>(x, W, y, m, out, in);
}

//! RMSNorm (Zhang & Sennrich 2019): y = x / sqrt(mean(x^2) + eps) * w, per token. O(m H).
template <class T>
void rms_norm(std::span<const T> x, std::span<const T> w, std::span<T> y, int m, int H, double eps) {
  using A = accum_t<T>;
  for (int t = 0; t < m; ++t) {
    const T* xr = x.data() + static_cast<std::ptrdiff_t>(t) * H;
    const A ms = dot(xr, xr, H) / static_cast<A>(H);
    const A inv = A(1) / std::sqrt(ms + static_cast<A>(eps));
    for (int i = 0; i < H; ++i)
      y[static_cast<std::size_t>(t) * H + i] = static_cast<T>(static_cast<A>(xr[i]) * inv * static_cast<A>(w[i]));
  }
}

}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec::examples
