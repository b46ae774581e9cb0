// Tests for the examples' safetensors reader and writer: round trips for every float dtype, metadata,
// and one malformed-file case per kind of defect, each checked for a message naming the defect.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <string>

#include "../../examples/common/safetensors.hpp"

using specdec::dtype;
using specdec::examples::safetensors_file;
using specdec::examples::safetensors_writer;

namespace {
safetensors_writer two_tensors() {
  safetensors_writer w;
  w.add<float>("a", {2, 3}, {1, 2, 3, 4, 5, 6});
  w.add<double>("b", {4}, {0.5, -1.25, 3.0, 1e-3}, dtype::f64);
  return w;
}
std::string header_of(const safetensors_writer& w) { return w.header_json(); }
void replace(std::string& s, const std::string& from, const std::string& to) {
  const auto p = s.find(from);
  REQUIRE(p != std::string::npos);
  s.replace(p, from.size(), to);
}
}  // namespace

TEST_CASE("safetensors round trip for F32, F64, F16, BF16 with metadata", "[safetensors]") {
  safetensors_writer w;
  const std::vector<double> vals = {0.0, 1.0, -2.5, 0.15625, 65504.0, -0.001};
  w.add<double>("f32", {2, 3}, vals, dtype::f32);
  w.add<double>("f64", {3, 2}, vals, dtype::f64);
  w.add<double>("f16", {6}, vals, dtype::f16);
  w.add<double>("bf16", {1, 6}, vals, dtype::bf16);
  w.add<double>("scalar", {}, {7.0}, dtype::f32);
  w.add_metadata("format", "pt");
  w.add_metadata("quote\"d", "v\\al");
  const auto f = safetensors_file::parse(w.bytes());
  CHECK(f.entries().size() == 5);
  CHECK(f.metadata().at("format") == "pt");
  CHECK(f.metadata().at("quote\"d") == "v\\al");
  CHECK(f.entry("f16").type == dtype::f16);
  CHECK(f.entry("bf16").shape == std::vector<std::int64_t>{1, 6});
  const auto a = f.read<double>("f64", {3, 2});
  for (std::size_t i = 0; i < vals.size(); ++i) CHECK(a[i] == vals[i]);
  const auto b = f.read<float>("f32");
  for (std::size_t i = 0; i < vals.size(); ++i) CHECK(b[i] == static_cast<float>(vals[i]));
  const auto h = f.read<double>("f16");
  for (std::size_t i = 0; i < vals.size(); ++i) CHECK(h[i] == Approx(vals[i]).epsilon(1e-3).margin(1e-6));
  const auto bf = f.read<double>("bf16");
  for (std::size_t i = 0; i < vals.size(); ++i) CHECK(bf[i] == Approx(vals[i]).epsilon(1e-2).margin(1e-5));
  CHECK(f.read<double>("scalar").at(0) == 7.0);
  CHECK(f.read<float>("f32")[2] == -2.5f);
}

TEST_CASE("safetensors save and load through a file", "[safetensors]") {
  const std::string path = "specdec_test_safetensors_roundtrip.safetensors";
  two_tensors().save(path);
  const auto f = safetensors_file::load(path);
  CHECK(f.read<double>("b")[1] == -1.25);
  std::remove(path.c_str());
  REQUIRE_THROWS_WITH(safetensors_file::load("/nonexistent/dir/x.safetensors"), Catch::Contains("'path'"));
}

TEST_CASE("safetensors rejects truncated files and bad header lengths", "[safetensors][errors]") {
  auto bytes = two_tensors().bytes();
  SECTION("fewer than 8 bytes") {
    std::vector<std::uint8_t> b(bytes.begin(), bytes.begin() + 5);
    REQUIRE_THROWS_AS(safetensors_file::parse(b), specdec::invalid_argument);
    REQUIRE_THROWS_WITH(safetensors_file::parse(b), Catch::Contains("truncated"));
  }
  SECTION("header length beyond the file") {
    std::vector<std::uint8_t> b(bytes.begin(), bytes.begin() + 20);
    REQUIRE_THROWS_WITH(safetensors_file::parse(b), Catch::Contains("'header length'") && Catch::Contains("truncated"));
  }
  SECTION("absurd header length") {
    auto b = bytes;
    b[7] = 0xFF;
    REQUIRE_THROWS_AS(safetensors_file::parse(b), specdec::invalid_argument);
    REQUIRE_THROWS_WITH(safetensors_file::parse(b), Catch::Contains("'header length'"));
  }
  SECTION("data buffer cut short") {
    bytes.resize(bytes.size() - 4);
    REQUIRE_THROWS_WITH(safetensors_file::parse(bytes), Catch::Contains("data_offsets") && Catch::Contains("out of range"));
  }
  SECTION("extra trailing bytes") {
    bytes.push_back(0);
    REQUIRE_THROWS_WITH(safetensors_file::parse(bytes), Catch::Contains("'data buffer'"));
  }
}

TEST_CASE("safetensors rejects bad JSON", "[safetensors][errors]") {
  const auto w = two_tensors();
  for (std::string bad : {std::string("{\"a\":"), std::string("[1,2]"), std::string("{\"a\" 1}"),
                          std::string("{\"a\":{}} x"), std::string("{\"a\":tru}"), std::string("{\"a\":\"\\q\"}"),
                          std::string("{\"a\":1,\"a\":2}")}) {
    INFO(bad);
    REQUIRE_THROWS_AS(safetensors_file::parse(w.bytes_with_header(bad)), specdec::invalid_argument);
    REQUIRE_THROWS_WITH(safetensors_file::parse(w.bytes_with_header(bad)), Catch::Contains("'header'") ||
                                                                                 Catch::Contains("tensor \"a\""));
  }
  REQUIRE_THROWS_WITH(safetensors_file::parse(w.bytes_with_header("{\"a\":1,\"a\":2}")), Catch::Contains("duplicate"));
}

TEST_CASE("safetensors rejects bad entries", "[safetensors][errors]") {
  const auto w = two_tensors();
  auto h = header_of(w);
  SECTION("unknown dtype") {
    replace(h, "\"F32\"", "\"F31\"");
    REQUIRE_THROWS_WITH(safetensors_file::parse(w.bytes_with_header(h)), Catch::Contains("dtype") && Catch::Contains("F31"));
  }
  SECTION("offsets not matching shape x dtype size") {
    replace(h, "[2,3]", "[2,2]");
    REQUIRE_THROWS_WITH(safetensors_file::parse(w.bytes_with_header(h)),
                        Catch::Contains("tensor \"a\" data_offsets") && Catch::Contains("shape product"));
  }
  SECTION("offsets out of range") {
    replace(h, "[24,56]", "[24,64]");
    REQUIRE_THROWS_WITH(safetensors_file::parse(w.bytes_with_header(h)), Catch::Contains("out of range"));
  }
  SECTION("begin after end") {
    replace(h, "[24,56]", "[56,24]");
    REQUIRE_THROWS_WITH(safetensors_file::parse(w.bytes_with_header(h)), Catch::Contains("begin <= end"));
  }
  SECTION("overlapping tensors") {
    safetensors_writer w2;
    w2.add<float>("a", {4}, {1, 2, 3, 4});
    w2.add<float>("b", {4}, {1, 2, 3, 4});
    auto h2 = w2.header_json();
    replace(h2, "[16,32]", "[8,24]");
    auto bytes = w2.bytes_with_header(h2);
    bytes.resize(bytes.size() - 8);
    REQUIRE_THROWS_WITH(safetensors_file::parse(bytes), Catch::Contains("overlap"));
  }
  SECTION("hole in the buffer") {
    safetensors_writer w2;
    w2.add<float>("a", {2}, {1, 2});
    w2.add<float>("b", {2}, {1, 2});
    auto h2 = w2.header_json();
    replace(h2, "[0,8]", "[0,4]");
    replace(h2, "[2]", "[1]");
    REQUIRE_THROWS_WITH(safetensors_file::parse(w2.bytes_with_header(h2)), Catch::Contains("hole"));
  }
  SECTION("negative dimension") {
    replace(h, "[2,3]", "[-2,3]");
    REQUIRE_THROWS_WITH(safetensors_file::parse(w.bytes_with_header(h)), Catch::Contains("shape"));
  }
  SECTION("missing key") {
    replace(h, "\"dtype\":\"F32\",", "");
    REQUIRE_THROWS_WITH(safetensors_file::parse(w.bytes_with_header(h)), Catch::Contains("missing key"));
  }
  SECTION("non-string metadata") {
    REQUIRE_THROWS_WITH(safetensors_file::parse(w.bytes_with_header("{\"__metadata__\":{\"k\":1}," + h.substr(1))),
                        Catch::Contains("__metadata__"));
  }
}

TEST_CASE("safetensors read checks names, shapes and dtypes", "[safetensors][errors]") {
  safetensors_writer w;
  w.add<float>("a", {2}, {1, 2});
  w.add_raw("ints", {2}, dtype::i32, std::vector<std::uint8_t>(8, 0));
  const auto f = safetensors_file::parse(w.bytes());
  REQUIRE_THROWS_WITH(f.read<float>("missing"), Catch::Contains("'name'") && Catch::Contains("missing"));
  REQUIRE_THROWS_WITH(f.read<float>("a", {3}), Catch::Contains("shape [3]"));
  REQUIRE_THROWS_WITH(f.read<float>("ints"), Catch::Contains("floating-point"));
  REQUIRE_THROWS_AS(w.add<float>("bad", {3}, {1.0f}), specdec::invalid_argument);
  // an empty integer tensor is still the wrong dtype; non-finite weights (stored, or an F64 value
  // past float's range) are refused naming the element
  w.add_raw("no_ints", {0, 4}, dtype::i32, {});
  w.add<double>("big", {2}, {1.0, 1e300}, dtype::f64);
  w.add<float>("nan", {3}, {0.0f, 1.0f, std::nanf("")});
  const auto g = safetensors_file::parse(w.bytes());
  REQUIRE_THROWS_WITH(g.read<float>("no_ints"), Catch::Contains("floating-point"));
  REQUIRE_THROWS_WITH(g.read<float>("big"), Catch::Contains("'big'") && Catch::Contains("element 1"));
  CHECK(g.read<double>("big")[1] == 1e300);  // in range of double
  REQUIRE_THROWS_WITH(g.read<double>("nan"), Catch::Contains("non-finite value at element 2"));
}

TEST_CASE("safetensors checks duplicate keys in time linear-log in the header's size", "[safetensors][errors]") {
  // 40,000 metadata keys: the check per key against all before it was quadratic (7 s for 80,000)
  std::string meta = "{\"__metadata__\":{";
  for (int i = 0; i < 40000; ++i) meta += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":\"v\"";
  safetensors_writer w;
  const auto ok = safetensors_file::parse(w.bytes_with_header(meta + "}}"));
  CHECK(ok.metadata().size() == 40000);
  REQUIRE_THROWS_WITH(safetensors_file::parse(w.bytes_with_header(meta + ",\"k17\":\"w\"}}")),
                      Catch::Contains("duplicate key \"k17\""));
}

TEST_CASE("safetensors rejects shapes whose size overflows int64", "[safetensors][errors]") {
  safetensors_writer w;
  w.add<float>("a", {2}, {1, 2});
  SECTION("a zero dimension after two whose product is 2^63 (numel() used to overflow)") {
    // 0 elements and 0 bytes, so the offsets agree; but 2^62 * 2 overflows any stride computation.
    const std::string h = R"({"z":{"dtype":"F32","shape":[4611686018427387904,2,0],"data_offsets":[0,0]},)"
                          R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    REQUIRE_THROWS_WITH(safetensors_file::parse(w.bytes_with_header(h)),
                        Catch::Contains("tensor \"z\" shape") && Catch::Contains("[4611686018427387904, 2, 0]"));
  }
  SECTION("a byte size that wraps to 0 (2^61 F64 elements with data_offsets [0, 0])") {
    const std::string h = R"({"z":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]},)"
                          R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    REQUIRE_THROWS_WITH(safetensors_file::parse(w.bytes_with_header(h)), Catch::Contains("tensor \"z\" shape"));
  }
  SECTION("the largest representable zero-size shape is still accepted") {
    const std::string h = R"({"z":{"dtype":"U8","shape":[4611686018427387904,0,1],"data_offsets":[0,0]},)"
                          R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    const auto f = safetensors_file::parse(w.bytes_with_header(h));
    CHECK(f.entry("z").numel() == 0);
  }
  SECTION("a hand-built entry and the writer check the shape too") {
    specdec::examples::safetensors_entry e;
    e.shape = {std::int64_t{1} << 62, 2, 0};
    REQUIRE_THROWS_AS(e.numel(), specdec::invalid_argument);
    e.shape = {3, -1};
    REQUIRE_THROWS_AS(e.numel(), specdec::invalid_argument);
    REQUIRE_THROWS_WITH(w.add<float>("neg", {-1, -2}, {1.0f, 2.0f}), Catch::Contains("'shape'"));
  }
}

TEST_CASE("safetensors writer escapes control characters so its files parse", "[safetensors]") {
  // Found by the safetensors fuzz target: a name with a control character (legal in the reader
  // through a \u escape) was written raw, and the reader rejects raw control characters in JSON.
  safetensors_writer w;
  const std::string name = std::string("a\nb\x01") + '\0' + "c";
  w.add<float>(name, {1}, {2.0f});
  w.add_metadata("tab\tkey", "bell\a\"q\"");
  const auto f = safetensors_file::parse(w.bytes());
  CHECK(f.read<float>(name).at(0) == 2.0f);
  CHECK(f.metadata().at("tab\tkey") == "bell\a\"q\"");
}
