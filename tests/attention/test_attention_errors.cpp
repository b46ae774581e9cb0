// Every kind of bad input to the attention entry points throws specdec::invalid_argument whose
// message names the function and the offending argument. (A wrong element type does not compile:
// tests/compile_fail/attention_element_types.cpp.)
#include "attention_fixture.hpp"

#include <cstring>

#include "specdec/attention/cross_attention.hpp"
#include "specdec/attention/decode_attention.hpp"
#include "specdec/attention/hybrid_tree_attention.hpp"
#include "specdec/attention/lse_merge.hpp"
#include "specdec/attention/tree_attention.hpp"
#include "specdec/kv/ring_kv.hpp"
#include "specdec/position/rope.hpp"
#include "common/growing_layout.hpp"

using namespace attn_test;
namespace sd = specdec;
using Catch::Contains;

#define REQUIRE_BAD(call, arg)                               \
  do {                                                       \
    REQUIRE_THROWS_AS(call, sd::invalid_argument);           \
    REQUIRE_THROWS_WITH(call, Contains(arg));                \
  } while (0)

namespace {
struct fixture {
  batch<float> b{1, 8, 2, 64, {10, 5}, {3, 4}};
  sd::paged_kv<float> cache = b.paged();
  template <class Q, class L, class K, class V, class I, class M, class O, class LS>
  void hybrid(const Q& q, const L& l, const K& k, const V& v, const I& i, const M& m, const O& o, const LS& ls,
              sd::attention_options opt = {}, sd::host pol = {}) {
    sd::hybrid_tree_attention(pol, q, l, k, v, i, m, o, ls, opt);
  }
};
}  // namespace

TEST_CASE_METHOD(fixture, "hybrid_tree_attention rejects bad shapes and heads") {
  auto q = b.q_view();
  auto k = b.k_view();
  auto v = b.v_view();
  auto ip = b.indptr_view();
  auto m = b.mask_view();
  auto o = b.out_view();
  auto l = b.lse_view();
  REQUIRE_NOTHROW(hybrid(q, cache, k, v, ip, m, o, l));
  // Hq not a multiple of Hkv (7 heads over 2 kv heads).
  REQUIRE_BAD(hybrid(sd::make_view<3>(b.q.data(), {7, 7, 64}), cache, k, v, ip, m, o, l), "'q'");
  // unsupported head_dim: 96 (cache agrees, kernel does not exist)
  std::vector<float> q96(7 * 8 * 96);
  REQUIRE_BAD(hybrid(sd::make_view<3>(q96.data(), {7, 8, 96}), cache, k, v, ip, m, o, l), "head_dim");
  // cache head_dim differs from q's
  auto c32 = cache;
  c32.dim = 128;
  REQUIRE_BAD(hybrid(q, c32, k, v, ip, m, o, l), "'cache'");
  // spec_k with the wrong number of kv heads / spec_v with the wrong head_dim
  REQUIRE_BAD(hybrid(q, cache, sd::make_view<3>(b.spec_k.data(), {7, 1, 64}), v, ip, m, o, l), "'spec_k'");
  REQUIRE_BAD(hybrid(q, cache, k, sd::make_view<3>(b.spec_v.data(), {7, 2, 32}), ip, m, o, l), "'spec_v'");
  // out / lse shapes
  REQUIRE_BAD(hybrid(q, cache, k, v, ip, m, sd::make_view<3>(b.out.data(), {7, 4, 64}), l), "'out'");
  REQUIRE_BAD(hybrid(q, cache, k, v, ip, m, o, sd::make_view<2>(b.lse.data(), {6, 8})), "'lse'");
}

TEST_CASE_METHOD(fixture, "hybrid_tree_attention rejects inconsistent q_indptr and layouts") {
  auto q = b.q_view();
  auto k = b.k_view();
  auto v = b.v_view();
  auto m = b.mask_view();
  auto o = b.out_view();
  auto l = b.lse_view();
  std::vector<std::int32_t> ip3{0, 3, 7, 7};  // 3 requests, layout has 2
  REQUIRE_BAD(hybrid(q, cache, k, v, sd::make_view<1>(ip3.data(), {4}), m, o, l), "'q_indptr'");
  std::vector<std::int32_t> bad_first{1, 3, 7};
  REQUIRE_BAD(hybrid(q, cache, k, v, sd::make_view<1>(bad_first.data(), {3}), m, o, l), "q_indptr[0] == 0");
  std::vector<std::int32_t> decreasing{0, 5, 4};
  REQUIRE_BAD(hybrid(q, cache, k, v, sd::make_view<1>(decreasing.data(), {3}), m, o, l), "non-decreasing");
  std::vector<std::int32_t> short_last{0, 3, 6};
  REQUIRE_BAD(hybrid(q, cache, k, v, sd::make_view<1>(short_last.data(), {3}), m, o, l), "last value");
  // a cache length beyond the layout's capacity
  b.lens[1] = 10000;
  REQUIRE_BAD(hybrid(q, cache, k, v, b.indptr_view(), m, o, l), "'cache'");
  b.lens[1] = 5;
  // negative split size, chunk count out of range, non-finite scale, negative thread count
  REQUIRE_BAD(hybrid(q, cache, k, v, b.indptr_view(), m, o, l, {.kv_split_size = -1}), "options.kv_split_size");
  REQUIRE_BAD(hybrid(q, cache, k, v, b.indptr_view(), m, o, l, {.kv_chunks = -1}), "options.kv_chunks");
  REQUIRE_BAD(hybrid(q, cache, k, v, b.indptr_view(), m, o, l, {.kv_chunks = 1025}), "options.kv_chunks");
  REQUIRE_BAD(hybrid(q, cache, k, v, b.indptr_view(), m, o, l, {.scale = std::numeric_limits<float>::quiet_NaN()}),
              "options.scale");
  REQUIRE_BAD(hybrid(q, cache, k, v, b.indptr_view(), m, o, l, {}, sd::host{.num_threads = -1}), "num_threads");
}

TEST_CASE_METHOD(fixture, "hybrid_tree_attention rejects malformed masks") {
  auto args = [&](std::vector<sd::mask_word>& mk) {
    return hybrid(b.q_view(), cache, b.k_view(), b.v_view(), b.indptr_view(),
                  sd::make_view<1>(mk.data(), {static_cast<std::int64_t>(mk.size())}), b.out_view(), b.lse_view());
  };
  // request 0: 3 rows, request 1: 4 rows, one word each: words 0..2 then 3..6
  auto no_diag = b.mask;
  no_diag[4] &= ~sd::mask_word{2};  // request 1 row 1 loses its diagonal bit
  REQUIRE_BAD(args(no_diag), "diagonal");
  REQUIRE_THROWS_WITH(args(no_diag), Contains("request 1, row 1"));
  auto upper = b.mask;
  upper[1] |= sd::mask_word{1} << 2;  // request 0 row 1 sees token 2: not topological
  REQUIRE_BAD(args(upper), "no bit j > i");
  auto beyond = b.mask;
  beyond[6] |= sd::mask_word{1} << 40;  // a bit past the tree's 4 tokens
  REQUIRE_BAD(args(beyond), "'mask'");
  auto short_mask = b.mask;
  short_mask.pop_back();
  REQUIRE_BAD(args(short_mask), "'mask'");
}

TEST_CASE_METHOD(fixture, "hybrid_tree_attention rejects strided rows and device memory") {
  auto q = b.q_view();
  auto k = b.k_view();
  auto v = b.v_view();
  auto ip = b.indptr_view();
  auto m = b.mask_view();
  auto o = b.out_view();
  auto l = b.lse_view();
  std::vector<float> wide(b.q.size() * 2);
  const std::int64_t ext[3] = {7, 8, 64}, str[3] = {8 * 128, 128, 2};
  REQUIRE_BAD(hybrid(sd::strided_view<float, 3>(wide.data(), ext, str), cache, k, v, ip, m, o, l), "unit stride");
  REQUIRE_BAD(hybrid(q, cache, k, v, ip, m, sd::strided_view<float, 3>(wide.data(), ext, str), l), "'out'");
  REQUIRE_BAD(hybrid(sd::make_view<3>(b.q.data(), {7, 8, 64}, sd::memory_space::device), cache, k, v, ip, m, o, l),
              "host-accessible");
  auto dev = cache;
  dev.where = sd::memory_space::device;
  REQUIRE_BAD(hybrid(q, dev, k, v, ip, m, o, l), "'cache'");
  REQUIRE_BAD(hybrid(q, cache, sd::make_view<3>(b.spec_k.data(), {7, 2, 64}, sd::memory_space::device), v, ip, m, o, l),
              "'spec_k'");
  sd::attention_workspace dws(nullptr, 1 << 20, sd::memory_space::device);
  REQUIRE_BAD(hybrid(q, cache, k, v, ip, m, o, l, {.workspace = &dws}), "options.workspace");
}

TEST_CASE_METHOD(fixture, "decode_attention, tree_attention and lse_merge validate too") {
  REQUIRE_BAD(sd::decode_attention(sd::host{}, sd::make_view<3>(b.q.data(), {7, 8, 64}), cache,
                                   sd::make_view<1>(b.q_indptr.data(), {2}), b.out_view(), b.lse_view()),
              "specdec::decode_attention");
  REQUIRE_BAD(sd::tree_attention(sd::host{}, b.q_view(), sd::make_view<3>(b.spec_k.data(), {7, 3, 64}), b.v_view(),
                                 b.indptr_view(), b.mask_view(), b.out_view(), b.lse_view()),
              "specdec::tree_attention");
  auto no_diag = b.mask;
  no_diag[0] = 0;
  REQUIRE_BAD(sd::tree_attention(sd::host{}, b.q_view(), b.k_view(), b.v_view(), b.indptr_view(),
                                 sd::make_view<1>(no_diag.data(), {7}), b.out_view(), b.lse_view()),
              "diagonal");
  std::vector<float> o(2 * 4 * 64), l2(2 * 4);
  std::vector<float> o3(2 * 4 * 128);
  auto v3 = sd::make_view<3>(o.data(), {2, 4, 64});
  auto v2 = sd::make_view<2>(l2.data(), {2, 4});
  REQUIRE_BAD(sd::lse_merge(sd::host{}, v3, v2, sd::make_view<3>(o3.data(), {2, 4, 128}), v2, v3, v2), "'o_b'");
  REQUIRE_BAD(sd::lse_merge(sd::host{}, v3, v2, v3, sd::make_view<2>(l2.data(), {4, 2}), v3, v2), "'lse_b'");
  std::vector<float> o48(2 * 4 * 48);
  auto v48 = sd::make_view<3>(o48.data(), {2, 4, 48});
  REQUIRE_BAD(sd::lse_merge(sd::host{}, v48, v2, v48, v2, v48, v2), "head_dim");
  REQUIRE_BAD(sd::lse_merge(sd::host{}, sd::make_view<4>(o.data(), {0, 2, 4, 64}), sd::make_view<3>(l2.data(), {0, 2, 4}),
                            v3, v2),
              "'o_parts'");
  // the split options' ranges, as the cached calls check them (the tree-only plan has no split to use
  // them in; a bad value was accepted there and refused by hybrid_tree_attention)
  for (const sd::attention_options bad : {sd::attention_options{.kv_split_size = -1}, sd::attention_options{.kv_chunks = -3},
                                          sd::attention_options{.kv_chunks = 5000}}) {
    const char* what = bad.kv_split_size < 0 ? "options.kv_split_size" : "options.kv_chunks";
    const auto before = b.out;
    REQUIRE_BAD(sd::tree_attention(sd::host{}, b.q_view(), b.k_view(), b.v_view(), b.indptr_view(), b.mask_view(),
                                   b.out_view(), b.lse_view(), bad),
                what);
    CHECK(b.out == before);
    REQUIRE_BAD((void)sd::tree_attention_workspace_bytes(sd::host{}, b.q_view(), 4, b.indptr_view(), bad), what);
  }
  // extents whose product passes int64 (stride-0 inputs may repeat one row): refused naming them, not
  // multiplied first (signed overflow, then a message with the wrapped product)
  const std::int64_t huge = std::int64_t{1} << 40;
  const sd::strided_view<const float, 3> o_huge(o.data(), {huge, huge, 64}, {0, 0, 1});
  const sd::strided_view<const float, 2> l_huge(l2.data(), {huge, huge}, {0, 0});
  REQUIRE_BAD(sd::lse_merge(sd::host{}, o_huge, l_huge, o_huge, l_huge, v3, v2),
              std::to_string(huge) + " x " + std::to_string(huge));
  const sd::strided_view<const float, 4> parts_huge(o.data(), {1, huge, huge, 64}, {0, 0, 0, 1});
  const sd::strided_view<const float, 3> lparts_huge(l2.data(), {1, huge, huge}, {0, 0, 0});
  REQUIRE_BAD(sd::lse_merge(sd::host{}, parts_huge, lparts_huge, v3, v2), "tokens * heads below 2^31");
}

namespace {
// A user's own NHD layout (no validate_layout hook): request r owns `cap` token slots.
struct user_nhd {
  using value_type = float;
  float* k;
  float* v;
  const std::int32_t* lens;
  int requests, cap, heads, dim;
  int num_requests() const { return requests; }
  int num_kv_heads() const { return heads; }
  int head_dim() const { return dim; }
  int length(int r) const { return lens[r]; }
  int capacity(int) const { return cap; }
  float* k_row(int r, int t, int h) const { return k + ((static_cast<std::int64_t>(r) * cap + t) * heads + h) * dim; }
  float* v_row(int r, int t, int h) const { return v + ((static_cast<std::int64_t>(r) * cap + t) * heads + h) * dim; }
  sd::memory_space space() const { return sd::memory_space::host; }
};
}  // namespace

TEST_CASE_METHOD(fixture, "every attention entry point runs the generic checks on a user's layout") {
  std::vector<std::int32_t> lens = b.lens;
  const user_nhd good{b.k_nhd.data(), b.v_nhd.data(), lens.data(), 2, b.capacity, 2, 64};
  auto q = b.q_view();
  auto ip = b.indptr_view();
  auto o = b.out_view();
  auto l = b.lse_view();
  auto all = [&](const user_nhd& c, const char* what) {
    REQUIRE_BAD(sd::decode_attention(sd::host{}, q, c, ip, o, l), what);
    REQUIRE_BAD((void)sd::decode_attention_workspace_bytes(sd::host{}, q, c, ip), what);
    REQUIRE_BAD(sd::hybrid_tree_attention(sd::host{}, q, c, b.k_view(), b.v_view(), ip, b.mask_view(), o, l), what);
    REQUIRE_BAD((void)sd::hybrid_tree_attention_workspace_bytes(sd::host{}, q, c, ip), what);
    REQUIRE_BAD(sd::cross_attention(sd::host{}, q, c, ip, o, l), what);
    REQUIRE_BAD(sd::cross_attention(sd::host{}, q, c, std::span<const std::int32_t>(b.lens), ip, o, l), what);
  };
  REQUIRE_NOTHROW(sd::decode_attention(sd::host{}, q, good, ip, o, l));
  REQUIRE_NOTHROW(sd::hybrid_tree_attention(sd::host{}, q, good, b.k_view(), b.v_view(), ip, b.mask_view(), o, l));
  // request 0 claims more tokens than its slots: the last ones would be request 1's rows
  lens[0] = b.capacity + 1;
  all(good, "length(0) <= capacity(0)");
  lens[0] = b.lens[0];
  // a null K or V base pointer: the kernels would dereference it inside the thread pool
  auto bad = good;
  bad.k = nullptr;
  all(bad, "non-null k_row(0, 0, 0)");
  bad = good;
  bad.v = nullptr;
  all(bad, "non-null v_row(0, 0, 0)");
}

namespace {
// user_nhd whose row of one cached token (request 0, every head) is null, as a layout over a
// user's block table with a hole would be: validate_kv_layout sees only the first and last rows.
struct holed_nhd : user_nhd {
  int hole = 0;
  bool hole_in_v = false;
  float* k_row(int r, int t, int h) const { return r == 0 && t == hole && !hole_in_v ? nullptr : user_nhd::k_row(r, t, h); }
  float* v_row(int r, int t, int h) const { return r == 0 && t == hole && hole_in_v ? nullptr : user_nhd::v_row(r, t, h); }
};
// A kv_cache's rows are its checked bases plus offsets: the attention does not test them one by one;
// a layout that hides kv_cache's k_row is tested like any user layout.
struct hiding_kv : sd::contiguous_kv<float> {
  float* k_row(int, int, int) const { return nullptr; }
};
static_assert(sd::detail::kv_rows_from_bases<sd::contiguous_kv<float>>);
static_assert(sd::detail::kv_rows_from_bases<sd::paged_kv<const float>>);
static_assert(sd::detail::kv_rows_from_bases<sd::ring_kv<float>>);
static_assert(!sd::detail::kv_rows_from_bases<user_nhd>);
static_assert(!sd::detail::kv_rows_from_bases<holed_nhd>);
static_assert(!sd::detail::kv_rows_from_bases<hiding_kv>);
}  // namespace

TEST_CASE("a null K or V row inside a request's cache is an error, not a read through nullptr") {
  // Two requests over 40 and 37 cached tokens; the rows kernel (2 query rows per kv head), the lanes
  // kernel and the tile kernel, one split and many, and the hybrid form; the hole anywhere but the first and last row.
  batch<float> b(3, 4, 2, 64, {40, 37}, {1, 1});
  std::vector<std::int32_t> lens = b.lens;
  const user_nhd base{b.k_nhd.data(), b.v_nhd.data(), lens.data(), 2, b.capacity, 2, 64};
  auto q = b.q_view();
  auto ip = b.indptr_view();
  auto o = b.out_view();
  auto l = b.lse_view();
  for (int hole : {1, 17, 38}) {
    for (bool in_v : {false, true}) {
      for (auto kernel : {sd::attention_kernel::rows, sd::attention_kernel::tiles, sd::attention_kernel::lanes}) {
        for (int split : {0, 8}) {
          holed_nhd c{base};
          c.hole = hole;
          c.hole_in_v = in_v;
          INFO("hole at token " << hole << (in_v ? " (V)" : " (K)") << ", kernel " << static_cast<int>(kernel) << ", split " << split);
          const sd::attention_options opt{.kv_split_size = split, .kernel = kernel};
          std::fill(b.out.begin(), b.out.end(), -7.0f);
          const std::string what = in_v ? "a non-null v_row for every row read (request 0, token " + std::to_string(hole)
                                        : "a non-null k_row for every row read (request 0, token " + std::to_string(hole);
          REQUIRE_BAD(sd::decode_attention(sd::host{}, q, c, ip, o, l, opt), what);
          REQUIRE_BAD(sd::hybrid_tree_attention(sd::host{}, q, c, b.k_view(), b.v_view(), ip, b.mask_view(), o, l, opt), what);
          // thrown before the merge pass: the output is untouched
          CHECK(std::all_of(b.out.begin(), b.out.end(), [](float x) { return x == -7.0f; }));
        }
      }
    }
  }
  // The same layout without its hole runs.
  holed_nhd whole{base};
  whole.hole = -1;
  REQUIRE_NOTHROW(sd::decode_attention(sd::host{}, q, whole, ip, o, l));
  // A row at an odd byte offset between the corners (a table built from byte offsets): the kernels
  // loaded it as floats, misaligned, before; now the same error as a null row, at its address.
  std::vector<float> shifted(b.k_nhd.size() + 1);
  std::memcpy(reinterpret_cast<std::byte*>(shifted.data()) + 2, b.k_nhd.data(), b.k_nhd.size() * sizeof(float));
  struct odd_nhd : user_nhd {
    const float* odd_k = nullptr;
    float* k_row(int r, int t, int h) const {
      if (r != 0 || t != 17) return user_nhd::k_row(r, t, h);
      const auto* at = reinterpret_cast<const std::byte*>(odd_k) + 2 + (user_nhd::k_row(r, t, h) - k) * sizeof(float);
      return const_cast<float*>(reinterpret_cast<const float*>(at));
    }
  };
  odd_nhd odd{base};
  odd.odd_k = shifted.data();
  for (auto kernel : {sd::attention_kernel::rows, sd::attention_kernel::tiles, sd::attention_kernel::lanes}) {
    const sd::attention_options opt{.kernel = kernel};
    REQUIRE_BAD(sd::decode_attention(sd::host{}, q, odd, ip, o, l, opt),
                "a non-null k_row for every row read (request 0, token 17, kv head 0), aligned to 4 bytes");
  }
}

namespace {
// user_nhd that claims INT32_MAX requests over the arrays of two, and counts the lengths it is asked.
struct many_requests : user_nhd {
  mutable std::int64_t length_calls = 0;
  int num_requests() const { return INT32_MAX; }
  int length(int r) const {
    ++length_calls;
    return r < 2 ? lens[r] : 0;
  }
};
}  // namespace

TEST_CASE("a layout's request count is checked against q_indptr before the layout is scanned") {
  // The layout scan reads every request's length (and row corners): with INT32_MAX requests it ran
  // for 18 s, or read past the user's arrays, before the q_indptr shape check refused the call.
  batch<float> b(3, 4, 2, 64, {40, 37}, {1, 1});
  std::vector<std::int32_t> lens = b.lens;
  const many_requests c{user_nhd{b.k_nhd.data(), b.v_nhd.data(), lens.data(), 2, b.capacity, 2, 64}};
  auto q = b.q_view();
  auto ip = b.indptr_view();
  auto o = b.out_view();
  auto l = b.lse_view();
  const std::string what = "shape [2147483648]";
  REQUIRE_BAD(sd::decode_attention(sd::host{}, q, c, ip, o, l), what);
  REQUIRE_BAD((void)sd::decode_attention_workspace_bytes(sd::host{}, q, c, ip), what);
  REQUIRE_BAD(sd::hybrid_tree_attention(sd::host{}, q, c, b.k_view(), b.v_view(), ip, b.mask_view(), o, l), what);
  REQUIRE_BAD((void)sd::hybrid_tree_attention_workspace_bytes(sd::host{}, q, c, ip), what);
  CHECK(c.length_calls == 0);
}

// Sizes no view of real memory has: negative extents, counts past int, null data with elements,
// and workspaces and split sizes at their limits (found by an audit with ASan/UBSan: each of these
// read or wrote out of bounds, overflowed int, or silently did nothing before it was checked).
TEST_CASE("attention entry points reject negative extents, null data and sizes past int32", "[attention][sizes]") {
  constexpr int D = 64;
  const sd::host one{.num_threads = 1};
  std::vector<float> qb(4 * D, 1.f), ob(4 * D, -7.f), lb(4, -7.f), kc(4 * D, 0.5f), vc(4 * D, 0.25f);
  std::vector<std::int32_t> lens{4}, ip{0, 5};
  const sd::contiguous_kv<float> cache(kc.data(), vc.data(), lens.data(), 1, 4, 1, D);
  const auto ipv = sd::make_view<1>(ip.data(), {2});
  SECTION("a negative token count no longer turns the q_indptr checks off") {
    const sd::strided_view<float, 3> q(qb.data(), {-1, 1, D}, {D, D, 1}), o(ob.data(), {-1, 1, D}, {D, D, 1});
    const sd::strided_view<float, 2> l(lb.data(), {-1, 1}, {1, 1});
    REQUIRE_BAD(sd::decode_attention(one, q, cache, ipv, o, l), "non-negative extents");
    std::vector<sd::mask_word> m{1, 3, 7};
    const auto mv = sd::make_view<1>(m.data(), {3});
    REQUIRE_BAD(sd::tree_attention(one, q, q, q, ipv, mv, o, l), "non-negative extents");
    REQUIRE_BAD(sd::hybrid_tree_attention(one, q, cache, q, q, ipv, mv, o, l), "non-negative extents");
    // and the merges: parts with -1 tokens against a one-token output
    const sd::strided_view<float, 4> op(qb.data(), {1, -1, 1, D}, {D, D, D, 1});
    const sd::strided_view<float, 3> lp(lb.data(), {1, -1, 1}, {1, 1, 1});
    REQUIRE_BAD(sd::lse_merge(one, op, lp, sd::make_view<3>(ob.data(), {1, 1, D}), sd::make_view<2>(lb.data(), {1, 1})),
                "non-negative extents");
    REQUIRE(ob[0] == -7.f);
  }
  SECTION("null data with elements") {
    std::vector<std::int32_t> ip1{0, 1};
    std::vector<sd::mask_word> m{1};
    const auto q = sd::make_view<3>(qb.data(), {1, 1, D});
    const auto o = sd::make_view<3>(ob.data(), {1, 1, D});
    const auto l = sd::make_view<2>(lb.data(), {1, 1});
    const sd::strided_view<const float, 3> null_k(nullptr, {1, 1, D}, {D, D, 1});
    const auto ip1v = sd::make_view<1>(ip1.data(), {2});
    const auto mv = sd::make_view<1>(m.data(), {1});
    REQUIRE_BAD(sd::tree_attention(one, q, null_k, q, ip1v, mv, o, l), "spec_k");
    REQUIRE_BAD(sd::hybrid_tree_attention(one, q, cache, q, null_k, ip1v, mv, o, l), "spec_v");
    REQUIRE_BAD(sd::decode_attention(one, sd::strided_view<const float, 3>(nullptr, {1, 1, D}, {D, D, 1}), cache, ip1v, o, l),
                "non-null data");
    std::vector<float> lse4(4);
    REQUIRE_BAD(sd::convert_lse_base2_to_natural(sd::host{}, sd::strided_view<float, 1>(nullptr, {4}, {1})), "non-null data");
    sd::convert_lse_base2_to_natural(sd::host{}, sd::make_view<1>(lse4.data(), {4}));  // control
  }
  SECTION("tokens * heads past int32 on the host too; merges past int32 tokens or parts") {
    const std::int64_t T = std::int64_t{1} << 30;
    const sd::strided_view<float, 3> q(qb.data(), {T, 4, D}, {0, D, 1});
    std::vector<std::int32_t> ipT{0, static_cast<std::int32_t>(T)};
    REQUIRE_BAD(sd::decode_attention_workspace_bytes(one, q, cache, sd::make_view<1>(ipT.data(), {2})),
                "tokens * heads below 2^31");
    const std::int64_t big = (std::int64_t{1} << 32) + 1;
    const sd::strided_view<float, 3> oa(qb.data(), {big, 1, D}, {0, D, 1}), out(ob.data(), {big, 1, D}, {0, D, 1});
    const sd::strided_view<float, 2> la(lb.data(), {big, 1}, {0, 1}), lo(lb.data(), {big, 1}, {0, 1});
    REQUIRE_BAD(sd::lse_merge(one, oa, la, oa, la, out, lo), "tokens * heads below 2^31");
    const sd::strided_view<float, 4> op(qb.data(), {big, 1, 1, D}, {0, D, D, 1});
    const sd::strided_view<float, 3> lp(lb.data(), {big, 1, 1}, {0, 1, 1});
    REQUIRE_BAD(sd::lse_merge(one, op, lp, sd::make_view<3>(ob.data(), {1, 1, D}), sd::make_view<2>(lb.data(), {1, 1})),
                "parts");
  }
  SECTION("a split longer than the cache is one part: kv_split_size = INT32_MAX gives the default's bits") {
    std::vector<std::int32_t> ip1{0, 1};
    const auto q = sd::make_view<3>(qb.data(), {1, 1, D});
    const auto ip1v = sd::make_view<1>(ip1.data(), {2});
    std::vector<float> o1(D), o2(D), l1(1), l2(1);
    for (int i = 0; i < 4 * D; ++i) kc[static_cast<std::size_t>(i)] = 0.01f * static_cast<float>(i % 97);
    sd::decode_attention(one, q, cache, ip1v, sd::make_view<3>(o1.data(), {1, 1, D}), sd::make_view<2>(l1.data(), {1, 1}));
    sd::decode_attention(one, q, cache, ip1v, sd::make_view<3>(o2.data(), {1, 1, D}), sd::make_view<2>(l2.data(), {1, 1}),
                         {.kv_split_size = std::numeric_limits<int>::max()});
    REQUIRE(o1 == o2);
    REQUIRE(l1 == l2);
  }
  SECTION("a caller workspace must be non-null and 8-byte aligned") {
    std::vector<std::int32_t> ip1{0, 1};
    const auto q = sd::make_view<3>(qb.data(), {1, 1, D});
    const auto ip1v = sd::make_view<1>(ip1.data(), {2});
    const auto o = sd::make_view<3>(ob.data(), {1, 1, D});
    const auto l = sd::make_view<2>(lb.data(), {1, 1});
    // Large enough (the size check comes first), so only the pointer is wrong.
    const std::size_t need = sd::decode_attention_workspace_bytes(one, q, cache, ip1v);
    sd::attention_workspace null_ws(nullptr, need);
    REQUIRE_BAD(sd::decode_attention(one, q, cache, ip1v, o, l, {.workspace = &null_ws}), "non-null data");
    std::vector<std::int64_t> raw(need / 8 + 2);
    sd::attention_workspace odd(reinterpret_cast<char*>(raw.data()) + 3, need);
    REQUIRE_BAD(sd::decode_attention(one, q, cache, ip1v, o, l, {.workspace = &odd}), "aligned");
    sd::attention_workspace fine(raw.data(), need);
    sd::decode_attention(one, q, cache, ip1v, o, l, {.workspace = &fine});  // control
  }
}

// Outputs written by several threads (or in place) must not share elements: a stride-0 out or lse
// was a silent write race (found in session 24's review; the verifiers already checked their rows).
TEST_CASE("attention, merges, RoPE and projections reject outputs whose elements overlap", "[attention][sizes]") {
  constexpr int D = 64;
  const sd::host pool{.num_threads = 2};
  std::vector<float> qb(4 * 2 * D, 1.f), ob(4 * 2 * D, -7.f), lb(8, -7.f), kc(4 * D, 0.5f), vc(4 * D, 0.25f);
  std::vector<std::int32_t> lens{4}, ip{0, 4};
  const sd::contiguous_kv<float> cache(kc.data(), vc.data(), lens.data(), 1, 4, 1, D);
  const auto ipv = sd::make_view<1>(ip.data(), {2});
  const auto q = sd::make_view<3>(qb.data(), {4, 2, D});
  const auto o = sd::make_view<3>(ob.data(), {4, 2, D});
  const auto l = sd::make_view<2>(lb.data(), {4, 2});
  const sd::strided_view<float, 3> o_tokens_shared(ob.data(), {4, 2, D}, {0, D, 1});  // every token one row
  const sd::strided_view<float, 3> o_heads_short(ob.data(), {4, 2, D}, {2 * D, D / 2, 1});  // heads overlap
  const sd::strided_view<float, 2> l_shared(lb.data(), {4, 2}, {2, 0});
  REQUIRE_BAD(sd::decode_attention(pool, q, cache, ipv, o_tokens_shared, l), "'out'");
  REQUIRE_BAD(sd::decode_attention(pool, q, cache, ipv, o_heads_short, l), "do not overlap");
  REQUIRE_BAD(sd::decode_attention(pool, q, cache, ipv, o, l_shared), "'lse'");
  std::vector<sd::mask_word> m{1, 3, 7, 15};
  const auto mv = sd::make_view<1>(m.data(), {4});
  const auto kv = sd::make_view<3>(kc.data(), {4, 1, D});
  REQUIRE_BAD(sd::tree_attention(pool, q, kv, kv, ipv, mv, o_tokens_shared, l), "'out'");
  REQUIRE_BAD(sd::hybrid_tree_attention(pool, q, cache, kv, kv, ipv, mv, o, l_shared), "'lse'");
  REQUIRE(ob[0] == -7.f);  // nothing written
  REQUIRE(lb[0] == -7.f);
  // The merges' outputs (inputs may be anything readable; out may alias part 0).
  REQUIRE_BAD(sd::lse_merge(pool, q, l, q, l, o_tokens_shared, l), "'out'");
  REQUIRE_BAD(sd::lse_merge(pool, q, l, q, l, o, l_shared), "'lse_out'");
  sd::lse_merge(pool, o, l, q, l, o, l);  // control: in place over part 0
  REQUIRE_BAD(sd::convert_lse_base2_to_natural(sd::host{}, l_shared), "'lse'");
  // RoPE rotates x in place.
  std::vector<std::int32_t> pos{0, 1, 2, 3};
  REQUIRE_BAD(sd::apply_rope(sd::host{}, sd::rope_params{}, o_tokens_shared, sd::make_view<1>(pos.data(), {4})),
              "'x'");
  // GLIDE's query projection writes q_out.
  std::vector<float> h(4 * 8, 1.f), w(2 * D * 8, 0.5f);
  REQUIRE_BAD(sd::glide_project_queries(sd::host{}, sd::make_view<2>(h.data(), {4, 8}), sd::make_view<2>(w.data(), {2 * D, 8}),
                                        o_heads_short),
              "'q_out'");
}

// Found by a session-54 review: outputs over each other or over inputs, and a workspace over the
// call's tensors, were accepted and gave wrong numbers.
TEST_CASE("outputs apart from each other, from the inputs and from a caller's workspace", "[attention][sizes]") {
  constexpr int D = 64;
  const sd::host one{.num_threads = 1};
  std::vector<float> qb(2 * D, 1.f), kc(4 * D, 0.5f), vc(4 * D, 0.25f), buf(2 * D + 8, -7.f);
  std::vector<std::int32_t> lens{4}, ip{0, 2};
  const sd::contiguous_kv<float> cache(kc.data(), vc.data(), lens.data(), 1, 4, 1, D);
  const auto ipv = sd::make_view<1>(ip.data(), {2});
  const auto q = sd::make_view<3>(qb.data(), {2, 1, D});
  // out and lse in one buffer, lse over out's second row
  REQUIRE_BAD(sd::decode_attention(one, q, cache, ipv, sd::make_view<3>(buf.data(), {2, 1, D}),
                                   sd::make_view<2>(buf.data() + D + 1, {2, 1})),
              "memory disjoint from 'out'");
  REQUIRE(buf[D + 1] == -7.f);
  // a scale whose exp2 form (scale * log2 e) is +inf
  std::vector<float> ob(2 * D), lb(2);
  const auto o = sd::make_view<3>(ob.data(), {2, 1, D});
  const auto l = sd::make_view<2>(lb.data(), {2, 1});
  REQUIRE_BAD(sd::decode_attention(one, q, cache, ipv, o, l, {.scale = 3e38f}), "'options.scale'");
  // a caller's workspace holding out
  const std::size_t need = sd::decode_attention_workspace_bytes(one, q, cache, ipv);
  std::vector<std::byte> big(need + 2 * D * sizeof(float) + 64);
  sd::attention_workspace ws(big.data(), big.size());
  const auto o_in_ws = sd::make_view<3>(reinterpret_cast<float*>(big.data() + 64), {2, 1, D});
  REQUIRE_BAD(sd::decode_attention(one, q, cache, ipv, o_in_ws, l, {.workspace = &ws}), "'options.workspace'");
  std::vector<sd::mask_word> m{1, 3};
  REQUIRE_BAD(sd::hybrid_tree_attention(one, q, cache, sd::make_view<3>(reinterpret_cast<const float*>(big.data()), {2, 1, D}),
                                        sd::make_view<3>(kc.data(), {2, 1, D}), ipv, sd::make_view<1>(m.data(), {2}), o, l,
                                        {.workspace = &ws}),
              "memory disjoint from 'spec_k'");
  sd::attention_workspace apart(need);
  sd::decode_attention(one, q, cache, ipv, o, l, {.workspace = &apart});  // control: a workspace of its own
  CHECK(ob[0] == Approx(0.25f));
  // attention_workspace sizes that would wrap when rounded up to 64 bytes
  REQUIRE_BAD(sd::attention_workspace(std::numeric_limits<std::size_t>::max() - 10), "SIZE_MAX - 63");
  // lse_merge: out shifted one row over o_a, lse_out inside out, an n-way out over part 1
  std::vector<float> oa(3 * D, 0.f), obb(2 * D, 1.f), la(2, 0.f), lbb(2, 0.f), lo(2);
  const auto va = sd::make_view<3>(oa.data(), {2, 1, D});
  const auto vb = sd::make_view<3>(obb.data(), {2, 1, D});
  const auto vla = sd::make_view<2>(la.data(), {2, 1});
  const auto vlb = sd::make_view<2>(lbb.data(), {2, 1});
  REQUIRE_BAD(sd::lse_merge(one, va, vla, vb, vlb, sd::make_view<3>(oa.data() + D, {2, 1, D}), sd::make_view<2>(lo.data(), {2, 1})),
              "or exactly 'out' (in place)");
  std::vector<float> ox(2 * D);
  REQUIRE_BAD(sd::lse_merge(one, va, vla, vb, vlb, sd::make_view<3>(ox.data(), {2, 1, D}),
                            sd::make_view<2>(ox.data() + 5, {2, 1})),
              "'lse_out'");
  sd::lse_merge(one, va, vla, vb, vlb, va, vla);  // control: in place over o_a and lse_a
  CHECK(oa[0] == Approx(0.5f));
  std::vector<float> parts(3 * 2 * D, 1.f), lparts(3 * 2, 0.f);
  const auto vp = sd::make_view<4>(parts.data(), {3, 2, 1, D});
  const auto vlp = sd::make_view<3>(lparts.data(), {3, 2, 1});
  REQUIRE_BAD(sd::lse_merge(one, vp, vlp, sd::make_view<3>(parts.data() + 2 * D, {2, 1, D}), sd::make_view<2>(lo.data(), {2, 1})),
              "'o_parts[1..]'");
  sd::lse_merge(one, vp, vlp, sd::make_view<3>(parts.data(), {2, 1, D}), sd::make_view<2>(lparts.data(), {2, 1}));  // part 0
  // glide_project_queries writing its queries over the hidden states
  std::vector<float> hq(2 * D, 1.f), wq(D * D, 0.5f);
  REQUIRE_BAD(sd::glide_project_queries(one, sd::make_view<2>(hq.data(), {2, D}), sd::make_view<2>(wq.data(), {D, D}),
                                        sd::make_view<3>(hq.data(), {2, 1, D})),
              "'hidden'");
}

// Session 55: out or lse over q (in place included), q_indptr or the tree's K, V and mask. Each query
// row is read by every kv split of its head while other rows' outputs are written, so an output over
// an input gave other numbers with one thread than with two; refused before anything is written.
TEST_CASE("attention outputs apart from q, q_indptr and the tree inputs", "[attention][sizes]") {
  constexpr int D = 64;
  const sd::host one{.num_threads = 1};
  std::vector<float> qb(2 * D, 1.f), kc(4 * D, 0.5f), vc(4 * D, 0.25f), ob(2 * D, -7.f), lb(2, -7.f);
  std::vector<std::int32_t> lens{4}, ip{0, 2};
  const sd::contiguous_kv<float> cache(kc.data(), vc.data(), lens.data(), 1, 4, 1, D);
  const auto ipv = sd::make_view<1>(ip.data(), {2});
  const auto q = sd::make_view<3>(qb.data(), {2, 1, D});
  const auto o = sd::make_view<3>(ob.data(), {2, 1, D});
  const auto l = sd::make_view<2>(lb.data(), {2, 1});
  std::vector<float> sk(2 * D, 0.5f), sv(2 * D, 0.25f);
  const auto skv = sd::make_view<3>(sk.data(), {2, 1, D});
  const auto svv = sd::make_view<3>(sv.data(), {2, 1, D});
  std::vector<sd::mask_word> m{1, 3};
  const auto mv = sd::make_view<1>(m.data(), {2});
  // in place over q, and shifted by one row
  REQUIRE_BAD(sd::decode_attention(one, q, cache, ipv, sd::make_view<3>(qb.data(), {2, 1, D}), l),
              "'q': expected memory disjoint from 'out'");
  REQUIRE_BAD(sd::hybrid_tree_attention(one, q, cache, skv, svv, ipv, mv, sd::make_view<3>(qb.data(), {2, 1, D}), l),
              "'q': expected memory disjoint from 'out'");
  REQUIRE_BAD(sd::tree_attention(one, q, skv, svv, ipv, mv, sd::make_view<3>(qb.data(), {2, 1, D}), l),
              "'q': expected memory disjoint from 'out'");
  std::vector<float> qo(3 * D, 1.f);
  REQUIRE_BAD(sd::decode_attention(one, sd::make_view<3>(qo.data(), {2, 1, D}), cache, ipv,
                                   sd::make_view<3>(qo.data() + D, {2, 1, D}), l),
              "'q': expected memory disjoint from 'out'");
  REQUIRE(lb[0] == -7.f);  // nothing written
  // lse over q's last row; lse over q_indptr (both written row by row while read)
  REQUIRE_BAD(sd::decode_attention(one, q, cache, ipv, o, sd::make_view<2>(qb.data() + 2 * D - 2, {2, 1})),
              "'q': expected memory disjoint from 'lse'");
  std::vector<float> ipf(4);
  std::memcpy(ipf.data(), ip.data(), sizeof(std::int32_t) * 2);
  const auto ip_in_lse = sd::make_view<1>(reinterpret_cast<const std::int32_t*>(ipf.data()), {2});
  REQUIRE_BAD(sd::decode_attention(one, q, cache, ip_in_lse, o, sd::make_view<2>(ipf.data(), {2, 1})),
              "'q_indptr': expected memory disjoint from 'lse'");
  REQUIRE(ob[0] == -7.f);
  // the tree's keys, values or mask under out or lse
  REQUIRE_BAD(sd::hybrid_tree_attention(one, q, cache, skv, svv, ipv, mv, sd::make_view<3>(sk.data(), {2, 1, D}), l),
              "'spec_k': expected memory disjoint from 'out'");
  REQUIRE_BAD(sd::tree_attention(one, q, skv, svv, ipv, mv, o, sd::make_view<2>(sv.data() + D, {2, 1})),
              "'spec_v': expected memory disjoint from 'lse'");
  std::vector<float> mf(2 * D, 0.f);
  std::memcpy(mf.data(), m.data(), sizeof(sd::mask_word) * 2);
  REQUIRE_BAD(sd::tree_attention(one, q, skv, svv, ipv,
                                 sd::make_view<1>(reinterpret_cast<const sd::mask_word*>(mf.data()), {2}),
                                 sd::make_view<3>(mf.data(), {2, 1, D}), l),
              "'mask': expected memory disjoint from 'out'");
  REQUIRE(lb[0] == -7.f);
  REQUIRE(sk[0] == 0.5f);
  // control: every output apart
  sd::hybrid_tree_attention(one, q, cache, skv, svv, ipv, mv, o, l);
  CHECK(ob[0] == Approx(0.25f));
}

namespace {
// A user's layout whose every token is one row: a cache of INT32_MAX tokens in 2 KB.
struct one_row_layout {
  using value_type = float;
  const float* row;
  int R = 1, H = 1;  // requests, kv heads
  int num_requests() const { return R; }
  int num_kv_heads() const { return H; }
  int head_dim() const { return 64; }
  int length(int) const { return std::numeric_limits<std::int32_t>::max(); }
  const float* k_row(int, int, int) const { return row; }
  const float* v_row(int, int, int) const { return row; }
  sd::memory_space space() const { return sd::memory_space::host; }
};
}  // namespace

// Found by a session-54 review: the same layout over thousands of requests and heads made the host
// plan's sizes wrap (a small workspace, then writes past it).
TEST_CASE("host attention plans whose sizes pass int64 are refused, not wrapped", "[attention][sizes]") {
  std::vector<float> row(64, 0.5f), qb(64, 1.f);
  {
    const int R = 4096, H = 1024;
    std::vector<std::int32_t> ip(R + 1);
    for (int r = 0; r <= R; ++r) ip[static_cast<std::size_t>(r)] = r;
    const sd::strided_view<const float, 3> q(qb.data(), {R, H, 64}, {0, 0, 1});
    REQUIRE_BAD(sd::decode_attention_workspace_bytes(sd::host{}, q, one_row_layout{row.data(), R, H},
                                                     sd::make_view<1>(ip.data(), {R + 1}), {.kv_split_size = 2}),
                "fits in int64");
  }
  {  // the automatic split's heuristic saturates instead of overflowing
    const int R = 129, H = 1 << 25;
    std::vector<std::int32_t> ip(R + 1, 33);
    ip[0] = 0;
    const sd::strided_view<const float, 3> q(qb.data(), {33, H, 64}, {0, 0, 1});
    CHECK_NOTHROW(sd::decode_attention_workspace_bytes(sd::host{}, q, one_row_layout{row.data(), R, H},
                                                       sd::make_view<1>(ip.data(), {R + 1})));
  }
}


// Found by a session-25 audit of user layouts: kv_split_size = 1 over INT32_MAX tokens made 2^31
// parts (int overflow in the host plan, then a workspace size that wrapped).
TEST_CASE("a split into 2^31 - 1 or more parts is refused", "[attention][sizes]") {
  std::vector<float> row(64, 0.5f), qb(64, 1.f), ob(64), lb(1);
  const one_row_layout cache{row.data()};
  std::vector<std::int32_t> ip{0, 1};
  std::vector<sd::mask_word> m{1};
  const auto q = sd::make_view<3>(qb.data(), {1, 1, 64});
  const auto o = sd::make_view<3>(ob.data(), {1, 1, 64});
  const auto l = sd::make_view<2>(lb.data(), {1, 1});
  const auto ipv = sd::make_view<1>(ip.data(), {2});
  const auto mv = sd::make_view<1>(m.data(), {1});
  const sd::attention_options one{.kv_split_size = 1}, two{.kv_split_size = 2};
  REQUIRE_BAD(sd::decode_attention(sd::host{}, q, cache, ipv, o, l, one), "'options.kv_split_size'");
  REQUIRE_BAD(sd::hybrid_tree_attention(sd::host{}, q, cache, q, q, ipv, mv, o, l, one), "fewer than 2^31 - 1 parts");
  REQUIRE_BAD(sd::hybrid_tree_attention_workspace_bytes(sd::host{}, q, cache, ipv, one), "'options.kv_split_size'");
  // Two tokens per part: 2^30 parts plus the tree's, counted in int64: the size is what it is.
  const std::size_t bytes = sd::hybrid_tree_attention_workspace_bytes(sd::host{}, q, cache, ipv, two);
  CHECK(bytes > (std::size_t{1} << 30) * 66 * sizeof(float));
}

using specdec_test::growing_layout;

// Found by a session-25 audit: the host workspace was sized from one reading of the lengths and the
// plan laid out from another, so a length that grew in between wrote past the workspace. Whenever
// the layout changes its answer, the call either refuses or computes a correct result.
TEST_CASE("a layout whose lengths change during a call gets an error or a right result, never a bad write",
          "[attention][sizes]") {
  std::vector<float> row(64), qb(2 * 64, 0.25f), ob(2 * 64), lb(2);
  for (int c = 0; c < 64; ++c) row[static_cast<std::size_t>(c)] = 0.01f * static_cast<float>(c);
  std::vector<std::int32_t> ip{0, 2};
  std::vector<sd::mask_word> m{1, 3};
  const auto q = sd::make_view<3>(qb.data(), {2, 1, 64});
  const auto o = sd::make_view<3>(ob.data(), {2, 1, 64});
  const auto l = sd::make_view<2>(lb.data(), {2, 1});
  const auto ipv = sd::make_view<1>(ip.data(), {2});
  const auto mv = sd::make_view<1>(m.data(), {2});
  const std::vector<float> tree_kv(2 * 64, 0.f);
  const auto tkv = sd::make_view<3>(tree_kv.data(), {2, 1, 64});
  int refused = 0, computed = 0;
  for (int before = 0; before < 40; ++before)
    for (const int split : {0, 2}) {
      int calls = 0;
      const growing_layout cache{row.data(), before, &calls};
      const sd::attention_options opt{.kv_split_size = split};
      try {
        sd::decode_attention(sd::host{.num_threads = 2}, q, cache, ipv, o, l, opt);
        for (int c = 0; c < 64; ++c) REQUIRE(ob[static_cast<std::size_t>(c)] == Approx(row[static_cast<std::size_t>(c)]));
        ++computed;
      } catch (const sd::invalid_argument& e) {
        REQUIRE_THAT(e.what(), Contains("'cache'") || Contains("'options.workspace'"));
        ++refused;
      }
      calls = 0;
      try {  // the tree's zero keys and values change the result: only "no crash, a clear error" here
        sd::hybrid_tree_attention(sd::host{}, q, cache, tkv, tkv, ipv, mv, o, l, opt);
      } catch (const sd::invalid_argument& e) {
        REQUIRE_THAT(e.what(), Contains("'cache'"));
      }
    }
  CHECK(refused > 0);  // the calls that saw 4 when sizing and 1000 when planning
  CHECK(computed > 0);
}

// Found by a session-56 review: pass 2 read each length again after the plan had cut the cache into
// parts, so a length that changed in between attended over keys no single length() reported (the
// mean of 256 keys where the layout said 4 or 1000). With K zero and V row t holding t, a right
// result is the mean of 0 .. L - 1 for an L the layout reported.
TEST_CASE("a layout whose lengths change during a call is attended over one of its lengths", "[attention][sizes]") {
  struct growing_rows : growing_layout {
    const float* v;
    const float* v_row(int, int t, int) const { return v + static_cast<std::ptrdiff_t>(t) * 64; }
  };
  std::vector<float> k(64, 0.f), v(1000 * 64), qb(64, 0.5f), ob(64), lb(1);
  for (int t = 0; t < 1000; ++t)
    for (int c = 0; c < 64; ++c) v[static_cast<std::size_t>(t * 64 + c)] = static_cast<float>(t);
  std::vector<std::int32_t> ip{0, 1};
  const auto q = sd::make_view<3>(qb.data(), {1, 1, 64});
  const auto o = sd::make_view<3>(ob.data(), {1, 1, 64});
  const auto l = sd::make_view<2>(lb.data(), {1, 1});
  const auto ipv = sd::make_view<1>(ip.data(), {2});
  int refused = 0, short_cache = 0, long_cache = 0;
  for (int before = 0; before < 16; ++before)
    for (const int threads : {1, 2}) {
      CAPTURE(before, threads);
      int calls = 0;
      const growing_rows cache{{k.data(), before, &calls}, v.data()};
      try {
        sd::decode_attention(sd::host{.num_threads = threads}, q, cache, ipv, o, l);
      } catch (const sd::invalid_argument& e) {
        REQUIRE_THAT(e.what(), Contains("'cache'"));
        ++refused;
        continue;
      }
      const bool four = std::abs(ob[0] - 1.5f) < 1e-3f;
      REQUIRE((four || std::abs(ob[0] - 499.5f) < 1e-2f));
      REQUIRE(lb[0] == Approx(std::log(four ? 4.f : 1000.f)));
      ++(four ? short_cache : long_cache);
    }
  CHECK(refused > 0);
  CHECK(short_cache > 0);
  CHECK(long_cache > 0);
}

// Session 56 review: tree_attention counted its requests as int(q_indptr.extent(0)) - 1 before any
// shape check (signed overflow at extent 2^31, UBSan), and the n-way lse_merge formed part 1's
// address from an empty input's unchecked stride (a wrapped or null-based pointer, UBSan).
TEST_CASE("tree_attention's q_indptr extent and an empty n-way merge's strides", "[attention][sizes]") {
  std::vector<float> qb(64, 0.5f), kb(64, 0.f), ob(64), lb(1);
  std::vector<sd::mask_word> m{1};
  std::int32_t ip[2] = {0, 1};
  const sd::strided_view<const std::int32_t, 1> huge(ip, {std::int64_t{1} << 31}, {1});
  const auto q = sd::make_view<3>(qb.data(), {1, 1, 64});
  const auto k = sd::make_view<3>(static_cast<const float*>(kb.data()), {1, 1, 64});
  const auto o = sd::make_view<3>(ob.data(), {1, 1, 64});
  const auto l = sd::make_view<2>(lb.data(), {1, 1});
  const auto mv = sd::make_view<1>(m.data(), {1});
  REQUIRE_BAD(sd::tree_attention(sd::host{}, q, k, k, huge, mv, o, l), "between 1 and 2^31 - 1 elements");
  sd::tree_attention(sd::host{}, q, k, k, sd::make_view<1>(static_cast<const std::int32_t*>(ip), {2}), mv, o, l);
  CHECK(ob[0] == 0.f);  // control: one token over its own zero V
  static float pb[64], plb[1];
  float eo[64], el[1];
  for (const bool null_base : {false, true}) {
    const std::int64_t big = std::int64_t{1} << 61;
    const sd::strided_view<const float, 4> op(null_base ? nullptr : pb, {2, 0, 1, 64}, {null_base ? 64 : big, 64, 64, 1});
    const sd::strided_view<const float, 3> lp(null_base ? nullptr : plb, {2, 0, 1}, {null_base ? 1 : big, 1, 1});
    sd::lse_merge(sd::host{}, op, lp, sd::strided_view<float, 3>(eo, {0, 1, 64}, {64, 64, 1}),
                  sd::strided_view<float, 2>(el, {0, 1}, {1, 1}));  // nothing to merge: no error, no UB
  }
}

// Session 56 review: options.workspace was checked apart from q, out and the tree inputs but not from
// the cache. Pass 1 writes query panels into it before pass 2 reads K/V (a silently wrong result with
// K inside it) and the mapping's arrays (a page table rewritten under the reads: out of bounds).
TEST_CASE("the workspace is refused over the cache's K/V and its mapping's arrays", "[attention][sizes]") {
  constexpr int D = 64;
  std::vector<float> qb(D, 1.f), ob(D), lb(1), kc(4 * D, 0.f), vc(4 * D, 1.f);
  std::vector<std::int32_t> lens{4}, ip{0, 1}, page_indptr{0, 1}, page_indices{0};
  const auto q = sd::make_view<3>(qb.data(), {1, 1, D});
  const auto o = sd::make_view<3>(ob.data(), {1, 1, D});
  const auto l = sd::make_view<2>(lb.data(), {1, 1});
  const auto ipv = sd::make_view<1>(ip.data(), {2});
  const sd::host one{.num_threads = 1};
  alignas(64) static std::byte big[1 << 20];
  sd::attention_workspace ws(big, sizeof big);
  auto* inside = reinterpret_cast<float*>(big + 4096);
  std::copy(kc.begin(), kc.end(), inside);
  const auto decode = [&](const auto& cache) { sd::decode_attention(one, q, cache, ipv, o, l, {.workspace = &ws}); };
  REQUIRE_BAD(decode(sd::contiguous_kv<float>(inside, vc.data(), lens.data(), 1, 4, 1, D)), "disjoint from 'cache.k'");
  REQUIRE_BAD(decode(sd::contiguous_kv<float>(kc.data(), inside, lens.data(), 1, 4, 1, D)), "disjoint from 'cache.v'");
  auto* len_inside = reinterpret_cast<std::int32_t*>(big + 64);
  *len_inside = 4;
  REQUIRE_BAD(decode(sd::contiguous_kv<float>(kc.data(), vc.data(), len_inside, 1, 4, 1, D)),
              "disjoint from 'cache.mapping.lengths'");
  auto* pages_inside = reinterpret_cast<std::int32_t*>(big + 128);
  *pages_inside = 0;
  REQUIRE_BAD(decode(sd::paged_kv<float>(kc.data(), vc.data(), page_indptr.data(), pages_inside, lens.data(), 1, 1, 4, 1, D)),
              "disjoint from 'cache.mapping.page_indices'");
  std::vector<std::int32_t> starts{0};
  REQUIRE_BAD(decode(sd::ring_kv<float>(kc.data(), vc.data(), starts.data(), len_inside, 1, 4, 4, 1, D)),
              "disjoint from 'cache.mapping.lengths'");
  // control: the same caches over memory of their own attend (V all ones: O = 1)
  decode(sd::paged_kv<float>(kc.data(), vc.data(), page_indptr.data(), page_indices.data(), lens.data(), 1, 1, 4, 1, D));
  CHECK(ob[0] == Approx(1.f));
  ob[0] = 0.f;
  decode(sd::contiguous_kv<float>(kc.data(), vc.data(), lens.data(), 1, 4, 1, D));
  CHECK(ob[0] == Approx(1.f));
}

// Session 65 review: out and lse were checked apart from q, q_indptr and each other but not from the
// cache: an out over K or an lse over V or over the lengths array was written without an error, and
// the cache was corrupt for every later call (lengths[0] became 1083721381).
TEST_CASE("out and lse are refused over the cache's K/V and its mapping's arrays", "[attention][sizes]") {
  constexpr int D = 64;
  std::vector<float> qb(D, 1.f), ob(D), lb(1), kc(4 * D, 0.f), vc(4 * D, 1.f);
  std::vector<std::int32_t> lens{4}, ip{0, 1};
  const auto q = sd::make_view<3>(qb.data(), {1, 1, D});
  const auto o = sd::make_view<3>(ob.data(), {1, 1, D});
  const auto l = sd::make_view<2>(lb.data(), {1, 1});
  const auto ipv = sd::make_view<1>(ip.data(), {2});
  const sd::host one{.num_threads = 1};
  const sd::contiguous_kv<float> cache(kc.data(), vc.data(), lens.data(), 1, 4, 1, D);
  REQUIRE_BAD(sd::decode_attention(one, q, cache, ipv, sd::make_view<3>(kc.data(), {1, 1, D}), l),
              "disjoint from 'cache.k'");
  REQUIRE_BAD(sd::decode_attention(one, q, cache, ipv, o, sd::make_view<2>(vc.data() + 5, {1, 1})),
              "disjoint from 'cache.v'");
  REQUIRE_BAD(sd::decode_attention(one, q, cache, ipv, o, sd::make_view<2>(reinterpret_cast<float*>(lens.data()), {1, 1})),
              "disjoint from 'cache.mapping.lengths'");
  CHECK(lens[0] == 4);
  CHECK(kc[0] == 0.f);
  sd::decode_attention(one, q, cache, ipv, o, l);  // control
  CHECK(ob[0] == Approx(1.f));
}

TEST_CASE("glide_project_queries rejects a negative token count", "[attention][sizes]") {
  std::vector<float> h(8, 1.f), w(64 * 8, 0.5f), qo(64, -7.f);
  const sd::strided_view<float, 2> hidden(h.data(), {-3, 8}, {8, 1});
  REQUIRE_BAD(sd::glide_project_queries(sd::host{}, hidden, sd::make_view<2>(w.data(), {64, 8}),
                                        sd::make_view<3>(qo.data(), {1, 1, 64})),
              "non-negative extents");
  REQUIRE(qo[0] == -7.f);
}
