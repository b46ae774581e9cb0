// Shared helpers of the sliding-window attention tests: random ring contents with their full-history
// oracle, random draft trees with packed ancestor masks, and a differential run against the naive
// reference (reference::sliding_window_attention, which never looks at the ring). Casts, random
// fills and the closeness check come from test_random_util.hpp (shared with the cross-attention tests).
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "specdec/attention/sliding_window_attention.hpp"
#include "specdec/reference/attention.hpp"
#include "specdec/reference/ring_kv.hpp"
#include "specdec/reference/sliding_window_attention.hpp"
#include "test_random_util.hpp"

namespace swtest {

using attn_rand::cast;
using attn_rand::fill_normal;
using attn_rand::require_close;
using attn_rand::wide;

//! Random topological tree of n nodes (parent < index, -1 = root's child) packed as the ancestor mask.
inline void append_random_tree_mask(int n, std::mt19937& rng, std::vector<specdec::mask_word>& mask) {
  const int wpr = specdec::words_per_row(n);
  std::vector<int> parent(static_cast<std::size_t>(n));
  const std::size_t base = mask.size();
  mask.resize(base + static_cast<std::size_t>(n) * wpr, 0);
  for (int i = 0; i < n; ++i) {
    // mostly shallow-and-wide with some long chains
    parent[i] = i == 0 ? -1 : static_cast<int>(rng() % 3 == 0 ? i - 1 : static_cast<int>(rng() % (i + 1)) - 1);
    specdec::mask_word* row = mask.data() + base + static_cast<std::size_t>(i) * wpr;
    specdec::set_bit(row, i);
    for (int a = parent[i]; a >= 0; a = parent[a]) specdec::set_bit(row, a);
  }
}

//! One random problem: ring + history per request, tree tokens, queries.
template <class T>
struct problem {
  int R, hq, hkv, d, W;
  specdec::ring_kv_cache<T> ring;
  std::vector<specdec::reference::sliding_window_history<T>> hist;
  std::vector<std::int32_t> q_indptr;
  std::vector<specdec::mask_word> mask;
  std::vector<T> q, k, v;  // q [N, hq, d], spec k/v [N, hkv, d]

  problem(int R_, int hq_, int hkv_, int d_, int W_, int P, const std::vector<int>& appended,
          const std::vector<int>& pending, const std::vector<int>& tree, std::mt19937& rng)
      : R(R_),
        hq(hq_),
        hkv(hkv_),
        d(d_),
        W(W_),
        ring({.requests = R_, .kv_heads = hkv_, .head_dim = d_, .window = W_, .speculative_capacity = P}) {
    hist.assign(static_cast<std::size_t>(R), {hkv, d, W, {}, {}});
    const std::size_t row = static_cast<std::size_t>(hkv) * d;
    for (int r = 0; r < R; ++r) {
      int left = appended[r];
      while (left > 0) {  // committed appends in random chunks
        const int n = std::min(left, 1 + static_cast<int>(rng() % 97));
        std::vector<T> kk(n * row), vv(n * row);
        fill_normal(kk, rng);
        fill_normal(vv, rng);
        ring.append(r, specdec::make_view<3>(kk.data(), {n, hkv, d}), specdec::make_view<3>(vv.data(), {n, hkv, d}));
        for (int i = 0; i < n; ++i) {
          hist[r].k.emplace_back(kk.begin() + i * row, kk.begin() + (i + 1) * row);
          hist[r].v.emplace_back(vv.begin() + i * row, vv.begin() + (i + 1) * row);
        }
        left -= n;
      }
      if (pending[r] > 0) {  // chain-drafted tokens still pending are part of the window too
        const int n = pending[r];
        std::vector<T> kk(n * row), vv(n * row);
        fill_normal(kk, rng);
        fill_normal(vv, rng);
        ring.append_speculative(r, specdec::make_view<3>(kk.data(), {n, hkv, d}),
                                specdec::make_view<3>(vv.data(), {n, hkv, d}));
        for (int i = 0; i < n; ++i) {
          hist[r].k.emplace_back(kk.begin() + i * row, kk.begin() + (i + 1) * row);
          hist[r].v.emplace_back(vv.begin() + i * row, vv.begin() + (i + 1) * row);
        }
      }
    }
    q_indptr.assign(1, 0);
    for (int r = 0; r < R; ++r) {
      q_indptr.push_back(q_indptr.back() + tree[r]);
      append_random_tree_mask(tree[r], rng, mask);
    }
    const int N = q_indptr.back();
    q.resize(static_cast<std::size_t>(N) * hq * d);
    k.resize(static_cast<std::size_t>(N) * hkv * d);
    v.resize(k.size());
    fill_normal(q, rng);
    fill_normal(k, rng);
    fill_normal(v, rng);
  }

  [[nodiscard]] int tokens() const { return q_indptr.back(); }
  auto qv() const { return specdec::make_view<3>(q.data(), {tokens(), hq, d}); }
  auto kv() const { return specdec::make_view<3>(k.data(), {tokens(), hkv, d}); }
  auto vv() const { return specdec::make_view<3>(v.data(), {tokens(), hkv, d}); }
  auto ip() const { return specdec::make_view<1>(q_indptr.data(), {R + 1}); }
  auto mv() const { return specdec::make_view<1>(mask.data(), {static_cast<std::int64_t>(mask.size())}); }

  static std::vector<double> widen(const std::vector<T>& x) {
    std::vector<double> o(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) o[i] = wide(x[i]);
    return o;
  }
  [[nodiscard]] specdec::reference::attention_result reference(bool tree_part = true) const {
    const auto kd = widen(k), vd = widen(v);
    return specdec::reference::sliding_window_attention(widen(q), hq, d, hist, tree_part ? kd.data() : nullptr,
                                                        tree_part ? vd.data() : nullptr, q_indptr,
                                                        tree_part ? mask.data() : nullptr);
  }
};

//! Runs sliding_window_attention on a random problem and checks it against the reference.
template <class T>
void differential(int R, int hq, int hkv, int d, int W, int P, const std::vector<int>& appended,
                  const std::vector<int>& pending, const std::vector<int>& tree, std::uint32_t seed, double atol,
                  double rtol) {
  std::mt19937 rng(seed);
  problem<T> p(R, hq, hkv, d, W, P, appended, pending, tree, rng);
  std::vector<T> out(p.q.size());
  std::vector<float> lse(static_cast<std::size_t>(p.tokens()) * hq);
  specdec::sliding_window_attention(specdec::host{}, p.qv(), p.ring, p.kv(), p.vv(), p.ip(), p.mv(),
                                    specdec::make_view<3>(out.data(), {p.tokens(), hq, d}),
                                    specdec::make_view<2>(lse.data(), {p.tokens(), hq}));
  require_close(p.reference(), out, lse, atol, rtol);
}

}  // namespace swtest
