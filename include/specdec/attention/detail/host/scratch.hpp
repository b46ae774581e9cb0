#pragma once
//! \file scratch.hpp
//! Staging memory of the host attention kernels, in the call's workspace instead of on the stack.
//!
//! The tile kernel (attend_tiles.hpp) stages each 64-token K and V tile widened to fp32, and the rows
//! kernel (attend_rows.hpp) keeps up to 8 kv heads' query rows row-major: 2 * 64 * head_dim and
//! 8 * 8 * head_dim floats, 128 KiB and 64 KiB at head_dim 256. As stack arrays those frames
//! overflowed a thread with a small stack (musl gives new threads 128 KiB), the caller's own thread or
//! a pool worker alike. The plan (plan.hpp) now reserves one slot of host_kernel_scratch_floats per
//! thread that can run pass 2 (host_threads: the caller plus the pool workers the policy allows), and
//! each thread takes its slot through scratch_slots; with a caller workspace the kernels still
//! allocate nothing. What stays on the stack is at most about 40 KiB per kernel frame at head_dim 256
//! (the lanes kernel's scores), a few KiB at 64-128.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

namespace specdec::detail {

//! Floats of staging one thread's kernels need at head_dim `d`: the tile kernel's K and V tiles
//! (2 x 64 tokens x d; kv_tile, tile.inl), which also covers the rows kernel's query rows
//! (dot_heads x 8 x d; attend_rows.inl). Both kernels static_assert that they fit.
[[nodiscard]] constexpr std::size_t host_kernel_scratch_floats(int d) noexcept {
  return 2 * 64 * static_cast<std::size_t>(d);
}

//! Slot numbers for the threads of one parallel pass: the first item a thread runs claims the next
//! slot, its later items of the same pass reuse it (a per-thread record of the pass it claimed for).
//! A pass runs on at most `count` threads (host_threads of the policy: thread_pool::parallel_for
//! never uses more), so slots stay below `count`; one more would be a planning bug, reported by an
//! exception rather than a write past the workspace.
class scratch_slots {
 public:
  explicit scratch_slots(int count) noexcept : id_(next_id()), count_(count) {}
  scratch_slots(const scratch_slots&) = delete;
  scratch_slots& operator=(const scratch_slots&) = delete;

  //! The calling thread's slot in [0, count) for this pass.
  [[nodiscard]] int mine() {
    thread_local claim c;
    if (c.pass != id_) {
      const int s = next_.fetch_add(1, std::memory_order_relaxed);
      if (s >= count_) [[unlikely]]
        throw std::logic_error("specdec host attention: more threads in one pass than the plan has staging slots for");
      c.pass = id_;
      c.slot = s;
    }
    return c.slot;
  }

 private:
  struct claim {
    std::uint64_t pass = 0;  // 0: none (pass ids start at 1)
    int slot = 0;
  };
  static std::uint64_t next_id() noexcept {
    static std::atomic<std::uint64_t> n{0};
    return n.fetch_add(1, std::memory_order_relaxed) + 1;
  }
  std::uint64_t id_;
  std::atomic<int> next_{0};
  int count_;
};

}  // namespace specdec::detail
