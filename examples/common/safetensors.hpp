#pragma once
//! \file safetensors.hpp
//! A small, strict reader and writer for the safetensors format (huggingface/safetensors):
//!   [8 bytes: little-endian u64 N] [N bytes: JSON object header] [data buffer]
//! The header maps each tensor name to {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}
//! (offsets relative to the start of the data buffer) and may hold "__metadata__": {string: string}.
//! The reader rejects every malformed file with a specdec::invalid_argument that names what is wrong
//! (truncated file, bad header length, bad JSON, unknown dtype, a shape whose size overflows int64,
//! offsets out of range, overlapping or not matching shape x dtype size, holes in the buffer). It converts F64/F32/F16/BF16 to float or double.

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/bfloat16.hpp"
#include "specdec/core/dtype.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/half.hpp"

namespace specdec::examples {

//! One tensor's entry in a safetensors header. Offsets are bytes into the data buffer.
struct safetensors_entry {
  std::string name;
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;

  //! Number of elements (product of the shape; 1 for a scalar). Entries from safetensors_file::parse
  //! always have one; a hand-built shape with a negative dimension, or whose non-zero dimensions
  //! multiply past INT64_MAX, throws specdec::invalid_argument.
  [[nodiscard]] std::int64_t numel() const;
};

namespace detail {

//! Element count of `shape` (1 for a scalar), or -1 when a dimension is negative or the product of the
//! non-zero dimensions times `elem_bytes` exceeds INT64_MAX. Zeros are skipped in the overflow test on
//! purpose: shape [2^62, 2, 0] has 0 elements, but a reader that computes a stride or a partial
//! product (2^62 * 2) would still overflow, so such a shape is not representable. O(rank).
[[nodiscard]] inline std::int64_t checked_numel(const std::vector<std::int64_t>& shape,
                                                std::int64_t elem_bytes = 1) noexcept {
  std::int64_t nonzero = elem_bytes;
  bool any_zero = false;
  for (const auto d : shape) {
    if (d < 0) return -1;
    if (d == 0) {
      any_zero = true;
      continue;
    }
    if (nonzero > INT64_MAX / d) return -1;
    nonzero *= d;
  }
  return any_zero ? 0 : nonzero / elem_bytes;
}

//! "[2, 3]": a shape as the error messages print it.
[[nodiscard]] inline std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

inline constexpr std::string_view st_fn = "specdec::examples::safetensors_file::parse";

//! The safetensors dtype spelling ("F32", "BF16", ...) for a specdec dtype.
[[nodiscard]] inline std::string_view safetensors_dtype_name(dtype t) {
  switch (t) {
    case dtype::f64: return "F64";
    case dtype::f32: return "F32";
    case dtype::f16: return "F16";
    case dtype::bf16: return "BF16";
    case dtype::i64: return "I64";
    case dtype::i32: return "I32";
    case dtype::i16: return "I16";
    case dtype::i8: return "I8";
    case dtype::u8: return "U8";
    case dtype::u16: return "U16";
    case dtype::u32: return "U32";
    case dtype::u64: return "U64";
    case dtype::boolean: return "BOOL";
  }
  return "?";
}

[[nodiscard]] inline bool parse_safetensors_dtype(std::string_view s, dtype& out) {
  static constexpr dtype all[] = {dtype::f64, dtype::f32, dtype::f16, dtype::bf16, dtype::i64,
                                  dtype::i32, dtype::i16, dtype::i8,  dtype::u8,   dtype::u16,
                                  dtype::u32, dtype::u64, dtype::boolean};
  for (dtype t : all)
    if (safetensors_dtype_name(t) == s) {
      out = t;
      return true;
    }
  return false;
}

struct json_member;

//! Minimal JSON value: enough for safetensors headers (objects, arrays, strings, integers, literals).
//! Object members are json_member (declared before, defined after): a std::pair<std::string,
//! json_value> member would need json_value complete inside its own definition, which clang 14 with
//! libstdc++ 12 rejects (pair's conditionally explicit constructors inspect the type).
struct json_value {
  enum class kind { null, boolean, number, string, array, object } k = kind::null;
  bool b = false;
  bool integral = false;
  std::int64_t i = 0;  // valid when integral
  std::string s;
  std::vector<json_value> arr;
  std::vector<json_member> obj;
};

//! One "key": value member of a JSON object, in document order.
struct json_member {
  std::string key;
  json_value value;
};

//! Strict recursive-descent JSON parser; errors name the byte offset inside the header.
class json_parser {
 public:
  explicit json_parser(std::string_view text) : t_(text) {}

  json_value parse_document() {
    json_value v = value(0);
    ws();
    if (p_ != t_.size()) fail("end of JSON after the top-level value", "trailing characters");
    return v;
  }

 private:
  [[noreturn]] void fail(std::string_view expected, std::string_view got) const {
    throw_invalid_argument(st_fn, "header", "valid JSON (" + std::string(expected) + ")",
                           std::string(got) + " at header byte " + std::to_string(p_));
  }
  void ws() {
    while (p_ < t_.size() && (t_[p_] == ' ' || t_[p_] == '\t' || t_[p_] == '\n' || t_[p_] == '\r')) ++p_;
  }
  char peek() {
    ws();
    if (p_ >= t_.size()) fail("more input", "end of header");
    return t_[p_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("'") + c + "'", std::string("'") + t_[p_] + "'");
    ++p_;
  }
  json_value value(int depth) {
    if (depth > 64) fail("nesting depth <= 64", "deeper nesting");
    const char c = peek();
    json_value v;
    if (c == '{') {
      v.k = json_value::kind::object;
      ++p_;
      if (peek() == '}') {
        ++p_;
        return v;
      }
      for (;;) {
        if (peek() != '"') fail("a string key", std::string("'") + t_[p_] + "'");
        std::string key = str();
        expect(':');
        v.obj.push_back({std::move(key), value(depth + 1)});
        const char d = peek();
        ++p_;
        if (d == '}') break;
        if (d != ',') fail("',' or '}'", std::string("'") + d + "'");
      }
      // unique keys, checked once over the sorted keys (a check per key against the ones before was
      // quadratic: 7 s for an 80,000-key header)
      std::vector<const std::string*> keys;
      keys.reserve(v.obj.size());
      for (const auto& kv : v.obj) keys.push_back(&kv.key);
      std::sort(keys.begin(), keys.end(), [](const std::string* a, const std::string* b) { return *a < *b; });
      for (std::size_t i = 1; i < keys.size(); ++i)
        if (*keys[i] == *keys[i - 1]) fail("unique keys", "duplicate key \"" + *keys[i] + "\"");
    } else if (c == '[') {
      v.k = json_value::kind::array;
      ++p_;
      if (peek() == ']') {
        ++p_;
        return v;
      }
      for (;;) {
        v.arr.push_back(value(depth + 1));
        const char d = peek();
        ++p_;
        if (d == ']') break;
        if (d != ',') fail("',' or ']'", std::string("'") + d + "'");
      }
    } else if (c == '"') {
      v.k = json_value::kind::string;
      v.s = str();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.k = json_value::kind::number;
      number(v);
    } else if (t_.substr(p_, 4) == "true") {
      v.k = json_value::kind::boolean, v.b = true, p_ += 4;
    } else if (t_.substr(p_, 5) == "false") {
      v.k = json_value::kind::boolean, p_ += 5;
    } else if (t_.substr(p_, 4) == "null") {
      p_ += 4;
    } else {
      fail("a value", std::string("'") + c + "'");
    }
    return v;
  }
  std::string str() {
    ++p_;  // opening quote
    std::string out;
    for (;;) {
      if (p_ >= t_.size()) fail("a closing '\"'", "end of header");
      const char c = t_[p_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("no control characters in strings", "a control character");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p_ >= t_.size()) fail("an escape", "end of header");
      const char e = t_[p_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (p_ + 4 > t_.size()) fail("4 hex digits after \\u", "end of header");
          unsigned cp = 0;
          for (int k = 0; k < 4; ++k) {
            const char h = t_[p_++];
            cp <<= 4;
            if (h >= '0' && h <= '9') cp |= static_cast<unsigned>(h - '0');
            else if (h >= 'a' && h <= 'f') cp |= static_cast<unsigned>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') cp |= static_cast<unsigned>(h - 'A' + 10);
            else fail("a hex digit", std::string("'") + h + "'");
          }
          // UTF-8 encode the BMP code point (surrogate pairs are kept as two 3-byte units: names only).
          if (cp < 0x80) {
            out += static_cast<char>(cp);
          } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default: fail("a valid escape", std::string("'\\") + e + "'");
      }
    }
  }
  void number(json_value& v) {
    const std::size_t start = p_;
    bool neg = false;
    if (t_[p_] == '-') neg = true, ++p_;
    if (p_ >= t_.size() || t_[p_] < '0' || t_[p_] > '9') fail("a digit", "a malformed number");
    std::uint64_t mag = 0;
    bool overflow = false;
    while (p_ < t_.size() && t_[p_] >= '0' && t_[p_] <= '9') {
      const unsigned d = static_cast<unsigned>(t_[p_++] - '0');
      if (mag > (UINT64_MAX - d) / 10) overflow = true;
      else mag = mag * 10 + d;
    }
    bool frac = false;
    if (p_ < t_.size() && (t_[p_] == '.' || t_[p_] == 'e' || t_[p_] == 'E')) {
      frac = true;
      ++p_;
      while (p_ < t_.size() && ((t_[p_] >= '0' && t_[p_] <= '9') || t_[p_] == '+' || t_[p_] == '-' ||
                                t_[p_] == 'e' || t_[p_] == 'E'))
        ++p_;
    }
    v.integral = !frac && !overflow && mag <= static_cast<std::uint64_t>(INT64_MAX);
    v.i = v.integral ? (neg ? -static_cast<std::int64_t>(mag) : static_cast<std::int64_t>(mag)) : 0;
    (void)start;
  }

  std::string_view t_;
  std::size_t p_ = 0;
};

}  // namespace detail

inline std::int64_t safetensors_entry::numel() const {
  const std::int64_t n = detail::checked_numel(shape);
  require(n >= 0, "specdec::examples::safetensors_entry::numel", "shape",
          "non-negative dimensions whose product fits in int64", detail::shape_string(shape));
  return n;
}

//! A parsed safetensors file held in memory. Parsing validates the whole header up front.
class safetensors_file {
 public:
  //! Largest header accepted (the reference implementation uses 100 MB).
  static constexpr std::uint64_t max_header_bytes = 100'000'000;

  //! Parses an in-memory file. Throws specdec::invalid_argument naming the defect.
  //! Complexity O(file size + T log T) for T tensors.
  static safetensors_file parse(std::vector<std::uint8_t> bytes) {
    using detail::st_fn;
    safetensors_file f;
    require(bytes.size() >= 8, st_fn, "file", "at least 8 bytes (the header length); file is truncated",
            bytes.size());
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[static_cast<std::size_t>(i)];
    require(n >= 2 && n <= max_header_bytes, st_fn, "header length",
            "a header length in [2, " + std::to_string(max_header_bytes) + "] bytes", n);
    require(n <= bytes.size() - 8, st_fn, "header length",
            "at most the " + std::to_string(bytes.size() - 8) + " bytes after the length prefix; file is truncated",
            n);
    const std::string_view text(reinterpret_cast<const char*>(bytes.data() + 8), static_cast<std::size_t>(n));
    const detail::json_value root = detail::json_parser(text).parse_document();
    require(root.k == detail::json_value::kind::object, st_fn, "header", "a JSON object", "another JSON value");
    const std::uint64_t data_size = bytes.size() - 8 - n;
    for (const auto& [name, v] : root.obj) {
      if (name == "__metadata__") {
        require(v.k == detail::json_value::kind::object, st_fn, "__metadata__", "an object of strings",
                "another JSON value");
        for (const auto& [mk, mv] : v.obj) {
          require(mv.k == detail::json_value::kind::string, st_fn, "__metadata__",
                  "string values only", "a non-string value for key \"" + mk + "\"");
          f.metadata_[mk] = mv.s;
        }
        continue;
      }
      const std::string where = "tensor \"" + name + "\"";
      require(v.k == detail::json_value::kind::object, st_fn, where, "an object", "another JSON value");
      const detail::json_value* dt = nullptr;
      const detail::json_value* sh = nullptr;
      const detail::json_value* off = nullptr;
      for (const auto& [k, x] : v.obj) {
        if (k == "dtype") dt = &x;
        else if (k == "shape") sh = &x;
        else if (k == "data_offsets") off = &x;
        else throw_invalid_argument(st_fn, where, "only keys dtype, shape, data_offsets", "key \"" + k + "\"");
      }
      require(dt && sh && off, st_fn, where, "keys dtype, shape and data_offsets", "a missing key");
      safetensors_entry e;
      e.name = name;
      require(dt->k == detail::json_value::kind::string, st_fn, where + " dtype", "a string", "another JSON value");
      require(detail::parse_safetensors_dtype(dt->s, e.type), st_fn, where + " dtype",
              "a known dtype (F64, F32, F16, BF16, I64, I32, I16, I8, U8, U16, U32, U64, BOOL)", dt->s);
      require(sh->k == detail::json_value::kind::array, st_fn, where + " shape", "an array", "another JSON value");
      for (const auto& d : sh->arr) {
        require(d.k == detail::json_value::kind::number && d.integral && d.i >= 0, st_fn, where + " shape",
                "non-negative integer dimensions", "a non-integer or negative dimension");
        e.shape.push_back(d.i);
      }
      const std::int64_t numel = detail::checked_numel(e.shape, size_of(e.type));
      require(numel >= 0, st_fn, where + " shape",
              "dimensions whose product (zeros left out) times the dtype size fits in int64",
              detail::shape_string(e.shape));
      require(off->k == detail::json_value::kind::array && off->arr.size() == 2, st_fn, where + " data_offsets",
              "an array [begin, end]", "something else");
      for (const auto& o : off->arr)
        require(o.k == detail::json_value::kind::number && o.integral && o.i >= 0, st_fn, where + " data_offsets",
                "non-negative integers", "a non-integer or negative offset");
      e.begin = static_cast<std::uint64_t>(off->arr[0].i);
      e.end = static_cast<std::uint64_t>(off->arr[1].i);
      require(e.begin <= e.end, st_fn, where + " data_offsets", "begin <= end",
              std::to_string(e.begin) + " > " + std::to_string(e.end));
      require(e.end <= data_size, st_fn, where + " data_offsets",
              "end within the " + std::to_string(data_size) + "-byte data buffer (out of range; truncated?)", e.end);
      const auto want = static_cast<std::uint64_t>(numel) * static_cast<std::uint64_t>(size_of(e.type));
      require(want == e.end - e.begin, st_fn, where + " data_offsets",
              "end - begin == shape product x dtype size = " + std::to_string(want) + " bytes", e.end - e.begin);
      f.entries_.push_back(std::move(e));
    }
    // No overlaps and no holes: the spec requires the buffer to be exactly tiled by the tensors.
    std::vector<const safetensors_entry*> order;
    for (const auto& e : f.entries_) order.push_back(&e);
    std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->begin < b->begin || (a->begin == b->begin && a->end < b->end); });
    std::uint64_t cursor = 0;
    for (const auto* e : order) {
      require(e->begin >= cursor || e->begin == e->end, st_fn, "tensor \"" + e->name + "\" data_offsets",
              "no overlap with the previous tensor, which ends at byte " + std::to_string(cursor), e->begin);
      require(e->begin <= cursor, st_fn, "tensor \"" + e->name + "\" data_offsets",
              "no hole in the data buffer: begin at byte " + std::to_string(cursor), e->begin);
      cursor = std::max(cursor, e->end);
    }
    require(cursor == data_size, st_fn, "data buffer",
            "exactly the bytes the tensors cover (" + std::to_string(cursor) + ")", data_size);
    f.data_offset_ = 8 + n;
    f.bytes_ = std::move(bytes);
    return f;
  }

  //! Reads and parses a file from disk.
  static safetensors_file load(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    require(static_cast<bool>(in), "specdec::examples::safetensors_file::load", "path", "a readable file", path);
    std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return parse(std::move(bytes));
  }

  [[nodiscard]] const std::vector<safetensors_entry>& entries() const noexcept { return entries_; }
  [[nodiscard]] const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  [[nodiscard]] bool contains(std::string_view name) const noexcept { return find(name) != nullptr; }

  //! The metadata entry `key` ("__metadata__" of the header); throws naming the key when absent.
  [[nodiscard]] const std::string& metadata_entry(const std::string& key) const {
    const auto it = metadata_.find(key);
    require(it != metadata_.end(), "specdec::examples::safetensors_file::metadata_entry", "metadata",
            "a \"" + key + "\" entry", "none");
    return it->second;
  }
  //! The metadata entry `key` as a finite number (the whole text must parse); throws naming the key.
  [[nodiscard]] double metadata_number(const std::string& key) const {
    const std::string& text = metadata_entry(key);
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    require(used == text.size() && std::isfinite(v), "specdec::examples::safetensors_file::metadata_number",
            "metadata " + key, "a number", text);
    return v;
  }
  //! The metadata entry `key` as an integer in [lo, hi] (parse_metadata_int); throws naming the key.
  [[nodiscard]] int metadata_int(const std::string& key, int lo, int hi) const {
    return parse_metadata_int(metadata_entry(key), key, lo, hi);
  }
  //! `text` (all of it) as a decimal integer in [lo, hi]; throws naming `what` otherwise. For metadata
  //! values and the parts of list-valued ones.
  [[nodiscard]] static int parse_metadata_int(const std::string& text, const std::string& what, int lo, int hi) {
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    require(used > 0 && used == text.size() && v >= lo && v <= hi, "specdec::examples::safetensors_file::metadata_int",
            "metadata " + what, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", text);
    return static_cast<int>(v);
  }

  //! The entry named `name`; throws naming the tensor when absent.
  [[nodiscard]] const safetensors_entry& entry(std::string_view name) const {
    const auto* e = find(name);
    require(e != nullptr, "specdec::examples::safetensors_file::entry", "name", "a tensor in the file",
            std::string(name));
    return *e;
  }

  //! Raw bytes of one tensor.
  [[nodiscard]] const std::uint8_t* raw(const safetensors_entry& e) const noexcept {
    return bytes_.data() + data_offset_ + e.begin;
  }

  //! The tensor converted to T (float or double). Accepts F64, F32, F16, BF16 storage; checks the shape
  //! when `expected_shape` is non-empty. O(numel).
  template <class T>
  [[nodiscard]] std::vector<T> read(std::string_view name, const std::vector<std::int64_t>& expected_shape = {}) const {
    constexpr std::string_view fn = "specdec::examples::safetensors_file::read";
    const auto& e = entry(name);
    if (!expected_shape.empty()) {
      require(e.shape == expected_shape, fn, std::string(name), "shape " + detail::shape_string(expected_shape),
              detail::shape_string(e.shape));
    }
    if (e.type != dtype::f64 && e.type != dtype::f32 && e.type != dtype::f16 && e.type != dtype::bf16)
      throw_invalid_argument(fn, std::string(name), "a floating-point dtype (F64, F32, F16, BF16)",
                             detail::safetensors_dtype_name(e.type));
    std::vector<T> out(static_cast<std::size_t>(e.numel()));
    const std::uint8_t* p = raw(e);
    for (std::size_t i = 0; i < out.size(); ++i) {
      switch (e.type) {
        case dtype::f64: { double x; std::memcpy(&x, p + 8 * i, 8); out[i] = static_cast<T>(x); break; }
        case dtype::f32: { float x; std::memcpy(&x, p + 4 * i, 4); out[i] = static_cast<T>(x); break; }
        case dtype::f16: { std::uint16_t b = static_cast<std::uint16_t>(p[2 * i] | (p[2 * i + 1] << 8));
          out[i] = static_cast<T>(static_cast<float>(half::from_bits(b))); break; }
        case dtype::bf16: { std::uint16_t b = static_cast<std::uint16_t>(p[2 * i] | (p[2 * i + 1] << 8));
          out[i] = static_cast<T>(specdec::detail::bf16_bits_to_float(b)); break; }
        default: break;  // refused above
      }
      // a weight that is NaN or infinite (or an F64 value past T's range) would turn every logit
      // downstream into NaN: refused here, naming the tensor and the element
      if (!std::isfinite(out[i])) [[unlikely]]
        throw_invalid_argument(fn, std::string(name), "finite values (in range of the element type read)",
                               "a non-finite value at element " + std::to_string(i));
    }
    return out;
  }

 private:
  const safetensors_entry* find(std::string_view name) const noexcept {
    for (const auto& e : entries_)
      if (e.name == name) return &e;
    return nullptr;
  }
  std::vector<safetensors_entry> entries_;
  std::map<std::string, std::string> metadata_;
  std::vector<std::uint8_t> bytes_;
  std::uint64_t data_offset_ = 0;
};

//! Builds a safetensors file in memory (tensors laid out back to back in insertion order). Used by tests
//! and to save models. Values are stored as F32, F64, F16 or BF16.
class safetensors_writer {
 public:
  //! Adds a tensor stored as `type`, converting from `values` (numel must match the shape).
  template <class T>
  void add(const std::string& name, const std::vector<std::int64_t>& shape, const std::vector<T>& values,
           dtype type = dtype::f32) {
    constexpr std::string_view fn = "specdec::examples::safetensors_writer::add";
    const std::int64_t n = detail::checked_numel(shape, size_of(type));
    require(n >= 0, fn, "shape", "non-negative dimensions whose product fits in int64", detail::shape_string(shape));
    require_equal(fn, "values.size()", n, static_cast<std::int64_t>(values.size()));
    require(type == dtype::f32 || type == dtype::f64 || type == dtype::f16 || type == dtype::bf16, fn, "type",
            "F32, F64, F16 or BF16", name_of(type));
    std::vector<std::uint8_t> b(static_cast<std::size_t>(n) * static_cast<std::size_t>(size_of(type)));
    for (std::size_t i = 0; i < values.size(); ++i) {
      const double x = static_cast<double>(values[i]);
      if (type == dtype::f64) std::memcpy(&b[8 * i], &x, 8);
      else if (type == dtype::f32) { const float y = static_cast<float>(x); std::memcpy(&b[4 * i], &y, 4); }
      else {
        const std::uint16_t bits = type == dtype::f16 ? half(static_cast<float>(x)).bits
                                                      : specdec::detail::float_to_bf16_bits(static_cast<float>(x));
        b[2 * i] = static_cast<std::uint8_t>(bits & 0xFF);
        b[2 * i + 1] = static_cast<std::uint8_t>(bits >> 8);
      }
    }
    add_raw(name, shape, type, std::move(b));
  }

  //! Adds a tensor from raw little-endian bytes (no checks: tests use it to build malformed files).
  void add_raw(const std::string& name, const std::vector<std::int64_t>& shape, dtype type,
               std::vector<std::uint8_t> bytes) {
    tensors_.push_back({name, type, shape, std::move(bytes)});
  }

  void add_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

  //! The JSON header this writer produces.
  [[nodiscard]] std::string header_json() const {
    std::ostringstream os;
    os << '{';
    bool first = true;
    if (!metadata_.empty()) {
      os << "\"__metadata__\":{";
      bool f2 = true;
      for (const auto& [k, v] : metadata_) {
        os << (f2 ? "" : ",") << quote(k) << ':' << quote(v);
        f2 = false;
      }
      os << '}';
      first = false;
    }
    std::uint64_t off = 0;
    for (const auto& t : tensors_) {
      os << (first ? "" : ",") << quote(t.name) << ":{\"dtype\":\"" << detail::safetensors_dtype_name(t.type)
         << "\",\"shape\":[";
      for (std::size_t i = 0; i < t.shape.size(); ++i) os << (i ? "," : "") << t.shape[i];
      os << "],\"data_offsets\":[" << off << ',' << off + t.bytes.size() << "]}";
      off += t.bytes.size();
      first = false;
    }
    os << '}';
    return os.str();
  }

  //! Assembles a file around a given header (tests pass edited headers).
  [[nodiscard]] std::vector<std::uint8_t> bytes_with_header(std::string header) const {
    while (header.size() % 8 != 0) header += ' ';  // the format pads the header to 8-byte alignment
    // Sized once and filled by index: growing the vector with insert() trips a GCC 12 -O3 false
    // -Warray-bounds in the inlined reallocation.
    std::size_t total = 8 + header.size();
    for (const auto& t : tensors_) total += t.bytes.size();
    std::vector<std::uint8_t> out(total);
    const std::uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) out[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(n >> (8 * i));
    std::size_t at = 8;
    for (char ch : header) out[at++] = static_cast<std::uint8_t>(ch);
    for (const auto& t : tensors_)
      for (std::uint8_t b : t.bytes) out[at++] = b;
    return out;
  }

  [[nodiscard]] std::vector<std::uint8_t> bytes() const { return bytes_with_header(header_json()); }

  void save(const std::string& path) const {
    const auto b = bytes();
    std::ofstream out(path, std::ios::binary);
    require(static_cast<bool>(out), "specdec::examples::safetensors_writer::save", "path", "a writable file", path);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }

 private:
  static std::string name_of(dtype t) { return std::string(detail::safetensors_dtype_name(t)); }
  static std::string quote(const std::string& s) {
    std::string o = "\"";
    for (char c : s) {
      if (static_cast<unsigned char>(c) < 0x20) {  // JSON strings may not hold raw control characters
        char esc[8];
        std::snprintf(esc, sizeof esc, "\\u%04x", static_cast<unsigned>(c));
        o += esc;
        continue;
      }
      if (c == '"' || c == '\\') o += '\\';
      o += c;
    }
    return o + '"';
  }
  struct tensor {
    std::string name;
    dtype type;
    std::vector<std::int64_t> shape;
    std::vector<std::uint8_t> bytes;
  };
  std::vector<tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace specdec::examples
