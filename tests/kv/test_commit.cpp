// KV commit after acceptance (kv/commit.hpp): accepted tree rows land right after the committed prefix in
// every layer and head, for contiguous NHD/HND and paged layouts, in place or from a spec buffer; a full
// rejection and every failed commit leave all caches bit-identical (memcmp).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "specdec/core/half.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/kv/commit.hpp"
#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/kv/paged_kv.hpp"
#include "specdec/tree/token_tree.hpp"

namespace {

constexpr int R = 3, H = 2, D = 5, CAP = 24, LAYERS = 2, PAGE = 4;

// Owns the storage of LAYERS caches of one layout kind, filled with distinct random values.
template <class T, class Make>
struct caches {
  std::vector<std::vector<T>> k, v;
  std::vector<std::int32_t> lengths;
  std::vector<std::int32_t> page_indptr, page_indices;
  std::vector<decltype(std::declval<Make>()(k[0], v[0], lengths, page_indptr, page_indices))> layouts;
  caches(std::size_t elems, Make make, specdec::philox_stream& rng) {
    lengths.assign(R, 0);
    // paged: request r owns CAP / PAGE pages, scattered (reverse, interleaved) in a pool with spare pages
    const int per = CAP / PAGE;
    page_indptr = {0};
    for (int r = 0; r < R; ++r) {
      for (int p = 0; p < per; ++p) page_indices.push_back((R * per + 1) - (p * R + r));
      page_indptr.push_back(page_indptr.back() + per);
    }
    for (int l = 0; l < LAYERS; ++l) {
      k.emplace_back(elems);
      v.emplace_back(elems);
      for (auto& x : k.back()) x = T(rng.uniform() * 4.0f - 2.0f);
      for (auto& x : v.back()) x = T(rng.uniform() * 4.0f - 2.0f);
    }
    for (int l = 0; l < LAYERS; ++l) layouts.push_back(make(k[l], v[l], lengths, page_indptr, page_indices));
  }
  std::vector<std::vector<T>> snapshot_k() const { return k; }
  std::vector<std::vector<T>> snapshot_v() const { return v; }
  bool same_bits(const std::vector<std::vector<T>>& k0, const std::vector<std::vector<T>>& v0) const {
    for (int l = 0; l < LAYERS; ++l)
      if (std::memcmp(k[l].data(), k0[l].data(), k[l].size() * sizeof(T)) != 0 ||
          std::memcmp(v[l].data(), v0[l].data(), v[l].size() * sizeof(T)) != 0)
        return false;
    return true;
  }
};

template <class T>
auto nhd() {
  return [](std::vector<T>& k, std::vector<T>& v, std::vector<std::int32_t>& len, auto&, auto&) {
    return specdec::contiguous_kv<T, specdec::kv_order::nhd>{k.data(), v.data(), len.data(), R, CAP, H, D};
  };
}
template <class T>
auto hnd() {
  return [](std::vector<T>& k, std::vector<T>& v, std::vector<std::int32_t>& len, auto&, auto&) {
    return specdec::contiguous_kv<T, specdec::kv_order::hnd>{k.data(), v.data(), len.data(), R, CAP, H, D};
  };
}
template <class T>
auto paged() {
  return [](std::vector<T>& k, std::vector<T>& v, std::vector<std::int32_t>& len, std::vector<std::int32_t>& indptr,
            std::vector<std::int32_t>& idx) {
    return specdec::paged_kv<T>{k.data(), v.data(), indptr.data(), idx.data(), len.data(), R, R * (CAP / PAGE) + 2, PAGE, H, D};
  };
}
constexpr std::size_t contiguous_elems = static_cast<std::size_t>(R) * CAP * H * D;
constexpr std::size_t paged_elems = static_cast<std::size_t>(R * (CAP / PAGE) + 2) * PAGE * H * D;

specdec::token_tree random_tree(int n, specdec::philox_stream& rng) {
  specdec::token_tree t;
  for (int i = 0; i < n; ++i) t.add(static_cast<std::int32_t>(rng.below(100)), static_cast<int>(rng.below(static_cast<std::uint32_t>(i + 1))) - 1);
  return t;
}

template <class L>
std::vector<float> row_of(const L& l, bool key, int r, int t, int h) {
  const auto* p = key ? l.k_row(r, t, h) : l.v_row(r, t, h);
  std::vector<float> o;
  for (int d = 0; d < D; ++d) o.push_back(static_cast<float>(p[d]));
  return o;
}

template <class T, class Make>
void check_in_place(Make make, std::size_t elems, std::uint64_t seed) {
  specdec::philox_stream rng(seed, 1);
  for (int trial = 0; trial < 40; ++trial) {
    caches<T, Make> c(elems, make, rng);
    const int r = static_cast<int>(rng.below(R));
    const int n = 1 + static_cast<int>(rng.below(12));
    const int committed = static_cast<int>(rng.below(static_cast<std::uint32_t>(CAP - n + 1)));
    const auto tree = random_tree(n, rng);
    const auto path = tree.path(static_cast<int>(rng.below(static_cast<std::uint32_t>(n))));
    const auto k0 = c.snapshot_k(), v0 = c.snapshot_v();
    // expected rows, read before the commit
    std::vector<std::vector<std::vector<float>>> ek(LAYERS), ev(LAYERS);
    for (int l = 0; l < LAYERS; ++l)
      for (auto a : path)
        for (int h = 0; h < H; ++h) {
          ek[l].push_back(row_of(c.layouts[l], true, r, committed + a, h));
          ev[l].push_back(row_of(c.layouts[l], false, r, committed + a, h));
        }
    std::vector<std::vector<float>> prefix_before;
    for (int t = 0; t < committed; ++t) prefix_before.push_back(row_of(c.layouts[0], true, r, t, 1));
    const int len = specdec::kv_commit_in_place(std::span(c.layouts), r, committed, n, std::span(path), tree.parents());
    REQUIRE(len == committed + static_cast<int>(path.size()));
    for (int l = 0; l < LAYERS; ++l)
      for (std::size_t j = 0; j < path.size(); ++j)
        for (int h = 0; h < H; ++h) {
          REQUIRE(row_of(c.layouts[l], true, r, committed + static_cast<int>(j), h) == ek[l][j * H + h]);
          REQUIRE(row_of(c.layouts[l], false, r, committed + static_cast<int>(j), h) == ev[l][j * H + h]);
        }
    for (int t = 0; t < committed; ++t) REQUIRE(row_of(c.layouts[0], true, r, t, 1) == prefix_before[static_cast<std::size_t>(t)]);
    // other requests untouched: commit a full rejection on a copy of the pre-commit state and compare
    for (int o = 0; o < R; ++o) {
      if (o == r) continue;
      for (int l = 0; l < LAYERS; ++l)
        for (int t = 0; t < CAP; ++t)
          for (int h = 0; h < H; ++h) {
            const auto* now = c.layouts[l].k_row(o, t, h);
            const auto off = now - c.k[l].data();
            REQUIRE(std::memcmp(now, k0[l].data() + off, D * sizeof(T)) == 0);
          }
    }
  }
}

template <class T, class Make>
void check_from_buffer(Make make, std::size_t elems, std::uint64_t seed) {
  specdec::philox_stream rng(seed, 2);
  for (int trial = 0; trial < 30; ++trial) {
    caches<T, Make> c(elems, make, rng);
    const int r = static_cast<int>(rng.below(R));
    const int n = 1 + static_cast<int>(rng.below(30));  // the buffer may hold more nodes than the cache has room
    const auto tree = random_tree(n, rng);
    const auto path = tree.path(static_cast<int>(rng.below(static_cast<std::uint32_t>(n))));
    const int committed = static_cast<int>(rng.below(static_cast<std::uint32_t>(CAP - path.size() + 1)));
    std::vector<std::vector<T>> bk(LAYERS, std::vector<T>(static_cast<std::size_t>(n) * H * D)), bv = bk;
    std::vector<specdec::strided_view<const T, 3>> sk, sv;
    for (int l = 0; l < LAYERS; ++l) {
      for (auto& x : bk[l]) x = T(rng.uniform());
      for (auto& x : bv[l]) x = T(rng.uniform());
      sk.push_back(specdec::make_view<3>(static_cast<const T*>(bk[l].data()), {n, H, D}));
      sv.push_back(specdec::make_view<3>(static_cast<const T*>(bv[l].data()), {n, H, D}));
    }
    const int len = specdec::kv_commit_from_buffer(std::span(c.layouts), r, committed, std::span<const specdec::strided_view<const T, 3>>(sk),
                                                   std::span<const specdec::strided_view<const T, 3>>(sv), std::span(path), tree.parents());
    REQUIRE(len == committed + static_cast<int>(path.size()));
    for (int l = 0; l < LAYERS; ++l)
      for (std::size_t j = 0; j < path.size(); ++j)
        for (int h = 0; h < H; ++h) {
          REQUIRE(std::memcmp(c.layouts[l].k_row(r, committed + static_cast<int>(j), h),
                              bk[l].data() + (static_cast<std::size_t>(path[j]) * H + h) * D, D * sizeof(T)) == 0);
          REQUIRE(std::memcmp(c.layouts[l].v_row(r, committed + static_cast<int>(j), h),
                              bv[l].data() + (static_cast<std::size_t>(path[j]) * H + h) * D, D * sizeof(T)) == 0);
        }
  }
}

// Same property as above for the contiguous layouts: a zero-token acceptance must not touch any byte,
// in place, from a buffer or as a batch (an off-by-one in the row copy would rewrite committed rows).
template <class T, class Make>
void check_full_rejection_contiguous(Make make, std::uint64_t seed) {
  using L = decltype(make(std::declval<std::vector<T>&>(), std::declval<std::vector<T>&>(),
                          std::declval<std::vector<std::int32_t>&>(), std::declval<std::vector<std::int32_t>&>(),
                          std::declval<std::vector<std::int32_t>&>()));
  specdec::philox_stream rng(seed, seed);
  caches<T, Make> c(contiguous_elems, make, rng);
  const auto k0 = c.snapshot_k(), v0 = c.snapshot_v();
  const auto layers = std::span<const L>(c.layouts);
  const auto tree = specdec::token_tree::from_parents(std::vector<std::int32_t>{1, 2, 3, 4}, std::vector<std::int32_t>{-1, 0, -1, 2});
  const std::vector<std::int32_t> none;
  for (int r = 0; r < R; ++r) CHECK(specdec::kv_commit_in_place(layers, r, 7, 4, std::span(none), tree.parents()) == 7);
  std::vector<T> buf(4 * H * D, T(9.0f));
  const std::vector<specdec::strided_view<const T, 3>> sb(LAYERS, specdec::make_view<3>(static_cast<const T*>(buf.data()), {4, H, D}));
  CHECK(specdec::kv_commit_from_buffer(layers, 1, 7, std::span(sb), std::span(sb), std::span(none)) == 7);
  const std::vector<std::int32_t> committed{3, 5, 0}, sizes{4, 4, 4}, indptr{0, 0, 0, 0};
  CHECK(specdec::kv_commit_in_place_batch(layers, std::span(committed), std::span(sizes), std::span(indptr), std::span(none)) ==
        committed);
  CHECK(c.same_bits(k0, v0));
  CHECK(c.lengths == std::vector<std::int32_t>(R, 0));  // commit returns lengths; it never stores them
}

}  // namespace

TEST_CASE("in-place commit moves accepted rows after the prefix (contiguous NHD/HND, paged; float/half)") {
  check_in_place<float>(nhd<float>(), contiguous_elems, 1);
  check_in_place<float>(hnd<float>(), contiguous_elems, 2);
  check_in_place<float>(paged<float>(), paged_elems, 3);
  check_in_place<specdec::half>(nhd<specdec::half>(), contiguous_elems, 4);
  check_in_place<specdec::half>(paged<specdec::half>(), paged_elems, 5);
}

TEST_CASE("commit from a spec buffer copies accepted rows (contiguous NHD/HND, paged)") {
  check_from_buffer<float>(nhd<float>(), contiguous_elems, 6);
  check_from_buffer<float>(hnd<float>(), contiguous_elems, 7);
  check_from_buffer<specdec::half>(paged<specdec::half>(), paged_elems, 8);
}

TEST_CASE("full rejection and failed commits leave every cache bit-identical") {
  specdec::philox_stream rng(11, 11);
  auto m = paged<float>();
  caches<float, decltype(m)> c(paged_elems, m, rng);
  const auto k0 = c.snapshot_k(), v0 = c.snapshot_v();
  const auto layers = std::span<const specdec::paged_kv<float>>(c.layouts);
  const auto tree = specdec::token_tree::from_parents(std::vector<std::int32_t>{1, 2, 3, 4}, std::vector<std::int32_t>{-1, 0, -1, 2});
  const std::vector<std::int32_t> none;
  // full rejection: in place and from a buffer
  CHECK(specdec::kv_commit_in_place(layers, 1, 7, 4, std::span(none), tree.parents()) == 7);
  std::vector<float> buf(4 * H * D, 9.0f);
  const std::vector<specdec::strided_view<const float, 3>> sb(LAYERS, specdec::make_view<3>(static_cast<const float*>(buf.data()), {4, H, D}));
  const std::vector<specdec::strided_view<const float, 3>> sb_bad(LAYERS, specdec::make_view<3>(static_cast<const float*>(buf.data()), {4, H, D - 1}));
  CHECK(specdec::kv_commit_from_buffer(layers, 1, 7, std::span(sb), std::span(sb), std::span(none)) == 7);
  CHECK(c.same_bits(k0, v0));

  using Catch::Contains;
  const std::vector<std::int32_t> not_path{0, 3};   // 3's parent is 2, not 0
  const std::vector<std::int32_t> decreasing{2, 0};
  const std::vector<std::int32_t> out_of_tree{0, 4};
  const std::vector<std::int32_t> good{2, 3};
  REQUIRE_THROWS_WITH(specdec::kv_commit_in_place(layers, 1, 7, 4, std::span(not_path), tree.parents()),
                      Contains("specdec::kv_commit_in_place") && Contains("accepted[1]") && Contains("root path"));
  REQUIRE_THROWS_WITH(specdec::kv_commit_in_place(layers, 1, 7, 4, std::span(decreasing)), Contains("accepted[1]"));
  REQUIRE_THROWS_WITH(specdec::kv_commit_in_place(layers, 1, 7, 4, std::span(out_of_tree)), Contains("accepted[1]"));
  REQUIRE_THROWS_WITH(specdec::kv_commit_in_place(layers, 1, CAP - 3, 4, std::span(good)),
                      Contains("committed_length + tree_size") && Contains("capacity"));
  REQUIRE_THROWS_WITH(specdec::kv_commit_in_place(layers, R, 0, 4, std::span(good)), Contains("num_requests()"));
  REQUIRE_THROWS_WITH(specdec::kv_commit_in_place(layers, -1, 0, 4, std::span(good)), Contains("'request'"));
  REQUIRE_THROWS_WITH(specdec::kv_commit_in_place(layers, 0, -2, 4, std::span(good)), Contains("'committed_length'"));
  REQUIRE_THROWS_WITH(specdec::kv_commit_in_place(std::span<const specdec::paged_kv<float>>(), 0, 0, 4, std::span(good)),
                      Contains("'layers'"));
  REQUIRE_THROWS_WITH(specdec::kv_commit_from_buffer(layers, 1, 7, std::span(sb_bad), std::span(sb_bad), std::span(good)),
                      Contains("spec_k[0]") && Contains("shape"));
  REQUIRE_THROWS_WITH(specdec::kv_commit_from_buffer(layers, 1, 7, std::span(sb).first(1), std::span(sb), std::span(good)),
                      Contains("spec_k.size()"));
  REQUIRE_THROWS_WITH(specdec::kv_commit_from_buffer(layers, 1, CAP - 1, std::span(sb), std::span(sb), std::span(good)),
                      Contains("committed_length + accepted.size()"));
  // a bad layout (length beyond capacity) is rejected before anything is written
  c.lengths[2] = CAP + 1;
  REQUIRE_THROWS_WITH(specdec::kv_commit_in_place(layers, 0, 0, 4, std::span(good)), Contains("layers[0]"));
  c.lengths[2] = 0;
  // batch: the second request's path is invalid -> nothing at all is written, not even request 0's
  const std::vector<std::int32_t> committed{3, 5}, sizes{4, 4}, indptr{0, 2, 4}, acc{2, 3, 0, 3};
  const std::vector<std::int32_t> nodes_indptr{0, 4, 8};
  std::vector<std::int32_t> parents(tree.parents().begin(), tree.parents().end());
  parents.insert(parents.end(), tree.parents().begin(), tree.parents().end());
  REQUIRE_THROWS_WITH(specdec::kv_commit_in_place_batch(layers, std::span(committed), std::span(sizes), std::span(indptr),
                                                        std::span(acc), std::span(nodes_indptr), std::span(parents)),
                      Contains("specdec::kv_commit_in_place_batch") && Contains("root path"));
  const std::vector<std::int32_t> short_sizes{4};
  REQUIRE_THROWS_WITH(specdec::kv_commit_in_place_batch(layers, std::span(committed), std::span(short_sizes), std::span(indptr),
                                                        std::span(acc)),
                      Contains("tree_sizes.size()"));
  const std::vector<std::int32_t> bad_indptr{0, 2, 3};
  REQUIRE_THROWS_WITH(specdec::kv_commit_in_place_batch(layers, std::span(committed), std::span(sizes), std::span(bad_indptr),
                                                        std::span(acc)),
                      Contains("'accepted_indptr'"));
  const std::vector<std::int32_t> big{3, CAP};
  REQUIRE_THROWS_WITH(specdec::kv_commit_in_place_batch(layers, std::span(big), std::span(sizes), std::span(indptr),
                                                        std::span(acc)),
                      Contains("committed_lengths[1]") && Contains("capacity"));
  CHECK(c.same_bits(k0, v0));
}

TEST_CASE("full rejection leaves every contiguous cache bit-identical (NHD/HND; float/half)") {
  check_full_rejection_contiguous<float>(nhd<float>(), 21);
  check_full_rejection_contiguous<float>(hnd<float>(), 22);
  check_full_rejection_contiguous<specdec::half>(nhd<specdec::half>(), 23);
  check_full_rejection_contiguous<specdec::half>(hnd<specdec::half>(), 24);
}

TEST_CASE("batch in-place commit equals per-request commits") {
  specdec::philox_stream rng(12, 12);
  auto m = hnd<float>();
  caches<float, decltype(m)> a(contiguous_elems, m, rng);
  auto b = a;  // same contents; re-point b's layouts at b's own storage
  for (int l = 0; l < LAYERS; ++l) b.layouts[l] = m(b.k[l], b.v[l], b.lengths, b.page_indptr, b.page_indices);
  const std::vector<std::int32_t> committed{2, 0, 9}, sizes{6, 3, 8}, indptr{0, 2, 2, 5}, acc{1, 4, 0, 2, 7};
  const auto out = specdec::kv_commit_in_place_batch(std::span<const specdec::contiguous_kv<float, specdec::kv_order::hnd>>(a.layouts),
                                                     std::span(committed), std::span(sizes), std::span(indptr), std::span(acc));
  CHECK(out == std::vector<std::int32_t>{4, 0, 12});
  const auto bl = std::span<const specdec::contiguous_kv<float, specdec::kv_order::hnd>>(b.layouts);
  CHECK(specdec::kv_commit_in_place(bl, 0, 2, 6, std::span(acc).subspan(0, 2)) == 4);
  CHECK(specdec::kv_commit_in_place(bl, 2, 9, 8, std::span(acc).subspan(2, 3)) == 12);
  CHECK(b.same_bits(a.k, a.v));
}

namespace {
// A user's own writable layout (no validate_layout hook): request r owns `cap` NHD token slots.
struct user_slots {
  using value_type = float;
  float* k;
  float* v;
  const std::int32_t* lens;
  int n, cap;
  int num_requests() const { return n; }
  int num_kv_heads() const { return H; }
  int head_dim() const { return D; }
  int length(int r) const { return lens[r]; }
  int capacity(int) const { return cap; }
  float* k_row(int r, int t, int h) const { return k + ((r * cap + t) * H + h) * D; }
  float* v_row(int r, int t, int h) const { return v + ((r * cap + t) * H + h) * D; }
  specdec::memory_space space() const { return specdec::memory_space::host; }
};
static_assert(specdec::writable_kv_layout<user_slots>);
}  // namespace

TEST_CASE("commits reject malformed indptrs and request indices before writing anything") {
  using Catch::Contains;
  using L = specdec::contiguous_kv<float, specdec::kv_order::nhd>;
  specdec::philox_stream rng(31, 31);
  auto m = nhd<float>();
  caches<float, decltype(m)> c(contiguous_elems, m, rng);
  const auto k0 = c.snapshot_k(), v0 = c.snapshot_v();
  const auto layers = std::span<const L>(c.layouts);
  // two root children; accepting node 1 moves its rows down one slot (a real write)
  const std::vector<std::int32_t> parents{-1, -1}, committed{3}, sizes{2}, acc_indptr{0, 1}, acc{1};
  auto batch = [&](std::vector<std::int32_t> node_indptr, std::span<const std::int32_t> par, std::span<const std::int32_t> cl,
                   std::span<const std::int32_t> ts, std::span<const std::int32_t> ai, std::span<const std::int32_t> a) {
    return specdec::kv_commit_in_place_batch(layers, cl, ts, ai, a, std::span<const std::int32_t>(node_indptr), par);
  };
  const auto one = [&](std::vector<std::int32_t> node_indptr) {
    return batch(std::move(node_indptr), parents, committed, sizes, acc_indptr, acc);
  };
  // node_indptr must start at 0: {5, 7} passes "difference == tree size" but reads node_parents[5..7)
  REQUIRE_THROWS_WITH(one({5, 7}), Contains("'node_indptr'") && Contains("node_indptr[0] == 0") && Contains("got 5"));
  REQUIRE_THROWS_WITH(one({-3, -1}), Contains("node_indptr[0] == 0") && Contains("got -3"));
  // ... and end at node_parents.size(): two trees of 2 nodes but the parents of only one
  const std::vector<std::int32_t> committed2{3, 5}, sizes2{2, 2}, acc_indptr2{0, 1, 1};
  REQUIRE_THROWS_WITH(batch({0, 2, 4}, parents, committed2, sizes2, acc_indptr2, acc),
                      Contains("last value node_indptr[2] equal to node_parents.size() = 2") && Contains("got 4"));
  // parents without node_indptr would be ignored silently
  REQUIRE_THROWS_WITH(specdec::kv_commit_in_place_batch(layers, std::span(committed), std::span(sizes), std::span(acc_indptr),
                                                        std::span(acc), {}, std::span(parents)),
                      Contains("'node_indptr'") && Contains("when node_parents is given"));
  // request + 1 must not overflow
  const std::vector<std::int32_t> none;
  REQUIRE_THROWS_WITH(specdec::kv_commit_in_place(layers, INT32_MAX, 0, 0, std::span(none)),
                      Contains("layers[0].num_requests()") && Contains(">= 2147483648"));
  std::vector<float> buf(H * D, 1.0f);
  const std::vector<specdec::strided_view<const float, 3>> sb(LAYERS, specdec::make_view<3>(static_cast<const float*>(buf.data()), {1, H, D}));
  REQUIRE_THROWS_WITH(specdec::kv_commit_from_buffer(layers, INT32_MAX, 0, std::span(sb), std::span(sb), std::span(none)),
                      Contains("layers[0].num_requests()"));
  // a spec buffer with more nodes than int32 node indices can address (zero token stride: no memory)
  const std::int64_t ext[3] = {std::int64_t{1} << 31, H, D}, str[3] = {0, D, 1};
  const std::vector<specdec::strided_view<const float, 3>> huge(LAYERS, specdec::strided_view<const float, 3>(buf.data(), ext, str));
  REQUIRE_THROWS_WITH(specdec::kv_commit_from_buffer(layers, 0, 0, std::span(huge), std::span(huge), std::span(none)),
                      Contains("at most 2^31 - 1 tree nodes"));
  CHECK(c.same_bits(k0, v0));
  // the control: the same commit with a proper node_indptr writes
  CHECK(one({0, 2}) == std::vector<std::int32_t>{4});
  CHECK(!c.same_bits(k0, v0));
}

TEST_CASE("commits over a user's layout reject a length beyond its capacity before writing") {
  using Catch::Contains;
  constexpr int cap = 8;
  std::vector<float> k(2 * cap * H * D), v(k.size());
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i), v[i] = -static_cast<float>(i);
  const auto k0 = k, v0 = v;
  std::vector<std::int32_t> lens{2, cap + 1};  // request 1 claims a slot that is not its own
  const std::vector<user_slots> layers{{k.data(), v.data(), lens.data(), 2, cap}};
  const std::vector<std::int32_t> path{1};
  REQUIRE_THROWS_WITH(specdec::kv_commit_in_place(std::span(layers), 0, 2, 2, std::span(path)),
                      Contains("specdec::kv_commit_in_place") && Contains("'layers[0]'") &&
                          Contains("length(1) <= capacity(1) = 8") && Contains("got 9"));
  std::vector<float> buf(2 * H * D, 5.0f);
  const std::vector<specdec::strided_view<const float, 3>> sb{specdec::make_view<3>(static_cast<const float*>(buf.data()), {2, H, D})};
  REQUIRE_THROWS_WITH(specdec::kv_commit_from_buffer(std::span(layers), 0, 2, std::span(sb), std::span(sb), std::span(path)),
                      Contains("length(1) <= capacity(1)"));
  const std::vector<std::int32_t> cl2{2, 0}, ts2{2, 0}, ai2{0, 1, 1};
  REQUIRE_THROWS_WITH(specdec::kv_commit_in_place_batch(std::span(layers), std::span(cl2), std::span(ts2), std::span(ai2),
                                                        std::span(path)),
                      Contains("length(1) <= capacity(1)"));
  CHECK(std::memcmp(k.data(), k0.data(), k.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(v.data(), v0.data(), v.size() * sizeof(float)) == 0);
  lens[1] = cap;  // the control: a valid layout commits
  CHECK(specdec::kv_commit_in_place(std::span(layers), 0, 2, 2, std::span(path)) == 3);
  CHECK(std::memcmp(k.data(), k0.data(), k.size() * sizeof(float)) != 0);
}

namespace {
// user_slots whose rows from token `hole` on do not exist (k_row/v_row return null there): a layout
// with storage only for part of its capacity. validate_kv_layout sees only each request's corners.
struct holed_slots : user_slots {
  int hole;
  float* k_row(int r, int t, int h) const { return t >= hole ? nullptr : user_slots::k_row(r, t, h); }
  float* v_row(int r, int t, int h) const { return t >= hole ? nullptr : user_slots::v_row(r, t, h); }
};
static_assert(specdec::writable_kv_layout<holed_slots>);
}  // namespace

TEST_CASE("commits through a user's layout reject null rows they would move, before writing") {
  using Catch::Contains;
  constexpr int cap = 8;
  std::vector<float> k(cap * H * D), v(k.size());
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i), v[i] = -static_cast<float>(i);
  const auto k0 = k, v0 = v;
  std::vector<std::int32_t> lens{2};
  // Rows 2 and 3 exist, 4 on do not: a tree of 3 at committed length 2 puts node 2 in row 4.
  const std::vector<holed_slots> layers{{{k.data(), v.data(), lens.data(), 1, cap}, 4}};
  const std::vector<std::int32_t> par{-1, 0, 1}, deep{0, 1, 2}, shallow{0, 1};
  REQUIRE_THROWS_WITH(specdec::kv_commit_in_place(std::span(layers), 0, 2, 3, std::span(deep), std::span(par)),
                      Contains("'layers[0]'") && Contains("a non-null k_row") && Contains("token 4"));
  std::vector<float> buf(3 * H * D, 5.0f);
  const std::vector<specdec::strided_view<const float, 3>> sb{specdec::make_view<3>(static_cast<const float*>(buf.data()), {3, H, D})};
  REQUIRE_THROWS_WITH(specdec::kv_commit_from_buffer(std::span(layers), 0, 2, std::span(sb), std::span(sb), std::span(deep)),
                      Contains("token 4"));
  const std::vector<std::int32_t> cl{2}, ts{3}, ai{0, 3};
  REQUIRE_THROWS_WITH(specdec::kv_commit_in_place_batch(std::span(layers), std::span(cl), std::span(ts), std::span(ai),
                                                        std::span(deep)),
                      Contains("token 4"));
  CHECK(std::memcmp(k.data(), k0.data(), k.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(v.data(), v0.data(), v.size() * sizeof(float)) == 0);
  // The control: a path that stays in rows 2-3 commits.
  CHECK(specdec::kv_commit_in_place(std::span(layers), 0, 2, 3, std::span(shallow), std::span(par)) == 4);
  CHECK(specdec::kv_commit_from_buffer(std::span(layers), 0, 2, std::span(sb), std::span(sb), std::span(shallow)) == 4);
}

TEST_CASE("commits refuse layers that share rows (a layer listed twice, one buffer under two layers)") {
  using Catch::Contains;
  constexpr int cap = 8;
  std::vector<float> k(cap * H * D), v(k.size()), k2(k.size()), v2(k.size());
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i), v[i] = -static_cast<float>(i);
  const auto k0 = k, v0 = v;
  std::vector<std::int32_t> lens{0};
  const specdec::contiguous_kv<float> a{k.data(), v.data(), lens.data(), 1, cap, H, D};
  const specdec::contiguous_kv<float> b{k2.data(), v2.data(), lens.data(), 1, cap, H, D};
  const specdec::contiguous_kv<float> kv_swapped{v.data(), k2.data(), lens.data(), 1, cap, H, D};  // a's V as its K
  const std::vector<std::int32_t> par{-1, -1, 1}, acc{1, 2};
  for (const auto& layers : {std::vector{a, a}, std::vector{a, b, a}, std::vector{a, kv_swapped}}) {
    INFO(layers.size() << " layers");
    REQUIRE_THROWS_WITH(specdec::kv_commit_in_place(std::span(layers), 0, 0, 3, std::span(acc), std::span(par)),
                        Contains("rows apart from every other layer's"));
    const std::vector<std::int32_t> cl{0}, ts{3}, ai{0, 2};
    REQUIRE_THROWS_WITH(specdec::kv_commit_in_place_batch(std::span(layers), std::span(cl), std::span(ts), std::span(ai),
                                                          std::span(acc)),
                        Contains("rows apart from every other layer's"));
    std::vector<float> buf(3 * H * D, 5.0f);
    const auto sv = specdec::make_view<3>(static_cast<const float*>(buf.data()), {3, H, D});
    const std::vector<specdec::strided_view<const float, 3>> sb(layers.size(), sv);
    REQUIRE_THROWS_WITH(specdec::kv_commit_from_buffer(std::span(layers), 0, 0, std::span(sb), std::span(sb), std::span(acc)),
                        Contains("layers["));
  }
  CHECK(std::memcmp(k.data(), k0.data(), k.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(v.data(), v0.data(), v.size() * sizeof(float)) == 0);
  // The control: two layers of their own commit, row 1 -> 0 and row 2 -> 1.
  const std::vector two{a, b};
  CHECK(specdec::kv_commit_in_place(std::span(two), 0, 0, 3, std::span(acc), std::span(par)) == 2);
  CHECK(k[0] == k0[static_cast<std::size_t>(H * D)]);
}
