#pragma once
// Non-finite inputs in the host attention kernels (the policy of core/error.hpp, "Non-finite
// numbers"): a key or value a row cannot see (a masked tree token, a cache slot past the request's
// length, a page slot no request uses) never influences that row, bit for bit; a NaN or infinity a
// row *can* see reaches its output (never a finite answer computed as if the part were empty).
// Used by the kernel tests, so the checks run in every ISA build of them.
#include "attention_fixture.hpp"

#include <cstring>

#include "specdec/attention/decode_attention.hpp"
#include "specdec/attention/hybrid_tree_attention.hpp"
#include "specdec/attention/tree_attention.hpp"

namespace attn_test {

enum class poison_target { k, v, kv };

template <class T>
bool bits_equal(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

//! Fills every cache slot no request can see (past `length` in the contiguous caches, and every
//! page slot outside [0, length) of its request, spare pages included) with `x`.
template <class T>
void poison_invisible_cache(batch<T>& b, float x) {
  const T bad = specdec::from_float<T>(x);
  for (int r = 0; r < b.requests; ++r)
    for (int t = b.lens[r]; t < b.capacity; ++t)
      for (int h = 0; h < b.hkv; ++h)
        for (int c = 0; c < b.d; ++c) {
          b.k_nhd[((static_cast<std::size_t>(r) * b.capacity + t) * b.hkv + h) * b.d + c] = bad;
          b.v_nhd[((static_cast<std::size_t>(r) * b.capacity + t) * b.hkv + h) * b.d + c] = bad;
          b.k_hnd[((static_cast<std::size_t>(r) * b.hkv + h) * b.capacity + t) * b.d + c] = bad;
          b.v_hnd[((static_cast<std::size_t>(r) * b.hkv + h) * b.capacity + t) * b.d + c] = bad;
        }
  std::vector<char> used(static_cast<std::size_t>(b.num_pages) * b.page_size, 0);
  for (int r = 0; r < b.requests; ++r)
    for (int t = 0; t < b.lens[r]; ++t)
      used[static_cast<std::size_t>(b.page_indices[b.page_indptr[r] + t / b.page_size]) * b.page_size +
           t % b.page_size] = 1;
  const std::size_t row = static_cast<std::size_t>(b.hkv) * b.d;
  for (std::size_t s = 0; s < used.size(); ++s)
    if (!used[s]) {
      std::fill_n(b.k_pages.begin() + static_cast<std::ptrdiff_t>(s * row), row, bad);
      std::fill_n(b.v_pages.begin() + static_cast<std::ptrdiff_t>(s * row), row, bad);
    }
}

//! Poisons the tree tokens' K and/or V of one kv head per request at about a third of the tokens
//! (and always one), returns per (token, query head) whether that row can see a poisoned token.
template <class T>
std::vector<char> poison_tree_tokens(batch<T>& b, std::uint64_t seed, float x, poison_target what) {
  specdec::philox_stream rng(seed, 99);
  const T bad = specdec::from_float<T>(x);
  const int group = b.hq / b.hkv;
  std::vector<char> affected(static_cast<std::size_t>(b.tokens()) * b.hq, 0);
  std::size_t mask_base = 0;
  for (int r = 0; r < b.requests; ++r) {
    const int t0 = b.q_indptr[r], n = b.q_indptr[r + 1] - t0, wpr = specdec::words_per_row(n);
    if (n == 0) continue;
    const int head = static_cast<int>(rng.below(static_cast<std::uint32_t>(b.hkv)));
    std::vector<char> poisoned(n, 0);
    for (int j = 0; j < n; ++j) poisoned[j] = rng.uniform() < 0.33f;
    poisoned[rng.below(static_cast<std::uint32_t>(n))] = 1;
    for (int j = 0; j < n; ++j) {
      if (!poisoned[j]) continue;
      const std::size_t at = (static_cast<std::size_t>(t0 + j) * b.hkv + head) * b.d;
      if (what != poison_target::v) std::fill_n(b.spec_k.begin() + static_cast<std::ptrdiff_t>(at), b.d, bad);
      if (what != poison_target::k) std::fill_n(b.spec_v.begin() + static_cast<std::ptrdiff_t>(at), b.d, bad);
    }
    for (int i = 0; i < n; ++i) {
      bool sees = false;
      for (int j = 0; j < n; ++j)
        sees = sees || (poisoned[j] && specdec::test_bit(b.mask.data() + mask_base + static_cast<std::size_t>(i) * wpr, j));
      if (sees)
        for (int g = 0; g < group; ++g) affected[static_cast<std::size_t>(t0 + i) * b.hq + head * group + g] = 1;
    }
    mask_base += static_cast<std::size_t>(n) * wpr;
  }
  return affected;
}

//! What a poisoned run (b.out, b.lse) did to its rows (token, query head), against the clean run's
//! `clean_out` / `clean_lse` and the per-row `affected` mask (the row can see a poisoned value x in
//! target `what`): `affected` counts the affected rows; `mismatched` the unaffected rows that are not
//! bit-identical to the clean run (out and LSE); `finite_affected` the affected rows with an output
//! element that is finite (or, for NaN poison, not NaN); `wrong_lse` the affected rows whose LSE is
//! not the clean one when only V was poisoned, else is finite for NaN poison.
struct poisoned_rows {
  int affected = 0, mismatched = 0, finite_affected = 0, wrong_lse = 0;
};

template <class T>
poisoned_rows count_poisoned_rows(const batch<T>& b, const std::vector<T>& clean_out,
                                  const std::vector<float>& clean_lse, const std::vector<char>& affected, float x,
                                  poison_target what) {
  poisoned_rows n;
  for (int t = 0; t < b.tokens(); ++t)
    for (int h = 0; h < b.hq; ++h) {
      const std::size_t row = static_cast<std::size_t>(t) * b.hq + h;
      const T* o = b.out.data() + row * b.d;
      const T* oc = clean_out.data() + row * b.d;
      if (!affected[row]) {
        bool same = bits_equal(b.lse[row], clean_lse[row]);
        for (int c = 0; c < b.d; ++c) same = same && bits_equal(o[c], oc[c]);
        n.mismatched += !same;
        continue;
      }
      ++n.affected;
      bool all_bad = true;
      for (int c = 0; c < b.d; ++c) {
        const float v = specdec::to_float(o[c]);
        all_bad = all_bad && (std::isnan(x) ? std::isnan(v) : !std::isfinite(v));
      }
      n.finite_affected += !all_bad;
      if (what == poison_target::v) n.wrong_lse += !bits_equal(b.lse[row], clean_lse[row]);
      else n.wrong_lse += std::isfinite(b.lse[row]) && std::isnan(x);
    }
  return n;
}

//! Runs hybrid (or tree-only when `with_cache` is false) attention twice, clean and after
//! poisoning every invisible cache slot plus some tree tokens, and checks: rows that see no
//! poisoned token are bit-identical to the clean run; rows that do have a non-finite output (NaN
//! where the poison is NaN), and, when only V was poisoned, the clean LSE (scores are unchanged).
//! The host backend as a runner for check_poisoned_tree and check_visible_cache_poison (the CUDA
//! tests pass a device runner with the same two calls): operator() runs hybrid (or tree-only)
//! attention, decode() decode_attention, both writing b.out and b.lse.
struct host_runner {
  template <class T>
  void operator()(batch<T>& b, layout_kind kind, bool with_cache, const specdec::attention_options& opt) const {
    b.reset_outputs();
    if (with_cache) {
      b.with_layout(kind, [&](auto layout) {
        specdec::hybrid_tree_attention(specdec::host{}, b.q_view(), layout, b.k_view(), b.v_view(), b.indptr_view(),
                                       b.mask_view(), b.out_view(), b.lse_view(), opt);
      });
    } else {
      specdec::tree_attention(specdec::host{}, b.q_view(), b.k_view(), b.v_view(), b.indptr_view(), b.mask_view(),
                              b.out_view(), b.lse_view(), opt);
    }
  }
  template <class T>
  void decode(batch<T>& b, layout_kind kind, const specdec::attention_options& opt) const {
    b.reset_outputs();
    b.with_layout(kind, [&](auto layout) {
      specdec::decode_attention(specdec::host{}, b.q_view(), layout, b.indptr_view(), b.out_view(), b.lse_view(), opt);
    });
  }
};

template <class T, class Runner = host_runner>
void check_poisoned_tree(std::uint64_t seed, int hq, int hkv, int d, std::vector<int> cache_lens,
                         std::vector<int> tree_sizes, layout_kind kind, bool with_cache, float x, poison_target what,
                         specdec::attention_options opt = {}, Runner runner = {}) {
  batch<T> b(seed, hq, hkv, d, cache_lens, tree_sizes);
  auto run = [&] { runner(b, kind, with_cache, opt); };
  run();
  const std::vector<T> clean_out = b.out;
  const std::vector<float> clean_lse = b.lse;
  poison_invisible_cache(b, x);
  const auto affected = poison_tree_tokens(b, seed, x, what);
  run();
  const poisoned_rows n = count_poisoned_rows(b, clean_out, clean_lse, affected, x, what);
  INFO("seed " << seed << " layout " << name(kind) << (with_cache ? " hybrid" : " tree") << " poison " << x
               << " target " << static_cast<int>(what) << ": " << n.affected << " affected rows");
  CHECK(n.affected > 0);
  CHECK(n.mismatched == 0);
  CHECK(n.finite_affected == 0);
  CHECK(n.wrong_lse == 0);
}

//! The grid the kernel tests run: NaN, +inf and -inf into K, V or both, trees of 10 / 70 / 130
//! tokens (the sizes of the report that found the leak) in ragged batches, GQA 4, tree-only and
//! over every layout, the row kernel (decode-sized cache parts) and the tile kernel.
//! In CI's -O0 sanitizer build the hybrid runs take the layouts as a Latin square over (value,
//! target) (sweep_cell): each layout still meets every value and every target, in 9 runs instead of
//! 27 (this grid was most of the sanitized attention tests' time: 87 of 95 s for test_hybrid_lowp on
//! a 2-core EPYC, 45 s after).
template <class T, class Runner = host_runner>
void check_poisoned_grid(int d, Runner runner = {}) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float xs[] = {nan, inf, -inf};
  constexpr poison_target whats[] = {poison_target::k, poison_target::v, poison_target::kv};
  constexpr layout_kind kinds[] = {layout_kind::nhd, layout_kind::hnd, layout_kind::paged};
  std::uint64_t seed = 4000;
  for (int xi = 0; xi < 3; ++xi)
    for (int wi = 0; wi < 3; ++wi) {
      check_poisoned_tree<T>(++seed, 8, 2, d, {0, 0, 0}, {10, 70, 130}, layout_kind::nhd, false, xs[xi], whats[wi], {},
                             runner);
      for (int k = 0; k < 3; ++k)
        if (sweep_cell(xi + wi, k, 3))
          check_poisoned_tree<T>(++seed, 8, 2, d, {33, 300, 1}, {2, 70, 1}, kinds[k], true, xs[xi], whats[wi], {}, runner);
    }
  // Forced small splits (many cache parts per request) and a tree wider than one 64-key tile.
  check_poisoned_tree<T>(++seed, 4, 4, d, {200, 5}, {130, 9}, layout_kind::paged, true, nan, poison_target::kv,
                         {.kv_split_size = 64}, runner);
}

//! A NaN / infinity in a *visible* cached key or value reaches every row of that request that
//! reads that kv head: decode over a 1-token cache with K[0] = NaN is NaN (not out = 0, LSE = -inf
//! as if the cache were empty), and hybrid attention with one poisoned cached token is non-finite
//! in every row of the request, for every cache part (split) the token may fall in. `runner` picks
//! the backend (host_runner; the CUDA tests pass their device runner).
template <class T, class Runner = host_runner>
void check_visible_cache_poison(int d, Runner runner = {}) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (float x : {nan, inf}) {
    for (bool k_side : {true, false}) {
      batch<T> b(8100, 4, 1, d, {1}, {1});
      (k_side ? b.k_nhd : b.v_nhd)[0] = specdec::from_float<T>(x);
      runner.decode(b, layout_kind::nhd, {});
      for (int h = 0; h < 4; ++h) {
        INFO("decode, 1-token cache, " << (k_side ? "K" : "V") << "[0][0] = " << x << ", head " << h);
        const float o0 = specdec::to_float(b.out[static_cast<std::size_t>(h) * d]);
        CHECK(!std::isfinite(o0));
        if (k_side) CHECK(!std::isfinite(b.lse[h]));
        else CHECK(std::isfinite(b.lse[h]));
      }
    }
  }
  for (int split : {0, 64}) {
    batch<T> b(8200, 8, 2, d, {700, 40}, {5, 3});
    const int t = 517, head = 1;
    b.k_nhd[((static_cast<std::size_t>(0) * b.capacity + t) * b.hkv + head) * b.d + 3] = specdec::from_float<T>(nan);
    runner(b, layout_kind::nhd, true, {.kv_split_size = split});
    for (int tok = 0; tok < b.tokens(); ++tok)
      for (int h = 0; h < b.hq; ++h) {
        const bool reads = tok < 5 && h / 4 == head;  // request 0, query heads of kv head 1
        const std::size_t row = static_cast<std::size_t>(tok) * b.hq + h;
        INFO("split " << split << " token " << tok << " head " << h);
        CHECK(std::isnan(b.lse[row]) == reads);
        CHECK(std::isnan(specdec::to_float(b.out[row * d])) == reads);
      }
  }
}

//! Denormal inputs are ordinary numbers: values around 1e-39 (fp32 subnormals) come out as the
//! reference computes them, relative to their own scale.
inline void check_denormal_values() {
  batch<float> b(8300, 4, 2, 64, {40, 3}, {6, 2});
  for (auto* vec : {&b.v_nhd, &b.spec_v})
    for (auto& x : *vec) x *= 1e-39f;
  specdec::hybrid_tree_attention(specdec::host{}, b.q_view(), b.nhd(), b.k_view(), b.v_view(), b.indptr_view(),
                                 b.mask_view(), b.out_view(), b.lse_view());
  const auto ref = specdec::reference::hybrid_tree_attention(b.q_view(), b.nhd(), b.k_view(), b.v_view(),
                                                             b.indptr_view(), b.mask_view());
  double worst = 0;
  int nonzero = 0;
  for (int t = 0; t < b.tokens(); ++t)
    for (int h = 0; h < b.hq; ++h)
      for (int c = 0; c < b.d; ++c) {
        const double got = b.out[(static_cast<std::size_t>(t) * b.hq + h) * b.d + c];
        worst = std::max(worst, std::abs(got - ref.o(t, h, c)) / 1e-39);
        nonzero += got != 0.0;
      }
  INFO("worst error relative to the 1e-39 scale: " << worst << ", nonzero outputs " << nonzero);
  CHECK(worst < 1e-4);  // subnormal fp32 near 1e-39 keeps ~17 bits
  CHECK(nonzero > b.tokens() * b.hq * b.d / 2);  // not flushed to zero
}

}  // namespace attn_test
