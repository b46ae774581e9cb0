// sliding_window_attention (fp32) against the naive window-of-the-last-W-tokens reference: random
// trees, windows empty / partial / full / wrapped, pending chain tokens, ragged batches, GQA, head
// dims 64/128/256; bit-equality with hybrid_tree_attention over a contiguous copy of the window;
// chain drafting with speculative append + rollback; bad inputs.
#include "attention/test_sliding_window_util.hpp"
#include "specdec/kv/contiguous_kv.hpp"
#include "specdec/reference/sliding_window_attention.hpp"

using swtest::differential;

TEST_CASE("sliding window attention (fp32) matches the reference") {
  std::uint32_t seed = 1;
  // window partially filled, exactly full, wrapped several times; trees 0..130 nodes; ragged.
  for (int d : {64, 128, 256})
    for (auto [hq, hkv] : {std::pair{4, 4}, std::pair{8, 2}, std::pair{4, 1}}) {
      differential<float>(3, hq, hkv, d, 16, 0, {0, 5, 16}, {0, 0, 0}, {1, 7, 16}, seed++, 2e-6, 1e-5);
      differential<float>(3, hq, hkv, d, 16, 4, {17, 100, 3}, {0, 4, 2}, {3, 0, 12}, seed++, 2e-6, 1e-5);
    }
  differential<float>(2, 8, 2, 128, 64, 0, {1000, 63}, {0, 0}, {130, 64}, seed++, 2e-6, 1e-5);
  // LongSpec's W = 512, wrapped
  differential<float>(2, 8, 2, 128, 512, 8, {1500, 512}, {3, 0}, {16, 1}, seed++, 2e-6, 1e-5);
}

TEST_CASE("sliding window attention equals hybrid attention over a contiguous copy of the window") {
  std::mt19937 rng(77);
  swtest::problem<float> p(2, 8, 2, 64, 40, 0, {131, 17}, {0, 0}, {9, 33}, rng);
  const int W = 40, hkv = 2, d = 64;
  std::vector<float> ck(2 * W * hkv * d), cv(ck.size());
  std::vector<std::int32_t> len(2);
  for (int r = 0; r < 2; ++r) {
    len[r] = p.hist[r].length();
    for (int t = 0; t < len[r]; ++t)
      for (int h = 0; h < hkv; ++h)
        for (int c = 0; c < d; ++c) {
          ck[((r * W + t) * hkv + h) * d + c] = p.hist[r].k_row(t, h)[c];
          cv[((r * W + t) * hkv + h) * d + c] = p.hist[r].v_row(t, h)[c];
        }
  }
  specdec::contiguous_kv<float> flat{ck.data(), cv.data(), len.data(), 2, W, hkv, d};
  std::vector<float> o1(p.q.size()), o2(p.q.size());
  std::vector<float> l1(static_cast<std::size_t>(p.tokens()) * 8), l2(l1.size());
  const auto ov1 = specdec::make_view<3>(o1.data(), {p.tokens(), 8, d});
  const auto ov2 = specdec::make_view<3>(o2.data(), {p.tokens(), 8, d});
  const auto lv1 = specdec::make_view<2>(l1.data(), {p.tokens(), 8});
  const auto lv2 = specdec::make_view<2>(l2.data(), {p.tokens(), 8});
  specdec::sliding_window_attention(specdec::host{}, p.qv(), p.ring.layout(), p.kv(), p.vv(), p.ip(), p.mv(), ov1, lv1,
                                    {.kv_split_size = 16});
  specdec::hybrid_tree_attention(specdec::host{}, p.qv(), flat, p.kv(), p.vv(), p.ip(), p.mv(), ov2, lv2,
                                 {.kv_split_size = 16});
  CHECK(o1 == o2);
  CHECK(l1 == l2);
  // with a workspace sized by the workspace query, same results
  specdec::attention_workspace ws(specdec::sliding_window_attention_workspace_bytes(
      specdec::host{}, p.qv(), p.ring.layout(), p.ip(), {.kv_split_size = 16}));
  std::vector<float> o3(p.q.size()), l3(l1.size());
  specdec::sliding_window_attention(specdec::host{}, p.qv(), p.ring, p.kv(), p.vv(), p.ip(), p.mv(),
                                    specdec::make_view<3>(o3.data(), {p.tokens(), 8, d}),
                                    specdec::make_view<2>(l3.data(), {p.tokens(), 8}),
                                    {.kv_split_size = 16, .workspace = &ws});
  CHECK(o3 == o1);
}

TEST_CASE("chain drafting: append speculatively, attend over the window, roll back") {
  std::mt19937 rng(5);
  swtest::problem<float> p(2, 4, 2, 64, 24, 6, {50, 10}, {0, 0}, {0, 0}, rng);
  std::normal_distribution<double> nd;
  const int hq = 4, hkv = 2, d = 64;
  for (int step = 0; step < 6; ++step) {
    // one new draft token per request: append its K/V as pending, then decode over the window
    std::vector<float> k(2 * hkv * d), v(k.size()), q(2 * hq * d);
    for (auto* x : {&k, &v, &q})
      for (auto& e : *x) e = static_cast<float>(nd(rng));
    for (int r = 0; r < 2; ++r) {
      p.ring.append_speculative(r, specdec::make_view<3>(k.data() + r * hkv * d, {1, hkv, d}),
                                specdec::make_view<3>(v.data() + r * hkv * d, {1, hkv, d}));
      p.hist[r].k.emplace_back(k.begin() + r * hkv * d, k.begin() + (r + 1) * hkv * d);
      p.hist[r].v.emplace_back(v.begin() + r * hkv * d, v.begin() + (r + 1) * hkv * d);
    }
    const std::vector<std::int32_t> ip{0, 1, 2};
    std::vector<float> out(q.size()), lse(2 * hq);
    specdec::sliding_window_decode(specdec::host{}, specdec::make_view<3>(q.data(), {2, hq, d}), p.ring,
                                   specdec::make_view<1>(ip.data(), {3}), specdec::make_view<3>(out.data(), {2, hq, d}),
                                   specdec::make_view<2>(lse.data(), {2, hq}));
    std::vector<double> qd(q.begin(), q.end());
    const auto ref =
        specdec::reference::sliding_window_attention<float>(qd, hq, d, p.hist, nullptr, nullptr, ip, nullptr);
    swtest::require_close(ref, out, lse, 2e-6, 1e-5);
  }
  // reject all six drafted tokens of request 0, accept 4 of request 1
  p.ring.rollback(0, 6);
  p.ring.commit(1, 4);
  for (int i = 0; i < 6; ++i) p.hist[0].k.pop_back(), p.hist[0].v.pop_back();
  for (int i = 0; i < 2; ++i) p.hist[1].k.pop_back(), p.hist[1].v.pop_back();
  CHECK(p.ring.length(0) == 24);
  CHECK(p.ring.appended(0) == 50);
  CHECK(p.ring.length(1) == 14);
  for (int r = 0; r < 2; ++r)
    for (int t = 0; t < p.hist[r].length(); ++t) REQUIRE(p.ring.layout().k_row(r, t, 1)[7] == p.hist[r].k_row(t, 1)[7]);
}

TEST_CASE("sliding window attention rejects bad inputs, naming itself and the argument") {
  std::mt19937 rng(3);
  swtest::problem<float> p(2, 4, 2, 64, 16, 0, {20, 3}, {0, 0}, {3, 2}, rng);
  const int N = p.tokens();
  std::vector<float> out(p.q.size()), lse(static_cast<std::size_t>(N) * 4);
  const auto ov = specdec::make_view<3>(out.data(), {N, 4, 64});
  const auto lv = specdec::make_view<2>(lse.data(), {N, 4});
  auto throws = [](auto&& f, const char* arg) {
    REQUIRE_THROWS_AS(f(), specdec::invalid_argument);
    REQUIRE_THROWS_WITH(f(), Catch::Contains("specdec::sliding_window_") && Catch::Contains(arg));
  };
  const specdec::host h{};
  // a corrupt ring view
  auto bad = p.ring.layout();
  std::int32_t big[2] = {17, 3};
  bad.mapping.lengths = big;
  throws([&] { specdec::sliding_window_attention(h, p.qv(), bad, p.kv(), p.vv(), p.ip(), p.mv(), ov, lv); }, "'cache'");
  throws([&] { specdec::sliding_window_decode(h, p.qv(), bad, p.ip(), ov, lv); }, "'cache'");
  // head_dim mismatch between q and the ring
  std::vector<float> q128(static_cast<std::size_t>(N) * 4 * 128);
  throws(
      [&] {
        specdec::sliding_window_attention(h, specdec::make_view<3>(q128.data(), {N, 4, 128}), p.ring, p.kv(), p.vv(),
                                          p.ip(), p.mv(), ov, lv);
      },
      "'cache'");
  // query heads not a multiple of kv heads
  std::vector<float> q3(static_cast<std::size_t>(N) * 3 * 64);
  throws(
      [&] {
        specdec::sliding_window_attention(h, specdec::make_view<3>(q3.data(), {N, 3, 64}), p.ring, p.kv(), p.vv(),
                                          p.ip(), p.mv(), ov, lv);
      },
      "'q'");
  // spec_k with the wrong number of tokens
  throws(
      [&] {
        specdec::sliding_window_attention(h, p.qv(), p.ring, specdec::make_view<3>(p.k.data(), {N - 1, 2, 64}), p.vv(),
                                          p.ip(), p.mv(), ov, lv);
      },
      "'spec_k'");
  // q_indptr for 3 requests on a 2-request ring
  const std::vector<std::int32_t> ip3{0, 1, 2, N};
  throws(
      [&] {
        specdec::sliding_window_attention(h, p.qv(), p.ring, p.kv(), p.vv(), specdec::make_view<1>(ip3.data(), {4}),
                                          p.mv(), ov, lv);
      },
      "'q_indptr'");
  // a mask missing its diagonal
  auto m2 = p.mask;
  m2[0] = 0;
  throws(
      [&] {
        specdec::sliding_window_attention(h, p.qv(), p.ring, p.kv(), p.vv(), p.ip(),
                                          specdec::make_view<1>(m2.data(), {static_cast<std::int64_t>(m2.size())}), ov,
                                          lv);
      },
      "'mask'");
  // out / lse shapes
  throws(
      [&] {
        specdec::sliding_window_attention(h, p.qv(), p.ring, p.kv(), p.vv(), p.ip(), p.mv(),
                                          specdec::make_view<3>(out.data(), {N, 2, 64}), lv);
      },
      "'out'");
  throws(
      [&] {
        specdec::sliding_window_decode(h, p.qv(), p.ring.layout(), p.ip(), ov,
                                       specdec::make_view<2>(lse.data(), {N, 2}));
      },
      "'lse'");
  throws([&] { (void)specdec::sliding_window_attention_workspace_bytes(h, p.qv(), bad, p.ip()); }, "'cache'");
}
