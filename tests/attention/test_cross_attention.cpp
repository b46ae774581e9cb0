// Cache-free cross-attention (GLIDE §4.1, LongSpec §3.1): GLIDE's layer mapping, differential tests
// against a double reference over contiguous (NHD/HND) and paged target caches with ragged committed
// lengths and GQA, proof that the target's cache is read in place (no copy), the GLIDE query
// projection, and bad inputs.
#include "attention/test_cross_attention_util.hpp"
#include "specdec/position/rope.hpp"
#include "specdec/reference/cross_attention.hpp"

using namespace xtest;

TEST_CASE("GLIDE layer mapping l = N_T - N_D + m") {
  CHECK(specdec::glide_target_layer(32, 1, 1) == 32);  // a one-layer GLIDE reads the top layer
  CHECK(specdec::glide_target_layer(60, 2, 1) == 59);
  CHECK(specdec::glide_target_layer(60, 2, 2) == 60);
  CHECK(specdec::glide_target_layer(4, 4, 1) == 1);
  for (int nt = 1; nt <= 12; ++nt)
    for (int nd = 1; nd <= nt; ++nd)
      for (int m = 1; m <= nd; ++m) {
        REQUIRE(specdec::glide_target_layer(nt, nd, m) == nt - nd + m);
        REQUIRE(specdec::glide_target_layer_index(nt, nd, m - 1) == specdec::glide_target_layer(nt, nd, m) - 1);
      }
  const std::vector<int> layers{10, 11, 12, 13, 14};
  CHECK(&specdec::glide_select_layer(std::span<const int>(layers), 2, 0) == &layers[3]);
  CHECK(&specdec::glide_select_layer(std::span<const int>(layers), 2, 1) == &layers[4]);
  CHECK_THROWS_WITH(specdec::glide_target_layer(0, 1, 1), Catch::Contains("num_target_layers"));
  CHECK_THROWS_WITH(specdec::glide_target_layer(4, 5, 1), Catch::Contains("num_draft_layers"));
  CHECK_THROWS_WITH(specdec::glide_target_layer(4, 0, 1), Catch::Contains("num_draft_layers"));
  CHECK_THROWS_WITH(specdec::glide_target_layer(4, 2, 0), Catch::Contains("draft_layer"));
  CHECK_THROWS_WITH(specdec::glide_target_layer(4, 2, 3), Catch::Contains("draft_layer"));
  CHECK_THROWS_WITH(specdec::glide_target_layer_index(4, 2, 2), Catch::Contains("draft_layer_index"));
  CHECK_THROWS_WITH(specdec::glide_target_layer_index(4, 2, -1), Catch::Contains("draft_layer_index"));
  CHECK_THROWS_WITH(specdec::glide_target_layer_index(3, 4, 0), Catch::Contains("num_draft_layers"));
  CHECK_THROWS_WITH(specdec::glide_select_layer(std::span<const int>(), 1, 0), Catch::Contains("target_layers"));
  CHECK_THROWS_AS(specdec::glide_select_layer(std::span<const int>(layers), 6, 0), specdec::invalid_argument);
}

TEST_CASE("cross attention (fp32) matches the reference over contiguous and paged target caches") {
  sweep<float>(2e-6, 1e-5, 1);
}

TEST_CASE("cross attention reads the target's cache in place (no copy)") {
  std::mt19937 rng(11);
  target<float> tg(2, 64, 2, 64, rng);
  tg.lengths = {64, 40};
  const auto cache = tg.nhd();
  const std::vector<std::int32_t> committed{50, 33};
  const specdec::kv_prefix<specdec::contiguous_kv<float>> prefix{cache, committed.data()};
  // the prefix view's rows ARE the target's buffers
  CHECK(prefix.k_row(1, 5, 1) == tg.k.data() + ((1 * 64 + 5) * 2 + 1) * 64);
  CHECK(prefix.v_row(0, 49, 0) == tg.v.data() + (49 * 2) * 64);
  CHECK(prefix.length(0) == 50);
  REQUIRE_NOTHROW(specdec::validate_kv_layout(prefix, "t", "p"));
  const int hq = 4, d = 64, N = 3;
  std::vector<float> q(static_cast<std::size_t>(N) * hq * d);
  std::normal_distribution<float> nd;
  for (auto& x : q) x = nd(rng);
  const std::vector<std::int32_t> ip{0, 2, 3};
  std::vector<float> o1(q.size()), o2(q.size()), l1(N * hq), l2(N * hq);
  const auto qv = specdec::make_view<3>(q.data(), {N, hq, d});
  const auto iv = specdec::make_view<1>(ip.data(), {3});
  specdec::cross_attention(specdec::host{}, qv, cache, committed, iv, specdec::make_view<3>(o1.data(), {N, hq, d}),
                           specdec::make_view<2>(l1.data(), {N, hq}));
  // the target updates its own cache (e.g. a later layer write or a commit): the draft sees it at once
  for (int c = 0; c < d; ++c) tg.v[(10 * 2 + 0) * 64 + c] += 5.0f;  // request 0, token 10, kv head 0
  specdec::cross_attention(specdec::host{}, qv, cache, committed, iv, specdec::make_view<3>(o2.data(), {N, hq, d}),
                           specdec::make_view<2>(l2.data(), {N, hq}));
  CHECK(o1 != o2);
  CHECK(l1 == l2);  // only V changed
  require_close(specdec::reference::cross_attention(qv, cache, committed, iv), o2, l2, 2e-6, 1e-5);
  // request 1 and heads using kv head 1 did not change
  for (int h = 2; h < 4; ++h)
    for (int c = 0; c < d; ++c) CHECK(o1[(0 * hq + h) * d + c] == o2[(0 * hq + h) * d + c]);
  // a token beyond the committed length does not influence the result
  std::vector<float> o3(q.size());
  for (int c = 0; c < d; ++c) tg.k[((0 * 64 + 55) * 2 + 0) * 64 + c] = 1000.0f;
  specdec::cross_attention(specdec::host{}, qv, cache, committed, iv, specdec::make_view<3>(o3.data(), {N, hq, d}),
                           specdec::make_view<2>(l2.data(), {N, hq}));
  CHECK(o3 == o2);
}

TEST_CASE("GLIDE query projection, then RoPE, then cross attention: the full draft-side pipeline") {
  std::mt19937 rng(21);
  std::normal_distribution<double> nd;
  const int T = 5, dD = 96, hq = 8, d = 64;
  std::vector<double> hd(T * dD), wd(static_cast<std::size_t>(hq) * d * dD);
  for (auto& x : hd) x = nd(rng);
  for (auto& x : wd) x = nd(rng) / std::sqrt(dD);
  std::vector<float> h(hd.begin(), hd.end()), w(wd.begin(), wd.end()), q(static_cast<std::size_t>(T) * hq * d);
  specdec::glide_project_queries(specdec::host{}, specdec::make_view<2>(h.data(), {T, dD}),
                                 specdec::make_view<2>(w.data(), {hq * d, dD}),
                                 specdec::make_view<3>(q.data(), {T, hq, d}));
  const auto qref = specdec::reference::glide_project_queries(hd, wd, T, dD, hq, d);
  for (std::size_t i = 0; i < q.size(); ++i) REQUIRE(q[i] == Approx(qref[i]).margin(1e-5));
  // half storage too, single-threaded and pooled agree bitwise
  std::vector<specdec::half> hh, wh, q1(q.size()), q2(q.size());
  for (double x : hd) hh.push_back(cast<specdec::half>(x));
  for (double x : wd) wh.push_back(cast<specdec::half>(x));
  specdec::glide_project_queries(specdec::host{1}, specdec::make_view<2>(hh.data(), {T, dD}),
                                 specdec::make_view<2>(wh.data(), {hq * d, dD}),
                                 specdec::make_view<3>(q1.data(), {T, hq, d}));
  specdec::glide_project_queries(specdec::host{}, specdec::make_view<2>(hh.data(), {T, dD}),
                                 specdec::make_view<2>(wh.data(), {hq * d, dD}),
                                 specdec::make_view<3>(q2.data(), {T, hq, d}));
  for (std::size_t i = 0; i < q.size(); ++i) {
    REQUIRE(q1[i].bits == q2[i].bits);
    REQUIRE(wide(q1[i]) == Approx(qref[i]).margin(2e-2));
  }
  // RoPE at tree positions (committed 40 + depth), then attend to the committed prefix
  target<float> tg(1, 64, 2, d, rng);
  tg.lengths = {48};
  const std::vector<std::int32_t> committed{40}, depth{0, 0, 1, 1, 2};
  std::vector<std::int32_t> pos(T);
  specdec::tree_positions(committed[0], depth, pos);
  specdec::apply_rope(specdec::host{}, specdec::rope_params{.theta = 10000.0},
                      specdec::make_view<3>(q.data(), {T, hq, d}), std::span<const std::int32_t>(pos));
  const std::vector<std::int32_t> ip{0, T};
  std::vector<float> out(q.size()), lse(T * hq);
  const auto qv = specdec::make_view<3>(q.data(), {T, hq, d});
  specdec::cross_attention(specdec::host{}, qv, tg.nhd(), committed, specdec::make_view<1>(ip.data(), {2}),
                           specdec::make_view<3>(out.data(), {T, hq, d}), specdec::make_view<2>(lse.data(), {T, hq}));
  require_close(specdec::reference::cross_attention(qv, tg.nhd(), committed, specdec::make_view<1>(ip.data(), {2})),
                out, lse, 2e-6, 1e-5);
}

TEST_CASE("cross attention rejects bad inputs, naming itself and the argument") {
  std::mt19937 rng(4);
  target<float> tg(2, 32, 2, 64, rng);
  tg.lengths = {20, 7};
  const auto cache = tg.nhd();
  const int N = 3, hq = 4, d = 64;
  std::vector<float> q(static_cast<std::size_t>(N) * hq * d), out(q.size()), lse(N * hq);
  const std::vector<std::int32_t> ip{0, 1, 3}, committed{20, 5};
  const auto qv = specdec::make_view<3>(q.data(), {N, hq, d});
  const auto iv = specdec::make_view<1>(ip.data(), {3});
  const auto ov = specdec::make_view<3>(out.data(), {N, hq, d});
  const auto lv = specdec::make_view<2>(lse.data(), {N, hq});
  auto throws = [](auto&& f, const char* fn, const char* arg) {
    REQUIRE_THROWS_AS(f(), specdec::invalid_argument);
    REQUIRE_THROWS_WITH(f(), Catch::Contains(fn) && Catch::Contains(arg));
  };
  const specdec::host h{};
  const std::vector<std::int32_t> one{3}, over{21, 0}, neg{-1, 0};
  throws([&] { specdec::cross_attention(h, qv, cache, one, iv, ov, lv); }, "specdec::cross_attention",
         "committed_lengths");
  throws([&] { specdec::cross_attention(h, qv, cache, over, iv, ov, lv); }, "specdec::cross_attention",
         "committed_lengths");
  throws([&] { specdec::cross_attention(h, qv, cache, neg, iv, ov, lv); }, "specdec::cross_attention",
         "committed_lengths");
  auto bad_cache = cache;
  std::vector<std::int32_t> too_long{33, 0};
  bad_cache.mapping.lengths = too_long.data();
  throws([&] { specdec::cross_attention(h, qv, bad_cache, committed, iv, ov, lv); }, "specdec::cross_attention",
         "target_cache");
  throws([&] { specdec::cross_attention(h, qv, bad_cache, iv, ov, lv); }, "specdec::cross_attention", "'cache'");
  // queries not projected to the target's head_dim / head count
  std::vector<float> q128(static_cast<std::size_t>(N) * hq * 128);
  throws(
      [&] {
        specdec::cross_attention(h, specdec::make_view<3>(q128.data(), {N, hq, 128}), cache, committed, iv, ov, lv);
      },
      "specdec::cross_attention", "cache");
  std::vector<float> q3(static_cast<std::size_t>(N) * 3 * d);
  throws(
      [&] {
        specdec::cross_attention(h, specdec::make_view<3>(q3.data(), {N, 3, d}), cache, committed, iv, ov, lv);
      },
      "specdec::cross_attention", "'q'");
  const std::vector<std::int32_t> ip_bad{0, 1, 2};
  throws([&] { specdec::cross_attention(h, qv, cache, specdec::make_view<1>(ip_bad.data(), {3}), ov, lv); },
         "specdec::cross_attention", "q_indptr");
  throws(
      [&] {
        specdec::cross_attention(h, qv, cache, iv, specdec::make_view<3>(out.data(), {N, 2, d}), lv);
      },
      "specdec::cross_attention", "'out'");
  throws(
      [&] {
        (void)specdec::cross_attention_workspace_bytes(h, specdec::make_view<3>(q3.data(), {N, 3, d}), cache, iv);
      },
      "specdec::cross_attention_workspace_bytes", "'q'");
  // a workspace over the target's K, or over the committed lengths, through the committed-prefix
  // form (found by a session-61 review: the prefix view hid the cache's memory from the overlap
  // check, and the pass-1 partials overwrote K before pass 2 read it)
  const std::size_t need = specdec::cross_attention_workspace_bytes(h, qv, cache, iv);
  REQUIRE(need > 0);
  std::vector<float> pool(need / sizeof(float) + tg.k.size());  // K at the start of a workspace-sized block
  std::copy(tg.k.begin(), tg.k.end(), pool.begin());
  auto pooled = cache;
  pooled.k = pool.data();
  specdec::attention_workspace over_k(reinterpret_cast<std::byte*>(pool.data()), need);
  throws([&] { specdec::cross_attention(h, qv, pooled, committed, iv, ov, lv, {.workspace = &over_k}); },
         "specdec::cross_attention", "cache.k");
  std::vector<std::int32_t> lens_ws(need / sizeof(std::int32_t) + 2, 0);
  lens_ws[0] = 20, lens_ws[1] = 5;
  specdec::attention_workspace over_lens(reinterpret_cast<std::byte*>(lens_ws.data()), need);
  throws(
      [&] {
        specdec::cross_attention(h, qv, cache, std::span<const std::int32_t>(lens_ws.data(), 2), iv, ov, lv,
                                 {.workspace = &over_lens});
      },
      "specdec::cross_attention", "committed_lengths");
  specdec::attention_workspace apart(need);  // control: a workspace of its own
  specdec::cross_attention(h, qv, cache, committed, iv, ov, lv, {.workspace = &apart});
  // projection shapes
  std::vector<float> hid(N * 32), w(static_cast<std::size_t>(hq) * d * 32);
  throws(
      [&] {
        specdec::glide_project_queries(h, specdec::make_view<2>(hid.data(), {N, 32}),
                                       specdec::make_view<2>(w.data(), {hq * d, 31}), qv);
      },
      "specdec::glide_project_queries", "w_q");
  throws(
      [&] {
        specdec::glide_project_queries(h, specdec::make_view<2>(hid.data(), {N, 32}),
                                       specdec::make_view<2>(w.data(), {hq * d, 32}),
                                       specdec::make_view<3>(q.data(), {N - 1, hq, d}));
      },
      "specdec::glide_project_queries", "q_out");
  throws(
      [&] {
        specdec::glide_project_queries(h, specdec::make_view<2>(hid.data(), {N, 0}),
                                       specdec::make_view<2>(w.data(), {hq * d, 0}), qv);
      },
      "specdec::glide_project_queries", "hidden");
  throws(
      [&] {
        specdec::glide_project_queries(h, specdec::make_view<2>(hid.data(), {N, 32}, specdec::memory_space::device),
                                       specdec::make_view<2>(w.data(), {hq * d, 32}), qv);
      },
      "specdec::glide_project_queries", "hidden");
  throws(
      [&] {
        specdec::glide_project_queries(specdec::host{-2}, specdec::make_view<2>(hid.data(), {N, 32}),
                                       specdec::make_view<2>(w.data(), {hq * d, 32}), qv);
      },
      "specdec::glide_project_queries", "policy.num_threads");
}
