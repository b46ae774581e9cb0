// rope_kernels.inl: the host RoPE rotation of position/detail/rope_host.hpp, compiled at the including
// file's flags and once per run-time dispatch level (core/detail/isa_levels.inl, after the vector
// layer, whose widen_row_any / narrow_row convert 16-bit rows). No include guard, no #include, no
// namespace.

// x[i], y[i] = x[i] cos[i] - y[i] sin[i], y[i] cos[i] + x[i] sin[i] for i < n (the rotate_half
// pairs of one fp32 row), 16 pairs per vector, then the tail. Written in the vector layer rather
// than left to the auto-vectorizer, whose -O2 cost model refuses a loop that needs an epilogue:
// at -O2 the scalar loop ran 2-13x slower than at -O3 (RESULTS.md, session 35). The same float
// operations per pair as the scalar loop, so the same results.
SPECDEC_FORCEINLINE void rope_rotate_half_f32(float* x, float* y, const float* cs, const float* sn, int n) noexcept {
  int i = 0;
  for (; i + vlanes <= n; i += vlanes) {
    const vf16 a = vload(x + i), b = vload(y + i), c = vload(cs + i), s = vload(sn + i);
    // The first product of each line computed first, as in the scalar expression: with FMA
    // contraction (GCC's default), a * c - b * s becomes fma(a, c, -(b * s)) either way only then
    // (the vector operators' arguments may be evaluated right to left).
    const vf16 ac = a * c, bc = b * c;
    vstore(x + i, ac - b * s);
    vstore(y + i, bc + a * s);
  }
  for (; i < n; ++i) {
    const float a = x[i], b = y[i];
    x[i] = a * cs[i] - b * sn[i];
    y[i] = b * cs[i] + a * sn[i];
  }
}

// Rotates one token's rows (all heads) by the given per-pair cos/sin (float, R/2 each); pairs
// (i, i + R/2) when rotate_half (rope_style::rotate_half), else (2i, 2i + 1) (interleaved).
template <class T>
void rope_rotate_token(T* base, std::int64_t head_stride, std::int64_t heads, int rotary, bool rotate_half,
                       const float* cs, const float* sn) {
  using A = accum_t<T>;
  const int half_r = rotary / 2;
  if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
    // 16-bit storage: widen the rotated part of each row in bulk, rotate in float (vectorizes),
    // narrow back. Same float operations and roundings as the scalar loop below, so the same results.
    if (rotary <= rope_row_buffer) {
      float buf[rope_row_buffer];
      for (std::int64_t h = 0; h < heads; ++h) {
        T* x = base + h * head_stride;
        widen_row_any(x, buf, rotary);
        if (rotate_half) {
          rope_rotate_half_f32(buf, buf + half_r, cs, sn, half_r);
        } else {
          for (int i = 0; i < half_r; ++i) {
            const float a = buf[2 * i], b = buf[2 * i + 1];
            buf[2 * i] = a * cs[i] - b * sn[i];
            buf[2 * i + 1] = b * cs[i] + a * sn[i];
          }
        }
        narrow_row(buf, x, rotary);
      }
      return;
    }
  }
  for (std::int64_t h = 0; h < heads; ++h) {
    T* x = base + h * head_stride;
    if constexpr (std::is_same_v<T, float>) {
      if (rotate_half) {
        rope_rotate_half_f32(x, x + half_r, cs, sn, half_r);
        continue;
      }
    }
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
