// topk.inl: the selection of core/topk.hpp (its vectorized rejection scan and heap) and the NaN check
// its callers make, compiled at the including file's flags and once per run-time dispatch level
// (core/detail/isa_levels.inl). No include guard, no #include, no namespace.

//! From i, the start of the first whole 32-element block of v[i, n) that holds a value above thr,
//! or, when none does, the start of the tail (fewer than 32 elements left). The count of candidates
//! is an integer, so the block test vectorizes (compare + mask add) without -ffast-math, unlike a
//! float max or a bool reduction; NaN never counts (the test is a strict `>`).
template <class T>
[[gnu::noinline]] std::int32_t topk_skip_kernel(const T* v, std::int32_t i, std::int32_t n, T thr) noexcept {
  constexpr std::int32_t block = 32;
  for (; n - i >= block; i += block) {  // not i + block <= n: i + block wraps past INT32_MAX for n near it
    int hits = 0;
    for (std::int32_t j = 0; j < block; ++j) hits += v[i + j] > thr ? 1 : 0;
    if (hits != 0) return i;
  }
  return i;
}

//! True if some x[i], i < n, is NaN (NaN iff |bits| > bits(inf)): an unsigned max of |bits|, which
//! vectorizes (SSE4.1's pmaxud and up; baseline SSE2 has no unsigned max, hence the levels).
[[gnu::noinline]] inline bool any_nan_kernel(const float* x, std::size_t n) noexcept {
  std::uint32_t mx = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t b = std::bit_cast<std::uint32_t>(x[i]) & 0x7FFFFFFFu;
    mx = b > mx ? b : mx;
  }
  return mx > 0x7F800000u;
}

//! topk's selection (core/topk.hpp), after its checks: the k best of v[0, n) into heap[0, k), best
//! first. A size-k heap with the WORST kept entry at the front; elements are scanned in ascending
//! index order, so an element equal to the current worst kept value has a larger index and loses the
//! tie: the entry test is a strict `>`, which also rejects NaN. Blocks that hold no candidate are
//! skipped by topk_skip_kernel. 1 <= k <= n.
template <class T>
void topk_select_kernel(const T* v, std::int32_t n, std::int32_t k, topk_entry<T>* heap) {
  const auto cmp = [](const topk_entry<T>& a, const topk_entry<T>& b) {
    return topk_before(a.value, a.index, b.value, b.index);
  };
  topk_entry<T>* const end = heap + k;
  for (std::int32_t i = 0; i < k; ++i) heap[i] = {v[i], i};
  std::make_heap(heap, end, cmp);
  auto admit = [&](std::int32_t i) {
    std::pop_heap(heap, end, cmp);
    end[-1] = {v[i], i};
    std::push_heap(heap, end, cmp);
  };
  std::int32_t i = k;
  constexpr std::int32_t block = 32;
  while (i < n) {
    if (topk_isnan(heap[0].value)) {  // rare: any number beats a kept NaN
      if (!topk_isnan(v[i])) admit(i);
      ++i;
      continue;
    }
    const T thr = heap[0].value;
    if (n - i >= block) {  // (i + block would wrap for rows near INT32_MAX tokens)
      i = topk_skip_kernel(v, i, n, thr);
      if (n - i < block) continue;  // only the tail is left
      for (std::int32_t j = i; j < i + block; ++j)
        if (v[j] > heap[0].value) admit(j);
      i += block;
    } else {
      if (v[i] > thr) admit(i);
      ++i;
    }
  }
  std::sort_heap(heap, end, cmp);  // ascending in cmp = best first
}
