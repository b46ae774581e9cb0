#pragma once
//! \file anchor_offset.hpp
//! LongSpec's Anchor-Offset Indices (§3.2; pseudo code: Appendix G, Algorithm 1 of the later
//! version), a position-index generator for short-context training of a long-context draft model.
//!
//! Algorithm 1:
//!   P <- {0, 1, ..., N-1}
//!   o <- RandomInt(0, MAX_LEN - N)      (both ends included: every index then stays < MAX_LEN)
//!   P[4:] += o                          (the first 4 "attention sink" anchors keep 0..3)
//! e.g. N = 128, o = 16257 gives [0, 1, 2, 3, 16261, ..., 16384]. (The paper prints 16385 as the
//! last index; 127 + 16257 = 16384, so that is a typo in the example, not a different rule.)
//!
//! The indices feed apply_rope (rope.hpp) for the queries/keys of the training sequence. The random
//! offset comes from specdec::philox_stream, so a (seed, sequence, step) triple reproduces it.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/tensor.hpp"

namespace specdec {

//! The number of attention-sink anchors LongSpec keeps at positions 0..3 (§3.2, Algorithm 1 line 5).
inline constexpr int longspec_num_anchors = 4;

namespace detail {
inline void validate_anchor_offset(int n, int max_len, int num_anchors, std::string_view fn) {
  require(n >= 0, fn, "n", "a sequence length >= 0", n);
  if (!(max_len >= n)) [[unlikely]]
    throw_invalid_argument(fn, "max_len",
                           "MAX_LEN >= n = " + std::to_string(n) + " (the offset range [0, MAX_LEN - n])", max_len);
  require(num_anchors >= 0, fn, "num_anchors", ">= 0", num_anchors);
}
}  // namespace detail

//! Algorithm 1 line 4: one offset o uniform in [0, max_len - n] (inclusive), drawn from `rng`
//! (one 32-bit word; Lemire multiply-shift, bias < (max_len - n + 1) / 2^32). Preconditions:
//! 0 <= n <= max_len. O(1).
[[nodiscard]] inline int anchor_offset_draw(int n, int max_len, philox_stream& rng) {
  detail::validate_anchor_offset(n, max_len, longspec_num_anchors, "specdec::anchor_offset_draw");
  const std::uint32_t range = static_cast<std::uint32_t>(max_len - n) + 1u;
  return static_cast<int>(rng.below(range));
}

//! Algorithm 1 lines 3 and 5 for a given offset: out[i] = i for i < num_anchors, i + offset
//! otherwise, for n = out.size(). Preconditions: offset >= 0, n - 1 + offset fits in int32,
//! num_anchors >= 0. O(n).
inline void anchor_offset_indices(int offset, std::span<std::int32_t> out, int num_anchors = longspec_num_anchors) {
  constexpr std::string_view fn = "specdec::anchor_offset_indices";
  require(num_anchors >= 0, fn, "num_anchors", ">= 0", num_anchors);
  require(offset >= 0, fn, "offset", ">= 0", offset);
  require(out.size() <= static_cast<std::size_t>(INT32_MAX), fn, "out", "size <= INT32_MAX", out.size());
  if (!(out.empty() || static_cast<std::int64_t>(out.size()) - 1 + offset <= INT32_MAX)) [[unlikely]]
    throw_invalid_argument(fn, "offset", "offset + n - 1 <= INT32_MAX (n = " + std::to_string(out.size()) + ")",
                           offset);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<std::int32_t>(i) + (static_cast<std::int64_t>(i) < num_anchors ? 0 : offset);
}

//! Algorithm 1 in full: draws o with anchor_offset_draw(n = out.size(), max_len, rng), writes the
//! anchor-offset indices into `out`, and returns o. Every index is < max_len. O(n).
inline int anchor_offset_indices(int max_len, philox_stream& rng, std::span<std::int32_t> out,
                                 int num_anchors = longspec_num_anchors) {
  constexpr std::string_view fn = "specdec::anchor_offset_indices";
  require(out.size() <= static_cast<std::size_t>(INT32_MAX), fn, "out", "size <= INT32_MAX", out.size());
  const int n = static_cast<int>(out.size());
  detail::validate_anchor_offset(n, max_len, num_anchors, fn);
  const int o = anchor_offset_draw(n, max_len, rng);
  anchor_offset_indices(o, out, num_anchors);
  return o;
}

//! Ragged-batch version for a training pipeline: sequence b (length lengths[b]) draws its offset from
//! philox_stream(seed, stream_id(b, step)), so batches are reproducible and independent of order.
//! Writes the indices of all sequences back to back into `out` (size sum(lengths)) and the offsets
//! into `offsets` (size lengths.size()). Preconditions: every 0 <= lengths[b] <= max_len, sizes as
//! stated, out and offsets apart from each other and from lengths. O(sum lengths).
inline void anchor_offset_indices_batch(std::uint64_t seed, std::uint32_t step, int max_len,
                                        std::span<const std::int32_t> lengths, std::span<std::int32_t> out,
                                        std::span<std::int32_t> offsets, int num_anchors = longspec_num_anchors) {
  constexpr std::string_view fn = "specdec::anchor_offset_indices_batch";
  require(num_anchors >= 0, fn, "num_anchors", ">= 0", num_anchors);
  if (!(offsets.size() == lengths.size())) [[unlikely]]
    throw_invalid_argument(fn, "offsets", "size == lengths.size() = " + std::to_string(lengths.size()), offsets.size());
  std::int64_t total = 0;
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    if (!(lengths[b] >= 0 && lengths[b] <= max_len)) [[unlikely]]
      throw_invalid_argument(
          fn, "lengths",
          "every length in [0, max_len = " + std::to_string(max_len) + "] (at sequence " + std::to_string(b) + ")",
          lengths[b]);
    total += lengths[b];
  }
  if (!(static_cast<std::int64_t>(out.size()) == total)) [[unlikely]]
    throw_invalid_argument(fn, "out", "size == sum(lengths) = " + std::to_string(total), out.size());
  const auto view = [](auto sp) { return make_view<1>(sp.data(), {static_cast<std::int64_t>(sp.size())}); };
  require_outputs_apart(fn, std::forward_as_tuple("out", view(out), "offsets", view(offsets)),
                        std::forward_as_tuple("lengths", view(lengths)));
  std::size_t at = 0;
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    philox_stream rng(seed, stream_id(static_cast<std::uint32_t>(b), step));
    const auto n = static_cast<std::size_t>(lengths[b]);
    offsets[b] = anchor_offset_indices(max_len, rng, out.subspan(at, n), num_anchors);
    at += n;
  }
}

}  // namespace specdec
