// verify_chain_speculative_batch(cuda{}) (array form) against verify_chain_speculative per request with
// the same Philox streams (tests/verify/chain_speculative_batch_util.hpp): the same accepted tokens and
// residual / bonus draws bit for bit on ragged batches of chains up to 64 requests and vocabularies
// up to 256K (a padded row stride); device-side value errors in status; graph capture. The logits
// form (each target row the walk reaches processed in the request's workspace row) against the host's
// processing of every row, then the probabilities form: the same outputs, process_logits_batch's
// reports for the rows it reaches only, graph replay, and its host-side refusals ([nogpu]).
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "cuda/cuda_test_util.cuh"
#include "cuda/logits_verify_device_util.cuh"
#include "cuda/tree_verify_device_util.cuh"
#include "specdec/verify/speculative_sampling.cuh"
#include "verify/chain_speculative_batch_util.hpp"

using specdec::memory_space;
using specdec_test::chain_batch_case;
using specdec_test::device_buffer;
using specdec_test::dv;

namespace {

constexpr float nan_fill = std::numeric_limits<float>::quiet_NaN();  // a read past a row shows

struct device_case {
  std::int64_t rows, vocab, stride;
  device_buffer<std::int32_t> ni, tok, par;
  specdec_test::device_tree_outputs out;
  device_buffer<std::uint64_t> seeds, streams;
  device_buffer<float> p, q;
  device_case(const chain_batch_case& c, std::int64_t pad = 0)
      : rows(c.nodes() + c.requests()), vocab(c.vocab), stride(c.vocab + pad), ni(c.node_indptr), tok(c.tokens),
        par(c.parents), out(c.node_indptr.size() - 1, c.tokens.size()), seeds(c.seeds), streams(c.streams),
        p(specdec_test::padded_rows(c.p, rows, vocab, stride, nan_fill)),
        q(specdec_test::padded_rows(c.q, rows, vocab, stride, nan_fill)) {}
  void launch(cudaStream_t s = nullptr) {
    const specdec::strided_view<const float, 2> pv(p.data(), {rows, vocab}, {stride, 1}, memory_space::device);
    const specdec::strided_view<const float, 2> qv(q.data(), {rows, vocab}, {stride, 1}, memory_space::device);
    specdec::verify_chain_speculative_batch(specdec::cuda{.stream = s}, dv(ni), dv(tok), dv(par), pv, qv, dv(seeds),
                                            dv(streams), dv(out.acc), dv(out.nacc), dv(out.bon), dv(out.emi), dv(out.st));
  }
  specdec::device_status status() const { return out.status(); }
};

void check_against_reference(const chain_batch_case& c, device_case& d) {
  specdec_test::check_tree_outputs(c.expected, c.node_indptr, c.tokens, d.out.download());
}

}  // namespace

TEST_CASE("cuda verify_chain_speculative_batch draws what the host draws, on random ragged batches", "[cuda][verify]") {
  struct shape {
    int R, max_nodes;
    std::int64_t V;
  };
  for (const shape s : {shape{1, 1, 1}, shape{5, 6, 5}, shape{64, 12, 300}, shape{17, 8, 1001}, shape{8, 6, 131072},
                        shape{2, 5, 262144}}) {
    DYNAMIC_SECTION("R " << s.R << " nodes <= " << s.max_nodes << " V " << s.V) {
      const auto c = specdec_test::random_chain_batch(s.R, s.max_nodes, s.V, s.R * 13 + s.V);
      for (std::int64_t pad : {0, 5}) {
        device_case d(c, pad);
        d.launch();
        specdec_test::sync_check("verify_chain_speculative_batch");
        check_against_reference(c, d);
      }
    }
  }
}

TEST_CASE("cuda verify_chain_speculative_batch reports bad values in status", "[cuda][verify]") {
  auto c = specdec_test::random_chain_batch(4, 6, 7, 4321);
  while (c.node_indptr[3] - c.node_indptr[2] < 2) c = specdec_test::random_chain_batch(4, 6, 7, c.tokens.size() + 11);
  auto expect = [](const chain_batch_case& bad, specdec::device_error e, std::int32_t request, std::int32_t index) {
    device_case d(bad);
    d.launch();
    specdec_test::sync_check("verify_chain_speculative_batch (bad values)");
    const auto s = d.status();
    CHECK(s.error == e);
    CHECK(s.request == request);
    CHECK(s.index == index);
  };
  const int b2 = c.node_indptr[2];
  const std::int64_t row2 = b2 + 2;  // request 2's first row
  {
    auto bad = c;
    bad.parents[b2 + 1] = -1;
    expect(bad, specdec::device_error::chain, 2, 1);
  }
  {
    auto bad = c;
    bad.tokens[b2 + 1] = 7;
    expect(bad, specdec::device_error::token, 2, 1);
  }
  {
    auto bad = c;
    bad.q[row2 * c.vocab + c.tokens[b2]] = 0.0f;
    expect(bad, specdec::device_error::draft_prob, 2, 0);
  }
  {  // a bad entry elsewhere in request 2's first target / draft row (always read in full)
    auto bad = c;
    bad.p[row2 * c.vocab + (c.tokens[b2] + 1) % c.vocab] = std::numeric_limits<float>::quiet_NaN();
    expect(bad, specdec::device_error::row, 2, 0);
    auto bad_q = c;
    bad_q.q[row2 * c.vocab + (c.tokens[b2] + 1) % c.vocab] = -0.5f;
    expect(bad_q, specdec::device_error::draft_row, 2, 0);
  }
}

TEST_CASE("cuda verify_chain_speculative_batch is captured in a CUDA graph and replays with new streams",
          "[cuda][verify]") {
  auto c = specdec_test::random_chain_batch(8, 6, 4096, 77);
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

TEST_CASE("cuda verify_chain_speculative_batch rejects host memory and bad shapes before any CUDA call",
          "[cuda][verify][nogpu]") {
  auto c = specdec_test::random_chain_batch(2, 4, 4, 3);
  std::vector<std::int32_t> acc(c.tokens.size()), nacc(2), bon(2), emi(c.tokens.size() + 2), st(3);
  auto dev = [](auto& x) {
    return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())}, memory_space::device);
  };
  const std::int64_t rows = c.nodes() + 2;
  const auto p_dev = specdec::make_view<2>(c.p.data(), {rows, c.vocab}, memory_space::device);
  const auto q_host = specdec::make_view<2>(c.q.data(), {rows, c.vocab});
  const auto q_dev = specdec::make_view<2>(c.q.data(), {rows, c.vocab}, memory_space::device);
  CHECK_THROWS_WITH(specdec::verify_chain_speculative_batch(specdec::cuda{}, dev(c.node_indptr), dev(c.tokens),
                                                            dev(c.parents), p_dev, q_host, dev(c.seeds), dev(c.streams),
                                                            dev(acc), dev(nacc), dev(bon), dev(emi), dev(st)),
                    Catch::Contains("draft_probs") && Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(specdec::verify_chain_speculative_batch(specdec::cuda{}, dev(c.node_indptr), dev(c.tokens),
                                                            dev(c.parents), p_dev, q_dev, dev(c.seeds), dev(c.seeds),
                                                            dev(acc), dev(nacc), dev(bon), dev(acc), dev(st)),
                    Catch::Contains("emitted"));
}

namespace {
using specdec_test::device_logits_case;
using specdec_test::sampled_logits_case;
}  // namespace

TEST_CASE("cuda verify_chain_speculative_batch from logits draws what the host's processed rows draw", "[cuda][verify]") {
  // sampled_logits_case's expected result for chains: process_logits_batch, logits_to_probs_batch and
  // the probabilities form on the host; the device processes only the rows its walk reaches
  int accepted = 0;
  for (const bool penalties : {false, true})
    for (const auto& [R, max_nodes, V] : {std::tuple{1, 1, std::int64_t{1}}, {5, 8, 7}, {17, 12, 300}, {64, 8, 4099},
                                          {8, 16, 131075}, {3, 6, 300007}}) {
      const sampled_logits_case c(R, max_nodes, V, 3, penalties, static_cast<std::uint64_t>(R * 17 + V + penalties), specdec_test::logits_case_kind::chain);
      accepted += specdec_test::device_matches_host(c);
    }
  CHECK(accepted > 20);
}

TEST_CASE("cuda verify_chain_speculative_batch from logits reports what processing reports, for rows it reaches only",
          "[cuda][verify]") {
  sampled_logits_case c(3, 6, 40, 3, true, 99, specdec_test::logits_case_kind::chain);
  for (std::uint64_t s = 100; c.node_indptr[3] - c.node_indptr[2] < 2; ++s) c = sampled_logits_case(3, 6, 40, 3, true, s, specdec_test::logits_case_kind::chain);
  const auto expect = [](const sampled_logits_case& bad, specdec::device_error e, std::int32_t request, std::int32_t index) {
    device_logits_case d(bad);
    d.launch();
    specdec_test::sync_check("verify_chain_speculative_batch (logits, bad values)");
    const auto s = d.out.status();
    CHECK(s.error == e);
    CHECK(s.request == request);
    CHECK(s.index == index);
  };
  const std::int32_t b2 = c.node_indptr[2], root2 = b2 + 2;  // request 2's first row: always reached
  specdec_test::common_logits_reports(c, root2, 2, expect);
  {  // checked up front, before any row is processed
    auto bad = c;
    bad.q[static_cast<std::size_t>(root2 * c.vocab + c.tokens[static_cast<std::size_t>(b2)])] = 0.0f;
    expect(bad, specdec::device_error::draft_prob, 2, 0);
    auto chain = c;
    chain.parents[static_cast<std::size_t>(b2 + 1)] = -1;
    expect(chain, specdec::device_error::chain, 2, 1);
  }
  {  // the host test's hand case: node 0 rejected at temperature 0, NaN in the rows after it unread
    const auto h = specdec_test::rejected_root_case(specdec_test::logits_case_kind::chain);
    device_logits_case d(h);
    d.launch();
    specdec_test::sync_check("verify_chain_speculative_batch (logits, unread NaN)");
    CHECK(d.out.status().ok());
    CHECK(d.out.emi.download() == std::vector<std::int32_t>{3, -9, -9});
    // the root row peaking on token 1 instead: node 0 accepted, row 1 reached and its NaN reported
    auto reached = h;
    reached.logits[1] = 20.0f;
    reached.row_params[1] = 0;
    expect(reached, specdec::device_error::row, -1, 1);
  }
  {  // a bad entry in request 2's first draft row, read in full before the first decision
    auto bad = c;
    bad.q[static_cast<std::size_t>(root2 * c.vocab + c.vocab - 1)] = -0.5f;  // no child carries token V - 1
    expect(bad, specdec::device_error::draft_row, 2, 0);
  }
}

TEST_CASE("cuda verify_chain_speculative_batch from logits is captured in a CUDA graph and replays with new streams",
          "[cuda][verify]") {
  specdec_test::replay_logits_case(sampled_logits_case(8, 12, 5003, 3, true, 5, specdec_test::logits_case_kind::chain));
}

TEST_CASE("cuda verify_chain_speculative_batch from logits rejects host memory, a short workspace and overlaps first",
          "[cuda][verify][nogpu]") {
  sampled_logits_case c(2, 5, 16, 2, false, 3, specdec_test::logits_case_kind::chain);
  std::vector<std::int32_t> acc(c.tokens.size()), nacc(2), bon(2), emi(c.tokens.size() + 2), st(3);
  std::vector<float> work(2 * 16);
  auto dev = [](auto& x) {
    return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())}, memory_space::device);
  };
  const auto l_dev = specdec::make_view<2>(c.logits.data(), {c.rows(), 16}, memory_space::device);
  const auto l_host = specdec::make_view<2>(c.logits.data(), {c.rows(), 16});
  const auto q_dev = specdec::make_view<2>(c.q.data(), {c.rows(), 16}, memory_space::device);
  const auto w_dev = specdec::make_view<2>(work.data(), {2, 16}, memory_space::device);
  const auto call = [&](auto l, auto q, auto w) {
    specdec::verify_chain_speculative_batch(specdec::cuda{}, dev(c.node_indptr), dev(c.tokens), dev(c.parents), l, q,
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
}
