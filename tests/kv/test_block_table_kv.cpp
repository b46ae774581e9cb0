// block_table_kv (kv/block_table_kv.hpp, vLLM's block table as a mapping over kv_cache):
//  - hybrid_tree_attention over it equals, bit for bit, the same data in a contiguous NHD layout on
//    randomized ragged batches (shuffled blocks, padded rows, GQA, several block sizes);
//  - kv commit (in place, from a buffer, batched) writes the same logical rows as a contiguous cache,
//    and a rejected commit leaves the pools untouched (memcmp);
//  - validation rejects each kind of bad table with specdec::invalid_argument.
// Also the generic kv_cache over a user's mapping: its validation (null bases, length > capacity, the
// user's validate_kv_mapping hook) and both forms of offset().
#include "attention/attention_fixture.hpp"
#include "kv/block_table_util.hpp"

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "specdec/attention/hybrid_tree_attention.hpp"
#include "specdec/core/half.hpp"
#include "specdec/kv/block_table_kv.hpp"
#include "specdec/kv/commit.hpp"
#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/tree/token_tree.hpp"

using Catch::Matchers::Contains;
using Catch::Matchers::Equals;

namespace {

template <class T>
void hybrid_bit_identical(std::uint64_t seed) {
  specdec::philox_stream rng(seed, 3);
  for (int trial = 0; trial < 24; ++trial) {
    const int R = 1 + static_cast<int>(rng.below(5));
    const int ratios[3] = {1, 2, 4}, dims[3] = {64, 128, 256}, sizes[4] = {1, 3, 16, 32};
    const int hkv = 1 + static_cast<int>(rng.below(2)), hq = hkv * ratios[rng.below(3)], d = dims[rng.below(3)];
    const int bs = sizes[rng.below(4)];
    std::vector<int> lens, trees;
    for (int r = 0; r < R; ++r) {
      lens.push_back(rng.below(4) == 0 ? 0 : static_cast<int>(rng.below(300)));
      trees.push_back(1 + static_cast<int>(rng.below(24)));
    }
    INFO("trial " << trial << ": R " << R << ", hq " << hq << ", hkv " << hkv << ", d " << d << ", block " << bs);
    attn_test::batch<T> b(seed * 1000 + static_cast<std::uint64_t>(trial), hq, hkv, d, lens, trees);
    kv_test::block_pool<T> pool(rng, b.lens, b.capacity, hkv, d, bs);
    for (int r = 0; r < R; ++r) pool.fill_from(b.nhd(), b.lens.data(), r, b.lens[static_cast<std::size_t>(r)]);

    b.reset_outputs();
    specdec::hybrid_tree_attention(specdec::host{}, b.q_view(), b.nhd(), b.k_view(), b.v_view(), b.indptr_view(),
                                   b.mask_view(), b.out_view(), b.lse_view());
    const auto out_nhd = b.out;
    const auto lse_nhd = b.lse;
    b.reset_outputs();
    specdec::hybrid_tree_attention(specdec::host{}, b.q_view(), pool.layout(b.lens.data()), b.k_view(), b.v_view(),
                                   b.indptr_view(), b.mask_view(), b.out_view(), b.lse_view());
    REQUIRE(std::memcmp(out_nhd.data(), b.out.data(), out_nhd.size() * sizeof(T)) == 0);
    REQUIRE(std::memcmp(lse_nhd.data(), b.lse.data(), lse_nhd.size() * sizeof(float)) == 0);
    // and both are attention, not two equal wrong answers
    const auto ref = specdec::reference::hybrid_tree_attention(b.q_view(), b.nhd(), b.k_view(), b.v_view(),
                                                               b.indptr_view(), b.mask_view());
    attn_test::check_against(b, ref);
  }
}

}  // namespace

TEST_CASE("block_table_kv: hybrid_tree_attention is bit-identical to contiguous NHD on random ragged batches") {
  SECTION("fp32") { hybrid_bit_identical<float>(51); }
  SECTION("fp16") { hybrid_bit_identical<specdec::half>(52); }
}

namespace {

constexpr int CR = 3, CH = 2, CD = 5, CCAP = 24, CBS = 4, CLAYERS = 2;

//! LAYERS caches of the same logical content, in a contiguous NHD layout and in a block table whose
//! requests own 3..6 blocks of 4 (capacity 12..24).
struct commit_caches {
  std::vector<std::int32_t> len_c, len_b;
  std::vector<std::vector<float>> kc, vc;
  std::vector<kv_test::block_pool<float>> pools;
  std::vector<specdec::contiguous_kv<float>> contiguous;
  std::vector<specdec::block_table_kv<float>> table;

  commit_caches(specdec::philox_stream& rng, const std::vector<std::int32_t>& lens) : len_c(lens), len_b(lens) {
    const std::uint64_t pool_seed = rng.next_u32();
    for (int l = 0; l < CLAYERS; ++l) {
      kc.emplace_back(static_cast<std::size_t>(CR) * CCAP * CH * CD);
      vc.emplace_back(kc.back().size());
      for (auto& x : kc.back()) x = rng.uniform() * 4 - 2;
      for (auto& x : vc.back()) x = rng.uniform() * 4 - 2;
      contiguous.emplace_back(kc.back().data(), vc.back().data(), len_c.data(), CR, CCAP, CH, CD);
      specdec::philox_stream same(pool_seed, 0);  // every layer gets the same block table
      pools.emplace_back(same, std::vector<std::int32_t>(CR, CCAP - 2 * CBS), CCAP - 2 * CBS, CH, CD, CBS);
    }
    for (int l = 0; l < CLAYERS; ++l) {
      auto& p = pools[static_cast<std::size_t>(l)];
      // fill every allocated slot (not only the valid prefix): commit reads the tree rows past the length
      for (int r = 0; r < CR; ++r)
        p.fill_from(contiguous[static_cast<std::size_t>(l)], len_b.data(), r, p.layout(len_b.data()).capacity(r));
      table.push_back(p.layout(len_b.data()));
    }
  }
  int capacity(int r) const { return table[0].capacity(r); }
  bool same_rows(int r, int upto) const {
    for (int l = 0; l < CLAYERS; ++l)
      for (int t = 0; t < upto; ++t)
        for (int h = 0; h < CH; ++h) {
          const auto& c = contiguous[static_cast<std::size_t>(l)];
          const auto& b = table[static_cast<std::size_t>(l)];
          if (std::memcmp(c.k_row(r, t, h), b.k_row(r, t, h), CD * sizeof(float)) != 0 ||
              std::memcmp(c.v_row(r, t, h), b.v_row(r, t, h), CD * sizeof(float)) != 0)
            return false;
        }
    return true;
  }
  std::vector<std::vector<float>> snapshot() const {
    std::vector<std::vector<float>> s;
    for (const auto& p : pools) s.push_back(p.k), s.push_back(p.v);
    return s;
  }
  bool pools_equal(const std::vector<std::vector<float>>& s) const {
    for (std::size_t l = 0; l < pools.size(); ++l)
      if (std::memcmp(pools[l].k.data(), s[2 * l].data(), s[2 * l].size() * sizeof(float)) != 0 ||
          std::memcmp(pools[l].v.data(), s[2 * l + 1].data(), s[2 * l + 1].size() * sizeof(float)) != 0)
        return false;
    return true;
  }
};

specdec::token_tree random_tree(int n, specdec::philox_stream& rng) {
  specdec::token_tree t;
  for (int i = 0; i < n; ++i)
    t.add(static_cast<std::int32_t>(rng.below(100)),
          static_cast<int>(rng.below(static_cast<std::uint32_t>(i + 1))) - 1);
  return t;
}

}  // namespace

TEST_CASE("block_table_kv: kv commit writes what a contiguous cache gets, within the allocated blocks") {
  specdec::philox_stream rng(77, 0);
  for (int trial = 0; trial < 60; ++trial) {
    INFO("trial " << trial);
    commit_caches c(rng, {0, 0, 0});
    const int r = static_cast<int>(rng.below(CR));
    const int cap = c.capacity(r);
    REQUIRE(cap % CBS == 0);
    const int n = 1 + static_cast<int>(rng.below(static_cast<std::uint32_t>(std::min(cap, 10))));
    const int committed = static_cast<int>(rng.below(static_cast<std::uint32_t>(cap - n + 1)));
    c.len_c[static_cast<std::size_t>(r)] = c.len_b[static_cast<std::size_t>(r)] = committed;
    const auto tree = random_tree(n, rng);
    const auto path = tree.path(static_cast<int>(rng.below(static_cast<std::uint32_t>(n))));
    REQUIRE(c.same_rows(r, committed + n));
    const auto parents = tree.parents();
    const int a = specdec::kv_commit_in_place(std::span(c.contiguous), r, committed, n, std::span(path), parents);
    const int b = specdec::kv_commit_in_place(std::span(c.table), r, committed, n, std::span(path), parents);
    REQUIRE(a == b);
    REQUIRE(a == committed + static_cast<int>(path.size()));
    REQUIRE(c.same_rows(r, a));

    // a rejected commit (the tree would run past the request's allocated blocks) writes nothing
    const auto before = c.snapshot();
    REQUIRE_THROWS_AS(specdec::kv_commit_in_place(std::span(c.table), r, cap - n + 1, n, std::span(path), parents),
                      specdec::invalid_argument);
    REQUIRE(c.pools_equal(before));
    // as does one whose accepted list is not a root path
    const std::vector<std::int32_t> bad_path{static_cast<std::int32_t>(n - 1), 0};
    if (n >= 2) {
      REQUIRE_THROWS_AS(specdec::kv_commit_in_place(std::span(c.table), r, committed, n, std::span(bad_path), parents),
                        specdec::invalid_argument);
      REQUIRE(c.pools_equal(before));
    }
  }
}

TEST_CASE("block_table_kv: kv_commit_from_buffer and the batched commit match a contiguous cache") {
  specdec::philox_stream rng(78, 0);
  for (int trial = 0; trial < 30; ++trial) {
    INFO("trial " << trial);
    commit_caches c(rng, {0, 0, 0});
    // from a buffer: request r, a tree of n spec rows per layer
    const int r = static_cast<int>(rng.below(CR));
    const int n = 1 + static_cast<int>(rng.below(8));
    const int committed = static_cast<int>(rng.below(static_cast<std::uint32_t>(c.capacity(r) - n + 1)));
    c.len_c[static_cast<std::size_t>(r)] = c.len_b[static_cast<std::size_t>(r)] = committed;
    const auto tree = random_tree(n, rng);
    const auto path = tree.path(static_cast<int>(rng.below(static_cast<std::uint32_t>(n))));
    std::vector<std::vector<float>> sk(CLAYERS), sv(CLAYERS);
    std::vector<specdec::strided_view<const float, 3>> kv_k, kv_v;
    for (int l = 0; l < CLAYERS; ++l) {
      sk[l].resize(static_cast<std::size_t>(n) * CH * CD), sv[l].resize(sk[l].size());
      for (auto& x : sk[l]) x = rng.uniform();
      for (auto& x : sv[l]) x = rng.uniform();
      kv_k.push_back(specdec::make_view<3>(static_cast<const float*>(sk[l].data()), {n, CH, CD}));
      kv_v.push_back(specdec::make_view<3>(static_cast<const float*>(sv[l].data()), {n, CH, CD}));
    }
    const auto parents = tree.parents();
    const auto sk_span = std::span(kv_k), sv_span = std::span(kv_v);
    const int a = specdec::kv_commit_from_buffer(std::span(c.contiguous), r, committed, sk_span, sv_span,
                                                 std::span(path), parents);
    const int b =
        specdec::kv_commit_from_buffer(std::span(c.table), r, committed, sk_span, sv_span, std::span(path), parents);
    REQUIRE(a == b);
    REQUIRE(c.same_rows(r, a));
    for (std::size_t j = 0; j < path.size(); ++j)  // the rows are the spec rows, not merely equal to each other
      REQUIRE(std::memcmp(c.table[1].k_row(r, committed + static_cast<int>(j), 1),
                          sk[1].data() + (static_cast<std::size_t>(path[j]) * CH + 1) * CD, CD * sizeof(float)) == 0);
    const auto before = c.snapshot();
    const int too_late = c.capacity(r) - static_cast<int>(path.size()) + 1;
    REQUIRE_THROWS_WITH(specdec::kv_commit_from_buffer(std::span(c.table), r, too_late, sk_span, sv_span,
                                                       std::span(path), parents),
                        Contains("capacity(request) = " + std::to_string(c.capacity(r))));
    REQUIRE(c.pools_equal(before));

    // batched: every request commits a chain of its own length
    std::vector<std::int32_t> lens, sizes, indptr{0}, accepted;
    for (int q = 0; q < CR; ++q) {
      const int size = 1 + static_cast<int>(rng.below(4));
      lens.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(c.capacity(q) - size + 1))));
      sizes.push_back(size);
      for (int j = 0; j < size; ++j)  // strictly increasing: all commit checks without parents
        if (rng.below(2) == 0) accepted.push_back(j);
      indptr.push_back(static_cast<std::int32_t>(accepted.size()));
    }
    std::copy(lens.begin(), lens.end(), c.len_c.begin());  // in place: the layouts point at these arrays
    std::copy(lens.begin(), lens.end(), c.len_b.begin());
    const auto la = specdec::kv_commit_in_place_batch(std::span(c.contiguous), lens, sizes, indptr, accepted);
    const auto lb = specdec::kv_commit_in_place_batch(std::span(c.table), lens, sizes, indptr, accepted);
    REQUIRE(la == lb);
    for (int q = 0; q < CR; ++q) REQUIRE(c.same_rows(q, la[static_cast<std::size_t>(q)]));
  }
}

namespace {
template <class L>
void validate(const L& l) {
  specdec::validate_kv_layout(l, "specdec::my_op", "cache");
}
}  // namespace

TEST_CASE("block_table_kv validation") {
  const int BS = 4, MB = 3, NB = 5, H = 2, D = 8;
  std::vector<float> k(NB * BS * H * D), v(k.size());
  std::vector<std::int32_t> table{4, 0, -1, 2, 3, 1}, lens{5, 9}, alloc{2, 3};
  using L = specdec::block_table_kv<float>;
  const L good{k.data(), v.data(), {table.data(), lens.data(), MB, BS, NB, alloc.data()}, 2, H, D};
  CHECK_NOTHROW(validate(good));
  CHECK(good.capacity(0) == 8);
  CHECK(good.capacity(1) == 12);
  CHECK(good.k_row(1, 5, 1) - k.data() == ((3 * BS + 1) * H + 1) * D);  // token 5 -> block table[1][1] = 3, slot 1

  lens[0] = 9;  // request 0 has 2 blocks of 4
  CHECK_THROWS_WITH(validate(good), Equals("specdec::my_op: argument 'cache': expected seq_lens[0] in [0, 8] (2 "
                                           "allocated blocks x block_size 4), got 9"));
  lens[0] = -1;
  CHECK_THROWS_WITH(validate(good), Contains("seq_lens[0]") && Contains("got -1"));
  lens[0] = 5;
  table[3] = 5;  // request 1's first block is past the pool
  CHECK_THROWS_WITH(validate(good), Equals("specdec::my_op: argument 'cache': expected block_table[1][0] in [0, "
                                           "num_blocks = 5), got 5"));
  table[3] = -3;
  CHECK_THROWS_WITH(validate(good), Contains("block_table[1][0]") && Contains("got -3"));
  table[3] = 2;
  alloc[0] = 4;  // more than a row holds
  CHECK_THROWS_WITH(validate(good), Contains("blocks_allocated[0] in [0, max_blocks = 3]") && Contains("got 4"));
  alloc[0] = -1;
  CHECK_THROWS_WITH(validate(good), Contains("blocks_allocated[0]") && Contains("got -1"));
  alloc[0] = 2;
  CHECK_NOTHROW(validate(good));
  // without blocks_allocated every entry is allocated: the -1 padding of row 0 is now out of range
  auto all = good;
  all.mapping.blocks_allocated = nullptr;
  CHECK(all.capacity(0) == 12);
  CHECK_THROWS_WITH(validate(all), Contains("block_table[0][2]") && Contains("got -1"));
  table[2] = 1;
  CHECK_NOTHROW(validate(all));

  auto bad = good;
  bad.k = nullptr;
  CHECK_THROWS_WITH(validate(bad), Contains("non-null k and v buffers"));
  bad = good;
  bad.v = nullptr;
  CHECK_THROWS_AS(validate(bad), specdec::invalid_argument);
  bad = good;
  bad.mapping.block_table = nullptr;
  CHECK_THROWS_WITH(validate(bad), Contains("non-null block_table"));
  bad = good;
  bad.mapping.seq_lens = nullptr;
  CHECK_THROWS_WITH(validate(bad), Contains("non-null seq_lens"));
  bad = good;
  bad.mapping.block_size = 0;
  CHECK_THROWS_WITH(validate(bad), Equals("specdec::my_op: argument 'cache': expected block_size > 0, got 0"));
  bad = good;
  bad.mapping.max_blocks = -1;
  CHECK_THROWS_WITH(validate(bad), Contains("max_blocks >= 0"));
  bad = good;
  bad.mapping.num_blocks = -1;
  CHECK_THROWS_WITH(validate(bad), Contains("num_blocks >= 0"));
  bad = good;
  bad.mapping.max_blocks = 1 << 20;
  bad.mapping.block_size = 1 << 12;  // 2^32 tokens per row: capacity() would overflow int
  CHECK_THROWS_WITH(validate(bad), Contains("max_blocks x block_size <= 2^31 - 1") && Contains("got 4294967296"));
  bad = good;
  bad.kv_heads = 0;
  CHECK_THROWS_WITH(validate(bad), Contains("num_kv_heads() > 0"));
  // device-resident arrays are not read on the host; sizes and base pointers still are checked
  auto dev = good;
  dev.where = specdec::memory_space::device;
  table[0] = 99;
  CHECK_NOTHROW(validate(dev));
  dev.k = nullptr;
  CHECK_THROWS_WITH(validate(dev), Contains("non-null k and v buffers"));
  // an empty batch needs nothing
  CHECK_NOTHROW(validate(L{nullptr, nullptr, {nullptr, nullptr, 0, BS, 0}, 0, H, D}));
}

namespace user {
// A user's own mapping in the plain offset(r, t, h) form, with a capacity and a validation hook:
// request r's rows are [r * cap + t] of a [requests * cap, 1, 4] buffer; the hook rejects odd caps.
struct strided_map {
  const std::int32_t* lens;
  int cap;
  std::int64_t offset(int r, int t, int) const { return (static_cast<std::int64_t>(r) * cap + t) * 4; }
  int length(int r) const { return lens[r]; }
  int capacity(int) const { return cap; }
};
void validate_kv_mapping(const strided_map& m, const specdec::kv_geometry&, specdec::memory_space,
                         std::string_view function, std::string_view argument) {
  specdec::require(m.cap % 2 == 0, function, argument, "an even cap", m.cap);
}
}  // namespace user

TEST_CASE("kv_cache over a user's mapping: rows, capacity and validation") {
  static_assert(specdec::kv_mapping<user::strided_map> && specdec::check_kv_mapping<user::strided_map>());
  using C = specdec::kv_cache<float, user::strided_map>;
  static_assert(specdec::writable_kv_layout<C>);
  static_assert(!specdec::writable_kv_layout<specdec::kv_cache<const float, user::strided_map>>);
  std::vector<float> k(2 * 6 * 4), v(k.size());
  std::vector<std::int32_t> lens{6, 2};
  const C good{k.data(), v.data(), {lens.data(), 6}, 2, 1, 4};
  CHECK_NOTHROW(validate(good));
  CHECK(good.k_row(1, 3, 0) == k.data() + 36);
  CHECK(good.v_row(1, 3, 0) == v.data() + 36);  // separate bases, same mapping
  lens[0] = 7;  // length > capacity: the generic check
  CHECK_THROWS_WITH(validate(good), Equals("specdec::my_op: argument 'cache': expected length(0) <= capacity(0) = 6, "
                                           "got 7"));
  lens[0] = 6;
  auto bad = good;
  bad.v = nullptr;  // null base
  CHECK_THROWS_WITH(validate(bad), Contains("non-null k and v buffers"));
  bad = good;
  bad.mapping.cap = 5;  // the user's hook
  CHECK_THROWS_WITH(validate(bad), Contains("an even cap") && Contains("got 5"));
  bad = good;
  bad.dim = 0;
  CHECK_THROWS_WITH(validate(bad), Contains("head_dim() > 0"));
  // a wrong base pointer for a non-empty request is caught even through a user mapping: a device
  // cache skips the row checks but the base check still runs
  bad = good;
  bad.k = nullptr;
  bad.where = specdec::memory_space::device;
  CHECK_THROWS_WITH(validate(bad), Contains("non-null k and v buffers"));
}
