// Device/host bit-identity of the core layer: Philox draws and half/bfloat16 conversions.
// Runs only with a CUDA device (the shared main exits 77 = skipped otherwise).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda/cuda_test_util.cuh"
#include "specdec/core/bfloat16.hpp"
#include "specdec/core/half.hpp"
#include "specdec/core/philox.hpp"

namespace {

constexpr int draws_per_thread = 6;

// Thread t uses request t % 7, step t / 7, and starts at word offset t % 5 (unaligned to blocks).
__global__ void philox_kernel(std::uint64_t seed, int threads, std::uint32_t* u32, float* f, double* d,
                              std::uint32_t* below) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= threads) return;
  specdec::philox_stream s(seed, specdec::stream_id(static_cast<std::uint32_t>(t % 7), static_cast<std::uint32_t>(t / 7)),
                           static_cast<std::uint64_t>(t % 5));
  for (int i = 0; i < draws_per_thread; ++i) u32[t * draws_per_thread + i] = s.next_u32();
  f[2 * t] = s.uniform();
  f[2 * t + 1] = s.uniform_open0();
  d[t] = s.uniform_double();
  below[t] = s.below(1000u + static_cast<std::uint32_t>(t));
}

__global__ void philox_block_kernel(const specdec::philox_block* in, const std::uint32_t* keys, int n,
                                    specdec::philox_block* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = specdec::philox4x32_10(in[i], keys[2 * i], keys[2 * i + 1]);
}

__global__ void half_to_float_kernel(float* h, float* b) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 65536) return;
  h[i] = static_cast<float>(specdec::half::from_bits(static_cast<std::uint16_t>(i)));
  b[i] = static_cast<float>(specdec::bfloat16::from_bits(static_cast<std::uint16_t>(i)));
}

__global__ void float_to_half_kernel(const float* in, int n, std::uint16_t* h, std::uint16_t* b) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  h[i] = specdec::half(in[i]).bits;
  b[i] = specdec::bfloat16(in[i]).bits;
}

float bits_to_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST_CASE("Philox draws on the device are bit-identical to the host") {
  constexpr int threads = 1000;
  constexpr std::uint64_t seed = 0x0123456789abcdefull;
  specdec_test::device_buffer<std::uint32_t> u32(threads * draws_per_thread), below(threads);
  specdec_test::device_buffer<float> f(2 * threads);
  specdec_test::device_buffer<double> d(threads);
  philox_kernel<<<(threads + 127) / 128, 128>>>(seed, threads, u32.data(), f.data(), d.data(), below.data());
  specdec_test::sync_check("philox_kernel");
  const auto du32 = u32.download();
  const auto df = f.download();
  const auto dd = d.download();
  const auto dbelow = below.download();
  for (int t = 0; t < threads; ++t) {
    specdec::philox_stream s(seed, specdec::stream_id(static_cast<std::uint32_t>(t % 7), static_cast<std::uint32_t>(t / 7)),
                             static_cast<std::uint64_t>(t % 5));
    for (int i = 0; i < draws_per_thread; ++i) REQUIRE(du32[t * draws_per_thread + i] == s.next_u32());
    REQUIRE(df[2 * t] == s.uniform());
    REQUIRE(df[2 * t + 1] == s.uniform_open0());
    REQUIRE(dd[t] == s.uniform_double());
    REQUIRE(dbelow[t] == s.below(1000u + static_cast<std::uint32_t>(t)));
  }
}

TEST_CASE("philox4x32_10 on the device reproduces the Random123 known answers") {
  const std::vector<specdec::philox_block> in{{{0u, 0u, 0u, 0u}},
                                              {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
                                              {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}};
  const std::vector<std::uint32_t> keys{0u, 0u, 0xffffffffu, 0xffffffffu, 0xa4093822u, 0x299f31d0u};
  const std::uint32_t expected[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                        {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                        {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
  specdec_test::device_buffer<specdec::philox_block> din(in), dout(in.size());
  specdec_test::device_buffer<std::uint32_t> dkeys(keys);
  philox_block_kernel<<<1, 32>>>(din.data(), dkeys.data(), 3, dout.data());
  specdec_test::sync_check("philox_block_kernel");
  const auto out = dout.download();
  for (int i = 0; i < 3; ++i)
    for (int w = 0; w < 4; ++w) REQUIRE(out[i].v[w] == expected[i][w]);
}

TEST_CASE("half and bfloat16 -> float on the device match the host on all 65536 patterns") {
  specdec_test::device_buffer<float> h(65536), b(65536);
  half_to_float_kernel<<<65536 / 256, 256>>>(h.data(), b.data());
  specdec_test::sync_check("half_to_float_kernel");
  const auto dh = h.download();
  const auto db = b.download();
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const float hh = static_cast<float>(specdec::half::from_bits(static_cast<std::uint16_t>(i)));
    const float hb = static_cast<float>(specdec::bfloat16::from_bits(static_cast<std::uint16_t>(i)));
    INFO("pattern " << i);
    if (std::isnan(hh)) REQUIRE(std::isnan(dh[i]));
    else REQUIRE(std::memcmp(&hh, &dh[i], 4) == 0);
    if (std::isnan(hb)) REQUIRE(std::isnan(db[i]));
    else REQUIRE(std::memcmp(&hb, &db[i], 4) == 0);
  }
}

TEST_CASE("float -> half and bfloat16 on the device match the host (round to nearest even)") {
  // Every half and bfloat16 value, every midpoint between neighbours (and one ulp either side of it),
  // and pseudo-random float bit patterns.
  std::vector<float> in;
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const std::uint32_t hf = [&] {
      const float f = static_cast<float>(specdec::half::from_bits(static_cast<std::uint16_t>(i)));
      std::uint32_t u;
      std::memcpy(&u, &f, 4);
      return u;
    }();
    const std::uint32_t bf = i << 16;
    for (std::uint32_t base : {hf, bf}) {
      in.push_back(bits_to_float(base));
      const std::uint32_t mid = base == bf ? base + 0x8000u : base + 0x1000u;  // half: 13 dropped bits
      for (std::uint32_t u : {mid - 1u, mid, mid + 1u}) in.push_back(bits_to_float(u));
    }
  }
  specdec::philox_stream rng(7, 0);
  for (int i = 0; i < 200000; ++i) in.push_back(bits_to_float(rng.next_u32()));
  specdec_test::device_buffer<float> din(in);
  specdec_test::device_buffer<std::uint16_t> h(in.size()), b(in.size());
  const int n = static_cast<int>(in.size());
  float_to_half_kernel<<<(n + 255) / 256, 256>>>(din.data(), n, h.data(), b.data());
  specdec_test::sync_check("float_to_half_kernel");
  const auto dh = h.download();
  const auto db = b.download();
  for (int i = 0; i < n; ++i) {
    const specdec::half hh(in[i]);
    const specdec::bfloat16 hb(in[i]);
    INFO("input bits " << std::hex << [&] { std::uint32_t u; std::memcpy(&u, &in[i], 4); return u; }());
    if (std::isnan(in[i])) {  // NaN payloads may differ between host and cvt; both must be NaN
      REQUIRE(std::isnan(static_cast<float>(specdec::half::from_bits(dh[i]))));
      REQUIRE(std::isnan(static_cast<float>(specdec::bfloat16::from_bits(db[i]))));
    } else {
      REQUIRE(dh[i] == hh.bits);
      REQUIRE(db[i] == hb.bits);
    }
  }
}
