// The demo's code path at tiny sizes: both decodings run, the report says lossless, tau >= 1, the
// draft memory is constant in the prompt length, a paged target KV is lossless too, and specdec_demo's
// argument parsing works.
#include <catch2/catch.hpp>

#include <sstream>

#define main specdec_demo_main
#include "../../examples/specdec_demo.cpp"
#undef main

using namespace specdec::examples;

TEST_CASE("demo at tiny sizes: lossless report, constant draft memory", "[examples][demo]") {
  demo_options o;
  o.model = {.vocab_size = 128, .hidden = 32, .layers = 2, .heads = 2, .kv_heads = 1, .head_dim = 64, .ffn_hidden = 48};
  o.prompt_tokens = 96;
  o.new_tokens = 64;
  o.window = 16;
  std::ostringstream log, out;
  const auto small = run_demo(o, log);
  CHECK(small.lossless);
  CHECK(small.first_mismatch == -1);
  CHECK(small.generated == 64);
  CHECK(small.tau >= 1.0);
  CHECK(small.stats.steps > 0);
  CHECK(small.ar_tokens_per_s > 0);
  CHECK(log.str().find("tok/s") == std::string::npos);  // progress lines appear every 128 tokens only
  print_report(o, small, out);
  CHECK(out.str().find("lossless:     yes") != std::string::npos);
  CHECK(out.str().find("NOT trained") != std::string::npos);
  o.prompt_tokens = 300;
  o.cartesian = true;
  o.paged = true;  // and the target's KV in a paged pool: still lossless, same draft memory
  const auto longer = run_demo(o, log);
  CHECK(longer.lossless);
  CHECK(longer.model.find("paged") != std::string::npos);
  CHECK(longer.draft_bytes == small.draft_bytes);
  CHECK(longer.target_kv_bytes > small.target_kv_bytes);
}

TEST_CASE("specdec_demo main: flags and errors", "[examples][demo]") {
  const char* ok[] = {"specdec_demo", "--prompt", "40", "--new", "16", "--vocab", "64", "--hidden", "16", "--layers", "2",
                      "--heads", "1", "--kv-heads", "1", "--ffn", "16", "--window", "8", "--depth", "3", "--paged", "--quiet"};
  CHECK(specdec_demo_main(static_cast<int>(std::size(ok)), const_cast<char**>(ok)) == 0);
  const char* bad[] = {"specdec_demo", "--bogus"};
  CHECK(specdec_demo_main(2, const_cast<char**>(bad)) == 2);
  const char* bad_dim[] = {"specdec_demo", "--prompt", "8", "--new", "4", "--heads", "3", "--kv-heads", "2", "--quiet"};
  CHECK(specdec_demo_main(static_cast<int>(std::size(bad_dim)), const_cast<char**>(bad_dim)) == 2);  // 3 % 2 != 0... rejected
}
