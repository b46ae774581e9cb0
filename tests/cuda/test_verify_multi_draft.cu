// verify_multi_draft_batch(cuda{}) (array form) against verify_multi_draft per request with the same
// Philox streams (tests/verify/multi_draft_batch_util.hpp): the same accepted tokens and residual /
// bonus draws bit for bit on ragged batches of drawn trees, with and without replacement, up to 64
// requests, 1024-node trees and vocabularies up to 256K (a padded row stride); device-side value
// errors in status; graph capture. The kernel's walk also runs serially on the host in CI (its host
// twin, tests/verify/test_multi_draft_arrays.cpp). The logits form (each target row the walk reaches
// processed in the request's workspace row) against the host's processing of every row, then the
// probabilities form, in both modes: the same outputs, process_logits_batch's reports for the rows it
// reaches only, graph replay, and its host-side refusals ([nogpu]).
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "cuda/cuda_test_util.cuh"
#include "cuda/logits_verify_device_util.cuh"
#include "cuda/tree_verify_device_util.cuh"
#include "specdec/verify/multi_draft.cuh"
#include "verify/multi_draft_batch_util.hpp"

using specdec::draft_sampling;
using specdec::memory_space;
using specdec_test::device_buffer;
using specdec_test::dv;
using specdec_test::multi_draft_batch_case;

namespace {

constexpr float nan_fill = std::numeric_limits<float>::quiet_NaN();  // a read past a row shows

struct device_case {
  std::int64_t rows, vocab, stride;
  draft_sampling mode;
  device_buffer<std::int32_t> ni, tok, par;
  specdec_test::device_tree_outputs out;
  device_buffer<std::uint64_t> seeds, streams;
  device_buffer<float> p, q;
  device_case(const multi_draft_batch_case& c, std::int64_t pad = 0)
      : rows(c.nodes() + c.requests()), vocab(c.vocab), stride(c.vocab + pad), mode(c.mode), ni(c.node_indptr),
        tok(c.tokens.empty() ? std::vector<std::int32_t>{0} : c.tokens),
        par(c.parents.empty() ? std::vector<std::int32_t>{0} : c.parents), out(c.node_indptr.size() - 1, c.tokens.size()),
        seeds(c.seeds.empty() ? std::vector<std::uint64_t>{0} : c.seeds),
        streams(c.streams.empty() ? std::vector<std::uint64_t>{0} : c.streams),
        p(specdec_test::padded_rows(c.p, rows, vocab, stride, nan_fill)), q(specdec_test::padded_rows(c.q, rows, vocab, stride, nan_fill)) {}
  void launch(cudaStream_t s = nullptr) {
    const std::int64_t R = rows - static_cast<std::int64_t>(out.acc.size());
    const std::int64_t N = rows - R;
    const specdec::strided_view<const float, 2> pv(p.data(), {rows, vocab}, {stride, 1}, memory_space::device);
    const specdec::strided_view<const float, 2> qv(q.data(), {rows, vocab}, {stride, 1}, memory_space::device);
    auto d1 = [](auto& b, std::int64_t n) { return specdec::make_view<1>(b.data(), {n}, memory_space::device); };
    specdec::verify_multi_draft_batch(specdec::cuda{.stream = s}, dv(ni), d1(tok, N), d1(par, N), pv, qv, mode,
                                      d1(seeds, R), d1(streams, R), dv(out.acc), dv(out.nacc), dv(out.bon), dv(out.emi),
                                      dv(out.st));
  }
};

void check_against_reference(const multi_draft_batch_case& c, device_case& d) {
  specdec_test::check_tree_outputs(c.expected, c.node_indptr, c.tokens, d.out.download());
}

}  // namespace

TEST_CASE("cuda verify_multi_draft_batch draws what the host draws, on random ragged batches", "[cuda][verify]") {
  struct shape {
    int R, max_nodes, max_children;
    std::int64_t V;
  };
  for (auto mode : {draft_sampling::with_replacement, draft_sampling::without_replacement}) {
    specdec_test::multi_draft_branches seen;  // which residual branches these cases take (host twin)
    for (const shape s : {shape{1, 1, 2, 1}, shape{5, 6, 4, 5}, shape{64, 12, 6, 300}, shape{17, 40, 8, 1001},
                          shape{8, 10, 6, 131072}, shape{2, 6, 4, 262144}, shape{3, 1024, 64, 2048}}) {
      const auto c = specdec_test::random_multi_draft_batch(s.R, s.max_nodes, s.V, mode,
                                                            s.R * 13 + s.V + static_cast<int>(mode), s.max_children);
      for (int r = 0; r < c.requests(); ++r) {
        const int b = c.node_indptr[r];
        (void)specdec_test::multi_draft_kernel_twin(seen, c.tokens.data() + b, c.parents.data() + b,
                                                    c.node_indptr[r + 1] - b, c.p.data() + (b + r) * s.V,
                                                    c.q.data() + (b + r) * s.V, s.V, mode, c.seeds[r], c.streams[r]);
      }
      if (specdec_test::sanitizer_sized() && (s.V > 65536 || s.max_nodes > 512)) continue;  // after the twin
      // A loop, not sections: Catch2 would build every case and run the twin again for every section.
      INFO("mode " << static_cast<int>(mode) << " R " << s.R << " nodes <= " << s.max_nodes << " V " << s.V);
      for (std::int64_t pad : {0, 5}) {
        device_case d(c, pad);
        d.launch();
        specdec_test::sync_check("verify_multi_draft_batch");
        check_against_reference(c, d);
      }
    }
    INFO("mode " << static_cast<int>(mode));
    CHECK(seen.residual > 20);
    CHECK(seen.zero_from_p > 0);
    CHECK(seen.reset > 0);
  }
}

TEST_CASE("cuda verify_multi_draft_batch reports bad values in status", "[cuda][verify]") {
  auto c = specdec_test::random_multi_draft_batch(4, 8, 7, draft_sampling::without_replacement, 4321);
  for (std::uint64_t s = 1; c.node_indptr[3] - c.node_indptr[2] < 3; ++s)
    c = specdec_test::random_multi_draft_batch(4, 8, 7, draft_sampling::without_replacement, 4321 + s);
  auto expect = [](const multi_draft_batch_case& bad, specdec::device_error e, std::int32_t request, std::int32_t index) {
    device_case d(bad);
    d.launch();
    specdec_test::sync_check("verify_multi_draft_batch (bad values)");
    const auto s = d.out.status();
    CHECK(s.error == e);
    CHECK(s.request == request);
    CHECK(s.index == index);
  };
  const int b2 = c.node_indptr[2];
  const std::int64_t row2 = b2 + 2;  // request 2's first row (the root's)
  {
    auto bad = c;
    bad.parents[b2 + 1] = 1;
    expect(bad, specdec::device_error::parent, 2, 1);
  }
  {
    auto bad = c;
    bad.tokens[b2 + 1] = 7;
    expect(bad, specdec::device_error::token, 2, 1);
  }
  {
    auto bad = c;
    bad.q[row2 * c.vocab + c.tokens[b2]] = 0.0f;  // node 0 is a root child (breadth first)
    expect(bad, specdec::device_error::draft_prob, 2, 0);
  }
  {  // two root children with one token, drawn "without replacement"
    auto bad = c;
    bad.parents[b2] = bad.parents[b2 + 1] = -1;
    bad.tokens[b2 + 1] = bad.tokens[b2];
    expect(bad, specdec::device_error::sibling, 2, 1);
  }
  {  // a bad entry elsewhere in request 2's root target / draft row (read in full: the root has children)
    auto bad = c;
    bool clash = true;
    std::int64_t i = 0;
    for (; clash; ++i) {  // a token no root child carries
      clash = false;
      for (int j = b2; j < c.node_indptr[3]; ++j) clash |= c.parents[j] == -1 && c.tokens[j] == i;
    }
    bad.p[row2 * c.vocab + i - 1] = std::numeric_limits<float>::quiet_NaN();
    expect(bad, specdec::device_error::row, 2, 0);
    auto bad_q = c;
    bad_q.q[row2 * c.vocab + i - 1] = -0.5f;
    expect(bad_q, specdec::device_error::draft_row, 2, 0);
  }
}

TEST_CASE("cuda verify_multi_draft_batch reads only the rows its walk visits", "[cuda][verify]") {
  auto c = specdec_test::random_multi_draft_batch(6, 10, 9, draft_sampling::with_replacement, 555);
  // Request 0's accepted path: rows of nodes it does not visit may hold anything.
  const auto want = c.expected.request(0);
  const int n0 = c.node_indptr[1];
  auto dirty = c;
  const int planted = specdec_test::spoil_unvisited_rows(dirty);
  device_case d(dirty);
  d.launch();
  specdec_test::sync_check("verify_multi_draft_batch (unvisited rows)");
  check_against_reference(c, d);
  CHECK(planted > 0);
  // A bad draft entry in a row the walk decides on below the root is reported with that row.
  if (!want.accepted.empty() && want.accepted.size() < static_cast<std::size_t>(n0)) {
    const int row = want.accepted.back() + 1;  // the last accepted node's row: visited, and read in
    bool has_children = false;                 // full when that node has children
    for (int i = 0; i < n0; ++i) has_children |= c.parents[i] == want.accepted.back();
    if (has_children) {
      auto bad = c;
      bad.q[static_cast<std::size_t>(row * c.vocab + specdec_test::uncarried_token(c, row))] = std::numeric_limits<float>::infinity();
      device_case e(bad);
      e.launch();
      specdec_test::sync_check("verify_multi_draft_batch (bad visited draft row)");
      const auto s = e.out.status();
      CHECK(s.error == specdec::device_error::draft_row);
      CHECK(s.request == 0);
      CHECK(s.index == row);
    }
  }
}

TEST_CASE("cuda verify_multi_draft_batch reports a node with more rejections than it supports", "[cuda][verify]") {
  // One request whose root has 1100 children carrying token 0, drawn with replacement, and p = 0 there:
  // every child is rejected (p'(0) stays 0), and the 1025th rejection is past the kernel's lists.
  multi_draft_batch_case c;
  c.vocab = 4;
  c.mode = draft_sampling::with_replacement;
  const int n = 1100;
  c.node_indptr = {0, n};
  c.tokens.assign(n, 0);
  c.parents.assign(n, -1);
  c.p.assign(static_cast<std::size_t>(n + 1) * 4, 0.25f);
  c.q.assign(static_cast<std::size_t>(n + 1) * 4, 0.25f);
  c.p[0] = 0.0f, c.p[1] = 0.5f;
  c.seeds = {1};
  c.streams = {2};
  device_case d(c);
  d.launch();
  specdec_test::sync_check("verify_multi_draft_batch (fanout)");
  const auto s = d.out.status();
  CHECK(s.error == specdec::device_error::fanout);
  CHECK(s.request == 0);
  CHECK(s.index == -1);
  // 1000 such children stay within the lists: the device agrees with the host
  c.node_indptr = {0, 1000};
  c.tokens.resize(1000), c.parents.resize(1000);
  c.p.resize(1001 * 4), c.q.resize(1001 * 4);
  c.finish();
  REQUIRE(c.expected.request(0).accepted.empty());
  device_case ok(c);
  ok.launch();
  specdec_test::sync_check("verify_multi_draft_batch (1000 rejections)");
  check_against_reference(c, ok);
  // Without replacement: 1100 distinct root children (tokens 0..1099 of V = 2048) that p gives 0 and
  // q all its mass, so the residual keeps p's tokens 1100.. and every child is rejected (the host
  // walk rejects all 1100); the 1025th rejected token is past the drawn-token list.
  multi_draft_batch_case w;
  w.vocab = 2048;
  w.mode = draft_sampling::without_replacement;
  w.node_indptr = {0, n};
  w.parents.assign(n, -1);
  for (int i = 0; i < n; ++i) w.tokens.push_back(i);
  w.q.assign(static_cast<std::size_t>(n + 1) * 2048, 0.0f);
  w.p.assign(static_cast<std::size_t>(n + 1) * 2048, 0.0f);
  for (int t = 0; t < n; ++t) w.q[static_cast<std::size_t>(t)] = 1.0f / 1100.0f;
  for (int t = n; t < 2048; ++t) w.p[static_cast<std::size_t>(t)] = 1.0f / 948.0f;
  w.seeds = {3};
  w.streams = {4};
  w.finish();
  REQUIRE(w.expected.request(0).accepted.empty());
  device_case dw(w);
  dw.launch();
  specdec_test::sync_check("verify_multi_draft_batch (fanout without replacement)");
  const auto sw = dw.out.status();
  CHECK(sw.error == specdec::device_error::fanout);
  CHECK(sw.request == 0);
  CHECK(sw.index == -1);
}

TEST_CASE("cuda verify_multi_draft_batch is captured in a CUDA graph and replays with new streams", "[cuda][verify]") {
  auto c = specdec_test::random_multi_draft_batch(8, 12, 4096, draft_sampling::without_replacement, 77);
  device_case d(c);
  std::uint32_t step = 0;
  specdec_test::replay_in_graph(
      3, [&](cudaStream_t s) { d.launch(s); },
      [&] {
        ++step;
        for (int r = 0; r < c.requests(); ++r) c.streams[r] = specdec::stream_id(static_cast<std::uint32_t>(r), step);
        c.finish();
        d.streams.upload(c.streams);
        d.out.reset();
      },
      [&] { check_against_reference(c, d); });
}

TEST_CASE("cuda verify_multi_draft_batch rejects host memory, bad shapes and a bad mode before any CUDA call",
          "[cuda][verify][nogpu]") {
  auto c = specdec_test::random_multi_draft_batch(2, 4, 4, draft_sampling::with_replacement, 3);
  std::vector<std::int32_t> acc(c.tokens.size()), nacc(2), bon(2), emi(c.tokens.size() + 2), st(3);
  auto dev = [](auto& x) {
    return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())}, memory_space::device);
  };
  const std::int64_t rows = c.nodes() + 2;
  const auto p_dev = specdec::make_view<2>(c.p.data(), {rows, c.vocab}, memory_space::device);
  const auto q_host = specdec::make_view<2>(c.q.data(), {rows, c.vocab});
  const auto q_dev = specdec::make_view<2>(c.q.data(), {rows, c.vocab}, memory_space::device);
  CHECK_THROWS_WITH(specdec::verify_multi_draft_batch(specdec::cuda{}, dev(c.node_indptr), dev(c.tokens),
                                                      dev(c.parents), p_dev, q_host, c.mode, dev(c.seeds),
                                                      dev(c.streams), dev(acc), dev(nacc), dev(bon), dev(emi), dev(st)),
                    Catch::Contains("draft_probs") && Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(specdec::verify_multi_draft_batch(specdec::cuda{}, dev(c.node_indptr), dev(c.tokens),
                                                      dev(c.parents), p_dev, q_dev, c.mode, dev(c.seeds), dev(c.seeds),
                                                      dev(acc), dev(nacc), dev(bon), dev(acc), dev(st)),
                    Catch::Contains("emitted"));
  CHECK_THROWS_WITH(specdec::verify_multi_draft_batch(specdec::cuda{}, dev(c.node_indptr), dev(c.tokens),
                                                      dev(c.parents), p_dev, q_dev, static_cast<draft_sampling>(2),
                                                      dev(c.seeds), dev(c.streams), dev(acc), dev(nacc), dev(bon),
                                                      dev(emi), dev(st)),
                    Catch::Contains("mode"));
}

namespace {
using specdec_test::device_logits_case;
using specdec_test::logits_case_kind;
using specdec_test::sampled_logits_case;
}  // namespace

TEST_CASE("cuda verify_multi_draft_batch from logits draws what the host's processed rows draw", "[cuda][verify]") {
  // sampled_logits_case's expected result for multi-draft trees: process_logits_batch,
  // logits_to_probs_batch and the probabilities form on the host; the device processes only the rows
  // its walk reaches
  int accepted = 0;
  for (const auto kind : {logits_case_kind::multi_draft, logits_case_kind::multi_draft_wor})
    for (const bool penalties : {false, true})
      for (const auto& [R, max_nodes, V] : {std::tuple{1, 1, std::int64_t{1}}, {5, 8, 7}, {17, 40, 300},
                                            {64, 16, 4099}, {8, 16, 131075}, {3, 64, 300007}}) {
        const sampled_logits_case c(R, max_nodes, V, 3, penalties, static_cast<std::uint64_t>(R * 19 + V + penalties),
                                    kind);
        accepted += specdec_test::device_matches_host(c);
      }
  CHECK(accepted > 20);
}

TEST_CASE("cuda verify_multi_draft_batch from logits reports what processing reports, for rows it reaches only",
          "[cuda][verify]") {
  sampled_logits_case c(3, 6, 40, 3, true, 99, logits_case_kind::multi_draft_wor);
  for (std::uint64_t s = 100; c.node_indptr[3] - c.node_indptr[2] < 2; ++s)
    c = sampled_logits_case(3, 6, 40, 3, true, s, logits_case_kind::multi_draft_wor);
  const auto expect = [](const sampled_logits_case& bad, specdec::device_error e, std::int32_t request, std::int32_t index) {
    device_logits_case d(bad);
    d.launch();
    specdec_test::sync_check("verify_multi_draft_batch (logits, bad values)");
    const auto s = d.out.status();
    CHECK(s.error == e);
    CHECK(s.request == request);
    CHECK(s.index == index);
  };
  const std::int32_t b2 = c.node_indptr[2], root2 = b2 + 2;  // request 2's first row: always reached
  specdec_test::common_logits_reports(c, root2, 2, expect);
  {  // checked up front, before any row is processed: q = 0 at node 0's token in the root's draft row
    auto bad = c;
    bad.q[static_cast<std::size_t>(root2 * c.vocab + c.tokens[static_cast<std::size_t>(b2)])] = 0.0f;
    expect(bad, specdec::device_error::draft_prob, 2, 0);
  }
  {  // the host test's hand case: node 0 rejected at temperature 0, NaN in the rows after it unread
    const auto h = specdec_test::rejected_root_case(specdec_test::logits_case_kind::multi_draft);
    device_logits_case d(h);
    d.launch();
    specdec_test::sync_check("verify_multi_draft_batch (logits, unread NaN)");
    CHECK(d.out.status().ok());
    CHECK(d.out.emi.download() == std::vector<std::int32_t>{3, -9, -9});
    // the root row peaking on token 1 instead: node 0 accepted, row 1 reached and its NaN reported
    auto reached = h;
    reached.logits[1] = 20.0f;
    reached.row_params[1] = 0;
    expect(reached, specdec::device_error::row, -1, 1);
  }
  {  // a rejected sibling's row is not read either (the host test's second hand case)
    device_logits_case d(specdec_test::rejected_sibling_case());
    d.launch();
    specdec_test::sync_check("verify_multi_draft_batch (logits, rejected sibling)");
    CHECK(d.out.status().ok());
    CHECK(d.out.emi.download() == std::vector<std::int32_t>{3, 4, -9});
  }
  {  // a bad entry in request 2's root draft row, read in full before the root's first decision
    auto bad = c;
    bad.q[static_cast<std::size_t>(root2 * c.vocab + c.vocab - 1)] = -0.5f;  // no child carries token V - 1
    expect(bad, specdec::device_error::draft_row, 2, 0);
  }
  {  // two siblings with one token, without replacement
    auto bad = c;
    bad.parents[static_cast<std::size_t>(b2 + 1)] = bad.parents[static_cast<std::size_t>(b2)];
    bad.tokens[static_cast<std::size_t>(b2 + 1)] = bad.tokens[static_cast<std::size_t>(b2)];
    expect(bad, specdec::device_error::sibling, 2, 1);
  }
}

TEST_CASE("cuda verify_multi_draft_batch from logits is captured in a CUDA graph and replays with new streams",
          "[cuda][verify]") {
  specdec_test::replay_logits_case(sampled_logits_case(8, 24, 5003, 3, true, 5, logits_case_kind::multi_draft));
}

TEST_CASE("cuda verify_multi_draft_batch from logits rejects host memory, a short workspace, overlaps and a bad mode "
          "first",
          "[cuda][verify][nogpu]") {
  sampled_logits_case c(2, 5, 16, 2, false, 3, logits_case_kind::multi_draft);
  std::vector<std::int32_t> acc(c.tokens.size()), nacc(2), bon(2), emi(c.tokens.size() + 2), st(3);
  std::vector<float> work(2 * 16);
  auto dev = [](auto& x) {
    return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())}, memory_space::device);
  };
  const auto l_dev = specdec::make_view<2>(c.logits.data(), {c.rows(), 16}, memory_space::device);
  const auto l_host = specdec::make_view<2>(c.logits.data(), {c.rows(), 16});
  const auto q_dev = specdec::make_view<2>(c.q.data(), {c.rows(), 16}, memory_space::device);
  const auto w_dev = specdec::make_view<2>(work.data(), {2, 16}, memory_space::device);
  const auto call = [&](auto l, auto q, auto w, draft_sampling mode = draft_sampling::with_replacement) {
    specdec::verify_multi_draft_batch(specdec::cuda{}, dev(c.node_indptr), dev(c.tokens), dev(c.parents), l, q, mode,
                                      dev(c.params), dev(c.row_params), dev(c.seeds), dev(c.streams), w, dev(acc),
                                      dev(nacc), dev(bon), dev(emi), dev(st));
  };
  CHECK_THROWS_WITH(call(l_host, q_dev, w_dev), Catch::Contains("target_logits") && Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(call(l_dev, specdec::make_view<2>(c.q.data(), {c.rows(), 16}), w_dev),
                    Catch::Contains("draft_probs") && Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(call(l_dev, q_dev, specdec::make_view<2>(work.data(), {2, 16})),
                    Catch::Contains("workspace") && Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(call(l_dev, q_dev, specdec::make_view<2>(work.data(), {1, 16}, memory_space::device)),
                    Catch::Contains("workspace"));
  CHECK_THROWS_WITH(call(l_dev, q_dev, specdec::make_view<2>(c.q.data(), {2, 16}, memory_space::device)),
                    Catch::Contains("workspace") && Catch::Contains("draft_probs"));
  CHECK_THROWS_WITH(call(l_dev, q_dev, w_dev, static_cast<draft_sampling>(7)), Catch::Contains("mode"));
}
