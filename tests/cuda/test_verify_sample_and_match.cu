// verify_sample_and_match_batch(cuda{}) (array form) against verify_sample_and_match per request
// with the same Philox streams (tests/verify/sample_and_match_batch_util.hpp): the same accepted
// tokens bit for bit on ragged batches up to 64 requests, vocabularies from 1 to 256K (a padded row
// stride), a request beyond the shared-memory walk; device-side value errors in status; NaN in an
// unvisited row is no error; graph capture with the streams updated between replays. The logits
// form (each visited row processed in the request's workspace row) against the host's processing of
// every row, then the probabilities form: the same outputs, process_logits_batch's reports for
// visited rows only, graph replay, and its host-side refusals ([nogpu]).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <tuple>
#include <vector>

#include "cuda/cuda_test_util.cuh"
#include "cuda/logits_verify_device_util.cuh"
#include "cuda/tree_verify_device_util.cuh"
#include "specdec/verify/sample_and_match.cuh"
#include "verify/sample_and_match_batch_util.hpp"

using specdec::memory_space;
using specdec_test::device_buffer;
using specdec_test::dv;
using specdec_test::sample_and_match_case;

namespace {

struct device_case {
  device_buffer<std::int32_t> ni, tok, par;
  specdec_test::device_tree_outputs out;
  device_buffer<std::uint64_t> seeds, streams;
  device_buffer<float> pr;
  std::int64_t rows, vocab, stride;
  // Probabilities copied with a row stride of vocab + pad floats (the padding holds NaN: never read).
  device_case(const sample_and_match_case& c, std::int64_t pad = 0)
      : ni(c.node_indptr), tok(c.tokens), par(c.parents), out(c.node_indptr.size() - 1, c.tokens.size()), seeds(c.seeds), streams(c.streams),
        pr(static_cast<std::size_t>((c.nodes() + c.requests()) * (c.vocab + pad))), rows(c.nodes() + c.requests()),
        vocab(c.vocab), stride(c.vocab + pad) {
    std::vector<float> h(pr.size(), std::numeric_limits<float>::quiet_NaN());
    for (std::int64_t r = 0; r < rows; ++r) std::copy_n(c.probs.begin() + r * vocab, vocab, h.begin() + r * stride);
    pr.upload(h);
  }
  void launch(cudaStream_t s = nullptr) {
    const specdec::strided_view<const float, 2> p(pr.data(), {rows, vocab}, {stride, 1}, memory_space::device);
    specdec::verify_sample_and_match_batch(specdec::cuda{.stream = s}, dv(ni), dv(tok), dv(par), p, dv(seeds),
                                           dv(streams), dv(out.acc), dv(out.nacc), dv(out.bon), dv(out.emi), dv(out.st));
  }
  specdec::device_status status() const { return out.status(); }
};

int check_against_reference(const sample_and_match_case& c, device_case& d) {
  return specdec_test::check_tree_outputs(c.expected, c.node_indptr, c.tokens, d.out.download());
}

}  // namespace

TEST_CASE("cuda verify_sample_and_match_batch draws what the host draws, on random ragged batches", "[cuda][verify]") {
  struct shape {
    int R, max_nodes;
    std::int64_t V;
    int alphabet;
  };
  int accepted = 0;
  for (const shape s : {shape{1, 1, 1, 1}, shape{5, 8, 5, 3}, shape{64, 70, 300, 3}, shape{17, 30, 1001, 3},
                        shape{33, 40, 4111, 2}, shape{8, 16, 131072, 4}, shape{2, 64, 262144, 2}}) {
    INFO("R " << s.R << " nodes <= " << s.max_nodes << " V " << s.V);
    const auto c = specdec_test::random_sample_and_match_batch(s.R, s.max_nodes, s.V, s.alphabet, s.R * 7 + s.V);
    for (std::int64_t pad : {0, 3}) {
      device_case d(c, pad);
      d.launch();
      specdec_test::sync_check("verify_sample_and_match_batch");
      accepted += check_against_reference(c, d);
    }
  }
  {  // a request beyond the shared-memory walk (3000 nodes) between small ones
    // (Blocks, not sections: with sections, `accepted` below would count one section's cases only.)
    auto m = specdec_test::random_sample_and_match_batch(1, 4, 3, 2, 99);
    const auto big = specdec_test::random_sample_and_match_batch(1, 3000, 3, 2, 100);
    const int base = m.nodes();
    for (int i = 0; i < big.nodes(); ++i) m.tokens.push_back(big.tokens[i]), m.parents.push_back(big.parents[i]);
    m.node_indptr.push_back(base + big.nodes());
    m.probs.insert(m.probs.end(), big.probs.begin(), big.probs.end());
    m.seeds.push_back(big.seeds[0]), m.streams.push_back(big.streams[0]);
    m.finish();
    REQUIRE(big.nodes() > 1024);
    device_case d(m);
    d.launch();
    specdec_test::sync_check("verify_sample_and_match_batch (large request)");
    accepted += check_against_reference(m, d);
  }
  CHECK(accepted > 0);
}

TEST_CASE("cuda verify_sample_and_match_batch reports bad values in status", "[cuda][verify]") {
  auto c = specdec_test::random_sample_and_match_batch(4, 12, 7, 3, 31337);
  while (c.node_indptr[3] - c.node_indptr[2] < 2)
    c = specdec_test::random_sample_and_match_batch(4, 12, 7, 3, c.tokens.size() + 5);
  auto expect = [](const sample_and_match_case& bad, specdec::device_error e, std::int32_t request, std::int32_t index) {
    device_case d(bad);
    d.launch();
    specdec_test::sync_check("verify_sample_and_match_batch (bad values)");
    const auto s = d.status();
    CHECK(s.error == e);
    CHECK(s.request == request);
    CHECK(s.index == index);
  };
  const int b2 = c.node_indptr[2];
  {
    auto bad = c;
    bad.tokens[b2 + 1] = 7;
    expect(bad, specdec::device_error::token, 2, 1);
  }
  {
    auto bad = c;
    bad.parents[b2 + 1] = 5;
    expect(bad, specdec::device_error::parent, 2, 1);
  }
  {
    auto bad = c;
    bad.node_indptr[2] = bad.node_indptr[1] - 1;
    device_case d(bad);
    d.launch();
    specdec_test::sync_check("verify_sample_and_match_batch (bad offsets)");
    CHECK(d.status().error == specdec::device_error::node_indptr);
  }
  for (const float v : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), -0.5f}) {
    auto bad = c;  // request 3's root row (always visited)
    bad.probs[(c.node_indptr[3] + 3) * c.vocab + 2] = v;
    expect(bad, specdec::device_error::row, 3, 0);
  }
  {  // an all-zero root row: nothing to draw
    auto bad = c;
    for (std::int64_t t = 0; t < c.vocab; ++t) bad.probs[(c.node_indptr[1] + 1) * c.vocab + t] = 0.0f;
    expect(bad, specdec::device_error::row, 1, 0);
  }
  {  // NaN in a row the walk does not visit is no error (the host test's hand-built case)
    sample_and_match_case h;
    h.vocab = 5;
    h.node_indptr = {0, 2};
    h.tokens = {1, 2};
    h.parents = {-1, -1};
    const float nan = std::numeric_limits<float>::quiet_NaN();
    h.probs = {0, 1, 0, 0, 0, 0, 0, 0, 0, 2, nan, nan, nan, nan, nan};
    h.seeds = {9};
    h.streams = {specdec::stream_id(0, 0)};
    device_case d(h);
    d.launch();
    specdec_test::sync_check("verify_sample_and_match_batch (unvisited NaN)");
    CHECK(d.status().ok());
    CHECK(d.out.emi.download() == std::vector<std::int32_t>{1, 4, -9});
  }
}

TEST_CASE("cuda verify_sample_and_match_batch is captured in a CUDA graph and replays with new streams", "[cuda][verify]") {
  auto c = specdec_test::random_sample_and_match_batch(8, 64, 4096, 3, 77);
  device_case d(c);
  std::uint32_t step = 0;
  specdec_test::replay_in_graph(
      3, [&](cudaStream_t s) { d.launch(s); },
      [&] {  // the engine's update between replays: next step's streams, fresh outputs
        ++step;
        for (int r = 0; r < c.requests(); ++r) c.streams[r] = specdec::stream_id(static_cast<std::uint32_t>(r), step);
        c.finish();
        d.streams.upload(c.streams);
        d.out.reset();
      },
      [&] { check_against_reference(c, d); });
}

TEST_CASE("cuda verify_sample_and_match_batch rejects host memory and bad shapes before any CUDA call",
          "[cuda][verify][nogpu]") {
  auto c = specdec_test::random_sample_and_match_batch(2, 5, 4, 2, 3);
  std::vector<std::int32_t> acc(c.tokens.size()), nacc(2), bon(2), emi(c.tokens.size() + 2), st(3);
  auto dev = [](auto& x) {
    return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())}, memory_space::device);
  };
  const auto p_host = specdec::make_view<2>(c.probs.data(), {c.nodes() + 2, c.vocab});
  const auto p_dev = specdec::make_view<2>(c.probs.data(), {c.nodes() + 2, c.vocab}, memory_space::device);
  CHECK_THROWS_WITH(specdec::verify_sample_and_match_batch(specdec::cuda{}, dev(c.node_indptr), dev(c.tokens),
                                                           dev(c.parents), p_host, dev(c.seeds), dev(c.streams),
                                                           dev(acc), dev(nacc), dev(bon), dev(emi), dev(st)),
                    Catch::Contains("target_probs") && Catch::Contains("device-accessible"));
  const auto seeds_host = specdec::make_view<1>(c.seeds.data(), {2});
  CHECK_THROWS_WITH(specdec::verify_sample_and_match_batch(specdec::cuda{}, dev(c.node_indptr), dev(c.tokens),
                                                           dev(c.parents), p_dev, seeds_host, dev(c.streams), dev(acc),
                                                           dev(nacc), dev(bon), dev(emi), dev(st)),
                    Catch::Contains("seeds") && Catch::Contains("device-accessible"));
  const auto huge = specdec::make_view<2>(c.probs.data(), {c.nodes() + 2, std::int64_t{1} << 22}, memory_space::device);
  CHECK_THROWS_WITH(specdec::verify_sample_and_match_batch(specdec::cuda{}, dev(c.node_indptr), dev(c.tokens),
                                                           dev(c.parents), huge, dev(c.seeds), dev(c.streams), dev(acc),
                                                           dev(nacc), dev(bon), dev(emi), dev(st)),
                    Catch::Contains("2097152"));
}

namespace {

using specdec_test::device_logits_case;
using specdec_test::sampled_logits_case;

}  // namespace

TEST_CASE("cuda verify_sample_and_match_batch from logits draws what the host's processed rows draw", "[cuda][verify]") {
  // sampled_logits_case's expected result: process_logits_batch, logits_to_probs_batch and the
  // probabilities form on the host; the device processes only the visited rows, in its workspace
  int accepted = 0;
  for (const bool penalties : {false, true})
    for (const auto& [R, max_nodes, V] : {std::tuple{1, 1, std::int64_t{1}}, {5, 8, 7}, {17, 40, 300}, {33, 16, 4099},
                                          {8, 16, 131075}, {3, 64, 300007}}) {
      const sampled_logits_case c(R, max_nodes, V, 3, penalties, static_cast<std::uint64_t>(R * 13 + V + penalties));
      accepted += specdec_test::device_matches_host(c);
    }
  CHECK(accepted > 20);
}

TEST_CASE("cuda verify_sample_and_match_batch from logits reports what processing reports, for visited rows only",
          "[cuda][verify]") {
  const sampled_logits_case c(3, 6, 40, 3, true, 99);
  const auto expect = [](const sampled_logits_case& bad, specdec::device_error e, std::int32_t request, std::int32_t index,
                         const std::vector<std::int32_t>* row_context = nullptr) {
    device_logits_case d(bad);
    if (row_context != nullptr) d.ctx->row_context.upload(*row_context);
    d.launch();
    specdec_test::sync_check("verify_sample_and_match_batch (logits, bad values)");
    const auto s = d.out.status();
    CHECK(s.error == e);
    CHECK(s.request == request);
    CHECK(s.index == index);
  };
  const std::int32_t root2 = c.node_indptr[2] + 2;  // request 2's root row: always visited
  specdec_test::common_logits_reports(c, root2, 2, expect);
  {  // row 2's context out of range
    const auto view = c.b.view();
    std::vector<std::int32_t> row_context(view.row_context.data(), view.row_context.data() + c.rows());
    const auto contexts = static_cast<std::int32_t>(view.context_length.extent(0));
    row_context[static_cast<std::size_t>(root2)] = contexts;
    expect(c, specdec::device_error::context, contexts, root2, &row_context);
  }
  {  // NaN and a bad entry in a row the walk does not visit: no report (the host test's hand case)
    const auto h = specdec_test::unread_nan_logits_case();
    device_logits_case d(h);
    d.launch();
    specdec_test::sync_check("verify_sample_and_match_batch (logits, unvisited NaN)");
    CHECK(d.out.status().ok());
    CHECK(d.out.emi.download() == std::vector<std::int32_t>{1, 3, -9});
  }
}

TEST_CASE("cuda verify_sample_and_match_batch from logits is captured in a CUDA graph and replays with new streams",
          "[cuda][verify]") {
  specdec_test::replay_logits_case(sampled_logits_case(8, 32, 5003, 3, true, 5));
}

TEST_CASE("cuda verify_sample_and_match_batch from logits rejects host memory, a short workspace and overlaps first",
          "[cuda][verify][nogpu]") {
  sampled_logits_case c(2, 5, 16, 2, false, 3);
  std::vector<std::int32_t> acc(c.tokens.size()), nacc(2), bon(2), emi(c.tokens.size() + 2), st(3);
  std::vector<float> work(2 * 16);
  auto dev = [](auto& x) {
    return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())}, memory_space::device);
  };
  const auto l_dev = specdec::make_view<2>(c.logits.data(), {c.rows(), 16}, memory_space::device);
  const auto l_host = specdec::make_view<2>(c.logits.data(), {c.rows(), 16});
  const auto w_dev = specdec::make_view<2>(work.data(), {2, 16}, memory_space::device);
  const auto call = [&](auto l, auto w) {
    specdec::verify_sample_and_match_batch(specdec::cuda{}, dev(c.node_indptr), dev(c.tokens), dev(c.parents), l,
                                           dev(c.params), dev(c.row_params), dev(c.seeds), dev(c.streams), w, dev(acc),
                                           dev(nacc), dev(bon), dev(emi), dev(st));
  };
  CHECK_THROWS_WITH(call(l_host, w_dev), Catch::Contains("target_logits") && Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(call(l_dev, specdec::make_view<2>(work.data(), {2, 16})),
                    Catch::Contains("workspace") && Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(call(l_dev, specdec::make_view<2>(work.data(), {1, 16}, memory_space::device)), Catch::Contains("workspace"));
  CHECK_THROWS_WITH(call(l_dev, specdec::make_view<2>(c.logits.data(), {2, 16}, memory_space::device)),
                    Catch::Contains("workspace") && Catch::Contains("target_logits"));
}
