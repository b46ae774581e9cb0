#pragma once
//! \file batch.hpp
//! Shared plumbing of the ragged-batch verifiers: per-request row slices and the parallel loop.

#include <cstdint>
#include <span>
#include <vector>

#include "specdec/core/execution.hpp"
#include "specdec/core/thread_pool.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/verify_result.hpp"

namespace specdec::detail {

//! Request r's tokens / parents (local) from a batch.
struct request_tree {
  std::span<const std::int32_t> tokens;
  std::span<const std::int32_t> parents;
};

inline request_tree batch_request(const token_tree_batch& b, int r) {
  const auto lo = static_cast<std::size_t>(b.node_indptr()[static_cast<std::size_t>(r)]);
  const auto n = static_cast<std::size_t>(b.num_nodes(r));
  return {b.tokens().subspan(lo, n), b.parents().subspan(lo, n)};
}

//! Rows of request r: it owns rows [node_indptr[r] + r, node_indptr[r+1] + r + 1).
inline prob_rows batch_rows(const prob_rows& all, const token_tree_batch& b, int r) {
  prob_rows p = all;
  const std::int64_t first = b.node_indptr()[static_cast<std::size_t>(r)] + r;
  p.data = all.data + first * all.row_stride;
  p.rows = b.num_nodes(r) + 1;
  p.request = r;
  p.first_row = first;
  return p;
}

//! Runs body(r) -> verify_result for every request in parallel and gathers the ragged result.
template <class Body>
verify_batch_result run_batch(const host& policy, int requests, Body&& body) {
  std::vector<verify_result> per(static_cast<std::size_t>(requests));
  parallel_for(policy, requests, [&](std::int64_t r) { per[static_cast<std::size_t>(r)] = body(static_cast<int>(r)); });
  return verify_batch_result::from(per);
}

}  // namespace specdec::detail
