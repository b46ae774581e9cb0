#pragma once
//! \file reference/rope.hpp
//! Double-precision reference of position/rope.hpp for the tests: the obvious loops over (token,
//! head, pair), every step in double.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/position/rope.hpp"

namespace specdec::reference {

//! out = RoPE(x) with every step in double (inverse frequencies from rope_inv_frequencies, so
//! Llama-3.1 scaling included). x and out are [tokens, heads, head_dim] row-major.
//! O(tokens * heads * head_dim). Throws specdec::invalid_argument naming this function on bad
//! params / head_dim (validate_rope_params, as apply_rope), tokens or heads < 0, a null x, positions
//! or out (when they have elements), a negative position (as apply_rope on the host), or an out
//! overlapping x (x is read after out is written).
inline void rope(const rope_params& params, int tokens, int heads, int head_dim, const double* x,
                 const std::int32_t* positions, double* out) {
  {
    constexpr std::string_view fn = "specdec::reference::rope";
    (void)specdec::detail::validate_rope_params(params, head_dim, fn);
    require(tokens >= 0, fn, "tokens", ">= 0", tokens);
    require(heads >= 0, fn, "heads", ">= 0", heads);
    const std::int64_t elements = checked_size_product(fn, "x", {tokens, heads, head_dim});
    if (elements > 0) {
      if (x == nullptr) [[unlikely]]
        throw_invalid_argument(fn, "x", "a non-null pointer (tokens * heads * head_dim elements)", "nullptr");
      if (out == nullptr) [[unlikely]]
        throw_invalid_argument(fn, "out", "a non-null pointer (tokens * heads * head_dim elements)", "nullptr");
      const auto xa = reinterpret_cast<std::uintptr_t>(x), oa = reinterpret_cast<std::uintptr_t>(out);
      const auto bytes = static_cast<std::uintptr_t>(elements) * sizeof(double);
      if (xa < oa + bytes && oa < xa + bytes) [[unlikely]]
        throw_invalid_argument(fn, "out", "memory disjoint from x (x is read after out is written)",
                               "an overlapping buffer");
    }
    if (tokens > 0 && positions == nullptr) [[unlikely]]
      throw_invalid_argument(fn, "positions", "a non-null pointer (one position per token)", "nullptr");
    for (int t = 0; t < tokens; ++t)
      if (!(positions[t] >= 0)) [[unlikely]]
        throw_invalid_argument(fn, "positions", "every position >= 0 (at token " + std::to_string(t) + ")",
                               positions[t]);
  }
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
