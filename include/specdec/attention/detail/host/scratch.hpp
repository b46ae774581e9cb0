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
//! each work item leases a free slot (scratch_lease); with a caller workspace the kernels still
//! allocate nothing. What stays on the stack is the lanes kernel's score block (32 KiB at any head_dim,
//! plus its widened K rows for fp16/bf16: 47 KiB in all at head_dim 256, -fstack-usage) and at most
//! about 16 KiB in the other kernels.

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

//! One work item's hold on a staging slot: the first free one of `count` (flags[s] != 0 while slot s
//! is held), released when the item ends. A pass runs at most `count` items at once (one per thread,
//! and at most host_threads of the policy: thread_pool::parallel_for never uses more), so a free slot
//! always exists; finding none would be a planning bug, reported by an exception rather than a write
//! past the workspace. A pass run inline inside an item (a nested call on the same thread) has its
//! own workspace and flags. The flags must be zero when the pass starts.
class scratch_lease {
 public:
  scratch_lease(std::int32_t* flags, int count) : flags_(flags) {
    for (int s = 0; s < count; ++s)
      if (std::atomic_ref<std::int32_t>(flags[s]).exchange(1, std::memory_order_acquire) == 0) {
        slot_ = s;
        return;
      }
    throw std::logic_error("specdec host attention: more concurrent work items than the plan has staging slots for");
  }
  ~scratch_lease() { std::atomic_ref<std::int32_t>(flags_[slot_]).store(0, std::memory_order_release); }
  scratch_lease(const scratch_lease&) = delete;
  scratch_lease& operator=(const scratch_lease&) = delete;

  [[nodiscard]] int slot() const noexcept { return slot_; }

 private:
  std::int32_t* flags_;
  int slot_ = 0;
};

}  // namespace specdec::detail
