#pragma once
//! \file reference/attention.hpp
//! Naive, obviously-correct double-precision references of the attention primitives, used by the
//! differential tests. Each one literally concatenates the cache's and the tree's K/V of a request,
//! applies the full mask ([all ones | tree mask]) and takes a max-subtracted softmax, with no
//! splitting, blocking or log-sum-exp merging, so it shares no logic with the optimized kernels.
//! Cost O(sum_r n_r (L_r + n_r) Hq D); memory O(L_r + n_r) per query row. Host memory only.
//!
//! detail::softmax_row is the one softmax of every attention oracle (this file's, and those of
//! reference/cross_attention.hpp and reference/sliding_window_attention.hpp). No public header
//! includes anything under reference/: tests, benchmarks and examples include it themselves.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "specdec/core/bitmask.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/numeric.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/kv/kv_layout.hpp"

namespace specdec::reference {

//! Output of a reference attention call: out [tokens, heads, dim] and natural-log lse [tokens, heads].
struct attention_result {
  int tokens = 0, heads = 0, dim = 0;
  std::vector<double> out;
  std::vector<double> lse;
  [[nodiscard]] double o(int t, int h, int d) const { return out[(static_cast<std::size_t>(t) * heads + h) * dim + d]; }
  [[nodiscard]] double l(int t, int h) const { return lse[static_cast<std::size_t>(t) * heads + h]; }
};

//! Stand-in for "no cache" / "no tree" arguments.
struct none {};

namespace detail {
//! hq a multiple of hkv (the GQA group), checked for the attention references (naming `fn`).
inline void require_head_groups(std::string_view fn, std::int64_t hq, std::int64_t hkv) {
  if (!(hq % hkv == 0)) [[unlikely]]
    throw_invalid_argument(fn, "q",
                           "a number of query heads that is a multiple of the number of kv heads (" +
                               std::to_string(hkv) + ")",
                           hq);
}

//! q_indptr's values (any stride) as a unit-stride copy, checked as offsets into q's `tokens` rows
//! (validate_indptr, naming `fn`).
template <class IV>
std::vector<std::int32_t> checked_q_offsets(std::string_view fn, const IV& iv, std::int64_t tokens) {
  const std::int64_t requests = iv.extent(0) - 1;
  std::vector<std::int32_t> offsets(static_cast<std::size_t>(requests) + 1);
  for (std::int64_t r = 0; r <= requests; ++r) offsets[static_cast<std::size_t>(r)] = static_cast<std::int32_t>(iv(r));
  specdec::detail::validate_indptr(fn, "q_indptr", "q_indptr", offsets.data(), requests, tokens,
                                   "the number of query tokens q.extent(0)");
  return offsets;
}

//! The softmax of one query row over its visible keys: given the scaled logits of the row's keys and
//! value_row(k), a callable whose result `v` gives element c of key k's value row as v(c), adds
//! sum_k softmax(logits)_k * v_k into o[0, d) and returns the row's natural-log LSE,
//! max + log sum_k exp(logit_k - max). No keys: o untouched, returns -inf.
template <class ValueRow>
double softmax_row(const std::vector<double>& logits, ValueRow&& value_row, double* o, int d) {
  if (logits.empty()) return -std::numeric_limits<double>::infinity();
  double mx = -std::numeric_limits<double>::infinity();
  for (double s : logits) mx = std::max(mx, s);
  double sum = 0;
  for (double s : logits) sum += std::exp(s - mx);
  for (std::size_t k = 0; k < logits.size(); ++k) {
    const double p = std::exp(logits[k] - mx) / sum;
    const auto v = value_row(k);
    for (int c = 0; c < d; ++c) o[c] += p * v(c);
  }
  return mx + std::log(sum);
}

//! An empty attention_result of `tokens` x `heads` rows of dimension `dim`: out 0, lse -inf.
inline attention_result empty_result(int tokens, int heads, int dim) {
  attention_result res;
  res.tokens = tokens;
  res.heads = heads;
  res.dim = dim;
  res.out.assign(static_cast<std::size_t>(tokens) * heads * dim, 0.0);
  res.lse.assign(static_cast<std::size_t>(tokens) * heads, -std::numeric_limits<double>::infinity());
  return res;
}

template <class V>
double elem(const V& v, std::int64_t i, std::int64_t j, std::int64_t k) {
  return static_cast<double>(to_float(v(i, j, k)));
}

//! The one reference: for each request r, query token i, head h, keys = [cache tokens 0..L_r) ++
//! [tree tokens j of r with mask bit (i, j)] (all tree tokens when Masked is false).
//! Argument checks (throwing specdec::invalid_argument naming the public reference and the
//! argument): the shapes, q_indptr's values, the mask's word count, the heads, the cache's layout
//! (validate_kv_layout) and a finite scale; everything the loops below read is then in bounds.
//! They accept every call the optimized entry point accepts (the mask's bits and the head_dim
//! values 64/128/256 are not restricted here).
template <class Q, class L, class K, class V, class I, class M>
attention_result attention(const Q& q_in, const L* cache, const K* spec_k, const V* spec_v, const I& q_indptr,
                           const M* mask, double scale) {
  constexpr std::string_view fn = std::is_same_v<L, none>   ? "specdec::reference::tree_attention"
                                  : std::is_same_v<K, none> ? "specdec::reference::decode_attention"
                                                            : "specdec::reference::hybrid_tree_attention";
  {
    const auto qv = as_view(q_in);
    const auto iv = as_view(q_indptr);
    static_assert(decltype(qv)::rank == 3, "specdec::reference attention: q is [tokens, heads, head_dim]");
    static_assert(decltype(iv)::rank == 1, "specdec::reference attention: q_indptr is [requests + 1]");
    if constexpr (!std::is_same_v<L, none>) {
      // q_indptr's extent against the layout's request count before the layout's lengths are read
      require(cache->num_requests() >= 0, fn, "cache", "num_requests() >= 0", cache->num_requests());
      require_shape(fn, "q_indptr", iv, {static_cast<std::int64_t>(cache->num_requests()) + 1});
      validate_kv_layout(*cache, fn, "cache");
    } else {
      require_array(fn, "q_indptr", iv);
      require(iv.extent(0) >= 1 && iv.extent(0) <= INT32_MAX, fn, "q_indptr",
              "between 1 and 2^31 - 1 elements (num_requests + 1)", iv.extent(0));
    }
    require_array(fn, "q", qv);
    const std::int64_t tokens = qv.extent(0), hq = qv.extent(1), d = qv.extent(2);
    require(tokens <= INT32_MAX, fn, "q", "at most 2^31-1 tokens", tokens);
    require(hq >= 1 && hq <= INT32_MAX, fn, "q", "between 1 and 2^31-1 query heads (extent 1)", hq);
    require(d >= 1 && d <= INT32_MAX, fn, "q", "a head_dim (extent 2) between 1 and 2^31-1", d);
    (void)checked_size_product(fn, "q", {tokens, hq, d});
    std::int64_t hkv = 1;
    if constexpr (!std::is_same_v<L, none>) {
      hkv = cache->num_kv_heads();
      if (cache->head_dim() != d) [[unlikely]]
        throw_invalid_argument(fn, "cache", "head_dim() equal to q's head_dim " + std::to_string(d),
                               cache->head_dim());
    } else if constexpr (!std::is_same_v<K, none>) {
      hkv = as_view(*spec_k).extent(1);
      require(hkv >= 1, fn, "spec_k", "at least one kv head (extent 1)", hkv);
    }
    detail::require_head_groups(fn, hq, hkv);
    const std::int64_t requests = iv.extent(0) - 1;
    const std::vector<std::int32_t> offsets = detail::checked_q_offsets(fn, iv, tokens);
    if constexpr (!std::is_same_v<K, none>) {
      const auto kv = as_view(*spec_k);
      const auto vv = as_view(*spec_v);
      const auto mv = as_view(*mask);
      static_assert(decltype(kv)::rank == 3 && decltype(vv)::rank == 3,
                    "specdec::reference attention: spec_k and spec_v are [tokens, kv_heads, head_dim]");
      static_assert(decltype(mv)::rank == 1, "specdec::reference attention: the mask is rank 1");
      require_shape(fn, "spec_k", kv, {tokens, hkv, d});
      require_shape(fn, "spec_v", vv, {tokens, hkv, d});
      std::int64_t words = 0;  // sum over requests of n_r * words_per_row(n_r)
      for (std::int64_t r = 0; r < requests; ++r) {
        const int n = offsets[static_cast<std::size_t>(r) + 1] - offsets[static_cast<std::size_t>(r)];
        words += static_cast<std::int64_t>(n) * words_per_row(n);
      }
      require_shape(fn, "mask", mv, {words});
    }
    require(std::isfinite(scale), fn, "scale", "a finite value (0 = 1/sqrt(head_dim))", scale);
  }
  const auto q = as_view(q_in);
  const auto ip = as_view(q_indptr);
  const int tokens = static_cast<int>(q.extent(0)), hq = static_cast<int>(q.extent(1)), d = static_cast<int>(q.extent(2));
  const int requests = static_cast<int>(ip.extent(0)) - 1;
  int hkv = 1;
  if constexpr (!std::is_same_v<L, none>) hkv = cache->num_kv_heads();
  else if constexpr (!std::is_same_v<K, none>) hkv = static_cast<int>(spec_k->extent(1));
  const int group = hq / hkv;
  if (scale == 0.0) scale = 1.0 / std::sqrt(static_cast<double>(d));
  attention_result res = empty_result(tokens, hq, d);
  const auto sv = [&] {  // the tree's values, when the call has a tree part
    if constexpr (!std::is_same_v<V, none>) return as_view(*spec_v);
    else return none{};
  }();
  std::int64_t mask_off = 0;
  std::vector<double> logits;
  std::vector<int> keys;  // visible keys of one query row: cache token t as t, tree token j as -(j + 1)
  for (int r = 0; r < requests; ++r) {
    const int t0 = ip(r), n = ip(r + 1) - ip(r);
    const int wpr = words_per_row(n);
    for (int i = 0; i < n; ++i) {
      for (int h = 0; h < hq; ++h) {
        const int g = h / group;
        logits.clear();
        keys.clear();
        auto dot_q = [&](auto row_at) {
          double s = 0;
          for (int c = 0; c < d; ++c) s += static_cast<double>(to_float(q(t0 + i, h, c))) * row_at(c);
          return s * scale;
        };
        if constexpr (!std::is_same_v<L, none>) {
          for (int t = 0; t < cache->length(r); ++t) {
            const auto* kr = cache->k_row(r, t, g);
            logits.push_back(dot_q([&](int c) { return static_cast<double>(to_float(kr[c])); }));
            keys.push_back(t);
          }
        }
        if constexpr (!std::is_same_v<K, none>) {
          const auto sk = as_view(*spec_k);
          const auto mk = as_view(*mask);
          for (int j = 0; j < n; ++j) {
            const mask_word w = mk(mask_off + static_cast<std::int64_t>(i) * wpr + (j >> 6));
            if (((w >> (j & 63)) & 1u) == 0) continue;
            logits.push_back(dot_q([&](int c) { return elem(sk, t0 + j, g, c); }));
            keys.push_back(-(j + 1));
          }
        }
        double* o = &res.out[(static_cast<std::size_t>(t0 + i) * hq + h) * d];
        auto cache_row = [&](int t) {
          if constexpr (!std::is_same_v<L, none>) return cache->v_row(r, t, g);
          else return static_cast<const double*>(nullptr);
        };
        res.lse[static_cast<std::size_t>(t0 + i) * hq + h] = softmax_row(
            logits,
            [&](std::size_t k) {
              const int key = keys[k];
              const auto vr = key >= 0 ? cache_row(key) : decltype(cache_row(0)){};
              return [&, vr, key](int c) -> double {
                if (key >= 0) return static_cast<double>(to_float(vr[c]));
                if constexpr (!std::is_same_v<V, none>) return elem(sv, t0 - key - 1, g, c);
                return 0.0;  // unreachable: tree keys exist only when the call has a tree part
              };
            },
            o, d);
      }
    }
    mask_off += static_cast<std::int64_t>(n) * wpr;
  }
  return res;
}
}  // namespace detail

//! Reference of specdec::hybrid_tree_attention: attention over concat(cache K/V, tree K/V) of each
//! request with the mask [all ones | tree mask]. Same argument conventions; scale 0 = 1/sqrt(D).
template <tensor_like Q, kv_layout L, tensor_like K, tensor_like V, tensor_like I, tensor_like M>
attention_result hybrid_tree_attention(const Q& q, const L& cache, const K& spec_k, const V& spec_v, const I& q_indptr,
                                       const M& mask, double scale = 0.0) {
  return detail::attention(q, &cache, &spec_k, &spec_v, q_indptr, &mask, scale);
}

//! Reference of specdec::decode_attention: every query token of request r sees all L_r cached tokens.
template <tensor_like Q, kv_layout L, tensor_like I>
attention_result decode_attention(const Q& q, const L& cache, const I& q_indptr, double scale = 0.0) {
  return detail::attention<Q, L, none, none, I, none>(q, &cache, nullptr, nullptr, q_indptr, nullptr, scale);
}

//! Reference of specdec::tree_attention: tree tokens see the tree tokens their mask row selects.
template <tensor_like Q, tensor_like K, tensor_like V, tensor_like I, tensor_like M>
attention_result tree_attention(const Q& q, const K& spec_k, const V& spec_v, const I& q_indptr, const M& mask,
                                double scale = 0.0) {
  return detail::attention<Q, none, K, V, I, M>(q, nullptr, &spec_k, &spec_v, q_indptr, &mask, scale);
}

}  // namespace specdec::reference
