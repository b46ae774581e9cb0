// Downstream smoke program: includes the umbrella header and exercises a few core and kv pieces.
// Exits non-zero (with a message) when a result is wrong.
#include <specdec/specdec.hpp>

#include <cstdio>
#include <vector>

int main() {
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    if (!ok) {
      std::printf("FAILED: %s\n", what);
      ++failures;
    }
  };
  check(static_cast<float>(specdec::half(1.5f)) == 1.5f, "half round trip");
  check(specdec::bfloat16(1.0f).bits == 0x3f80, "bfloat16 bits");
  specdec::philox_stream a(42, specdec::stream_id(1, 2)), b(42, specdec::stream_id(1, 2));
  check(a.next_u32() == b.next_u32(), "philox reproducible");

  std::vector<float> k(2 * 4 * 2 * 8), v(k.size());
  std::vector<std::int32_t> lengths{3, 4};
  specdec::contiguous_kv<float> cache{k.data(), v.data(), lengths.data(), 2, 4, 2, 8};
  specdec::validate_kv_layout(cache, "consumer", "cache");
  check(cache.k_row(1, 2, 1) - k.data() == ((1 * 4 + 2) * 2 + 1) * 8, "contiguous_kv row offset");

  std::vector<int> hits(100, 0);
  specdec::parallel_for(specdec::host{2}, 100, [&](std::int64_t i) { hits[static_cast<std::size_t>(i)] += 1; });
  int total = 0;
  for (int h : hits) total += h;
  check(total == 100, "parallel_for");

  bool threw = false;
  try {
    specdec::require(false, "consumer", "x", "true", 0);
  } catch (const specdec::invalid_argument&) {
    threw = true;
  }
  check(threw, "specdec::invalid_argument");
  std::printf("consumer: %s\n", failures == 0 ? "OK" : "FAILED");
  return failures == 0 ? 0 : 1;
}
