#pragma once
//! \file rope.hpp
//! Rotary position embedding (RoPE, Su et al. 2024) applied in place at arbitrary per-token positions.
//!
//! Speculative decoding needs RoPE at positions that are not 0..n-1: a tree token sits at
//! committed length + depth (design brief), and LongSpec's anchor-offset training indices
//! (§3.2, Appendix G Algorithm 1, see anchor_offset.hpp) jump from 3 to a large offset. So every
//! entry point takes an explicit int32 position per token.
//!
//! Conventions:
//!  - rope_style::rotate_half (LLaMA / GPT-NeoX): dimension i is paired with i + R/2, R = rotary dim.
//!  - rope_style::interleaved (GPT-J): dimension 2i is paired with 2i + 1.
//!  Pair i rotates by angle pos * inv_freq[i], inv_freq[i] = theta^(-2i/R):
//!    x_a' = x_a cos - x_b sin,   x_b' = x_b cos + x_a sin.
//!  Dimensions >= R (partial rotary) pass through unchanged.
//!  - Optional Llama-3.1 frequency scaling (llama3_rope_scaling): the published rule of Meta's
//!    reference implementation (`apply_scaling` in llama-models / `rope_type = "llama3"` in HF).
//!
//! Precision: angles pos * inv_freq and their cos/sin are computed in double and rounded to float
//! once (a float angle would lose ~0.06 rad at pos ~ 1e6); the rotation itself runs in fp32 on the
//! storage type (float, half, bfloat16; double is accepted and rotated in double).
//!
//! Non-finite numbers (the policy of the float-producing entry points: propagate, never a finite
//! wrong value): x is rotated without checks. A NaN or +-inf in a rotated dimension makes
//! both outputs of its pair non-finite, as IEEE arithmetic gives them (even at position 0, where
//! inf * sin(0) is NaN although the rotation is the identity); every other pair, head and token is
//! unaffected, and dimensions >= R are not touched at all. Denormals are ordinary numbers (nothing
//! assumes flush-to-zero; half and bfloat16 conversions keep subnormals, NaN and infinities). Only
//! parameters and positions are validated.

#include <cmath>
#include <cstdint>
#include <numbers>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "specdec/core/dtype.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/numeric.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/core/thread_pool.hpp"
#include "specdec/position/detail/rope_host.hpp"

namespace specdec {

//! Which dimensions RoPE pairs up (see file comment).
enum class rope_style : std::uint8_t {
  rotate_half,  //!< LLaMA / GPT-NeoX: (i, i + R/2)
  interleaved,  //!< GPT-J: (2i, 2i + 1)
};

//! Llama-3.1 RoPE frequency scaling parameters (defaults = Llama 3.1 release config).
//! For wavelength w = 2*pi / f of each base frequency f:
//!   w < L / high_freq_factor : f unchanged (high frequencies)
//!   w > L / low_freq_factor  : f / factor  (low frequencies)
//!   otherwise                : (1 - s) * f / factor + s * f,  s = (L / w - low_freq_factor) /
//!                              (high_freq_factor - low_freq_factor)
//! with L = original_max_position_embeddings.
struct llama3_rope_scaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

//! Parameters of one RoPE configuration.
struct rope_params {
  double theta = 10000.0;                          //!< base; must be > 1 and finite
  rope_style style = rope_style::rotate_half;      //!< pairing convention
  int rotary_dim = 0;                              //!< rotated leading dims R (even); 0 = whole head_dim
  std::optional<llama3_rope_scaling> llama3 = {};  //!< Llama-3.1 frequency scaling when set
};

namespace detail {
inline namespace SPECDEC_HOST_ISA {  // on every entry point's path: see core/isa.hpp

inline void validate_llama3_scaling(const llama3_rope_scaling& s, std::string_view fn) {
  require(std::isfinite(s.factor) && s.factor > 0.0, fn, "params.llama3.factor", "a finite value > 0", s.factor);
  require(std::isfinite(s.low_freq_factor) && s.low_freq_factor > 0.0, fn, "params.llama3.low_freq_factor",
          "a finite value > 0", s.low_freq_factor);
  if (!(std::isfinite(s.high_freq_factor) && s.high_freq_factor > s.low_freq_factor)) [[unlikely]]
    throw_invalid_argument(fn, "params.llama3.high_freq_factor",
                           "a finite value > low_freq_factor = " + std::to_string(s.low_freq_factor),
                           s.high_freq_factor);
  require(s.original_max_position_embeddings > 0, fn, "params.llama3.original_max_position_embeddings", "> 0",
          s.original_max_position_embeddings);
}

//! Resolved rotary dim for a head_dim; validates everything about (params, head_dim).
inline int validate_rope_params(const rope_params& p, std::int64_t head_dim, std::string_view fn) {
  require(std::isfinite(p.theta) && p.theta > 1.0, fn, "params.theta", "a finite value > 1", p.theta);
  require(p.style == rope_style::rotate_half || p.style == rope_style::interleaved, fn, "params.style",
          "rope_style::rotate_half or rope_style::interleaved", static_cast<int>(p.style));
  require(head_dim > 0 && head_dim <= INT32_MAX, fn, "head_dim", "in [1, 2^31)", head_dim);
  if (!(p.rotary_dim >= 0 && p.rotary_dim <= head_dim)) [[unlikely]]
    throw_invalid_argument(fn, "params.rotary_dim",
                           "0 (= head_dim) or a value in [2, head_dim = " + std::to_string(head_dim) + "]",
                           p.rotary_dim);
  const std::int64_t r = p.rotary_dim == 0 ? head_dim : p.rotary_dim;
  require(r % 2 == 0, fn, p.rotary_dim == 0 ? "head_dim" : "params.rotary_dim", "an even rotary dimension", r);
  if (p.llama3) validate_llama3_scaling(*p.llama3, fn);
  return static_cast<int>(r);
}

}  // namespace SPECDEC_HOST_ISA

template <class P>
concept int32_positions_tensor =
    tensor_like<P> &&(P::rank == 1) && std::is_same_v<std::remove_cv_t<typename P::element_type>, std::int32_t>;

template <class X>
concept rope_target_tensor = tensor_like<X> &&(X::rank == 3) && storage_float<typename X::element_type> &&
                             !std::is_const_v<typename X::element_type>;

}  // namespace detail

inline namespace SPECDEC_HOST_ISA {  // on the host and CUDA entry points' path: see core/isa.hpp

//! Llama-3.1 scaling of one base inverse frequency `inv_freq` (radians per position), exactly the
//! published rule (see llama3_rope_scaling). Precondition: inv_freq > 0, s valid. O(1).
[[nodiscard]] inline double llama3_scale_inv_frequency(double inv_freq, const llama3_rope_scaling& s) {
  constexpr std::string_view fn = "specdec::llama3_scale_inv_frequency";
  detail::validate_llama3_scaling(s, fn);
  require(std::isfinite(inv_freq) && inv_freq > 0.0, fn, "inv_freq", "a finite value > 0", inv_freq);
  const double old_len = s.original_max_position_embeddings;
  const double low_freq_wavelen = old_len / s.low_freq_factor;
  const double high_freq_wavelen = old_len / s.high_freq_factor;
  const double wavelen = 2.0 * std::numbers::pi / inv_freq;
  if (wavelen < high_freq_wavelen) return inv_freq;
  if (wavelen > low_freq_wavelen) return inv_freq / s.factor;
  const double smooth = (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * inv_freq / s.factor + smooth * inv_freq;
}

//! The R/2 inverse frequencies theta^(-2i/R), i in [0, R/2), after Llama-3.1 scaling when
//! configured; R = params.rotary_dim or head_dim. Throws invalid_argument on bad params. O(R).
[[nodiscard]] inline std::vector<double> rope_inv_frequencies(const rope_params& params, int head_dim) {
  const int r = detail::validate_rope_params(params, head_dim, "specdec::rope_inv_frequencies");
  std::vector<double> f(static_cast<std::size_t>(r / 2));
  for (int i = 0; i < r / 2; ++i) {
    f[i] = std::pow(params.theta, -2.0 * i / r);
    if (params.llama3) f[i] = llama3_scale_inv_frequency(f[i], *params.llama3);
    // every angle position * f finite for positions up to INT32_MAX: a finite llama3.factor near 0
    // (1e-320 passed "finite and > 0") gave f = inf, and cos(inf) wrote NaN into finite x
    if (!std::isfinite(f[i] * static_cast<double>(INT32_MAX))) [[unlikely]] {
      std::string expected("a value that keeps every inverse frequency times INT32_MAX finite (frequency ");
      expected += std::to_string(i), expected += " is ", expected += std::to_string(f[i]), expected += ")";
      throw_invalid_argument("specdec::rope_inv_frequencies", params.llama3 ? "params.llama3.factor" : "params.theta",
                             expected, params.llama3 ? params.llama3->factor : params.theta);
    }
  }
  return f;
}

}  // namespace SPECDEC_HOST_ISA

namespace detail {
inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

//! The argument checks of every apply_rope call, under Policy's memory-space rules (host: x and
//! positions host-accessible, positions read and each checked >= 0; cuda: both device-accessible,
//! positions >= 0 a precondition since device memory is not read on the host).
template <class Policy, class X, class P>
void validate_rope_call(const X& x, const P& positions, std::string_view fn) {
  require_policy_memory<Policy>(fn, "x", x);
  require_policy_memory<Policy>(fn, "positions", positions);
  require_unit_inner_stride(fn, "x", x);
  require_array(fn, "x", x);
  require_unique_elements(fn, "x", x);  // rotated in place by several threads
  (void)checked_size_product(fn, "x", {x.extent(0), x.extent(1), x.extent(2)});  // the kernels' element offsets
  if (!(positions.extent(0) == x.extent(0))) [[unlikely]]
    throw_invalid_argument(fn, "positions",
                           "extent(0) == x.extent(0) = " + std::to_string(x.extent(0)) + " (one position per token)",
                           positions.extent(0));
  require_array(fn, "positions", positions);
  require_disjoint(fn, "x", x, "positions", positions);  // read while x is rotated
  if constexpr (!std::is_same_v<Policy, cuda>)
    for (std::int64_t t = 0; t < positions.extent(0); ++t)
      if (!(positions(t) >= 0)) [[unlikely]]
        throw_invalid_argument(fn, "positions", "every position >= 0 (at token " + std::to_string(t) + ")",
                               positions(t));
}

//! The seam between apply_rope and its backends, like attention's (attention/detail/backend.hpp):
//! apply_rope is ONE template over the execution policy that validates the parameters and the
//! tensors under the policy's memory-space rules, then hands them to rope_backend<Policy>:
//!   template <class T, class PV>
//!   static void run(std::string_view fn, const Policy&, const rope_params&, int rotary,
//!                   const strided_view<T, 3>& x, const PV& positions);
//! The host backend is specialised below; the cuda one in rope.cuh. The primary lives in the ISA
//! inline namespace (core/isa.hpp), so each specialisation's members get per-feature-set symbols.
SPECDEC_BACKEND_SEAM(rope_backend, "apply_rope", "specdec/position/rope.cuh");

template <>
struct rope_backend<host> {
  template <class T, class PV>
  static void run(std::string_view fn, const host& policy, const rope_params& params, int rotary,
                  const strided_view<T, 3>& x, const PV& positions) {
    require(policy.num_threads >= 0, fn, "policy.num_threads", ">= 0", policy.num_threads);
    const std::vector<double> inv = rope_inv_frequencies(params, static_cast<int>(x.extent(2)));
    const int half_r = rotary / 2;
    rope_for_tokens(policy, x.extent(0), x.extent(1) * x.extent(2), [&](std::int64_t b, std::int64_t e) {
      std::vector<float> cs(static_cast<std::size_t>(half_r)), sn(cs.size());
      for (std::int64_t t = b; t < e; ++t) {
        const double pos = positions(t);
        for (int i = 0; i < half_r; ++i) {
          const double angle = pos * inv[i];
          cs[i] = static_cast<float>(std::cos(angle));
          sn[i] = static_cast<float>(std::sin(angle));
        }
        rope_rotate_token_at_level(&x(t, 0, 0), x.stride(1), x.extent(1), rotary, params.style == rope_style::rotate_half,
                          cs.data(), sn.data());
      }
    });
  }
};

}  // namespace SPECDEC_HOST_ISA
}  // namespace detail

inline namespace SPECDEC_HOST_ISA {

//! Applies RoPE in place to x = Q or K rows [tokens, heads, head_dim] at per-token `positions`
//! (int32, [tokens], each >= 0). Angles and cos/sin in double, rotation in fp32 (see file comment).
//! Preconditions (checked, invalid_argument otherwise): unit inner stride, positions.extent(0) ==
//! tokens, valid params (theta > 1, even rotary dim <= head_dim, valid Llama-3.1 scaling).
//!   specdec::host: host-accessible memory, every position checked >= 0; parallel over token blocks.
//!   specdec::cuda (needs position/rope.cuh and nvcc; without it the call fails to compile with one
//!     static_assert naming the header): device-accessible memory, rotary dimension at most 512,
//!     positions >= 0 a precondition (device memory is not read on the host); enqueued on
//!     policy.stream without synchronisation; a failed launch throws cuda_error.
//! Complexity O(tokens * (R/2 sincos + heads * R)).
template <execution_policy Policy, class X, class P>
requires(detail::rope_target_tensor<std::remove_cvref_t<X>>&&
             detail::int32_positions_tensor<std::remove_cvref_t<P>>) void apply_rope(const Policy& policy,
                                                                                     const rope_params& params,
                                                                                     const X& x_in,
                                                                                     const P& positions_in) {
  constexpr std::string_view fn = "specdec::apply_rope";
  const auto x = as_view(x_in);
  const auto positions = as_view(positions_in);
  const int rotary = detail::validate_rope_params(params, x.extent(2), fn);
  detail::validate_rope_call<Policy>(x, positions, fn);
  detail::rope_backend<Policy>::run(fn, policy, params, rotary, x, positions);
}

//! apply_rope with positions given as a span of int32.
template <class X>
requires detail::rope_target_tensor<std::remove_cvref_t<X>>
void apply_rope(const host& policy, const rope_params& params, const X& x, std::span<const std::int32_t> positions) {
  apply_rope(
      policy, params, x,
      strided_view<const std::int32_t, 1>::contiguous(positions.data(), {static_cast<std::int64_t>(positions.size())}));
}

}  // namespace SPECDEC_HOST_ISA

//! Precomputed cos/sin table for positions [0, max_positions): cos/sin of pos * inv_freq[i]
//! (computed in double, stored as float), so apply_rope with a cache gives bit-identical results to
//! apply_rope with the same params while skipping the sincos. Memory: max_positions * R * 4 bytes.
class rope_cache {
 public:
  //! Builds the table. Throws invalid_argument on bad params, head_dim <= 0 or max_positions < 0.
  //! O(max_positions * R).
  rope_cache(const rope_params& params, int head_dim, int max_positions)
      : params_(params), head_dim_(head_dim) {
    constexpr std::string_view fn = "specdec::rope_cache";
    rotary_ = detail::validate_rope_params(params, head_dim, fn);
    require(max_positions >= 0, fn, "max_positions", ">= 0", max_positions);
    const std::vector<double> inv = rope_inv_frequencies(params, head_dim);
    const std::size_t half_r = static_cast<std::size_t>(rotary_ / 2);
    cos_.resize(static_cast<std::size_t>(max_positions) * half_r);
    sin_.resize(cos_.size());
    for (int p = 0; p < max_positions; ++p)
      for (std::size_t i = 0; i < half_r; ++i) {
        const double angle = static_cast<double>(p) * inv[i];
        cos_[p * half_r + i] = static_cast<float>(std::cos(angle));
        sin_[p * half_r + i] = static_cast<float>(std::sin(angle));
      }
  }
  [[nodiscard]] const rope_params& params() const noexcept { return params_; }
  [[nodiscard]] int head_dim() const noexcept { return head_dim_; }
  [[nodiscard]] int rotary_dim() const noexcept { return rotary_; }
  //! The table's positions: max_positions as built, 0 for a moved-from cache (its table went with the
  //! move, so apply_rope then refuses every position instead of reading a table it no longer has).
  [[nodiscard]] int max_positions() const noexcept {
    return rotary_ >= 2 ? static_cast<int>(cos_.size() / static_cast<std::size_t>(rotary_ / 2)) : 0;
  }
  //! cos row (R/2 floats) of position p (unchecked; p in [0, max_positions)).
  [[nodiscard]] const float* cos_row(int p) const noexcept {
    return cos_.data() + static_cast<std::size_t>(p) * static_cast<std::size_t>(rotary_ / 2);
  }
  //! sin row (R/2 floats) of position p (unchecked).
  [[nodiscard]] const float* sin_row(int p) const noexcept {
    return sin_.data() + static_cast<std::size_t>(p) * static_cast<std::size_t>(rotary_ / 2);
  }

 private:
  rope_params params_;
  int head_dim_ = 0, rotary_ = 0;
  std::vector<float> cos_, sin_;
};

inline namespace SPECDEC_HOST_ISA {

//! Applies RoPE in place using a precomputed rope_cache (bit-identical to the params overload).
//! Extra preconditions: x.extent(2) == cache.head_dim(), every position < cache.max_positions().
//! Complexity O(tokens * heads * R); parallel over token blocks.
template <class X, class P>
requires(detail::rope_target_tensor<std::remove_cvref_t<X>>&&
             detail::int32_positions_tensor<std::remove_cvref_t<P>>) void apply_rope(const host& policy,
                                                                                     const rope_cache& cache,
                                                                                     const X& x_in,
                                                                                     const P& positions_in) {
  constexpr std::string_view fn = "specdec::apply_rope";
  const auto x = as_view(x_in);
  const auto positions = as_view(positions_in);
  require_equal(fn, "x (head_dim = extent 2, must match cache.head_dim())", static_cast<std::int64_t>(cache.head_dim()),
                x.extent(2));
  detail::validate_rope_call<host>(x, positions, fn);
  require(policy.num_threads >= 0, fn, "policy.num_threads", ">= 0", policy.num_threads);
  for (std::int64_t t = 0; t < positions.extent(0); ++t)
    if (!(positions(t) < cache.max_positions())) [[unlikely]]
      throw_invalid_argument(fn, "positions",
                             "every position < cache.max_positions() = " + std::to_string(cache.max_positions()) +
                                 " (at token " + std::to_string(t) + ")",
                             positions(t));
  const bool rotate_half = cache.params().style == rope_style::rotate_half;
  detail::rope_for_tokens(policy, x.extent(0), x.extent(1) * x.extent(2), [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t t = b; t < e; ++t)
      detail::rope_rotate_token_at_level(&x(t, 0, 0), x.stride(1), x.extent(1), cache.rotary_dim(), rotate_half,
                                cache.cos_row(positions(t)), cache.sin_row(positions(t)));
  });
}

//! apply_rope with a cache and positions given as a span of int32.
template <class X>
requires detail::rope_target_tensor<std::remove_cvref_t<X>>
void apply_rope(const host& policy, const rope_cache& cache, const X& x, std::span<const std::int32_t> positions) {
  apply_rope(
      policy, cache, x,
      strided_view<const std::int32_t, 1>::contiguous(positions.data(), {static_cast<std::int64_t>(positions.size())}));
}

}  // namespace SPECDEC_HOST_ISA

//! Positions of the n tree nodes of one request: committed_length + depth[i] (design brief).
//! Preconditions: committed_length >= 0, every depth >= 0, out.size() == depths.size(), and the sum
//! fits in int32. O(n).
//! out may be depths itself (in place); a partial overlap is refused. Every depth is checked before
//! out is written.
inline void tree_positions(int committed_length, std::span<const std::int32_t> depths, std::span<std::int32_t> out) {
  constexpr std::string_view fn = "specdec::tree_positions";
  require(committed_length >= 0, fn, "committed_length", ">= 0", committed_length);
  require_equal(fn, "out (size)", depths.size(), out.size());
  const auto n = static_cast<std::int64_t>(depths.size());
  require_same_or_apart(fn, "out", make_view<1>(out.data(), {n}), "depths", make_view<1>(depths.data(), {n}));
  for (std::size_t i = 0; i < depths.size(); ++i)
    if (!(depths[i] >= 0 && static_cast<std::int64_t>(depths[i]) + committed_length <= INT32_MAX)) [[unlikely]]
      throw_invalid_argument(
          fn, "depths",
          "every depth >= 0 with committed_length + depth <= INT32_MAX (at node " + std::to_string(i) + ")", depths[i]);
  for (std::size_t i = 0; i < depths.size(); ++i) out[i] = committed_length + depths[i];
}

}  // namespace specdec
