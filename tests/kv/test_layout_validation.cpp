// Each kind of bad layout is rejected by validate_kv_layout with a message naming the function and
// the argument and saying what was expected.
#include <catch2/catch.hpp>

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
  bad.max_tokens = -1;
  CHECK_THROWS_WITH(validate(bad), Contains("max_tokens >= 0"));
  bad = good;
  bad.v = nullptr;
  CHECK_THROWS_WITH(validate(bad), Contains("specdec::my_op") && Contains("non-null k and v buffers"));
  bad = good;
  bad.lengths = nullptr;
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
}

TEST_CASE("paged_kv validation") {
  const int P = 4, H = 2, D = 8, pages = 4;
  std::vector<float> k(pages * P * H * D), v(k.size());
  std::vector<std::int32_t> indptr{0, 2, 3}, indices{3, 0, 1}, len{5, 4};
  using L = specdec::paged_kv<float>;
  const L good{k.data(), v.data(), indptr.data(), indices.data(), len.data(), 2, pages, P, H, D};
  CHECK_NOTHROW(validate(good));

  auto bad = good;
  bad.page_size = 0;
  CHECK_THROWS_WITH(validate(bad), Equals("specdec::my_op: argument 'cache': expected page_size > 0, got 0"));
  bad = good;
  bad.num_pages = -1;
  CHECK_THROWS_WITH(validate(bad), Contains("num_pages >= 0"));
  bad = good;
  bad.k_pages = nullptr;
  CHECK_THROWS_WITH(validate(bad), Contains("non-null k_pages and v_pages"));
  bad = good;
  bad.page_indptr = nullptr;
  CHECK_THROWS_WITH(validate(bad), Contains("non-null page_indptr"));
  bad = good;
  bad.page_indices = nullptr;
  CHECK_THROWS_WITH(validate(bad), Contains("non-null page_indices"));
  bad = good;
  bad.lengths = nullptr;
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
