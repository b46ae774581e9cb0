#include <catch2/catch.hpp>

#include <vector>

#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/kv/paged_kv.hpp"

TEST_CASE("contiguous and paged layouts validate their lengths") {
  std::vector<float> k(2 * 8 * 2 * 4), v(k.size());
  std::vector<std::int32_t> len{3, 9};
  specdec::contiguous_kv<float> c{k.data(), v.data(), len.data(), 2, 8, 2, 4};
  REQUIRE_THROWS_AS(specdec::validate_kv_layout(c, "f", "cache"), specdec::invalid_argument);
  len[1] = 8;
  REQUIRE_NOTHROW(specdec::validate_kv_layout(c, "f", "cache"));
  CHECK(c.k_row(1, 2, 1) - k.data() == ((1 * 8 + 2) * 2 + 1) * 4);
}
