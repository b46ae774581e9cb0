// The one Catch2 main shared by every test executable (compiled once; Catch2 itself is in catch_impl.cpp).
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "catch_run.hpp"
#include "specdec/core/simd_level.hpp"

int main(int argc, char* argv[]) {
  // ctest runs the dispatching kernel tests once per level with SPECDEC_ISA=<level>
  // (tests/CMakeLists.txt). A level this CPU cannot run is reported as skipped (exit 77) rather than
  // silently tested at a lower one; an unknown value is an error.
  if (std::getenv("SPECDEC_ISA") != nullptr) {
    try {
      const int want = specdec::detail::simd_level_from_env();
      if (want > static_cast<int>(specdec::cpu_simd_level())) {
        std::printf("SPECDEC_ISA=%s: this CPU runs up to %s; skipped\n", std::getenv("SPECDEC_ISA"),
                    specdec::to_string(specdec::cpu_simd_level()).data());
        return 77;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
  }
  const int rc = specdec_test::run_catch(argc, argv);
#if SPECDEC_ISA_DISPATCH
  // Which copies ran: the dispatching tests are built with SPECDEC_ISA_DISPATCH_TRACE=1 and run by
  // ctest with SPECDEC_TEST_EXPECT_DISPATCH=1 (tests/CMakeLists.txt). Every dispatched call must
  // have run the level SPECDEC_ISA asks for (capped by the CPU), and at least one must have run: a
  // per-level run that silently executed another level's code, or none, fails here. A test that
  // walks the levels itself (set_simd_level) must still have run the requested one.
  if (rc == 0 && std::getenv("SPECDEC_TEST_EXPECT_DISPATCH") != nullptr) {
    specdec::reset_simd_level();
    const int want = specdec::detail::dispatch_simd_level();
    const unsigned ran = specdec::detail::dispatch_trace.load();
    const bool walked = specdec::detail::simd_level_set_in_process.load();
    if (walked ? (ran & (1u << want)) == 0 : ran != (1u << want)) {
      std::fprintf(stderr, "dispatch check: expected %s the %s copies to run; ran:%s%s%s%s\n", walked ? "among others" : "only",
                   specdec::to_string(static_cast<specdec::simd_level>(want)).data(), ran & 1u ? " portable" : "",
                   ran & 2u ? " avx2" : "", ran & 4u ? " avx512" : "", ran == 0 ? " none" : "");
      return 1;
    }
    std::printf("dispatch check: %s copies ran%s\n", specdec::to_string(static_cast<specdec::simd_level>(want)).data(),
                walked ? " (and the levels the tests set themselves)" : "");
  }
#endif
  return rc;
}
