// model_math.inl: the dense kernels of the example models (dot products and y = x W^T), compiled at
// the including file's flags by model_math.hpp and once per run-time dispatch level through the
// library's core/detail/isa_levels.inl, the way an engine can dispatch its own kernels with the
// same CPU choice as specdec's. No include guard, no #include, no namespace.

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
