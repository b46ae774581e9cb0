#pragma once
//! \file draft_rows.hpp
//! Per-row helpers the model drafters share (draft/chain_drafter.hpp, draft/longspec_drafter.hpp,
//! draft/self_drafter.hpp): log-softmax of a logit row, its top-width entries, and the per-depth chain
//! pick (argmax, or a draw from the processed q when sampling).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <type_traits>
#include <vector>

#include "specdec/core/detail/simd.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/simd_level.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/topk.hpp"
#include "specdec/draft/draft_candidates.hpp"
#include "specdec/sampling/logits_processor.hpp"
#include "specdec/sampling/sampler.hpp"

// The kernels at this file's flags and, with run-time dispatch (core/simd_level.hpp), once per level.
#define SPECDEC_ISA_BODIES "specdec/draft/detail/draft_rows.inl"
#include "specdec/core/detail/isa_family.inl"
#undef SPECDEC_ISA_BODIES

namespace specdec {
namespace detail {
inline namespace SPECDEC_HOST_ISA {  // the float path dispatches: see core/isa.hpp
//! Log-softmax of one row into out: out[i] = row[i] - (max + log sum_j exp(row[j] - max)). O(V).
//! double rows: double arithmetic throughout. float rows: the max and the exponentials run on
//! 16-lane vectors (vexp2, relative error < 1e-7), each 16-lane block summed into a double, at the
//! level the call dispatches to (draft_rows.inl); at a 128K-token vocabulary the scalar double `exp`
//! per element took ~0.5 ms a row (the self-drafter runs gamma + 1 = 4 rows a step). -inf entries
//! (masked tokens) stay -inf. The row is a draft model's output, so it is checked first with the
//! samplers' policy (detail::checked_logit_scan): NaN or +inf, or no entry above -inf, throws
//! invalid_argument naming `fn`, 'draft logits' and the token (a NaN used to become a NaN log-prob
//! that only a tree builder downstream refused).
template <class T>
void log_softmax(std::span<const T> row, std::span<float> out, std::string_view fn = "specdec drafter") {
  const std::size_t n = row.size();
  if constexpr (std::is_same_v<T, float>) {
    const float mx = checked_logit_scan(row, {fn, "draft logits"}).max;  // the check's pass gives the max
    SPECDEC_ISA_DISPATCH_CALL(log_softmax_kernel(row.data(), out.data(), n, mx));
  } else {
    bool any = false;
    for (std::size_t i = 0; i < n; ++i) {  // checked_logit_scan's rule and messages, for double rows
      const double x = static_cast<double>(row[i]);
      if (std::isnan(x) || x == std::numeric_limits<double>::infinity()) [[unlikely]]
        throw_bad_entry({fn, "draft logits"}, bad_logit_text, static_cast<std::int64_t>(i), x);
      any = any || x > -std::numeric_limits<double>::infinity();
    }
    if (!any) [[unlikely]]
      throw_empty_row({fn, "draft logits"}, "at least one logit above -inf", "all -inf");
    double mx = -std::numeric_limits<double>::infinity();
    for (auto x : row) mx = std::max(mx, static_cast<double>(x));
    double sum = 0;
    for (auto x : row) sum += std::exp(static_cast<double>(x) - mx);
    const double lse = mx + std::log(sum);
    // a log-prob below float's range is a float 0 probability: -inf (converting it to float was
    // undefined behaviour, -inf only on the machines that happen to round so)
    for (std::size_t i = 0; i < n; ++i) {
      const double lp = static_cast<double>(row[i]) - lse;
      out[i] = lp < -static_cast<double>(std::numeric_limits<float>::max()) ? -std::numeric_limits<float>::infinity()
                                                                              : static_cast<float>(lp);
    }
  }
}
}  // namespace SPECDEC_HOST_ISA

//! The `width` best entries of a log-prob row, best first (ties: lower token id first), through
//! core/topk.hpp's O(V) heap selection; fewer when the vocabulary is smaller than width.
struct top_width_selector {
  std::vector<std::int32_t> idx;
  std::vector<float> val;
  topk_workspace<float> ws;
  void operator()(std::span<const float> lp, int width, std::vector<draft_token>& out) {
    const int k = std::min(width, static_cast<int>(lp.size()));
    idx.resize(static_cast<std::size_t>(k));
    val.resize(static_cast<std::size_t>(k));
    topk<float>(lp, k, idx, val, ws);
    out.clear();
    for (int j = 0; j < k; ++j) out.push_back({idx[static_cast<std::size_t>(j)], val[static_cast<std::size_t>(j)]});
  }
};

//! The checks every model drafter makes on entry, before it touches its model (a bad request leaves
//! the draft cache as it was): the request slot (in [0, max_request_slot]: it is handed to the user's
//! model, which indexes its own per-request state with it), the width (>= 1: draft_request's contract;
//! 0 was drafted as 1), the depth, the model's vocabulary (>= 1: an empty one has no token to propose)
//! and, when the request carries sampling_params, those parameters as process_logits checks them (a
//! NaN or negative temperature is an error, not greedy drafting). Errors name `fn`.
inline void validate_model_draft(const draft_request& req, int vocab, std::string_view fn) {
  require(req.request >= 0 && req.request <= max_request_slot, fn, "req.request",
          "a request slot in [0, max_request_slot = 2^20 - 1]", req.request);
  require(req.width >= 1, fn, "req.width", ">= 1", req.width);
  require(vocab >= 1, fn, "model.vocab_size()", ">= 1", vocab);
  require(req.depth <= max_draft_depth, fn, "req.depth", "at most max_draft_depth = " + std::to_string(max_draft_depth),
          req.depth);
  if (req.sampling != nullptr) validate_sampling_params(*req.sampling, fn);
}

//! The committed tokens a model drafter is about to feed its model (req.tokens[first, size)): each a
//! token of the model's vocabulary, checked before the first one reaches the model (which indexes its
//! embedding rows with them: an id the target knows but a smaller draft vocabulary does not, or a
//! negative one, was read out of bounds in the user's model). Only the tokens fed are read, so a
//! request's long context is not rescanned every step.
inline void require_fed_tokens(const draft_request& req, std::size_t first, int vocab, std::string_view fn) {
  for (std::size_t i = first; i < req.tokens.size(); ++i) {
    const std::int32_t t = req.tokens[i];
    if (!(t >= 0 && t < vocab)) [[unlikely]]
      throw_invalid_argument(fn, "req.tokens[" + std::to_string(i) + "]",
                             "a token of the draft model's vocabulary [0, " + std::to_string(vocab) + ")",
                             std::to_string(t));
  }
}

//! A model's integer answer (vocab_size(), cache_length(r), ...) as an int: the model concepts ask
//! only for a type convertible to int, so a wider integer is range-checked here, not narrowed (a
//! vocabulary of 2^32 + 4 was drafted as one of 4).
template <class I>
[[nodiscard]] int model_int(I value, std::string_view fn, std::string_view name) {
  if constexpr (std::is_integral_v<I>)
    if (!std::in_range<int>(value)) [[unlikely]]
      throw_invalid_argument(fn, name, "a value that fits in int", std::to_string(value));
  return static_cast<int>(value);
}

//! The request's context length (its committed tokens, the last one the root) as an int: at least
//! one token, and few enough that every drafted position (length + depth) fits in int.
[[nodiscard]] inline int context_length(const draft_request& req, std::string_view fn) {
  constexpr std::size_t most = std::numeric_limits<std::int32_t>::max() - max_draft_depth;
  require(!req.tokens.empty() && req.tokens.size() <= most, fn, "req.tokens.size()",
          "in [1, 2^31 - 1 - max_draft_depth]", req.tokens.size());
  return static_cast<int>(req.tokens.size());
}

//! Shared per-depth logic of the model drafters: records alternatives, picks the chain token (argmax,
//! or a draw from the processed q when sampling) and appends it to out.
struct chain_picker {
  std::vector<float> lp, processed;
  template <class T>
  std::int32_t pick(std::span<const T> logits, const draft_request& req, std::span<const std::int32_t> context,
                    draft_candidates& out, std::string_view fn = "specdec drafter") {
    const auto V = logits.size();
    lp.resize(V);
    log_softmax(logits, std::span<float>(lp), fn);
    out.alternatives.emplace_back();
    top_width(lp, req.width, out.alternatives.back());
    const bool sample = req.rng != nullptr && req.sampling != nullptr && req.sampling->temperature > 0.0f;
    if (!sample) {
      out.chain.push_back(out.alternatives.back().front());
      return out.chain.back().token;
    }
    assign_float_logits(processed, logits, {fn, "draft logits"});
    process_logits(std::span<float>(processed), *req.sampling, context, ws);
    std::int32_t tok = sample_token(processed, *req.rng);
    // q row = softmax of the processed logits (the distribution tok was drawn from).
    float mx = -std::numeric_limits<float>::infinity();
    for (float x : processed) mx = std::max(mx, x);
    double sum = 0;
    for (float x : processed) sum += std::isinf(x) ? 0.0 : std::exp(static_cast<double>(x) - mx);
    out.vocab = static_cast<int>(V);
    for (float x : processed) out.q.push_back(std::isinf(x) ? 0.0f : static_cast<float>(std::exp(static_cast<double>(x) - mx) / sum));
    out.chain.push_back({tok, lp[static_cast<std::size_t>(tok)]});
    return tok;
  }
  sampling_workspace ws;
  top_width_selector top_width;
};
}  // namespace detail

}  // namespace specdec
