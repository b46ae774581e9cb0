// rope_kernels.inl: the host RoPE rotation of position/detail/rope_host.hpp, compiled at the including
// file's flags and once per run-time dispatch level (core/detail/isa_levels.inl, after the vector
// layer, whose widen_row_any / narrow_row convert 16-bit rows). No include guard, no #include, no
// namespace.

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
          float* y = buf + half_r;
          for (int i = 0; i < half_r; ++i) {
            const float a = buf[i], b = y[i];
            buf[i] = a * cs[i] - b * sn[i];
            y[i] = b * cs[i] + a * sn[i];
          }
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
