#pragma once
// Shared builders for the attention tests: random ragged batches (Philox-seeded), random token trees
// and their packed ancestor masks, caches in contiguous NHD/HND and paged (shuffled pages) layouts,
// and tolerance checks against the double-precision reference.

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "specdec/core/bitmask.hpp"
#include "specdec/core/numeric.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/kv/paged_kv.hpp"
#include "specdec/reference/attention.hpp"

namespace attn_test {

using specdec::mask_word;

enum class layout_kind { nhd, hnd, paged };

//! CI's -O0 sanitizer build (SPECDEC_TEST_SANITIZED) looks for memory errors and undefined behaviour,
//! not numerical differences, and runs the kernels and the double references many times slower.
//! There a grid of cells (i, j), j < nj, runs as a cyclic diagonal: the cells where j == i % nj,
//! which still meet every value of both axes when there are at least nj values of i. Elsewhere
//! (the Release tests, every ISA level) every cell runs.
inline bool sweep_cell(int i, int j, int nj) {
#ifdef SPECDEC_TEST_SANITIZED
  return j == i % nj;
#else
  (void)i, (void)j, (void)nj;
  return true;
#endif
}
inline const char* name(layout_kind k) { return k == layout_kind::nhd ? "nhd" : k == layout_kind::hnd ? "hnd" : "paged"; }

//! Random tree of n nodes in topological order: parent of i is -1 (root's child) or some j < i.
inline std::vector<int> random_parents(specdec::philox_stream& rng, int n, float chain_bias = 0.5f) {
  std::vector<int> parent(n);
  for (int i = 0; i < n; ++i) {
    if (i == 0 || rng.uniform() < 0.1f) parent[i] = -1;
    else if (rng.uniform() < chain_bias) parent[i] = i - 1;
    else parent[i] = static_cast<int>(rng.below(static_cast<std::uint32_t>(i)));
  }
  return parent;
}

//! Appends the packed ancestor mask of a tree (rows words_per_row(n) words) to `words`.
inline void append_mask(const std::vector<int>& parent, std::vector<mask_word>& words) {
  const int n = static_cast<int>(parent.size()), wpr = specdec::words_per_row(n);
  const std::size_t base = words.size();
  words.resize(base + static_cast<std::size_t>(n) * wpr, 0);
  for (int i = 0; i < n; ++i) {
    mask_word* row = words.data() + base + static_cast<std::size_t>(i) * wpr;
    if (parent[i] >= 0) std::copy_n(words.data() + base + static_cast<std::size_t>(parent[i]) * wpr, wpr, row);
    specdec::set_bit(row, i);
  }
}

//! One randomized batch: per request a cache length and a number of tree/query tokens.
template <class T>
struct batch {
  int requests = 0, hq = 0, hkv = 0, d = 0;
  std::vector<std::int32_t> lens, q_indptr;
  std::vector<T> q, spec_k, spec_v, out;
  std::vector<float> lse;
  std::vector<mask_word> mask;
  // caches: contiguous (capacity = max len + slack) and paged with shuffled pages
  int capacity = 0, page_size = 16, num_pages = 0;
  std::vector<T> k_nhd, v_nhd, k_hnd, v_hnd, k_pages, v_pages;
  std::vector<std::int32_t> page_indptr, page_indices;

  batch(std::uint64_t seed, int hq_, int hkv_, int d_, std::vector<int> cache_lens, std::vector<int> tree_sizes,
        int page_size_ = 16, float magnitude = 1.0f)
      : requests(static_cast<int>(cache_lens.size())), hq(hq_), hkv(hkv_), d(d_), page_size(page_size_) {
    specdec::philox_stream rng(seed, 7);
    auto rnd = [&] { return specdec::from_float<T>(magnitude * (2.0f * rng.uniform() - 1.0f)); };
    lens.assign(cache_lens.begin(), cache_lens.end());
    q_indptr.assign(1, 0);
    for (int n : tree_sizes) q_indptr.push_back(q_indptr.back() + n);
    const int total = q_indptr.back();
    q.resize(static_cast<std::size_t>(total) * hq * d);
    for (auto& x : q) x = rnd();
    spec_k.resize(static_cast<std::size_t>(total) * hkv * d);
    spec_v.resize(spec_k.size());
    for (auto& x : spec_k) x = rnd();
    for (auto& x : spec_v) x = rnd();
    out.assign(q.size(), specdec::from_float<T>(-777.0f));
    lse.assign(static_cast<std::size_t>(total) * hq, -777.0f);
    for (int n : tree_sizes) append_mask(random_parents(rng, n), mask);
    capacity = 1;
    for (int l : lens) capacity = std::max(capacity, l + 3);
    const std::size_t cache_elems = static_cast<std::size_t>(requests) * capacity * hkv * d;
    k_nhd.resize(cache_elems);
    v_nhd.resize(cache_elems);
    for (auto& x : k_nhd) x = rnd();
    for (auto& x : v_nhd) x = rnd();
    k_hnd.resize(cache_elems);
    v_hnd.resize(cache_elems);
    // The same logical cache in every layout, so one reference serves all.
    for (int r = 0; r < requests; ++r)
      for (int t = 0; t < capacity; ++t)
        for (int h = 0; h < hkv; ++h)
          for (int c = 0; c < d; ++c) {
            const std::size_t a = ((static_cast<std::size_t>(r) * capacity + t) * hkv + h) * d + c;
            const std::size_t b = ((static_cast<std::size_t>(r) * hkv + h) * capacity + t) * d + c;
            k_hnd[b] = k_nhd[a];
            v_hnd[b] = v_nhd[a];
          }
    page_indptr.assign(1, 0);
    for (int r = 0; r < requests; ++r) {
      const int pages = (lens[r] + page_size - 1) / page_size + static_cast<int>(rng.below(2));
      page_indptr.push_back(page_indptr.back() + pages);
    }
    num_pages = page_indptr.back() + 2;
    page_indices.resize(page_indptr.back());
    std::vector<std::int32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    for (int i = num_pages - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(static_cast<std::uint32_t>(i + 1))]);
    std::copy_n(perm.begin(), page_indices.size(), page_indices.begin());
    k_pages.resize(static_cast<std::size_t>(num_pages) * page_size * hkv * d);
    v_pages.resize(k_pages.size());
    for (auto& x : k_pages) x = rnd();
    for (auto& x : v_pages) x = rnd();
    for (int r = 0; r < requests; ++r)
      for (int t = 0; t < lens[r]; ++t)
        for (int h = 0; h < hkv; ++h) {
          const auto pl = paged();
          T* dk = pl.k_row(r, t, h);
          T* dv = pl.v_row(r, t, h);
          const std::size_t a = ((static_cast<std::size_t>(r) * capacity + t) * hkv + h) * d;
          std::copy_n(k_nhd.data() + a, d, dk);
          std::copy_n(v_nhd.data() + a, d, dv);
        }
  }

  specdec::contiguous_kv<T> nhd() { return {k_nhd.data(), v_nhd.data(), lens.data(), requests, capacity, hkv, d}; }
  specdec::contiguous_kv<T, specdec::kv_order::hnd> hnd() {
    return {k_hnd.data(), v_hnd.data(), lens.data(), requests, capacity, hkv, d};
  }
  specdec::paged_kv<T> paged() {
    return {k_pages.data(), v_pages.data(), page_indptr.data(), page_indices.data(), lens.data(), requests,
            num_pages, page_size, hkv, d};
  }
  template <class F>
  void with_layout(layout_kind k, F&& f) {
    if (k == layout_kind::nhd) f(nhd());
    else if (k == layout_kind::hnd) f(hnd());
    else f(paged());
  }

  int tokens() const { return q_indptr.back(); }
  auto q_view() { return specdec::make_view<3>(q.data(), {tokens(), hq, d}); }
  auto out_view() { return specdec::make_view<3>(out.data(), {tokens(), hq, d}); }
  auto lse_view() { return specdec::make_view<2>(lse.data(), {tokens(), hq}); }
  auto k_view() { return specdec::make_view<3>(spec_k.data(), {tokens(), hkv, d}); }
  auto v_view() { return specdec::make_view<3>(spec_v.data(), {tokens(), hkv, d}); }
  auto indptr_view() { return specdec::make_view<1>(q_indptr.data(), {requests + 1}); }
  auto mask_view() { return specdec::make_view<1>(mask.data(), {static_cast<std::int64_t>(mask.size())}); }
  void reset_outputs() {
    std::fill(out.begin(), out.end(), specdec::from_float<T>(-777.0f));
    std::fill(lse.begin(), lse.end(), -777.0f);
  }
};

//! Output tolerance (relative to max(1, |ref|)) for storage type T: fp32 1e-5 as the issue demands;
//! fp16/bf16 one rounding of the output (half an ulp) plus slack for fp32 accumulation.
template <class T>
constexpr double out_tol() {
  if constexpr (std::is_same_v<T, float>) return 1e-5;
  else if constexpr (std::is_same_v<T, specdec::half>) return 1.5e-3;
  else return 1e-2;
}

//! Checks out/lse of a batch against a reference result; returns the worst errors for reporting.
//! Output errors are relative to max(out_scale, |ref|) (out_scale below 1 for tiny values).
template <class T>
void check_against(const batch<T>& b, const specdec::reference::attention_result& ref, double otol = out_tol<T>(),
                   double ltol = 1e-5, double out_scale = 1.0) {
  double worst_o = 0, worst_l = 0;
  int bad = 0;
  for (int t = 0; t < b.tokens(); ++t)
    for (int h = 0; h < b.hq; ++h) {
      const double rl = ref.l(t, h);
      const double gl = b.lse[static_cast<std::size_t>(t) * b.hq + h];
      if (std::isinf(rl)) {
        if (!(std::isinf(gl) && gl < 0)) ++bad;
      } else {
        const double e = std::abs(gl - rl) / std::max(1.0, std::abs(rl));
        worst_l = std::max(worst_l, e);
        if (!(e <= ltol)) ++bad;
      }
      for (int c = 0; c < b.d; ++c) {
        const double go = specdec::to_float(b.out[(static_cast<std::size_t>(t) * b.hq + h) * b.d + c]);
        const double ro = ref.o(t, h, c);
        const double e = std::abs(go - ro) / std::max(out_scale, std::abs(ro));
        worst_o = std::max(worst_o, e);
        if (!(e <= otol)) ++bad;  // catches NaN too
      }
    }
  INFO("worst out error " << worst_o << " (tol " << otol << "), worst lse error " << worst_l << " (tol " << ltol << ")");
  CHECK(bad == 0);
}

}  // namespace attn_test
