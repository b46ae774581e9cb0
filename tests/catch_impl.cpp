// Catch2's implementation and session, compiled once for every test executable (catch_run.hpp).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_run.hpp"

namespace specdec_test {

int run_catch(int argc, char** argv, const char* only_tests) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  // Catch2 ANDs separate test-spec arguments: a bundle's file tag ([#test_x]) and only_tests both apply.
  if (only_tests != nullptr) session.configData().testsOrTags.push_back(only_tests);
  return session.run();
}

}  // namespace specdec_test
