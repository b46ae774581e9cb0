#pragma once
//! \file bitmask.hpp
//! Bit-packed boolean matrices: the tree-attention mask format of the design brief.
//! Row i occupies words_per_row(cols) 64-bit words; bit j of a row is word j/64, bit j%64 (LSB first).

#include <cstdint>
#include <vector>

#include "specdec/core/config.hpp"
#include "specdec/core/error.hpp"

namespace specdec {

using mask_word = std::uint64_t;

//! Number of 64-bit words that hold `cols` bits (precondition cols >= 0). The rounding runs in
//! unsigned arithmetic: `cols + 63` overflows int for cols > INT_MAX - 63 (words_per_row(INT_MAX) = 2^25).
SPECDEC_HOST_DEVICE constexpr int words_per_row(int cols) noexcept {
  return static_cast<int>((static_cast<unsigned>(cols) + 63u) / 64u);
}

//! Bit j of a packed row.
SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE constexpr bool test_bit(const mask_word* row, int j) noexcept {
  return ((row[j >> 6] >> (j & 63)) & 1u) != 0;
}

//! Set bit j of a packed row.
SPECDEC_HOST_DEVICE SPECDEC_FORCEINLINE constexpr void set_bit(mask_word* row, int j) noexcept {
  row[j >> 6] |= mask_word{1} << (j & 63);
}

//! Non-owning view of a rows x cols bit matrix, rows `row_stride` words apart.
struct bitmask_view {
  const mask_word* words = nullptr;
  int rows = 0;
  int cols = 0;
  int row_stride = 0;  //!< in words; at least words_per_row(cols)

  SPECDEC_HOST_DEVICE const mask_word* row(int i) const noexcept {
    return words + static_cast<std::int64_t>(i) * row_stride;
  }
  SPECDEC_HOST_DEVICE bool test(int i, int j) const noexcept { return test_bit(row(i), j); }
};

//! Owning host bit matrix (zero-initialised).
class bit_matrix {
 public:
  bit_matrix() = default;
  //! rows x cols zero bits; rows, cols >= 0 (checked before any storage is sized). The storage,
  //! rows * words_per_row(cols) words, always fits size_t; a matrix larger than memory throws
  //! std::bad_alloc like any container. O(rows * cols / 64).
  bit_matrix(int rows, int cols) : rows_(rows), cols_(cols), stride_(words_per_row(cols)), words_(checked_words(rows, cols), 0) {}
  [[nodiscard]] int rows() const noexcept { return rows_; }
  [[nodiscard]] int cols() const noexcept { return cols_; }
  [[nodiscard]] int row_stride() const noexcept { return stride_; }
  [[nodiscard]] bool test(int i, int j) const noexcept { return test_bit(row(i), j); }
  void set(int i, int j) noexcept { set_bit(row(i), j); }
  [[nodiscard]] mask_word* row(int i) noexcept { return words_.data() + static_cast<std::size_t>(i) * stride_; }
  [[nodiscard]] const mask_word* row(int i) const noexcept {
    return words_.data() + static_cast<std::size_t>(i) * stride_;
  }
  [[nodiscard]] const std::vector<mask_word>& words() const noexcept { return words_; }
  [[nodiscard]] bitmask_view view() const noexcept { return {words_.data(), rows_, cols_, stride_}; }
  friend bool operator==(const bit_matrix&, const bit_matrix&) = default;

 private:
  static std::size_t checked_words(int rows, int cols) {
    require(rows >= 0, "specdec::bit_matrix", "rows", ">= 0", rows);
    require(cols >= 0, "specdec::bit_matrix", "cols", ">= 0", cols);
    return static_cast<std::size_t>(rows) * static_cast<std::size_t>(words_per_row(cols));
  }
  int rows_ = 0, cols_ = 0, stride_ = 0;
  std::vector<mask_word> words_;
};

}  // namespace specdec
