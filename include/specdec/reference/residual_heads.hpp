#pragma once
//! \file reference/residual_heads.hpp
//! Double-precision reference of draft/residual_heads.hpp (TokenSwift Eq. 1) for the differential
//! tests: plain loops over h_i = act(W_i h_{i-1} + b_i) + h_{i-1}, no blocking, no vectors.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/draft/residual_heads.hpp"

namespace specdec::reference {

//! Returns [gamma, n, H]: h_1 .. h_gamma from h0 [n, H], weights [gamma, H, H] (W_i row-major, out x
//! in) and bias [gamma, H] (empty = no biases), all row-major contiguous. O(gamma n H^2).
//! Throws specdec::invalid_argument naming this function on n < 0, H < 1, gamma < 0, an unknown
//! activation, or an h0 / weights / bias (when not empty) of another size than n H / gamma H H / gamma H.
inline std::vector<double> residual_heads(const std::vector<double>& h0, const std::vector<double>& weights,
                                          const std::vector<double>& bias, int n, int H, int gamma,
                                          residual_activation act = residual_activation::identity) {
  {
    constexpr std::string_view fn = "specdec::reference::residual_heads";
    require(n >= 0, fn, "n", ">= 0", n);
    require(H >= 1, fn, "H", ">= 1", H);
    require(gamma >= 0, fn, "gamma", ">= 0", gamma);
    require(act == residual_activation::identity || act == residual_activation::silu, fn, "act",
            "residual_activation::identity or ::silu", static_cast<int>(act));
    const std::int64_t h0_size = checked_size_product(fn, "h0", {n, H});
    const std::int64_t w_size = checked_size_product(fn, "weights", {gamma, H, H});
    const std::int64_t b_size = checked_size_product(fn, "bias", {gamma, H});
    (void)checked_size_product(fn, "gamma", {gamma, n, H});  // the result's size
    if (!(h0.size() == static_cast<std::size_t>(h0_size))) [[unlikely]]
      throw_invalid_argument(fn, "h0", "n * H = " + std::to_string(h0_size) + " elements ([n, H])", h0.size());
    if (!(weights.size() == static_cast<std::size_t>(w_size))) [[unlikely]]
      throw_invalid_argument(fn, "weights", "gamma * H * H = " + std::to_string(w_size) + " elements ([gamma, H, H])",
                             weights.size());
    if (!(bias.empty() || bias.size() == static_cast<std::size_t>(b_size))) [[unlikely]]
      throw_invalid_argument(fn, "bias",
                             "0 (no biases) or gamma * H = " + std::to_string(b_size) + " elements ([gamma, H])",
                             bias.size());
  }
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
