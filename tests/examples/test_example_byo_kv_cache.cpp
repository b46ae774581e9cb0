// Runs examples/byo_kv_cache.cpp (its main renamed): a user-defined kv layout must give the same
// hybrid attention as a contiguous layout and drive speculative_decoder losslessly (exit code 0).
#include <catch2/catch.hpp>

#define main byo_kv_cache_main
#include "../../examples/byo_kv_cache.cpp"
#undef main

TEST_CASE("example byo_kv_cache runs: user layout == contiguous, decoder lossless", "[examples]") {
  CHECK(byo_kv_cache_main() == 0);
}
