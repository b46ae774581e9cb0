#include <catch2/catch.hpp>

#include <map>

#include "specdec/core/philox.hpp"
#include "specdec/core/detail/hash_slots.hpp"

#include "common/alloc_counter.hpp"

// Randomized insert/upsert/erase against std::map, with hashes squeezed into a few values so probe
// runs are long, wrap around the table end, and backward-shift deletion is exercised.
TEST_CASE("hash_slots: matches std::map under heavy collisions", "[core][hash]") {
  for (std::uint64_t hash_range : {1ull, 7ull, 1000ull}) {
    specdec::philox_stream rng(hash_range, 9);
    specdec::detail::hash_slots t;
    std::map<std::int32_t, std::int32_t> ref;  // key -> id ; ids are key * 10 + version
    std::vector<std::int32_t> key_of(100000, -1);
    const auto h = [&](std::int32_t key) { return (static_cast<std::uint64_t>(key) * 0x9E3779B97F4A7C15ull) % hash_range + (hash_range > 7 ? 0xFFF0u : 0u); };
    std::int32_t next_id = 0;
    for (int step = 0; step < 4000; ++step) {
      const auto key = static_cast<std::int32_t>(rng.below(60));
      const auto eq = [&](std::int32_t id) { return key_of[static_cast<std::size_t>(id)] == key; };
      const auto op = rng.below(3);
      if (op == 0) {
        const std::int32_t id = next_id++;
        key_of[static_cast<std::size_t>(id)] = key;
        const std::int32_t old = t.upsert(h(key), id, eq);
        const auto it = ref.find(key);
        REQUIRE(old == (it == ref.end() ? -1 : it->second));
        ref[key] = id;
      } else if (op == 1) {
        const auto it = ref.find(key);
        if (it != ref.end()) {
          t.erase(h(key), it->second);
          ref.erase(it);
        }
      }
      REQUIRE(t.size() == ref.size());
      for (std::int32_t k = 0; k < 60; ++k) {
        const auto it = ref.find(k);
        REQUIRE(t.find(h(k), [&](std::int32_t id) { return key_of[static_cast<std::size_t>(id)] == k; }) ==
                (it == ref.end() ? -1 : it->second));
      }
    }
    t.clear();
    REQUIRE(t.size() == 0);
    REQUIRE(t.find(1, [](std::int32_t) { return true; }) == -1);
  }
}

// A growth whose allocation fails must leave the table as it was (strong guarantee): every stored id
// still found, size() unchanged, and the next insert works. Before, the old cells were swapped out
// before the new array was allocated, so a bad_alloc left an empty table with a stale size and mask.
TEST_CASE("hash_slots: a failed growth leaves the table intact", "[core][hash]") {
  specdec::detail::hash_slots t;
  const auto eq_to = [](std::int32_t want) { return [want](std::int32_t id) { return id == want; }; };
  const auto h = [](std::int32_t id) { return static_cast<std::uint64_t>(id) * 0x9E3779B97F4A7C15ull; };
  for (std::int32_t id = 0; id < 8; ++id) t.insert(h(id), id);  // 16 cells, half full: the next insert grows
  {
    specdec_test::failing_allocation_scope no_memory(0);
    REQUIRE_THROWS_AS(t.insert(h(8), 8), std::bad_alloc);
  }
  REQUIRE(t.size() == 8);
  for (std::int32_t id = 0; id < 9; ++id) REQUIRE(t.find(h(id), eq_to(id)) == (id < 8 ? id : -1));
  t.insert(h(8), 8);
  REQUIRE(t.size() == 9);
  for (std::int32_t id = 0; id < 9; ++id) REQUIRE(t.find(h(id), eq_to(id)) == id);
}
