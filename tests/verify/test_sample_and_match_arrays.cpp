// The array form of verify_sample_and_match_batch (the one a GPU engine calls; its cuda twin is
// tested in tests/cuda/test_verify_sample_and_match.cu against this host backend): equal to
// verify_sample_and_match per request with the request's (seed, stream), and to the token_tree_batch
// form; bad values throw and leave the outputs untouched; rows the walk does not visit are not read.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "specdec/verify/sample_and_match.hpp"
#include "verify/sample_and_match_batch_util.hpp"
#include "verify/tree_arrays_util.hpp"

using specdec_test::sample_and_match_case;

namespace {

using specdec_test::v1;

struct outputs : specdec_test::tree_outputs {
  explicit outputs(const sample_and_match_case& c) : tree_outputs(c.node_indptr.size() - 1, c.tokens.size()) {}
};

void run(sample_and_match_case& c, outputs& o, const specdec::host& policy = {}) {
  const auto pr = specdec::make_view<2>(c.probs.data(), {c.nodes() + c.requests(), c.vocab});
  specdec::verify_sample_and_match_batch(policy, v1(c.node_indptr), v1(c.tokens), v1(c.parents), pr, v1(c.seeds),
                                         v1(c.streams), v1(o.accepted), v1(o.num_accepted), v1(o.bonus), v1(o.emitted),
                                         v1(o.status));
}

int check_expected(const sample_and_match_case& c, const outputs& o) {
  return specdec_test::check_tree_outputs(c.expected, c.node_indptr, c.tokens, o);
}

//! The CUDA kernel's walk (verify/sample_and_match.cuh) written serially with the same shared
//! pieces: block sums by lanes (lane_partial / lane_combine, as its groups of 16 threads compute
//! them), cdf_total, the draw, cdf_search, and classes kept as marks (joins_class, chunk by chunk
//! with the writes after the reads). Returns the result, or the local row the kernel would report
//! (first = -1 then).
struct twin_result {
  specdec::verify_result res;
  std::int32_t bad_row = -1;
};
twin_result kernel_twin(const std::int32_t* tok, const std::int32_t* par, std::int32_t n, const float* rows,
                        std::int64_t stride, std::int64_t vocab, std::uint64_t seed, std::uint64_t stream) {
  namespace d = specdec::detail;
  const std::int64_t nb = (vocab + 1023) / 1024;
  std::vector<double> bs(static_cast<std::size_t>(nb));
  std::vector<std::int32_t> mark(static_cast<std::size_t>(n), 0);
  specdec::philox_stream rng(seed, stream);
  std::int32_t rep = -1, level = 0;
  twin_result out;
  for (;;) {
    const float* row = rows + (rep + 1) * stride;
    const auto w = [row](std::int64_t i) { return static_cast<double>(row[i]); };
    bool bad = false;
    for (std::int64_t b = 0; b < nb; ++b) {
      const std::int64_t lo = b * 1024, hi = std::min(vocab, lo + 1024);
      double partial[d::lanes];
      for (int j = 0; j < d::lanes; ++j) partial[j] = d::lane_partial(w, lo, hi, j);
      bs[static_cast<std::size_t>(b)] = d::lane_combine(w, lo, hi, partial);
      for (std::int64_t i = lo; i < hi; ++i) bad |= !d::admissible_prob(row[i]);
    }
    const double total = d::cdf_total(bs.data(), nb);
    if (bad || !(total > 0.0)) return out.bad_row = rep + 1, out;
    const std::int64_t y = d::cdf_search(bs.data(), nb, vocab, rng.uniform_double() * total, w);
    std::vector<std::int32_t> hits;
    for (std::int32_t i = rep + 1; i < n; ++i)
      if (d::joins_class(tok, par, mark.data(), i, y, level)) hits.push_back(i);
    for (const std::int32_t i : hits) mark[static_cast<std::size_t>(i)] = level + 1;
    if (hits.empty()) {
      out.res.bonus = static_cast<std::int32_t>(y);
      break;
    }
    rep = hits.front(), ++level;
  }
  out.res.accepted.resize(static_cast<std::size_t>(level));
  for (std::int32_t v = rep, k = level - 1; v >= 0; v = par[v], --k) out.res.accepted[static_cast<std::size_t>(k)] = v;
  return out;
}

}  // namespace

TEST_CASE("the CUDA kernel's walk, run serially (its host twin), equals the host walk", "[verify][sample_and_match]") {
  int accepted = 0, bad_rows = 0, planted = 0;
  for (int R : {1, 6, 40}) {
    for (int max_nodes : {1, 12, 90}) {
      for (std::int64_t V : {1, 3, 700, 3000}) {
        auto c = specdec_test::random_sample_and_match_batch(R, max_nodes, V, static_cast<int>(std::min<std::int64_t>(V, 2)),
                                                             R * 31 + max_nodes * 7 + V);
        for (int r = 0; r < c.requests(); ++r) {
          const int b = c.node_indptr[r], n = c.node_indptr[r + 1] - b;
          const auto t = kernel_twin(c.tokens.data() + b, c.parents.data() + b, n, c.probs.data() + (b + r) * V, V, V,
                                     c.seeds[r], c.streams[r]);
          const auto want = c.expected.request(r);
          REQUIRE(t.bad_row == -1);
          CHECK(t.res.bonus == want.bonus);
          CHECK(t.res.accepted == std::vector<std::int32_t>(want.accepted.begin(), want.accepted.end()));
          accepted += static_cast<int>(want.accepted.size());
        }
        // A NaN planted in a visited row (the root's) is the row the kernel reports.
        if (c.requests() > 0 && V > 1) {
          c.probs[static_cast<std::size_t>(V / 2)] = std::numeric_limits<float>::quiet_NaN();
          const int n0 = c.node_indptr[1];
          ++planted;
          bad_rows += kernel_twin(c.tokens.data(), c.parents.data(), n0, c.probs.data(), V, V, c.seeds[0], c.streams[0]).bad_row == 0;
        }
      }
    }
  }
  CHECK(accepted > 200);
  CHECK(planted >= 20);
  CHECK(bad_rows == planted);
}

TEST_CASE("verify_sample_and_match_batch (arrays, host) equals verify_sample_and_match per request",
          "[verify][sample_and_match]") {
  int accepted_total = 0, deep = 0;
  for (int R : {0, 1, 4, 33}) {
    for (int max_nodes : {1, 8, 70}) {
      for (std::int64_t V : {1, 5, 300, 2500}) {
        auto c = specdec_test::random_sample_and_match_batch(
            R, max_nodes, V, static_cast<int>(std::min<std::int64_t>(V, 3)), R * 1000 + max_nodes * 10 + V);
        outputs o(c);
        run(c, o, specdec::host{.num_threads = 2});
        accepted_total += check_expected(c, o);
        for (int r = 0; r < c.requests(); ++r) deep += o.num_accepted[r] >= 3;
      }
    }
  }
  CHECK(accepted_total > 200);  // long accepted paths, not only bonus tokens
  CHECK(deep > 20);
}

TEST_CASE("verify_sample_and_match_batch (arrays) draws what the token_tree_batch form draws",
          "[verify][sample_and_match]") {
  auto c = specdec_test::random_sample_and_match_batch(9, 20, 64, 3, 5);
  const std::uint64_t seed = 1234;
  const std::uint32_t step = 17;
  std::vector<std::uint32_t> ids;
  specdec::token_tree_batch batch;
  for (int r = 0; r < c.requests(); ++r) {
    ids.push_back(static_cast<std::uint32_t>(40 + 3 * r));
    c.seeds[r] = seed;
    c.streams[r] = specdec::stream_id(ids.back(), step);
    const std::vector<std::int32_t> tok(c.tokens.begin() + c.node_indptr[r], c.tokens.begin() + c.node_indptr[r + 1]);
    const std::vector<std::int32_t> par(c.parents.begin() + c.node_indptr[r], c.parents.begin() + c.node_indptr[r + 1]);
    batch.push_back(specdec::token_tree::from_parents(tok, par), 1);
  }
  c.finish();
  const auto pr = specdec::make_view<2>(c.probs.data(), {c.nodes() + c.requests(), c.vocab});
  const auto want = specdec::verify_sample_and_match_batch(specdec::host{}, batch, pr, seed, step, ids);
  outputs o(c);
  run(c, o);
  check_expected(c, o);
  for (int r = 0; r < c.requests(); ++r) {
    const auto w = want.request(r);
    CHECK(o.bonus[r] == w.bonus);
    REQUIRE(o.num_accepted[r] == static_cast<int>(w.accepted.size()));
  }
}

TEST_CASE("verify_sample_and_match_batch (arrays, host) rejects bad values and leaves the outputs untouched",
          "[verify][sample_and_match][validation]") {
  auto c = specdec_test::random_sample_and_match_batch(3, 10, 6, 3, 4242);
  while (c.node_indptr[2] - c.node_indptr[1] < 2)
    c = specdec_test::random_sample_and_match_batch(3, 10, 6, 3, c.tokens.size() + 1);
  auto reject = [](sample_and_match_case bad, const std::string& what) {
    outputs o(bad);
    const outputs fresh(bad);
    CHECK_THROWS_WITH(run(bad, o), Catch::Contains("verify_sample_and_match_batch") && Catch::Contains(what));
    CHECK(o == fresh);
  };
  const int b1 = c.node_indptr[1];
  {
    auto bad = c;
    bad.tokens[b1 + 1] = 6;
    reject(bad, "token");
  }
  {
    auto bad = c;
    bad.parents[b1 + 1] = 1;
    reject(bad, "parent");
  }
  {
    auto bad = c;
    bad.node_indptr[1] = bad.node_indptr[2] + 1;
    reject(bad, "node_indptr");
  }
  {  // the root row of request 2 is always visited
    auto bad = c;
    bad.probs[(c.node_indptr[2] + 2) * c.vocab + 1] = std::numeric_limits<float>::quiet_NaN();
    reject(bad, "target_probs");
  }
  {
    auto bad = c;
    bad.probs[(c.node_indptr[2] + 2) * c.vocab + 1] = -0.25f;
    reject(bad, "target_probs");
  }
  {  // an all-zero root row: nothing to draw
    auto bad = c;
    for (std::int64_t t = 0; t < c.vocab; ++t) bad.probs[(c.node_indptr[1] + 1) * c.vocab + t] = 0.0f;
    reject(bad, "positive");
  }
}

TEST_CASE("verify_sample_and_match_batch (arrays) never reads a row the walk does not visit",
          "[verify][sample_and_match][validation]") {
  // root -> {0: token 1, 1: token 2}; the root row puts all its mass on token 1, so node 0 is accepted
  // and the row after node 1 (NaN) is not visited; the row after node 0 gives the bonus (token 4).
  sample_and_match_case h;
  h.vocab = 5;
  h.node_indptr = {0, 2};
  h.tokens = {1, 2};
  h.parents = {-1, -1};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  h.probs = {0, 1, 0, 0, 0, /*after node 0*/ 0, 0, 0, 0, 2, /*after node 1*/ nan, nan, nan, nan, nan};
  h.seeds = {9};
  h.streams = {specdec::stream_id(0, 0)};
  outputs o(h);
  run(h, o);
  CHECK(o.status == std::vector<std::int32_t>{0, -1, -1});
  CHECK(o.num_accepted[0] == 1);
  CHECK(o.accepted[0] == 0);
  CHECK(o.bonus[0] == 4);
  CHECK(o.emitted == std::vector<std::int32_t>{1, 4, -9});
}

TEST_CASE("verify_sample_and_match_batch (arrays) checks its arguments' shapes", "[verify][sample_and_match][validation]") {
  auto c = specdec_test::random_sample_and_match_batch(2, 5, 4, 2, 3);
  outputs o(c);
  const auto pr = specdec::make_view<2>(c.probs.data(), {c.nodes() + 2, c.vocab});
  std::vector<std::uint64_t> short_seeds{1};
  CHECK_THROWS_WITH(specdec::verify_sample_and_match_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens),
                                                           v1(c.parents), pr, v1(short_seeds), v1(c.streams),
                                                           v1(o.accepted), v1(o.num_accepted), v1(o.bonus),
                                                           v1(o.emitted), v1(o.status)),
                    Catch::Contains("seeds") && Catch::Contains("extent(0) == 2"));
  // Above the array form's vocabulary limit (a view only: nothing is read before the check).
  const auto huge = specdec::make_view<2>(c.probs.data(), {c.nodes() + 2, std::int64_t{1} << 22});
  CHECK_THROWS_WITH(specdec::verify_sample_and_match_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens),
                                                           v1(c.parents), huge, v1(c.seeds), v1(c.streams),
                                                           v1(o.accepted), v1(o.num_accepted), v1(o.bonus),
                                                           v1(o.emitted), v1(o.status)),
                    Catch::Contains("target_probs") && Catch::Contains("2097152"));
}

namespace {

using specdec_test::sampled_logits_case;

//! The logits form on c, into o (workspace: a fresh [R, V] buffer unless given; its rows vocab + pad
//! apart, the padding untouched: tests/verify/sample_and_match_batch_util.hpp).
void run_logits(const sampled_logits_case& c, specdec_test::tree_outputs& o, const specdec::host& policy = {},
                std::vector<float>* work = nullptr, const specdec::penalty_context* context = nullptr,
                std::int64_t pad = 0) {
  specdec_test::run_host_logits(c, o, policy, pad, context, work);
}

}  // namespace

TEST_CASE("verify_sample_and_match_batch from logits (host) equals processing every row, then the probabilities form",
          "[verify][sample_and_match]") {
  int accepted_total = 0, deep = 0, cases = 0;
  for (const bool penalties : {false, true})
    for (int R : {0, 1, 5, 17})
      for (int max_nodes : {1, 9, 40})
        for (std::int64_t V : {1, 3, 200, 3000}) {
          const sampled_logits_case c(R, max_nodes, V, static_cast<int>(std::min<std::int64_t>(V, 3)), penalties,
                                      static_cast<std::uint64_t>(R * 100000 + max_nodes * 100 + V + (penalties ? 7 : 0)));
          specdec_test::tree_outputs o(static_cast<std::size_t>(c.requests()), c.tokens.size());
          run_logits(c, o, specdec::host{.num_threads = 2}, nullptr, nullptr, (R + V) % 2 == 0 ? 0 : 3);
          accepted_total += c.matches(o);
          for (int r = 0; r < c.requests(); ++r) deep += o.num_accepted[static_cast<std::size_t>(r)] >= 2;
          ++cases;
        }
  CHECK(cases == 96);
  CHECK(accepted_total > 100);  // accepted paths, not only bonus tokens
  CHECK(deep > 10);
}

TEST_CASE("verify_sample_and_match_batch from logits never reads a row the walk does not visit",
          "[verify][sample_and_match][validation]") {
  auto h = specdec_test::unread_nan_logits_case();
  h.row_params[2] = 0;
  specdec_test::tree_outputs o(1, 2);
  run_logits(h, o);
  CHECK(o.status == std::vector<std::int32_t>{0, -1, -1});
  CHECK(o.num_accepted[0] == 1);
  CHECK(o.accepted[0] == 0);
  CHECK(o.bonus[0] == 3);
  CHECK(o.emitted == std::vector<std::int32_t>{1, 3, -9});
  h.row_params[2] = 5;  // an entry out of range on the unvisited row: not read either
  o = specdec_test::tree_outputs(1, 2);
  run_logits(h, o);
  CHECK(o.status == std::vector<std::int32_t>{0, -1, -1});
  CHECK(o.emitted == std::vector<std::int32_t>{1, 3, -9});
  h.logits[7] = std::numeric_limits<float>::quiet_NaN();  // the row after node 0 is visited: named
  CHECK_THROWS_WITH(run_logits(h, o), Catch::Contains("target_logits") && Catch::Contains("row 1"));
}

TEST_CASE("verify_sample_and_match_batch from logits (host) rejects bad values and leaves the outputs untouched",
          "[verify][sample_and_match][validation]") {
  const sampled_logits_case c(3, 6, 40, 3, true, 99);
  const auto reject = [](const sampled_logits_case& bad, const std::string& what) {
    specdec_test::tree_outputs o(static_cast<std::size_t>(bad.requests()), bad.tokens.size());
    const auto fresh = o;
    CHECK_THROWS_WITH(run_logits(bad, o), Catch::Contains("verify_sample_and_match_batch") && Catch::Contains(what));
    CHECK(o == fresh);
  };
  specdec_test::common_logits_refusals(c, reject);  // in request 0's root row (always visited)
  {  // a penalty without a context: the five-argument form refuses it (the same batch without it passes)
    sampled_logits_case plain(3, 6, 40, 3, false, 99);
    specdec_test::tree_outputs o(3, plain.tokens.size());
    run_logits(plain, o);
    (void)plain.matches(o);
    plain.params[0].repetition_penalty = 1.5f;
    reject(plain, "no repetition or contextual penalty (entry 0)");
  }
  {  // a tree token out of the vocabulary
    auto bad = c;
    bad.tokens[0] = 40;
    reject(bad, "token");
  }
  {  // row 0's context out of range
    specdec::penalty_context ctx = c.b.view();
    std::vector<std::int32_t> row_context(ctx.row_context.data(), ctx.row_context.data() + c.rows());
    row_context[0] = static_cast<std::int32_t>(ctx.context_length.extent(0));
    ctx.row_context = v1(std::as_const(row_context));
    specdec_test::tree_outputs o(static_cast<std::size_t>(c.requests()), c.tokens.size());
    const auto fresh = o;
    CHECK_THROWS_WITH(run_logits(c, o, {}, nullptr, &ctx), Catch::Contains("row_context"));
    CHECK(o == fresh);
  }
}

TEST_CASE("verify_sample_and_match_batch from logits checks shapes and overlaps first", "[verify][sample_and_match][validation]") {
  const sampled_logits_case c(2, 4, 16, 3, false, 5);
  specdec_test::tree_outputs o(2, c.tokens.size());
  const auto lg = specdec::make_view<2>(c.logits.data(), {c.rows(), c.vocab});
  const auto pa = specdec::make_view<1>(c.params.data(), {2});
  std::vector<float> w(2 * 16), w_short(16);
  const auto call = [&](auto ws, auto logits) {
    specdec::verify_sample_and_match_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens), v1(c.parents), logits, pa,
                                           v1(c.row_params), v1(c.seeds), v1(c.streams), ws, v1(o.accepted),
                                           v1(o.num_accepted), v1(o.bonus), v1(o.emitted), v1(o.status));
  };
  const auto fresh = o;
  CHECK_THROWS_WITH(call(specdec::make_view<2>(w_short.data(), {1, 16}), lg), Catch::Contains("workspace"));
  // the workspace over the logits themselves
  auto lg_copy = c.logits;
  const auto lgw = specdec::make_view<2>(lg_copy.data(), {c.rows(), c.vocab});
  CHECK_THROWS_WITH(call(specdec::make_view<2>(lg_copy.data(), {2, 16}), lgw),
                    Catch::Contains("workspace") && Catch::Contains("target_logits"));
  CHECK(o == fresh);
  call(specdec::make_view<2>(w.data(), {2, 16}), lg);
  (void)c.matches(o);
}
