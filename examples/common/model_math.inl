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

//! out[t * NO + o] = sum_i x[t][i] w[o, i] for NT tokens (rows x[t]) and NO weight rows (of w,
//! `stride` elements apart), i < n. Every pair is summed in one fixed order, whatever NT and NO: for
//! float, 16-lane partial sums over the whole 16-element blocks (the vector layer's FMA), reduced
//! with vhsum's pairing, then the tail in order; other types take dot(). So a tile's sums equal a
//! lone row's to the bit. For float the NT x NO sums are independent FMA chains, and each weight load
//! feeds NT tokens: one chain per output, as dot() alone gives, waits on the FMA latency. A tile of
//! 16 sums is reduced by one vhsum16, whose lane k is vhsum of input k bit for bit (with AVX-512 30
//! shuffles and 15 adds for the 16, against 16 separate halvings); smaller tiles by one vhsum each
//! (padded to 16, 8 sums measured slower that way).
template <class T, int NT, int NO>
inline void dot_tile(const T* const (&x)[NT], const T* w, std::ptrdiff_t stride, int n, accum_t<T>* out) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    static_assert(NT * NO <= 16, "dot_tile: at most 16 sums per tile (one vhsum16)");
    vf16 acc[NT][NO];
    SPECDEC_UNROLL for (int t = 0; t < NT; ++t)
      SPECDEC_UNROLL for (int o = 0; o < NO; ++o) acc[t][o] = vbroadcast(0.0f);
    int i = 0;
    for (; i + vlanes <= n; i += vlanes)
      SPECDEC_UNROLL for (int t = 0; t < NT; ++t) {
        const vf16 xv = vload(x[t] + i);
        SPECDEC_UNROLL for (int o = 0; o < NO; ++o) acc[t][o] = xv * vload(w + o * stride + i) + acc[t][o];
      }
    float sums[NT * NO];
    if constexpr (NT * NO == 16) {
      vf16 all[16];
      SPECDEC_UNROLL for (int k = 0; k < 16; ++k) all[k] = acc[k / NO][k % NO];
      alignas(64) float lanes[16];
      vstore(lanes, vhsum16(all));
      SPECDEC_UNROLL for (int k = 0; k < NT * NO; ++k) sums[k] = lanes[k];
    } else {
      SPECDEC_UNROLL for (int k = 0; k < NT * NO; ++k) sums[k] = vhsum(acc[k / NO][k % NO]);
    }
    SPECDEC_UNROLL for (int t = 0; t < NT; ++t)
      SPECDEC_UNROLL for (int o = 0; o < NO; ++o) {
        float s = sums[t * NO + o];
        for (int j = i; j < n; ++j) s += x[t][j] * w[o * stride + j];
        out[t * NO + o] = s;
      }
  } else {
    for (int t = 0; t < NT; ++t)
      for (int o = 0; o < NO; ++o) out[t * NO + o] = dot(x[t], w + o * stride, n);
  }
}

//! y[t, o] (= or +=) sum_i x[t, i] W[o, i] for t < m, o < out, i < in. Streams each weight row once
//! for all m tokens (what makes verifying a tree cheap when the model is memory-bound), in tiles of
//! tokens x weight rows (dot_tile) sized to the level's vector registers; each element is dot_tile's
//! fixed-order sum, so the result does not depend on m or on the tiling. O(m out in).
template <class T, bool Add>
void matmul_impl(std::span<const T> x, std::span<const T> W, std::span<T> y, int m, int out, int in) {
  using A = accum_t<T>;
  constexpr int block = 32;
  // 32 vector registers (AVX-512): 8 sums for one token; for more, 4 x 4 tiles while four tokens are
  // left (a weight load feeds four tokens, 8 loads per 16 FMAs, and one vhsum16 reduces the 16 sums),
  // three last tokens as a 4 x 4 tile with the third token twice, then 2 x 4 and 1 x 4. 16 registers
  // (AVX2 and below): half that, and no 4-token tiles. (BM_demo_target_matmuls, benchmarks/RESULTS.md
  // session 55: on a 2-core Zen 5 four tokens took less time than 2 x 4 + 1 x 4 tiles took for three;
  // 3 x 4 tiles, and 2 x 8 / 1 x 16 ones with a full or padded vhsum16, were no faster than these.)
  constexpr int wide = vregs16 >= 32 ? 8 : 4;
  constexpr bool quad = vregs16 >= 32;
  const int blocks = (out + block - 1) / block;
  // Tokens t0 .. t0 + nt - 1 (the last `pad` of them a copy of the one before, their sums dropped)
  // against weight rows o0 .. o0 + no - 1.
  auto tile = [&]<int nt, int no>(int t0, int o0, int pad = 0) {
    const T* rows[nt];
    for (int t = 0; t < nt; ++t) rows[t] = x.data() + static_cast<std::ptrdiff_t>(t0 + std::min(t, nt - 1 - pad)) * in;
    A d[nt * no];
    dot_tile<T, nt, no>(rows, W.data() + static_cast<std::ptrdiff_t>(o0) * in, in, in, d);
    for (int t = 0; t < nt - pad; ++t)
      for (int o = 0; o < no; ++o) {
        T& dst = y[static_cast<std::size_t>(t0 + t) * out + o0 + o];
        if constexpr (Add) dst = static_cast<T>(static_cast<A>(dst) + d[t * no + o]);
        else dst = static_cast<T>(d[t * no + o]);
      }
  };
  auto body = [&](std::int64_t b) {
    const int o0 = static_cast<int>(b) * block, o1 = std::min(out, o0 + block);
    int o = o0;
    if (m == 1)
      for (; o + wide <= o1; o += wide) tile.template operator()<1, wide>(0, o);
    for (; o + wide / 2 <= o1; o += wide / 2) {
      int t = 0;
      if constexpr (quad) {
        for (; t + 4 <= m; t += 4) tile.template operator()<4, wide / 2>(t, o);
        if (m - t == 3) {  // as four: costs less than 2 + 1
          tile.template operator()<4, wide / 2>(t, o, 1);
          t = m;
        }
      }
      for (; t + 2 <= m; t += 2) tile.template operator()<2, wide / 2>(t, o);
      if (t < m) tile.template operator()<1, wide / 2>(t, o);
    }
    for (; o < o1; ++o)
      for (int t = 0; t < m; ++t) tile.template operator()<1, 1>(t, o);
  };
  if (static_cast<std::int64_t>(m) * out * in < (1 << 16)) {
    for (int b = 0; b < blocks; ++b) body(b);
  } else {
    parallel_for(host{}, blocks, body);
  }
}
