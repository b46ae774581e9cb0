#pragma once
//! \file reference/residual_heads.hpp
//! Double-precision reference of draft/residual_heads.hpp (TokenSwift Eq. 1) for the differential
//! tests: plain loops over h_i = act(W_i h_{i-1} + b_i) + h_{i-1}, no blocking, no vectors.

#include <cmath>
#include <cstddef>
#include <vector>

#include "specdec/draft/residual_heads.hpp"

namespace specdec::reference {

//! Returns [gamma, n, H]: h_1 .. h_gamma from h0 [n, H], weights [gamma, H, H] (W_i row-major, out x
//! in) and bias [gamma, H] (empty = no biases), all row-major contiguous. O(gamma n H^2).
inline std::vector<double> residual_heads(const std::vector<double>& h0, const std::vector<double>& weights,
                                          const std::vector<double>& bias, int n, int H, int gamma,
                                          residual_activation act = residual_activation::identity) {
  const auto sz = [](auto a) { return static_cast<std::size_t>(a); };
  std::vector<double> out(sz(gamma) * sz(n) * sz(H));
  std::vector<double> prev(h0.begin(), h0.begin() + static_cast<std::ptrdiff_t>(n) * H);
  for (int i = 0; i < gamma; ++i) {
    for (int r = 0; r < n; ++r)
      for (int j = 0; j < H; ++j) {
        double z = bias.empty() ? 0.0 : bias[sz(i) * sz(H) + sz(j)];
        for (int c = 0; c < H; ++c) z += weights[(sz(i) * sz(H) + sz(j)) * sz(H) + sz(c)] * prev[sz(r) * sz(H) + sz(c)];
        if (act == residual_activation::silu) z = z / (1.0 + std::exp(-z));
        out[(sz(i) * sz(n) + sz(r)) * sz(H) + sz(j)] = z + prev[sz(r) * sz(H) + sz(j)];
      }
    prev.assign(out.begin() + static_cast<std::ptrdiff_t>(sz(i) * sz(n) * sz(H)),
                out.begin() + static_cast<std::ptrdiff_t>(sz(i + 1) * sz(n) * sz(H)));
  }
  return out;
}

}  // namespace specdec::reference
