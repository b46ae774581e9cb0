// Each kind of bad layout is rejected by validate_kv_layout with a message naming the function and
// the argument and saying what was expected.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/kv/paged_kv.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::Equals;

namespace {
template <class L>
void validate(const L& l) {
  specdec::validate_kv_layout(l, "specdec::my_op", "cache");
}
}  // namespace

TEST_CASE("contiguous_kv validation") {
  std::vector<float> k(2 * 8 * 2 * 4), v(k.size());
  std::vector<std::int32_t> len{3, 8};
  using C = specdec::contiguous_kv<float>;
  const C good{k.data(), v.data(), len.data(), 2, 8, 2, 4};
  CHECK_NOTHROW(validate(good));
  CHECK_NOTHROW(validate(specdec::contiguous_kv<float, specdec::kv_order::hnd>{k.data(), v.data(), len.data(), 2, 8, 2, 4}));

  auto bad = good;
  bad.kv_heads = 0;
  CHECK_THROWS_WITH(validate(bad), Equals("specdec::my_op: argument 'cache': expected num_kv_heads() > 0, got 0"));
  bad = good;
  bad.dim = -1;
  CHECK_THROWS_WITH(validate(bad), Contains("'cache'") && Contains("head_dim() > 0") && Contains("got -1"));
  bad = good;
  bad.requests = -2;
  CHECK_THROWS_WITH(validate(bad), Contains("num_requests() >= 0") && Contains("got -2"));
  bad = good;
  bad.mapping.max_tokens = -1;
  CHECK_THROWS_WITH(validate(bad), Contains("max_tokens >= 0"));
  bad = good;
  bad.v = nullptr;
  CHECK_THROWS_WITH(validate(bad), Contains("specdec::my_op") && Contains("non-null k and v buffers"));
  bad = good;
  bad.mapping.lengths = nullptr;
  CHECK_THROWS_WITH(validate(bad), Contains("non-null lengths"));
  len[1] = 9;
  CHECK_THROWS_WITH(validate(good), Equals("specdec::my_op: argument 'cache': expected every lengths[r] in [0, "
                                           "max_tokens = 8], got 9"));
  len[1] = -1;
  CHECK_THROWS_AS(validate(good), specdec::invalid_argument);
  // Device-resident lengths are not read on the host.
  auto dev = good;
  dev.where = specdec::memory_space::device;
  CHECK_NOTHROW(validate(dev));
  // An empty batch needs no buffers.
  CHECK_NOTHROW(validate(C{nullptr, nullptr, nullptr, 0, 8, 2, 4}));
  // K or V at an odd byte offset into a buffer: every row would be a misaligned float (the kernels
  // load them as floats); refused, device-resident too (the base address is the host's to see)
  len[1] = 8;
  std::vector<float> wide(k.size() + 1);
  float* const odd = reinterpret_cast<float*>(reinterpret_cast<std::byte*>(wide.data()) + 2);
  bad = good;
  bad.k = odd;
  CHECK_THROWS_WITH(validate(bad), Equals("specdec::my_op: argument 'cache': expected k and v buffers aligned to 4 "
                                          "bytes, got a misaligned k"));
  bad.where = specdec::memory_space::device;
  CHECK_THROWS_WITH(validate(bad), Contains("aligned to 4 bytes"));
  bad = good;
  bad.v = odd;
  CHECK_THROWS_WITH(validate(bad), Contains("got a misaligned v"));
}

TEST_CASE("paged_kv validation") {
  const int P = 4, H = 2, D = 8, pages = 4;
  std::vector<float> k(pages * P * H * D), v(k.size());
  std::vector<std::int32_t> indptr{0, 2, 3}, indices{3, 0, 1}, len{5, 4};
  using L = specdec::paged_kv<float>;
  const L good{k.data(), v.data(), indptr.data(), indices.data(), len.data(), 2, pages, P, H, D};
  CHECK_NOTHROW(validate(good));

  auto bad = good;
  bad.mapping.page_size = 0;
  CHECK_THROWS_WITH(validate(bad), Equals("specdec::my_op: argument 'cache': expected page_size > 0, got 0"));
  bad = good;
  bad.mapping.num_pages = -1;
  CHECK_THROWS_WITH(validate(bad), Contains("num_pages >= 0"));
  bad = good;
  bad.k = nullptr;  // the pools are the cache's k and v
  CHECK_THROWS_WITH(validate(bad), Contains("non-null k and v buffers"));
  bad = good;
  bad.mapping.page_indptr = nullptr;
  CHECK_THROWS_WITH(validate(bad), Contains("non-null page_indptr"));
  bad = good;
  bad.mapping.page_indices = nullptr;
  CHECK_THROWS_WITH(validate(bad), Contains("non-null page_indices"));
  bad = good;
  bad.mapping.lengths = nullptr;
  CHECK_THROWS_WITH(validate(bad), Contains("non-null lengths"));

  indptr[0] = 1;
  CHECK_THROWS_WITH(validate(good), Contains("page_indptr[0] == 0") && Contains("got 1"));
  indptr = {0, 2, 1};
  CHECK_THROWS_WITH(validate(good), Contains("non-decreasing page_indptr (at request 1)"));
  indptr = {0, 2, 3};
  len = {9, 4};  // 2 pages of 4 hold at most 8 tokens
  CHECK_THROWS_WITH(validate(good), Equals("specdec::my_op: argument 'cache': expected lengths[0] in [0, 8] "
                                           "(pages x page_size), got 9"));
  len = {5, -1};
  CHECK_THROWS_WITH(validate(good), Contains("lengths[1]") && Contains("got -1"));
  len = {5, 4};
  indices = {3, 4, 1};
  CHECK_THROWS_WITH(validate(good), Contains("every page index in [0, num_pages = 4)") && Contains("got 4"));
  indices = {3, -1, 1};
  CHECK_THROWS_WITH(validate(good), Contains("got -1"));
  indices = {3, 0, 1};
  CHECK_NOTHROW(validate(good));
  auto dev = good;
  dev.where = specdec::memory_space::device;
  indices = {7, 7, 7};  // not inspected: device memory
  CHECK_NOTHROW(validate(dev));
}

namespace {
// A user's own layout without a validate_layout overload: the generic checks apply.
struct user_layout {
  using value_type = float;
  float* base;
  int n;
  std::int32_t len;
  int num_requests() const { return n; }
  int num_kv_heads() const { return 1; }
  int head_dim() const { return 4; }
  int length(int) const { return len; }
  float* k_row(int, int t, int) const { return base + 4 * t; }
  float* v_row(int, int t, int) const { return base + 4 * t; }
  specdec::memory_space space() const { return specdec::memory_space::host; }
};
static_assert(specdec::kv_layout<user_layout> && specdec::check_kv_layout<user_layout>());
static_assert(!specdec::writable_kv_layout<user_layout>);  // no capacity()
}  // namespace

TEST_CASE("validate_kv_layout on a user layout checks lengths generically") {
  float buf[16] = {};
  CHECK_NOTHROW(validate(user_layout{buf, 2, 3}));
  CHECK_THROWS_WITH(validate(user_layout{buf, 2, -3}),
                    Equals("specdec::my_op: argument 'cache': expected length(request) >= 0 for every request, got -3"));
  CHECK_THROWS_WITH(validate(user_layout{buf, -1, 0}), Contains("num_requests() >= 0"));
}

namespace {
// A user's layout with a capacity and per-request base pointers (so a single request's rows can be
// null): request r's rows are base[r] + (t * heads + h) * 4.
struct user_capacity_layout {
  using value_type = float;
  float* const* k_base;
  float* const* v_base;
  const std::int32_t* lens;
  int n, cap, heads = 2;
  specdec::memory_space where = specdec::memory_space::host;
  int* length_calls = nullptr;  // counts length() calls (device memory must not be read)
  int num_requests() const { return n; }
  int num_kv_heads() const { return heads; }
  int head_dim() const { return 4; }
  int length(int r) const {
    if (length_calls) ++*length_calls;
    return lens[r];
  }
  int capacity(int) const { return cap; }
  float* k_row(int r, int t, int h) const { return k_base[r] + (t * heads + h) * 4; }
  float* v_row(int r, int t, int h) const { return v_base[r] + (t * heads + h) * 4; }
  specdec::memory_space space() const { return where; }
};
static_assert(specdec::writable_kv_layout<user_capacity_layout>);

// The same with the user's own validate_layout hook (found by ADL): it adds a check, and the generic
// checks still run.
struct hooked_layout : user_capacity_layout {
  int max_heads = 8;
};
void validate_layout(const hooked_layout& l, std::string_view function, std::string_view argument) {
  specdec::require(l.heads <= l.max_heads, function, argument, "at most max_heads kv heads", l.heads);
}
}  // namespace

TEST_CASE("validate_kv_layout checks every user layout's lengths against its capacity") {
  std::vector<float> k(2 * 6 * 2 * 4), v(k.size());
  float* kb[2] = {k.data(), k.data() + 6 * 2 * 4};
  float* vb[2] = {v.data(), v.data() + 6 * 2 * 4};
  std::vector<std::int32_t> len{6, 2};
  const user_capacity_layout good{kb, vb, len.data(), 2, 6};
  CHECK_NOTHROW(validate(good));
  len[0] = 7;  // one past request 0's slots: its last rows would be request 1's first
  CHECK_THROWS_WITH(validate(good), Equals("specdec::my_op: argument 'cache': expected length(0) <= capacity(0) = 6, "
                                           "got 7"));
  len[0] = -1;
  CHECK_THROWS_WITH(validate(good), Contains("length(request) >= 0"));
  // a layout with its own hook gets the generic checks as well as the hook's
  len = {6, 9};
  const hooked_layout hooked{good, 8};
  CHECK_THROWS_WITH(validate(hooked), Contains("length(1) <= capacity(1) = 6") && Contains("got 9"));
  len = {6, 2};
  CHECK_NOTHROW(validate(hooked));
  auto many_heads = hooked;
  many_heads.heads = 9;
  CHECK_THROWS_WITH(validate(many_heads), Contains("at most max_heads kv heads"));
}

TEST_CASE("validate_kv_layout rejects null rows of a non-empty request in every user layout") {
  std::vector<float> k(2 * 6 * 2 * 4), v(k.size());
  float* kb[2] = {k.data(), k.data() + 6 * 2 * 4};
  float* vb[2] = {v.data(), v.data() + 6 * 2 * 4};
  std::vector<std::int32_t> len{3, 2};
  const user_capacity_layout good{kb, vb, len.data(), 2, 6};
  CHECK_NOTHROW(validate(good));
  // the usual mistake: a null K base pointer (the first row of the first request is null)
  float* null_k[2] = {nullptr, kb[1]};
  auto bad = good;
  bad.k_base = null_k;
  CHECK_THROWS_WITH(validate(bad), Equals("specdec::my_op: argument 'cache': expected a non-null k_row(0, 0, 0) "
                                          "(request 0 has length 3), aligned to 4 bytes, got nullptr"));
  // null V rows of a later request
  float* null_v[2] = {vb[0], nullptr};
  bad = good;
  bad.v_base = null_v;
  CHECK_THROWS_WITH(validate(bad), Contains("non-null v_row(1, 0, 0)") && Contains("request 1 has length 2"));
  // an empty request may have no rows at all
  len[1] = 0;
  CHECK_NOTHROW(validate(bad));
  // the hooked layout gets the row checks too
  len[1] = 2;
  CHECK_THROWS_WITH(validate(hooked_layout{bad, 8}), Contains("non-null v_row(1, 0, 0)"));
  // a row at an odd byte offset (a user's table built from byte offsets): misaligned float loads in
  // the kernels before; refused at its address
  std::vector<float> wide(k.size() + 1);
  float* odd_k[2] = {kb[0], reinterpret_cast<float*>(reinterpret_cast<std::byte*>(wide.data()) + 1)};
  bad = good;
  bad.k_base = odd_k;
  CHECK_THROWS_WITH(validate(bad), Contains("'cache'") && Contains("a non-null k_row(1, 0, 0) (request 1 has length 2), "
                                                                   "aligned to 4 bytes") &&
                                       Contains("got address 0x"));
}

TEST_CASE("validate_kv_layout never reads a device-resident user layout") {
  int calls = 0;
  user_capacity_layout dev{nullptr, nullptr, nullptr, 3, 6};
  dev.where = specdec::memory_space::device;
  dev.length_calls = &calls;
  CHECK_NOTHROW(validate(dev));  // lengths and base pointers are device memory here: never touched
  CHECK(calls == 0);
  dev.heads = 0;  // geometry is still checked
  CHECK_THROWS_WITH(validate(dev), Contains("num_kv_heads() > 0"));
}

TEST_CASE("paged_kv rejects a request whose capacity does not fit an int") {
  // 2048 pages of 2^20 tokens is 2^31 tokens: capacity() would overflow int. Nothing is dereferenced
  // past the index arrays, so a one-element pool stands in for the pages.
  constexpr int page = 1 << 20;
  float pool[1] = {};
  std::vector<std::int32_t> indptr{0, 2048}, indices(4096, 0), len{0};
  specdec::paged_kv<float> l{pool, pool, indptr.data(), indices.data(), len.data(), 1, 4096, page, 1, 4};
  CHECK_THROWS_WITH(validate(l), Contains("pages x page_size <= 2^31 - 1 tokens per request") &&
                                     Contains("request 0: 2048 pages of 1048576") && Contains("got 2147483648"));
  indptr[1] = 4096;  // the 4096 pages x 2^20
  CHECK_THROWS_WITH(validate(l), Contains("got 4294967296"));
  indptr[1] = 2047;  // 2^31 - 2^20 tokens: fits
  CHECK_NOTHROW(validate(l));
}

TEST_CASE("paged_kv's page_indptr goes through the shared indptr check") {
  const int P = 4, H = 1, D = 4, pages = 4;
  std::vector<float> k(pages * P * H * D), v(k.size());
  std::vector<std::int32_t> indptr{-2, 0, 1}, indices{3, 0, 1}, len{0, 1};
  const specdec::paged_kv<float> l{k.data(), v.data(), indptr.data(), indices.data(), len.data(), 2, pages, P, H, D};
  CHECK_THROWS_WITH(validate(l), Contains("page_indptr[0] == 0") && Contains("got -2"));
  indptr = {0, 3, 1};
  CHECK_THROWS_WITH(validate(l), Equals("specdec::my_op: argument 'cache': expected non-decreasing page_indptr (at "
                                        "request 1), page_indptr[1] = 3 followed by, got 1"));
}
