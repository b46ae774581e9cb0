// draft_rows.inl: the float log-softmax of draft/detail/draft_rows.hpp, compiled at the including
// file's flags and once per run-time dispatch level (core/detail/isa_levels.inl, after the vector
// layer). No include guard, no #include, no namespace.

//! out[i] = row[i] - (max + log sum_j exp(row[j] - max)) for i < n, given the row's maximum mx
//! (log_softmax takes it from the samplers' checked scan, so the row is read once for both). A row
//! with nothing finite to normalise by (mx -inf) is copied as it is.
inline void log_softmax_kernel(const float* row, float* out, std::size_t n, float mx) noexcept {
  const std::size_t nv = n / vlanes * vlanes;
  if (!(mx > -std::numeric_limits<float>::infinity())) {
    for (std::size_t i = 0; i < n; ++i) out[i] = row[i];
    return;
  }
  constexpr float log2e = 1.4426950408889634f;
  const vf16 vmx = vbroadcast(mx);
  double sum = 0;
  for (std::size_t i = 0; i < nv; i += vlanes) sum += vhsum(vexp2((vload(row + i) - vmx) * log2e));
  for (std::size_t i = nv; i < n; ++i) sum += std::exp(static_cast<double>(row[i]) - mx);
  const float lse = static_cast<float>(static_cast<double>(mx) + std::log(sum));
  const vf16 vl = vbroadcast(lse);
  for (std::size_t i = 0; i < nv; i += vlanes) vstore(out + i, vload(row + i) - vl);
  for (std::size_t i = nv; i < n; ++i) out[i] = row[i] - lse;
}
