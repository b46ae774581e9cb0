// The array form of kv_commit_in_place_batch (verify_greedy_batch's output layout, the form the cuda
// backend takes; its device twin is tests/cuda/test_kv_commit.cu): equal to the span form bit for
// bit on random batches over contiguous NHD/HND, paged and block-table caches; bad values throw and
// leave every cache and output untouched.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "kv/block_table_util.hpp"
#include "kv/commit_batch_util.hpp"
#include "specdec/core/half.hpp"
#include "specdec/kv/block_table_kv.hpp"
#include "specdec/kv/commit.hpp"
#include "specdec/kv/contiguous_kv.hpp"

using kv_test::commit_batch_case;
using kv_test::random_rows;

namespace {

constexpr int H = 3, D = 7, CAP = 20, LAYERS = 3;

template <class T>
specdec::strided_view<T, 1> v1(std::vector<T>& x) {
  return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())});
}

template <class T, specdec::kv_order O>
void check_contiguous(std::uint64_t seed) {
  specdec::philox_stream rng(seed, 0);
  const int R = 1 + static_cast<int>(rng.below(9));
  auto c = kv_test::random_commit_batch(R, 8, CAP, seed);
  const std::size_t elems = static_cast<std::size_t>(R) * CAP * H * D;
  std::vector<std::vector<T>> k, v;
  for (int l = 0; l < LAYERS; ++l) k.push_back(random_rows<T>(elems, rng)), v.push_back(random_rows<T>(elems, rng));
  auto k_ref = k, v_ref = v;
  std::vector<std::int32_t> lens(static_cast<std::size_t>(R), 0);
  auto layouts = [&](std::vector<std::vector<T>>& kk, std::vector<std::vector<T>>& vv) {
    std::vector<specdec::contiguous_kv<T, O>> out;
    for (int l = 0; l < LAYERS; ++l) out.push_back({kk[l].data(), vv[l].data(), lens.data(), R, CAP, H, D});
    return out;
  };
  auto ref_layers = layouts(k_ref, v_ref);
  const auto want = specdec::kv_commit_in_place_batch(std::span(ref_layers), std::span<const std::int32_t>(c.committed),
                                                      std::span<const std::int32_t>(c.tree_sizes),
                                                      std::span<const std::int32_t>(c.accepted_indptr),
                                                      std::span<const std::int32_t>(c.accepted_packed),
                                                      std::span<const std::int32_t>(c.node_indptr),
                                                      std::span<const std::int32_t>(c.parents));
  auto my_layers = layouts(k, v);
  std::vector<std::int32_t> new_lengths(static_cast<std::size_t>(R), -5), status{8, 8, 8};
  specdec::kv_commit_in_place_batch(specdec::host{}, std::span(my_layers), v1(c.committed), v1(c.node_indptr),
                                    v1(c.accepted), v1(c.num_accepted), v1(new_lengths), v1(status));
  CHECK(new_lengths == want);
  CHECK(status == std::vector<std::int32_t>{0, -1, -1});
  for (int l = 0; l < LAYERS; ++l) {
    CHECK(std::memcmp(k[l].data(), k_ref[l].data(), elems * sizeof(T)) == 0);
    CHECK(std::memcmp(v[l].data(), v_ref[l].data(), elems * sizeof(T)) == 0);
  }
}

}  // namespace

TEST_CASE("kv_commit_in_place_batch (arrays, host) equals the span form on contiguous caches", "[kv][commit]") {
  for (std::uint64_t s = 1; s <= 12; ++s) {
    check_contiguous<float, specdec::kv_order::nhd>(s);
    check_contiguous<specdec::half, specdec::kv_order::hnd>(100 + s);
  }
}

TEST_CASE("kv_commit_in_place_batch (arrays, host) equals the span form on a block-table cache", "[kv][commit]") {
  for (std::uint64_t s = 1; s <= 6; ++s) {
    specdec::philox_stream rng(s, 9);
    const int R = 1 + static_cast<int>(rng.below(6));
    auto c = kv_test::random_commit_batch(R, 8, CAP, 50 + s);
    std::vector<std::int32_t> lens(static_cast<std::size_t>(R), CAP);
    kv_test::block_pool<float> a(rng, lens, CAP, H, D, 4);
    for (auto& x : a.k) x = rng.uniform();
    for (auto& x : a.v) x = rng.uniform();
    auto b = a;  // same table, same values: the reference
    const std::vector<specdec::block_table_kv<float>> la{a.layout(lens.data())}, lb{b.layout(lens.data())};
    const auto want = specdec::kv_commit_in_place_batch(std::span(lb), std::span<const std::int32_t>(c.committed),
                                                        std::span<const std::int32_t>(c.tree_sizes),
                                                        std::span<const std::int32_t>(c.accepted_indptr),
                                                        std::span<const std::int32_t>(c.accepted_packed));
    std::vector<std::int32_t> nl(static_cast<std::size_t>(R)), st(3);
    specdec::kv_commit_in_place_batch(specdec::host{}, std::span(la), v1(c.committed), v1(c.node_indptr),
                                      v1(c.accepted), v1(c.num_accepted), v1(nl), v1(st));
    CHECK(nl == want);
    CHECK(std::memcmp(a.k.data(), b.k.data(), a.k.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(a.v.data(), b.v.data(), a.v.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("kv_commit_in_place_batch (arrays, host) rejects bad values before writing anything", "[kv][commit]") {
  specdec::philox_stream rng(3, 3);
  commit_batch_case c = kv_test::random_commit_batch(4, 6, CAP, 21);
  while (c.num_accepted[1] < 2) c = kv_test::random_commit_batch(4, 6, CAP, c.accepted.size() + 100);
  const int R = 4;
  const std::size_t elems = static_cast<std::size_t>(R) * CAP * H * D;
  std::vector<float> k = random_rows<float>(elems, rng), v = random_rows<float>(elems, rng);
  const auto k0 = k, v0 = v;
  std::vector<std::int32_t> lens(R, 0);
  const std::vector<specdec::contiguous_kv<float>> layers{{k.data(), v.data(), lens.data(), R, CAP, H, D}};
  auto reject = [&](commit_batch_case bad, const std::string& what) {
    std::vector<std::int32_t> nl(R, -5), st{8, 8, 8};
    CHECK_THROWS_WITH(specdec::kv_commit_in_place_batch(specdec::host{}, std::span(layers), v1(bad.committed),
                                                        v1(bad.node_indptr), v1(bad.accepted), v1(bad.num_accepted),
                                                        v1(nl), v1(st)),
                      Catch::Contains(what));
    CHECK(k == k0);
    CHECK(v == v0);
    CHECK(nl == std::vector<std::int32_t>(R, -5));
    CHECK(st == std::vector<std::int32_t>{8, 8, 8});
  };
  const int b1 = c.node_indptr[1];
  {
    auto bad = c;
    std::swap(bad.accepted[b1], bad.accepted[b1 + 1]);
    reject(bad, "strictly increasing");
  }
  {
    auto bad = c;
    bad.num_accepted[2] = c.node_indptr[3] - c.node_indptr[2] + 1;
    reject(bad, "num_accepted[2]");
  }
  {
    auto bad = c;
    bad.committed[3] = CAP;
    if (c.node_indptr[4] > c.node_indptr[3]) reject(bad, "capacity");
  }
  {
    auto bad = c;
    bad.committed[0] = -1;
    reject(bad, "committed_lengths[0]");
  }
  {
    auto bad = c;
    bad.node_indptr[4] += 1;
    reject(bad, "accepted.extent(0)");
  }
  {  // outputs over inputs: new_lengths over committed_lengths (even in place), status over node_indptr
    auto cc = c;
    std::vector<std::int32_t> st{8, 8, 8};
    CHECK_THROWS_WITH(specdec::kv_commit_in_place_batch(specdec::host{}, std::span(layers), v1(cc.committed),
                                                        v1(cc.node_indptr), v1(cc.accepted), v1(cc.num_accepted),
                                                        v1(cc.committed), v1(st)),
                      Catch::Contains("'new_lengths'") && Catch::Contains("'committed_lengths'"));
    std::vector<std::int32_t> nl(R, -5);
    CHECK_THROWS_WITH(specdec::kv_commit_in_place_batch(specdec::host{}, std::span(layers), v1(cc.committed),
                                                        v1(cc.node_indptr), v1(cc.accepted), v1(cc.num_accepted), v1(nl),
                                                        specdec::make_view<1>(cc.node_indptr.data(), {3})),
                      Catch::Contains("'status'") && Catch::Contains("'node_indptr'"));
    CHECK(cc.committed == c.committed);
    CHECK(cc.node_indptr == c.node_indptr);
    CHECK(nl == std::vector<std::int32_t>(R, -5));
    CHECK(k == k0);
  }
}

TEST_CASE("kv_commit_from_buffer_batch (arrays, host) equals kv_commit_from_buffer per request", "[kv][commit]") {
  for (std::uint64_t s = 1; s <= 10; ++s) {
    specdec::philox_stream rng(s, 7);
    const int R = 1 + static_cast<int>(rng.below(7));
    auto c = kv_test::random_commit_batch(R, 8, CAP, 300 + s);
    const int N = c.node_indptr.back();
    const std::size_t elems = static_cast<std::size_t>(R) * CAP * H * D;
    std::vector<std::vector<float>> k, v, sk, sv;
    for (int l = 0; l < LAYERS; ++l) {
      k.push_back(random_rows<float>(elems, rng)), v.push_back(random_rows<float>(elems, rng));
      sk.push_back(random_rows<float>(static_cast<std::size_t>(N) * H * D, rng));
      sv.push_back(random_rows<float>(static_cast<std::size_t>(N) * H * D, rng));
    }
    auto k_ref = k, v_ref = v;
    std::vector<std::int32_t> lens(static_cast<std::size_t>(R), 0);
    std::vector<specdec::contiguous_kv<float>> mine, ref;
    std::vector<specdec::strided_view<const float, 3>> skv, svv;
    for (int l = 0; l < LAYERS; ++l) {
      mine.push_back({k[l].data(), v[l].data(), lens.data(), R, CAP, H, D});
      ref.push_back({k_ref[l].data(), v_ref[l].data(), lens.data(), R, CAP, H, D});
      skv.push_back(specdec::make_view<3>(static_cast<const float*>(sk[l].data()), {N, H, D}));
      svv.push_back(specdec::make_view<3>(static_cast<const float*>(sv[l].data()), {N, H, D}));
    }
    std::vector<std::int32_t> want(static_cast<std::size_t>(R));
    for (int r = 0; r < R; ++r) {  // the single-request form over each request's rows of the buffers
      const int b = c.node_indptr[r], n = c.node_indptr[r + 1] - b;
      std::vector<specdec::strided_view<const float, 3>> rk, rv;
      for (int l = 0; l < LAYERS; ++l) {
        rk.push_back(specdec::make_view<3>(static_cast<const float*>(sk[l].data()) + static_cast<std::size_t>(b) * H * D, {n, H, D}));
        rv.push_back(specdec::make_view<3>(static_cast<const float*>(sv[l].data()) + static_cast<std::size_t>(b) * H * D, {n, H, D}));
      }
      const std::vector<std::int32_t> acc(c.accepted.begin() + b, c.accepted.begin() + b + c.num_accepted[r]);
      want[r] = specdec::kv_commit_from_buffer(std::span(ref), r, c.committed[r], std::span(rk), std::span(rv),
                                               std::span<const std::int32_t>(acc));
    }
    std::vector<std::int32_t> nl(static_cast<std::size_t>(R), -5), st{8, 8, 8};
    specdec::kv_commit_from_buffer_batch(specdec::host{}, std::span(mine), std::span(skv), std::span(svv),
                                         v1(c.committed), v1(c.node_indptr), v1(c.accepted), v1(c.num_accepted), v1(nl),
                                         v1(st));
    CHECK(nl == want);
    CHECK(st == std::vector<std::int32_t>{0, -1, -1});
    for (int l = 0; l < LAYERS; ++l) {
      CHECK(k[l] == k_ref[l]);
      CHECK(v[l] == v_ref[l]);
    }
    // Room for the path is enough: a committed length that leaves fewer slots than the tree but
    // enough for the path is accepted; one slot fewer than the path is rejected, nothing written.
    if (c.num_accepted[0] > 0) {
      auto tight = c;
      tight.committed[0] = CAP - c.num_accepted[0] + 1;
      const auto k0 = k;
      CHECK_THROWS_WITH(specdec::kv_commit_from_buffer_batch(specdec::host{}, std::span(mine), std::span(skv),
                                                             std::span(svv), v1(tight.committed), v1(tight.node_indptr),
                                                             v1(tight.accepted), v1(tight.num_accepted), v1(nl), v1(st)),
                        Catch::Contains("committed_lengths[0] + num_accepted") && Catch::Contains("capacity"));
      CHECK(k == k0);
    }
  }
}

// The CUDA copy kernel's per-thread work (detail::commit_copy_columns, kv/commit.cuh's copy kernel
// calls it with first = threadIdx.x, step = the block size), run thread after thread on the host:
// each thread owns its columns, so this is what the kernel writes. It must equal the host backend
// in place and from a buffer, on trees long enough for accepted paths to span several batches of
// commit_rows_in_flight rows (the batched loads before stores rely on a later source never being an
// earlier destination).
TEST_CASE("the CUDA commit's copy (commit_copy_columns) equals the host commit, thread by thread", "[kv][commit]") {
  constexpr int cap = 64, threads = 4, dim = 9;  // 4 "threads" over 9 columns: uneven column sets
  std::int64_t long_paths = 0, moved = 0;
  for (std::uint64_t s = 1; s <= 40; ++s) {
    specdec::philox_stream rng(s, 21);
    const int R = 1 + static_cast<int>(rng.below(6));
    // Accepted paths as the array form takes them: any strictly increasing subset of the tree's
    // nodes (not only root paths of random trees, which are mostly short or on the diagonal), so
    // sources far above their destinations and paths of several batches are common.
    commit_batch_case c;
    for (int r = 0; r < R; ++r) {
      const int n = static_cast<int>(rng.below(41));
      c.committed.push_back(static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(cap - n + 1))));
      std::vector<std::int32_t> path;
      for (int i = 0; i < n; ++i)
        if (rng.below(3) != 0) path.push_back(i);
      long_paths += path.size() > specdec::detail::commit_rows_in_flight && path.back() >= static_cast<int>(path.size());
      for (int j = 0; j < n; ++j) c.accepted.push_back(j < static_cast<int>(path.size()) ? path[j] : -77);
      c.node_indptr.push_back(c.node_indptr.back() + n);
      c.num_accepted.push_back(static_cast<std::int32_t>(path.size()));
    }
    const int N = c.node_indptr.back();
    const std::size_t elems = static_cast<std::size_t>(R) * cap * H * dim;
    for (const bool from_buffer : {false, true}) {
      const auto k0 = random_rows<float>(elems, rng), v0 = random_rows<float>(elems, rng);
      const auto sk = random_rows<float>(static_cast<std::size_t>(std::max(N, 1)) * H * dim, rng);
      const auto sv = random_rows<float>(sk.size(), rng);
      std::vector<float> k_host = k0, v_host = v0, k_twin = k0, v_twin = v0;
      std::vector<std::int32_t> lens(static_cast<std::size_t>(R), 0), nl(static_cast<std::size_t>(R)), st(3);
      const std::vector<specdec::contiguous_kv<float>> host_layer{{k_host.data(), v_host.data(), lens.data(), R, cap, H, dim}};
      const specdec::contiguous_kv<float> twin_layer{k_twin.data(), v_twin.data(), lens.data(), R, cap, H, dim};
      const std::vector<specdec::strided_view<const float, 3>> skv{specdec::make_view<3>(sk.data(), {N, H, dim})},
          svv{specdec::make_view<3>(sv.data(), {N, H, dim})};
      if (from_buffer)
        specdec::kv_commit_from_buffer_batch(specdec::host{}, std::span(host_layer), std::span(skv), std::span(svv),
                                             v1(c.committed), v1(c.node_indptr), v1(c.accepted), v1(c.num_accepted),
                                             v1(nl), v1(st));
      else
        specdec::kv_commit_in_place_batch(specdec::host{}, std::span(host_layer), v1(c.committed), v1(c.node_indptr),
                                          v1(c.accepted), v1(c.num_accepted), v1(nl), v1(st));
      specdec::detail::commit_batch_args a;
      a.requests = R, a.nodes = N, a.committed = c.committed.data(), a.node_indptr = c.node_indptr.data();
      a.accepted = c.accepted.data(), a.num_accepted = c.num_accepted.data(), a.from_buffer = from_buffer;
      const specdec::detail::commit_spec<float> spec =
          from_buffer ? specdec::detail::commit_spec<float>{sk.data(), sv.data(), H * dim, dim, H * dim, dim}
                      : specdec::detail::commit_spec<float>{};
      for (int r = 0; r < R; ++r)
        for (int h = 0; h < H; ++h)
          for (int t = 0; t < threads; ++t) specdec::detail::commit_copy_columns(twin_layer, spec, a, r, h, t, threads);
      CHECK(k_twin == k_host);
      CHECK(v_twin == v_host);
      moved += k_host != k0;
    }
  }
  CHECK(long_paths > 50);  // paths of several batches, off the diagonal, were exercised
  CHECK(moved > 50);       // of 80 cases, most moved rows (the rest: paths on the diagonal, or none)
}
