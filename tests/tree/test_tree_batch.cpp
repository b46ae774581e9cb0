#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "specdec/core/philox.hpp"
#include "specdec/tree/tree_batch.hpp"
#include "tree/tree_batch_util.hpp"

using specdec::mask_word;
using specdec::memory_space;
using specdec_test::tree_batch_case;

namespace {

template <class T>
specdec::strided_view<T, 1> v1(std::vector<T>& x, memory_space s = memory_space::host) {
  return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())}, s);
}

// Outputs of one host build, poisoned beforehand so that an element the build misses shows.
struct host_out {
  std::vector<std::int32_t> depths, positions;
  std::vector<std::int64_t> mask_indptr;
  std::vector<mask_word> mask;
  std::vector<std::int32_t> status{77, 77, 77};
  host_out(const tree_batch_case& c, std::size_t extra_words = 0)
      : depths(c.parents.size(), -7), positions(c.parents.size(), -7), mask_indptr(c.committed.size() + 1, -7),
        mask(c.mask.size() + extra_words, 0xDEADBEEFDEADBEEFull) {}
};

void build(tree_batch_case& c, host_out& o) {
  specdec::build_tree_batch(specdec::host{}, v1(c.node_indptr), v1(c.parents), v1(c.committed), v1(o.depths),
                            v1(o.positions), v1(o.mask_indptr), v1(o.mask), v1(o.status));
}

}  // namespace

TEST_CASE("tree_batch: ancestor_mask_word and tree_node_depth (the device kernel's per-element functions) "
          "match the row-copy construction", "[tree][tree_batch]") {
  specdec::philox_stream rng(11, 0);
  for (int n : {1, 2, 63, 64, 65, 130, 300}) {
    for (int shape = 0; shape < 4; ++shape) {
      const auto par = specdec_test::random_parents(n, shape, rng);
      const int w = specdec::words_per_row(n);
      std::vector<mask_word> rows(static_cast<std::size_t>(n) * w, ~mask_word{0});
      specdec::detail::write_ancestor_rows(par.data(), n, rows.data(), w);
      const auto tree = specdec::token_tree::from_parents(std::vector<std::int32_t>(par.size(), 1), par);
      for (int i = 0; i < n; ++i) {
        CHECK(specdec::detail::tree_node_depth(par.data(), i) == tree.depth(i));
        for (int k = 0; k < w; ++k) CHECK(specdec::detail::ancestor_mask_word(par.data(), i, k) == rows[i * w + k]);
      }
      // The host rows are the token_tree's mask.
      const auto m = tree.ancestor_mask();
      for (int i = 0; i < n; ++i)
        for (int k = 0; k < w; ++k) CHECK(m.row(i)[k] == rows[i * w + k]);
    }
  }
}

TEST_CASE("tree_batch: the per-element walks end on a parent outside [-1, i)", "[tree][tree_batch]") {
  // The device kernel walks parents it has not validated yet (it reports them separately): a
  // self-parent, a forward parent and a parent below -1 must end the walk, not loop or read outside.
  const std::vector<std::int32_t> par{-1, 1, 5, -9, 0};
  CHECK(specdec::detail::tree_node_depth(par.data(), 1) == 0);
  CHECK(specdec::detail::tree_node_depth(par.data(), 2) == 0);
  CHECK(specdec::detail::tree_node_depth(par.data(), 3) == 0);
  CHECK(specdec::detail::tree_node_depth(par.data(), 4) == 1);
  CHECK(specdec::detail::ancestor_mask_word(par.data(), 1, 0) == 0b10u);
  CHECK(specdec::detail::ancestor_mask_word(par.data(), 2, 0) == 0b100u);
  CHECK(specdec::detail::ancestor_mask_word(par.data(), 3, 0) == 0b1000u);
  CHECK(specdec::detail::ancestor_mask_word(par.data(), 4, 0) == 0b10001u);
}

TEST_CASE("tree_batch: host build_tree_batch equals token_tree_batch on random ragged batches", "[tree][tree_batch]") {
  for (int R : {0, 1, 3, 17, 64}) {
    for (int max_nodes : {1, 16, 70, 300}) {
      auto c = specdec_test::random_tree_batch(R, max_nodes, 100 + R * 7 + max_nodes);
      host_out o(c, 5);
      build(c, o);
      CHECK(o.depths == c.depths);
      CHECK(o.positions == c.positions);
      CHECK(o.mask_indptr == c.mask_indptr);
      CHECK(std::equal(c.mask.begin(), c.mask.end(), o.mask.begin()));
      for (std::size_t k = c.mask.size(); k < o.mask.size(); ++k) CHECK(o.mask[k] == 0xDEADBEEFDEADBEEFull);
      CHECK(o.status == std::vector<std::int32_t>{0, -1, -1});
    }
  }
}

TEST_CASE("tree_batch: root_and_nodes puts each request's root row first, from the plain trees", "[tree][tree_batch]") {
  // against token_tree_batch over the rooted trees (expected_rooted), committed lengths from 1 (the
  // root at position 0, an empty cache) up; and the node rows equal the plain build's
  for (int R : {0, 1, 3, 17, 64}) {
    for (int max_nodes : {1, 16, 70, 300}) {
      auto c = specdec_test::random_tree_batch(R, max_nodes, 900 + R * 7 + max_nodes);
      if (R > 1) c.committed[1] = 1;
      c.finish();
      const auto want = specdec_test::expected_rooted(c);
      const auto N = c.parents.size(), rows = N + static_cast<std::size_t>(R);
      std::vector<std::int32_t> depths(rows, -7), positions(rows, -7), status{77, 77, 77};
      std::vector<std::int64_t> mask_indptr(static_cast<std::size_t>(R) + 1, -7);
      std::vector<mask_word> mask(want.mask.size() + 3, 0xDEADBEEFDEADBEEFull);
      specdec::build_tree_batch(specdec::host{}, v1(c.node_indptr), v1(c.parents), v1(c.committed), v1(depths),
                                v1(positions), v1(mask_indptr), v1(mask), v1(status),
                                specdec::tree_batch_rows::root_and_nodes);
      CHECK(depths == want.depths);
      CHECK(positions == want.positions);
      CHECK(mask_indptr == want.mask_indptr);
      CHECK(std::equal(want.mask.begin(), want.mask.end(), mask.begin()));
      for (std::size_t k = want.mask.size(); k < mask.size(); ++k) CHECK(mask[k] == 0xDEADBEEFDEADBEEFull);
      CHECK(status == std::vector<std::int32_t>{0, -1, -1});
      for (int r = 0; r < R; ++r) {  // request r's rows from node_indptr[r] + r: the root, then the plain build's
        const auto o = static_cast<std::size_t>(c.node_indptr[static_cast<std::size_t>(r)] + r);
        CHECK(positions[o] == c.committed[static_cast<std::size_t>(r)] - 1);
        for (auto i = c.node_indptr[static_cast<std::size_t>(r)]; i < c.node_indptr[static_cast<std::size_t>(r) + 1]; ++i)
          CHECK(positions[static_cast<std::size_t>(i + r + 1)] == c.positions[static_cast<std::size_t>(i)]);
      }
      // the per-element functions over rooted_parents (the CUDA kernel's walk) give the same rows
      for (int r = 0; r < R; ++r) {
        const auto lo = c.node_indptr[static_cast<std::size_t>(r)], n = c.node_indptr[static_cast<std::size_t>(r) + 1] - lo;
        const specdec::detail::rooted_parents rp{c.parents.data() + lo};
        const int w = specdec::words_per_row(n + 1);
        for (int j = 0; j <= n; ++j)
          for (int k = 0; k < w; ++k)
            REQUIRE(specdec::detail::ancestor_mask_word(rp, j, k) ==
                    want.mask[static_cast<std::size_t>(want.mask_indptr[static_cast<std::size_t>(r)] + j * w + k)]);
      }
    }
  }
  // the outputs must hold N + R rows
  auto c = specdec_test::random_tree_batch(3, 5, 4);
  std::vector<std::int32_t> short_rows(c.parents.size()), status(3);
  std::vector<std::int64_t> mi(4);
  std::vector<mask_word> mask(1000);
  CHECK_THROWS_WITH(specdec::build_tree_batch(specdec::host{}, v1(c.node_indptr), v1(c.parents), v1(c.committed),
                                              v1(short_rows), v1(short_rows), v1(mi), v1(mask), v1(status),
                                              specdec::tree_batch_rows::root_and_nodes),
                    Catch::Matchers::Contains("'depths'"));
}

TEST_CASE("tree_batch: host build_tree_batch rejects bad values naming them, outputs untouched", "[tree][tree_batch]") {
  auto c = specdec_test::random_tree_batch(4, 20, 5);
  while (c.node_indptr[2] - c.node_indptr[1] < 3) c = specdec_test::random_tree_batch(4, 20, c.parents.size() + 9);
  auto expect_reject = [&](tree_batch_case bad, const std::string& what) {
    host_out o(bad);
    const host_out fresh(bad);
    CHECK_THROWS_WITH(build(bad, o), Catch::Contains(what));
    CHECK(o.depths == fresh.depths);
    CHECK(o.positions == fresh.positions);
    CHECK(o.mask == fresh.mask);
    CHECK(o.status == fresh.status);
  };
  {
    auto bad = c;
    bad.parents[c.node_indptr[1] + 2] = 2;  // its own index
    expect_reject(bad, "parents[" + std::to_string(c.node_indptr[1] + 2) + "] (request 1)");
  }
  {
    auto bad = c;
    bad.parents[c.node_indptr[1] + 1] = -2;
    expect_reject(bad, "a local parent in [-1, 1)");
  }
  {
    auto bad = c;
    bad.committed[3] = 0;
    expect_reject(bad, "committed_lengths[3]");
  }
  {
    auto bad = c;
    bad.committed[1] = std::numeric_limits<std::int32_t>::max();  // depth >= 1 somewhere in request 1?
    bool deep = false;
    for (int i = c.node_indptr[1]; i < c.node_indptr[2]; ++i) deep |= c.parents[i] >= 0;
    if (deep) expect_reject(bad, "positions are int32");
  }
  {
    auto bad = c;
    bad.node_indptr[2] = bad.node_indptr[1] - 1;
    expect_reject(bad, "non-decreasing node_indptr");
  }
  {
    auto bad = c;
    bad.node_indptr.back() += 1;
    expect_reject(bad, "parents.extent(0)");
  }
  {  // deterministic: request 0 fine, request 1's positions overflow at depth 1 (no depth may be written)
    tree_batch_case d;
    d.node_indptr = {0, 2, 4};
    d.parents = {-1, 0, -1, 0};
    d.committed = {5, std::numeric_limits<std::int32_t>::max()};
    d.mask.assign(4, 0);
    expect_reject(d, "committed_lengths[1]");
    d.committed[1] = std::numeric_limits<std::int32_t>::max() - 1;  // control: depth 1 still fits
    host_out o(d);
    build(d, o);
    CHECK(o.positions == std::vector<std::int32_t>{5, 6, std::numeric_limits<std::int32_t>::max() - 1,
                                                   std::numeric_limits<std::int32_t>::max()});
  }
  {  // a mask one word short
    host_out o(c);
    o.mask.pop_back();
    CHECK_THROWS_WITH(build(c, o), Catch::Contains("the ancestor masks' words"));
  }
}

TEST_CASE("tree_batch: shapes, strides and memory spaces are checked before anything runs", "[tree][tree_batch]") {
  auto c = specdec_test::random_tree_batch(3, 10, 8);
  host_out o(c);
  auto call = [&](auto ni, auto pa, auto cl, auto de, auto po, auto mi, auto ma, auto st) {
    specdec::build_tree_batch(specdec::host{}, ni, pa, cl, de, po, mi, ma, st);
  };
  CHECK_THROWS_WITH(call(v1(c.node_indptr), v1(c.parents), v1(c.committed), v1(o.depths), v1(o.positions),
                         v1(o.mask_indptr), v1(o.mask), v1(o.status, memory_space::device)),
                    Catch::Contains("status") && Catch::Contains("host-accessible"));
  std::vector<std::int32_t> short_depths(o.depths.size() - 1);
  if (!o.depths.empty())
    CHECK_THROWS_WITH(call(v1(c.node_indptr), v1(c.parents), v1(c.committed), v1(short_depths), v1(o.positions),
                           v1(o.mask_indptr), v1(o.mask), v1(o.status)),
                      Catch::Contains("depths") && Catch::Contains("extent(0) =="));
  std::vector<std::int32_t> st4(4);
  CHECK_THROWS_WITH(call(v1(c.node_indptr), v1(c.parents), v1(c.committed), v1(o.depths), v1(o.positions),
                         v1(o.mask_indptr), v1(o.mask), v1(st4)),
                    Catch::Contains("status"));
  std::vector<std::int32_t> strided(2 * c.parents.size() + 2);
  auto sv = specdec::strided_view<std::int32_t, 1>(strided.data(), {static_cast<std::int64_t>(c.parents.size())}, {2});
  if (c.parents.size() > 1)
    CHECK_THROWS_WITH(call(v1(c.node_indptr), sv, v1(c.committed), v1(o.depths), v1(o.positions), v1(o.mask_indptr),
                           v1(o.mask), v1(o.status)),
                      Catch::Contains("parents") && Catch::Contains("unit stride"));
  // outputs apart from each other and from the inputs: the host writes positions before it reads a
  // request's parents again for its mask, so positions over parents read past the mask
  if (!c.parents.empty()) {
    std::vector<std::int32_t> pa = c.parents;
    CHECK_THROWS_WITH(call(v1(c.node_indptr), v1(pa), v1(c.committed), v1(o.depths), v1(pa), v1(o.mask_indptr),
                           v1(o.mask), v1(o.status)),
                      Catch::Contains("'parents'") && Catch::Contains("disjoint from 'positions'"));
    CHECK(pa == c.parents);
    CHECK_THROWS_WITH(call(v1(c.node_indptr), v1(c.parents), v1(c.committed), v1(o.depths), v1(o.depths),
                           v1(o.mask_indptr), v1(o.mask), v1(o.status)),
                      Catch::Contains("'positions'") && Catch::Contains("disjoint from 'depths'"));
  }
  // inputs may share memory: they are only read (committed_lengths = node_indptr[1..] here)
  {
    specdec_test::tree_batch_case one;
    one.add({-1, 0}, 2);
    one.finish();
    host_out e(one);
    REQUIRE(one.node_indptr == std::vector<std::int32_t>{0, 2});
    call(v1(one.node_indptr), v1(one.parents), specdec::make_view<1>(one.node_indptr.data() + 1, {1}), v1(e.depths),
         v1(e.positions), v1(e.mask_indptr), v1(e.mask), v1(e.status));
    CHECK(e.status == std::vector<std::int32_t>{0, -1, -1});
    CHECK(e.positions == std::vector<std::int32_t>{2, 3});
  }
}

TEST_CASE("device_status decodes the device report and names the problem", "[tree][tree_batch]") {
  const std::array<std::int32_t, 3> ok{0, -1, -1}, par{3, 1, 4};
  CHECK(specdec::device_status::from(ok).ok());
  CHECK_NOTHROW(specdec::device_status::from(ok).throw_if_error("f"));
  const auto s = specdec::device_status::from(par);
  CHECK_FALSE(s.ok());
  CHECK(s.error == specdec::device_error::parent);
  CHECK(s.message() == "parents[4] of request 1 is outside [-1, 4) (parent before node)");
  CHECK_THROWS_WITH(s.throw_if_error("specdec::my_step"), Catch::Contains("specdec::my_step") &&
                                                               Catch::Contains("parents[4] of request 1"));
}
