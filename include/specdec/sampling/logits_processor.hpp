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
//!   3. temperature: l / t (Eq. 3's t; Eq. 3 = step 2 followed by step 3). t = 0 means greedy: the
//!      row becomes one-hot at the argmax (ties: lowest id), so every sampler reduces to argmax;
//!   4. top-k: keep the k largest (ties: lowest ids), others -> -inf;
//!   5. top-p (Appendix D.1): keep the smallest set, in (probability desc, id asc) order, whose
//!      probability reaches p (probabilities = detail::fast_exp(l - max) / sum, the weights every
//!      specdec sampler uses);
//!   6. min-p (Appendix D.1, Nguyen et al. 2024): keep tokens with P >= p_base * p_max, evaluated
//!      exactly as l - max >= ln(p_base) on the logits;
//!   7. eta-sampling (Appendix D.1, Hewitt et al. 2022): keep tokens with P >= eta,
//!      eta = min(epsilon, alpha * exp(-H(P))), H the entropy of the current distribution; the argmax
//!      is always kept so the set is never empty (only reachable when alpha > 1).
//! Steps 5-7 each renormalise over what the previous steps kept. Removed tokens get -inf.
//!
//! The penalty context of a tree node is the committed tokens followed by that node's own root path
//! (its ancestors and itself), so row i+1 of a verification output (the distribution after node i)
//! is processed exactly as the autoregressive decoder would process it after emitting that path:
//! process_tree_logits does this for all n+1 rows.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/core/topk.hpp"
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

inline float penalize(float l, float theta, bool sign_aware) noexcept {
  if (sign_aware && l <= 0.0f) return l * theta;
  return l / theta;
}

//! Token at position j of the concatenation prefix ++ suffix.
inline std::int32_t context_at(std::span<const std::int32_t> prefix, std::span<const std::int32_t> suffix,
                               std::size_t j) noexcept {
  return j < prefix.size() ? prefix[j] : suffix[j - prefix.size()];
}

inline void check_context(std::span<const std::int32_t> ctx, int vocab, std::string_view function,
                          std::string_view argument) {
  for (std::size_t j = 0; j < ctx.size(); ++j)
    if (ctx[j] < 0 || ctx[j] >= vocab) [[unlikely]]
      throw_invalid_argument(function, argument,
                             "token ids in [0, vocab = " + std::to_string(vocab) + ") (at position " +
                                 std::to_string(j) + ")",
                             ctx[j]);
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

//! Index of the largest value, lowest id on ties; -1 when every value is -inf or NaN.
inline std::int64_t argmax_lowest(std::span<const float> row) noexcept {
  const float m = row_max(row.data(), row.size());
  if (!(m > -std::numeric_limits<float>::infinity())) return -1;
  return first_index_of(row.data(), row.size(), m);
}

//! Fills ws.weights with exp(l - max) (exactly 0 for -inf) and returns their sum (double).
inline double softmax_weights(std::span<const float> row, sampling_workspace& ws) {
  const float m = row_max(row.data(), row.size());
  ws.weights.resize(row.size());
  return exp_sum(row.data(), row.size(), m, ws.weights.data());
}

//! Top-p keep set (TokenSwift Appendix D.1): the smallest prefix, in (weight desc, id asc) order, whose
//! weight reaches p * total. One pass bins tokens by the float exponent and top 3 mantissa bits of
//! their weight (weights are <= 1: at most 1024 bins, each an eighth of a binade, ordered like the
//! weights) with per-bin mass; bins above the one where the running mass crosses p * total are kept
//! whole, and only the tokens of that boundary bin go through the mass-aware quickselect. O(V) plus a
//! selection over one bin, instead of a sort of V.
inline void apply_top_p(std::span<float> row, float top_p, sampling_workspace& ws) {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  const double total = softmax_weights(row, ws);
  const double need = static_cast<double>(top_p) * total;
  const float* w = ws.weights.data();
  const std::size_t v = row.size();
  double mass[1024] = {};  // key = exponent and top 3 mantissa bits: monotone in the weight
  for (std::size_t i = 0; i < v; ++i) mass[std::bit_cast<std::uint32_t>(w[i]) >> 20] += w[i];
  double above = 0.0;
  int boundary = 1023;
  for (; boundary > 0; --boundary) {
    if (above + mass[boundary] >= need) break;
    above += mass[boundary];
  }
  ws.idx.clear();
  for (std::size_t i = 0; i < v; ++i)
    if (static_cast<int>(std::bit_cast<std::uint32_t>(w[i]) >> 20) == boundary && w[i] > 0.0f)
      ws.idx.push_back(static_cast<std::int32_t>(i));
  // weights in the boundary bin, ordered by (weight desc, id asc)
  std::vector<double>& wd = ws.boundary_weights;
  wd.resize(v);
  for (auto i : ws.idx) wd[static_cast<std::size_t>(i)] = w[i];
  const std::size_t m = select_top_p(wd.data(), w, 1.0, need - above, ws.idx);
  if (ws.mark.size() != v) ws.mark.assign(v, 0);
  for (std::size_t j = 0; j < m; ++j) ws.mark[static_cast<std::size_t>(ws.idx[j])] = 1;
  for (std::size_t i = 0; i < v; ++i) {
    const int bin = static_cast<int>(std::bit_cast<std::uint32_t>(w[i]) >> 20);
    const bool keep = bin > boundary || (bin == boundary && ws.mark[i]);
    row[i] = keep ? row[i] : ninf;
  }
  for (std::size_t j = 0; j < m; ++j) ws.mark[static_cast<std::size_t>(ws.idx[j])] = 0;
}

inline void apply_top_k(std::span<float> row, int k, sampling_workspace& ws) {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  const std::size_t v = row.size();
  if (k <= 1024) {  // heap selection (core/topk.hpp): one streaming pass
    ws.topk_idx.resize(static_cast<std::size_t>(k));
    ws.values.resize(static_cast<std::size_t>(k));
    topk(std::span<const float>(row.data(), v), k, std::span(ws.topk_idx), std::span(ws.values), ws.topk_ws);
    std::fill(row.begin(), row.end(), ninf);
    for (int j = 0; j < k; ++j) row[static_cast<std::size_t>(ws.topk_idx[static_cast<std::size_t>(j)])] = ws.values[static_cast<std::size_t>(j)];
    return;
  }
  select_top_k(row, k, ws.values, ws.keep);
  for (std::size_t i = 0; i < v; ++i)
    if (!ws.keep[i]) row[i] = ninf;
}

inline void process_row(std::span<float> row, const sampling_params& p, std::span<const std::int32_t> prefix,
                        std::span<const std::int32_t> suffix, const std::vector<std::int32_t>* distinct_prefix,
                        sampling_workspace& ws, std::string_view function) {
  constexpr float ninf = -std::numeric_limits<float>::infinity();
  if (has_nan_or_posinf(row.data(), row.size())) [[unlikely]]
    throw_invalid_argument(function, "logits", "finite or -inf logits (no NaN, no +inf)", "NaN or +inf");
  apply_penalties(row, p, prefix, suffix, distinct_prefix, ws);
  const std::int64_t top = argmax_lowest(row);
  require(top >= 0, function, "logits", "at least one logit above -inf per row", "all -inf");
  if (p.temperature == 0.0f) {
    std::fill(row.begin(), row.end(), ninf);
    row[static_cast<std::size_t>(top)] = 0.0f;
    return;
  }
  if (p.temperature != 1.0f) {
    const float inv = 1.0f / p.temperature;
    for (float& x : row) x *= inv;
  }
  if (p.top_k > 0 && static_cast<std::size_t>(p.top_k) < row.size()) apply_top_k(row, p.top_k, ws);
  if (p.top_p < 1.0f) apply_top_p(row, p.top_p, ws);
  if (p.min_p > 0.0f) {
    // P(v) >= p_base * p_max  <=>  l_v - max >= ln(p_base): compared on logits, no exp needed
    const float m = row_max(row.data(), row.size());
    const float cut = m + static_cast<float>(std::log(static_cast<double>(p.min_p)));
    for (float& x : row) x = x >= cut ? x : ninf;
  }
  if (p.eta_epsilon > 0.0f) {
    const double s = softmax_weights(row, ws);
    // H = -sum P log P with P = w / s, log P = (l - max) - log s  =>  H = log s - sum w (l - max) / s
    const float m = row_max(row.data(), row.size());
    double acc[lanes] = {};
    std::size_t i = 0;
    const float* w = ws.weights.data();
    for (; i + lanes <= row.size(); i += lanes)
      for (int j = 0; j < lanes; ++j) acc[j] += w[i + j] > 0.0f ? static_cast<double>(w[i + j]) * (row[i + j] - m) : 0.0;
    double t = 0.0;
    for (; i < row.size(); ++i) t += w[i] > 0.0f ? static_cast<double>(w[i]) * (row[i] - m) : 0.0;
    for (int j = 0; j < lanes; ++j) t += acc[j];
    const double h = std::log(s) - t / s;
    const double alpha = p.eta_alpha < 0.0f ? std::sqrt(static_cast<double>(p.eta_epsilon)) : p.eta_alpha;
    const double eta = std::min(static_cast<double>(p.eta_epsilon), alpha * std::exp(-h));
    const std::int64_t best = argmax_lowest(row);
    const double cut = eta * s;
    for (std::size_t k = 0; k < row.size(); ++k)
      if (static_cast<double>(w[k]) < cut && static_cast<std::int64_t>(k) != best) row[k] = ninf;
  }
}

}  // namespace detail

//! Processes one row of logits in place with the chain above. The penalty context is
//! `context` ++ `context_suffix` (e.g. committed tokens and a tree node's root path).
//! Preconditions: every context token in [0, V); no NaN; at least one logit above -inf.
//! Complexity: O(V + |context|) expected (no full sort; top-k/top-p are linear-time selections).
inline void process_logits(std::span<float> logits, const sampling_params& params,
                           std::span<const std::int32_t> context, std::span<const std::int32_t> context_suffix,
                           sampling_workspace& ws) {
  constexpr std::string_view fn = "specdec::process_logits";
  require(!logits.empty(), fn, "logits", "a non-empty row (vocab >= 1)", logits.size());
  validate_sampling_params(params, fn);
  const int vocab = static_cast<int>(logits.size());
  detail::check_context(context, vocab, fn, "context");
  detail::check_context(context_suffix, vocab, fn, "context_suffix");
  detail::process_row(logits, params, context, context_suffix, nullptr, ws, fn);
}

//! process_logits with an empty suffix.
inline void process_logits(std::span<float> logits, const sampling_params& params,
                           std::span<const std::int32_t> context, sampling_workspace& ws) {
  process_logits(logits, params, context, {}, ws);
}

//! Processes the n+1 verification rows of a token tree in place: row 0 (the root's distribution)
//! with context = `committed`, row i+1 with context = committed ++ path(i) (root child first, node i
//! last), i.e. exactly what autoregressive decoding would use after emitting that path.
//! The tree is given by parallel arrays: tokens[i], parents[i] (-1 = child of the root, parents[i] < i).
//! `logits` is float [n+1, V], unit inner stride. Complexity: O((n+1)(V + W + depth) + |committed|).
template <tensor_like Logits>
  requires std::is_same_v<typename Logits::element_type, float>
void process_tree_logits(const Logits& logits, const sampling_params& params,
                         std::span<const std::int32_t> committed, std::span<const std::int32_t> tokens,
                         std::span<const std::int32_t> parents, sampling_workspace& ws) {
  constexpr std::string_view fn = "specdec::process_tree_logits";
  static_assert(Logits::rank == 2, "specdec::process_tree_logits: logits must be rank 2 [n+1, V]");
  auto view = as_view(logits);
  require_host_accessible(fn, "logits", view);
  require_equal(fn, "parents.size()", tokens.size(), parents.size());
  const auto n = static_cast<std::int64_t>(tokens.size());
  require_shape(fn, "logits", view, {n + 1, -1});
  require(view.extent(1) >= 1, fn, "logits", "vocab (extent 1) >= 1", view.extent(1));
  require_unit_inner_stride(fn, "logits", view);
  validate_sampling_params(params, fn);
  const int vocab = static_cast<int>(view.extent(1));
  detail::check_context(committed, vocab, fn, "committed");
  detail::check_context(tokens, vocab, fn, "tokens");
  for (std::int64_t i = 0; i < n; ++i)
    if (parents[static_cast<std::size_t>(i)] < -1 || parents[static_cast<std::size_t>(i)] >= i) [[unlikely]]
      throw_invalid_argument(fn, "parents", "parents[i] in [-1, i) (topological order) at i = " + std::to_string(i),
                             parents[static_cast<std::size_t>(i)]);

  // Distinct committed tokens once (repetition penalty scans them per row otherwise).
  std::vector<std::int32_t> distinct;
  const std::vector<std::int32_t>* dp = nullptr;
  if (params.repetition_penalty != 1.0f) {
    ws.mark.assign(static_cast<std::size_t>(vocab), 0);
    for (auto t : committed)
      if (!ws.mark[static_cast<std::size_t>(t)]) {
        ws.mark[static_cast<std::size_t>(t)] = 1;
        distinct.push_back(t);
      }
    for (auto t : distinct) ws.mark[static_cast<std::size_t>(t)] = 0;
    dp = &distinct;
  }
  std::vector<std::int32_t> path;
  for (std::int64_t r = 0; r <= n; ++r) {
    path.clear();
    for (std::int64_t a = r - 1; a >= 0; a = parents[static_cast<std::size_t>(a)]) path.push_back(tokens[static_cast<std::size_t>(a)]);
    std::reverse(path.begin(), path.end());
    std::span<float> row(view.data() + r * view.stride(0), static_cast<std::size_t>(vocab));
    detail::process_row(row, params, committed, path, dp, ws, fn);
  }
}

//! Softmax of a processed row into `probs` (same length): P = exp(l - max) / sum (exp by
//! detail::fast_exp, sum in double). Preconditions: no NaN/+inf; at least one logit above -inf. O(V).
inline void logits_to_probs(std::span<const float> logits, std::span<float> probs) {
  constexpr std::string_view fn = "specdec::logits_to_probs";
  require_equal(fn, "probs.size()", logits.size(), probs.size());
  require(!logits.empty(), fn, "logits", "a non-empty row", logits.size());
  require(!detail::has_nan_or_posinf(logits.data(), logits.size()), fn, "logits", "finite or -inf logits",
          "NaN or +inf");
  const float m = detail::row_max(logits.data(), logits.size());
  require(m > -std::numeric_limits<float>::infinity(), fn, "logits", "at least one logit above -inf", "all -inf");
  const double s = detail::exp_sum(logits.data(), logits.size(), m, probs.data());
  const auto inv = static_cast<float>(1.0 / s);
  for (float& x : probs) x *= inv;
}

}  // namespace specdec
