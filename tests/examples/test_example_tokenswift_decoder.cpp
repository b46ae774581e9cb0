// Runs examples/tokenswift_decoder.cpp (its main renamed): TokenSwift self-drafting composed from the
// library's policies over the float reference model must be lossless (exit code 0), with the trained
// target and heads of examples/weights and with the seeded random model (--random).
#include <catch2/catch.hpp>

#define main tokenswift_decoder_main
#include "../../examples/tokenswift_decoder.cpp"
#undef main

TEST_CASE("example tokenswift_decoder runs and is lossless", "[examples]") {
  const char* random[] = {"tokenswift_decoder", "--random"};
  CHECK(tokenswift_decoder_main(2, const_cast<char**>(random)) == 0);
  const char* typo[] = {"tokenswift_decoder", "--rnadom"};  // ran the trained pair
  CHECK(tokenswift_decoder_main(2, const_cast<char**>(typo)) == 2);
  const char* extra[] = {"tokenswift_decoder", "--random", "--fast"};
  CHECK(tokenswift_decoder_main(3, const_cast<char**>(extra)) == 2);
#ifndef SPECDEC_TEST_SANITIZED  // a 3072-byte prompt through the 3.3M-parameter target: too slow at -O0
  if (!specdec::examples::default_prompt_file().empty()) {
    const char* trained[] = {"tokenswift_decoder"};
    CHECK(tokenswift_decoder_main(1, const_cast<char**>(trained)) == 0);
  }
#endif
}
