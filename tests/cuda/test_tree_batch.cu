// build_tree_batch(cuda{}) against the host backend and token_tree_batch (tests/tree/tree_batch_util.hpp):
// random ragged batches, trees up to 1024 nodes and one beyond the shared-memory walk (> 4096),
// batch up to 64; device-side value errors reported in status with outputs in bounds; graph capture;
// tree_batch_rows::root_and_nodes against the host and token_tree_batch over the rooted trees.
#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "cuda/cuda_test_util.cuh"
#include "specdec/tree/tree_batch.cuh"
#include "tree/tree_batch_util.hpp"

using specdec::mask_word;
using specdec::memory_space;
using specdec_test::device_buffer;
using specdec_test::dv;
using specdec_test::tree_batch_case;

namespace {

template <class T>
specdec::strided_view<T, 1> hv(std::vector<T>& x) {
  return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())});
}

constexpr mask_word poison = 0xDEADBEEFDEADBEEFull;

// One device build of case c into a mask of c.mask.size() + extra words (poisoned first).
struct device_run {
  device_buffer<std::int32_t> ni, pa, cl, de, po, st;
  device_buffer<std::int64_t> mi;
  device_buffer<mask_word> ma;
  device_run(const tree_batch_case& c, std::int64_t extra)
      : ni(c.node_indptr), pa(c.parents), cl(c.committed), de(std::vector<std::int32_t>(c.parents.size(), -7)),
        po(std::vector<std::int32_t>(c.parents.size(), -7)), st(std::vector<std::int32_t>{55, 55, 55}),
        mi(std::vector<std::int64_t>(c.committed.size() + 1, -7)),
        ma(std::vector<mask_word>(static_cast<std::size_t>(static_cast<std::int64_t>(c.mask.size()) + extra), poison)) {}
  void launch(cudaStream_t s = nullptr) {
    specdec::build_tree_batch(specdec::cuda{.stream = s}, dv(ni), dv(pa), dv(cl), dv(de), dv(po), dv(mi), dv(ma),
                              dv(st));
  }
  specdec::device_status status() const {
    const auto v = st.download();
    return specdec::device_status::from(std::span<const std::int32_t, 3>(v.data(), 3));
  }
};

void check_equal_to_host(tree_batch_case c) {
  device_run d(c, 3);
  d.launch();
  specdec_test::sync_check("build_tree_batch");
  CHECK(d.st.download() == std::vector<std::int32_t>{0, -1, -1});
  CHECK(d.de.download() == c.depths);
  CHECK(d.po.download() == c.positions);
  CHECK(d.mi.download() == c.mask_indptr);
  const auto m = d.ma.download();
  CHECK(std::equal(c.mask.begin(), c.mask.end(), m.begin()));
  for (std::size_t k = c.mask.size(); k < m.size(); ++k) CHECK(m[k] == poison);
  // The host backend on the same arrays gives the same bits (both equal token_tree_batch).
  std::vector<std::int32_t> de(c.parents.size()), po(c.parents.size()), st(3);
  std::vector<std::int64_t> mi(c.committed.size() + 1);
  std::vector<mask_word> ma(c.mask.size());
  specdec::build_tree_batch(specdec::host{}, hv(c.node_indptr), hv(c.parents), hv(c.committed), hv(de), hv(po), hv(mi),
                            hv(ma), hv(st));
  CHECK(ma == c.mask);
}

}  // namespace

TEST_CASE("cuda build_tree_batch equals the host and token_tree_batch on random ragged batches", "[cuda][tree]") {
  for (int R : {0, 1, 5, 64}) {
    for (int max_nodes : {1, 64, 65, 300, 1024}) {
      DYNAMIC_SECTION("R " << R << " max nodes " << max_nodes) {
        check_equal_to_host(specdec_test::random_tree_batch(R, max_nodes, 1000 + R * 13 + max_nodes));
      }
    }
  }
  SECTION("a tree beyond the shared-memory walk (5000 nodes) next to small ones, and a 1024-node chain") {
    specdec::philox_stream rng(3, 0);
    tree_batch_case c;
    c.add(specdec_test::random_parents(5000, 3, rng), 17);
    c.add(specdec_test::random_parents(4096, 0, rng), 1);
    c.add({}, 5);
    c.add(specdec_test::random_parents(1024, 1, rng), 100);
    c.add(specdec_test::random_parents(3, 2, rng), 2);
    c.finish();
    check_equal_to_host(c);
  }
}

TEST_CASE("cuda build_tree_batch reports bad values in status and stays in bounds", "[cuda][tree]") {
  auto c = specdec_test::random_tree_batch(6, 40, 77);
  while (c.node_indptr[3] - c.node_indptr[2] < 4) c = specdec_test::random_tree_batch(6, 40, c.parents.size() + 1);
  auto expect = [](tree_batch_case bad, specdec::device_error e, std::int32_t request, std::int32_t index,
                   std::int64_t extra = 3) {
    device_run d(bad, extra);
    d.launch();
    specdec_test::sync_check("build_tree_batch (bad values)");
    const auto s = d.status();
    CHECK(s.error == e);
    CHECK(s.request == request);
    CHECK(s.index == index);
    CHECK_THROWS_WITH(s.throw_if_error("step"), Catch::Contains("step"));
    return d.ma.download();
  };
  const std::int32_t b2 = c.node_indptr[2];
  {
    auto bad = c;
    bad.parents[b2 + 3] = 3;
    expect(bad, specdec::device_error::parent, 2, 3);
  }
  {
    auto bad = c;
    bad.parents[b2 + 2] = -5;
    expect(bad, specdec::device_error::parent, 2, 2);
  }
  {
    auto bad = c;
    bad.committed[4] = 0;
    const auto m = expect(bad, specdec::device_error::committed_length, 4, -1);
    for (auto w : m) CHECK(w == poison);  // the build pass never ran
  }
  {
    auto bad = c;
    bad.node_indptr[3] = bad.node_indptr[2] - 1;
    expect(bad, specdec::device_error::node_indptr, 2, -1);
  }
  {
    auto bad = c;
    bad.node_indptr[0] = 1;
    expect(bad, specdec::device_error::node_indptr, 0, -1);
  }
  {  // one word short: nothing written
    const auto m = expect(c, specdec::device_error::mask_capacity, -1, -1, -1);
    for (auto w : m) CHECK(w == poison);
  }
  {  // a chain in request 0 deep enough to overflow committed + depth
    tree_batch_case o;
    o.add({-1, 0, 1}, std::numeric_limits<std::int32_t>::max() - 1);  // no finish(): token_tree_batch rejects it
    device_run d(o, 3);                                                 // the mask's 3 words
    d.launch();
    specdec_test::sync_check("build_tree_batch (overflow)");
    const auto s = d.status();
    CHECK(s.error == specdec::device_error::position_overflow);
    CHECK(s.request == 0);
    CHECK(s.index == 2);
  }
}

TEST_CASE("cuda build_tree_batch is captured in a CUDA graph and replays", "[cuda][tree]") {
  auto c = specdec_test::random_tree_batch(8, 100, 9);
  device_run d(c, 0);
  specdec_test::replay_in_graph(
      3, [&](cudaStream_t s) { d.launch(s); },
      [&] {
        d.ma.upload(std::vector<mask_word>(d.ma.size(), poison));
        d.st.upload({9, 9, 9});
      },
      [&] {
        CHECK(d.ma.download() == c.mask);
        CHECK(d.po.download() == c.positions);
        CHECK(d.st.download() == std::vector<std::int32_t>{0, -1, -1});
      });
}

TEST_CASE("cuda build_tree_batch with root_and_nodes equals the host and the rooted trees", "[cuda][tree]") {
  specdec::philox_stream rng(5, 0);
  for (int round = 0; round < 6; ++round) {
    tree_batch_case c = round < 5 ? specdec_test::random_tree_batch(1 + round * 12, 1 + round * 200, 70 + round)
                                  : tree_batch_case{};
    if (round == 5) {  // one beyond the shared-memory walk, an empty tree, a root at position 0
      c.add(specdec_test::random_parents(4500, 3, rng), 9);
      c.add({}, 1);
      c.add(specdec_test::random_parents(7, 0, rng), 1);
      c.finish();
    }
    const auto want = specdec_test::expected_rooted(c);
    const auto rows = c.parents.size() + c.committed.size();
    device_buffer<std::int32_t> ni(c.node_indptr), pa(c.parents), cl(c.committed), de(std::vector<std::int32_t>(rows, -7)),
        po(std::vector<std::int32_t>(rows, -7)), st(std::vector<std::int32_t>{55, 55, 55});
    device_buffer<std::int64_t> mi(std::vector<std::int64_t>(c.committed.size() + 1, -7));
    device_buffer<mask_word> ma(std::vector<mask_word>(want.mask.size() + 2, poison));
    specdec::build_tree_batch(specdec::cuda{}, dv(ni), dv(pa), dv(cl), dv(de), dv(po), dv(mi), dv(ma), dv(st),
                              specdec::tree_batch_rows::root_and_nodes);
    specdec_test::sync_check("build_tree_batch root_and_nodes");
    CHECK(st.download() == std::vector<std::int32_t>{0, -1, -1});
    CHECK(de.download() == want.depths);
    CHECK(po.download() == want.positions);
    CHECK(mi.download() == want.mask_indptr);
    const auto m = ma.download();
    CHECK(std::equal(want.mask.begin(), want.mask.end(), m.begin()));
    CHECK(m[want.mask.size()] == poison);
  }
}

TEST_CASE("cuda build_tree_batch rejects host memory and bad shapes before any CUDA call", "[cuda][tree][nogpu]") {
  auto c = specdec_test::random_tree_batch(3, 10, 4);
  std::vector<std::int32_t> de(c.parents.size()), po(c.parents.size()), st(3);
  std::vector<std::int64_t> mi(c.committed.size() + 1);
  std::vector<mask_word> ma(c.mask.size());
  auto dev = [](auto v) {
    return specdec::strided_view<typename decltype(v)::element_type, 1>(v.data(), {v.extent(0)}, {1},
                                                                        memory_space::device);
  };
  // Host memory where the cuda policy needs device memory: named, thrown on the host.
  CHECK_THROWS_WITH(specdec::build_tree_batch(specdec::cuda{}, hv(c.node_indptr), dev(hv(c.parents)),
                                              dev(hv(c.committed)), dev(hv(de)), dev(hv(po)), dev(hv(mi)), dev(hv(ma)),
                                              dev(hv(st))),
                    Catch::Contains("node_indptr") && Catch::Contains("device-accessible"));
  std::vector<std::int32_t> st2(2);
  CHECK_THROWS_WITH(specdec::build_tree_batch(specdec::cuda{}, dev(hv(c.node_indptr)), dev(hv(c.parents)),
                                              dev(hv(c.committed)), dev(hv(de)), dev(hv(po)), dev(hv(mi)), dev(hv(ma)),
                                              dev(hv(st2))),
                    Catch::Contains("status") && Catch::Contains("extent(0) == 3"));
  std::vector<std::int64_t> mi_short(c.committed.size());
  CHECK_THROWS_WITH(specdec::build_tree_batch(specdec::cuda{}, dev(hv(c.node_indptr)), dev(hv(c.parents)),
                                              dev(hv(c.committed)), dev(hv(de)), dev(hv(po)), dev(hv(mi_short)),
                                              dev(hv(ma)), dev(hv(st))),
                    Catch::Contains("mask_indptr"));
  // root_and_nodes needs N + R rows of depths and positions
  CHECK_THROWS_WITH(specdec::build_tree_batch(specdec::cuda{}, dev(hv(c.node_indptr)), dev(hv(c.parents)),
                                              dev(hv(c.committed)), dev(hv(de)), dev(hv(po)), dev(hv(mi)), dev(hv(ma)),
                                              dev(hv(st)), specdec::tree_batch_rows::root_and_nodes),
                    Catch::Contains("depths"));
}
