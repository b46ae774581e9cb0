// verify_greedy_batch(cuda{}) (array form) against verify_greedy per request and the host backend
// (tests/verify/greedy_batch_util.hpp): ragged batches up to 64 requests, vocabularies from 1 to
// 256K (aligned and unaligned rows, a padded row stride), a request beyond the shared-memory walk;
// device-side value errors in status; NaN in an unread row is no error; graph capture.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "cuda/cuda_test_util.cuh"
#include "cuda/tree_verify_device_util.cuh"
#include "specdec/verify/greedy.cuh"
#include "verify/greedy_batch_util.hpp"

using specdec::memory_space;
using specdec_test::device_buffer;
using specdec_test::dv;
using specdec_test::greedy_batch_case;

namespace {

struct device_case {
  device_buffer<std::int32_t> ni, tok, par;
  specdec_test::device_tree_outputs out;
  device_buffer<float> lg;
  std::int64_t rows, vocab, stride;
  // Logits copied with a row stride of vocab + pad floats (pad > 0: rows not back to back).
  device_case(const greedy_batch_case& c, std::int64_t pad = 0)
      : ni(c.node_indptr), tok(c.tokens), par(c.parents), out(c.node_indptr.size() - 1, c.tokens.size()),
        lg(static_cast<std::size_t>((c.nodes() + c.requests()) * (c.vocab + pad))),
        rows(c.nodes() + c.requests()), vocab(c.vocab), stride(c.vocab + pad) {
    std::vector<float> h(lg.size(), std::numeric_limits<float>::quiet_NaN());  // the padding holds NaN: never read
    for (std::int64_t r = 0; r < rows; ++r)
      std::copy_n(c.logits.begin() + r * vocab, vocab, h.begin() + r * stride);
    lg.upload(h);
  }
  void launch(cudaStream_t s = nullptr) {
    const specdec::strided_view<const float, 2> l(lg.data(), {rows, vocab}, {stride, 1}, memory_space::device);
    specdec::verify_greedy_batch(specdec::cuda{.stream = s}, dv(ni), dv(tok), dv(par), l, dv(out.acc), dv(out.nacc),
                                 dv(out.bon), dv(out.emi), dv(out.st));
  }
  specdec::device_status status() const { return out.status(); }
};

void check_against_reference(const greedy_batch_case& c, device_case& d) {
  specdec_test::check_tree_outputs(c.expected, c.node_indptr, c.tokens, d.out.download());
}

}  // namespace

TEST_CASE("cuda verify_greedy_batch equals verify_greedy per request on random ragged batches", "[cuda][verify]") {
  struct shape {
    int R, max_nodes;
    std::int64_t V;
    int alphabet;
  };
  for (const shape s : {shape{1, 1, 1, 1}, shape{5, 8, 5, 3}, shape{64, 70, 300, 4}, shape{17, 30, 1001, 3},
                        shape{8, 16, 131072, 4}, shape{2, 64, 262144, 2}}) {
    DYNAMIC_SECTION("R " << s.R << " nodes <= " << s.max_nodes << " V " << s.V) {
      const auto c = specdec_test::random_greedy_batch(s.R, s.max_nodes, s.V, s.alphabet, s.R * 7 + s.V);
      for (std::int64_t pad : {0, 3}) {
        device_case d(c, pad);
        d.launch();
        specdec_test::sync_check("verify_greedy_batch");
        check_against_reference(c, d);
      }
    }
  }
  SECTION("a request beyond the shared-memory walk (3000 nodes) between small ones") {
    auto c = specdec_test::random_greedy_batch(1, 4, 3, 2, 99);
    const auto big = specdec_test::random_greedy_batch(1, 3000, 3, 2, 100);
    // Append big's request (nodes and rows) and then c's again.
    greedy_batch_case m = c;
    const int base = m.nodes();
    for (int i = 0; i < big.nodes(); ++i) m.tokens.push_back(big.tokens[i]), m.parents.push_back(big.parents[i]);
    m.node_indptr.push_back(base + big.nodes());
    m.logits.insert(m.logits.end(), big.logits.begin(), big.logits.end());
    m.finish();
    REQUIRE(big.nodes() > 2048);
    device_case d(m);
    d.launch();
    specdec_test::sync_check("verify_greedy_batch (large request)");
    check_against_reference(m, d);
  }
}

TEST_CASE("cuda verify_greedy_batch with penalties equals the host's processed rows, verified", "[cuda][verify]") {
  // penalized_greedy_case: the expected result is process_logits_batch (context, temperature 0) and
  // then the plain form; the device reads the unprocessed rows in place (a padded stride too)
  int moved = 0;
  for (const auto& [R, max_nodes, V] : {std::tuple{1, 1, std::int64_t{3}}, {4, 8, 7}, {9, 40, 300}, {16, 64, 4099},
                                        {4, 16, 300007}}) {
    specdec_test::penalized_greedy_case pc(R, max_nodes, V, 4, static_cast<std::uint64_t>(R * 31 + V));
    const std::int64_t rows = pc.c.nodes() + pc.c.requests();
    const specdec_test::device_penalty_context ctx(pc.b);
    device_buffer<specdec::sampling_params> dp(pc.params);
    device_buffer<std::int32_t> drp(pc.row_params);
    for (std::int64_t pad : {0, 5}) {
      device_case d(pc.c, pad);
      const specdec::strided_view<const float, 2> l(d.lg.data(), {rows, V}, {d.stride, 1}, memory_space::device);
      specdec::verify_greedy_batch(specdec::cuda{}, dv(d.ni), dv(d.tok), dv(d.par), l, dv(dp), dv(drp), ctx.view(),
                                   dv(d.out.acc), dv(d.out.nacc), dv(d.out.bon), dv(d.out.emi), dv(d.out.st));
      specdec_test::sync_check("verify_greedy_batch (penalties)");
      INFO("R " << R << " nodes <= " << max_nodes << " V " << V << " pad " << pad);
      specdec_test::check_tree_outputs(pc.expected, pc.c.node_indptr, pc.c.tokens, d.out.download());
    }
    moved += pc.moved();
  }
  CHECK(moved >= 4);
}

TEST_CASE("cuda verify_greedy_batch reports bad values in status", "[cuda][verify]") {
  auto c = specdec_test::random_greedy_batch(4, 12, 7, 3, 31337);
  while (c.node_indptr[3] - c.node_indptr[2] < 2) c = specdec_test::random_greedy_batch(4, 12, 7, 3, c.tokens.size() + 5);
  auto expect = [](const greedy_batch_case& bad, specdec::device_error e, std::int32_t request, std::int32_t index) {
    device_case d(bad);
    d.launch();
    specdec_test::sync_check("verify_greedy_batch (bad values)");
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
    specdec_test::sync_check("verify_greedy_batch (bad offsets)");
    CHECK(d.status().error == specdec::device_error::node_indptr);
  }
  {  // +inf in request 3's root row (always read): row 0 of request 3
    auto bad = c;
    bad.logits[(c.node_indptr[3] + 3) * c.vocab + 2] = std::numeric_limits<float>::infinity();
    expect(bad, specdec::device_error::row, 3, 0);
  }
  {  // an all -inf root row: nothing above -inf
    auto bad = c;
    for (std::int64_t t = 0; t < c.vocab; ++t)
      bad.logits[(c.node_indptr[1] + 1) * c.vocab + t] = -std::numeric_limits<float>::infinity();
    expect(bad, specdec::device_error::row, 1, 0);
  }
  {  // the hand-built case of the host test: NaN in an unread row is no error, in a read row it is
    greedy_batch_case h = specdec_test::unread_nan_case();
    device_case d(h);
    d.launch();
    specdec_test::sync_check("verify_greedy_batch (unread NaN)");
    CHECK(d.status().ok());
    const auto emi = d.out.emi.download();  // slot 2 is the argmax pass's scratch (unspecified)
    CHECK(emi[0] == 1);
    CHECK(emi[1] == 3);
    h.logits[1] = -1;
    h.logits[2] = 20;
    device_case d2(h);
    d2.launch();
    specdec_test::sync_check("verify_greedy_batch (read NaN)");
    const auto s = d2.status();
    CHECK(s.error == specdec::device_error::row);
    CHECK(s.request == 0);
    CHECK(s.index == 2);
  }
}

TEST_CASE("cuda verify_greedy_batch checks an empty batch's node_indptr as the host does", "[cuda][verify]") {
  // 0 requests, 0 rows: the argmax pass has nothing to do, but the walk kernel still runs its block 0,
  // which checks node_indptr's ends (the host backend's validate_indptr refuses {3} the same way).
  // The penalized form launches the same walk (greedy_penalized_backend<cuda>).
  greedy_batch_case e;
  e.vocab = 8;
  device_case ok(e);
  ok.launch();
  specdec_test::sync_check("verify_greedy_batch (empty batch)");
  CHECK(ok.status().ok());
  e.node_indptr = {3};
  device_case bad(e);
  bad.launch();
  specdec_test::sync_check("verify_greedy_batch (empty batch, bad offsets)");
  CHECK(bad.status().error == specdec::device_error::node_indptr);
}

TEST_CASE("cuda verify_greedy_batch is captured in a CUDA graph and replays", "[cuda][verify]") {
  const auto c = specdec_test::random_greedy_batch(8, 64, 4096, 4, 77);
  device_case d(c);
  specdec_test::replay_in_graph(
      3, [&](cudaStream_t s) { d.launch(s); },
      [&] {
        d.out.reset();
      },
      [&] { check_against_reference(c, d); });
  // the penalized form too, at a V whose bitmap needs the shared-memory opt-in (set while capturing)
  specdec_test::penalized_greedy_case pc(4, 16, 300007, 4, 78);
  device_case dp(pc.c);
  const specdec_test::device_penalty_context ctx(pc.b);
  device_buffer<specdec::sampling_params> params(pc.params);
  device_buffer<std::int32_t> row_params(pc.row_params);
  specdec_test::replay_in_graph(
      3,
      [&](cudaStream_t s) {
        const specdec::strided_view<const float, 2> l(dp.lg.data(), {dp.rows, dp.vocab}, {dp.stride, 1}, memory_space::device);
        specdec::verify_greedy_batch(specdec::cuda{.stream = s}, dv(dp.ni), dv(dp.tok), dv(dp.par), l, dv(params),
                                     dv(row_params), ctx.view(), dv(dp.out.acc), dv(dp.out.nacc), dv(dp.out.bon),
                                     dv(dp.out.emi), dv(dp.out.st));
      },
      [&] { dp.out.reset(); },
      [&] { specdec_test::check_tree_outputs(pc.expected, pc.c.node_indptr, pc.c.tokens, dp.out.download()); });
}

TEST_CASE("cuda verify_greedy_batch rejects host memory and bad shapes before any CUDA call", "[cuda][verify][nogpu]") {
  auto c = specdec_test::random_greedy_batch(2, 5, 4, 2, 3);
  std::vector<std::int32_t> acc(c.tokens.size()), nacc(2), bon(2), emi(c.tokens.size() + 2), st(3);
  auto dev = [](std::vector<std::int32_t>& x) {
    return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())}, memory_space::device);
  };
  const auto lg_host = specdec::make_view<2>(c.logits.data(), {c.nodes() + 2, c.vocab});
  const auto lg_dev = specdec::make_view<2>(c.logits.data(), {c.nodes() + 2, c.vocab}, memory_space::device);
  CHECK_THROWS_WITH(specdec::verify_greedy_batch(specdec::cuda{}, dev(c.node_indptr), dev(c.tokens), dev(c.parents),
                                                 lg_host, dev(acc), dev(nacc), dev(bon), dev(emi), dev(st)),
                    Catch::Contains("target_logits") && Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(specdec::verify_greedy_batch(specdec::cuda{}, dev(c.node_indptr), dev(c.tokens), dev(c.parents),
                                                 lg_dev, dev(acc), dev(nacc), dev(bon), dev(acc), dev(st)),
                    Catch::Contains("emitted"));
  // the penalized form: its entries and context in device memory too, V <= 2^20
  specdec_test::penalized_greedy_case pc(2, 5, 4, 2, 3);
  auto& pcc = pc.c;
  const std::int64_t rows = pcc.nodes() + 2;
  const auto dev_ctx = [&](specdec::penalty_context x) {
    const auto d = [](specdec::strided_view<const std::int32_t, 1> a) {
      return specdec::strided_view<const std::int32_t, 1>(a.data(), {a.extent(0)}, {1}, memory_space::device);
    };
    return specdec::penalty_context{d(x.distinct), d(x.last), d(x.context_indptr), d(x.context_length),
                                    d(x.row_context), d(x.path_indptr), d(x.path)};
  };
  std::vector<std::int32_t> acc2(pcc.tokens.size()), emi2(pcc.tokens.size() + 2);
  const auto params_dev = specdec::make_view<1>(pc.params.data(), {2}, memory_space::device);
  const auto pl_dev = specdec::make_view<2>(pcc.logits.data(), {rows, pcc.vocab}, memory_space::device);
  CHECK_THROWS_WITH(specdec::verify_greedy_batch(specdec::cuda{}, dev(pcc.node_indptr), dev(pcc.tokens), dev(pcc.parents),
                                                 pl_dev, params_dev, dev(pc.row_params), pc.b.view(), dev(acc2), dev(nacc),
                                                 dev(bon), dev(emi2), dev(st)),
                    Catch::Contains("specdec::verify_greedy_batch") && Catch::Contains("'context.distinct'") &&
                        Catch::Contains("device-accessible"));
  CHECK_THROWS_WITH(specdec::verify_greedy_batch(specdec::cuda{}, dev(pcc.node_indptr), dev(pcc.tokens), dev(pcc.parents),
                                                 pl_dev, specdec::make_view<1>(pc.params.data(), {2}), dev(pc.row_params),
                                                 dev_ctx(pc.b.view()), dev(acc2), dev(nacc), dev(bon), dev(emi2), dev(st)),
                    Catch::Contains("'params'") && Catch::Contains("device-accessible"));
  std::vector<float> wide(static_cast<std::size_t>(rows) * ((1 << 20) + 1));
  CHECK_THROWS_WITH(specdec::verify_greedy_batch(specdec::cuda{}, dev(pcc.node_indptr), dev(pcc.tokens), dev(pcc.parents),
                                                 specdec::make_view<2>(wide.data(), {rows, (1 << 20) + 1}, memory_space::device),
                                                 params_dev, dev(pc.row_params), dev_ctx(pc.b.view()), dev(acc2), dev(nacc),
                                                 dev(bon), dev(emi2), dev(st)),
                    Catch::Contains("'target_logits'") && Catch::Contains("2^20"));
}
