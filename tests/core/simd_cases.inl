// simd_cases.inl: the lane-by-lane checks of the 16-lane vector layer (core/detail/simd.inl)
// against scalar code, as one function of Catch sections, simd_cases(). test_simd.cpp runs it at
// that file's own flags; test_simd_level.cpp includes this file once per run-time dispatch level
// (core/detail/isa_levels.inl) and runs each level the CPU has, so every form of vf16 (4 x xmm,
// 2 x ymm + F16C, 1 x zmm) is held to the same results in one binary. No include guard, no
// #include, no namespace: the includer provides <cmath>, <cstdint>, <cstring>, <limits>, <vector>,
// Catch, simd.hpp and philox.hpp, and makes specdec and specdec::detail visible.

inline std::uint32_t bits_of_float(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Bit-exact, except that any NaN matches any NaN of the same sign (for the narrowing and arithmetic
// cases; the fp16 widening below is bit-exact, NaN bits included).
inline bool same_value(float got, float want) {
  if (std::isnan(want)) return std::isnan(got) && std::signbit(got) == std::signbit(want);
  return bits_of_float(got) == bits_of_float(want);
}

inline std::vector<float> random_floats(std::uint64_t seed, int n, float scale) {
  philox_stream rng(seed, 0);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * (2.0f * rng.uniform() - 1.0f);
  return v;
}

inline void simd_cases() {
  SECTION("fp16 widening is exact for all 65536 bit patterns, NaN bits included") {
    // bit for bit at every level: a signalling NaN comes out quiet (payload kept) from F16C and
    // from the scalar and portable conversions alike, so a NaN's bits do not depend on its lane
    std::vector<half> h(65536);
    for (int i = 0; i < 65536; ++i) h[i] = half::from_bits(static_cast<std::uint16_t>(i));
    int bad = 0, first_bad = -1;
    for (int i = 0; i < 65536; i += vlanes) {
      const vf16 v = vload_as_float(h.data() + i);
      for (int l = 0; l < vlanes; ++l)
        if (bits_of_float(v[l]) != bits_of_float(half::to_float(h[i + l].bits))) {
          if (bad++ == 0) first_bad = i + l;
        }
    }
    INFO("first mismatching half bits: " << first_bad);
    CHECK(bad == 0);
  }

  SECTION("bf16 widening is exact for all 65536 bit patterns") {
    std::vector<bfloat16> b(65536);
    for (int i = 0; i < 65536; ++i) b[i] = bfloat16::from_bits(static_cast<std::uint16_t>(i));
    int bad = 0;
    for (int i = 0; i < 65536; i += vlanes) {
      const vf16 v = vload_as_float(b.data() + i);
      for (int l = 0; l < vlanes; ++l) bad += !same_value(v[l], bfloat16::to_float(b[i + l].bits));
    }
    CHECK(bad == 0);
  }

  SECTION("narrowing to fp16 gives float_to_half_bits' bits over a sweep of float bit patterns") {
    // Every 4093rd pattern of all 2^32 (both signs, every exponent: subnormal and normal results,
    // ties, overflow to Inf, NaN payloads), plus the boundaries of each case.
    std::vector<std::uint32_t> pats;
    for (std::uint64_t u = 0; u < (1ull << 32); u += 4093) pats.push_back(static_cast<std::uint32_t>(u));
    for (std::uint32_t b : {0x38800000u, 0x387fffffu, 0x477fefffu, 0x477ff000u, 0x7f800000u, 0x7f800001u,
                            0x7fc00000u, 0x33000000u, 0x33000001u, 0x32ffffffu, 0x38000fffu, 0x38001000u})
      for (std::uint32_t sgn : {0u, 0x80000000u}) pats.push_back(b | sgn);
    while (pats.size() % vlanes) pats.push_back(0);
    std::vector<float> x(pats.size());
    std::memcpy(x.data(), pats.data(), pats.size() * sizeof(float));
    std::vector<half> h(x.size());
    for (std::size_t i = 0; i < x.size(); i += vlanes) vstore_as(h.data() + i, vload(x.data() + i));
    int bad = 0;
    std::size_t first_bad = 0;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (h[i].bits != specdec::detail::float_to_half_bits(x[i]) && bad++ == 0) first_bad = i;
    INFO("first mismatching float bits: " << pats[first_bad]);
    CHECK(bad == 0);
  }

  SECTION("narrowing to fp16 and bf16 rounds like the scalar conversions") {
    // Random values over many binades, plus ties, overflow, subnormal results, zeros, inf and NaN.
    std::vector<float> x = random_floats(11, 4096, 1.0f);
    for (int i = 0; i < 1024; ++i) x[i] = std::ldexp(x[i], i % 60 - 30);
    const float inf = std::numeric_limits<float>::infinity();
    for (float s : {1.0f, 65504.0f, 65520.0f, 1e6f, 6e-8f, 3e-8f, 1e-40f, 0.0f, -0.0f, inf, -inf,
                    std::numeric_limits<float>::quiet_NaN(), 1.0009765625f + 0.00048828125f})
      x.push_back(s);
    while (x.size() % vlanes) x.push_back(0.5f);
    std::vector<half> h(x.size());
    std::vector<bfloat16> b(x.size());
    for (std::size_t i = 0; i < x.size(); i += vlanes) {
      const vf16 v = vload(x.data() + i);
      vstore_as(h.data() + i, v);
      vstore_as(b.data() + i, v);
    }
    int bad_h = 0, bad_b = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      bad_h += !same_value(half::to_float(h[i].bits), half::to_float(half(x[i]).bits));
      bad_b += !same_value(bfloat16::to_float(b[i].bits), bfloat16::to_float(bfloat16(x[i]).bits));
    }
    CHECK(bad_h == 0);
    CHECK(bad_b == 0);
  }

  SECTION("arithmetic, select, reductions and exp2 lane by lane") {
    const std::vector<float> a = random_floats(21, 64, 3.0f), b = random_floats(22, 64, 3.0f);
    for (int i = 0; i < 64; i += vlanes) {
      const vf16 va = vload(a.data() + i), vb = vload(b.data() + i);
      const vf16 fma_like = va * vb + 0.5f, diff = 2.0f - va, mx = vmax(va, vb);
      const vf16 sel = vselect(va < vb, va, vbroadcast(-1.0f));
      alignas(64) float out[vlanes];
      vstore(out, fma_like);
      for (int l = 0; l < vlanes; ++l) {
        // Fused or not (compiler's choice): within a few ulps of the terms' magnitude.
        const double ab = static_cast<double>(a[i + l]) * b[i + l];
        CHECK(std::fabs(out[l] - (ab + 0.5)) <= 1e-6 * (std::fabs(ab) + 0.5));
        CHECK(diff[l] == 2.0f - a[i + l]);
        CHECK(mx[l] == std::max(a[i + l], b[i + l]));
        CHECK(sel[l] == (a[i + l] < b[i + l] ? a[i + l] : -1.0f));
      }
      // Reductions: the halving order of simd.hpp (lane i with i + 8, then i + 4, then the last 4).
      float s4[4];
      for (int l = 0; l < 4; ++l)
        s4[l] = (a[i + l] + a[i + l + 8]) + (a[i + l + 4] + a[i + l + 12]);
      CHECK(vhsum(va) == (s4[0] + s4[2]) + (s4[1] + s4[3]));
      float m = a[i];
      for (int l = 1; l < vlanes; ++l) m = std::max(m, a[i + l]);
      CHECK(vhmax(va) == m);
    }
    // vhsum16: sixteen sums at once, each bit for bit vhsum's (the attention row kernel relies on it
    // to reduce 8 query rows x 2 keys of dot products), with signed values of mixed magnitudes
    // so a different pairing would round differently.
    const std::vector<float> c = random_floats(24, 16 * vlanes * 8, 1000.0f);
    for (int rep = 0; rep < 8; ++rep) {
      vf16 in[16];
      for (int k = 0; k < 16; ++k) {
        alignas(64) float row[vlanes];
        for (int l = 0; l < vlanes; ++l) row[l] = c[(rep * 16 + k) * vlanes + l] * (l % 3 == 0 ? 1e-4f : 1.0f);
        in[k] = vload(row);
      }
      const vf16 sums = vhsum16(in);
      for (int k = 0; k < 16; ++k) {
        const float want = vhsum(in[k]);
        CHECK(std::memcmp(&want, &reinterpret_cast<const float*>(&sums)[k], sizeof want) == 0);
      }
    }
    // exp2 on x <= 0, including the underflow clamp and -inf.
    std::vector<float> x = random_floats(23, 256, 40.0f);
    for (auto& v : x) v = -std::fabs(v);
    x[0] = 0.0f;
    x[1] = -126.0f;
    x[2] = -127.0f;
    x[3] = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < 256; i += vlanes) {
      const vf16 e = vexp2(vload(x.data() + i));
      for (int l = 0; l < vlanes; ++l) {
        const float want = x[i + l] < -126.0f ? 0.0f : std::exp2(x[i + l]);
        CHECK(e[l] == Approx(want).epsilon(2e-7).margin(0.0));
      }
    }
  }
}
