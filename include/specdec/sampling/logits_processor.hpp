#pragma once
//! \file logits_processor.hpp
//! Composable logits processors, applied identically to draft and target rows so that speculative
//! output matches autoregressive output (the lossless guarantee is about the *processed* target
//! distribution; TokenSwift Appendix A).
//!
//! One row of logits (float, length V) is processed in place, in this fixed order:
//!   1. repetition penalty (Keskar et al. 2019, the sign-aware CTRL form: l > 0 ? l/r : l*r) over every
//!      distinct token of the context;
//!   2. contextual penalty (TokenSwift §3.4, Eq. 3): every distinct token among the last W tokens of
//!      the context gets l / theta (Eq. 3 exactly: I(l) = theta inside the window), or, with
//!      `contextual_sign_aware`, the CTRL form l > 0 ? l/theta : l*theta (Eq. 3 divides a negative
//!      logit by theta > 1, which *raises* it; the sign-aware variant always lowers it);
//!   3. temperature: l / t (Eq. 3's t; Eq. 3 = step 2 followed by step 3), computed as l * (1 / t).
//!      When that would leave the float range for some finite logit (|l| / t > FLT_MAX, e.g. t = 1e-45,
//!      or t = 0.5 with a logit near 3e38) the row is scaled as (l - max) / t instead: the same softmax,
//!      every value in [-inf, 0] with the maximum at exactly 0, so temperature never turns finite
//!      logits into NaN or +inf (a tiny t gives the t -> 0 limit: uniform over the tied maxima).
//!      t = 0 means greedy: the row becomes one-hot at the argmax (ties: lowest id), so every sampler
//!      reduces to argmax;
//!   4. top-k: keep the k largest (ties: lowest ids), others -> -inf;
//!   5. top-p (Appendix D.1): keep the smallest set, in (probability desc, id asc) order, whose
//!      probability reaches p (probabilities = detail::fast_exp(l - max) / sum, the weights every
//!      specdec sampler uses);
//!   6. min-p (Appendix D.1, Nguyen et al. 2024): keep tokens with P >= p_base * p_max, evaluated
//!      exactly as l - max >= ln(p_base) on the logits;
//!   7. eta-sampling (Appendix D.1, Hewitt et al. 2022): keep tokens with P >= eta,
//!      eta = min(epsilon, alpha * exp(-H(P))), H the entropy of the current distribution; the argmax
//!      (the first, lowest id, among tied maxima, as top-k breaks ties) is always kept so the set is
//!      never empty (only reachable when alpha > 1).
//! Steps 5-7 each renormalise over what the previous steps kept. Removed tokens get -inf.
//!
//! Other engines' parameters map onto these with a few differences an engine porting its settings
//! should know (checked against their sources, 2026-12): the order above is HuggingFace transformers'
//! warper order; vLLM applies min-p before top-k and top-p, and llama.cpp's default chain applies
//! temperature after its filters, so the same settings keep different sets there. top_k keeps exactly
//! k tokens, where HuggingFace, vLLM and FlashInfer keep every token tied with the k-th. top_k = 0 is
//! off (vLLM's -1 is an error here), and repetition_penalty must be >= 1 (HuggingFace and vLLM accept
//! (0, 1), which rewards repetition; here r < 1 could overflow a large positive logit to +inf).
//! Temperature has no greedy threshold above 0 (vLLM treats t < 1e-5 as greedy): a tiny t gives the
//! t -> 0 limit described in step 3, uniform over exactly tied maxima rather than the lowest id.
//! More, checked against the same sources (session 69):
//!  - top-p renormalises over what top-k kept, as HuggingFace, vLLM and llama.cpp do; SGLang's joint
//!    top-k/top-p (FlashInfer's filter_apply_order "joint") builds both masks from the unfiltered
//!    probabilities and can keep more (probabilities .35/.25/.2/.2, k 2, p .55: {0} here, {0, 1} there);
//!  - tokens tied in probability at the top-p boundary are kept lowest id first; HuggingFace and vLLM
//!    drop from the low end of an ascending sort and keep the highest ids among such ties (4 equal
//!    logits, p .5: {0, 1} here, {2, 3} there), so side-by-side tests should avoid exact ties there;
//!    SGLang also keeps a token when the mass before it equals p exactly, the others (and this) do not;
//!  - top_p must be in (0, 1]: 0 is an error here, where HuggingFace and llama.cpp keep the top token;
//!  - eta's kept argmax is one token (the lowest id) among tied maxima; HuggingFace's epsilon/eta
//!    fallback keeps every tied maximum (only reachable here with alpha > 1);
//!  - there are no OpenAI-style presence / frequency penalties (vLLM, llama.cpp, SGLang:
//!    l -= frequency * count + presence * [count > 0]); llama.cpp's repeat_penalty over its last n
//!    tokens is contextual_penalty with contextual_sign_aware and penalty_window = n.
//!
//! Non-finite numbers (the policy of every token-producing entry point, sampling/sampler.hpp): a row
//! with a NaN or +inf logit, or with no logit above -inf, is rejected with specdec::invalid_argument
//! naming the row and the token, before the row is modified; -inf logits are legal (masked tokens)
//! and denormal logits are ordinary numbers. Processing never creates NaN or +inf, and never empties a
//! row: the one way a step could (a penalty l * r overflowing to -inf for every admissible logit, which
//! needs logits below -FLT_MAX / r) is rejected the same way, before the row is modified.
//!
//! The penalty context of a tree node is the committed tokens followed by that node's own root path
//! (its ancestors and itself), so row i+1 of a verification output (the distribution after node i)
//! is processed exactly as the autoregressive decoder would process it after emitting that path:
//! process_tree_logits does this for all n+1 rows.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/config.hpp"
#include "specdec/core/detail/bits.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/execution.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/core/thread_pool.hpp"
#include "specdec/core/topk.hpp"
#include "specdec/sampling/penalty_context.hpp"
#include "specdec/sampling/sampler.hpp"
#include "specdec/sampling/detail/row_error.hpp"
#include "specdec/sampling/detail/select.hpp"
#include "specdec/sampling/detail/vec.hpp"

namespace specdec {

//! Parameters of the processor chain. Defaults disable every step except temperature 1.
struct sampling_params {
  float temperature = 1.0f;          //!< >= 0; 0 = greedy (one-hot argmax)
  int top_k = 0;                     //!< 0 = off; otherwise keep the k best
  float top_p = 1.0f;                //!< in (0, 1]; 1 = off
  float min_p = 0.0f;                //!< p_base in [0, 1]; 0 = off
  float eta_epsilon = 0.0f;          //!< epsilon in [0, 1); 0 = off
  float eta_alpha = -1.0f;           //!< alpha > 0; negative = sqrt(epsilon) (Hewitt et al.'s choice)
  float repetition_penalty = 1.0f;   //!< r >= 1 over the whole context; 1 = off
  float contextual_penalty = 1.0f;   //!< theta >= 1 over the last W context tokens (Eq. 3); 1 = off
  int penalty_window = 1024;         //!< W >= 0 (TokenSwift uses 1024)
  bool contextual_sign_aware = false;//!< false: Eq. 3 (l / theta); true: l > 0 ? l / theta : l * theta
};

namespace detail {
//! The byte a bool is stored in. sampling_params may arrive as raw memory (a batch's params tensor,
//! a struct a user filled byte by byte) where a bool holds any byte, and reading a byte other than 0
//! or 1 as a bool is undefined: validation reads the byte, not the bool. Host and device.
[[nodiscard]] SPECDEC_HOST_DEVICE inline unsigned bool_byte(const bool& b) noexcept {
  unsigned char byte = 0;
  memcpy(&byte, &b, 1);
  return byte;
}
}  // namespace detail

//! Validates a sampling_params; throws invalid_argument naming `function` and the field.
inline void validate_sampling_params(const sampling_params& p, std::string_view function) {
  require(std::isfinite(p.temperature) && p.temperature >= 0.0f, function, "params.temperature",
          "a finite value >= 0", p.temperature);
  require(p.top_k >= 0, function, "params.top_k", ">= 0 (0 = off)", p.top_k);
  require(p.top_p > 0.0f && p.top_p <= 1.0f, function, "params.top_p", "a value in (0, 1]", p.top_p);
  require(p.min_p >= 0.0f && p.min_p <= 1.0f, function, "params.min_p", "a value in [0, 1]", p.min_p);
  require(p.eta_epsilon >= 0.0f && p.eta_epsilon < 1.0f, function, "params.eta_epsilon", "a value in [0, 1)",
          p.eta_epsilon);
  require(std::isfinite(p.eta_alpha) && p.eta_alpha != 0.0f, function, "params.eta_alpha",
          "a finite value > 0 (or negative for sqrt(epsilon))", p.eta_alpha);
  require(std::isfinite(p.repetition_penalty) && p.repetition_penalty >= 1.0f, function,
          "params.repetition_penalty", "a finite value >= 1", p.repetition_penalty);
  require(std::isfinite(p.contextual_penalty) && p.contextual_penalty >= 1.0f, function,
          "params.contextual_penalty", "a finite value >= 1 (Eq. 3: theta in (1, inf), 1 = off)",
          p.contextual_penalty);
  require(p.penalty_window >= 0, function, "params.penalty_window", ">= 0", p.penalty_window);
  require(detail::bool_byte(p.contextual_sign_aware) <= 1, function, "params.contextual_sign_aware",
          "false or true (a byte of 0 or 1)", detail::bool_byte(p.contextual_sign_aware));
}

//! Reusable scratch for the processors (no allocation once warmed up for a vocabulary size).
struct sampling_workspace {
  std::vector<std::uint8_t> mark;     //!< per-token flags (penalties); all zero between calls
  std::vector<std::uint8_t> keep;     //!< top-k result
  std::vector<float> values;          //!< top-k scratch
  std::vector<float> weights;         //!< exp(l - max) per token (detail::fast_exp)
  std::vector<std::int32_t> topk_idx; //!< top-k result
  topk_workspace<float> topk_ws;      //!< top-k heap
  std::vector<std::int32_t> idx;      //!< top-p candidates
  std::vector<std::int32_t> distinct; //!< distinct committed tokens (repetition penalty)
  std::vector<double> boundary_weights;//!< top-p: weights of the boundary binade
};

namespace detail {

//! The row (or output) a call processes lies apart from the workspace's float arrays: they are
//! resized and written while the row is read and written (a row inside ws.values came back all -inf
//! from top-k, one inside ws.weights as its exp weights from top-p, with no error).
template <class V>
void require_apart_from_workspace(std::string_view fn, std::string_view name, const V& row,
                                  const sampling_workspace& ws) {
  const auto whole = [](const auto& v) {
    using T = typename std::remove_cvref_t<decltype(v)>::value_type;
    return strided_view<const T, 1>(v.data(), {static_cast<std::int64_t>(v.size())}, {1});
  };
  require_disjoint(fn, name, row, "workspace.values", whole(ws.values));
  require_disjoint(fn, name, row, "workspace.weights", whole(ws.weights));
  require_disjoint(fn, name, row, "workspace.boundary_weights", whole(ws.boundary_weights));
  require_disjoint(fn, name, row, "workspace.idx", whole(ws.idx));
  require_disjoint(fn, name, row, "workspace.topk_idx", whole(ws.topk_idx));
  require_disjoint(fn, name, row, "workspace.distinct", whole(ws.distinct));
}
//! The same for a token array (a context, a tree's tokens or parents): the workspace's index arrays
//! are resized while it is read (a tokens span over ws.idx was read after top-p had reallocated it).
inline void require_apart_from_workspace(std::string_view fn, std::string_view name, std::span<const std::int32_t> ids,
                                         const sampling_workspace& ws) {
  require_apart_from_workspace(fn, name, strided_view<const std::int32_t, 1>(ids.data(), {static_cast<std::int64_t>(ids.size())}, {1}), ws);
}

//! Token at position j of the concatenation prefix ++ suffix.
inline std::int32_t context_at(std::span<const std::int32_t> prefix, std::span<const std::int32_t> suffix,
                               std::size_t j) noexcept {
  return j < prefix.size() ? prefix[j] : suffix[j - prefix.size()];
}

//! Steps 1-2 on one row. `distinct_prefix` (optional) lists the distinct tokens of `prefix` once so a
//! tree does not rescan a long committed context per row; the suffix is scanned per call.
inline void apply_penalties(std::span<float> row, const sampling_params& p, std::span<const std::int32_t> prefix,
                            std::span<const std::int32_t> suffix, const std::vector<std::int32_t>* distinct_prefix,
                            sampling_workspace& ws) {
  const std::size_t v = row.size();
  if (ws.mark.size() != v) ws.mark.assign(v, 0);
  if (p.repetition_penalty != 1.0f) {
    const float r = p.repetition_penalty;
    auto visit = [&](std::int32_t t) {
      if (!ws.mark[static_cast<std::size_t>(t)]) {
        ws.mark[static_cast<std::size_t>(t)] = 1;
        row[static_cast<std::size_t>(t)] = penalize(row[static_cast<std::size_t>(t)], r, true);
      }
    };
    if (distinct_prefix) {
      for (auto t : *distinct_prefix) visit(t);
    } else {
      for (auto t : prefix) visit(t);
    }
    for (auto t : suffix) visit(t);
    // clear marks touching only what was set
    if (distinct_prefix) {
      for (auto t : *distinct_prefix) ws.mark[static_cast<std::size_t>(t)] = 0;
    } else {
      for (auto t : prefix) ws.mark[static_cast<std::size_t>(t)] = 0;
    }
    for (auto t : suffix) ws.mark[static_cast<std::size_t>(t)] = 0;
  }
  if (p.contextual_penalty != 1.0f && p.penalty_window > 0) {
    const std::size_t total = prefix.size() + suffix.size();
    const std::size_t w = std::min<std::size_t>(total, static_cast<std::size_t>(p.penalty_window));
    for (std::size_t j = total - w; j < total; ++j) {
      const auto t = static_cast<std::size_t>(context_at(prefix, suffix, j));
      if (!ws.mark[t]) {
        ws.mark[t] = 1;
        row[t] = penalize(row[t], p.contextual_penalty, p.contextual_sign_aware);
      }
    }
    for (std::size_t j = total - w; j < total; ++j) ws.mark[static_cast<std::size_t>(context_at(prefix, suffix, j))] = 0;
  }
}

//! Fills ws.weights with exp(l - m) (exactly 0 for -inf) and returns their sum (double). m = the
//! row's maximum, finite.
inline double softmax_weights(std::span<const float> row, float m, sampling_workspace& ws) {
  ws.weights.resize(row.size());
  return exp_sum(row.data(), row.size(), m, ws.weights.data());
}

//! Step 3 (see the file comment) on a row whose maximum is `s.max` and smallest value above -inf is
//! `s.min`; returns the new maximum. Multiplication by 1/t is monotone, so the scaled row stays finite
//! iff its two extremes do: that test picks l * (1/t) (the common case, one multiply per token) or the
//! shifted (l - max) / t, whose values are in [-inf, 0] for every t > 0 (no 0 * inf, no inf / inf).
inline float apply_temperature(std::span<float> row, float t, const logit_scan& s) noexcept {
  const float inv = 1.0f / t;
  const float hi = s.max * inv, lo = s.min * inv;
  if (std::isfinite(hi) && std::isfinite(lo)) [[likely]] {
    scale_row(row.data(), row.size(), inv);
    return hi;
  }
  // s.max + 0: +0 for either zero, so the shifted zeros' signs do not depend on which zero the
  // scan met first (the CUDA backend's reduction may meet the other)
  shift_divide_row(row.data(), row.size(), s.max + 0.0f, t);
  return 0.0f;
}

//! Top-p keep set (TokenSwift Appendix D.1): the smallest prefix, in (weight desc, logit desc, id asc) order, whose
//! weight reaches p * total. One pass bins tokens by top_p_bin of their weight, with per-bin mass;
//! bins above the one where the running mass crosses p * total are kept whole, and only the tokens of
//! that boundary bin go through the mass-aware quickselect. O(V) plus a selection over one bin,
//! instead of a sort of V. `m` is the row's maximum (finite).
inline void apply_top_p(std::span<float> row, float top_p, float m, sampling_workspace& ws) {
  const double total = softmax_weights(row, m, ws);
  const double need = static_cast<double>(top_p) * total;
  const float* w = ws.weights.data();
  const std::size_t v = row.size();
  double mass[top_p_bins] = {};
  for (std::size_t i = 0; i < v; ++i) mass[top_p_bin(w[i])] += w[i];
  double above = 0.0;
  std::uint32_t boundary = top_p_bins - 1;
  for (; boundary > 0; --boundary) {
    if (above + mass[boundary] >= need) break;
    above += mass[boundary];
  }
  ws.idx.clear();
  for (std::size_t i = 0; i < v; ++i)
    if (top_p_bin(w[i]) == boundary && w[i] > 0.0f) ws.idx.push_back(static_cast<std::int32_t>(i));
  // weights in the boundary bin, ordered by (logit desc, id asc): the weights' order, but logits
  // that differ by less than the rounding of exp(l - m) (temperatures near FLT_MAX make every
  // difference subnormal) still rank the larger logit first, so top-p never drops a token that
  // another filter keeps as the most probable one (found by fuzzing: top-p and eta intersected empty)
  std::vector<double>& wd = ws.boundary_weights;
  wd.resize(v);
  for (auto i : ws.idx) wd[static_cast<std::size_t>(i)] = w[i];
  // The mass still needed, rounded up to the boundary bin's spacing (top_p_quantum): the bin's
  // weights are multiples of it, so a prefix reaches the rounded mass exactly when it reaches the
  // unrounded one, and every sum and difference the selection takes is exact. The kept set is then
  // the smallest (logit desc, id asc) prefix reaching need - above, whatever order the selection
  // visits the tokens in (the CUDA backend of process_logits_batch visits them in another).
  const double q = top_p_quantum(boundary);
  const double rest = std::ceil((need - above) / q) * q;
  const std::size_t kept = select_top_p(wd.data(), row.data(), 1.0, rest, ws.idx);
  if (ws.mark.size() != v) ws.mark.assign(v, 0);
  for (std::size_t j = 0; j < kept; ++j) ws.mark[static_cast<std::size_t>(ws.idx[j])] = 1;
  top_p_mask(row.data(), w, ws.mark.data(), v, boundary);
  for (std::size_t j = 0; j < kept; ++j) ws.mark[static_cast<std::size_t>(ws.idx[j])] = 0;
}

inline void apply_top_k(std::span<float> row, int k, sampling_workspace& ws) {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  const std::size_t v = row.size();
  if (k <= 1024) {  // heap selection (core/topk.hpp): one streaming pass
    ws.topk_idx.resize(static_cast<std::size_t>(k));
    ws.values.resize(static_cast<std::size_t>(k));
    topk(std::span<const float>(row.data(), v), k, std::span(ws.topk_idx), std::span(ws.values), ws.topk_ws);
    fill_row(row.data(), v, ninf);
    for (int j = 0; j < k; ++j) row[static_cast<std::size_t>(ws.topk_idx[static_cast<std::size_t>(j)])] = ws.values[static_cast<std::size_t>(j)];
    return;
  }
  select_top_k(row, k, ws.values, ws.keep);
  for (std::size_t i = 0; i < v; ++i)
    if (!ws.keep[i]) row[i] = ninf;
}

//! The smallest value the penalties can give the row's smallest logit `min` (> -inf): both penalties
//! applied in their order, as apply_penalties rounds them (each step is monotone, so no logit of the
//! row falls lower). Not finite when some logit could overflow to -inf: check_row then takes the
//! exact path. (A single factor min * (r * theta) is not enough: (min * r) * theta can overflow
//! where it does not.)
[[nodiscard]] SPECDEC_HOST_DEVICE inline float lowest_penalized(const sampling_params& p, float min) noexcept {
  float x = min;
  if (p.repetition_penalty != 1.0f) x = penalize(x, p.repetition_penalty, true);
  if (p.contextual_penalty != 1.0f && p.penalty_window > 0) x = penalize(x, p.contextual_penalty, p.contextual_sign_aware);
  return x;
}

//! min-p's cut for a row whose maximum is m: the smallest float c with double(c) - double(m) >=
//! ln(min_p) (ln in double), so that the keep test `l >= c` on a float logit is exactly l - m >=
//! ln(min_p), i.e. P(l) >= min_p * P(max) (the float sum m + ln(min_p) could round below that and
//! keep tokens under the threshold at large logits: 2.99585 below the maximum at 3000). m finite,
//! min_p in (0, 1]. A step or two from the rounded sum; the device computes the same (its log within
//! 1 ulp of the host's).
[[nodiscard]] SPECDEC_HOST_DEVICE inline float min_p_cut(float m, float min_p) noexcept {
  const double lnp = std::log(static_cast<double>(min_p)), md = m;
  const auto up = [](float x) {  // the next float above a finite x
    const std::uint32_t b = float_bits(x);
    return bits_float(b == 0x80000000u ? 1u : (b & 0x80000000u) ? b - 1u : b + 1u);
  };
  const auto down = [&](float x) { return -up(-x); };
  float c = static_cast<float>(md + lnp);
  while (static_cast<double>(c) - md < lnp) c = up(c);
  for (float d = down(c); static_cast<double>(d) - md >= lnp; d = down(c)) c = d;
  return c;
}

//! Whether a request's processing reads its context (a repetition or contextual penalty).
[[nodiscard]] SPECDEC_HOST_DEVICE inline bool applies_penalty(const sampling_params& p) noexcept {
  return p.repetition_penalty != 1.0f || (p.contextual_penalty != 1.0f && p.penalty_window > 0);
}

inline bool has_penalties(const sampling_params& p, std::span<const std::int32_t> prefix,
                          std::span<const std::int32_t> suffix) noexcept {
  return applies_penalty(p) && (!prefix.empty() || !suffix.empty());
}

//! Validates one row before anything is written (the first half of process_row): the policy check is
//! the max/min pass that temperature and greedy need anyway, returned for process_row. A penalty l * r
//! overflows to -inf only below -FLT_MAX / r; in that rare case the penalties are tried on a copy so a
//! row they would empty is rejected untouched.
inline logit_scan check_row(std::span<const float> row, const sampling_params& p, std::span<const std::int32_t> prefix,
                            std::span<const std::int32_t> suffix, const std::vector<std::int32_t>* distinct_prefix,
                            sampling_workspace& ws, const row_ref& at) {
  const logit_scan s = checked_logit_scan(row, at);
  if (has_penalties(p, prefix, suffix) && !std::isfinite(lowest_penalized(p, s.min))) [[unlikely]] {
    ws.values.assign(row.begin(), row.end());
    apply_penalties(ws.values, p, prefix, suffix, distinct_prefix, ws);
    if (!(scan_logits(ws.values.data(), ws.values.size()).max > -std::numeric_limits<float>::infinity()))
      throw_empty_row(at,
                      "at least one logit above -inf after the penalties (every admissible logit overflows to "
                      "-inf when multiplied by the penalty)",
                      "all -inf");
  }
  return s;
}

//! Steps 1-7 on a row that passed check_row (`s` is its result).
inline void process_row(std::span<float> row, const sampling_params& p, std::span<const std::int32_t> prefix,
                        std::span<const std::int32_t> suffix, const std::vector<std::int32_t>* distinct_prefix,
                        sampling_workspace& ws, logit_scan s) {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  if (has_penalties(p, prefix, suffix)) {
    apply_penalties(row, p, prefix, suffix, distinct_prefix, ws);
    s = scan_logits(row.data(), row.size());  // penalties create no NaN or +inf, only move values
  }
  if (p.temperature == 0.0f) {
    const auto top = static_cast<std::size_t>(first_index_of(row.data(), row.size(), s.max));
    fill_row(row.data(), row.size(), ninf);
    row[top] = 0.0f;
    return;
  }
  // m: the row's maximum from here on (top-k, top-p and min-p always keep the largest logit)
  float m = s.max;
  if (p.temperature != 1.0f) m = apply_temperature(row, p.temperature, s);
  if (p.top_k > 0 && static_cast<std::size_t>(p.top_k) < row.size()) apply_top_k(row, p.top_k, ws);
  if (p.top_p < 1.0f) apply_top_p(row, p.top_p, m, ws);
  if (p.min_p > 0.0f) {
    // P(v) >= p_base * p_max  <=>  l_v - max >= ln(p_base): compared on logits, no exp needed
    mask_below(row.data(), row.size(), min_p_cut(m, p.min_p));
  }
  if (p.eta_epsilon > 0.0f) {
    const double sum = softmax_weights(row, m, ws);
    // H = -sum P log P with P = w / sum, log P = (l - max) - log sum  =>  H = log sum - sum w (l - max) / sum
    const float* w = ws.weights.data();
    const double t = weighted_shift_sum(w, row.data(), row.size(), m);
    const double h = std::log(sum) - t / sum;
    const std::int64_t best = first_index_of(row.data(), row.size(), m);
    mask_weight_below(row.data(), w, row.size(), eta_weight_cut(p.eta_epsilon, p.eta_alpha, sum, h), best);
  }
}

}  // namespace detail

//! Processes one row of logits in place with the chain above. The penalty context is
//! `context` ++ `context_suffix` (e.g. committed tokens and a tree node's root path).
//! Preconditions (checked, invalid_argument otherwise, the row untouched): every context token in
//! [0, V); no NaN or +inf logit; at least one logit above -inf (see the file comment).
//! Complexity: O(V + |context|) expected (no full sort; top-k/top-p are linear-time selections).
inline void process_logits(std::span<float> logits, const sampling_params& params,
                           std::span<const std::int32_t> context, std::span<const std::int32_t> context_suffix,
                           sampling_workspace& ws) {
  constexpr std::string_view fn = "specdec::process_logits";
  detail::require_row_size(fn, "logits", logits.size());
  validate_sampling_params(params, fn);
  const int vocab = static_cast<int>(logits.size());
  detail::check_context(context, vocab, fn, "context");
  detail::check_context(context_suffix, vocab, fn, "context_suffix");
  detail::require_apart_from_workspace(fn, "context", context, ws);
  detail::require_apart_from_workspace(fn, "context_suffix", context_suffix, ws);
  detail::require_apart_from_workspace(fn, "logits",
                                       make_view<1>(logits.data(), {static_cast<std::int64_t>(logits.size())}), ws);
  const auto scan = detail::check_row(logits, params, context, context_suffix, nullptr, ws, {fn, "logits"});
  detail::process_row(logits, params, context, context_suffix, nullptr, ws, scan);
}

//! process_logits with an empty suffix.
inline void process_logits(std::span<float> logits, const sampling_params& params,
                           std::span<const std::int32_t> context, sampling_workspace& ws) {
  process_logits(logits, params, context, {}, ws);
}

namespace detail {

//! process_tree_logits in two halves, for callers that need only some rows processed (the decoder's
//! verifiers with verify_logits read only the rows their walks visit): the constructor checks the
//! arguments and every row (process_tree_logits' checks, invalid_argument naming `fn`; nothing is
//! written), then process(r, out) writes row r processed into `out` (V floats: the row itself, or
//! any other buffer), as process_tree_logits processes it. Holds references to its arguments, and
//! O(n + |distinct committed|) of its own; the rows must not change in between.
class tree_rows_processor {
 public:
  //! in_place: the caller will process the rows into themselves (process_tree_logits), so they must
  //! not overlap (checked where process_tree_logits always checked it).
  tree_rows_processor(const strided_view<const float, 2>& view, const sampling_params& params,
                      std::span<const std::int32_t> committed, std::span<const std::int32_t> tokens,
                      std::span<const std::int32_t> parents, sampling_workspace& ws, std::string_view fn,
                      bool in_place = false)
      : view_(view), params_(params), committed_(committed), tokens_(tokens), parents_(parents), ws_(ws), fn_(fn) {
    require_host_accessible(fn, "logits", view);
    require_equal(fn, "parents.size()", tokens.size(), parents.size());
    const auto n = static_cast<std::int64_t>(tokens.size());
    require_shape(fn, "logits", view, {n + 1, -1});
    if (in_place) require_unique_elements(fn, "logits", view);  // processed in place, row by row
    require(view.extent(1) >= 1 && view.extent(1) <= std::numeric_limits<std::int32_t>::max(), fn, "logits",
            "vocab (extent 1) in [1, 2^31 - 1]", view.extent(1));
    require_unit_inner_stride(fn, "logits", view);
    require_apart_from_workspace(fn, "logits", view, ws);
    validate_sampling_params(params, fn);
    vocab_ = view.extent(1);
    check_context(committed, vocab_, fn, "committed");
    check_context(tokens, vocab_, fn, "tokens");
    require_apart_from_workspace(fn, "committed", committed, ws);
    require_apart_from_workspace(fn, "tokens", tokens, ws);
    require_apart_from_workspace(fn, "parents", parents, ws);
    for (std::int64_t i = 0; i < n; ++i)
      if (parents[static_cast<std::size_t>(i)] < -1 || parents[static_cast<std::size_t>(i)] >= i) [[unlikely]]
        throw_invalid_argument(fn, "parents", "parents[i] in [-1, i) (topological order) at i = " + std::to_string(i),
                               parents[static_cast<std::size_t>(i)]);
    // Distinct committed tokens once (repetition penalty scans them per row otherwise).
    if (params.repetition_penalty != 1.0f) {
      ws.mark.assign(static_cast<std::size_t>(vocab_), 0);
      for (auto t : committed)
        if (!ws.mark[static_cast<std::size_t>(t)]) {
          ws.mark[static_cast<std::size_t>(t)] = 1;
          distinct_.push_back(t);
        }
      for (auto t : distinct_) ws.mark[static_cast<std::size_t>(t)] = 0;
      dp_ = &distinct_;
    }
    // every row is checked before any is written, so a rejected call leaves the logits as they were
    scans_.resize(static_cast<std::size_t>(n + 1));
    for (std::int64_t r = 0; r <= n; ++r)
      scans_[static_cast<std::size_t>(r)] = check_row(row(r), params, committed, row_path(r), dp_, ws, {fn, "logits", r});
  }

  // dp_ points into the object itself: neither copied nor moved
  tree_rows_processor(const tree_rows_processor&) = delete;
  tree_rows_processor& operator=(const tree_rows_processor&) = delete;

  [[nodiscard]] std::int64_t vocab() const noexcept { return vocab_; }

  //! Row r (0: the root's; i + 1: after node i) processed into `out` (vocab() floats; the row itself
  //! processes it in place).
  void process(std::int64_t r, std::span<float> out) {
    require_equal(fn_, "the processed row's size", static_cast<std::size_t>(vocab_), out.size());
    require_apart_from_workspace(fn_, "the processed row", make_view<1>(out.data(), {vocab_}), ws_);
    const auto in = row(r);
    if (out.data() != in.data()) std::copy(in.begin(), in.end(), out.begin());
    process_row(out, params_, committed_, row_path(r), dp_, ws_, scans_[static_cast<std::size_t>(r)]);
  }

 private:
  [[nodiscard]] std::span<const float> row(std::int64_t r) const {
    return {view_.data() + r * view_.stride(0), static_cast<std::size_t>(vocab_)};
  }
  //! The root path of row r's node (root child first), in path_.
  std::span<const std::int32_t> row_path(std::int64_t r) {
    path_.clear();
    for (std::int64_t a = r - 1; a >= 0; a = parents_[static_cast<std::size_t>(a)]) path_.push_back(tokens_[static_cast<std::size_t>(a)]);
    std::reverse(path_.begin(), path_.end());
    return path_;
  }

  strided_view<const float, 2> view_;
  const sampling_params& params_;
  std::span<const std::int32_t> committed_, tokens_, parents_;
  sampling_workspace& ws_;
  std::string_view fn_;
  std::int64_t vocab_ = 0;
  std::vector<std::int32_t> distinct_, path_;
  const std::vector<std::int32_t>* dp_ = nullptr;
  std::vector<logit_scan> scans_;
};

}  // namespace detail

//! Processes the n+1 verification rows of a token tree in place: row 0 (the root's distribution)
//! with context = `committed`, row i+1 with context = committed ++ path(i) (root child first, node i
//! last), i.e. exactly what autoregressive decoding would use after emitting that path.
//! The tree is given by parallel arrays: tokens[i], parents[i] (-1 = child of the root, parents[i] < i).
//! `logits` is float [n+1, V], unit inner stride. Every row must satisfy process_logits' preconditions;
//! all rows are checked before any is written, and a bad row throws invalid_argument naming its index.
//! Complexity: O((n+1)(V + W + depth) + |committed|).
template <tensor_like Logits>
  requires std::is_same_v<typename Logits::element_type, float>
void process_tree_logits(const Logits& logits, const sampling_params& params,
                         std::span<const std::int32_t> committed, std::span<const std::int32_t> tokens,
                         std::span<const std::int32_t> parents, sampling_workspace& ws) {
  constexpr std::string_view fn = "specdec::process_tree_logits";
  static_assert(Logits::rank == 2, "specdec::process_tree_logits: logits must be rank 2 [n+1, V]");
  const auto view = as_view(logits);
  detail::tree_rows_processor rows(strided_view<const float, 2>(view), params, committed, tokens, parents, ws, fn,
                                   /*in_place=*/true);
  for (std::int64_t r = 0; r < view.extent(0); ++r)
    rows.process(r, std::span<float>(view.data() + r * view.stride(0), static_cast<std::size_t>(rows.vocab())));
}

namespace detail {

//! Whether p passes validate_sampling_params and, unless `penalties` (process_logits_batch given a
//! penalty_context), applies no penalty: what process_logits_batch accepts. Host and device.
[[nodiscard]] SPECDEC_HOST_DEVICE inline bool batch_sampling_params_ok(const sampling_params& p,
                                                                       bool penalties) noexcept {
  const bool valid = std::isfinite(p.temperature) && p.temperature >= 0.0f && p.top_k >= 0 && p.top_p > 0.0f &&
                     p.top_p <= 1.0f && p.min_p >= 0.0f && p.min_p <= 1.0f && p.eta_epsilon >= 0.0f &&
                     p.eta_epsilon < 1.0f && std::isfinite(p.eta_alpha) && p.eta_alpha != 0.0f &&
                     std::isfinite(p.repetition_penalty) && p.repetition_penalty >= 1.0f &&
                     std::isfinite(p.contextual_penalty) && p.contextual_penalty >= 1.0f && p.penalty_window >= 0 &&
                     bool_byte(p.contextual_sign_aware) <= 1;
  return valid && (penalties || (p.repetition_penalty == 1.0f && (p.contextual_penalty == 1.0f || p.penalty_window == 0)));
}

//! Largest V of process_logits_batch and logits_to_probs_batch: top-p's bin sums (and the CUDA
//! backend's weighted selection) are exact up to 2^29 terms (sampling/detail/vec.hpp, top_p_quantum).
inline constexpr std::int64_t batch_max_vocab = std::int64_t{1} << 29;
//! Largest V of penalized_argmax_batch on the cuda backend: its row's bitmap lives in shared memory
//! (2^20 bits = 128 KiB, under the 227 KiB a block may opt in to on sm_90).
inline constexpr std::int64_t penalized_argmax_max_vocab = std::int64_t{1} << 20;

//! process_logits_batch's arguments (a kernel parameter). The penalty context's arrays are null in
//! the five-argument form (with_context false: a penalty is refused).
struct process_logits_batch_args {
  float* logits = nullptr;
  std::int64_t rows = 0, vocab = 0, stride = 0;
  const sampling_params* params = nullptr;
  std::int64_t num_params = 0;
  const std::int32_t* row_params = nullptr;
  std::int32_t* status = nullptr;
  bool with_context = false;
  const std::int32_t *distinct = nullptr, *last = nullptr, *context_indptr = nullptr, *context_length = nullptr,
                     *row_context = nullptr, *path_indptr = nullptr, *path = nullptr;
  std::int64_t pairs = 0, contexts = 0, path_tokens = 0;
};

//! Row r's penalty view under sampling_params p, from the context's headers: its context's range and
//! length (penalty_context_header_ok) and its suffix range (penalty_path_range_ok). False when a
//! header is malformed or row_context[r] is outside [-1, C) (`context` gets the row's context, -1
//! for none); the pairs and suffix tokens themselves are checked by the caller (penalty_pair_ok).
//! Without a context: an empty view (no penalty applies).
[[nodiscard]] SPECDEC_HOST_DEVICE inline bool row_penalty_of(const process_logits_batch_args& a, std::int64_t r,
                                                             const sampling_params& p, row_penalty& rp,
                                                             std::int32_t& context) noexcept {
  rp = make_row_penalty(p.repetition_penalty, p.contextual_penalty, p.penalty_window, p.contextual_sign_aware,
                        nullptr, nullptr, 0, 0, nullptr, 0);
  context = -1;
  if (!a.with_context) return true;
  context = a.row_context[r];
  const std::int32_t plo = a.path_indptr[r], phi = a.path_indptr[r + 1];
  if (context < -1 || context >= a.contexts || !penalty_path_range_ok(plo, phi, a.path_tokens)) return false;
  std::int32_t lo = 0, hi = 0, length = 0;
  if (context >= 0) {
    lo = a.context_indptr[context], hi = a.context_indptr[context + 1], length = a.context_length[context];
    if (!penalty_context_header_ok(lo, hi, length, a.pairs)) return false;
  }
  rp = make_row_penalty(p.repetition_penalty, p.contextual_penalty, p.penalty_window, p.contextual_sign_aware,
                        a.distinct + lo, a.last + lo, hi - lo, length, a.path + plo, phi - plo);
  return true;
}

//! The seam between process_logits_batch and its backends: static void run(const Policy&, const
//! process_logits_batch_args&). The host backend is below, the cuda one in sampling/logits_processor.cuh.
SPECDEC_BACKEND_SEAM(process_logits_backend, "process_logits_batch", "specdec/sampling/logits_processor.cuh");

//! One row's checks of check_batch_rows_host (below): its row_params entry, sampling_params, penalty
//! view (`rp`; its context's pairs unless context_checked[c] is set, which this then sets; null:
//! always), suffix tokens, logits and, when the penalties could overflow every admissible logit to
//! -inf, what would survive them. Returns the row's scan; throws invalid_argument naming `fn` and the
//! row. Also the sampled verifier's check of each row it visits (verify/sample_and_match.hpp).
inline logit_scan check_batch_row_host(const process_logits_batch_args& a, std::int64_t i, std::string_view fn,
                                       std::string_view logits_name, row_penalty& rp, std::uint8_t* context_checked) {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  const auto bad_context = [&](const std::string& what, std::int64_t value) {
    throw_invalid_argument(fn, "context", what + " (row " + std::to_string(i) + ")", value);
  };
  const std::int32_t e = a.row_params[i];
  if (e < 0 || e >= a.num_params) [[unlikely]]
    throw_invalid_argument(fn, "row_params",
                           "entries in [0, params.extent(0) = " + std::to_string(a.num_params) + ") (at row " +
                               std::to_string(i) + ")",
                           e);
  const sampling_params& p = a.params[e];
  validate_sampling_params(p, fn);
  if (!batch_sampling_params_ok(p, a.with_context)) [[unlikely]]
    throw_invalid_argument(fn, "params",
                           "no repetition or contextual penalty (entry " + std::to_string(e) +
                               "): the five-argument form gets no context; pass a penalty_context",
                           "a penalty");
  std::int32_t c = -1;
  if (!row_penalty_of(a, i, p, rp, c)) [[unlikely]] {
    if (c < -1 || c >= a.contexts) bad_context("row_context entries in [-1, " + std::to_string(a.contexts) + ")", c);
    if (!penalty_path_range_ok(a.path_indptr[i], a.path_indptr[i + 1], a.path_tokens))
      bad_context("a path range [path_indptr[i], path_indptr[i + 1]) inside [0, " + std::to_string(a.path_tokens) + "]",
                  a.path_indptr[i + 1]);
    bad_context("context " + std::to_string(c) + ": a range of context_indptr inside [0, " + std::to_string(a.pairs) +
                    "] holding at most context_length tokens, none exactly when the length is 0",
                a.context_length[c]);
  }
  if (c >= 0 && (context_checked == nullptr || !context_checked[c])) {  // each context's pairs once
    const std::int64_t lo = a.context_indptr[c], hi = a.context_indptr[c + 1];
    for (std::int64_t j = lo; j < hi; ++j)
      if (!penalty_pair_ok(a.distinct, a.last, lo, j, a.vocab, a.context_length[c])) [[unlikely]]
        bad_context("context " + std::to_string(c) + ": distinct tokens in [0, V) strictly ascending, last "
                    "positions in [0, context_length) (at pair " + std::to_string(j) + ", token",
                    a.distinct[j]);
    if (context_checked != nullptr) context_checked[c] = 1;
  }
  for (std::int32_t k = 0; k < rp.depth; ++k)
    if (rp.path[k] < 0 || rp.path[k] >= a.vocab) [[unlikely]]
      bad_context("path tokens in [0, V) (at suffix position " + std::to_string(k) + ")", rp.path[k]);
  const row_ref at{fn, logits_name, i};
  const float* row = a.logits + i * a.stride;
  const logit_scan s = checked_logit_scan(std::span<const float>(row, static_cast<std::size_t>(a.vocab)), at);
  if (rp.active() && !std::isfinite(lowest_penalized(p, s.min))) [[unlikely]] {
    // the penalties could overflow every admissible logit to -inf: count what would survive
    std::int64_t surviving = 0;
    for (std::int64_t j = 0; j < a.vocab; ++j) surviving += row[j] > ninf;
    for (std::int32_t j = 0; j < rp.count; ++j) surviving += penalty_pair_survival(rp, j, row);
    for (std::int32_t k = 0; k < rp.depth; ++k) surviving += penalty_path_survival(rp, k, row);
    if (surviving == 0)
      throw_empty_row(at,
                      "at least one logit above -inf after the penalties (every admissible logit overflows to "
                      "-inf when multiplied by the penalty)",
                      "all -inf");
  }
  return s;
}

//! The host backends' checks of every row of a batch before any is written (process_logits_batch) or
//! read for a result (penalized_argmax_batch): check_batch_row_host on each row in order, each
//! context's pairs once. Fills each row's scan and penalty view; throws invalid_argument naming `fn`
//! (the first failing row).
inline void check_batch_rows_host(const process_logits_batch_args& a, std::string_view fn, std::vector<logit_scan>& scans,
                                  std::vector<row_penalty>& penalties, std::string_view logits_name = "logits") {
  scans.assign(static_cast<std::size_t>(a.rows), logit_scan{});
  penalties.assign(static_cast<std::size_t>(a.rows), row_penalty{});
  std::vector<std::uint8_t> context_checked(static_cast<std::size_t>(a.contexts), 0);
  for (std::int64_t i = 0; i < a.rows; ++i)  // every row first: a rejected call writes nothing
    scans[static_cast<std::size_t>(i)] =
        check_batch_row_host(a, i, fn, logits_name, penalties[static_cast<std::size_t>(i)], context_checked.data());
}

//! process_logits_batch's work on one row that passed check_batch_row_host (`rp`, `s`: its results),
//! into `row` (the row itself, or a copy of it): the penalties in penalty_context.hpp's two phases
//! (one owner per token in each), then process_row's steps 3-7.
inline void process_batch_row_host(const process_logits_batch_args& a, std::int64_t i, std::span<float> row,
                                   const row_penalty& rp, logit_scan s, sampling_workspace& ws) {
  if (rp.active()) {
    for (std::int32_t j = 0; j < rp.count; ++j) {
      if (!penalty_pair_acts(rp, j)) continue;
      float& x = row[static_cast<std::size_t>(rp.distinct[j])];
      x = penalized_logit(rp, x, rp.last[j]);
    }
    for (std::int32_t k = 0; k < rp.depth; ++k) {
      std::int32_t t, pair;
      const auto act = penalty_path_step(rp, k, t, pair);
      if (act != penalty_path_action::none)
        row[static_cast<std::size_t>(t)] = penalty_path_value(rp, act, row[static_cast<std::size_t>(t)], k);
    }
    s = scan_logits(row.data(), row.size());
  }
  process_row(row, a.params[a.row_params[i]], {}, {}, nullptr, ws, s);
}

template <>
struct process_logits_backend<host> {
  static void run(const host& policy, const process_logits_batch_args& a) {
    const auto v = static_cast<std::size_t>(a.vocab);
    std::vector<logit_scan> scans;
    std::vector<row_penalty> penalties;
    check_batch_rows_host(a, "specdec::process_logits_batch", scans, penalties);
    parallel_for(policy, a.rows, [&](std::int64_t i) {  // rows on the host pool, a workspace per thread
      thread_local sampling_workspace tws;
      process_batch_row_host(a, i, std::span<float>(a.logits + i * a.stride, v), penalties[static_cast<std::size_t>(i)],
                             scans[static_cast<std::size_t>(i)], tws);
    });
    a.status[0] = 0, a.status[1] = -1, a.status[2] = -1;
  }
};

//! The checks of the logits rows of the batch forms (process_logits_batch, logits_to_probs_batch, and
//! the device verifiers that call them): memory the policy can read, an array with unit inner stride
//! and a non-null pointer, 1 <= V <= 2^29 (top-p's bin sums are exact, so independent of the order
//! they are taken in, below 2^29 tokens) and rows <= 2^31 - 1. Throws invalid_argument naming `fn`.
template <class Policy, class View>
void require_batch_rows(std::string_view fn, const View& logits, std::string_view name = "logits") {
  require_policy_memory<Policy>(fn, name, logits);
  require_array(fn, name, logits);
  require_unit_inner_stride(fn, name, logits);
  const std::int64_t rows = logits.extent(0), vocab = logits.extent(1);
  require(rows == 0 || vocab >= 1, fn, name, "a non-empty row (vocab >= 1)", vocab);
  require(vocab <= batch_max_vocab, fn, name, "at most 2^29 columns", vocab);
  require(rows <= std::numeric_limits<std::int32_t>::max(), fn, name, "at most 2^31 - 1 rows", rows);
  require(rows == 0 || logits.data() != nullptr, fn, name, "a non-null data pointer", "nullptr");
}

//! process_logits_batch's checks of everything but the context, and its arguments. `Writable` false:
//! the rows are only read (penalized_argmax_batch): const float is accepted and rows may overlap.
template <class Policy, bool Writable = true, class Lg, class Pa, class RP, class ST>
process_logits_batch_args process_logits_batch_of(std::string_view fn, const Lg& logits_in, const Pa& params_in,
                                                  const RP& row_params_in, const ST& status_in,
                                                  std::string_view logits_name = "logits") {
  static_assert(Lg::rank == 2 && (Writable ? std::is_same_v<typename Lg::element_type, float>
                                           : std::is_same_v<std::remove_cv_t<typename Lg::element_type>, float>),
                "specdec::process_logits_batch: logits must be a writable float tensor [rows, V] (penalized_argmax_batch: "
                "a float tensor)");
  static_assert(std::is_same_v<std::remove_cv_t<typename Pa::element_type>, sampling_params> && Pa::rank == 1,
                "specdec::process_logits_batch: params must be a 1-D tensor of sampling_params");
  const auto logits = as_view(logits_in);
  const auto params = as_view(params_in);
  const auto row_params = as_view(row_params_in);
  const auto status = as_view(status_in);
  require_batch_rows<Policy>(fn, logits, logits_name);
  if constexpr (Writable) require_unique_elements(fn, logits_name, logits);
  const std::int64_t rows = logits.extent(0);
  require_policy_memory<Policy>(fn, "params", params);
  require_array(fn, "params", params);
  require(params.extent(0) <= 1 || params.stride(0) == 1, fn, "params", "unit stride", params.stride(0));
  require(params.extent(0) == 0 || params.data() != nullptr, fn, "params", "a non-null data pointer", "nullptr");
  require_policy_array<Policy>(fn, "row_params", row_params, rows);
  require_policy_array<Policy>(fn, "status", status, 3);
  require_disjoint(fn, logits_name, logits, "params", params, "row_params", row_params, "status", status);
  // read only when !Writable (penalized_argmax_args says so)
  return {const_cast<float*>(logits.data()), rows, logits.extent(1), logits.stride(0), params.data(), params.extent(0),
          row_params.data(), status.data()};
}

//! The six-argument forms' checks of the penalty context (process_logits_batch, penalized_argmax_batch):
//! each array in memory the policy can read, of the sizes penalty_context says, disjoint from the
//! arrays the call writes (`written`: name, view pairs); sets a's context fields.
template <class Policy, class... Written>
void attach_penalty_context(std::string_view fn, process_logits_batch_args& a, const penalty_context& c,
                            const Written&... written) {
  const std::int64_t lim = penalty_context_max;
  require_policy_array<Policy>(fn, "context.distinct", c.distinct, -1);
  require(c.distinct.extent(0) <= lim, fn, "context.distinct", "at most INT32_MAX pairs", c.distinct.extent(0));
  require_policy_array<Policy>(fn, "context.last", c.last, c.distinct.extent(0));
  require_policy_array<Policy>(fn, "context.context_length", c.context_length, -1);
  require(c.context_length.extent(0) < lim, fn, "context.context_length", "fewer than INT32_MAX contexts",
          c.context_length.extent(0));
  require_policy_array<Policy>(fn, "context.context_indptr", c.context_indptr, c.context_length.extent(0) + 1);
  require_policy_array<Policy>(fn, "context.row_context", c.row_context, a.rows);
  require_policy_array<Policy>(fn, "context.path_indptr", c.path_indptr, a.rows + 1);
  require_policy_array<Policy>(fn, "context.path", c.path, -1);
  require(c.path.extent(0) <= lim, fn, "context.path", "at most INT32_MAX tokens", c.path.extent(0));
  for (const auto& [name, array] : {std::pair{"context.distinct", c.distinct}, {"context.last", c.last},
                                     {"context.context_indptr", c.context_indptr},
                                     {"context.context_length", c.context_length}, {"context.row_context", c.row_context},
                                     {"context.path_indptr", c.path_indptr}, {"context.path", c.path}})
    require_disjoint(fn, written..., name, array);  // the arrays written; the context may share memory
  a.with_context = true;
  a.distinct = c.distinct.data(), a.last = c.last.data(), a.context_indptr = c.context_indptr.data();
  a.context_length = c.context_length.data(), a.row_context = c.row_context.data();
  a.path_indptr = c.path_indptr.data(), a.path = c.path.data();
  a.pairs = c.distinct.extent(0), a.contexts = c.context_length.extent(0), a.path_tokens = c.path.extent(0);
}

}  // namespace detail

//! The processor chain (process_logits, steps 3-7: temperature, top-k, top-p, min-p, eta) on every
//! row of a batch at once, in place: row i with params[row_params[i]] (e.g. the request's
//! sampling_params for each of its tree rows). The form a GPU engine calls on the logits its target
//! left in device memory, before logits_to_probs_batch and the array-form verifiers; no other
//! [rows, V] tensor is made. Penalties need each row's context, which this form does not get: an
//! entry with a repetition or contextual penalty is refused (the six-argument form below takes a
//! penalty_context).
//!   logits      float [rows, V], unit inner stride, rows that do not overlap; processed in place
//!   params      sampling_params [P]
//!   row_params  int32 [rows], entries in [0, P)
//!   status      int32 [3]: {0, -1, -1}, or the device's report: device_error::params (request = the
//!               entry, index = the row: an entry out of range, invalid, or with a penalty),
//!               device_error::context (six-argument form; request = the row's context, index = the
//!               row) or device_error::row (request -1, index = the row: NaN, +inf, no logit above
//!               -inf, or none left above -inf by the penalties); a reported row is left as it was
//! V <= 2^29 and rows <= 2^31 - 1 (checked).
//! specdec::host: host-accessible memory; every row and entry checked before any row is written
//! (invalid_argument naming the row), then the rows processed on the host pool (policy.num_threads);
//! each row equals process_logits' result with an empty context.
//! specdec::cuda (needs sampling/logits_processor.cuh and nvcc): device-accessible memory; a block
//! per row (sampling/logits_processor.cuh says how). Each row equals the host's bit for bit where the
//! host's weights are fast_exp_fused's (its AVX2 and AVX-512 levels under the compilers' default
//! contraction, not the portable level), the device keeps IEEE denormals (not -ftz=true /
//! --use_fast_math), and apart from min-p's ln(p_base) and eta's entropy, which take the device's
//! double log and exp (within 1 ulp of the host's, so a logit within that of a min-p or eta cut can
//! be kept on one side only). Enqueued on policy.stream without synchronisation, graph-capturable.
//! O(rows x V) per step that is on, and top-k and top-p read a row a few more times.
template <execution_policy Policy, tensor_like Lg, tensor_like Pa, class RP, class ST>
  requires(detail::int32_array<RP> && detail::int32_output<ST>)
void process_logits_batch(const Policy& policy, const Lg& logits, const Pa& params, const RP& row_params,
                          const ST& status) {
  const auto a = detail::process_logits_batch_of<Policy>("specdec::process_logits_batch", logits, params, row_params,
                                                         status);
  detail::process_logits_backend<Policy>::run(policy, a);
}

//! process_logits_batch with the penalties (process_logits' steps 1-2, then 3-7): row i's penalty
//! context is its context's committed tokens followed by its suffix (penalty_context; e.g. a request's
//! tokens and a tree node's root path, penalty_context_builder::add_tree_rows), and each row equals
//! process_logits(row, params, committed, suffix) bit for bit (host), or under the conditions above
//! (cuda; a penalty is a division or a multiplication, IEEE on both sides). The context's arrays are
//! in memory the policy can read and must not overlap the logits or status; their values are checked
//! as penalty_context says (host: before any row is written, invalid_argument naming the row; cuda:
//! device_error::context for the row, which is left as it was). Extra cost per row: O(|pairs| x
//! (1 + depth) + depth x (depth + log |pairs|)) reads, spread over the block on the device, plus one
//! more scan of the row when a penalty applies.
template <execution_policy Policy, tensor_like Lg, tensor_like Pa, class RP, class ST>
  requires(detail::int32_array<RP> && detail::int32_output<ST>)
void process_logits_batch(const Policy& policy, const Lg& logits, const Pa& params, const RP& row_params,
                          const penalty_context& context, const ST& status) {
  constexpr std::string_view fn = "specdec::process_logits_batch";
  auto a = detail::process_logits_batch_of<Policy>(fn, logits, params, row_params, status);
  detail::attach_penalty_context<Policy>(fn, a, context, "logits", as_view(logits), "status", as_view(status));
  detail::process_logits_backend<Policy>::run(policy, a);
}

namespace detail {

//! penalized_argmax_batch's arguments (a kernel parameter): the rows, entries and context as
//! process_logits_batch's (rows.logits is only read), and the output.
struct penalized_argmax_args {
  process_logits_batch_args rows;
  std::int32_t* argmax = nullptr;
  const char* fn = "specdec::penalized_argmax_batch";  //!< the entry point and the rows' name, for
  const char* logits_name = "logits";                  //!< a backend's own refusals
};

//! The seam between penalized_argmax_batch and its backends: static void run(const Policy&, const
//! penalized_argmax_args&). The host backend is below, the cuda one in sampling/logits_processor.cuh.
SPECDEC_BACKEND_SEAM(penalized_argmax_backend, "penalized_argmax_batch", "specdec/sampling/logits_processor.cuh");

//! The host form of penalized_argmax_batch (its backend, and verify_greedy_batch's penalized form):
//! every row checked first (invalid_argument naming args.fn and args.logits_name; nothing written),
//! then each row's first maximum after its penalties into args.argmax, rows on the policy's threads.
inline void penalized_argmax_host(const host& policy, const penalized_argmax_args& args) {
  const process_logits_batch_args& a = args.rows;
  std::vector<logit_scan> scans;
  std::vector<row_penalty> penalties;
  check_batch_rows_host(a, args.fn, scans, penalties, args.logits_name);  // nothing written before
  parallel_for(policy, a.rows, [&](std::int64_t i) {
    thread_local std::vector<float> outside;  // the row with its context and suffix tokens at -inf
    const auto n = static_cast<std::size_t>(a.vocab);
    const float* row = a.logits + i * a.stride;
    const row_penalty& rp = penalties[static_cast<std::size_t>(i)];
    if (!rp.active()) {
      args.argmax[i] = static_cast<std::int32_t>(first_index_of(row, n, scans[static_cast<std::size_t>(i)].max));
      return;
    }
    // the tokens that keep their logits: a copy with the others masked, scanned by the vector kernels
    outside.assign(row, row + n);
    constexpr float ninf = -std::numeric_limits<float>::infinity();
    for (std::int32_t j = 0; j < rp.count; ++j) outside[static_cast<std::size_t>(rp.distinct[j])] = ninf;
    for (std::int32_t k = 0; k < rp.depth; ++k) outside[static_cast<std::size_t>(rp.path[k])] = ninf;
    first_max best;
    const float m = scan_logits(outside.data(), n).max;
    if (m > ninf) best.see(m, static_cast<std::int32_t>(first_index_of(outside.data(), n, m)));
    // each penalized token's final value, from its owner (penalty_context.hpp; the device kernel's parts)
    window_suffix_filter filter;
    for (std::int64_t k = window_suffix_begin(rp); k < rp.depth; ++k) filter.add(rp.path[k]);
    const auto maybe = [&filter](std::int32_t t) { return filter.maybe(t); };
    for (std::int32_t j = 0; j < rp.count; ++j) {
      float v;
      if (penalty_pair_final(rp, j, row, maybe, v)) best.see(v, rp.distinct[j]);
    }
    for (std::int32_t k = 0; k < rp.depth; ++k) {
      std::int32_t token;
      float v;
      if (penalty_path_final(rp, k, row, token, v)) best.see(v, token);
    }
    args.argmax[i] = best.i;  // the checks leave some logit above -inf
  });
  a.status[0] = 0, a.status[1] = -1, a.status[2] = -1;
}

template <>
struct penalized_argmax_backend<host> {
  static void run(const host& policy, const penalized_argmax_args& args) { penalized_argmax_host(policy, args); }
};

//! penalized_argmax_batch's checks (named `fn`) and arguments: the rows, entries and context as
//! process_logits_batch's (read only; V <= penalized_argmax_max_vocab under cuda), `argmax` [rows]
//! in memory the policy can write, disjoint from the rest (`argmax_name` and `logits_name`: the
//! caller's names for those two in messages).
template <class Policy, class Lg, class Pa, class RP, class AM, class ST>
penalized_argmax_args penalized_argmax_args_of(const char* fn, const Lg& logits, const Pa& params,
                                               const RP& row_params, const penalty_context& context, const AM& argmax,
                                               const ST& status, const char* argmax_name = "argmax",
                                               const char* logits_name = "logits") {
  const auto lg = as_view(logits);
  if constexpr (std::is_same_v<Policy, cuda>)
    require(lg.extent(1) <= penalized_argmax_max_vocab, fn, logits_name, "at most 2^20 columns on the cuda backend",
            lg.extent(1));
  auto a = process_logits_batch_of<Policy, false>(fn, logits, params, row_params, status, logits_name);
  const auto st = as_view(status);
  const auto am = as_view(argmax);
  require_policy_array<Policy>(fn, argmax_name, am, a.rows);
  require_disjoint(fn, argmax_name, am, logits_name, lg, "status", st, "params", as_view(params), "row_params",
                   as_view(row_params));
  attach_penalty_context<Policy>(fn, a, context, argmax_name, am, "status", st);
  return {a, am.data(), fn, logits_name};
}

}  // namespace detail

//! Each row's greedy token after its penalties, without writing the rows: argmax[i] is the token
//! process_logits_batch (six-argument form, temperature 0) would make row i one-hot at, the first
//! maximum of the penalized row. Greedy verification with repetition or contextual penalties reads
//! this (the CUDA greedy verifier: decoder/device_verifiers.cuh) instead of a processed copy of every
//! row: one read of the logits, no [rows, V] buffer. The other processors are not read: at
//! temperature 0 they keep the maximum.
//!   logits      float [rows, V] (const allowed), unit inner stride; only read
//!   params      sampling_params [P]; row_params int32 [rows], entries in [0, P)
//!   context     penalty_context: row i's committed context and suffix, as process_logits_batch's
//!   argmax      int32 [rows] out: the token, or -1 for a row the device reports
//!   status      int32 [3] out: {0, -1, -1}, or process_logits_batch's reports (device_error::params,
//!               ::context, ::row) for the same rows
//!   specdec::host: every row checked first as process_logits_batch checks it (invalid_argument naming
//!     the row; nothing written), then the rows on the policy's threads: a copy of the row with its
//!     context and suffix tokens at -inf scanned by the vector kernels, then each of those tokens'
//!     final value; O(V + |pairs| + depth (depth + log |pairs|)) per row (a pair before the window
//!     scans the suffix only when a 1024-bit filter of the in-window suffix says maybe), and a
//!     V-float scratch row per pool thread, kept for the next call.
//!   specdec::cuda (needs sampling/logits_processor.cuh and nvcc): a block per row, its context and
//!     suffix tokens marked in a shared-memory bitmap (V / 8 bytes: V <= 2^20, and only as far as the
//!     device lets one block opt in, penalized_argmax_fits: every V <= 2^20 on sm_90, about 790K
//!     tokens on sm_86 / sm_89; else invalid_argument before any CUDA work), one pass over the row,
//!     then the owners; enqueued on policy.stream, no synchronisation.
//! Results are equal on both backends (a penalty is one IEEE division or multiplication).
template <execution_policy Policy, tensor_like Lg, tensor_like Pa, class RP, class AM, class ST>
  requires(detail::int32_array<RP> && detail::int32_output<AM> && detail::int32_output<ST>)
void penalized_argmax_batch(const Policy& policy, const Lg& logits, const Pa& params, const RP& row_params,
                            const penalty_context& context, const AM& argmax, const ST& status) {
  detail::penalized_argmax_backend<Policy>::run(
      policy, detail::penalized_argmax_args_of<Policy>("specdec::penalized_argmax_batch", logits, params, row_params,
                                                       context, argmax, status));
}

namespace detail {

//! logits_to_probs_batch's arguments (a kernel parameter).
struct logits_to_probs_batch_args {
  const float* logits = nullptr;
  float* probs = nullptr;
  std::int64_t rows = 0, vocab = 0, l_stride = 0, p_stride = 0;
  std::int32_t* status = nullptr;
};

//! logits_to_probs_batch's work on one checked row (`max`: its maximum): exp(l - max) / sum into `out`,
//! which may be the row itself (the weights go through a scratch row per thread).
inline void probs_row_host(const float* row, std::size_t v, float max, float* out) {
  thread_local std::vector<float> w;
  w.resize(v);
  const double s = exp_sum(row, v, max, w.data());
  scale_row(w.data(), v, static_cast<float>(1.0 / s));
  std::copy(w.begin(), w.end(), out);
}

//! A row processing has just left (finite maximum, no NaN or +inf) turned into probabilities in place:
//! logits_to_probs_batch's values for it.
inline void processed_row_to_probs(std::span<float> row) {
  probs_row_host(row.data(), row.size(), scan_logits(row.data(), row.size()).max, row.data());
}

//! The seam between logits_to_probs_batch and its backends: static void run(const Policy&, const
//! logits_to_probs_batch_args&). The host backend is below, the cuda one in sampling/logits_processor.cuh.
SPECDEC_BACKEND_SEAM(logits_to_probs_backend, "logits_to_probs_batch", "specdec/sampling/logits_processor.cuh");

template <>
struct logits_to_probs_backend<host> {
  static void run(const host& policy, const logits_to_probs_batch_args& a) {
    constexpr std::string_view fn = "specdec::logits_to_probs_batch";
    const auto v = static_cast<std::size_t>(a.vocab);
    std::vector<float> max(static_cast<std::size_t>(a.rows));
    for (std::int64_t i = 0; i < a.rows; ++i)  // every row first: a rejected call writes nothing
      max[static_cast<std::size_t>(i)] =
          checked_logit_scan(std::span<const float>(a.logits + i * a.l_stride, v), {fn, "logits", i}).max;
    parallel_for(policy, a.rows, [&](std::int64_t i) {  // rows on the host pool
      probs_row_host(a.logits + i * a.l_stride, v, max[static_cast<std::size_t>(i)], a.probs + i * a.p_stride);
    });
    a.status[0] = 0, a.status[1] = -1, a.status[2] = -1;
  }
};

}  // namespace detail

//! logits_to_probs on every row of a batch at once: probs[i] = exp(l - max) / sum of logits row i
//! (process_logits_batch's output, say), the probability rows the array-form verifiers read.
//!   logits  float [rows, V], unit inner stride
//!   probs   float [rows, V], unit inner stride, rows that do not overlap: the logits themselves
//!           (the same data and strides: in place) or memory disjoint from them
//!   status  int32 [3]: {0, -1, -1}, or device_error::row (request -1, index = the row: NaN, +inf or
//!           no logit above -inf; that row is not written)
//! specdec::host: host-accessible memory; rows checked before any is written, then converted on the
//! host pool; each row equals logits_to_probs'. specdec::cuda (needs sampling/logits_processor.cuh and nvcc): device-accessible
//! memory; a block per row, the row sum in the host's order (chunks of 256, 16 lanes each), so each
//! row equals the host's bit for bit under process_logits_batch's conditions (fast_exp_fused, IEEE
//! denormals). Enqueued on policy.stream without synchronisation, graph-capturable. O(rows x V).
template <execution_policy Policy, tensor_like Lg, tensor_like Pr, class ST>
  requires(detail::int32_output<ST>)
void logits_to_probs_batch(const Policy& policy, const Lg& logits_in, const Pr& probs_in, const ST& status_in) {
  constexpr std::string_view fn = "specdec::logits_to_probs_batch";
  static_assert(std::is_same_v<std::remove_cv_t<typename Lg::element_type>, float> && Lg::rank == 2,
                "specdec::logits_to_probs_batch: logits must be a float tensor [rows, V]");
  static_assert(std::is_same_v<typename Pr::element_type, float> && Pr::rank == 2,
                "specdec::logits_to_probs_batch: probs must be a writable float tensor [rows, V]");
  const auto logits = as_view(logits_in);
  const auto probs = as_view(probs_in);
  const auto status = as_view(status_in);
  detail::require_batch_rows<Policy>(fn, logits);
  const std::int64_t rows = logits.extent(0), vocab = logits.extent(1);
  require_policy_memory<Policy>(fn, "probs", probs);
  require_shape(fn, "probs", probs, {rows, vocab});
  require_unit_inner_stride(fn, "probs", probs);
  require_unique_elements(fn, "probs", probs);
  require_policy_array<Policy>(fn, "status", status, 3);
  const bool in_place = static_cast<const void*>(probs.data()) == static_cast<const void*>(logits.data()) &&
                        (rows <= 1 || probs.stride(0) == logits.stride(0));
  if (!in_place) require_disjoint(fn, "logits", logits, "probs", probs);
  require_disjoint(fn, "logits", logits, "status", status);
  require_disjoint(fn, "probs", probs, "status", status);
  detail::logits_to_probs_batch_args a{logits.data(), probs.data(), rows, vocab, logits.stride(0), probs.stride(0),
                                       status.data()};
  detail::logits_to_probs_backend<Policy>::run(policy, a);
}

//! Softmax of a processed row into `probs` (same length): P = exp(l - max) / sum (exp by
//! detail::fast_exp, sum in double). Preconditions (checked, invalid_argument otherwise): no NaN or
//! +inf; at least one logit above -inf; probs either the logits' own row (in place) or disjoint from
//! it. O(V): a checking max pass, an exp-and-sum pass, a scale pass.
inline void logits_to_probs(std::span<const float> logits, std::span<float> probs) {
  constexpr std::string_view fn = "specdec::logits_to_probs";
  require_equal(fn, "probs.size()", logits.size(), probs.size());
  detail::require_row_size(fn, "logits", logits.size());
  const auto l0 = reinterpret_cast<std::uintptr_t>(logits.data()), p0 = reinterpret_cast<std::uintptr_t>(probs.data());
  const std::uintptr_t bytes = logits.size() * sizeof(float);
  require(p0 == l0 || p0 + bytes <= l0 || l0 + bytes <= p0, fn, "probs",
          "memory disjoint from 'logits', or the logits' own row (in place)", "an overlapping span");
  const float m = detail::checked_logit_scan(logits, {fn, "logits"}).max;
  const double s = detail::exp_sum(logits.data(), logits.size(), m, probs.data());
  detail::scale_row(probs.data(), probs.size(), static_cast<float>(1.0 / s));
}

}  // namespace specdec
