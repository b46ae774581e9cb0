#include <catch2/catch.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "specdec/core/error.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::Equals;

TEST_CASE("validation messages name function, argument, expected and actual") {
  CHECK(specdec::format_argument_error("specdec::foo", "q", "rank 3", 2) ==
        "specdec::foo: argument 'q': expected rank 3, got 2");
  CHECK(specdec::format_argument_error("f", "flag", "true", false) == "f: argument 'flag': expected true, got false");
  CHECK(specdec::format_argument_error("f", "c", "a small int", std::int8_t{-3}) ==
        "f: argument 'c': expected a small int, got -3");
  CHECK(specdec::format_argument_error("f", "p", "non-null", "nullptr") == "f: argument 'p': expected non-null, got nullptr");
}

TEST_CASE("require throws specdec::invalid_argument with the canonical message only on failure") {
  CHECK_NOTHROW(specdec::require(true, "specdec::foo", "x", "x > 0", 1));
  try {
    specdec::require(false, "specdec::foo", "heads", "a multiple of kv_heads = 4", 6);
    FAIL("require(false) did not throw");
  } catch (const specdec::invalid_argument& e) {
    CHECK_THAT(std::string(e.what()),
               Equals("specdec::foo: argument 'heads': expected a multiple of kv_heads = 4, got 6"));
  }
  // Generic handlers catch it as std::invalid_argument.
  CHECK_THROWS_AS(specdec::require(false, "f", "a", "b", 0), std::invalid_argument);
}

TEST_CASE("require_equal and require_in_range print the expectation") {
  CHECK_NOTHROW(specdec::require_equal("f", "n", 3, 3));
  CHECK_THROWS_WITH(specdec::require_equal("specdec::bar", "dim", 128, 64),
                    Equals("specdec::bar: argument 'dim': expected 128, got 64"));
  CHECK_NOTHROW(specdec::require_in_range("f", "i", 5, 0, 5));
  CHECK_THROWS_WITH(specdec::require_in_range("specdec::baz", "index", 9, 0, 7),
                    Equals("specdec::baz: argument 'index': expected a value in [0, 7], got 9"));
  CHECK_THROWS_WITH(specdec::require_in_range("f", "i", -1, 0, 7), Contains("got -1"));
  CHECK_THROWS_AS(specdec::throw_invalid_argument("f", "a", "b", 1.5), specdec::invalid_argument);
  CHECK_THROWS_WITH(specdec::throw_invalid_argument("f", "a", "b", 1.5), Contains("got 1.5"));
}

TEST_CASE("cuda_error carries the CUDA error code and message") {
  const specdec::cuda_error e(2, "cudaMalloc: cudaErrorMemoryAllocation (out of memory)");
  CHECK(e.code() == 2);
  CHECK_THAT(std::string(e.what()), Contains("out of memory"));
  const std::runtime_error& base = e;
  CHECK_THAT(std::string(base.what()), Contains("cudaMalloc"));
}
