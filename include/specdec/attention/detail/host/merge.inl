// merge.inl: the body of merge.hpp (see there); no include guard, no #include, no namespace: compiled at
// the including file's flags by merge.hpp and once per dispatch level by kernels.hpp
// (core/detail/isa_levels.inl).

//! n-way log-sum-exp merge of normalised partials (LongSpec Appendix A, Proposition A.1, n-way),
//! with the rules of lse_merge_weights: LSE = log sum_p exp(LSE_p), O = sum_p exp(LSE_p - LSE) O_p;
//! parts with LSE = -inf are skipped (never 0 * NaN), every part -inf gives O = 0 and LSE = -inf,
//! a NaN LSE gives NaN. `part_row(p)` points at part p's d contiguous values (float, half, bfloat16).
template <class OutT, class RowFn>
SPECDEC_FORCEINLINE void merge_row(int nparts, const float* lse_parts, RowFn&& part_row, int d, OutT* out,
                                   float* lse_out) noexcept {
  lse_merge_weights w;
  for (int p = 0; p < nparts; ++p) w.observe(lse_parts[p]);
  if (w.empty()) {
    for (int c = 0; c < d; ++c) out[c] = from_float<OutT>(0.0f);
    *lse_out = w.lse();
    return;
  }
  for (int p = 0; p < nparts; ++p) w.add(lse_parts[p]);
  w.finish();
  for (int c0 = 0; c0 < d; c0 += vlanes) {
    vf16 acc{};
    for (int p = 0; p < nparts; ++p) {
      if (lse_parts[p] == -std::numeric_limits<float>::infinity()) continue;
      acc += w.weight(lse_parts[p]) * vload_as_float(part_row(p) + c0);
    }
    vstore_as(out + c0, acc);
  }
  *lse_out = w.lse();
}


//! Parts merge_row takes at once; more are merged in chunks of this many.
inline constexpr int merge_chunk_parts = 64;

//! Merges the parts.count parts of row (t, h) into out[0, d) (storage type) and *lse_out, for any
//! number of parts without allocation: up to merge_chunk_parts directly, more in chunks folded
//! into a running fp32 (O, LSE) by two-way merges (Proposition A.1 is associative). d is a multiple
//! of 16 and at most 256. Every input of the row is read before the row is written, so out and
//! lse_out may alias part 0 or part 1.
template <class OutT, class InT>
void merge_parts_row(const merge_parts<InT>& parts, std::int64_t t, std::int64_t h, int d, OutT* out,
                     float* lse_out) noexcept {
  float lse_buf[merge_chunk_parts];
  const auto rc = parts.at(t, h);
  if (parts.count <= merge_chunk_parts) {
    for (int q = 0; q < parts.count; ++q) lse_buf[q] = rc.lse(q);
    merge_row<OutT>(parts.count, lse_buf, [&](int q) { return rc.row(q); }, d, out, lse_out);
    return;
  }
  alignas(64) float acc[256], chunk[256];
  float acc_lse = -std::numeric_limits<float>::infinity();
  // q0 advances by the chunk it merged, never past parts.count: a stride of merge_chunk_parts
  // overflowed int for counts within 63 of INT32_MAX (a stride-0 part dimension allows any count).
  for (int q0 = 0, cnt = 0; q0 < parts.count; q0 += cnt) {
    cnt = std::min(merge_chunk_parts, parts.count - q0);
    for (int q = 0; q < cnt; ++q) lse_buf[q] = rc.lse(q0 + q);
    float chunk_lse;
    merge_row<float>(cnt, lse_buf, [&](int q) { return rc.row(q0 + q); }, d, q0 == 0 ? acc : chunk,
                     q0 == 0 ? &acc_lse : &chunk_lse);
    if (q0 == 0) continue;
    const float two[2] = {acc_lse, chunk_lse};
    merge_row<float>(2, two, [&](int q) -> const float* { return q == 0 ? acc : chunk; }, d, acc, &acc_lse);
  }
  for (int c = 0; c < d; c += vlanes) vstore_as(out + c, vload(acc + c));
  *lse_out = acc_lse;
}

//! Every head of token t of the public lse_merge (attention/lse_merge.hpp): P is its
//! lse_merge_params (in: merge_parts; out: merge_out; heads, head_dim).
template <class P>
void merge_parts_heads(const P& p, std::int64_t t) noexcept {
  for (int h = 0; h < p.heads; ++h) merge_parts_row(p.in, t, h, p.head_dim, p.out.row(t, h), p.out.lse_at(t, h));
}
