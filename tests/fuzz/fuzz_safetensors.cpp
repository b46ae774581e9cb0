// Fuzz target for the examples' safetensors reader (examples/common/safetensors.hpp): the input is
// the file itself. A parsed file must describe tensors that lie inside it and tile its data buffer,
// every float tensor must read back with numel() values, and writing the parsed tensors out again
// must parse to the same entries (the writer and the reader agree).
#include <cstring>
#include <string>
#include <vector>

#include "common/safetensors.hpp"
#include "fuzz_util.hpp"

namespace {
using specdec::dtype;
using specdec::examples::safetensors_file;
using specdec::examples::safetensors_writer;

bool is_float(dtype t) { return t == dtype::f64 || t == dtype::f32 || t == dtype::f16 || t == dtype::bf16; }
}  // namespace

SPECDEC_FUZZ_TARGET(safetensors, "safetensors_file::parse on the raw bytes, read<float>, writer round trip") {
  std::vector<std::uint8_t> bytes(data, data + size);
  const auto f = safetensors_file::parse(bytes);
  std::uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | bytes[static_cast<std::size_t>(i)];
  const std::uint64_t buffer = size - 8 - header;
  std::uint64_t covered = 0;
  safetensors_writer w;
  for (const auto& e : f.entries()) {
    const std::int64_t n = e.numel();
    FUZZ_CHECK(n >= 0 && e.begin <= e.end && e.end <= buffer, "entry \"" + e.name + "\" outside the data buffer");
    FUZZ_CHECK(e.end - e.begin == static_cast<std::uint64_t>(n) * static_cast<std::uint64_t>(specdec::size_of(e.type)),
          "entry \"" + e.name + "\": byte range != numel x dtype size");
    covered += e.end - e.begin;
    FUZZ_CHECK(f.contains(e.name) && &f.entry(e.name) == &e, "entry(\"" + e.name + "\") finds another entry");
    const std::uint8_t* raw = f.raw(e);
    if (is_float(e.type)) {
      FUZZ_CHECK(f.read<float>(e.name, e.shape).size() == static_cast<std::size_t>(n), "read<float> size != numel");
      const auto d = f.read<double>(e.name);
      FUZZ_CHECK(d.size() == static_cast<std::size_t>(n), "read<double> size != numel");
      // F64 values must come back bit for bit (no rounding on the way).
      if (e.type == dtype::f64 && n > 0)
        FUZZ_CHECK(std::memcmp(d.data(), raw, e.end - e.begin) == 0, "F64 values changed on read");
    }
    w.add_raw(e.name, e.shape, e.type, std::vector<std::uint8_t>(raw, raw + (e.end - e.begin)));
  }
  FUZZ_CHECK(covered == buffer, "entries do not tile the data buffer");
  for (const auto& [k, v] : f.metadata()) w.add_metadata(k, v);
  // The writer lays tensors out in entry order; the reparse must see the same names, types, shapes
  // and bytes (offsets may differ: the input's order in the buffer need not be the header's).
  safetensors_file g;
  try {
    g = safetensors_file::parse(w.bytes());
  } catch (const specdec::invalid_argument& e) {
    specdec_fuzz::finding(std::string("the writer's file of a parsed file does not parse: ") + e.what());
  }
  FUZZ_CHECK(g.entries().size() == f.entries().size(), "round trip changed the number of tensors");
  FUZZ_CHECK(g.metadata() == f.metadata(), "round trip changed the metadata");
  for (std::size_t i = 0; i < f.entries().size(); ++i) {
    const auto& a = f.entries()[i];
    const auto& b = g.entries()[i];
    FUZZ_CHECK(a.name == b.name && a.type == b.type && a.shape == b.shape && a.end - a.begin == b.end - b.begin,
          "round trip changed entry \"" + a.name + "\"");
    FUZZ_CHECK(std::memcmp(f.raw(a), g.raw(b), a.end - a.begin) == 0, "round trip changed the bytes of \"" + a.name + "\"");
  }
}
