#pragma once
//! \file prune.hpp
//! Node-budget pruning of a token tree: keep the best N nodes by cumulative score, ancestor-closed.

#include <cstdint>
#include <queue>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec {

//! Keeps at most `max_nodes` nodes of `tree`: the best by cumulative score (higher first, ties ->
//! lower node index; -inf "impossible" nodes rank last), chosen best-first from the root so the kept
//! set is always ancestor-closed
//! (a node is only eligible once its parent is kept). When every log-prob is <= 0, scores never
//! increase down a path and the result is exactly the global top-`max_nodes` by (score desc, index
//! asc). Kept nodes keep their relative order, so the result is topological; `kept` (optional)
//! receives the old index of each new node. max_nodes >= 0; max_nodes >= size() returns a copy.
//! O(n log n).
inline token_tree keep_best_nodes(const token_tree& tree, int max_nodes, std::vector<std::int32_t>* kept = nullptr) {
  require(max_nodes >= 0, "specdec::keep_best_nodes", "max_nodes", ">= 0", max_nodes);
  const int n = tree.size();
  std::vector<char> keep(static_cast<std::size_t>(n), 0);
  if (max_nodes >= n) {
    std::fill(keep.begin(), keep.end(), 1);
  } else if (max_nodes > 0) {
    // children in CSR form, so each node's children are pushed in O(deg)
    std::vector<std::int32_t> start(static_cast<std::size_t>(n) + 2, 0), child(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) ++start[static_cast<std::size_t>(tree.parents()[i] + 2)];
    for (std::size_t i = 1; i < start.size(); ++i) start[i] += start[i - 1];
    {
      std::vector<std::int32_t> fill(start.begin(), start.end() - 1);
      for (int i = 0; i < n; ++i) child[static_cast<std::size_t>(fill[static_cast<std::size_t>(tree.parents()[i] + 1)]++)] = i;
    }
    const auto scores = tree.scores();
    // A strict weak order because a token_tree never holds a NaN or +inf score (tree/token_tree.hpp),
    // so != and < below compare numbers and -inf only.
    const auto worse = [&](std::int32_t a, std::int32_t b) {  // priority_queue: top = best
      if (scores[a] != scores[b]) return scores[a] < scores[b];
      return a > b;
    };
    std::priority_queue<std::int32_t, std::vector<std::int32_t>, decltype(worse)> pq(worse);
    auto push_children = [&](std::int32_t p) {  // p = -1: root
      for (std::int32_t c = start[static_cast<std::size_t>(p + 1)]; c < start[static_cast<std::size_t>(p + 2)]; ++c)
        pq.push(child[static_cast<std::size_t>(c)]);
    };
    push_children(-1);
    for (int taken = 0; taken < max_nodes && !pq.empty(); ++taken) {
      const std::int32_t v = pq.top();
      pq.pop();
      keep[static_cast<std::size_t>(v)] = 1;
      push_children(v);
    }
  }
  std::vector<std::int32_t> remap(static_cast<std::size_t>(n), -1);
  token_tree out;
  if (kept) kept->clear();
  for (int i = 0; i < n; ++i) {
    if (!keep[static_cast<std::size_t>(i)]) continue;
    const std::int32_t p = tree.parents()[i];
    remap[static_cast<std::size_t>(i)] = out.add(tree.tokens()[i], p < 0 ? -1 : remap[static_cast<std::size_t>(p)],
                                                 tree.logprobs()[i]);
    if (kept) kept->push_back(i);
  }
  return out;
}

}  // namespace specdec
