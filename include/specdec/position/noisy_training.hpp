#pragma once
//! \file noisy_training.hpp
//! LongSpec's Flash Noisy Training (§3.2; pseudo code: Appendix G, Algorithm 2 of the later version):
//! a training-time simulation of the target KV cache lagging behind the draft's queries, expressed as
//! slices of Q and K/V so an unmasked (or plain causal) flash-attention kernel can run unchanged.
//!
//! For sequence length l and a shift j with 1 <= j < gamma (gamma = speculative steps), compute
//!   O_{>=j} = attn(Q_{>=j}, K_{<l-j}, V_{<l-j})
//! i.e. Q' = Q[j:] (drop the first j queries), K' = K[:-j], V' = V[:-j] (drop the last j keys), and
//! pad the output with j zero rows in front (Algorithm 2 lines 5-10). Algorithm 2 line 3 draws
//! j <- RandomInt(1, 4), both ends included, i.e. [1, gamma) for gamma = 5; here gamma is a parameter.
//! With a causal kernel (equal lengths, so top-left and bottom-right alignment agree) query t >= j
//! then sees exactly the keys s <= t - j; flash_noisy_visibility() gives that mask explicitly.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/bitmask.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/philox.hpp"

namespace specdec {

//! Index ranges (half-open, in the original sequence) Algorithm 2 slices for one sequence.
struct flash_noisy_slice {
  int shift = 0;        //!< j
  int query_begin = 0;  //!< j: Q' = Q[query_begin, query_end)
  int query_end = 0;    //!< l
  int key_begin = 0;    //!< 0: K' = K[key_begin, key_end), same for V
  int key_end = 0;      //!< l - j
  int pad_rows = 0;     //!< j zero output rows prepended (Algorithm 2 line 10)

  [[nodiscard]] int num_queries() const noexcept { return query_end - query_begin; }
  [[nodiscard]] int num_keys() const noexcept { return key_end - key_begin; }
  friend bool operator==(const flash_noisy_slice&, const flash_noisy_slice&) = default;
};

//! The slice for a given shift j: Q[j:], K[:l-j], j pad rows. Preconditions: 1 <= shift < seq_len.
//! O(1).
[[nodiscard]] inline flash_noisy_slice flash_noisy_slice_for(int seq_len, int shift) {
  constexpr std::string_view fn = "specdec::flash_noisy_slice_for";
  require(seq_len >= 2, fn, "seq_len", ">= 2 (room for one shift and one query)", seq_len);
  require_in_range(fn, "shift", shift, 1, seq_len - 1);
  return {shift, shift, seq_len, 0, seq_len - shift, shift};
}

//! Algorithm 2 line 3: j uniform in [1, gamma) from one word of `rng`. Preconditions: gamma >= 2.
//! O(1).
[[nodiscard]] inline int flash_noisy_draw_shift(int gamma, philox_stream& rng) {
  require(gamma >= 2, "specdec::flash_noisy_draw_shift", "gamma", ">= 2 (so that [1, gamma) is not empty)", gamma);
  return 1 + static_cast<int>(rng.below(static_cast<std::uint32_t>(gamma - 1)));
}

//! Algorithm 2 for one sequence: draws j in [1, gamma) and returns its slice. Preconditions:
//! gamma >= 2 and seq_len >= gamma (so every possible j leaves at least one query and one key). O(1).
[[nodiscard]] inline flash_noisy_slice flash_noisy_training(int seq_len, int gamma, philox_stream& rng) {
  constexpr std::string_view fn = "specdec::flash_noisy_training";
  require(gamma >= 2, fn, "gamma", ">= 2 (so that [1, gamma) is not empty)", gamma);
  if (!(seq_len >= gamma)) [[unlikely]]
    throw_invalid_argument(fn, "seq_len", "seq_len >= gamma = " + std::to_string(gamma), seq_len);
  return flash_noisy_slice_for(seq_len, flash_noisy_draw_shift(gamma, rng));
}

//! Ragged batch: sequence b draws from philox_stream(seed, stream_id(b, step)). Preconditions as for
//! flash_noisy_training for every length. O(batch).
[[nodiscard]] inline std::vector<flash_noisy_slice> flash_noisy_training_batch(std::uint64_t seed, std::uint32_t step,
                                                                               int gamma,
                                                                               std::span<const std::int32_t> seq_lens) {
  constexpr std::string_view fn = "specdec::flash_noisy_training_batch";
  require(gamma >= 2, fn, "gamma", ">= 2 (so that [1, gamma) is not empty)", gamma);
  for (std::size_t b = 0; b < seq_lens.size(); ++b)
    if (!(seq_lens[b] >= gamma)) [[unlikely]]
      throw_invalid_argument(
          fn, "seq_lens",
          "every length >= gamma = " + std::to_string(gamma) + " (at sequence " + std::to_string(b) + ")", seq_lens[b]);
  std::vector<flash_noisy_slice> out;
  out.reserve(seq_lens.size());
  for (std::size_t b = 0; b < seq_lens.size(); ++b) {
    philox_stream rng(seed, stream_id(static_cast<std::uint32_t>(b), step));
    out.push_back(flash_noisy_training(seq_lens[b], gamma, rng));
  }
  return out;
}

//! The [l x l] visibility (row = query t, column = key s, in the original coordinates) that running
//! attention on the slice implements: with `causal`, bit (t, s) iff t >= j and s <= t - j; without,
//! iff t >= j and s < l - j. Rows t < j are empty (their output is the zero padding). Useful to
//! check a training pipeline against a masked implementation. O(l^2 / 64) words.
[[nodiscard]] inline bit_matrix flash_noisy_visibility(const flash_noisy_slice& s, bool causal = true) {
  constexpr std::string_view fn = "specdec::flash_noisy_visibility";
  require(s.query_end >= 2, fn, "slice.query_end", ">= 2 (the sequence length)", s.query_end);
  const int l0 = s.query_end, j0 = s.shift;
  const bool consistent =
      j0 >= 1 && j0 < l0 && s.query_begin == j0 && s.key_begin == 0 && s.key_end == l0 - j0 && s.pad_rows == j0;
  require(consistent, fn, "slice",
          "consistent ranges as made by flash_noisy_slice_for (1 <= shift < query_end, query_begin = pad_rows = "
          "shift, key_begin = 0, key_end = query_end - shift); shift",
          j0);
  const int l = s.query_end, j = s.shift;
  bit_matrix m(l, l);
  for (int t = j; t < l; ++t) {
    const int last = causal ? t - j : l - j - 1;
    for (int k = 0; k <= last; ++k) m.set(t, k);
  }
  return m;
}

}  // namespace specdec
