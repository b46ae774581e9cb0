// simd.inl: the body of core/detail/simd.hpp, compiled once at the including file's flags (by
// simd.hpp) and once per dispatch level (core/detail/isa_levels.inl). No include guard, no
// #include, no namespace (see isa_levels.inl); written against SPECDEC_SIMD_AVX512 / _AVX / _F16C,
// never the compiler's own feature macros, which a target region does not define.
//
// 16-lane float vectors for the host attention microkernels: one zmm register with AVX-512 (a
// GCC/Clang vector extension), two ymm registers with AVX2, four xmm (SSE, the x86-64 baseline)
// or NEON registers otherwise (a struct of native vectors; see vpack). The kernels use only the
// operations defined here, so one source serves every target. fp16 rows are widened with
// F16C/AVX-512 conversions when the target has them (SPECDEC_SIMD_F16C), bf16 rows with a 16-bit shift.

//! Logical width of every kernel vector: the kernels, their panels and their workspace layout are
//! written for 16 float lanes on every target.
inline constexpr int vlanes = 16;

// Native SIMD width and register count of the target the including code is compiled for. With
// AVX-512 a 16-lane vector is one zmm register and the vector types below are plain GCC/Clang
// vector extensions. Without it they are structs of 16 / native_lanes native vectors (two ymm
// with AVX, four xmm or NEON q registers otherwise): a 64-byte vector-extension type on such a
// target is "generic", and GCC keeps generic vectors in memory, so every operation becomes a
// store/reload round trip (measured 6-10x slower kernels, and a 10x low FMA-peak reading, in a
// -march=x86-64-v3 build on a Zen 4 box; benchmarks/RESULTS.md, "Without AVX-512"). A struct of
// native vectors is split into registers (scalar replacement) like any small aggregate.
#if SPECDEC_SIMD_AVX512
inline constexpr int native_lanes = 16;
#elif SPECDEC_SIMD_AVX
inline constexpr int native_lanes = 8;
#else
inline constexpr int native_lanes = 4;
#endif
#if SPECDEC_SIMD_AVX512 || defined(__aarch64__)
inline constexpr int native_vregs = 32;
#else
inline constexpr int native_vregs = 16;
#endif
//! 16-lane vectors the register file holds (32 with AVX-512, 8 with AVX2 or NEON, 4 with SSE).
//! The microkernels size their register blocks from it (see fit_block).
inline constexpr int vregs16 = native_vregs * native_lanes / vlanes;

//! Largest register block b (a power of two, 1 <= b <= cap) with b * per + fixed 16-lane vectors
//! live that fits in the register file; 1 when even that spills. A kernel block of b x (per
//! accumulators) plus `fixed` operands is sized with it, so the AVX-512 blocks stay as tuned and
//! narrower targets get blocks that do not spill.
[[nodiscard]] constexpr int fit_block(int per, int fixed, int cap) noexcept {
  int b = 1;
  while (2 * b <= cap && 2 * b * per + fixed <= vregs16) b *= 2;
  return b;
}

#if SPECDEC_SIMD_AVX512
typedef float vf16 __attribute__((vector_size(64)));
typedef std::int32_t vi16 __attribute__((vector_size(64)));
typedef std::uint32_t vu16 __attribute__((vector_size(64)));
typedef std::uint16_t vh16 __attribute__((vector_size(32)));

//! Lane-wise m ? a : b (m: a comparison result, all-ones or zero per lane).
template <class V>
SPECDEC_FORCEINLINE V vselect(const vi16& m, const V& a, const V& b) noexcept {
  return m ? a : b;
}
//! Float to int32 lanes, truncating toward zero.
SPECDEC_FORCEINLINE vi16 vtrunc_i32(const vf16& x) noexcept { return __builtin_convertvector(x, vi16); }
//! int32 to float lanes.
SPECDEC_FORCEINLINE vf16 vcvt_f32(const vi16& x) noexcept { return __builtin_convertvector(x, vf16); }
#else
typedef float nvf __attribute__((vector_size(native_lanes * 4)));
typedef std::int32_t nvi __attribute__((vector_size(native_lanes * 4)));
typedef std::uint32_t nvu __attribute__((vector_size(native_lanes * 4)));
typedef std::uint16_t nvh __attribute__((vector_size(native_lanes * 2)));
inline constexpr int vparts = vlanes / native_lanes;

//! 16 lanes as vparts native vectors (lanes 0..native_lanes-1 in p[0], and so on), with the
//! element-wise operators of the vector extensions. E is the lane type, N the native vector.
template <class N, class E>
struct vpack {
  N p[vparts];
  SPECDEC_FORCEINLINE E operator[](int i) const noexcept { return p[i / native_lanes][i % native_lanes]; }
  // Vector-extension types may alias their element type (GCC and Clang), so this is well defined.
  SPECDEC_FORCEINLINE E& operator[](int i) noexcept { return reinterpret_cast<E*>(p)[i]; }
};
typedef vpack<nvf, float> vf16;
typedef vpack<nvi, std::int32_t> vi16;
typedef vpack<nvu, std::uint32_t> vu16;

// Element-wise operators: vector op vector, vector op scalar, scalar op vector (the scalar in a
// non-deduced context, so `v * 2` converts 2 to the lane type as the vector extensions do).
#define SPECDEC_VPACK_BINOP(op)                                                                     \
  template <class N, class E>                                                                       \
  SPECDEC_FORCEINLINE vpack<N, E> operator op(const vpack<N, E>& a, const vpack<N, E>& b) noexcept { \
    vpack<N, E> r;                                                                                  \
    SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) r.p[k] = a.p[k] op b.p[k];                                     \
    return r;                                                                                       \
  }                                                                                                 \
  template <class N, class E>                                                                       \
  SPECDEC_FORCEINLINE vpack<N, E> operator op(const vpack<N, E>& a, std::type_identity_t<E> s) noexcept { \
    vpack<N, E> r;                                                                                  \
    SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) r.p[k] = a.p[k] op s;                                          \
    return r;                                                                                       \
  }                                                                                                 \
  template <class N, class E>                                                                       \
  SPECDEC_FORCEINLINE vpack<N, E> operator op(std::type_identity_t<E> s, const vpack<N, E>& a) noexcept { \
    vpack<N, E> r;                                                                                  \
    SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) r.p[k] = s op a.p[k];                                          \
    return r;                                                                                       \
  }                                                                                                 \
  template <class N, class E, class B>                                                              \
  SPECDEC_FORCEINLINE vpack<N, E>& operator op##=(vpack<N, E>& a, const B& b) noexcept {            \
    return a = a op b;                                                                              \
  }
SPECDEC_VPACK_BINOP(+)
SPECDEC_VPACK_BINOP(-)
SPECDEC_VPACK_BINOP(*)
SPECDEC_VPACK_BINOP(/)
SPECDEC_VPACK_BINOP(&)
SPECDEC_VPACK_BINOP(|)
#undef SPECDEC_VPACK_BINOP

template <class N, class E>
SPECDEC_FORCEINLINE vpack<N, E> operator<<(const vpack<N, E>& a, int s) noexcept {
  vpack<N, E> r;
  SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) r.p[k] = a.p[k] << s;
  return r;
}
template <class N, class E>
SPECDEC_FORCEINLINE vpack<N, E> operator>>(const vpack<N, E>& a, int s) noexcept {
  vpack<N, E> r;
  SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) r.p[k] = a.p[k] >> s;
  return r;
}

// Comparisons give an int32 mask per lane (-1 true, 0 false), as the vector extensions do.
#define SPECDEC_VPACK_CMP(op)                                                                       \
  template <class N, class E>                                                                       \
  SPECDEC_FORCEINLINE vi16 operator op(const vpack<N, E>& a, const vpack<N, E>& b) noexcept {       \
    vi16 r;                                                                                         \
    SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) {                                                              \
      const auto m = a.p[k] op b.p[k];                                                              \
      std::memcpy(&r.p[k], &m, sizeof m);                                                           \
    }                                                                                               \
    return r;                                                                                       \
  }                                                                                                 \
  template <class N, class E>                                                                       \
  SPECDEC_FORCEINLINE vi16 operator op(const vpack<N, E>& a, std::type_identity_t<E> s) noexcept {  \
    vi16 r;                                                                                         \
    SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) {                                                              \
      const auto m = a.p[k] op s;                                                                   \
      std::memcpy(&r.p[k], &m, sizeof m);                                                           \
    }                                                                                               \
    return r;                                                                                       \
  }
SPECDEC_VPACK_CMP(<)
SPECDEC_VPACK_CMP(>)
SPECDEC_VPACK_CMP(==)
SPECDEC_VPACK_CMP(!=)
#undef SPECDEC_VPACK_CMP

//! Lane-wise m ? a : b (m: a comparison result, all-ones or zero per lane). Bitwise, not a vector
//! `?:`: nvcc's front end, which also parses these headers, rejects a mixed-type vector `?:`.
template <class N, class E>
SPECDEC_FORCEINLINE vpack<N, E> vselect(const vi16& m, const vpack<N, E>& a, const vpack<N, E>& b) noexcept {
  vpack<N, E> r;
  SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) {
    nvi ai, bi;
    std::memcpy(&ai, &a.p[k], sizeof ai);
    std::memcpy(&bi, &b.p[k], sizeof bi);
    const nvi ri = (m.p[k] & ai) | (~m.p[k] & bi);
    std::memcpy(&r.p[k], &ri, sizeof ri);
  }
  return r;
}
//! Float to int32 lanes, truncating toward zero.
SPECDEC_FORCEINLINE vi16 vtrunc_i32(const vf16& x) noexcept {
  vi16 r;
  SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) r.p[k] = __builtin_convertvector(x.p[k], nvi);
  return r;
}
//! int32 to float lanes.
SPECDEC_FORCEINLINE vf16 vcvt_f32(const vi16& x) noexcept {
  vf16 r;
  SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) r.p[k] = __builtin_convertvector(x.p[k], nvf);
  return r;
}
#endif

static_assert(sizeof(vf16) == 64 && sizeof(vi16) == 64 && sizeof(vu16) == 64, "16 lanes of 32 bits");

// Loads, stores and bit casts go part by part: GCC does not split a whole-struct memcpy into
// registers, so that form would put every vector through the stack.
SPECDEC_FORCEINLINE vf16 vload(const float* p) noexcept {
  vf16 v;
#if SPECDEC_SIMD_AVX512
  std::memcpy(&v, p, sizeof v);
#else
  SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) std::memcpy(&v.p[k], p + k * native_lanes, sizeof v.p[k]);
#endif
  return v;
}
SPECDEC_FORCEINLINE void vstore(float* p, const vf16& v) noexcept {
#if SPECDEC_SIMD_AVX512
  std::memcpy(p, &v, sizeof v);
#else
  SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) std::memcpy(p + k * native_lanes, &v.p[k], sizeof v.p[k]);
#endif
}
//! v, kept in a register: for a loaded vector that several FMAs then read, so the load is issued
//! once (an empty asm that the compiler must assume changes the value). Without it GCC 12 folds the
//! load into every FMA that reads it as a memory operand: the rows kernel's two-key score step
//! issued two query loads per FMA pair, and the PV step on fp32 V one V load per FMA, and on a Zen 5
//! core, which issues two 512-bit loads a cycle, such a loop is bound by the load ports
//! (RESULTS.md, session 64: #24's fp16 two-token tree at a 32K cache 8.0 -> 6.8 ms). GCC only:
//! Clang 14 already loads such a vector once, and the asm made its 4K cell 5% slower. v itself
//! elsewhere and where a vector is more than one register (the struct's parts are registers anyway).
SPECDEC_FORCEINLINE vf16 vkeep(vf16 v) noexcept {
#if SPECDEC_SIMD_AVX512 && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
  asm("" : "+v"(v));
#endif
  return v;
}
//! Same bits, other lane type (float <-> int32 / uint32).
template <class To, class From>
SPECDEC_FORCEINLINE To vbitcast(const From& x) noexcept {
  static_assert(sizeof(To) == 64 && sizeof(From) == 64, "vbitcast: 16-lane vectors");
  To r;
#if SPECDEC_SIMD_AVX512
  std::memcpy(&r, &x, sizeof r);
#else
  SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) std::memcpy(&r.p[k], &x.p[k], sizeof r.p[k]);
#endif
  return r;
}
//! 16 consecutive 16-bit values (fp16 or bf16 bits), zero-extended to 32-bit lanes.
SPECDEC_FORCEINLINE vu16 vload_u16(const void* p) noexcept {
#if SPECDEC_SIMD_AVX512
  vh16 h;
  std::memcpy(&h, p, sizeof h);
  return __builtin_convertvector(h, vu16);
#else
  vu16 r;
  SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) {
    nvh h;
    std::memcpy(&h, static_cast<const char*>(p) + k * sizeof h, sizeof h);
    r.p[k] = __builtin_convertvector(h, nvu);
  }
  return r;
#endif
}
//! The low 16 bits of each lane, stored as 16 consecutive 16-bit values.
SPECDEC_FORCEINLINE void vstore_u16(void* p, const vu16& x) noexcept {
#if SPECDEC_SIMD_AVX512
  const vh16 h = __builtin_convertvector(x, vh16);
  std::memcpy(p, &h, sizeof h);
#else
  SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) {
    const nvh h = __builtin_convertvector(x.p[k], nvh);
    std::memcpy(static_cast<char*>(p) + k * sizeof h, &h, sizeof h);
  }
#endif
}
// Brace-initialised, not `vf16{} + x`: 0 + x is not x for x = -0, so that form costs a scalar add
// before every broadcast and blocks FMA's embedded-broadcast memory operand.
SPECDEC_FORCEINLINE vf16 vbroadcast(float x) noexcept {
#if SPECDEC_SIMD_AVX512
  return vf16{x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};
#else
#if SPECDEC_SIMD_AVX
  const nvf n{x, x, x, x, x, x, x, x};
#else
  const nvf n{x, x, x, x};
#endif
  vf16 r;
  SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) r.p[k] = n;
  return r;
#endif
}

//! 2^x for x <= 0 (x = -inf or x < -126 gives exactly 0). Round-to-nearest range reduction and a
//! degree-7 Taylor polynomial of e^(f ln 2) on [-0.5, 0.5]: relative error below 1e-7, ample for the
//! 1e-5 agreement the tests demand.
SPECDEC_FORCEINLINE vf16 vexp2(const vf16& x_in) noexcept {
  const vi16 underflow = x_in < -126.0f;
  const vf16 x = vselect(underflow, vbroadcast(-126.0f), x_in);
  const vi16 n = vtrunc_i32(x - 0.5f);  // trunc toward 0 of (x - .5) = round(x) for x <= 0
  const vf16 f = x - vcvt_f32(n);       // in (-0.5, 0.5]
  constexpr float c1 = 0.6931471805599453f, c2 = 0.2402265069591007f, c3 = 0.05550410866482158f,
                  c4 = 0.009618129107628477f, c5 = 0.0013333558146428443f, c6 = 0.00015403530393381606f,
                  c7 = 1.525273380405984e-05f;
  vf16 p = c7 * f + c6;
  p = p * f + c5;
  p = p * f + c4;
  p = p * f + c3;
  p = p * f + c2;
  p = p * f + c1;
  p = p * f + 1.0f;
  vi16 bits = vbitcast<vi16>(p);
  bits += n << 23;
  bits = vselect(underflow, vi16{}, bits);
  return vbitcast<vf16>(bits);
}

//! Lane-wise a > b ? a : b, and vmin: a < b ? a : b (b where the lanes are unordered or equal, so the
//! sign of a zero result and NaN follow the operand order). On x86 that is exactly the max / min
//! instruction with these operands, one operation instead of a compare and a blend.
SPECDEC_FORCEINLINE vf16 vmax(const vf16& a, const vf16& b) noexcept {
#if SPECDEC_SIMD_AVX512
  return _mm512_maskz_max_ps(static_cast<__mmask16>(0xFFFF), a, b);  // maskz: see reduce_to_4
#elif SPECDEC_SIMD_AVX
  vf16 r;
  SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) r.p[k] = _mm256_max_ps(a.p[k], b.p[k]);
  return r;
#elif (defined(__x86_64__) || defined(__i386__)) && defined(__SSE__) && !defined(__CUDACC__)
  vf16 r;
  SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) r.p[k] = _mm_max_ps(a.p[k], b.p[k]);
  return r;
#else
  return vselect(a > b, a, b);
#endif
}
SPECDEC_FORCEINLINE vf16 vmin(const vf16& a, const vf16& b) noexcept {
#if SPECDEC_SIMD_AVX512
  return _mm512_maskz_min_ps(static_cast<__mmask16>(0xFFFF), a, b);
#elif SPECDEC_SIMD_AVX
  vf16 r;
  SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) r.p[k] = _mm256_min_ps(a.p[k], b.p[k]);
  return r;
#elif (defined(__x86_64__) || defined(__i386__)) && defined(__SSE__) && !defined(__CUDACC__)
  vf16 r;
  SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) r.p[k] = _mm_min_ps(a.p[k], b.p[k]);
  return r;
#else
  return vselect(a < b, a, b);
#endif
}

typedef float vf4 __attribute__((vector_size(16)));

#if SPECDEC_SIMD_AVX512
//! 16 lanes -> 4 lanes by two halvings (256-bit, then 128-bit), in registers. The maskz extract
//! avoids _mm512_reduce_*_ps and _mm512_castps512_ps256, whose "undefined" source register GCC 12
//! flags as maybe-uninitialized.
template <class Op>
SPECDEC_FORCEINLINE __m128 reduce_to_4(const vf16& v, Op op) noexcept {
  __m512 x;
  std::memcpy(&x, &v, sizeof x);
  const __m512d xd = _mm512_castps_pd(x);
  const __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(static_cast<__mmask8>(0xFF), xd, 0));
  const __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(static_cast<__mmask8>(0xFF), xd, 1));
  const __m256 h8 = op(lo, hi);
  return op(_mm256_castps256_ps128(h8), _mm256_extractf128_ps(h8, 1));
}
#else
//! 16 lanes -> 4 lanes with the same pairing as the AVX-512 form (lane i with lane i + 8, then
//! with lane i + 4): first across the native parts, then within one native vector.
template <class Op>
SPECDEC_FORCEINLINE vf4 reduce_to_4(const vf16& v, Op op) noexcept {
  nvf acc[vparts];
  SPECDEC_UNROLL_PARTS for (int k = 0; k < vparts; ++k) acc[k] = v.p[k];
  for (int n = vparts / 2; n >= 1; n /= 2)
    for (int k = 0; k < n; ++k) acc[k] = op(acc[k], acc[k + n]);
  vf4 lo;
  std::memcpy(&lo, &acc[0], sizeof lo);
  if constexpr (native_lanes == 8) {
    vf4 hi;
    std::memcpy(&hi, reinterpret_cast<const char*>(&acc[0]) + sizeof lo, sizeof hi);
    return op(lo, hi);
  } else {
    return lo;
  }
}
#endif

//! Sum of the 16 lanes: halving to 8, then 4 lanes, then (x0 + x2) + (x1 + x3); the same order
//! with and without AVX-512, and no trip through memory.
SPECDEC_FORCEINLINE float vhsum(const vf16& v) noexcept {
#if SPECDEC_SIMD_AVX512
  const __m128 s4 = reduce_to_4(v, [](auto a, auto b) { return a + b; });
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
#else
  const vf4 s4 = reduce_to_4(v, [](auto a, auto b) { return a + b; });
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
#endif
}

//! Maximum of the 16 lanes (same halving scheme as vhsum).
SPECDEC_FORCEINLINE float vhmax(const vf16& v) noexcept {
#if SPECDEC_SIMD_AVX512
  const __m128 m4 = reduce_to_4(v, [](auto a, auto b) {
    if constexpr (sizeof(a) == 32) return _mm256_max_ps(a, b);
    else return _mm_max_ps(a, b);
  });
  const __m128 m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  return _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps(m2, m2, 1)));
#else
  const vf4 m4 = reduce_to_4(v, [](auto a, auto b) { return a > b ? a : b; });
  const float x = m4[0] > m4[2] ? m4[0] : m4[2], y = m4[1] > m4[3] ? m4[1] : m4[3];
  return x > y ? x : y;
#endif
}

//! True if any lane of m (a comparison's mask, or an OR of masks: -1 or 0 per lane) is set.
SPECDEC_FORCEINLINE bool vany(const vi16& m) noexcept { return vhmax(vcvt_f32(m & 1)) > 0.0f; }

//! Sixteen horizontal sums at once: lane k of the result is vhsum(a[k]), bit for bit (every sum
//! pairs its lanes as vhsum does: i with i + 8, then i + 4, i + 2, i + 1). With AVX-512 a butterfly
//! of two-source shuffles, 30 shuffles and 15 adds for the 16 sums, against about seven dependent
//! operations per vhsum; elsewhere 16 vhsums.
SPECDEC_FORCEINLINE vf16 vhsum16(const vf16 (&a)[16]) noexcept {
#if SPECDEC_SIMD_AVX512
  // Each level adds the two halves of every partial sum, two inputs' partials per vector; the
  // butterfly leaves input k's sum in lane bitrev4(k), so the inputs go in bit-reversed order.
  constexpr int br[16] = {0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15};
  vf16 c[8], d[4], e[2];
  for (int k = 0; k < 8; ++k) {  // 16 -> 8 lanes per sum: lane i + lane i + 8
    const vf16 x = a[br[2 * k]], y = a[br[2 * k + 1]];
    c[k] = __builtin_shufflevector(x, y, 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
           __builtin_shufflevector(x, y, 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  }
  for (int k = 0; k < 4; ++k) {  // 8 -> 4: i + (i + 4)
    const vf16 x = c[2 * k], y = c[2 * k + 1];
    d[k] = __builtin_shufflevector(x, y, 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27) +
           __builtin_shufflevector(x, y, 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  }
  for (int k = 0; k < 2; ++k) {  // 4 -> 2: i + (i + 2)
    const vf16 x = d[2 * k], y = d[2 * k + 1];
    e[k] = __builtin_shufflevector(x, y, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29) +
           __builtin_shufflevector(x, y, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  }
  return __builtin_shufflevector(e[0], e[1], 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30) +
         __builtin_shufflevector(e[0], e[1], 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
#else
  alignas(64) float s[16];
  for (int k = 0; k < 16; ++k) s[k] = vhsum(a[k]);
  return vload(s);
#endif
}

//! Widen 16 consecutive storage elements to a float vector.
template <class T>
SPECDEC_FORCEINLINE vf16 vload_as_float(const T* p) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    return vload(p);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    return vbitcast<vf16>(vload_u16(p) << 16);
  } else {
    static_assert(std::is_same_v<T, half>, "vload_as_float: float, half or bfloat16");
#if SPECDEC_SIMD_AVX512
    // maskz form: the plain one reads an "undefined" register that GCC 12 flags as maybe-uninitialized.
    const __m512 r = _mm512_maskz_cvtph_ps(static_cast<__mmask16>(0xFFFF), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    vf16 v;
    std::memcpy(&v, &r, sizeof v);
    return v;
#elif SPECDEC_SIMD_F16C
    const __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
    vf16 v;
    std::memcpy(&v.p[0], &lo, sizeof lo);
    std::memcpy(&v.p[1], &hi, sizeof hi);
    return v;
#else
    // No F16C (baseline x86-64, NEON without this path): half_bits_to_float's cases, lane-parallel
    // in integer arithmetic, exact. A subnormal (exponent 0) is 2^-14 * (1 + m / 1024) - 2^-14 =
    // m * 2^-24, computed without a subnormal float operand (so DAZ cannot flush it).
    const vu16 h = vload_u16(p);
    const vu16 sign = (h & 0x8000u) << 16, em = h & 0x7fffu;
    const vu16 normal = (em << 13) + (112u << 23);  // exponent rebased from bias 15 to bias 127
    const vf16 sub = vbitcast<vf16>((em << 13) + (113u << 23)) - 0x1p-14f;
    const vu16 infnan = (em << 13) | 0x7f800000u;
    vu16 r = vselect(em < 0x0400u, vbitcast<vu16>(sub), normal);
    r = vselect(em > 0x7bffu, infnan, r);
    r = vselect(em > 0x7c00u, r | 0x00400000u, r);  // a NaN quieted, as F16C and half_bits_to_float do
    return vbitcast<vf16>(r | sign);
#endif
  }
}

//! Narrow a float vector to 16 storage elements with round-to-nearest-even, bit-identical to
//! from_float<T> (F16C/AVX-512 for half when available; integer rounding for bfloat16).
template <class T>
SPECDEC_FORCEINLINE void vstore_as(T* p, const vf16& v) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    vstore(p, v);
  } else if constexpr (std::is_same_v<T, bfloat16>) {
    const vu16 x = vbitcast<vu16>(v);
    const vi16 nan = (x & 0x7fffffffu) > 0x7f800000u;
    const vu16 rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    vstore_u16(p, vselect(nan, (x >> 16) | 0x0040u, rounded));
  } else {
    static_assert(std::is_same_v<T, half>, "vstore_as: float, half or bfloat16");
#if SPECDEC_SIMD_AVX512
    __m512 f;
    std::memcpy(&f, &v, sizeof f);
    // maskz form for the same GCC 12 maybe-uninitialized false positive as in vload_as_float.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                        _mm512_maskz_cvtps_ph(static_cast<__mmask16>(0xFFFF), f, _MM_FROUND_TO_NEAREST_INT));
#elif SPECDEC_SIMD_F16C
    __m256 lo, hi;
    std::memcpy(&lo, &v.p[0], sizeof lo);
    std::memcpy(&hi, &v.p[1], sizeof hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(lo, _MM_FROUND_TO_NEAREST_INT));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 8), _mm256_cvtps_ph(hi, _MM_FROUND_TO_NEAREST_INT));
#else
    // No F16C (baseline x86-64, NEON without this path): float_to_half_bits' cases, lane-parallel,
    // bit-identical. Normal results: rebias, round to nearest even by adding 0xfff plus the kept
    // LSB (a carry into the exponent is correct, up to Inf at 65520). Below 2^-14: |f| + 0.5 rounds
    // |f| to the 2^-24 grid (ties to even; 1024 units is the smallest normal), and the units are
    // the half's bits. NaN stays quiet with its top payload bits.
    const vu16 x = vbitcast<vu16>(v);
    const vu16 sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    const vu16 normal = (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13;
    const vu16 sub = vbitcast<vu16>(vbitcast<vf16>(a) + 0.5f) - 0x3f000000u;
    vu16 r = vselect(a < 0x38800000u, sub, normal);
    r = vselect(a > 0x477fefffu, (a & 0u) | 0x7c00u, r);
    r = vselect(a > 0x7f800000u, ((a >> 13) & 0x3ffu) | 0x7e00u, r);
    vstore_u16(p, r | sign);
#endif
  }
}

//! Widen `n` (a multiple of 16) storage elements into floats.
template <class T>
SPECDEC_FORCEINLINE void widen_row(const T* src, float* dst, int n) noexcept {
  for (int i = 0; i < n; i += vlanes) vstore(dst + i, vload_as_float(src + i));
}

//! dst[i] = float(src[i]) for i < n, any n: 16 at a time, then one by one (exact).
template <class T, class N>
SPECDEC_FORCEINLINE void widen_row_any(const T* src, float* dst, N n) noexcept {
  N i = 0;
  for (; i + vlanes <= n; i += vlanes) vstore(dst + i, vload_as_float(src + i));
  for (; i < n; ++i) dst[i] = to_float(src[i]);
}

//! dst[i] = T(src[i]) for i < n, any n, round to nearest even (bit-identical to from_float<T>).
template <class T, class N>
SPECDEC_FORCEINLINE void narrow_row(const float* src, T* dst, N n) noexcept {
  N i = 0;
  for (; i + vlanes <= n; i += vlanes) vstore_as(dst + i, vload(src + i));
  for (; i < n; ++i) dst[i] = from_float<T>(src[i]);
}
