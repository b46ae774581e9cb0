// Compiled by compile_fail.cmake (never built as part of the project): a user's KV mapping that is
// missing one member, used through the shipped kv_cache. Each MISSING_<X> / NOT_COPYABLE macro breaks
// one part; with none defined the mapping is complete and the file must compile (the positive control).
#include <cstdint>

#include "specdec/kv/kv_cache.hpp"

struct my_mapping {
  const std::int32_t* lens = nullptr;
#ifdef NOT_COPYABLE
  my_mapping() = default;
  my_mapping(const my_mapping&) = delete;
#endif
#ifndef MISSING_OFFSET
  std::int64_t offset(int r, int t, int h, const specdec::kv_geometry& g) const {
    return ((static_cast<std::int64_t>(r) * 16 + t) * g.num_kv_heads + h) * g.head_dim;
  }
#endif
#ifndef MISSING_LENGTH
  int length(int r) const { return lens[r]; }
#endif
};

specdec::kv_cache<float, my_mapping> cache;

int main() { return 0; }
