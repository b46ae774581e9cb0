#pragma once
//! \file verify_result.hpp
//! The outcome of verifying one draft tree (or a ragged batch of them), shared by every verifier.
//!
//! Row convention of every verifier's inputs (binding for the decoder): for a tree of n nodes the
//! target output is n+1 rows; row 0 is the distribution at the root (the first new token), row i+1
//! the distribution after node i. Draft distributions (where a verifier needs them) use the same
//! layout: q at the root in row 0, q after node i in row i+1.
//!
//! Non-finite numbers (the policy of every token-producing entry point, sampling/sampler.hpp): a
//! verifier checks every probability it reads, in the pass that reads it, and rejects NaN, +-inf and
//! negative entries, and a row it must draw from that has no positive entry, with
//! specdec::invalid_argument naming the function, the tensor, the row (and the request in a batch) and
//! the token. Denormals are ordinary numbers. Entries a verifier never reads (rows past a rejection,
//! tokens of an accepted row other than the drafted one) cannot influence its result and are not
//! checked, so the check costs no extra pass. The result is always a token in [0, V).

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/sampling/detail/row_error.hpp"
#include "specdec/sampling/detail/vec.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! Accepted root path and the bonus token of one request. `accepted` lists node indices from the
//! root's child downwards (each the parent of the next); `bonus` is the token the target emits after
//! the last accepted node (or at the root when nothing was accepted). Tokens emitted this step:
//! accepted tokens then bonus, so 1 + accepted.size() tokens per target forward.
struct verify_result {
  std::vector<std::int32_t> accepted;
  std::int32_t bonus = -1;

  //! Number of tokens this step emits (accepted + bonus).
  [[nodiscard]] int num_emitted() const noexcept { return static_cast<int>(accepted.size()) + 1; }
  //! The emitted tokens: the accepted nodes' tokens from `tokens` (the tree's token array), then bonus.
  [[nodiscard]] std::vector<std::int32_t> emitted_tokens(std::span<const std::int32_t> tokens) const {
    std::vector<std::int32_t> out;
    out.reserve(accepted.size() + 1);
    for (auto i : accepted) {
      require(i >= 0 && static_cast<std::size_t>(i) < tokens.size(), "specdec::verify_result::emitted_tokens",
              "accepted node", "an index into tokens", i);
      out.push_back(tokens[static_cast<std::size_t>(i)]);
    }
    out.push_back(bonus);
    return out;
  }
  //! emitted_tokens for a token_tree.
  [[nodiscard]] std::vector<std::int32_t> emitted_tokens(const token_tree& tree) const {
    return emitted_tokens(tree.tokens());
  }
  friend bool operator==(const verify_result&, const verify_result&) = default;
};

//! Ragged-batch form: request r accepted local node indices accepted[accepted_indptr[r] ..
//! accepted_indptr[r+1]) (root child first) and emits bonus[r] after them.
struct verify_batch_result {
  std::vector<std::int32_t> accepted_indptr{0};  //!< [requests + 1]
  std::vector<std::int32_t> accepted;            //!< concatenated local node indices
  std::vector<std::int32_t> bonus;               //!< [requests]

  [[nodiscard]] int num_requests() const noexcept { return static_cast<int>(bonus.size()); }
  //! Request r's accepted nodes.
  //! Its offsets are checked first (the members are public: a hand-built result may disagree with
  //! itself): accepted_indptr has num_requests() + 1 entries and request r's lie within accepted.
  [[nodiscard]] std::span<const std::int32_t> accepted_nodes(int r) const {
    constexpr std::string_view fn = "specdec::verify_batch_result::accepted_nodes";
    require_in_range(fn, "r", r, 0, num_requests() - 1);
    require(accepted_indptr.size() == bonus.size() + 1, fn, "accepted_indptr.size()",
            "bonus.size() + 1 = " + std::to_string(bonus.size() + 1), accepted_indptr.size());
    const std::int32_t b = accepted_indptr[static_cast<std::size_t>(r)], e = accepted_indptr[static_cast<std::size_t>(r) + 1];
    if (!(b >= 0 && b <= e && static_cast<std::size_t>(e) <= accepted.size())) [[unlikely]]
      throw_invalid_argument(fn, "accepted_indptr",
                             "0 <= accepted_indptr[r] <= accepted_indptr[r + 1] <= accepted.size() = " +
                                 std::to_string(accepted.size()) + " (r = " + std::to_string(r) + ")",
                             "[" + std::to_string(b) + ", " + std::to_string(e) + ")");
    return std::span<const std::int32_t>(accepted).subspan(static_cast<std::size_t>(b), static_cast<std::size_t>(e - b));
  }
  //! Request r as a verify_result.
  [[nodiscard]] verify_result request(int r) const {
    const auto a = accepted_nodes(r);
    return verify_result{std::vector<std::int32_t>(a.begin(), a.end()), bonus[static_cast<std::size_t>(r)]};
  }
  //! Appends one request's result.
  void push_back(const verify_result& v) {
    accepted.insert(accepted.end(), v.accepted.begin(), v.accepted.end());
    accepted_indptr.push_back(static_cast<std::int32_t>(accepted.size()));
    bonus.push_back(v.bonus);
  }
  //! Builds the batch form from per-request results.
  static verify_batch_result from(std::span<const verify_result> results) {
    verify_batch_result b;
    for (const auto& v : results) b.push_back(v);
    return b;
  }
};

namespace detail {

//! Host rows [rows, V] of float with unit inner stride, from any tensor_like.
struct prob_rows {
  const float* data = nullptr;
  std::int64_t row_stride = 0;
  std::int64_t rows = 0;
  std::int64_t vocab = 0;
  std::int64_t request = -1;  //!< the request these rows belong to in a ragged batch (-1: none; messages only)
  std::int64_t first_row = 0; //!< the tensor row that row 0 is (messages only)
  [[nodiscard]] std::span<const float> row(std::int64_t r) const noexcept {
    return {data + r * row_stride, static_cast<std::size_t>(vocab)};
  }
  [[nodiscard]] float at(std::int64_t r, std::int64_t t) const noexcept { return data[r * row_stride + t]; }
  //! Row r for error messages (row_error.hpp).
  [[nodiscard]] row_ref ref(std::string_view function, std::string_view argument, std::int64_t r) const noexcept {
    return request < 0 ? row_ref{function, argument, r} : row_ref{function, argument, first_row + r, request, r};
  }
};

//! One row a verifier's walk reads: its entries (checked, or valid by construction) and its name for
//! error messages. The walks that take their rows from callables (chain_speculative_walk_by,
//! multi_draft_walk_by) get them as this.
struct walk_row {
  std::span<const float> v;
  row_ref at;
};

//! rows.at(r, t) after the non-finite policy's check (finite, >= 0); throws invalid_argument naming
//! the row and token otherwise.
inline float checked_prob(const prob_rows& rows, std::int64_t r, std::int64_t t, std::string_view function,
                          std::string_view argument) {
  const float v = rows.at(r, t);
  if (!admissible_prob(v)) [[unlikely]]
    throw_bad_entry(rows.ref(function, argument, r), bad_prob_text, t, v);
  return v;
}

//! Checks every entry of row.v under the non-finite policy (finite, >= 0); throws naming row.at and
//! the first bad token. The stochastic verifiers run it on each row their walk uses before its first
//! draw there, so no accept / reject decision is ever taken on a row that is not a distribution,
//! whichever entries the decision happens to read. O(V), vectorized.
inline void check_prob_row(const walk_row& row) {
  if (any_inadmissible_prob(row.v.data(), row.v.size())) [[unlikely]] {
    const std::size_t t = first_inadmissible_prob(row.v.data(), row.v.size());
    throw_bad_entry(row.at, bad_prob_text, static_cast<std::int64_t>(t), row.v[t]);
  }
}

//! The same for rows.row(r), named `function`, `argument` and the row.
inline void check_prob_row(const prob_rows& rows, std::int64_t r, std::string_view function, std::string_view argument) {
  check_prob_row(walk_row{rows.row(r), rows.ref(function, argument, r)});
}

template <tensor_like T>
prob_rows to_rows(const T& t, std::int64_t expect_rows, std::string_view function, std::string_view argument) {
  static_assert(T::rank == 2, "specdec verifiers: logits/probability tensors must be rank 2 [rows, vocab]");
  static_assert(std::is_same_v<std::remove_cv_t<typename T::element_type>, float>,
                "specdec verifiers: logits/probability tensors must hold float");
  const auto v = as_view(t);
  require_host_accessible(function, argument, v);
  require_shape(function, argument, v, {expect_rows, -1});
  // token ids are int32: a row past INT32_MAX entries would hand back a wrapped, negative id
  require(v.extent(1) >= 1 && v.extent(1) <= std::numeric_limits<std::int32_t>::max(), function, argument,
          "vocab (extent 1) in [1, INT32_MAX] (token ids are int32)", v.extent(1));
  require_unit_inner_stride(function, argument, v);
  // no row is read when there are none (a batch of 0 requests; an empty vector's data() is null)
  require(v.data() != nullptr || v.extent(0) == 0, function, argument, "non-null data", "nullptr");
  return prob_rows{v.data(), v.stride(0), v.extent(0), v.extent(1)};
}

//! Children lists (CSR, index order) of a tree given as parents[] (-1 = root), in one allocation:
//! buf[0, n+3) are offsets by slot (slot = node + 1, slot 0 = the root), buf[n+3, 2n+3) the children.
struct child_index {
  std::vector<std::int32_t> buf;
  std::size_t n = 0;
  explicit child_index(std::span<const std::int32_t> parents) : buf(2 * parents.size() + 3, 0), n(parents.size()) {
    std::int32_t* off = buf.data();
    std::int32_t* kids = buf.data() + n + 3;
    for (auto p : parents) ++off[static_cast<std::size_t>(p + 3)];  // count of slot s stored at off[s + 2]
    for (std::size_t i = 1; i < n + 3; ++i) off[i] += off[i - 1];   // off[s + 1] = start of slot s
    for (std::size_t i = 0; i < n; ++i) kids[off[static_cast<std::size_t>(parents[i] + 2)]++] = static_cast<std::int32_t>(i);
    // each slot's start advanced to its end, which is the next slot's start: off[s] = start of slot s
  }
  //! Children of node `node` (-1 = root), index order.
  [[nodiscard]] std::span<const std::int32_t> of(std::int32_t node) const noexcept {
    const auto slot = static_cast<std::size_t>(node + 1);
    const std::int32_t b = buf[slot], e = buf[slot + 1];
    return {buf.data() + n + 3 + b, static_cast<std::size_t>(e - b)};
  }
};

inline void check_tokens_in_vocab(std::span<const std::int32_t> tokens, std::int64_t vocab, std::string_view function) {
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab) [[unlikely]]
      throw_invalid_argument(function, "tree.tokens[" + std::to_string(i) + "]",
                             "a token id in [0, vocab = " + std::to_string(vocab) + ")", tokens[i]);
}

}  // namespace detail
}  // namespace specdec
