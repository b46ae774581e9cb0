// Compiled by compile_fail.cmake (never built as part of the project): a user's KV layout that is
// missing one member. Each MISSING_<X> macro removes one member; with none defined the type is a
// complete kv_layout and the file must compile (the positive control proves the failures below are
// caused by the missing member and not by a typo here).
#include <cstdint>

#include "specdec/kv/kv_layout.hpp"

struct my_layout {
#ifndef MISSING_VALUE_TYPE
  using value_type = float;
#endif
  float* k = nullptr;
  float* v = nullptr;
#ifndef MISSING_NUM_REQUESTS
  int num_requests() const { return 1; }
#endif
#ifndef MISSING_NUM_KV_HEADS
  int num_kv_heads() const { return 1; }
#endif
#ifndef MISSING_HEAD_DIM
  int head_dim() const { return 4; }
#endif
#ifndef MISSING_LENGTH
  int length(int) const { return 0; }
#endif
#ifndef MISSING_K_ROW
  float* k_row(int, int t, int) const { return k + 4 * t; }
#endif
#ifndef MISSING_V_ROW
  float* v_row(int, int t, int) const { return v + 4 * t; }
#endif
#ifndef MISSING_SPACE
  specdec::memory_space space() const { return specdec::memory_space::host; }
#endif
};

static_assert(specdec::check_kv_layout<my_layout>());

int main() { return 0; }
