#pragma once
//! \file hash_slots.hpp
//! Open-addressing (linear probing) index of int32 ids by 64-bit hash. Keys are not stored: the
//! caller's predicate decides whether an id's key equals the probe key, so variable-length keys
//! (n-grams living in the caller's arrays) need no copies and hash collisions stay exact.
//! Load factor <= 1/2; erase uses backward-shift deletion (no tombstones). No allocation except
//! when growing.

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace specdec::detail {

class hash_slots {
 public:
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

  //! The id whose key matches (eq(id) true) among those stored with hash h, or -1.
  template <class Eq>
  [[nodiscard]] std::int32_t find(std::uint64_t h, Eq&& eq) const {
    if (cells_.empty()) return -1;
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      const cell& c = cells_[i];
      if (c.id < 0) return -1;
      if (c.h == h && eq(c.id)) return c.id;
    }
  }

  //! Stores id under h (the caller guarantees no equal key is present).
  void insert(std::uint64_t h, std::int32_t id) {
    if ((size_ + 1) * 2 > cells_.size()) grow();
    place(cells_, mask_, {h, id});
    ++size_;
  }

  //! Replaces the stored id of the matching key by `id`, or inserts it. Returns the old id or -1.
  template <class Eq>
  std::int32_t upsert(std::uint64_t h, std::int32_t id, Eq&& eq) {
    if (!cells_.empty()) {
      for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
        cell& c = cells_[i];
        if (c.id < 0) break;
        if (c.h == h && eq(c.id)) return std::exchange(c.id, id);
      }
    }
    insert(h, id);
    return -1;
  }

  //! Removes the cell holding `id` (stored under h). No-op if absent.
  void erase(std::uint64_t h, std::int32_t id) {
    if (cells_.empty()) return;
    std::size_t i = h & mask_;
    for (;; i = (i + 1) & mask_) {
      if (cells_[i].id < 0) return;
      if (cells_[i].id == id) break;
    }
    // backward-shift: pull later cells of the probe run into the hole when their home allows it
    for (std::size_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
      if (cells_[j].id < 0) break;
      const std::size_t home = cells_[j].h & mask_;
      // cell j may move to i iff its home is not in the cyclic interval (i, j]
      const bool in_between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
      if (!in_between) {
        cells_[i] = cells_[j];
        i = j;
      }
    }
    cells_[i] = cell{};
    --size_;
  }

  //! Empties the table, keeping its capacity (O(capacity)), so a reused index does not reallocate.
  void clear() {
    std::fill(cells_.begin(), cells_.end(), cell{});
    size_ = 0;
  }

 private:
  struct cell {
    std::uint64_t h = 0;
    std::int32_t id = -1;
  };
  static void place(std::vector<cell>& cells, std::size_t mask, cell c) {
    std::size_t i = c.h & mask;
    while (cells[i].id >= 0) i = (i + 1) & mask;
    cells[i] = c;
  }
  //! Strong guarantee: the larger table is built beside the old one and swapped in only when filled,
  //! so a failed allocation leaves every stored id, size() and the mask as they were.
  void grow() {
    std::vector<cell> bigger(cells_.empty() ? 16 : cells_.size() * 2, cell{});
    const std::size_t mask = bigger.size() - 1;
    for (const cell& c : cells_)
      if (c.id >= 0) place(bigger, mask, c);
    cells_.swap(bigger);
    mask_ = mask;
  }

  std::vector<cell> cells_;
  std::size_t mask_ = 0, size_ = 0;
};

}  // namespace specdec::detail
