// Runs examples/tokenswift_decoder.cpp (its main renamed): TokenSwift self-drafting composed from the
// library's policies over the float reference model must be lossless (exit code 0).
#include <catch2/catch.hpp>

#define main tokenswift_decoder_main
#include "../../examples/tokenswift_decoder.cpp"
#undef main

TEST_CASE("example tokenswift_decoder runs and is lossless", "[examples]") { CHECK(tokenswift_decoder_main() == 0); }
