#pragma once
//! \file reference/ring_kv.hpp
//! Naive oracle of kv/ring_kv.hpp for the tests: a sliding window that keeps the whole history, so
//! it has no slots, wrap-around or rollback bookkeeping to get wrong.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"

namespace specdec::reference {

//! Keeps every appended row and returns the row of visible token t (0 = oldest of the newest
//! min(n, window) tokens). O(history) memory; obviously correct. An aggregate (filled with
//! `{kv_heads, head_dim, window}` and push_back); the accessors check what they read: window >= 1
//! (as kv/ring_kv.hpp), t in [0, length()), h in [0, kv_heads), k and v holding as many rows, each
//! of kv_heads * head_dim elements, and throw specdec::invalid_argument otherwise.
template <class T>
struct sliding_window_history {
  int kv_heads = 0, head_dim = 0, window = 0;
  std::vector<std::vector<T>> k, v;  //!< one [kv_heads * head_dim] row per appended token
  [[nodiscard]] int length() const {
    require(window >= 1, "specdec::reference::sliding_window_history::length", "window", "window >= 1", window);
    return static_cast<int>(std::min<std::size_t>(k.size(), static_cast<std::size_t>(window)));
  }
  [[nodiscard]] const T* k_row(int t, int h) const {
    check_row("specdec::reference::sliding_window_history::k_row", k, "k", t, h);
    return k[k.size() - static_cast<std::size_t>(length()) + static_cast<std::size_t>(t)].data() +
           static_cast<std::size_t>(h) * head_dim;
  }
  [[nodiscard]] const T* v_row(int t, int h) const {
    check_row("specdec::reference::sliding_window_history::v_row", v, "v", t, h);
    return v[v.size() - static_cast<std::size_t>(length()) + static_cast<std::size_t>(t)].data() +
           static_cast<std::size_t>(h) * head_dim;
  }

 private:
  //! The checks of k_row / v_row: the row (t, h) of `rows` that the accessor returns exists.
  void check_row(std::string_view fn, const std::vector<std::vector<T>>& rows, std::string_view name, int t,
                 int h) const {
    require(window >= 1, fn, "window", "window >= 1", window);
    require(kv_heads >= 1, fn, "kv_heads", ">= 1", kv_heads);
    require(head_dim >= 0, fn, "head_dim", ">= 0", head_dim);
    require(v.size() == k.size(), fn, "v", "as many rows as k (one per appended token)", v.size());
    const int len = static_cast<int>(std::min<std::size_t>(k.size(), static_cast<std::size_t>(window)));
    if (!(t >= 0 && t < len)) [[unlikely]]
      throw_invalid_argument(fn, "t", "a visible token in [0, length() = " + std::to_string(len) + ")", t);
    if (!(h >= 0 && h < kv_heads)) [[unlikely]]
      throw_invalid_argument(fn, "h", "a kv head in [0, kv_heads = " + std::to_string(kv_heads) + ")", h);
    const std::vector<T>& row = rows[rows.size() - static_cast<std::size_t>(len) + static_cast<std::size_t>(t)];
    const std::int64_t row_size = static_cast<std::int64_t>(kv_heads) * head_dim;
    if (!(static_cast<std::int64_t>(row.size()) == row_size)) [[unlikely]]
      throw_invalid_argument(fn, name,
                             "rows of kv_heads * head_dim = " + std::to_string(row_size) + " elements (row of token " +
                                 std::to_string(t) + ")",
                             row.size());
  }
};

}  // namespace specdec::reference
