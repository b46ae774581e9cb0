#pragma once
//! \file reference/rope.hpp
//! Double-precision reference of position/rope.hpp for the tests: the obvious loops over (token,
//! head, pair), every step in double.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "specdec/position/rope.hpp"

namespace specdec::reference {

//! out = RoPE(x) with every step in double (inverse frequencies from rope_inv_frequencies, so
//! Llama-3.1 scaling included). x and out are [tokens, heads, head_dim] row-major.
//! O(tokens * heads * head_dim).
inline void rope(const rope_params& params, int tokens, int heads, int head_dim, const double* x,
                 const std::int32_t* positions, double* out) {
  const std::vector<double> inv = rope_inv_frequencies(params, head_dim);
  const int r = static_cast<int>(inv.size()) * 2;
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h) {
      const double* xi = x + (static_cast<std::size_t>(t) * heads + h) * head_dim;
      double* o = out + (static_cast<std::size_t>(t) * heads + h) * head_dim;
      for (int d = 0; d < head_dim; ++d) o[d] = xi[d];
      for (int i = 0; i < r / 2; ++i) {
        const int a = params.style == rope_style::rotate_half ? i : 2 * i;
        const int b = params.style == rope_style::rotate_half ? i + r / 2 : 2 * i + 1;
        const double angle = static_cast<double>(positions[t]) * inv[i];
        o[a] = xi[a] * std::cos(angle) - xi[b] * std::sin(angle);
        o[b] = xi[b] * std::cos(angle) + xi[a] * std::sin(angle);
      }
    }
}

}  // namespace specdec::reference
