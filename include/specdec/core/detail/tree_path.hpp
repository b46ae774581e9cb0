#pragma once
//! \file tree_path.hpp
//! The one check that a list of node indices is a root path of a tree given as a parents array: a
//! commit's `accepted` (kv/commit.hpp) and a verifier's result in the decoder
//! (decoder/speculative_batch.hpp). It lives in core because kv and tree are independent layers
//! (design.md) and both ends need it, as the bit-mask type does.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "specdec/core/error.hpp"

namespace specdec::detail {

//! `path` (named `arg` in messages, its entries `arg[j]`) must be a root path of the tree of
//! `tree_size` nodes given by `parents`: parents[a_0] == -1 and parents[a_j] == a_{j-1}; hence strictly
//! increasing and in [0, tree_size). With empty `parents` only "strictly increasing within
//! [0, tree_size)" is checked (the tree is then the caller's responsibility). Throws
//! specdec::invalid_argument naming `fn`, the entry and the rule it breaks.
inline void validate_accepted_path(std::span<const std::int32_t> path, int tree_size,
                                   std::span<const std::int32_t> parents, std::string_view fn,
                                   std::string_view arg = "accepted") {
  require(parents.empty() || parents.size() == static_cast<std::size_t>(tree_size), fn, "parents.size()",
          "0 or tree_size = " + std::to_string(tree_size), parents.size());
  std::int32_t prev = -1;
  for (std::size_t j = 0; j < path.size(); ++j) {
    const std::int32_t a = path[j];
    if (a <= prev || a >= tree_size) [[unlikely]]
      throw_invalid_argument(fn, std::string(arg) + "[" + std::to_string(j) + "]",
                             "the node indices of a root path: strictly increasing, in [0, tree_size = " +
                                 std::to_string(tree_size) + ")",
                             a);
    if (!parents.empty() && parents[static_cast<std::size_t>(a)] != prev) [[unlikely]]
      throw_invalid_argument(fn, std::string(arg) + "[" + std::to_string(j) + "]",
                             "a root path (parent of node " + std::to_string(a) + " == " + std::to_string(prev) + ")",
                             parents[static_cast<std::size_t>(a)]);
    prev = a;
  }
}

}  // namespace specdec::detail
