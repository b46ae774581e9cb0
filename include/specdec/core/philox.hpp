#pragma once
//! \file philox.hpp
//! Counter-based Philox4x32-10 generator (Salmon et al., SC'11), identical on host and device.
//!
//! Every random draw in specdec is a pure function of (seed, stream, offset): the key is the 64-bit
//! seed, the counter holds the 64-bit offset and the 64-bit stream id. Seeding a stream with
//! (request, step) via stream_id() makes host and CUDA draw the same numbers in any order, and a run
//! reproducible.

#include <cstdint>

#include "specdec/core/config.hpp"

namespace specdec {

//! Four 32-bit words: a Philox counter or output block.
struct philox_block {
  std::uint32_t v[4];
};

namespace detail {
// One 32x32->64 product on both sides (nvcc emits mul.wide.u32 / mul.hi.u32); constexpr so the
// known-answer vectors can be checked at compile time.
SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE constexpr void mulhilo32(std::uint32_t a, std::uint32_t b, std::uint32_t& hi,
                                                                std::uint32_t& lo) noexcept {
  const std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  lo = static_cast<std::uint32_t>(p);
  hi = static_cast<std::uint32_t>(p >> 32);
}
}  // namespace detail

//! One Philox4x32-10 block: 10 rounds of the bijection keyed by (k0, k1).
SPECDEC_HOST_DEVICE constexpr philox_block philox4x32_10(philox_block ctr, std::uint32_t k0,
                                                         std::uint32_t k1) noexcept {
  constexpr std::uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;  // multipliers (Salmon et al., Table 2)
  constexpr std::uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;  // Weyl key increments
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0 = 0, lo0 = 0, hi1 = 0, lo1 = 0;
    detail::mulhilo32(m0, ctr.v[0], hi0, lo0);
    detail::mulhilo32(m1, ctr.v[2], hi1, lo1);
    ctr = philox_block{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
    k0 += w0;
    k1 += w1;
  }
  return ctr;
}

//! Stream id for a (request, step) pair: each request and decoding step draws from its own stream.
SPECDEC_HOST_DEVICE constexpr std::uint64_t stream_id(std::uint32_t request, std::uint32_t step) noexcept {
  return (static_cast<std::uint64_t>(request) << 32) | step;
}

//! A sequential view of one Philox stream. Cheap to copy; copies continue independently.
//! next_u32() returns word (offset % 4) of block (offset / 4), so skipping ahead is O(1).
class philox_stream {
 public:
  SPECDEC_HOST_DEVICE constexpr philox_stream(std::uint64_t seed, std::uint64_t stream,
                                              std::uint64_t offset = 0) noexcept
      : seed_(seed), stream_(stream), offset_(offset) {}

  //! The 32-bit word at the current offset; advances by one word. The current 4-word block is
  //! cached, so sequential draws cost one Philox4x32-10 evaluation per four words.
  SPECDEC_HOST_DEVICE constexpr std::uint32_t next_u32() noexcept {
    const std::uint64_t block = offset_ >> 2;
    if (block != cached_block_) {
      cache_ = philox4x32_10(
          philox_block{{static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32),
                        static_cast<std::uint32_t>(stream_), static_cast<std::uint32_t>(stream_ >> 32)}},
          static_cast<std::uint32_t>(seed_), static_cast<std::uint32_t>(seed_ >> 32));
      cached_block_ = block;
    }
    const std::uint32_t word = cache_.v[offset_ & 3u];
    ++offset_;
    return word;
  }

  //! 64 random bits (two words).
  SPECDEC_HOST_DEVICE constexpr std::uint64_t next_u64() noexcept {
    const std::uint64_t lo = next_u32();
    return lo | (static_cast<std::uint64_t>(next_u32()) << 32);
  }

  //! Uniform float in [0, 1) with 24 random bits: k * 2^-24, k uniform in [0, 2^24).
  SPECDEC_HOST_DEVICE constexpr float uniform() noexcept {
    return static_cast<float>(next_u32() >> 8) * (1.0f / 16777216.0f);
  }

  //! Uniform float in (0, 1]: (k + 1) * 2^-24, safe to take the log of.
  SPECDEC_HOST_DEVICE constexpr float uniform_open0() noexcept {
    return static_cast<float>((next_u32() >> 8) + 1u) * (1.0f / 16777216.0f);
  }

  //! Uniform double in [0, 1) with 53 random bits.
  SPECDEC_HOST_DEVICE constexpr double uniform_double() noexcept {
    return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0);
  }

  //! Uniform integer in [0, n) by Lemire's multiply-shift (bias below 2^-32 * n; documented, not rejected).
  //! Precondition n >= 1, not checked (noexcept, callable on the device): [0, 0) is empty, and n = 0
  //! returns 0 after consuming a word. The library's callers check n first.
  SPECDEC_HOST_DEVICE constexpr std::uint32_t below(std::uint32_t n) noexcept {
    return static_cast<std::uint32_t>((static_cast<std::uint64_t>(next_u32()) * n) >> 32);
  }

  SPECDEC_HOST_DEVICE constexpr std::uint64_t offset() const noexcept { return offset_; }
  SPECDEC_HOST_DEVICE constexpr std::uint64_t seed() const noexcept { return seed_; }
  SPECDEC_HOST_DEVICE constexpr std::uint64_t stream() const noexcept { return stream_; }
  //! Jump to an absolute word offset.
  SPECDEC_HOST_DEVICE constexpr void seek(std::uint64_t offset) noexcept { offset_ = offset; }

 private:
  std::uint64_t seed_;
  std::uint64_t stream_;
  std::uint64_t offset_;
  // offset_ >> 2 never reaches 2^62, so ~0 marks "no block cached".
  std::uint64_t cached_block_ = ~std::uint64_t{0};
  philox_block cache_{};
};

}  // namespace specdec
