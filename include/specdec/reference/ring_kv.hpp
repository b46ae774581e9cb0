#pragma once
//! \file reference/ring_kv.hpp
//! Naive oracle of kv/ring_kv.hpp for the tests: a sliding window that keeps the whole history, so
//! it has no slots, wrap-around or rollback bookkeeping to get wrong.

#include <algorithm>
#include <cstddef>
#include <vector>

namespace specdec::reference {

//! Keeps every appended row and returns the row of visible token t (0 = oldest of the newest
//! min(n, window) tokens). O(history) memory; obviously correct.
template <class T>
struct sliding_window_history {
  int kv_heads = 0, head_dim = 0, window = 0;
  std::vector<std::vector<T>> k, v;  //!< one [kv_heads * head_dim] row per appended token
  [[nodiscard]] int length() const {
    return static_cast<int>(std::min<std::size_t>(k.size(), static_cast<std::size_t>(window)));
  }
  [[nodiscard]] const T* k_row(int t, int h) const {
    return k[k.size() - static_cast<std::size_t>(length()) + static_cast<std::size_t>(t)].data() +
           static_cast<std::size_t>(h) * head_dim;
  }
  [[nodiscard]] const T* v_row(int t, int h) const {
    return v[v.size() - static_cast<std::size_t>(length()) + static_cast<std::size_t>(t)].data() +
           static_cast<std::size_t>(h) * head_dim;
  }
};

}  // namespace specdec::reference
