// The one Catch2 main shared by every test executable (compiled once).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>

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
  return Catch::Session().run(argc, argv);
}
