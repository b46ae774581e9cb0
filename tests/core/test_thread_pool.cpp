#include <catch2/catch.hpp>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "specdec/core/thread_pool.hpp"

TEST_CASE("parallel_for visits every index exactly once") {
  for (int threads : {0, 1, 2, 3}) {
    std::vector<std::atomic<int>> hits(1000);
    specdec::parallel_for(specdec::host{threads}, 1000, [&](std::int64_t i) { hits[i].fetch_add(1); });
    for (auto& h : hits) REQUIRE(h.load() == 1);
  }
}

TEST_CASE("parallel_for nests without deadlock and rethrows the first exception") {
  std::atomic<int> total{0};
  specdec::parallel_for(specdec::host{}, 8, [&](std::int64_t) {
    specdec::parallel_for(specdec::host{}, 8, [&](std::int64_t) { total.fetch_add(1); });
  });
  CHECK(total.load() == 64);
  CHECK_THROWS_AS(specdec::parallel_for(specdec::host{}, 100,
                                        [](std::int64_t i) {
                                          if (i == 37) throw std::runtime_error("boom");
                                        }),
                  std::runtime_error);
  CHECK_THROWS_AS(specdec::parallel_for(specdec::host{-1}, 1, [](std::int64_t) {}), specdec::invalid_argument);
}
