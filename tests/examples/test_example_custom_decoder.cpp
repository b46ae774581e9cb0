// Runs examples/custom_decoder.cpp (its main renamed): the hand-written loop from primitives must be
// lossless (exit code 0).
#include <catch2/catch.hpp>

#define main custom_decoder_main
#include "../../examples/custom_decoder.cpp"
#undef main

TEST_CASE("example custom_decoder runs and is lossless", "[examples]") { CHECK(custom_decoder_main() == 0); }
