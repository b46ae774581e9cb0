#pragma once
//! \file plan.cuh
//! Level 3 of the CUDA attention backend (see launch.cuh): the launch plan (cache chunks, parts,
//! row tiles, workspace bytes), fixed on the host from sizes and the SM count only.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "specdec/attention/detail/cuda_common.cuh"
#include "specdec/core/error.hpp"

namespace specdec::detail {

//! Host-side launch plan shared by the *_workspace_bytes(cuda, ...) functions and the calls, so
//! both always agree. Depends only on host-known sizes and the device's SM count, or on
//! attention_options::kv_chunks when the caller fixes it.
struct cuda_attention_plan {
  int num_chunks = 0;
  int num_parts = 0;
  long long row_tiles = 0;
  std::size_t o_bytes = 0, lse_bytes = 0;
  [[nodiscard]] std::size_t bytes() const noexcept { return o_bytes + lse_bytes; }
};

[[nodiscard]] inline cuda_attention_plan plan_cuda_attention(std::string_view fn, bool has_cache, bool has_tree,
                                                             long long tokens, int num_requests, int hq, int hkv,
                                                             int head_dim, int kv_chunks = 0) {
  cuda_attention_plan pl;
  if (tokens == 0) return pl;
  const long long group = hq / hkv;
  // Row tiles actually used: sum_r ceil(n_r * group / 64), between these bounds.
  const long long tiles_min = std::max<long long>((tokens * group + 63) / 64, std::min<long long>(num_requests, tokens));
  pl.row_tiles = (tokens * group + 63) / 64 + num_requests;
  require(pl.row_tiles <= INT32_MAX, fn, "q", "fewer than 2^31 row tiles (cuda grid limit)", pl.row_tiles);
  if (has_cache) {
    // One full wave at two CTAs per SM: C chunks x Hkv heads x row tiles <= 2 x SMs (rounding C
    // down, not up: a second, nearly empty wave would halve the achieved bandwidth).
    const long long want = 2LL * cuda_sm_count();
    const long long per_chunk = static_cast<long long>(hkv) * tiles_min;
    pl.num_chunks = static_cast<int>(std::min<long long>(std::max<long long>(want / per_chunk, 1), 1024));
    if (kv_chunks > 0) pl.num_chunks = kv_chunks;  // the caller's (attention_options::kv_chunks: batch invariance)
  }
  pl.num_parts = pl.num_chunks + (has_tree ? 1 : 0);
  const auto round256 = [](std::size_t b) { return (b + 255) / 256 * 256; };
  const std::size_t rows = static_cast<std::size_t>(pl.num_parts) * static_cast<std::size_t>(tokens) *
                           static_cast<std::size_t>(hq);
  pl.o_bytes = round256(rows * static_cast<std::size_t>(head_dim) * sizeof(float));
  pl.lse_bytes = round256(rows * sizeof(float));
  return pl;
}

}  // namespace specdec::detail
