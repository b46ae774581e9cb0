// vec.inl: the row kernels of sampling/detail/vec.hpp (see there), compiled at the including file's
// flags and once per run-time dispatch level (core/detail/isa_levels.inl). The reductions and the
// elementwise row steps are written in the vector layer (core/detail/simd.inl: 16-lane vectors, one
// partial result per lane): GCC 12's -O2 cost model (what the examples and most distributions build
// with) left their plain loops scalar, 1.5-3.8x slower than -O3 (benchmarks/RESULTS.md, "The sampling
// rows at -O2"). The rest are plain loops that the compiler vectorizes at both levels. Every kernel
// computes what its scalar form does, lane for lane, so the bits do not depend on the vector width or
// the optimization level. fast_exp differs between levels: its multiply-adds are fused (explicitly)
// at the levels with FMA instructions and rounded twice at the portable level without them (see
// fast_exp_fused in vec.hpp), so a weight can differ in its last bit there. No include guard, no
// #include, no namespace.
// The *_kernel functions are reached through vec.hpp's dispatching entry points of the same name
// without the suffix.

//! exp(x) for x <= 0 (x = logit - max); returns exactly 0 for x < -87.3 (including -inf), so masked
//! tokens get exactly zero weight. Rounds x*log2(e) to the nearest integer n with the 1.5*2^23
//! magic-number trick (valid for |x log2 e| < 2^22 and vectorizable, unlike floor), reduces
//! r = x - n ln 2 in two parts (Cody-Waite), evaluates Cephes' degree-5 polynomial and scales by 2^n
//! through the exponent bits. Not valid for x > 0 or NaN (callers guarantee x <= 0).
inline float fast_exp(float x) noexcept {
  // Each a * b + c below is one fused multiply-add where the level has them (SPECDEC_SIMD_FMA),
  // written as such, so the bits do not depend on the compiler's contraction or optimization level
  // (they are fast_exp_fused's, vec.hpp, which the CUDA kernels use); two roundings elsewhere.
#if SPECDEC_SIMD_FMA
#define SPECDEC_EXP_MAD(a, b, c) __builtin_fmaf(a, b, c)
#else
#define SPECDEC_EXP_MAD(a, b, c) ((a) * (b) + (c))
#endif
  const float xc = x < -87.3f ? -87.3f : x;
  const float t = SPECDEC_EXP_MAD(xc, 1.44269504088896341f, 12582912.0f);  // 1.5 * 2^23: t's low mantissa bits = round(.)
  const float n = t - 12582912.0f;
  float r = SPECDEC_EXP_MAD(-n, 0.693359375f, xc);
  r = SPECDEC_EXP_MAD(n, 2.12194440e-4f, r);
  const float r2 = r * r;
  float p = SPECDEC_EXP_MAD(1.9875691500e-4f, r, 1.3981999507e-3f);
  p = SPECDEC_EXP_MAD(p, r, 8.3334519073e-3f);
  p = SPECDEC_EXP_MAD(p, r, 4.1665795894e-2f);
  p = SPECDEC_EXP_MAD(p, r, 1.6666665459e-1f);
  p = SPECDEC_EXP_MAD(p, r, 5.0000001201e-1f);
  const float y = SPECDEC_EXP_MAD(p, r2, r) + 1.0f;
#undef SPECDEC_EXP_MAD
  const std::int32_t e = (std::bit_cast<std::int32_t>(t) - 0x4B400000) + 127;  // n + bias, in [1, 127]
  const float scale = std::bit_cast<float>(e << 23);
  return x < -87.3f ? 0.0f : y * scale;
}

//! True if v is an admissible probability / weight: finite and >= 0 (NaN, +-inf and negatives are not).
inline bool admissible_prob(float v) noexcept { return v >= 0.0f && v <= std::numeric_limits<float>::max(); }

// The policy checks below are out of line: inlined into a large caller, GCC sometimes left their lane
// loops scalar (sample_from_probs took 150 us for 128K tokens where the sum alone takes 7). Out of line
// and in the vector layer they are vector code at -O2 and -O3 alike (their flags are vector masks: a
// bool flag or a short-circuit && had kept the earlier plain loops scalar). Measured at V = 128K, scan_logits: 6 us with AVX-512, 9 us
// with AVX2, 26-35 us on baseline x86-64 (the max pass and the NaN scan it replaces took 60-70 us).

//! first_index_of's body: index of the first element equal to v, or -1. Blocks of 256 (16 vectors)
//! are tested with one OR of their compare masks, then the hit block is scanned.
[[gnu::noinline]] inline std::int64_t first_index_of_kernel(const float* x, std::size_t n, float v) noexcept {
  constexpr std::size_t block = 16 * vlanes;
  const vf16 vv = vbroadcast(v);
  std::size_t i = 0;
  for (; i + block <= n; i += block) {
    vi16 hit = vload(x + i) == vv;
    for (std::size_t j = vlanes; j < block; j += vlanes) hit = hit | (vload(x + i + j) == vv);
    if (vany(hit)) break;
  }
  for (; i < n; ++i)
    if (x[i] == v) return static_cast<std::int64_t>(i);
  return -1;
}

//! scan_logits' body: `lanes` independent max / min / flag chains (one vector lane each; the vector
//! layer, so -O2 vectorizes it as -O3 does), combined in lane order (which zero's sign a max or min
//! of +-0 keeps is fixed), then the tail.
[[gnu::noinline]] inline logit_scan scan_logits_kernel(const float* x, std::size_t n) noexcept {
  static_assert(lanes == vlanes, "scan_logits_kernel: one chain per vector lane");
  constexpr float inf = std::numeric_limits<float>::infinity();
  const vf16 pinf = vbroadcast(inf), ninf = vbroadcast(-inf);
  vf16 mx = ninf, mn = pinf;
  vi16 bad{};
  const std::size_t body = n - n % lanes;
  for (std::size_t i = 0; i < body; i += lanes) {
    const vf16 v = vload(x + i);
    mx = vmax(v, mx);
    mn = vmin(vselect(v > ninf, v, pinf), mn);  // -inf takes no part in the minimum
    bad = bad | (v != v) | (v == pinf);  // NaN or +inf
  }
  float mxs[lanes], mns[lanes];
  vstore(mxs, mx);
  vstore(mns, mn);
  logit_scan r{-inf, inf, body > 0 && vany(bad)};
  for (int j = 0; j < lanes; ++j) {
    r.max = mxs[j] > r.max ? mxs[j] : r.max;
    r.min = mns[j] < r.min ? mns[j] : r.min;
  }
  for (std::size_t i = body; i < n; ++i) {
    const float v = x[i];
    r.max = v > r.max ? v : r.max;
    r.min = v > -inf && v < r.min ? v : r.min;
    r.bad |= !(v < inf);
  }
  return r;
}

//! any_inadmissible_prob's body: true if some x[i], i in [0, n), is not an admissible probability
//! (a vector of flags: negative, above the largest finite float, or NaN; then the tail).
[[gnu::noinline]] inline bool any_inadmissible_prob_kernel(const float* x, std::size_t n) noexcept {
  const vf16 zero = vbroadcast(0.0f), fmax = vbroadcast(std::numeric_limits<float>::max());
  vi16 bad{};
  const std::size_t body = n - n % vlanes;
  for (std::size_t i = 0; i < body; i += vlanes) {
    const vf16 v = vload(x + i);
    bad = bad | (v < zero) | (v > fmax) | (v != v);
  }
  bool r = body > 0 && vany(bad);
  for (std::size_t i = body; i < n; ++i) r |= !admissible_prob(x[i]);
  return r;
}

//! lane_sum's body: `lanes` fixed partial sums (lane j: x[j], x[j + lanes], ... in order), then a
//! sum of the tail and the lanes in lane order (deterministic). The partial sums are native double
//! vectors of half a float vector's lanes each (2 with AVX-512, 4 with AVX2, 8 with SSE or NEON), so
//! the loop is vector code at -O2 as at -O3; each lane adds exactly what the scalar loop would.
template <class T>
inline double lane_sum_kernel(const T* x, std::size_t n) noexcept {
  static_assert(lanes == vlanes, "lane_sum_kernel: one partial sum per vector lane");
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "lane_sum_kernel: float or double rows");
  constexpr int per = native_lanes / 2;  // doubles per native-width vector
  typedef double nvd __attribute__((vector_size(per * sizeof(double))));
  constexpr int parts = vlanes / per;
  nvd acc[parts] = {};
  const std::size_t body = n - n % lanes;
  for (std::size_t i = 0; i < body; i += lanes)
    SPECDEC_UNROLL for (int k = 0; k < parts; ++k) {
      // per consecutive elements as doubles, element by element: GCC 12 makes that one widening
      // convert (its __builtin_convertvector of a float vector to doubles went through the stack).
      // A plain loop, not a pack expansion: nvcc's front end, which also compiles this file in CUDA
      // translation units, failed on a lambda with a template parameter pack here (internal error).
      double t[per];
      SPECDEC_UNROLL for (int e = 0; e < per; ++e) t[e] = static_cast<double>(x[i + k * per + e]);
      nvd v;
      std::memcpy(&v, t, sizeof v);
      acc[k] += v;
    }
  double s = 0.0;
  for (std::size_t i = body; i < n; ++i) s += x[i];
  for (int j = 0; j < lanes; ++j) s += acc[j / per][j % per];
  return s;
}

//! out[i] = fast_exp(x[i] - m) for i in [0, n) (pure elementwise: vectorizes).
inline void exp_shifted(const float* __restrict x, std::size_t n, float m, float* __restrict out) noexcept {
  for (std::size_t i = 0; i < n; ++i) out[i] = fast_exp(x[i] - m);
}

//! exp_sum's body: out[i] = fast_exp(x[i] - m) (out may be null: sum only); returns the sum in
//! double, computed chunk by chunk (256 tokens, lane_sum each, chunk sums added in order): fixed
//! order for a given n. out == x (in place) goes through the local chunk (exp_shifted's arguments may
//! not alias), with the same bits. Precondition: m >= every x[i]; out, when not x, disjoint from x. Out of line for the reason given at scan_logits: inlined into a
//! caller that also inlines the samplers, its exp loop stayed scalar (logits_to_probs at 360 us for
//! 128K tokens instead of 45-80 with AVX-512).
[[gnu::noinline]] inline double exp_sum_kernel(const float* x, std::size_t n, float m, float* out) noexcept {
  constexpr std::size_t chunk = 256;
  float local[chunk];
  double s = 0.0;
  for (std::size_t lo = 0; lo < n; lo += chunk) {
    const std::size_t len = n - lo < chunk ? n - lo : chunk;
    float* dst = out != nullptr && out != x ? out + lo : local;
    exp_shifted(x + lo, len, m, dst);
    s += lane_sum_kernel(dst, len);
    if (out == x)
      for (std::size_t i = 0; i < len; ++i) out[lo + i] = local[i];
  }
  return s;
}

// The elementwise steps of logits processing (sampling/logits_processor.hpp), out of line so they
// vectorize for the dispatched level rather than the caller's flags.

//! x[i] *= s for i in [0, n) (temperature: l * (1/t)).
[[gnu::noinline]] inline void scale_kernel(float* x, std::size_t n, float s) noexcept {
  std::size_t i = 0;
  for (; i + vlanes <= n; i += vlanes) vstore(x + i, vload(x + i) * s);
  for (; i < n; ++i) x[i] *= s;
}

//! x[i] = (x[i] - m) / t for i in [0, n) (temperature on the shifted row).
[[gnu::noinline]] inline void shift_divide_kernel(float* x, std::size_t n, float m, float t) noexcept {
  std::size_t i = 0;
  for (; i + vlanes <= n; i += vlanes) vstore(x + i, (vload(x + i) - m) / t);
  for (; i < n; ++i) x[i] = (x[i] - m) / t;
}

//! x[i] = x[i] >= cut ? x[i] : -inf for i in [0, n) (min-p on logits).
[[gnu::noinline]] inline void mask_below_kernel(float* x, std::size_t n, float cut) noexcept {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  const vf16 vcut = vbroadcast(cut), vninf = vbroadcast(ninf);
  std::size_t i = 0;
  for (; i + vlanes <= n; i += vlanes) {
    const vf16 v = vload(x + i);
    vstore(x + i, vselect((v > vcut) | (v == vcut), v, vninf));  // x >= cut (NaN: false)
  }
  for (; i < n; ++i) x[i] = x[i] >= cut ? x[i] : ninf;
}

//! sum over i with w[i] > 0 of w[i] * (x[i] - m), in double (eta sampling's entropy term), in
//! exp_sum_kernel's order: chunks of 256 tokens, in each `lanes` partial sums over its whole lanes,
//! then its tail and the lanes in order; the chunk sums added in order. Deterministic for a given n,
//! and a block of the CUDA backend adds the chunks in parallel (logits_processor.cuh, block_eta).
[[gnu::noinline]] inline double weighted_shift_sum_kernel(const float* w, const float* x, std::size_t n,
                                                          float m) noexcept {
  constexpr std::size_t chunk = 256;
  double local[chunk];
  double s = 0.0;
  for (std::size_t lo = 0; lo < n; lo += chunk) {
    const std::size_t len = n - lo < chunk ? n - lo : chunk;
    for (std::size_t i = 0; i < len; ++i)
      local[i] = w[lo + i] > 0.0f ? static_cast<double>(w[lo + i]) * (x[lo + i] - m) : 0.0;
    s += lane_sum_kernel(local, len);
  }
  return s;
}

//! x[k] = -inf where w[k] < cut (in double) and k != keep, for k in [0, n) (eta's cut).
[[gnu::noinline]] inline void mask_weight_below_kernel(float* x, const float* w, std::size_t n, double cut,
                                                       std::int64_t keep) noexcept {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  for (std::size_t k = 0; k < n; ++k)
    x[k] = static_cast<double>(w[k]) < cut && static_cast<std::int64_t>(k) != keep ? ninf : x[k];
}

//! x[i] = v for i in [0, n) (a row set to -inf before top-k writes its k survivors back).
[[gnu::noinline]] inline void fill_kernel(float* x, std::size_t n, float v) noexcept {
  const vf16 vv = vbroadcast(v);
  std::size_t i = 0;
  for (; i + vlanes <= n; i += vlanes) vstore(x + i, vv);
  for (; i < n; ++i) x[i] = v;
}

//! Top-p histogram bin of a weight (top_p_bin_of, vec.hpp: shared with the device).
inline std::uint32_t top_p_bin(float w) noexcept { return top_p_bin_of(w); }

//! Top-p's final pass over [0, n): x[i] stays where its weight's bin is above `boundary`, or is
//! `boundary` with mark[i] set (the boundary bin's selected tokens); -inf elsewhere.
[[gnu::noinline]] inline void top_p_mask_kernel(float* x, const float* w, const std::uint8_t* mark, std::size_t n,
                                                std::uint32_t boundary) noexcept {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t bin = top_p_bin(w[i]);
    const bool keep = bin > boundary || (bin == boundary && mark[i] != 0);
    x[i] = keep ? x[i] : ninf;
  }
}

//! Multi-draft verification's residual update (verify/multi_draft.hpp) over one block [lo, hi):
//! w[i] = max(0, base[i] - c q[i]) in double, base = p when p is not null, else w itself; returns
//! the block's sum (`lanes` partial sums over the whole lanes, the tail first, then the lanes in
//! order: deterministic for a given block).
[[gnu::noinline]] inline double residual_block_kernel(const float* p, double* w, const float* q, std::size_t lo,
                                                      std::size_t hi, double c) noexcept {
  double acc[lanes] = {};
  std::size_t i = lo;
  if (p != nullptr) {
    for (; i + lanes <= hi; i += lanes)
      for (int j = 0; j < lanes; ++j) {
        const double d = static_cast<double>(p[i + j]) - c * static_cast<double>(q[i + j]);
        w[i + j] = d > 0.0 ? d : 0.0;
        acc[j] += w[i + j];
      }
  } else {
    for (; i + lanes <= hi; i += lanes)
      for (int j = 0; j < lanes; ++j) {
        const double d = w[i + j] - c * static_cast<double>(q[i + j]);
        w[i + j] = d > 0.0 ? d : 0.0;
        acc[j] += w[i + j];
      }
  }
  double sum = 0.0;
  for (; i < hi; ++i) {
    const double d = (p != nullptr ? static_cast<double>(p[i]) : w[i]) - c * static_cast<double>(q[i]);
    w[i] = d > 0.0 ? d : 0.0;
    sum += w[i];
  }
  for (int j = 0; j < lanes; ++j) sum += acc[j];
  return sum;
}
