// residual_kernels.inl: the SIMD bodies of draft/residual_heads.hpp, compiled at the including
// file's flags and once per run-time dispatch level (core/detail/isa_levels.inl, after the vector
// layer). No include guard, no #include, no namespace.

[[nodiscard]] SPECDEC_FORCEINLINE float residual_act(float z, residual_activation a) noexcept {
  return a == residual_activation::silu ? z / (1.0f + std::exp(-z)) : z;
}

//! RB input rows x JB weight rows of one head: y[r][j] = act(W[j] . x[r] + b[j]) + x[r][j]. RB * JB
//! = 8 independent fp32 accumulator chains (an FMA's latency is ~4 cycles and a core retires two per
//! cycle, so fewer chains leave the FMA units idle: one chain per weight row ran n = 1 at 24 GB/s of
//! fp16 weights on one core, 8 chains at 27-29); each widened weight vector serves RB rows and each
//! input vector JB weight rows.
template <int RB, int JB, class TW, class TB, class TX>
SPECDEC_FORCEINLINE void residual_block(const TW* w, std::int64_t ws, const TB* b, const TX* x, std::int64_t xs, int H,
                                        int j, float* y, std::int64_t ys, residual_activation act) noexcept {
  const int hv = H / vlanes * vlanes;
  vf16 acc[RB][JB];
  for (int r = 0; r < RB; ++r)
    for (int q = 0; q < JB; ++q) acc[r][q] = vf16{};
  for (int c = 0; c < hv; c += vlanes) {
    vf16 wv[JB];
    for (int q = 0; q < JB; ++q) wv[q] = vload_as_float(w + (j + q) * ws + c);
    for (int r = 0; r < RB; ++r) {
      const vf16 xv = vload_as_float(x + r * xs + c);
      for (int q = 0; q < JB; ++q) acc[r][q] += wv[q] * xv;
    }
  }
  for (int r = 0; r < RB; ++r) {
    const TX* xr = x + r * xs;
    for (int q = 0; q < JB; ++q) {
      const TW* wj = w + (j + q) * ws;
      float z = vhsum(acc[r][q]);
      for (int c = hv; c < H; ++c) z += to_float(wj[c]) * to_float(xr[c]);
      const float bj = b != nullptr ? to_float(b[j + q]) : 0.0f;
      y[r * ys + j + q] = residual_act(z + bj, act) + to_float(xr[j + q]);
    }
  }
}

//! One head over output columns [j0, j1) for all n input rows, in passes of up to 4 rows (RB x JB
//! blocks of residual_block: 4 x 2, 2 x 4 or 1 x 8; 3 rows run as 2 + 1). Tried and not kept:
//! passes over 512 columns of h so 4 fp32 rows stay in L1 (slower: the weight rows are then walked
//! in 2 KB pieces 16 KB apart).
template <class TW, class TB, class TX>
void residual_head_cols(const TW* w, std::int64_t ws, const TB* b, const TX* x, std::int64_t xs, int n, int H, int j0,
                        int j1, float* y, std::int64_t ys, residual_activation act) noexcept {
  auto pass = [&]<int RB, int JB>(int r) {
    int j = j0;
    for (; j1 - j >= JB; j += JB) residual_block<RB, JB>(w, ws, b, x + r * xs, xs, H, j, y + r * ys, ys, act);
    for (; j < j1; ++j) residual_block<RB, 1>(w, ws, b, x + r * xs, xs, H, j, y + r * ys, ys, act);
  };
  int r = 0;
  for (; n - r >= 4; r += 4) pass.template operator()<4, 2>(r);  // (r + 4 <= n overflowed for n near INT32_MAX)
  if (n - r >= 2) pass.template operator()<2, 4>(r), r += 2;
  if (r < n) pass.template operator()<1, 8>(r);
}

//! The chain's fp32 rows y [n, H] (row stride ys) into out's half / bfloat16 rows (row stride os).
template <class TO>
void residual_store_rows(const float* y, std::int64_t ys, TO* o, std::int64_t os, std::int64_t n,
                         std::int64_t H) noexcept {
  for (std::int64_t r = 0; r < n; ++r) narrow_row(y + r * ys, o + r * os, H);
}
