// Run-time ISA dispatch (core/simd_level.hpp), in one binary built with default flags:
//  - the API: set_simd_level / active_simd_level / reset_simd_level and SPECDEC_ISA (a ceiling,
//    refused above the CPU, an unknown value an error that names the variable);
//  - the vector layer (simd_cases.inl) at every level this CPU runs, each level's own copy;
//  - the dispatched host attention (decode: rows and lanes kernels; hybrid: tiles kernel under a tree mask;
//    tree: masked tiles alone; fp32) at every level against the double reference, switching levels
//    in-process (the attention and residual-head tests run per level under ctest, fp16/bf16 included).
// Built again for x86-64-v3 with SPECDEC_TEST_VECTOR_LAYER_ONLY (tests/CMakeLists.txt): the API and
// the vector layer from a file whose own level is avx2.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#ifndef SPECDEC_TEST_VECTOR_LAYER_ONLY
#include "attention/test_decode_rows_util.hpp"
#include "specdec/attention/lse_merge.hpp"
#include "specdec/attention/tree_attention.hpp"
#include "specdec/draft/detail/draft_rows.hpp"
#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/kv/partial_kv.hpp"
#endif
#include "specdec/core/detail/simd.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/simd_level.hpp"
#include "specdec/core/topk.hpp"
#include "specdec/sampling/detail/vec.hpp"

using namespace specdec;
using namespace specdec::detail;

// simd_cases() once per dispatch level: detail::SPECDEC_HOST_ISA::lvl_<level>::simd_cases.
#define SPECDEC_ISA_BODIES "core/simd_cases.inl"
#include "specdec/core/detail/isa_levels.inl"
#undef SPECDEC_ISA_BODIES

namespace {

// Restores the default level when a test case ends, whatever it set.
struct level_guard {
  ~level_guard() { specdec::reset_simd_level(); }
};

// The levels this binary has code for (at or above its own flags' level) and this CPU runs.
// Without dispatch only the file's own copy exists.
std::vector<int> runnable_levels() {
  std::vector<int> out;
#if SPECDEC_ISA_DISPATCH
  for (int l = SPECDEC_NATIVE_SIMD_LEVEL; l <= static_cast<int>(cpu_simd_level()); ++l) out.push_back(l);
#else
  out.push_back(SPECDEC_NATIVE_SIMD_LEVEL);
#endif
  return out;
}

}  // namespace

TEST_CASE("simd_level: set, active, reset; refused above the CPU") {
  level_guard g;
  [[maybe_unused]] const int cpu = static_cast<int>(cpu_simd_level());
  REQUIRE(cpu >= 0);
  REQUIRE(cpu <= 2);
  CHECK(to_string(simd_level::portable) == "portable");
  CHECK(to_string(simd_level::avx2) == "avx2");
  CHECK(to_string(simd_level::avx512) == "avx512");
#if SPECDEC_ISA_DISPATCH
  for (int l = 0; l <= 2; ++l) {
    const bool ok = set_simd_level(static_cast<simd_level>(l));
    CHECK(ok == (l <= cpu));
    if (ok) {
      // Never below what this file's flags assume.
      CHECK(static_cast<int>(active_simd_level()) == std::max(l, SPECDEC_NATIVE_SIMD_LEVEL));
    }
  }
  // A refused request leaves the previous one in place.
  REQUIRE(set_simd_level(simd_level::portable));
  if (cpu < 2) {
    CHECK_FALSE(set_simd_level(simd_level::avx512));
  }
  CHECK(static_cast<int>(active_simd_level()) == SPECDEC_NATIVE_SIMD_LEVEL);
  CHECK_FALSE(set_simd_level(static_cast<simd_level>(7)));
  CHECK_FALSE(set_simd_level(static_cast<simd_level>(-1)));
#else
  // Without dispatch the file's own level is the only one, whatever is requested.
  CHECK(static_cast<int>(active_simd_level()) == SPECDEC_NATIVE_SIMD_LEVEL);
#endif
}

TEST_CASE("simd_level: SPECDEC_ISA is read by reset_simd_level; an unknown value is an error naming it") {
  level_guard g;
  const char* saved = std::getenv("SPECDEC_ISA");
  const std::string saved_value = saved != nullptr ? saved : "";
  auto restore = [&] {
    if (saved != nullptr) ::setenv("SPECDEC_ISA", saved_value.c_str(), 1);
    else ::unsetenv("SPECDEC_ISA");
  };
  [[maybe_unused]] const int cpu = static_cast<int>(cpu_simd_level());
  struct want {
    const char* value;
    int level;
  };
  for (const want& w : {want{"portable", 0}, want{"baseline", 0}, want{"avx2", 1}, want{"avx512", 2}, want{"best", 2},
                        want{"", 2}}) {
    ::setenv("SPECDEC_ISA", w.value, 1);
    reset_simd_level();
    INFO("SPECDEC_ISA=" << w.value);
    CHECK(requested_simd_level() == w.level);
#if SPECDEC_ISA_DISPATCH
    CHECK(static_cast<int>(active_simd_level()) == std::max(std::min(w.level, cpu), SPECDEC_NATIVE_SIMD_LEVEL));
#endif
  }
  ::setenv("SPECDEC_ISA", "avx1024", 1);
  try {
    reset_simd_level();
    FAIL("an unknown SPECDEC_ISA value was accepted");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    CHECK(what.find("SPECDEC_ISA") != std::string::npos);
    CHECK(what.find("avx1024") != std::string::npos);
  }
  restore();
  reset_simd_level();
}

TEST_CASE("simd_level: the vector layer at every level this CPU runs") {
#if SPECDEC_ISA_DISPATCH
  level_guard g;
  for (int l : runnable_levels()) {
    REQUIRE(set_simd_level(static_cast<simd_level>(l)));
    // The library's own dispatch picks the level's copy of simd_cases.
    DYNAMIC_SECTION("level " << to_string(static_cast<simd_level>(l))) { SPECDEC_ISA_DISPATCH_CALL(simd_cases()); }
  }
  if (static_cast<int>(cpu_simd_level()) < 2) WARN("this CPU lacks AVX-512: that level is not run here");
#else
  WARN("built without run-time dispatch (SPECDEC_ISA_DISPATCH=0 or flags at the top level): test_simd covers it");
#endif
}

TEST_CASE("simd_level: the sampling row kernels (sampling/detail/vec.hpp) at every level against scalar code") {
  level_guard g;
  constexpr float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  philox_stream rng(4242, 0);
  auto index = [&](std::size_t n) { return static_cast<std::size_t>(rng.next_u32() % n); };
  for (int l : runnable_levels()) {
    REQUIRE(set_simd_level(static_cast<simd_level>(l)));
    DYNAMIC_SECTION("level " << to_string(static_cast<simd_level>(l))) {
      // Lengths around the 16-lane body, first_index_of's 256-element blocks and the 256-token exp chunks.
      for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{63},
                            std::size_t{64}, std::size_t{65}, std::size_t{255}, std::size_t{256}, std::size_t{257},
                            std::size_t{513}, std::size_t{1000}, std::size_t{4099}}) {
        INFO("n = " << n);
        std::vector<float> x(n);
        for (auto& v : x) v = rng.uniform() * 20.0f - 10.0f;
        for (int variant = 0; variant < 5; ++variant) {
          INFO("variant " << variant);
          std::vector<float> y = x;
          if (n > 0 && variant == 1) y[index(n)] = -inf;                        // a masked token
          if (n > 0 && variant == 2) y[index(n)] = nan;                         // NaN: bad, no part in max/min
          if (n > 0 && variant == 3) y[n - 1] = inf, y[index(n)] = -inf;        // +inf in the tail: bad
          if (variant == 4)  // only signed zeros and -inf: which zero the max and min keep follows the lane order
            for (auto& v : y) v = rng.next_u32() % 3 == 0 ? -inf : rng.next_u32() % 2 ? 0.0f : -0.0f;
          // scan_logits against one scalar pass.
          float mx = -inf, mn = inf;
          bool bad = false;
          for (float v : y) {
            if (v > mx) mx = v;
            if (v > -inf && v < mn) mn = v;
            bad |= !(v < inf);
          }
          const logit_scan sc = scan_logits(y.data(), n);
          CHECK(sc.max == mx);
          CHECK(sc.min == mn);
          CHECK(sc.bad == bad);
          {  // bit for bit (the sign of a zero max or min): 16 lane chains combined in lane order, then the tail
            float lmx[lanes], lmn[lanes];
            std::fill(std::begin(lmx), std::end(lmx), -inf);
            std::fill(std::begin(lmn), std::end(lmn), inf);
            const std::size_t body = n - n % lanes;
            for (std::size_t i = 0; i < body; ++i) {
              const float v = y[i], f = v > -inf ? v : inf;
              lmx[i % lanes] = v > lmx[i % lanes] ? v : lmx[i % lanes];
              lmn[i % lanes] = f < lmn[i % lanes] ? f : lmn[i % lanes];
            }
            float bmx = -inf, bmn = inf;
            for (int j = 0; j < lanes; ++j) bmx = lmx[j] > bmx ? lmx[j] : bmx, bmn = lmn[j] < bmn ? lmn[j] : bmn;
            for (std::size_t i = body; i < n; ++i) {
              bmx = y[i] > bmx ? y[i] : bmx;
              bmn = y[i] > -inf && y[i] < bmn ? y[i] : bmn;
            }
            CHECK(std::bit_cast<std::uint32_t>(sc.max) == std::bit_cast<std::uint32_t>(bmx));
            CHECK(std::bit_cast<std::uint32_t>(sc.min) == std::bit_cast<std::uint32_t>(bmn));
          }
          // The elementwise row steps against their scalar expressions, bit for bit (NaN stays NaN).
          const auto same_bits = [&](const std::vector<float>& got, auto&& want) {
            for (std::size_t i = 0; i < n; ++i) {
              const float w = want(y[i]);
              if (!(std::bit_cast<std::uint32_t>(got[i]) == std::bit_cast<std::uint32_t>(w) ||
                    (std::isnan(got[i]) && std::isnan(w))))
                FAIL_CHECK("element " << i << ": " << got[i] << " vs " << w);
            }
          };
          {
            std::vector<float> a = y;
            scale_row(a.data(), n, 1.0f / 0.7f);
            same_bits(a, [](float v) { return v * (1.0f / 0.7f); });
            a = y;
            shift_divide_row(a.data(), n, 2.5f, 0.7f);
            same_bits(a, [](float v) { return (v - 2.5f) / 0.7f; });
            a = y;
            mask_below(a.data(), n, 0.25f);
            same_bits(a, [&](float v) { return v >= 0.25f ? v : -inf; });
            a = y;
            fill_row(a.data(), n, -inf);
            same_bits(a, [&](float) { return -inf; });
          }
          // first_index_of: the maximum's first position, and a value that is absent.
          std::int64_t first = -1;
          for (std::size_t i = 0; i < n; ++i)
            if (y[i] == mx) {
              first = static_cast<std::int64_t>(i);
              break;
            }
          CHECK(first_index_of(y.data(), n, mx) == first);
          CHECK(first_index_of(y.data(), n, 1e30f) == -1);
          // any_inadmissible_prob on the probabilities of a clean row, then with one bad entry.
          std::vector<float> p(n);
          for (std::size_t i = 0; i < n; ++i) p[i] = rng.uniform();
          CHECK_FALSE(any_inadmissible_prob(p.data(), n));
          if (n > 0) {
            const float bads[] = {-1e-30f, nan, inf, -inf};
            p[index(n)] = bads[variant % 4];
            CHECK(any_inadmissible_prob(p.data(), n));
          }
          // lane_sum: 16 fixed partial sums, the tail, then the lanes in order (bit-exact emulation).
          double acc[lanes] = {}, want = 0.0;
          const std::size_t body = n - n % lanes;
          for (std::size_t i = 0; i < body; ++i) acc[i % lanes] += x[i];
          for (std::size_t i = body; i < n; ++i) want += x[i];
          for (double a : acc) want += a;
          CHECK(lane_sum(x.data(), n) == want);
          {  // and over doubles (not float-representable), the same order
            std::vector<double> xd(n);
            for (std::size_t i = 0; i < n; ++i) xd[i] = static_cast<double>(x[i]) * (1.0 + 1e-9 * static_cast<double>(i));
            double accd[lanes] = {}, wantd = 0.0;
            for (std::size_t i = 0; i < body; ++i) accd[i % lanes] += xd[i];
            for (std::size_t i = body; i < n; ++i) wantd += xd[i];
            for (double a : accd) wantd += a;
            CHECK(lane_sum(xd.data(), n) == wantd);
          }
          // exp_sum with m = the row's max: each out[i] and the sum against double exp.
          if (variant <= 1 && mx > -inf) {  // (precondition: m >= every x[i], m finite)
            std::vector<float> out(n, -1.0f);
            double ref = 0.0;
            for (float v : y) ref += std::exp(static_cast<double>(v - mx));  // x - m rounded to float, as the kernel does
            const double got = exp_sum(y.data(), n, mx, out.data());
            CHECK(std::abs(got - ref) <= 1e-6 * ref);
            CHECK(exp_sum(y.data(), n, mx, nullptr) == got);
            for (std::size_t i = 0; i < n; ++i) {
              const double e = std::exp(static_cast<double>(y[i] - mx));
              if (std::abs(out[i] - e) > 3e-7 * e + 1e-38) FAIL_CHECK("exp at " << i << ": " << out[i] << " vs " << e);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("simd_level: topk (its dispatched block scan) and any_nan at every level against a full sort") {
  level_guard g;
  philox_stream rng(777, 1);
  for (int l : runnable_levels()) {
    REQUIRE(set_simd_level(static_cast<simd_level>(l)));
    DYNAMIC_SECTION("level " << to_string(static_cast<simd_level>(l))) {
      for (int n : {1, 31, 32, 33, 100, 1000, 5003}) {
        // Few distinct values (ties everywhere), an ascending run (every block has a candidate), NaNs.
        std::vector<float> few(static_cast<std::size_t>(n)), rising(few.size()), nans(few.size());
        for (int i = 0; i < n; ++i) {
          few[static_cast<std::size_t>(i)] = static_cast<float>(rng.next_u32() % 7);
          rising[static_cast<std::size_t>(i)] = static_cast<float>(i) * 0.5f;
          nans[static_cast<std::size_t>(i)] =
              rng.next_u32() % 5 == 0 ? std::numeric_limits<float>::quiet_NaN() : rng.uniform() - 0.5f;
        }
        for (const auto* row : {&few, &rising, &nans})
          for (int k : {1, 2, 17, n}) {
            if (k > n) continue;
            INFO("n = " << n << ", k = " << k);
            const std::span<const float> v(*row);
            CHECK(topk_indices<float>(v, k) == topk_indices_by_sort<float>(v, k));
          }
        // any_nan, the NaN check callers of topk make first (dispatched alongside its scan).
        const bool has_nan = std::any_of(nans.begin(), nans.end(), [](float x) { return std::isnan(x); });
        CHECK(any_nan(nans.data(), nans.size()) == has_nan);
        CHECK_FALSE(any_nan(rising.data(), rising.size()));
        rising.back() = -std::numeric_limits<float>::quiet_NaN();  // a sign-bit NaN in the tail
        CHECK(any_nan(rising.data(), rising.size()));
      }
    }
  }
}

#ifndef SPECDEC_TEST_VECTOR_LAYER_ONLY
TEST_CASE("simd_level: host attention at every level agrees with the reference (rows, lanes and tiles kernels)") {
  level_guard g;
  std::uint64_t seed = 8800;
  for (int l : runnable_levels()) {
    REQUIRE(set_simd_level(static_cast<simd_level>(l)));
    REQUIRE(static_cast<int>(active_simd_level()) == l);
    DYNAMIC_SECTION("level " << to_string(static_cast<simd_level>(l))) {
      // Decode steps and small trees: the rows kernel (and hybrid's masked tree part).
      attn_test::row_kernel_sweep<float>(++seed, 4, 128, {attn_test::layout_kind::paged}, {}, true);
      // Trees of 9-16 query rows per kv head: the lanes kernel over the cache.
      attn_test::row_kernel_sweep<float>(++seed, 4, 128, {attn_test::layout_kind::paged}, {}, true,
                                         specdec::attention_kernel::lanes);
      // 17-32 rows: the lanes kernel's two-row-vector form, pinned (automatic runs it on AVX-512 only).
      attn_test::row_kernel_sweep<float>(++seed, 4, 128, {attn_test::layout_kind::paged}, {}, true,
                                         specdec::attention_kernel::lanes, 0, true);
      {
        // ... and automatic on 24 rows (6 tokens x GQA 4) runs the lanes kernel at avx512, the tile
        // kernel below: the same bits as that kernel pinned, not the other's.
        using specdec::attention_kernel;
        attn_test::batch<float> w(++seed, 8, 2, 128, {200}, {6});  // this file compiles head_dim 128 only
        auto run = [&](attention_kernel k) {
          w.reset_outputs();
          specdec::decode_attention(specdec::host{}, w.q_view(), w.paged(), w.indptr_view(), w.out_view(),
                                    w.lse_view(), {.kernel = k});
          return w.out;
        };
        const bool wide = static_cast<simd_level>(l) == simd_level::avx512;
        const auto autom = run(attention_kernel::automatic);
        CHECK(autom == run(wide ? attention_kernel::lanes : attention_kernel::tiles));
        CHECK(autom != run(wide ? attention_kernel::tiles : attention_kernel::lanes));
      }
      // Larger trees: the tile kernel over the cache and the masked tree tiles.
      attn_test::batch<float> b(++seed, 8, 2, 128, {300, 0, 77}, {40, 9, 70});
      // Tree attention alone (no cache part): the masked tile kernel.
      b.reset_outputs();
      specdec::tree_attention(specdec::host{}, b.q_view(), b.k_view(), b.v_view(), b.indptr_view(), b.mask_view(),
                              b.out_view(), b.lse_view());
      attn_test::check_against(b, specdec::reference::tree_attention(b.q_view(), b.k_view(), b.v_view(),
                                                                     b.indptr_view(), b.mask_view(),
                                                                     specdec::attention_options{}.scale));
      b.with_layout(attn_test::layout_kind::paged, [&](auto layout) {
        b.reset_outputs();
        specdec::hybrid_tree_attention(specdec::host{}, b.q_view(), layout, b.k_view(), b.v_view(), b.indptr_view(),
                                       b.mask_view(), b.out_view(), b.lse_view());
        attn_test::check_against(b, specdec::reference::hybrid_tree_attention(b.q_view(), layout, b.k_view(),
                                                                              b.v_view(), b.indptr_view(),
                                                                              b.mask_view(), specdec::attention_options{}.scale));
      });
    }
  }
}

TEST_CASE("simd_level: lse_merge, kv_importance and log_softmax at every level against double references") {
  level_guard g;
  philox_stream rng(99, 2);
  auto uni = [&](float lo, float hi) { return lo + (hi - lo) * rng.uniform(); };
  for (int l : runnable_levels()) {
    REQUIRE(set_simd_level(static_cast<simd_level>(l)));
    DYNAMIC_SECTION("level " << to_string(static_cast<simd_level>(l))) {
      // lse_merge: S parts of [tokens, heads, D], one part -inf for some rows.
      {
        constexpr int S = 3, T = 5, H = 2, D = 64;
        std::vector<float> o(static_cast<std::size_t>(S) * T * H * D), lse(static_cast<std::size_t>(S) * T * H);
        for (auto& x : o) x = uni(-2.0f, 2.0f);
        for (auto& x : lse) x = uni(-5.0f, 5.0f);
        lse[4] = -std::numeric_limits<float>::infinity();
        std::vector<float> out(static_cast<std::size_t>(T) * H * D), lse_out(static_cast<std::size_t>(T) * H);
        specdec::lse_merge(specdec::host{}, make_view<4>(o.data(), {S, T, H, D}), make_view<3>(lse.data(), {S, T, H}),
                           make_view<3>(out.data(), {T, H, D}), make_view<2>(lse_out.data(), {T, H}));
        for (int r = 0; r < T * H; ++r) {
          double mx = -INFINITY, sum = 0;
          for (int p = 0; p < S; ++p) mx = std::max(mx, static_cast<double>(lse[static_cast<std::size_t>(p * T * H + r)]));
          for (int p = 0; p < S; ++p) sum += std::exp(lse[static_cast<std::size_t>(p * T * H + r)] - mx);
          const double L = mx + std::log(sum);
          CHECK(std::abs(lse_out[static_cast<std::size_t>(r)] - L) <= 1e-5 * std::max(1.0, std::abs(L)));
          for (int c = 0; c < D; ++c) {
            double want = 0;
            for (int p = 0; p < S; ++p)
              want += std::exp(lse[static_cast<std::size_t>(p * T * H + r)] - L) *
                      o[(static_cast<std::size_t>(p) * T * H + r) * D + c];
            const float got = out[static_cast<std::size_t>(r) * D + c];
            if (std::abs(got - want) > 1e-5) FAIL_CHECK("lse_merge row " << r << " col " << c << ": " << got << " vs " << want);
          }
        }
      }
      // kv_importance (TokenSwift Eq. 2) on a contiguous half cache, GQA 2, D = 72 (a 16-lane body and a tail).
      {
        constexpr int Hq = 4, Hkv = 2, D = 72, N = 300;
        std::vector<specdec::half> k(static_cast<std::size_t>(N) * Hkv * D), v(k.size());
        for (auto& x : k) x = specdec::half(uni(-1.0f, 1.0f));
        std::vector<float> q(static_cast<std::size_t>(Hq) * D), scores(static_cast<std::size_t>(Hkv) * N);
        for (auto& x : q) x = uni(-1.0f, 1.0f);
        const std::int32_t len[1] = {N};
        const contiguous_kv<specdec::half> cache{k.data(), v.data(), len, 1, N, Hkv, D};
        specdec::kv_importance(specdec::host{}, make_view<2>(q.data(), {Hq, D}), cache, 0,
                               make_view<2>(scores.data(), {Hkv, N}));
        for (int h = 0; h < Hkv; ++h)
          for (int i = 0; i < N; ++i) {
            double want = 0;
            for (int j = h * 2; j < h * 2 + 2; ++j)
              for (int c = 0; c < D; ++c)
                want += static_cast<double>(q[static_cast<std::size_t>(j) * D + c]) *
                        static_cast<float>(k[(static_cast<std::size_t>(i) * Hkv + h) * D + c]);
            const float got = scores[static_cast<std::size_t>(h) * N + i];
            if (std::abs(got - want) > 1e-4) FAIL_CHECK("kv_importance head " << h << " token " << i << ": " << got << " vs " << want);
          }
      }
      // log_softmax of a 1000-token float row with masked entries.
      {
        std::vector<float> row(1000), out(1000);
        for (auto& x : row) x = uni(-20.0f, 20.0f);
        row[3] = row[500] = -std::numeric_limits<float>::infinity();
        specdec::detail::log_softmax<float>(row, out);
        double mx = -INFINITY, sum = 0;
        for (float x : row) mx = std::max(mx, static_cast<double>(x));
        for (float x : row) sum += std::exp(x - mx);
        const double lse = mx + std::log(sum);
        CHECK(out[3] == -std::numeric_limits<float>::infinity());
        for (std::size_t i = 0; i < row.size(); ++i)
          if (i != 3 && i != 500 && std::abs(out[i] - (row[i] - lse)) > 1e-5)
            FAIL_CHECK("log_softmax at " << i << ": " << out[i] << " vs " << row[i] - lse);
      }
    }
  }
}
#endif  // SPECDEC_TEST_VECTOR_LAYER_ONLY
