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
#include "specdec/core/numeric.hpp"
#include "specdec/core/thread_pool.hpp"

namespace specdec::examples {

//! Dot product of n elements with 8 independent accumulators (lets the compiler vectorize without
//! -ffast-math); accumulates in accum_t<T>.
template <class T>
[[nodiscard]] inline accum_t<T> dot(const T* a, const T* b, int n) noexcept {
  using A = accum_t<T>;
  A s[8] = {};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) s[k] += static_cast<A>(a[i + k]) * static_cast<A>(b[i + k]);
  for (; i < n; ++i) s[0] += static_cast<A>(a[i]) * static_cast<A>(b[i]);
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

//! y[t, o] (= or +=) sum_i x[t, i] W[o, i] for t < m, o < out, i < in. Streams each weight row once
//! for all m tokens (what makes verifying a tree cheap when the model is memory-bound). O(m out in).
template <class T, bool Add>
void matmul_impl(std::span<const T> x, std::span<const T> W, std::span<T> y, int m, int out, int in) {
  constexpr int block = 32;
  const int blocks = (out + block - 1) / block;
  auto body = [&](std::int64_t b) {
    const int o0 = static_cast<int>(b) * block, o1 = std::min(out, o0 + block);
    for (int o = o0; o < o1; ++o) {
      const T* w = W.data() + static_cast<std::ptrdiff_t>(o) * in;
      for (int t = 0; t < m; ++t) {
        T& dst = y[static_cast<std::size_t>(t) * out + o];
        const auto d = dot(x.data() + static_cast<std::ptrdiff_t>(t) * in, w, in);
        if constexpr (Add) dst = static_cast<T>(static_cast<accum_t<T>>(dst) + d);
        else dst = static_cast<T>(d);
      }
    }
  };
  if (static_cast<std::int64_t>(m) * out * in < (1 << 16)) {
    for (int b = 0; b < blocks; ++b) body(b);
  } else {
    parallel_for(host{}, blocks, body);
  }
}
template <class T>
void matmul_nt(std::span<const T> x, std::span<const T> W, std::span<T> y, int m, int out, int in) {
  matmul_impl<T, false>(x, W, y, m, out, in);
}
template <class T>
void matmul_nt_add(std::span<const T> x, std::span<const T> W, std::span<T> y, int m, int out, int in) {
  matmul_impl<T, true>(x, W, y, m, out, in);
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

}  // namespace specdec::examples
