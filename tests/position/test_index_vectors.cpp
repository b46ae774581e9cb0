// Shared test vectors (tests/data/longspec_index_vectors.json, made by the C++ functions) checked
// against philox_stream, the anchor-offset indices (LongSpec Algorithm 1) and flash noisy training
// (Algorithm 2). examples/training/test_indices.py checks the Python port against the same file, so
// the training recipe draws the same positions and shifts as the C++ generators.
#include <catch2/catch.hpp>

#include <charconv>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "../../examples/common/safetensors.hpp"  // its minimal JSON parser
#include "specdec/position/anchor_offset.hpp"
#include "specdec/position/noisy_training.hpp"

#ifndef SPECDEC_TEST_DATA_DIR
#error "SPECDEC_TEST_DATA_DIR (tests/data) is set by tests/CMakeLists.txt"
#endif

namespace {
using specdec::examples::detail::json_value;
using kind = json_value::kind;

const json_value& vectors() {
  static const json_value root = [] {
    std::ifstream f(SPECDEC_TEST_DATA_DIR "/longspec_index_vectors.json", std::ios::binary);
    REQUIRE(f.good());
    std::ostringstream text;
    text << f.rdbuf();
    return specdec::examples::detail::json_parser(text.str()).parse_document();
  }();
  return root;
}

const json_value* find(const json_value& obj, std::string_view key) {
  REQUIRE(obj.k == kind::object);
  for (const auto& m : obj.obj)
    if (m.key == key) return &m.value;
  return nullptr;
}
const json_value& at(const json_value& obj, std::string_view key) {
  const json_value* v = find(obj, key);
  INFO("key " << key);
  REQUIRE(v != nullptr);
  return *v;
}
// The cases of one section; never empty, so a renamed or emptied section cannot pass vacuously.
const std::vector<json_value>& cases(std::string_view section) {
  const json_value& s = at(vectors(), section);
  REQUIRE(s.k == kind::array);
  REQUIRE(!s.arr.empty());
  return s.arr;
}

std::int64_t integer(const json_value& v) {
  REQUIRE(v.k == kind::number);
  REQUIRE(v.integral);
  return v.i;
}
std::int64_t integer(const json_value& obj, std::string_view key) { return integer(at(obj, key)); }
// 64-bit values are hex strings ("0x" + 16 digits): JSON numbers stop at int64 in the parser.
std::uint64_t hex64(const json_value& obj, std::string_view key) {
  const json_value& v = at(obj, key);
  REQUIRE(v.k == kind::string);
  REQUIRE(v.s.size() > 2);
  REQUIRE(v.s.substr(0, 2) == "0x");
  std::uint64_t x = 0;
  const auto r = std::from_chars(v.s.data() + 2, v.s.data() + v.s.size(), x, 16);
  REQUIRE(r.ec == std::errc{});
  REQUIRE(r.ptr == v.s.data() + v.s.size());
  return x;
}
std::vector<std::int64_t> integers(const json_value& obj, std::string_view key) {
  const json_value& v = at(obj, key);
  REQUIRE(v.k == kind::array);
  std::vector<std::int64_t> out;
  for (const auto& e : v.arr) out.push_back(integer(e));
  return out;
}
// The recorded index array: "indices" in full, or "index_runs" = [first, count] runs of consecutive values.
std::vector<std::int64_t> expected_indices(const json_value& c) {
  const json_value* full = find(c, "indices");
  const json_value* runs = find(c, "index_runs");
  REQUIRE((full != nullptr) != (runs != nullptr));
  if (full) return integers(c, "indices");
  std::vector<std::int64_t> out;
  for (const auto& r : runs->arr) {
    REQUIRE(r.k == kind::array);
    REQUIRE(r.arr.size() == 2);
    const std::int64_t first = integer(r.arr[0]), count = integer(r.arr[1]);
    REQUIRE(count >= 1);
    for (std::int64_t i = 0; i < count; ++i) out.push_back(first + i);
  }
  return out;
}
// Element by element, reporting the first difference only (the arrays run to 65K entries).
template <class T>
void check_same(const std::vector<T>& got, const std::vector<std::int64_t>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (static_cast<std::int64_t>(got[i]) != want[i]) {
      INFO("first difference at element " << i);
      CHECK(static_cast<std::int64_t>(got[i]) == want[i]);
      return;
    }
}
std::vector<std::int32_t> int32s(const std::vector<std::int64_t>& v) { return {v.begin(), v.end()}; }
}  // namespace

TEST_CASE("index vectors: philox_stream words, including block and 2^32-block boundaries", "[vectors]") {
  const auto& cs = cases("philox_stream");
  for (std::size_t c = 0; c < cs.size(); ++c) {
    INFO("philox_stream case " << c);
    specdec::philox_stream rng(hex64(cs[c], "seed"), hex64(cs[c], "stream"), hex64(cs[c], "word_offset"));
    const auto want = integers(cs[c], "words");
    std::vector<std::uint32_t> got;
    for (std::size_t k = 0; k < want.size(); ++k) got.push_back(rng.next_u32());
    check_same(got, want);
  }
}

TEST_CASE("index vectors: philox_stream::below(n), n from 1 to 2^32 - 1", "[vectors]") {
  const auto& cs = cases("below");
  for (std::size_t c = 0; c < cs.size(); ++c) {
    INFO("below case " << c);
    specdec::philox_stream rng(hex64(cs[c], "seed"), hex64(cs[c], "stream"), hex64(cs[c], "word_offset"));
    const std::int64_t n = integer(cs[c], "n");
    REQUIRE(n >= 1);
    REQUIRE(n <= UINT32_MAX);
    const auto want = integers(cs[c], "values");
    std::vector<std::uint32_t> got;
    for (std::size_t k = 0; k < want.size(); ++k) got.push_back(rng.below(static_cast<std::uint32_t>(n)));
    check_same(got, want);
  }
}

TEST_CASE("index vectors: anchor_offset_indices_batch (Algorithm 1 per sequence)", "[vectors]") {
  const auto& cs = cases("anchor_offset_indices_batch");
  for (std::size_t c = 0; c < cs.size(); ++c) {
    INFO("anchor_offset_indices_batch case " << c);
    const auto lengths = int32s(integers(cs[c], "lengths"));
    const auto want_offsets = integers(cs[c], "offsets");
    const auto want = expected_indices(cs[c]);
    std::size_t total = 0;
    for (const auto n : lengths) total += static_cast<std::size_t>(n);
    std::vector<std::int32_t> out(total), offsets(lengths.size());
    specdec::anchor_offset_indices_batch(hex64(cs[c], "seed"), static_cast<std::uint32_t>(integer(cs[c], "step")),
                                         static_cast<int>(integer(cs[c], "max_len")), lengths, out, offsets,
                                         static_cast<int>(integer(cs[c], "num_anchors")));
    check_same(offsets, want_offsets);
    check_same(out, want);
  }
}

TEST_CASE("index vectors: anchor_offset_indices from a stream at a word offset, num_anchors != 4", "[vectors]") {
  const auto& cs = cases("anchor_offset_indices");
  for (std::size_t c = 0; c < cs.size(); ++c) {
    INFO("anchor_offset_indices case " << c);
    const std::uint64_t word_offset = hex64(cs[c], "word_offset");
    specdec::philox_stream rng(hex64(cs[c], "seed"), hex64(cs[c], "stream"), word_offset);
    std::vector<std::int32_t> out(static_cast<std::size_t>(integer(cs[c], "n")));
    const int o = specdec::anchor_offset_indices(static_cast<int>(integer(cs[c], "max_len")), rng, out,
                                                 static_cast<int>(integer(cs[c], "num_anchors")));
    CHECK(o == integer(cs[c], "offset"));
    CHECK(rng.offset() == word_offset + 1);  // Algorithm 1 line 4 takes one word
    check_same(out, expected_indices(cs[c]));
  }
}

TEST_CASE("index vectors: flash_noisy_training_batch (Algorithm 2), every slice field", "[vectors]") {
  const auto& cs = cases("flash_noisy_training_batch");
  for (std::size_t c = 0; c < cs.size(); ++c) {
    INFO("flash_noisy_training_batch case " << c);
    const auto lens = int32s(integers(cs[c], "seq_lens"));
    const auto got =
        specdec::flash_noisy_training_batch(hex64(cs[c], "seed"), static_cast<std::uint32_t>(integer(cs[c], "step")),
                                            static_cast<int>(integer(cs[c], "gamma")), lens);
    const json_value& want = at(cs[c], "slices");
    REQUIRE(want.k == kind::array);
    REQUIRE(got.size() == want.arr.size());
    for (std::size_t b = 0; b < got.size(); ++b) {
      INFO("sequence " << b);
      const json_value& w = want.arr[b];
      REQUIRE(w.obj.size() == 6);  // every field of flash_noisy_slice, no more
      CHECK(got[b].shift == integer(w, "shift"));
      CHECK(got[b].query_begin == integer(w, "query_begin"));
      CHECK(got[b].query_end == integer(w, "query_end"));
      CHECK(got[b].key_begin == integer(w, "key_begin"));
      CHECK(got[b].key_end == integer(w, "key_end"));
      CHECK(got[b].pad_rows == integer(w, "pad_rows"));
    }
  }
}
