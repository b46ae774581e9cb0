// Compiled by compile_fail.cmake with nvcc (never built as part of the project): a user's KV mapping
// read from a CUDA kernel through the shipped kv_cache. With HOST_ONLY_MAPPING its members lack
// SPECDEC_HOST_DEVICE, so they are __host__ functions and nvcc must reject the kernel's call; without
// it the file is the positive control and must compile.
#include <cstdint>

#include "specdec/core/config.hpp"
#include "specdec/kv/kv_cache.hpp"

#ifdef HOST_ONLY_MAPPING
#define MAPPING_MEMBER
#else
#define MAPPING_MEMBER SPECDEC_HOST_DEVICE
#endif

struct my_mapping {
  const std::int32_t* lens = nullptr;
  MAPPING_MEMBER std::int64_t offset(int r, int t, int h, const specdec::kv_geometry& g) const {
    return ((static_cast<std::int64_t>(r) * 16 + t) * g.num_kv_heads + h) * g.head_dim;
  }
  MAPPING_MEMBER int length(int r) const { return lens[r]; }
};

// What an attention kernel does with a layout: read each request's length and its rows.
template <class Layout>
__global__ void sum_first_elements(Layout cache, float* out) {
  float s = 0;
  for (int t = 0; t < cache.length(blockIdx.x); ++t) s += *cache.k_row(blockIdx.x, t, 0);
  out[blockIdx.x] = s;
}

void launch(specdec::kv_cache<const float, my_mapping> cache, float* out) {
  sum_first_elements<<<cache.num_requests(), 1>>>(cache, out);
}

int main() { return 0; }
