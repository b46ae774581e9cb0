// partial_kv_kernels.inl: the scoring loop of kv_importance (kv/partial_kv.hpp), compiled at the
// including file's flags and once per run-time dispatch level (core/detail/isa_levels.inl, after the
// vector layer). No include guard, no #include, no namespace.

//! TokenSwift Eq. 2 for tokens [i0, i1) of `request` and every kv head h: sd[h * sstride + i] =
//! qsum[h] . K_i, in fp32. 16 lane-wise partial sums, then their sum (a plain scalar reduction ran
//! at 0.8-2.5 GB/s on one core). float / half / bfloat16 rows go through the vector layer's 16-lane
//! vectors (half widened by F16C / AVX-512 where the level has it: element-wise widening kept fp16
//! at 1.9 GB/s); other element types (double) take scalar lanes.
template <class KT, class L>
void kv_importance_tokens(const L& cache, int request, int i0, int i1, int hkv, int d, const float* qsum, float* sd,
                          std::int64_t sstride) {
  const int dv = d / vlanes * vlanes;
  for (int i = i0; i < i1; ++i)
    for (int h = 0; h < hkv; ++h) {
      const auto* k = cache.k_row(request, i, h);
      const float* qs = qsum + static_cast<std::size_t>(h) * d;
      float acc = 0.0f;
      if constexpr (std::is_same_v<KT, float> || std::is_same_v<KT, half> || std::is_same_v<KT, bfloat16>) {
        vf16 part{};
        for (int c = 0; c < dv; c += vlanes) part += vload(qs + c) * vload_as_float(k + c);
        acc = vhsum(part);
      } else {
        float part[vlanes] = {};
        for (int c = 0; c < dv; c += vlanes)
          for (int l = 0; l < vlanes; ++l) part[l] += qs[c + l] * to_float(k[c + l]);
        for (int l = 0; l < vlanes; ++l) acc += part[l];
      }
      for (int c = dv; c < d; ++c) acc += qs[c] * to_float(k[c]);
      sd[h * sstride + i] = acc;
    }
}
