#pragma once
//! \file glide_block_mask.hpp
//! GLIDE's block-wise attention mask for training the draft's cross-attention (GLIDE §4.1,
//! "Block-wise Attention Mask"): the training sequence is cut into blocks of L tokens (L = 5 in the
//! paper) and
//!   Mask_Block(A_jk) = A_jk if block(j) > block(k), -inf otherwise,   block(x) = floor(x / L)
//! so a draft query in block i sees the target's KV of blocks 0..i-1 only, simulating the KV-cache
//! delay of inference (the target's cache ends at the last verified token). Rows of block 0 see no
//! key at all (their attention LSE is -inf; attention kernels treat such rows as "no keys").
//! The mask is only used for the cross-attention sub-layers during training (not at test time).

#include <cstdint>
#include <string>

#include "specdec/core/bitmask.hpp"
#include "specdec/core/error.hpp"

namespace specdec {

//! GLIDE's block length in the paper's experiments (§4.1).
inline constexpr int glide_default_block_length = 5;

//! block(x) = floor(x / L) (0-based). Preconditions: x >= 0, block_length >= 1. O(1).
[[nodiscard]] inline int glide_block_of(int x, int block_length = glide_default_block_length) {
  constexpr std::string_view fn = "specdec::glide_block_of";
  require(x >= 0, fn, "x", "a token index >= 0", x);
  require(block_length >= 1, fn, "block_length", ">= 1", block_length);
  return x / block_length;
}

//! The [seq_len x seq_len] bit-packed block-wise mask (row = query j, column = key k, bit set iff
//! block(j) > block(k)), format of core/bitmask.hpp (LSB first, words_per_row(seq_len) words per row).
//! Row j has exactly block(j) * L leading bits set. Preconditions: seq_len >= 0, block_length >= 1.
//! O(seq_len^2 / 64).
[[nodiscard]] inline bit_matrix glide_block_mask(int seq_len, int block_length = glide_default_block_length) {
  constexpr std::string_view fn = "specdec::glide_block_mask";
  require(seq_len >= 0, fn, "seq_len", ">= 0", seq_len);
  require(block_length >= 1, fn, "block_length", ">= 1", block_length);
  bit_matrix m(seq_len, seq_len);
  for (int j = 0; j < seq_len; ++j) {
    const int visible = (j / block_length) * block_length;  // keys 0 .. visible-1 lie in earlier blocks
    mask_word* row = m.row(j);
    int k = 0;
    for (; k + 64 <= visible; k += 64) row[k >> 6] = ~mask_word{0};
    for (; k < visible; ++k) set_bit(row, k);
  }
  return m;
}

}  // namespace specdec
