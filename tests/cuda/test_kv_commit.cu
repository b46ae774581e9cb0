// kv_commit_in_place_batch(cuda{}) (array form) against the host backend (tests/kv/commit_batch_util.hpp):
// contiguous NHD / HND and block-table caches in device memory, several layers; device-side value
// errors reported in status with every cache untouched; graph capture.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "cuda/cuda_test_util.cuh"
#include "kv/block_table_util.hpp"
#include "kv/commit_batch_util.hpp"
#include "specdec/kv/paged_kv.hpp"
#include "specdec/core/bfloat16.hpp"
#include "specdec/core/half.hpp"
#include "specdec/kv/block_table_kv.hpp"
#include "specdec/kv/commit.cuh"
#include "specdec/kv/contiguous_kv.hpp"

using kv_test::commit_batch_case;
using kv_test::random_rows;
using specdec::memory_space;
using specdec_test::device_buffer;
using specdec_test::dv;

namespace {

constexpr int H = 2, CAP = 24, LAYERS = 2;

template <class T>
specdec::strided_view<T, 1> hv(std::vector<T>& x) {
  return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())});
}
struct device_arrays {
  device_buffer<std::int32_t> cl, ni, ac, na, nl, st;
  explicit device_arrays(const commit_batch_case& c)
      : cl(c.committed), ni(c.node_indptr), ac(c.accepted), na(c.num_accepted),
        nl(std::vector<std::int32_t>(c.committed.size(), -5)), st(std::vector<std::int32_t>{6, 6, 6}) {}
  template <class L>
  void launch(std::span<const L> layers, cudaStream_t s = nullptr) {
    specdec::kv_commit_in_place_batch(specdec::cuda{.stream = s}, layers, dv(cl), dv(ni), dv(ac), dv(na), dv(nl), dv(st));
  }
};

// Contiguous caches of order O, head_dim D: device commit vs host commit on copies of the same data.
template <class T, specdec::kv_order O>
void check_contiguous(int D, std::uint64_t seed) {
  specdec::philox_stream rng(seed, 0);
  const int R = 1 + static_cast<int>(rng.below(12));
  auto c = kv_test::random_commit_batch(R, 10, CAP, seed);
  const std::size_t elems = static_cast<std::size_t>(R) * CAP * H * D;
  std::vector<std::vector<T>> k, v;
  for (int l = 0; l < LAYERS; ++l) k.push_back(random_rows<T>(elems, rng)), v.push_back(random_rows<T>(elems, rng));
  std::vector<std::int32_t> lens(static_cast<std::size_t>(R), 0);
  device_buffer<std::int32_t> dlens(lens);
  std::vector<std::unique_ptr<device_buffer<T>>> dk, dv_;
  std::vector<specdec::contiguous_kv<T, O>> dlayers, hlayers;
  for (int l = 0; l < LAYERS; ++l) {
    dk.push_back(std::make_unique<device_buffer<T>>(k[l]));
    dv_.push_back(std::make_unique<device_buffer<T>>(v[l]));
    dlayers.push_back({dk[l]->data(), dv_[l]->data(), dlens.data(), R, CAP, H, D, memory_space::device});
    hlayers.push_back({k[l].data(), v[l].data(), lens.data(), R, CAP, H, D});
  }
  device_arrays d(c);
  d.launch(std::span<const specdec::contiguous_kv<T, O>>(dlayers));
  specdec_test::sync_check("kv_commit_in_place_batch");
  std::vector<std::int32_t> nl(static_cast<std::size_t>(R)), st(3);
  specdec::kv_commit_in_place_batch(specdec::host{}, std::span(hlayers), hv(c.committed), hv(c.node_indptr),
                                    hv(c.accepted), hv(c.num_accepted), hv(nl), hv(st));
  CHECK(d.st.download() == st);
  CHECK(d.nl.download() == nl);
  for (int l = 0; l < LAYERS; ++l) {
    const auto gk = dk[l]->download(), gv = dv_[l]->download();
    CHECK(std::memcmp(gk.data(), k[l].data(), elems * sizeof(T)) == 0);
    CHECK(std::memcmp(gv.data(), v[l].data(), elems * sizeof(T)) == 0);
  }
}

}  // namespace

TEST_CASE("cuda kv_commit_in_place_batch equals the host on contiguous caches", "[cuda][kv]") {
  for (std::uint64_t s = 1; s <= 6; ++s) {
    check_contiguous<float, specdec::kv_order::nhd>(64, s);
    check_contiguous<specdec::half, specdec::kv_order::hnd>(128, 100 + s);
    check_contiguous<specdec::bfloat16, specdec::kv_order::nhd>(200, 200 + s);  // not a multiple of the block
  }
}

TEST_CASE("cuda kv_commit_in_place_batch equals the host on a block-table cache", "[cuda][kv]") {
  for (std::uint64_t s = 1; s <= 4; ++s) {
    specdec::philox_stream rng(s, 9);
    const int R = 1 + static_cast<int>(rng.below(6)), D = 128;
    auto c = kv_test::random_commit_batch(R, 8, CAP, 50 + s);
    std::vector<std::int32_t> lens(static_cast<std::size_t>(R), CAP);
    kv_test::block_pool<specdec::bfloat16> a(rng, lens, CAP, H, D, 16);
    for (auto& x : a.k) x = specdec::bfloat16(rng.uniform());
    for (auto& x : a.v) x = specdec::bfloat16(rng.uniform());
    device_buffer<specdec::bfloat16> dk(a.k), dvv(a.v);
    device_buffer<std::int32_t> dtable(a.table), dlens(lens), dalloc(a.allocated);
    specdec::block_table_kv<specdec::bfloat16> dl{dk.data(), dvv.data(),
                                                  {dtable.data(), dlens.data(), a.max_blocks, a.block_size,
                                                   a.num_blocks, dalloc.data()},
                                                  R, H, D, memory_space::device};
    device_arrays d(c);
    d.launch(std::span<const specdec::block_table_kv<specdec::bfloat16>>(&dl, 1));
    specdec_test::sync_check("kv_commit_in_place_batch (block table)");
    const std::vector<specdec::block_table_kv<specdec::bfloat16>> hl{a.layout(lens.data())};
    std::vector<std::int32_t> nl(static_cast<std::size_t>(R)), st(3);
    specdec::kv_commit_in_place_batch(specdec::host{}, std::span(hl), hv(c.committed), hv(c.node_indptr),
                                      hv(c.accepted), hv(c.num_accepted), hv(nl), hv(st));
    CHECK(d.nl.download() == nl);
    const auto gk = dk.download(), gv = dvv.download();
    CHECK(std::memcmp(gk.data(), a.k.data(), a.k.size() * 2) == 0);
    CHECK(std::memcmp(gv.data(), a.v.data(), a.v.size() * 2) == 0);
  }
}

TEST_CASE("cuda kv_commit_from_buffer_batch equals the host (contiguous bf16 caches, two layers)", "[cuda][kv]") {
  for (std::uint64_t s = 1; s <= 4; ++s) {
    specdec::philox_stream rng(s, 13);
    const int R = 1 + static_cast<int>(rng.below(8)), D = 128;
    auto c = kv_test::random_commit_batch(R, 10, CAP, 400 + s);
    const int N = c.node_indptr.back();
    const std::size_t elems = static_cast<std::size_t>(R) * CAP * H * D, spec_elems = static_cast<std::size_t>(N) * H * D;
    // contiguous bf16, two layers
    std::vector<std::vector<specdec::bfloat16>> k, v, sk, sv;
    for (int l = 0; l < LAYERS; ++l) {
      k.push_back(random_rows<specdec::bfloat16>(elems, rng)), v.push_back(random_rows<specdec::bfloat16>(elems, rng));
      sk.push_back(random_rows<specdec::bfloat16>(spec_elems, rng)), sv.push_back(random_rows<specdec::bfloat16>(spec_elems, rng));
    }
    std::vector<std::int32_t> lens(static_cast<std::size_t>(R), 0);
    device_buffer<std::int32_t> dlens(lens);
    std::vector<std::unique_ptr<device_buffer<specdec::bfloat16>>> bufs;
    std::vector<specdec::contiguous_kv<specdec::bfloat16>> dl, hl;
    std::vector<specdec::strided_view<const specdec::bfloat16, 3>> dsk, dsv, hsk, hsv;
    for (int l = 0; l < LAYERS; ++l) {
      for (auto* h : {&k[l], &v[l], &sk[l], &sv[l]}) bufs.push_back(std::make_unique<device_buffer<specdec::bfloat16>>(*h));
      const auto* b4 = &bufs[bufs.size() - 4];
      dl.push_back({b4[0]->data(), b4[1]->data(), dlens.data(), R, CAP, H, D, memory_space::device});
      dsk.push_back(specdec::make_view<3>(static_cast<const specdec::bfloat16*>(b4[2]->data()), {N, H, D}, memory_space::device));
      dsv.push_back(specdec::make_view<3>(static_cast<const specdec::bfloat16*>(b4[3]->data()), {N, H, D}, memory_space::device));
      hl.push_back({k[l].data(), v[l].data(), lens.data(), R, CAP, H, D});
      hsk.push_back(specdec::make_view<3>(static_cast<const specdec::bfloat16*>(sk[l].data()), {N, H, D}));
      hsv.push_back(specdec::make_view<3>(static_cast<const specdec::bfloat16*>(sv[l].data()), {N, H, D}));
    }
    device_arrays d(c);
    specdec::kv_commit_from_buffer_batch(specdec::cuda{}, std::span<const specdec::contiguous_kv<specdec::bfloat16>>(dl),
                                         std::span(dsk), std::span(dsv), dv(d.cl), dv(d.ni), dv(d.ac), dv(d.na),
                                         dv(d.nl), dv(d.st));
    specdec_test::sync_check("kv_commit_from_buffer_batch");
    std::vector<std::int32_t> nl(static_cast<std::size_t>(R)), st(3);
    specdec::kv_commit_from_buffer_batch(specdec::host{}, std::span(hl), std::span(hsk), std::span(hsv), hv(c.committed),
                                         hv(c.node_indptr), hv(c.accepted), hv(c.num_accepted), hv(nl), hv(st));
    CHECK(d.st.download() == st);
    CHECK(d.nl.download() == nl);
    for (int l = 0; l < LAYERS; ++l) {
      const auto gk = bufs[4 * l]->download(), gv = bufs[4 * l + 1]->download();
      CHECK(std::memcmp(gk.data(), k[l].data(), elems * 2) == 0);
      CHECK(std::memcmp(gv.data(), v[l].data(), elems * 2) == 0);
    }
  }
}

TEST_CASE("cuda kv_commit_in_place_batch reports bad values and leaves every cache untouched", "[cuda][kv]") {
  specdec::philox_stream rng(4, 4);
  // Trees fit CAP - 1 slots, so only the case that means to exceed layer 1's capacity does.
  commit_batch_case c = kv_test::random_commit_batch(4, 6, CAP - 1, 21);
  while (c.num_accepted[1] < 2 || c.node_indptr[4] == c.node_indptr[3])
    c = kv_test::random_commit_batch(4, 6, CAP - 1, c.accepted.size() + 100);
  const int R = 4, D = 64;
  const std::size_t elems = static_cast<std::size_t>(R) * CAP * H * D;
  const auto k = random_rows<float>(elems, rng), v = random_rows<float>(elems, rng);
  // two layers over memory of their own (layers over one K or V are refused on the host since
  // session 61), with the same contents
  device_buffer<float> dk(k), dvv(v), dk1(k), dv1(v);
  device_buffer<std::int32_t> dlens(std::vector<std::int32_t>(R, 0));
  const std::vector<specdec::contiguous_kv<float>> layers{
      {dk.data(), dvv.data(), dlens.data(), R, CAP, H, D, memory_space::device},
      {dk1.data(), dv1.data(), dlens.data(), R, CAP - 1, H, D, memory_space::device}};  // layer 1: one slot less
  auto expect = [&](const commit_batch_case& bad, specdec::device_error e, std::int32_t request, std::int32_t index) {
    device_arrays d(bad);
    d.launch(std::span<const specdec::contiguous_kv<float>>(layers));
    specdec_test::sync_check("kv_commit_in_place_batch (bad values)");
    const auto s = d.st.download();
    CHECK(s[0] == static_cast<std::int32_t>(e));
    CHECK(s[1] == request);
    CHECK(s[2] == index);
    CHECK(dk.download() == k);
    CHECK(dvv.download() == v);
    CHECK(dk1.download() == k);
    CHECK(dv1.download() == v);
    CHECK(d.nl.download() == std::vector<std::int32_t>(R, -5));
  };
  const int b1 = c.node_indptr[1];
  {
    auto bad = c;
    std::swap(bad.accepted[b1], bad.accepted[b1 + 1]);
    expect(bad, specdec::device_error::accepted, 1, 1);
  }
  {
    auto bad = c;
    bad.num_accepted[2] = c.node_indptr[3] - c.node_indptr[2] + 1;
    expect(bad, specdec::device_error::accepted, 2, -1);
  }
  {
    auto bad = c;
    bad.committed[3] = CAP - (c.node_indptr[4] - c.node_indptr[3]);  // fits layer 0 (CAP), not layer 1
    expect(bad, specdec::device_error::capacity, 3, 1);
  }
  {
    auto bad = c;
    bad.committed[0] = -1;
    expect(bad, specdec::device_error::committed_length, 0, -1);
  }
}

// 35 layers: two groups of the layer-group launch (32 + 3), so the second group's check and copy
// kernels and a capacity error reported from it (layer 33) are exercised.
TEST_CASE("cuda kv_commit_in_place_batch over more layers than one launch group", "[cuda][kv]") {
  constexpr int layers_n = 35, R = 5, D = 64;
  static_assert(layers_n > specdec::detail::commit_group_layers<specdec::contiguous_kv<float>>);
  specdec::philox_stream rng(35, 35);
  auto c = kv_test::random_commit_batch(R, 10, CAP - 1, 3535);
  const std::size_t elems = static_cast<std::size_t>(R) * CAP * H * D;
  std::vector<std::vector<float>> k, v;
  for (int l = 0; l < layers_n; ++l) k.push_back(random_rows<float>(elems, rng)), v.push_back(random_rows<float>(elems, rng));
  std::vector<std::int32_t> lens(R, 0);
  device_buffer<std::int32_t> dlens(lens);
  std::vector<std::unique_ptr<device_buffer<float>>> dk, dv_;
  std::vector<specdec::contiguous_kv<float>> dl, hl;
  auto hk = k, hvv = v;
  for (int l = 0; l < layers_n; ++l) {
    dk.push_back(std::make_unique<device_buffer<float>>(k[l]));
    dv_.push_back(std::make_unique<device_buffer<float>>(v[l]));
    // layer 33 one slot short, for the capacity case below (the trees fit CAP - 1 slots)
    const int cap = l == 33 ? CAP - 1 : CAP;
    dl.push_back({dk[l]->data(), dv_[l]->data(), dlens.data(), R, cap, H, D, memory_space::device});
    hl.push_back({hk[l].data(), hvv[l].data(), lens.data(), R, cap, H, D});
  }
  {
    device_arrays d(c);
    d.launch(std::span<const specdec::contiguous_kv<float>>(dl));
    specdec_test::sync_check("kv_commit_in_place_batch (35 layers)");
    std::vector<std::int32_t> nl(R), st(3);
    specdec::kv_commit_in_place_batch(specdec::host{}, std::span(hl), hv(c.committed), hv(c.node_indptr),
                                      hv(c.accepted), hv(c.num_accepted), hv(nl), hv(st));
    CHECK(d.st.download() == st);
    CHECK(d.nl.download() == nl);
    int differ = 0;
    for (int l = 0; l < layers_n; ++l) differ += dk[l]->download() != hk[l] || dv_[l]->download() != hvv[l];
    CHECK(differ == 0);
  }
  {  // request 2's tree fits every layer but 33: reported from the second group, nothing written
    auto bad = c;
    bad.committed[2] = CAP - (c.node_indptr[3] - c.node_indptr[2]);
    for (int l = 0; l < layers_n; ++l) dk[l]->upload(k[l]), dv_[l]->upload(v[l]);
    device_arrays d(bad);
    d.launch(std::span<const specdec::contiguous_kv<float>>(dl));
    specdec_test::sync_check("kv_commit_in_place_batch (35 layers, capacity)");
    CHECK(d.st.download() == std::vector<std::int32_t>{static_cast<std::int32_t>(specdec::device_error::capacity), 2, 33});
    int touched = 0;
    for (int l = 0; l < layers_n; ++l) touched += dk[l]->download() != k[l] || dv_[l]->download() != v[l];
    CHECK(touched == 0);
  }
}

TEST_CASE("cuda kv_commit_in_place_batch is captured in a CUDA graph", "[cuda][kv]") {
  specdec::philox_stream rng(8, 8);
  auto c = kv_test::random_commit_batch(6, 8, CAP, 77);
  const int R = 6, D = 128;
  const std::size_t elems = static_cast<std::size_t>(R) * CAP * H * D;
  const auto k = random_rows<specdec::half>(elems, rng), v = random_rows<specdec::half>(elems, rng);
  device_buffer<specdec::half> dk(k), dvv(v);
  device_buffer<std::int32_t> dlens(std::vector<std::int32_t>(R, 0));
  const std::vector<specdec::contiguous_kv<specdec::half>> layers{
      {dk.data(), dvv.data(), dlens.data(), R, CAP, H, D, memory_space::device}};
  device_arrays d(c);
  auto hk = k, hvv = v;
  std::vector<std::int32_t> lens(R, 0), nl(R), st(3);
  const std::vector<specdec::contiguous_kv<specdec::half>> hl{{hk.data(), hvv.data(), lens.data(), R, CAP, H, D}};
  specdec::kv_commit_in_place_batch(specdec::host{}, std::span(hl), hv(c.committed), hv(c.node_indptr), hv(c.accepted),
                                    hv(c.num_accepted), hv(nl), hv(st));
  specdec_test::replay_in_graph(
      2, [&](cudaStream_t s) { d.launch(std::span<const specdec::contiguous_kv<specdec::half>>(layers), s); },
      [&] { dk.upload(k), dvv.upload(v), d.st.upload({3, 3, 3}); },
      [&] {
        CHECK(d.st.download() == std::vector<std::int32_t>{0, -1, -1});
        CHECK(d.nl.download() == nl);
        const auto gk = dk.download();
        CHECK(std::memcmp(gk.data(), hk.data(), elems * 2) == 0);
      });
}

// Session 61's review of the cuda forms' host checks against the host backend's: one buffer under two
// layers of different capacities (their pools start at one address but end apart), spec buffers over
// a layer's K or V (the host compares them with the rows it writes), and new_lengths over a paged
// layout's page table (read by the copy blocks while the new lengths are written).
TEST_CASE("cuda batched commits: layers sharing a start, spec buffers over a layer, outputs over a page table",
          "[cuda][kv][nogpu]") {
  auto c = kv_test::random_commit_batch(2, 4, CAP, 5);
  std::vector<float> k(2 * CAP * H * 64), v(k.size());
  std::vector<std::int32_t> lens(2, 0), nl(2), st(3);
  auto dev = [](std::vector<std::int32_t>& x) {
    return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())}, memory_space::device);
  };
  const specdec::contiguous_kv<float> full{k.data(), v.data(), lens.data(), 2, CAP, H, 64, memory_space::device};
  const std::vector<specdec::contiguous_kv<float>> shared{
      full, {k.data(), v.data(), lens.data(), 2, CAP - 1, H, 64, memory_space::device}};
  CHECK_THROWS_WITH(specdec::kv_commit_in_place_batch(specdec::cuda{}, std::span(shared), dev(c.committed),
                                                      dev(c.node_indptr), dev(c.accepted), dev(c.num_accepted), dev(nl),
                                                      dev(st)),
                    Catch::Contains("'layers[1]'") && Catch::Contains("apart from every other layer's"));
  const std::vector<specdec::contiguous_kv<float>> one{full};
  // two requests of two nodes, both accepted (a random batch may have no nodes, hence nothing to compare)
  std::vector<std::int32_t> committed{0, 0}, indptr{0, 2, 4}, accepted{0, 1, 0, 1}, num{2, 2};
  const int N = 4;
  const std::vector<specdec::strided_view<const float, 3>> in_pool{
      specdec::make_view<3>(static_cast<const float*>(k.data()), {N, H, 64}, memory_space::device)};
  std::vector<float> own(static_cast<std::size_t>(N) * H * 64);
  const std::vector<specdec::strided_view<const float, 3>> apart{
      specdec::make_view<3>(static_cast<const float*>(own.data()), {N, H, 64}, memory_space::device)};
  CHECK_THROWS_WITH(specdec::kv_commit_from_buffer_batch(specdec::cuda{}, std::span(one), std::span(in_pool),
                                                         std::span(apart), dev(committed), dev(indptr), dev(accepted),
                                                         dev(num), dev(nl), dev(st)),
                    Catch::Contains("'spec_k[0]'") && Catch::Contains("layers[0].k"));
  std::vector<float> kpool(4 * 8 * H * 64), vpool(kpool.size());
  std::vector<std::int32_t> page_indptr{0, 2, 4}, pages{0, 1, 2, 3};
  const std::vector<specdec::paged_kv<float>> paged{{kpool.data(), vpool.data(), page_indptr.data(), pages.data(),
                                                      lens.data(), 2, 4, 8, H, 64, memory_space::device}};
  CHECK_THROWS_WITH(specdec::kv_commit_in_place_batch(specdec::cuda{}, std::span(paged), dev(c.committed),
                                                      dev(c.node_indptr), dev(c.accepted), dev(c.num_accepted),
                                                      specdec::make_view<1>(page_indptr.data() + 1, {2}, memory_space::device),
                                                      dev(st)),
                    Catch::Contains("'new_lengths'") && Catch::Contains("page_indptr"));
}

TEST_CASE("cuda kv_commit_in_place_batch rejects host layouts and bad shapes before any CUDA call", "[cuda][kv][nogpu]") {
  auto c = kv_test::random_commit_batch(2, 4, CAP, 5);
  std::vector<float> k(2 * CAP * H * 64), v(k.size());
  std::vector<std::int32_t> lens(2, 0), nl(2), st(3);
  auto dev = [](std::vector<std::int32_t>& x) {
    return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())}, memory_space::device);
  };
  const std::vector<specdec::contiguous_kv<float>> host_layers{{k.data(), v.data(), lens.data(), 2, CAP, H, 64}};
  CHECK_THROWS_WITH(specdec::kv_commit_in_place_batch(specdec::cuda{}, std::span(host_layers), dev(c.committed),
                                                      dev(c.node_indptr), dev(c.accepted), dev(c.num_accepted), dev(nl),
                                                      dev(st)),
                    Catch::Contains("layers[0]") && Catch::Contains("device-accessible"));
  const std::vector<specdec::contiguous_kv<float>> dev_layers{
      {k.data(), v.data(), lens.data(), 2, CAP, H, 64, memory_space::device}};
  CHECK_THROWS_WITH(specdec::kv_commit_in_place_batch(specdec::cuda{}, std::span(dev_layers), dev(c.committed),
                                                      hv(c.node_indptr), dev(c.accepted), dev(c.num_accepted), dev(nl),
                                                      dev(st)),
                    Catch::Contains("node_indptr") && Catch::Contains("device-accessible"));
  const int N = c.node_indptr.back();
  std::vector<float> spec(static_cast<std::size_t>(N) * H * 64 + 1);
  const std::vector<specdec::strided_view<const float, 3>> host_spec{
      specdec::make_view<3>(static_cast<const float*>(spec.data()), {N, H, 64})};
  CHECK_THROWS_WITH(specdec::kv_commit_from_buffer_batch(specdec::cuda{}, std::span(dev_layers), std::span(host_spec),
                                                         std::span(host_spec), dev(c.committed), dev(c.node_indptr),
                                                         dev(c.accepted), dev(c.num_accepted), dev(nl), dev(st)),
                    Catch::Contains("spec_k[0]") && Catch::Contains("device-accessible"));
  std::vector<std::int32_t> st2(2);
  CHECK_THROWS_WITH(specdec::kv_commit_in_place_batch(specdec::cuda{}, std::span(dev_layers), dev(c.committed),
                                                      dev(c.node_indptr), dev(c.accepted), dev(c.num_accepted), dev(nl),
                                                      dev(st2)),
                    Catch::Contains("status"));
  // more kv heads than the copy grid's y dimension holds (65535)
  const std::vector<specdec::contiguous_kv<float>> wide{
      {k.data(), v.data(), lens.data(), 2, CAP, 70000, 64, memory_space::device}};
  CHECK_THROWS_WITH(specdec::kv_commit_in_place_batch(specdec::cuda{}, std::span(wide), dev(c.committed),
                                                      dev(c.node_indptr), dev(c.accepted), dev(c.num_accepted), dev(nl),
                                                      dev(st)),
                    Catch::Contains("num_kv_heads()") && Catch::Contains("65535"));
  // outputs over inputs: the device clears status before the check kernel reads node_indptr
  CHECK_THROWS_WITH(specdec::kv_commit_in_place_batch(specdec::cuda{}, std::span(dev_layers), dev(c.committed),
                                                      dev(c.node_indptr), dev(c.accepted), dev(c.num_accepted), dev(nl),
                                                      specdec::make_view<1>(c.node_indptr.data(), {3}, memory_space::device)),
                    Catch::Contains("'status'") && Catch::Contains("'node_indptr'"));
  CHECK_THROWS_WITH(specdec::kv_commit_in_place_batch(specdec::cuda{}, std::span(dev_layers), dev(c.committed),
                                                      dev(c.node_indptr), dev(c.accepted), dev(c.num_accepted),
                                                      dev(c.committed), dev(st)),
                    Catch::Contains("'new_lengths'") && Catch::Contains("'committed_lengths'"));
  // what the host backend compares row by row, on the device's side from the layers' memory: a layer
  // listed twice (the copy kernels run a group's layers concurrently) ...
  const std::vector<specdec::contiguous_kv<float>> twice{dev_layers[0], dev_layers[0]};
  CHECK_THROWS_WITH(specdec::kv_commit_in_place_batch(specdec::cuda{}, std::span(twice), dev(c.committed),
                                                      dev(c.node_indptr), dev(c.accepted), dev(c.num_accepted), dev(nl),
                                                      dev(st)),
                    Catch::Contains("'layers[1]'") && Catch::Contains("the same K memory"));
  // ... one layer's K buffer as another's V ...
  const std::vector<specdec::contiguous_kv<float>> crossed{
      dev_layers[0], {v.data(), k.data(), lens.data(), 2, CAP, H, 64, memory_space::device}};
  CHECK_THROWS_WITH(specdec::kv_commit_in_place_batch(specdec::cuda{}, std::span(crossed), dev(c.committed),
                                                      dev(c.node_indptr), dev(c.accepted), dev(c.num_accepted), dev(nl),
                                                      dev(st)),
                    Catch::Contains("'layers[1]'") && Catch::Contains("apart from every other layer's"));
  // ... and the outputs or index arrays inside a layer's K or V (the rows written are known only on the device)
  const auto in_k = specdec::make_view<1>(reinterpret_cast<std::int32_t*>(k.data() + 64), {2}, memory_space::device);
  const auto in_v = specdec::make_view<1>(reinterpret_cast<std::int32_t*>(v.data() + 64), {3}, memory_space::device);
  CHECK_THROWS_WITH(specdec::kv_commit_in_place_batch(specdec::cuda{}, std::span(dev_layers), dev(c.committed),
                                                      dev(c.node_indptr), dev(c.accepted), dev(c.num_accepted), in_k,
                                                      dev(st)),
                    Catch::Contains("'new_lengths'") && Catch::Contains("'layers[0].k'"));
  CHECK_THROWS_WITH(specdec::kv_commit_from_buffer_batch(specdec::cuda{}, std::span(dev_layers), std::span(host_spec),
                                                         std::span(host_spec), dev(c.committed), dev(c.node_indptr),
                                                         dev(c.accepted), dev(c.num_accepted), dev(nl), in_v),
                    Catch::Contains("'status'") && Catch::Contains("'layers[0].v'"));
  CHECK_THROWS_WITH(specdec::kv_commit_in_place_batch(
                        specdec::cuda{}, std::span(dev_layers),
                        specdec::make_view<1>(reinterpret_cast<const std::int32_t*>(v.data() + 128), {2},
                                              memory_space::device),
                        dev(c.node_indptr), dev(c.accepted), dev(c.num_accepted), dev(nl), dev(st)),
                    Catch::Contains("'committed_lengths'") && Catch::Contains("'layers[0].v'"));
}
