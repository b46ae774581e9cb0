// Run-time ISA dispatch (core/simd_level.hpp), in one binary built with default flags:
//  - the API: set_simd_level / active_simd_level / reset_simd_level and SPECDEC_ISA (a ceiling,
//    refused above the CPU, an unknown value an error that names the variable);
//  - the vector layer (simd_cases.inl) at every level this CPU runs, each level's own copy;
//  - the dispatched host attention (decode: rows kernel; hybrid: tiles kernel under a tree mask;
//    tree: masked tiles alone; fp32 and fp16) at every level against the double reference,
//    switching levels in-process.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention/test_decode_rows_util.hpp"
#include "specdec/attention/tree_attention.hpp"
#include "specdec/core/detail/simd.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/simd_level.hpp"

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

TEST_CASE("simd_level: host attention at every level agrees with the reference (rows and tiles kernels)") {
  level_guard g;
  std::uint64_t seed = 8800;
  for (int l : runnable_levels()) {
    REQUIRE(set_simd_level(static_cast<simd_level>(l)));
    REQUIRE(static_cast<int>(active_simd_level()) == l);
    DYNAMIC_SECTION("level " << to_string(static_cast<simd_level>(l))) {
      // Decode steps and small trees: the rows kernel (and hybrid's masked tree part).
      attn_test::row_kernel_sweep<float>(++seed, 4, 128, {attn_test::layout_kind::paged}, {}, true);
      attn_test::row_kernel_sweep<specdec::half>(++seed, 2, 64, {attn_test::layout_kind::nhd}, {}, true);
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
