// kv_importance_batch(cuda{}) (TokenSwift Eq. 2 on the device, kv/partial_kv.cuh) against the host's
// kv_importance per request: fp32, half and bfloat16 caches, NHD and paged layouts, GQA 1/4/8,
// lengths 0 .. 3000 in one batch; scores equal to the host's up to float summation order (the summed
// queries are the same floats; the dot products are summed in another order) and never written past
// a request's length; a length above the scores' columns reported in status; graph capture;
// arguments refused before any CUDA call. partial_kv_select_batch(cuda{}) (TokenSwift's partial-cache
// selection) against the host backend on random scores with ties, NaN and infinities, per kv head
// and shared: the same lists, nothing written past the shown slots; status; graph replay; refusals.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cuda/cuda_test_util.cuh"
#include "specdec/core/philox.hpp"
#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/kv/paged_kv.hpp"
#include "specdec/kv/partial_kv.cuh"

using specdec::memory_space;
using specdec_test::device_buffer;
using specdec_test::dv;

namespace {

template <class T>
struct importance_case {
  int R, cap, hkv, hq, d;
  std::vector<std::int32_t> lens;
  std::vector<T> k, v, q;  // NHD [R, cap, hkv, d]; q [R, hq, d]
  importance_case(int R_, int cap_, int hkv_, int hq_, int d_, std::uint64_t seed)
      : R(R_), cap(cap_), hkv(hkv_), hq(hq_), d(d_) {
    specdec::philox_stream rng(seed, 3);
    for (int r = 0; r < R; ++r) lens.push_back(r == 0 ? 0 : static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(cap + 1))));
    k.resize(static_cast<std::size_t>(R) * cap * hkv * d);
    v.resize(k.size());
    q.resize(static_cast<std::size_t>(R) * hq * d);
    for (auto& x : k) x = specdec::from_float<T>(2.0f * rng.uniform() - 1.0f);
    for (auto& x : v) x = specdec::from_float<T>(2.0f * rng.uniform() - 1.0f);
    for (auto& x : q) x = specdec::from_float<T>(2.0f * rng.uniform() - 1.0f);
  }
  //! The host's scores [R, hkv, cols] (kv_importance per request), unwritten entries 7.
  std::vector<float> host_scores(int cols) {
    std::vector<float> s(static_cast<std::size_t>(R) * hkv * cols, 7.0f);
    const specdec::contiguous_kv<T> cache{k.data(), v.data(), lens.data(), R, cap, hkv, d};
    for (int r = 0; r < R; ++r)
      specdec::kv_importance(specdec::host{}, specdec::make_view<2>(q.data() + static_cast<std::size_t>(r) * hq * d, {hq, d}),
                             cache, r, specdec::make_view<2>(s.data() + static_cast<std::size_t>(r) * hkv * cols, {hkv, cols}));
    return s;
  }
};

//! Device scores equal the host's within float rounding of a D-term dot product, and the entries past
//! each request's length keep the marker 7.
template <class T>
void check_scores(const importance_case<T>& c, int cols, const std::vector<float>& want, const std::vector<float>& got) {
  int far = 0, untouched = 0;
  for (int r = 0; r < c.R; ++r)
    for (int h = 0; h < c.hkv; ++h)
      for (int i = 0; i < cols; ++i) {
        const auto at = (static_cast<std::size_t>(r) * c.hkv + h) * cols + i;
        if (i >= c.lens[r]) {
          untouched += got[at] == 7.0f;
          continue;
        }
        // |error| <= D * eps * sum |q_sum| |k|: bounded by D * eps * (group * D) for entries in [-1, 1)
        const float tol = 1e-6f * static_cast<float>(c.d) * static_cast<float>(c.hq / c.hkv) * 4.0f;
        far += std::fabs(got[at] - want[at]) > tol;
      }
  std::int64_t past = 0;
  for (int r = 0; r < c.R; ++r) past += static_cast<std::int64_t>(cols - c.lens[r]) * c.hkv;
  CHECK(far == 0);
  CHECK(untouched == past);
}

}  // namespace

TEMPLATE_TEST_CASE("cuda kv_importance_batch equals kv_importance per request", "[cuda][kv][partial]", float,
                   specdec::half, specdec::bfloat16) {
  for (const int hq : {2, 8, 16}) {
    const int R = 5, cap = 3000, hkv = 2, d = 128;
    importance_case<TestType> c(R, cap, hkv, hq, d, static_cast<std::uint64_t>(hq));
    const auto want = c.host_scores(cap);
    device_buffer<TestType> dk(c.k), dvv(c.v), dq(c.q);
    device_buffer<std::int32_t> dl(c.lens), st(std::vector<std::int32_t>{5, 5, 5});
    device_buffer<float> ds(std::vector<float>(want.size(), 7.0f));
    const specdec::contiguous_kv<TestType> cache{dk.data(), dvv.data(), dl.data(), R, cap, hkv, d, memory_space::device};
    specdec::kv_importance_batch(specdec::cuda{}, specdec::make_view<3>(dq.data(), {R, hq, d}, memory_space::device), cache,
                                 specdec::make_view<3>(ds.data(), {R, hkv, cap}, memory_space::device), dv(st));
    specdec_test::sync_check("kv_importance_batch");
    CHECK(st.download() == std::vector<std::int32_t>{0, -1, -1});
    check_scores(c, cap, want, ds.download());
  }
}

TEST_CASE("cuda kv_importance_batch reads a paged cache as the host reads the contiguous one", "[cuda][kv][partial]") {
  const int R = 3, cap = 1000, hkv = 4, hq = 16, d = 64, page = 16;
  importance_case<specdec::half> c(R, cap, hkv, hq, d, 9);
  const auto want = c.host_scores(cap);
  // The same rows in pages: request r's token t at page indices[r][t / page], slot t % page, pages shuffled.
  const int pages_per = (cap + page - 1) / page, pages = R * pages_per;
  std::vector<std::int32_t> order(static_cast<std::size_t>(pages));
  for (int i = 0; i < pages; ++i) order[static_cast<std::size_t>(i)] = (i * 7919) % pages;
  std::vector<std::int32_t> indptr{0}, indices;
  std::vector<specdec::half> pk(static_cast<std::size_t>(pages) * page * hkv * d), pv(pk.size());
  for (int r = 0; r < R; ++r) {
    const int used = (c.lens[r] + page - 1) / page;
    for (int p = 0; p < used; ++p) {
      const int phys = order[static_cast<std::size_t>(r * pages_per + p)];
      indices.push_back(phys);
      for (int s = 0; s < page && p * page + s < c.lens[r]; ++s)
        for (int e = 0; e < hkv * d; ++e) {
          const auto src = ((static_cast<std::size_t>(r) * cap + p * page + s) * hkv) * d + e;
          const auto dst = ((static_cast<std::size_t>(phys) * page + s) * hkv) * d + e;
          pk[dst] = c.k[src];
          pv[dst] = c.v[src];
        }
    }
    indptr.push_back(static_cast<std::int32_t>(indices.size()));
  }
  if (indices.empty()) indices.push_back(0);
  device_buffer<specdec::half> dk(pk), dvv(pv), dq(c.q);
  device_buffer<std::int32_t> dip(indptr), did(indices), dl(c.lens), st(std::vector<std::int32_t>{5, 5, 5});
  device_buffer<float> ds(std::vector<float>(want.size(), 7.0f));
  const specdec::paged_kv<specdec::half> cache{dk.data(), dvv.data(), dip.data(), did.data(), dl.data(), R,
                                               pages, page, hkv, d, memory_space::device};
  specdec::kv_importance_batch(specdec::cuda{}, specdec::make_view<3>(dq.data(), {R, hq, d}, memory_space::device), cache,
                               specdec::make_view<3>(ds.data(), {R, hkv, cap}, memory_space::device), dv(st));
  specdec_test::sync_check("kv_importance_batch (paged)");
  CHECK(st.download() == std::vector<std::int32_t>{0, -1, -1});
  check_scores(c, cap, want, ds.download());
}

TEST_CASE("cuda kv_importance_batch reports a length above the scores' columns and writes nothing for it",
          "[cuda][kv][partial]") {
  const int R = 3, cap = 600, hkv = 2, hq = 4, d = 64, cols = 500;
  importance_case<float> c(R, cap, hkv, hq, d, 4);
  c.lens = {100, 550, 200};
  device_buffer<float> dk(c.k), dvv(c.v), dq(c.q);
  device_buffer<std::int32_t> dl(c.lens), st(std::vector<std::int32_t>{5, 5, 5});
  device_buffer<float> ds(std::vector<float>(static_cast<std::size_t>(R) * hkv * cols, 7.0f));
  const specdec::contiguous_kv<float> cache{dk.data(), dvv.data(), dl.data(), R, cap, hkv, d, memory_space::device};
  specdec::kv_importance_batch(specdec::cuda{}, specdec::make_view<3>(dq.data(), {R, hq, d}, memory_space::device), cache,
                               specdec::make_view<3>(ds.data(), {R, hkv, cols}, memory_space::device), dv(st));
  specdec_test::sync_check("kv_importance_batch (length)");
  const auto s = st.download();
  CHECK(s == std::vector<std::int32_t>{static_cast<std::int32_t>(specdec::device_error::length), 1, -1});
  const auto got = ds.download();
  CHECK(std::all_of(got.begin() + hkv * cols, got.begin() + 2 * hkv * cols, [](float x) { return x == 7.0f; }));
  CHECK(got[0] != 7.0f);  // request 0 was scored
}

TEST_CASE("cuda kv_importance_batch is captured in a CUDA graph and replays", "[cuda][kv][partial]") {
  const int R = 4, cap = 2048, hkv = 8, hq = 32, d = 128;
  importance_case<specdec::bfloat16> c(R, cap, hkv, hq, d, 12);
  device_buffer<specdec::bfloat16> dk(c.k), dvv(c.v), dq(c.q);
  device_buffer<std::int32_t> dl(c.lens), st(std::vector<std::int32_t>{5, 5, 5});
  device_buffer<float> ds(std::vector<float>(static_cast<std::size_t>(R) * hkv * cap, 7.0f));
  const specdec::contiguous_kv<specdec::bfloat16> cache{dk.data(), dvv.data(), dl.data(), R, cap, hkv, d, memory_space::device};
  int round = 0;
  specdec_test::replay_in_graph(
      3,
      [&](cudaStream_t s) {
        specdec::kv_importance_batch(specdec::cuda{.stream = s}, specdec::make_view<3>(dq.data(), {R, hq, d}, memory_space::device),
                                     cache, specdec::make_view<3>(ds.data(), {R, hkv, cap}, memory_space::device), dv(st));
      },
      [&] {
        importance_case<specdec::bfloat16> next(R, cap, hkv, hq, d, static_cast<std::uint64_t>(100 + round++));
        c.q = next.q;
        dq.upload(c.q);
        ds.upload(std::vector<float>(ds.size(), 7.0f));
      },
      [&] { check_scores(c, cap, c.host_scores(cap), ds.download()); });
}

TEST_CASE("cuda kv_importance_batch refuses host memory and too many kv_heads x head_dim before any CUDA call",
          "[cuda][kv][partial][nogpu]") {
  std::vector<float> k(4 * 2 * 64), q(2 * 4 * 64), s(2 * 2 * 4);
  std::vector<std::int32_t> lens{4, 4}, st(3);
  const specdec::contiguous_kv<float> dev_cache{k.data(), k.data(), lens.data(), 2, 4, 2, 64, memory_space::device};
  const specdec::contiguous_kv<float> host_cache{k.data(), k.data(), lens.data(), 2, 4, 2, 64};
  const auto qd = specdec::make_view<3>(q.data(), {2, 4, 64}, memory_space::device);
  const auto sd = specdec::make_view<3>(s.data(), {2, 2, 4}, memory_space::device);
  const auto std_ = specdec::make_view<1>(st.data(), {3}, memory_space::device);
  CHECK_THROWS_WITH(specdec::kv_importance_batch(specdec::cuda{}, qd, host_cache, sd, std_),
                    Catch::Contains("cache") && Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(specdec::kv_importance_batch(specdec::cuda{}, specdec::make_view<3>(q.data(), {2, 4, 64}), dev_cache, sd, std_),
                    Catch::Contains("'q'") && Catch::Contains("device-accessible"));
  // 128 kv heads x 128 > 12288 summed-query floats
  // (the wide cache over a buffer of its own size: over k's 512 floats it reached whatever followed,
  // and under compute-sanitizer's allocator that was the scores, refused first as an overlap)
  std::vector<float> big_q(static_cast<std::size_t>(2) * 128 * 128), big_k(static_cast<std::size_t>(2) * 4 * 128 * 128);
  const specdec::contiguous_kv<float> wide{big_k.data(), big_k.data(), lens.data(), 2, 4, 128, 128, memory_space::device};
  CHECK_THROWS_WITH(specdec::kv_importance_batch(specdec::cuda{}, specdec::make_view<3>(big_q.data(), {2, 128, 128}, memory_space::device),
                                                 wide, specdec::make_view<3>(s.data(), {2, 128, 4}, memory_space::device), std_),
                    Catch::Contains("12288"));
  // a user layout in managed memory whose row 1 is null: refused on the host, as the host backend does
  std::vector<float> rows(3 * 2 * 64);  // never read
  const specdec_test::holed_layout<float> holed{.rows = rows.data(), .tokens = 3, .hole = 1, .kv_heads = 2, .dim = 64};
  std::vector<float> q1(4 * 64), s1(2 * 4);
  CHECK_THROWS_WITH(specdec::kv_importance_batch(specdec::cuda{}, specdec::make_view<3>(q1.data(), {1, 4, 64}, memory_space::managed),
                                                 holed, specdec::make_view<3>(s1.data(), {1, 2, 4}, memory_space::managed),
                                                 specdec::make_view<1>(st.data(), {3}, memory_space::managed)),
                    Catch::Contains("kv_importance_batch") && Catch::Contains("non-null k_row") &&
                        Catch::Contains("token 1"));
}

namespace {

//! Random Eq. 2-like scores [R, hkv, cols] with ties, NaN, +-0 and infinities in some requests.
std::vector<float> select_scores(int R, int hkv, int cols, std::uint64_t seed) {
  specdec::philox_stream rng(seed, 8);
  std::vector<float> s(static_cast<std::size_t>(R) * hkv * cols);
  for (std::size_t i = 0; i < s.size(); ++i) {
    const float u = 8.0f * rng.uniform() - 4.0f;
    switch ((i / static_cast<std::size_t>(cols)) % 4) {  // a (request, head) row's kind
      case 1: s[i] = std::round(u); break;  // ties
      case 2: s[i] = rng.below(8) == 0 ? std::numeric_limits<float>::quiet_NaN() : rng.below(8) == 1 ? -0.0f : u; break;
      case 3: s[i] = rng.below(6) == 0 ? std::numeric_limits<float>::infinity() : u; break;
      default: s[i] = u; break;
    }
  }
  return s;
}

//! The lists of partial_kv_select_batch under `policy` (arrays pre-filled with -7); on the device the
//! call runs on a device copy of the scores and lengths and the results come back.
struct select_lists {
  std::vector<std::int32_t> index, evict, sizes, seen, placed, status;
  bool operator==(const select_lists&) const = default;
};

select_lists host_select(const std::vector<float>& scores, const std::vector<std::int32_t>& lens, int hkv, int cols, int budget,
                         int sink, specdec::partial_kv_selection sel) {
  const int R = static_cast<int>(lens.size()), cap = std::max(cols, 1);
  std::vector<float> k(static_cast<std::size_t>(R) * cap * hkv);
  const specdec::contiguous_kv<float> cache{k.data(), k.data(), lens.data(), R, cap, hkv, 1};
  select_lists out{std::vector<std::int32_t>(static_cast<std::size_t>(R) * hkv * budget, -7),
                   std::vector<std::int32_t>(static_cast<std::size_t>(R) * hkv * (budget - sink), -7),
                   std::vector<std::int32_t>(static_cast<std::size_t>(R), -7),
                   std::vector<std::int32_t>(static_cast<std::size_t>(R), -7),
                   std::vector<std::int32_t>(static_cast<std::size_t>(R), -7), std::vector<std::int32_t>(3, 5)};
  specdec::partial_kv_select_batch(specdec::host{}, specdec::make_view<3>(scores.data(), {R, hkv, cols}), cache, budget, sink,
                                   sel, specdec::make_view<3>(out.index.data(), {R, hkv, budget}),
                                   specdec::make_view<3>(out.evict.data(), {R, hkv, budget - sink}),
                                   specdec::make_view<1>(out.sizes.data(), {R}), specdec::make_view<1>(out.seen.data(), {R}),
                                   specdec::make_view<1>(out.placed.data(), {R}), specdec::make_view<1>(out.status.data(), {3}));
  return out;
}

struct device_select {
  int R, hkv, cols, budget, sink, cap;
  device_buffer<float> k, scores;
  device_buffer<std::int32_t> lens, index, evict, sizes, seen, placed, status;
  device_select(const std::vector<float>& s, const std::vector<std::int32_t>& l, int hkv_, int cols_, int budget_, int sink_)
      : R(static_cast<int>(l.size())), hkv(hkv_), cols(cols_), budget(budget_), sink(sink_), cap(std::max(cols_, 1)),
        k(std::vector<float>(static_cast<std::size_t>(R) * cap * hkv_)), scores(s), lens(l),
        index(std::vector<std::int32_t>(static_cast<std::size_t>(R) * hkv_ * budget_, -7)),
        evict(std::vector<std::int32_t>(static_cast<std::size_t>(R) * hkv_ * (budget_ - sink_), -7)),
        sizes(std::vector<std::int32_t>(static_cast<std::size_t>(R), -7)),
        seen(std::vector<std::int32_t>(static_cast<std::size_t>(R), -7)),
        placed(std::vector<std::int32_t>(static_cast<std::size_t>(R), -7)), status(std::vector<std::int32_t>{5, 5, 5}) {}
  specdec::contiguous_kv<float> cache() const {
    return {k.data(), k.data(), lens.data(), R, cap, hkv, 1, memory_space::device};
  }
  void run(cudaStream_t stream, specdec::partial_kv_selection sel) {
    specdec::partial_kv_select_batch(specdec::cuda{.stream = stream},
                                     specdec::make_view<3>(scores.data(), {R, hkv, cols}, memory_space::device), cache(),
                                     budget, sink, sel,
                                     specdec::make_view<3>(index.data(), {R, hkv, budget}, memory_space::device),
                                     specdec::make_view<3>(evict.data(), {R, hkv, budget - sink}, memory_space::device),
                                     dv(sizes), dv(seen), dv(placed), dv(status));
  }
  void append(cudaStream_t stream) {
    specdec::partial_kv_append_batch(specdec::cuda{.stream = stream}, cache(), budget, sink,
                                     specdec::make_view<3>(index.data(), {R, hkv, budget}, memory_space::device),
                                     specdec::make_view<3>(evict.data(), {R, hkv, budget - sink}, memory_space::device),
                                     dv(sizes), dv(seen), dv(placed), dv(status));
  }
  select_lists download() {
    return {index.download(), evict.download(), sizes.download(), seen.download(), placed.download(), status.download()};
  }
  void upload(const select_lists& l) {
    index.upload(l.index), evict.upload(l.evict), sizes.upload(l.sizes), seen.upload(l.seen), placed.upload(l.placed);
  }
  void reset() {
    index.upload(std::vector<std::int32_t>(index.size(), -7));
    evict.upload(std::vector<std::int32_t>(evict.size(), -7));
    sizes.upload(std::vector<std::int32_t>(sizes.size(), -7));
  }
};

}  // namespace

TEST_CASE("cuda partial_kv_select_batch writes the host backend's lists", "[cuda][kv][partial]") {
  using sel_t = specdec::partial_kv_selection;
  specdec::philox_stream rng(21, 0);
  int selected = 0;
  for (int trial = 0; trial < 24; ++trial) {
    const int R = 1 + static_cast<int>(rng.below(8)), hkv = 1 + static_cast<int>(rng.below(8));
    const int cols = 1 + static_cast<int>(rng.below(trial % 3 == 0 ? 40000 : 3000));
    const int sink = static_cast<int>(rng.below(80));
    // |B| - |S| up to the device's 4096, now and then exactly it
    const int budget = sink + (trial % 5 == 0 ? specdec::detail::partial_kv_select_max_device
                                              : 1 + static_cast<int>(rng.below(trial % 2 ? 4096 : 300)));
    std::vector<std::int32_t> lens(static_cast<std::size_t>(R));
    for (auto& l : lens) l = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(cols + 1)));
    lens[0] = cols;
    const auto scores = select_scores(R, hkv, cols, 300 + static_cast<std::uint64_t>(trial));
    for (const auto sel : {sel_t::per_kv_head, sel_t::shared}) {
      const auto want = host_select(scores, lens, hkv, cols, budget, sink, sel);
      device_select d(scores, lens, hkv, cols, budget, sink);
      d.run(nullptr, sel);
      specdec_test::sync_check("partial_kv_select_batch");
      INFO("trial " << trial << " R " << R << " hkv " << hkv << " cols " << cols << " budget " << budget << " sink " << sink
                    << " shared " << (sel == sel_t::shared));
      const auto got = d.download();
      CHECK(got.status == std::vector<std::int32_t>{0, -1, -1});
      CHECK(got.sizes == want.sizes);
      CHECK(got.seen == lens);
      CHECK(got.placed == std::vector<std::int32_t>(lens.size(), 0));
      CHECK(got.index == want.index);  // the unwritten slots keep -7 on both sides
      CHECK(got.evict == want.evict);
    }
    selected += cols > budget;
  }
  CHECK(selected > 8);
}

TEST_CASE("cuda partial_kv_select_batch: more rows than blocks, bad lengths among them, |B| = |S|, lengths below |S|",
          "[cuda][kv][partial]") {
  using sel_t = specdec::partial_kv_selection;
  // 9000 x 8 = 72000 (request, kv head) rows: blocks take several rows each (the grid holds 65535)
  const int R = 9000, hkv = 8, cols = 64;
  specdec::philox_stream rng(13, 2);
  std::vector<std::int32_t> lens(static_cast<std::size_t>(R));
  for (auto& l : lens) l = static_cast<std::int32_t>(rng.below(cols + 1));
  const auto scores = select_scores(R, hkv, cols, 19);
  for (const auto& [budget, sink] : {std::pair{20, 4}, std::pair{6, 6}, std::pair{48, 40}}) {
    for (const auto sel : {sel_t::per_kv_head, sel_t::shared}) {
      auto bad = lens;
      bad[17] = cols + 1, bad[4000] = -3;  // reported, nothing of them written; the rows after them still run
      device_select d(scores, bad, hkv, cols, budget, sink);
      d.run(nullptr, sel);
      specdec_test::sync_check("partial_kv_select_batch (many rows)");
      auto want_lens = bad;
      want_lens[17] = 0, want_lens[4000] = 0;
      auto want = host_select(scores, want_lens, hkv, cols, budget, sink, sel);
      for (const int r : {17, 4000}) {  // the host wrote request r's empty selection: undo it for the comparison
        std::fill_n(want.index.begin() + static_cast<std::ptrdiff_t>(r) * hkv * budget, hkv * budget, -7);
        std::fill_n(want.evict.begin() + static_cast<std::ptrdiff_t>(r) * hkv * (budget - sink), hkv * (budget - sink), -7);
        want.sizes[static_cast<std::size_t>(r)] = want.seen[static_cast<std::size_t>(r)] =
            want.placed[static_cast<std::size_t>(r)] = -7;
      }
      INFO("budget " << budget << " sink " << sink << " shared " << (sel == sel_t::shared));
      const auto got = d.download();
      CHECK(got.status[0] == static_cast<std::int32_t>(specdec::device_error::length));
      CHECK((got.status[1] == 17 || got.status[1] == 4000));
      CHECK(got.sizes == want.sizes);
      CHECK(got.seen == want.seen);
      CHECK(got.placed == want.placed);
      CHECK(got.index == want.index);
      CHECK(got.evict == want.evict);
    }
  }
}

TEST_CASE("cuda partial_kv_append_batch goes on from a shared selection as the host does", "[cuda][kv][partial]") {
  const int R = 6, hkv = 4, cols = 3000, budget = 100, sink = 8;
  std::vector<std::int32_t> lens{0, 5, 200, 1000, 2500, 99};
  const auto scores = select_scores(R, hkv, cols, 23);
  device_select d(scores, lens, hkv, cols, budget, sink);
  d.run(nullptr, specdec::partial_kv_selection::shared);
  auto host_state = host_select(scores, lens, hkv, cols, budget, sink, specdec::partial_kv_selection::shared);
  std::vector<float> k(static_cast<std::size_t>(R) * cols * hkv);
  specdec::philox_stream rng(4, 4);
  for (int step = 0; step < 60; ++step) {
    for (auto& l : lens) l = std::min(cols, l + static_cast<std::int32_t>(rng.below(6)));
    d.lens.upload(lens);
    d.append(nullptr);
    const specdec::contiguous_kv<float> hcache{k.data(), k.data(), lens.data(), R, cols, hkv, 1};
    specdec::partial_kv_append_batch(
        specdec::host{}, hcache, budget, sink, specdec::make_view<3>(host_state.index.data(), {R, hkv, budget}),
        specdec::make_view<3>(host_state.evict.data(), {R, hkv, budget - sink}),
        specdec::make_view<1>(host_state.sizes.data(), {R}), specdec::make_view<1>(host_state.seen.data(), {R}),
        specdec::make_view<1>(host_state.placed.data(), {R}), specdec::make_view<1>(host_state.status.data(), {3}));
    specdec_test::sync_check("partial_kv_append_batch (shared)");
    INFO("step " << step);
    REQUIRE(d.download() == host_state);
  }
}

TEST_CASE("cuda partial_kv_select_batch reports a length above the scores' columns and writes nothing for it",
          "[cuda][kv][partial]") {
  const int hkv = 2, cols = 500, budget = 64, sink = 4;
  const std::vector<std::int32_t> lens{400, 501, 300};
  const auto scores = select_scores(3, hkv, cols, 5);
  device_select d(scores, lens, hkv, cols, budget, sink);
  d.run(nullptr, specdec::partial_kv_selection::per_kv_head);
  specdec_test::sync_check("partial_kv_select_batch (length)");
  const auto got = d.download();
  CHECK(got.status == std::vector<std::int32_t>{static_cast<std::int32_t>(specdec::device_error::length), 1, -1});
  CHECK(got.sizes == std::vector<std::int32_t>{64, -7, 64});
  CHECK(std::all_of(got.index.begin() + hkv * budget, got.index.begin() + 2 * hkv * budget, [](auto x) { return x == -7; }));
  CHECK(std::all_of(got.evict.begin() + hkv * (budget - sink), got.evict.begin() + 2 * hkv * (budget - sink),
                    [](auto x) { return x == -7; }));
  // the other requests are as the host writes them
  const auto want = host_select(scores, std::vector<std::int32_t>{400, 0, 300}, hkv, cols, budget, sink,
                                specdec::partial_kv_selection::per_kv_head);
  CHECK(std::equal(got.index.begin(), got.index.begin() + hkv * budget, want.index.begin()));
  CHECK(std::equal(got.index.begin() + 2 * hkv * budget, got.index.end(), want.index.begin() + 2 * hkv * budget));
}

TEST_CASE("cuda partial_kv_select_batch is captured in a CUDA graph and replays", "[cuda][kv][partial]") {
  const int hkv = 8, cols = 8192, budget = 2048 + 64, sink = 64;
  const std::vector<std::int32_t> lens{8192, 5000, 100, 4000};
  auto scores = select_scores(4, hkv, cols, 40);
  device_select d(scores, lens, hkv, cols, budget, sink);
  int round = 0;
  specdec_test::replay_in_graph(
      3, [&](cudaStream_t s) { d.run(s, specdec::partial_kv_selection::per_kv_head); },
      [&] {
        scores = select_scores(4, hkv, cols, static_cast<std::uint64_t>(100 + round++));
        d.scores.upload(scores);
        d.reset();
      },
      [&] {
        CHECK(d.download() == host_select(scores, lens, hkv, cols, budget, sink, specdec::partial_kv_selection::per_kv_head));
      });
}

TEST_CASE("cuda partial_kv_select_batch refuses host memory and budget - sink above 4096 before any CUDA call",
          "[cuda][kv][partial][nogpu]") {
  std::vector<float> k(2 * 8 * 2), s(2 * 2 * 8);
  std::vector<std::int32_t> lens{8, 8}, index(2 * 2 * 5000), evict(2 * 2 * 5000), sizes(2), seen(2), placed(2), st(3);
  const specdec::contiguous_kv<float> dev_cache{k.data(), k.data(), lens.data(), 2, 8, 2, 1, memory_space::device};
  const specdec::contiguous_kv<float> host_cache{k.data(), k.data(), lens.data(), 2, 8, 2, 1};
  const auto dev = memory_space::device;
  const auto sd = specdec::make_view<3>(s.data(), {2, 2, 8}, dev);
  const auto zd = specdec::make_view<1>(sizes.data(), {2}, dev);
  const auto nd = specdec::make_view<1>(seen.data(), {2}, dev);
  const auto pd = specdec::make_view<1>(placed.data(), {2}, dev);
  const auto std_ = specdec::make_view<1>(st.data(), {3}, dev);
  const auto per = specdec::partial_kv_selection::per_kv_head;
  auto idx = [&](int b) { return specdec::make_view<3>(index.data(), {2, 2, b}, dev); };
  auto ev = [&](int n) { return specdec::make_view<3>(evict.data(), {2, 2, n}, dev); };
  CHECK_THROWS_WITH(specdec::partial_kv_select_batch(specdec::cuda{}, sd, host_cache, 8, 2, per, idx(8), ev(6), zd, nd, pd, std_),
                    Catch::Contains("cache") && Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(specdec::partial_kv_select_batch(specdec::cuda{}, specdec::make_view<3>(s.data(), {2, 2, 8}), dev_cache, 8, 2,
                                                     per, idx(8), ev(6), zd, nd, pd, std_),
                    Catch::Contains("'scores'") && Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(specdec::partial_kv_select_batch(specdec::cuda{}, sd, dev_cache, 8, 2, per,
                                                     specdec::make_view<3>(index.data(), {2, 2, 8}), ev(6), zd, nd, pd, std_),
                    Catch::Contains("'index'") && Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(specdec::partial_kv_select_batch(specdec::cuda{}, sd, dev_cache, 8, 2, per, idx(8), ev(6),
                                                     specdec::make_view<1>(sizes.data(), {2}), nd, pd, std_),
                    Catch::Contains("'sizes'") && Catch::Contains("device-accessible"));
  // partial_kv_append_batch: the same memory checks
  CHECK_THROWS_WITH(specdec::partial_kv_append_batch(specdec::cuda{}, host_cache, 8, 2, idx(8), ev(6), zd, nd, pd, std_),
                    Catch::Contains("specdec::partial_kv_append_batch") && Catch::Contains("cache") &&
                        Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(specdec::partial_kv_append_batch(specdec::cuda{}, dev_cache, 8, 2, idx(8), ev(6), zd,
                                                     specdec::make_view<1>(seen.data(), {2}), pd, std_),
                    Catch::Contains("'seen'") && Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(specdec::partial_kv_append_batch(specdec::cuda{}, dev_cache, 8, 2, idx(8),
                                                     specdec::make_view<3>(evict.data(), {2, 2, 6}), zd, nd, pd, std_),
                    Catch::Contains("'evict'") && Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(specdec::partial_kv_select_batch(specdec::cuda{}, sd, dev_cache, 4098, 1, per, idx(4098), ev(4097), zd, nd, pd, std_),
                    Catch::Contains("'budget'") && Catch::Contains("4096") && Catch::Contains("got 4097"));
  // 4096 itself is accepted by the checks: the rejection above is the limit, not the shapes
  CHECK_THROWS_WITH(specdec::partial_kv_select_batch(specdec::cuda{}, sd, dev_cache, 4097, 1, per, idx(4097), ev(4097), zd, nd, pd, std_),
                    Catch::Contains("'evict'") && Catch::Contains("shape"));
  // sizes over the layout's lengths, which other blocks of the selection still read (session 61; the
  // host backend reads every length first)
  CHECK_THROWS_WITH(specdec::partial_kv_select_batch(specdec::cuda{}, sd, dev_cache, 8, 2, per, idx(8), ev(6),
                                                     specdec::make_view<1>(lens.data(), {2}, dev), nd, pd, std_),
                    Catch::Contains("'sizes'") && Catch::Contains("cache.mapping.lengths"));
}

TEST_CASE("cuda partial_kv_append_batch follows the host backend step by step, across selections", "[cuda][kv][partial]") {
  const int R = 16, hkv = 4, cols = 6000, budget = 300, sink = 4;
  std::vector<std::int32_t> lens(static_cast<std::size_t>(R), 0);
  // the state as partial_kv_index starts: nothing shown, eviction |B| - 1 down to |S|
  select_lists host_state{std::vector<std::int32_t>(static_cast<std::size_t>(R) * hkv * budget, -7),
                          std::vector<std::int32_t>(static_cast<std::size_t>(R) * hkv * (budget - sink)),
                          std::vector<std::int32_t>(R, 0), std::vector<std::int32_t>(R, 0),
                          std::vector<std::int32_t>(R, 0), std::vector<std::int32_t>(3, 5)};
  for (std::size_t i = 0; i < host_state.evict.size(); ++i)
    host_state.evict[i] = budget - 1 - static_cast<std::int32_t>(i % static_cast<std::size_t>(budget - sink));
  auto scores = select_scores(R, hkv, cols, 77);
  device_select d(scores, lens, hkv, cols, budget, sink);
  d.upload(host_state);
  std::vector<float> k(static_cast<std::size_t>(R) * cols * hkv);
  specdec::philox_stream rng(3, 1);
  int triggered = 0;
  for (int step = 0; step < 120; ++step) {
    for (auto& l : lens) l = std::min(cols, l + static_cast<std::int32_t>(step % 29 == 3 ? 400 : rng.below(9)));
    d.lens.upload(lens);
    const specdec::contiguous_kv<float> hcache{k.data(), k.data(), lens.data(), R, cols, hkv, 1};
    if (step % 30 == 29) {  // a selection on both sides, then the appends go on from it
      d.run(nullptr, specdec::partial_kv_selection::per_kv_head);
      specdec::partial_kv_select_batch(
          specdec::host{}, specdec::make_view<3>(scores.data(), {R, hkv, cols}), hcache, budget, sink,
          specdec::partial_kv_selection::per_kv_head, specdec::make_view<3>(host_state.index.data(), {R, hkv, budget}),
          specdec::make_view<3>(host_state.evict.data(), {R, hkv, budget - sink}),
          specdec::make_view<1>(host_state.sizes.data(), {R}), specdec::make_view<1>(host_state.seen.data(), {R}),
          specdec::make_view<1>(host_state.placed.data(), {R}), specdec::make_view<1>(host_state.status.data(), {3}));
    } else {
      d.append(nullptr);
      specdec::partial_kv_append_batch(
          specdec::host{}, hcache, budget, sink, specdec::make_view<3>(host_state.index.data(), {R, hkv, budget}),
          specdec::make_view<3>(host_state.evict.data(), {R, hkv, budget - sink}),
          specdec::make_view<1>(host_state.sizes.data(), {R}), specdec::make_view<1>(host_state.seen.data(), {R}),
          specdec::make_view<1>(host_state.placed.data(), {R}), specdec::make_view<1>(host_state.status.data(), {3}));
    }
    specdec_test::sync_check("partial_kv_append_batch");
    INFO("step " << step);
    const auto got = d.download();
    REQUIRE(got.status == std::vector<std::int32_t>{0, -1, -1});
    REQUIRE(got == host_state);
    for (int r = 0; r < R; ++r) triggered += specdec::detail::partial_kv_needs_rebuild(got.placed[static_cast<std::size_t>(r)], budget, sink);
  }
  CHECK(triggered > 0);
}

TEST_CASE("cuda partial_kv_append_batch reports a bad state or eviction slot and leaves that request as it was",
          "[cuda][kv][partial]") {
  const int R = 3, hkv = 2, cols = 64, budget = 8, sink = 2;
  const std::vector<std::int32_t> lens{20, 20, 20};
  device_select d(select_scores(R, hkv, cols, 9), lens, hkv, cols, budget, sink);
  select_lists state{std::vector<std::int32_t>(static_cast<std::size_t>(R) * hkv * budget, -7),
                     std::vector<std::int32_t>(static_cast<std::size_t>(R) * hkv * (budget - sink), 5),
                     std::vector<std::int32_t>{8, 8, 8}, std::vector<std::int32_t>{18, 21, 18},
                     std::vector<std::int32_t>{0, 0, 0}, std::vector<std::int32_t>(3, 5)};
  d.upload(state);
  d.append(nullptr);  // request 1 has seen more than its cache holds
  specdec_test::sync_check("partial_kv_append_batch (state)");
  auto got = d.download();
  CHECK(got.status == std::vector<std::int32_t>{static_cast<std::int32_t>(specdec::device_error::partial_state), 1, -1});
  CHECK(got.seen == std::vector<std::int32_t>{20, 21, 20});
  CHECK(std::all_of(got.index.begin() + hkv * budget, got.index.begin() + 2 * hkv * budget, [](auto x) { return x == -7; }));
  state.seen = {18, 18, 18};
  state.evict[static_cast<std::size_t>(2 * hkv * (budget - sink) + (budget - sink) + 1)] = -1;  // request 2, head 1, p = 1
  d.upload(state);
  d.append(nullptr);
  specdec_test::sync_check("partial_kv_append_batch (evict)");
  got = d.download();
  CHECK(got.status == std::vector<std::int32_t>{static_cast<std::int32_t>(specdec::device_error::partial_state), 2, -1});
  CHECK(got.seen == std::vector<std::int32_t>{20, 20, 18});
  CHECK(got.placed == std::vector<std::int32_t>{2, 2, 0});
  CHECK(std::all_of(got.index.begin() + 2 * hkv * budget, got.index.end(), [](auto x) { return x == -7; }));
}
