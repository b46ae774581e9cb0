#pragma once
//! \file logits_walk.cuh
//! The device half of logits_walk.hpp: what the logits-form kernels of the stochastic verifiers
//! (sample_and_match_logits_kernel, chain_speculative_logits_kernel, multi_draft_logits_kernel) share.
//!   cdf_walk_shared        a walk's draw storage (block sums and cdf_draw_block's words);
//!   logits_walk_shared     that storage and the row functions' (row_kernel_shared) over one another:
//!                          a row is processed before the walk draws from it, never while;
//!   block_logits_walk_row  the row step: row i of the logits into request r's workspace row,
//!                          processed and turned into probabilities there.

#include <cstdint>

#include "specdec/sampling/detail/cdf_device.cuh"
#include "specdec/sampling/logits_processor.cuh"
#include "specdec/verify/detail/logits_walk.hpp"

namespace specdec::detail {

//! A walk's draw storage in shared memory: the block sums of cdf_block_sums and cdf_draw_block's words.
struct cdf_walk_shared {
  double bs[device_cdf_max_blocks];
  cdf_draw_shared draw;
};

//! The shared memory of a logits-form kernel: the row functions' while block_logits_walk_row runs, the
//! walk's draw storage otherwise. They share the bytes (the multi-draft walk's residual lists and both
//! would not fit the 48 KB a block may declare with room to spare): block_logits_walk_row starts and
//! ends with a barrier, so no thread touches one while another uses the other.
union logits_walk_shared {
  row_kernel_shared row;
  cdf_walk_shared cdf;
};

//! Row i of the target's logits (request r's) copied into request r's workspace row, processed there
//! (block_process_row: process_logits_batch's steps and reports, device_error::params / context / row
//! with i) and turned into probabilities in place (block_probs_row). Returns the row, or nullptr after
//! the report. Every thread calls it; the result is uniform. Reads of the returned row must be plain
//! loads (this kernel wrote it).
__device__ inline const float* block_logits_walk_row(const logits_walk_rows& w, std::int32_t r, std::int64_t i,
                                                     logits_walk_shared& sh) {
  const process_logits_batch_args& a = w.rows;
  const float* src = a.logits + i * a.stride;
  float* work = w.workspace + r * w.workspace_stride;
  __syncthreads();  // every thread is done with the request's previous row and with the draw storage
  for (std::int64_t k = threadIdx.x; k < a.vocab; k += process_threads) work[k] = src[k];
  __syncthreads();
  const bool ok = block_process_row(a, i, work, sh.row) && block_probs_row(work, work, a.vocab, a.status, i, sh.row);
  __syncthreads();  // sh.row is done before the walk's draw storage is written
  return ok ? work : nullptr;
}

}  // namespace specdec::detail
