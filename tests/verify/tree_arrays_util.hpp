#pragma once
// The outputs of the array-form tree verifiers (verify_greedy_batch, verify_sample_and_match_batch,
// verify_chain_speculative_batch) as host vectors, and the one check that they hold a
// verify_batch_result in the arrays' layout (accepted nodes at node_indptr[r], emitted tokens at
// node_indptr[r] + r). Shared by the host tests of the three array forms; the CUDA tests download
// into the same struct.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "specdec/core/tensor.hpp"
#include "specdec/tree/token_tree.hpp"
#include "specdec/verify/verify_result.hpp"

namespace specdec_test {

template <class T>
specdec::strided_view<T, 1> v1(std::vector<T>& x) {
  return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())});
}
template <class T>
specdec::strided_view<const T, 1> v1(const std::vector<T>& x) {
  return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())});
}

//! accepted [N], num_accepted and bonus [R], emitted [N + R], status [3], filled with markers.
struct tree_outputs {
  std::vector<std::int32_t> accepted, num_accepted, bonus, emitted, status{7, 7, 7};
  tree_outputs() = default;
  tree_outputs(std::size_t requests, std::size_t nodes)
      : accepted(nodes, -9), num_accepted(requests, -9), bonus(requests, -9), emitted(nodes + requests, -9) {}
  bool operator==(const tree_outputs&) const = default;
};

//! The outputs equal `expected` request by request, status {0, -1, -1}; returns the accepted count.
inline int check_tree_outputs(const specdec::verify_batch_result& expected, const std::vector<std::int32_t>& node_indptr,
                              const std::vector<std::int32_t>& tokens, const tree_outputs& o) {
  CHECK(o.status == std::vector<std::int32_t>{0, -1, -1});
  int total = 0;
  for (int r = 0; r + 1 < static_cast<int>(node_indptr.size()); ++r) {
    const auto want = expected.request(r);
    const auto k = static_cast<int>(want.accepted.size());
    REQUIRE(o.num_accepted[r] == k);
    CHECK(o.bonus[r] == want.bonus);
    const int b = node_indptr[r];
    for (int j = 0; j < k; ++j) {
      CHECK(o.accepted[b + j] == want.accepted[j]);
      CHECK(o.emitted[b + r + j] == tokens[b + want.accepted[j]]);
    }
    CHECK(o.emitted[b + r + k] == want.bonus);
    total += k;
  }
  return total;
}

//! The reference of an array-form batch: verify(tree, r, first_row, rows) -> verify_result on each
//! request's token_tree (first_row = node_indptr[r] + r, rows = n_r + 1), gathered.
template <class Verify>
specdec::verify_batch_result per_request(const std::vector<std::int32_t>& node_indptr,
                                         const std::vector<std::int32_t>& tokens,
                                         const std::vector<std::int32_t>& parents, Verify&& verify) {
  specdec::verify_batch_result out;
  for (int r = 0; r + 1 < static_cast<int>(node_indptr.size()); ++r) {
    const auto b = node_indptr[r], e = node_indptr[r + 1];
    const std::vector<std::int32_t> tok(tokens.begin() + b, tokens.begin() + e), par(parents.begin() + b, parents.begin() + e);
    out.push_back(verify(specdec::token_tree::from_parents(tok, par), r, static_cast<std::int64_t>(b) + r,
                         static_cast<std::int64_t>(e - b) + 1));
  }
  return out;
}

}  // namespace specdec_test
