#pragma once
//! \file residual_heads.hpp
//! TokenSwift's multi-token residual heads (TokenSwift §3.2, Eq. 1): from the target's last hidden
//! state h_0, gamma chained linear layers give further hidden states
//!     h_i = f_i(h_{i-1}) + h_{i-1},   i = 1 .. gamma   (TokenSwift takes gamma = 3, footnote 1),
//! and the target's own LM head g turns each h_i into the logits l_i of the token i positions
//! ahead (l_0 = g(h_0) is the target's ordinary prediction). The heads are chained, not
//! independent as in Medusa: TokenSwift §3.2 reports that independent heads draft worse.
//!
//! f_i(x) = act(W_i x + b_i), with W_i [H, H] row-major (out x in, as PyTorch's nn.Linear stores
//! it), b_i optional, act = identity (TokenSwift's "linear layer") or SiLU (Medusa's ResBlock,
//! for heads trained that way). g is not applied here: it is the caller's LM head (with whatever
//! final norm the model puts before it), so one call returns h_1 .. h_gamma for it.
//!
//! Precision: products and sums in fp32 for float, half and bfloat16 weights and states; the chain
//! h_{i-1} -> h_i is carried in fp32 even when `out` stores half or bfloat16 (params.workspace, or a
//! call-local buffer when none is passed). reference/residual_heads.hpp is the double reference.
//!
//! Non-finite numbers (the policy of the float-producing entry points: propagate, never a finite
//! wrong value): nothing is checked or skipped, so NaN and +-inf follow IEEE arithmetic to the outputs
//! they reach. A bad value in row r of h0 makes all of row r non-finite in every head and no other
//! row; in W_i row j (or b_i[j]) column j of h_i in every row, and then all of h_{i+1} ...; SiLU of
//! -inf is NaN (-inf / inf), of +inf is +inf. Denormals are ordinary numbers (no flush-to-zero is
//! assumed; the half / bfloat16 conversions keep subnormals).
//!
//! Cost per call: gamma * n * H^2 multiply-adds; each weight matrix is read once per call (every
//! weight row is dotted with all n input rows while it is in L1), so for a decode step (n = batch
//! of requests, small) the call is bound by reading gamma * H^2 weights.

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/core/bfloat16.hpp"
#include "specdec/core/detail/simd.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/half.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/numeric.hpp"
#include "specdec/core/simd_level.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/core/thread_pool.hpp"

namespace specdec {

//! The activation of f_i (see the file comment).
enum class residual_activation : std::uint8_t {
  identity,  //!< f_i(x) = W_i x + b_i (TokenSwift §3.2: "linear layers")
  silu,      //!< f_i(x) = SiLU(W_i x + b_i) (Medusa's ResBlock)
};

//! Options of residual_heads.
struct residual_heads_params {
  residual_activation activation = residual_activation::identity;
  //! fp32 scratch for the chain when `out` is half or bfloat16 (2 * n * H floats; grows, never
  //! shrinks). Null: a call-local buffer. Unused when `out` is float (the chain lives in `out`).
  std::vector<float>* workspace = nullptr;
};

namespace detail {
template <class T>
inline constexpr bool residual_storage = std::is_same_v<T, float> || std::is_same_v<T, half> || std::is_same_v<T, bfloat16>;

//! Output columns per parallel task: 64 weight rows (H = 4096: 512 KB of fp16 weights, so a
//! decode step's gamma * H / 64 = 192 tasks balance over any small pool).
inline constexpr int residual_cols_per_task = 64;

}  // namespace detail
}  // namespace specdec

// The kernels at this file's flags and, with run-time dispatch (core/simd_level.hpp), once per level.
#define SPECDEC_ISA_BODIES "specdec/draft/detail/residual_kernels.inl"
#include "specdec/core/detail/isa_family.inl"
#undef SPECDEC_ISA_BODIES

namespace specdec {
namespace detail {
inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

template <class H0, class W, class B, class O>
void residual_heads_impl(const host& policy, const H0& h0, const W& weights, const B* bias, const O& out,
                         const residual_heads_params& params) {
  constexpr std::string_view fn = "specdec::residual_heads";
  using TX = std::remove_cv_t<typename H0::element_type>;
  using TW = std::remove_cv_t<typename W::element_type>;
  using TO = typename O::element_type;
  static_assert(H0::rank == 2, "specdec::residual_heads: h0 is [n, H]");
  static_assert(W::rank == 3, "specdec::residual_heads: weights are [gamma, H, H]");
  static_assert(O::rank == 3, "specdec::residual_heads: out is [gamma, n, H]");
  static_assert(!std::is_const_v<TO>, "specdec::residual_heads: out must be writable");
  static_assert(residual_storage<TX> && residual_storage<TW> && residual_storage<TO>,
                "specdec::residual_heads: h0, weights and out must hold float, half or bfloat16");
  require(policy.num_threads >= 0, fn, "policy.num_threads", ">= 0", policy.num_threads);
  require(params.activation == residual_activation::identity || params.activation == residual_activation::silu, fn,
          "params.activation", "residual_activation::identity or ::silu", static_cast<int>(params.activation));
  require_host_accessible(fn, "h0", h0);
  require_host_accessible(fn, "weights", weights);
  require_host_accessible(fn, "out", out);
  const std::int64_t n = h0.extent(0), H = h0.extent(1), gamma = weights.extent(0);
  require(n >= 0 && n <= INT32_MAX, fn, "h0", "[n, H] with 0 <= n <= INT32_MAX", shape_string(h0));
  require(H >= 1 && H <= INT32_MAX, fn, "h0", "[n, H] with 1 <= H <= INT32_MAX", shape_string(h0));
  require(gamma >= 0, fn, "weights", "[gamma, H, H] with gamma >= 0", shape_string(weights));
  require_shape(fn, "weights", weights, {gamma, H, H});
  require_shape(fn, "out", out, {gamma, n, H});
  require_unique_elements(fn, "out", out);
  require_array(fn, "h0", h0);
  require_unit_inner_stride(fn, "h0", h0);
  require_unit_inner_stride(fn, "weights", weights);
  require_unit_inner_stride(fn, "out", out);
  if (bias != nullptr) {
    using TB = std::remove_cv_t<typename B::element_type>;
    static_assert(B::rank == 2, "specdec::residual_heads: bias is [gamma, H]");
    static_assert(residual_storage<TB>, "specdec::residual_heads: bias must hold float, half or bfloat16");
    require_host_accessible(fn, "bias", *bias);
    require_shape(fn, "bias", *bias, {gamma, H});
    require_unit_inner_stride(fn, "bias", *bias);
  }
  // out is written while h0, weights and bias are read: an overlap would feed outputs back as inputs.
  require(!views_overlap(out, h0), fn, "out", "memory disjoint from h0", "an overlapping view");
  require(!views_overlap(out, weights), fn, "out", "memory disjoint from weights", "an overlapping view");
  if (bias != nullptr) require(!views_overlap(out, *bias), fn, "out", "memory disjoint from bias", "an overlapping view");
  // The chain's workspace is resized (its storage may move) and written while h0, weights and bias
  // are read: none of them (nor out) may live in its storage.
  if constexpr (!std::is_same_v<TO, float>) {
    if (params.workspace != nullptr && params.workspace->capacity() > 0) {
      const auto ws = make_view<1>(static_cast<const float*>(params.workspace->data()),
                                   {static_cast<std::int64_t>(params.workspace->capacity())});
      const auto apart = [&](std::string_view name, const auto& v) {
        if (views_overlap(ws, v)) [[unlikely]]  // messages built on the error path only (no allocation)
          throw_invalid_argument(fn, "params.workspace", "storage apart from " + std::string(name),
                                 "a workspace holding " + std::string(name));
      };
      apart("h0", h0), apart("weights", weights), apart("out", out);
      if (bias != nullptr) apart("bias", *bias);
    }
  }
  if (gamma == 0 || n == 0) return;

  const int ni = static_cast<int>(n), Hi = static_cast<int>(H);
  const TX* x0 = static_cast<const TX*>(h0.data());
  const TW* w = static_cast<const TW*>(weights.data());
  TO* o = static_cast<TO*>(out.data());
  // Chain storage: out itself when it is float, else two fp32 [n, H] buffers used in turn.
  constexpr bool chain_in_out = std::is_same_v<TO, float>;
  std::vector<float> local;
  float* chain = nullptr;
  if constexpr (!chain_in_out) {
    std::vector<float>& buf = params.workspace != nullptr ? *params.workspace : local;
    if (buf.size() < static_cast<std::size_t>(2 * n * H)) buf.resize(static_cast<std::size_t>(2 * n * H));
    chain = buf.data();
  }
  const std::int64_t tasks = (H + residual_cols_per_task - 1) / residual_cols_per_task;
  for (std::int64_t i = 0; i < gamma; ++i) {
    const TW* wi = w + i * weights.stride(0);
    float* y;
    std::int64_t ys;
    if constexpr (chain_in_out) y = o + i * out.stride(0), ys = out.stride(1);
    else y = chain + (i % 2) * n * H, ys = H;
    auto run = [&](const auto* x, std::int64_t xs, const auto* b) {
      parallel_for(policy, tasks, [&](std::int64_t t) {
        const int j0 = static_cast<int>(t) * residual_cols_per_task;
        const int j1 = j0 + residual_cols_per_task < Hi ? j0 + residual_cols_per_task : Hi;
        SPECDEC_ISA_DISPATCH_CALL(
            residual_head_cols(wi, weights.stride(1), b, x, xs, ni, Hi, j0, j1, y, ys, params.activation));
      });
    };
    auto with_bias = [&](const auto* x, std::int64_t xs) {
      if (bias != nullptr) {
        using TB = std::remove_cv_t<typename B::element_type>;
        run(x, xs, static_cast<const TB*>(bias->data()) + i * bias->stride(0));
      } else {
        run(x, xs, static_cast<const float*>(nullptr));
      }
    };
    if (i == 0) {
      with_bias(x0, h0.stride(0));
    } else if constexpr (chain_in_out) {
      with_bias(static_cast<const float*>(o + (i - 1) * out.stride(0)), out.stride(1));
    } else {
      with_bias(static_cast<const float*>(chain + ((i - 1) % 2) * n * H), H);
    }
    if constexpr (!chain_in_out) {
      TO* dst = o + i * out.stride(0);
      SPECDEC_ISA_DISPATCH_CALL(residual_store_rows(static_cast<const float*>(y), ys, dst, out.stride(1), n, H));
    }
  }
}

}  // namespace SPECDEC_HOST_ISA
}  // namespace detail

inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

//! TokenSwift Eq. 1 (see the file comment): out[i-1] = h_i for i = 1 .. gamma, from h0 [n, H]
//! (one row per position to draft from, e.g. one per request), weights [gamma, H, H] (W_i row-major,
//! out x in) and bias [gamma, H]. out is [gamma, n, H]. Element types float, half or bfloat16
//! (each tensor its own); unit inner strides; host memory. gamma = 0 or n = 0 do nothing.
//! Violations throw specdec::invalid_argument naming the argument. Parallel over blocks of 64
//! output columns per head on the host pool; heads run in order (each needs the previous one).
//! Allocates only when `out` is not float and no params.workspace is passed.
template <tensor_like H0, tensor_like W, tensor_like B, tensor_like O>
void residual_heads(const host& policy, const H0& h0, const W& weights, const B& bias, const O& out,
                    const residual_heads_params& params = {}) {
  detail::residual_heads_impl(policy, h0, weights, &bias, out, params);
}

//! The same without biases (b_i = 0).
template <tensor_like H0, tensor_like W, tensor_like O>
void residual_heads(const host& policy, const H0& h0, const W& weights, const O& out,
                    const residual_heads_params& params = {}) {
  detail::residual_heads_impl(policy, h0, weights, static_cast<const strided_view<const float, 2>*>(nullptr), out,
                              params);
}

}  // namespace SPECDEC_HOST_ISA

}  // namespace specdec
