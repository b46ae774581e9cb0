// topk.inl: the vectorized rejection scan of core/topk.hpp, compiled at the including file's flags and
// once per run-time dispatch level (core/detail/isa_levels.inl). No include guard, no #include, no
// namespace.

//! From i, the start of the first whole 32-element block of v[i, n) that holds a value above thr,
//! or, when none does, the start of the tail (fewer than 32 elements left). The count of candidates
//! is an integer, so the block test vectorizes (compare + mask add) without -ffast-math, unlike a
//! float max or a bool reduction; NaN never counts (the test is a strict `>`).
template <class T>
[[gnu::noinline]] std::int32_t topk_skip_kernel(const T* v, std::int32_t i, std::int32_t n, T thr) noexcept {
  constexpr std::int32_t block = 32;
  for (; i + block <= n; i += block) {
    int hits = 0;
    for (std::int32_t j = 0; j < block; ++j) hits += v[i + j] > thr ? 1 : 0;
    if (hits != 0) return i;
  }
  return i;
}
