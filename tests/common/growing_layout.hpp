#pragma once
// A user's KV layout whose length() answers `first` (4) for its first `calls_before` calls, then
// `then` (1000; every token is one row, so each length is memory-safe for the cache itself): for the
// entry points that must read a length once, or re-check it, where a user's type could change its
// answer in between. {.., 1000, 4} shrinks instead.
#include "specdec/core/tensor.hpp"

namespace specdec_test {
struct growing_layout {
  using value_type = float;
  const float* row;
  int calls_before;
  int* calls;
  int first = 4, then = 1000;
  int num_requests() const { return 1; }
  int num_kv_heads() const { return 1; }
  int head_dim() const { return 64; }
  int length(int) const { return (*calls)++ < calls_before ? first : then; }
  const float* k_row(int, int, int) const { return row; }
  const float* v_row(int, int, int) const { return row; }
  specdec::memory_space space() const { return specdec::memory_space::host; }
};
}  // namespace specdec_test
