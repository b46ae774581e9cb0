// The array form of verify_chain_speculative_batch (its cuda twin: tests/cuda/
// test_verify_chain_speculative.cu): equal to verify_chain_speculative per request with the
// request's (seed, stream); bad values throw naming the request and leave the outputs untouched.
// Its logits form equals processing every row, logits_to_probs_batch and the probabilities form,
// reads no row after the first rejection, and refuses what it reads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "specdec/verify/speculative_sampling.hpp"
#include "verify/chain_speculative_batch_util.hpp"
#include "verify/sample_and_match_batch_util.hpp"
#include "verify/tree_arrays_util.hpp"

using specdec_test::chain_batch_case;

namespace {

using specdec_test::v1;

struct outputs : specdec_test::tree_outputs {
  explicit outputs(const chain_batch_case& c) : tree_outputs(c.node_indptr.size() - 1, c.tokens.size()) {}
};

void run(chain_batch_case& c, outputs& o, const specdec::host& policy = {}) {
  const auto pv = specdec::make_view<2>(c.p.data(), {c.nodes() + c.requests(), c.vocab});
  const auto qv = specdec::make_view<2>(c.q.data(), {c.nodes() + c.requests(), c.vocab});
  specdec::verify_chain_speculative_batch(policy, v1(c.node_indptr), v1(c.tokens), v1(c.parents), pv, qv, v1(c.seeds),
                                          v1(c.streams), v1(o.accepted), v1(o.num_accepted), v1(o.bonus),
                                          v1(o.emitted), v1(o.status));
}

}  // namespace

TEST_CASE("verify_chain_speculative_batch (arrays, host) equals verify_chain_speculative per request",
          "[verify][chain]") {
  int accepted_total = 0, rejected = 0;
  for (int R : {0, 1, 5, 30}) {
    for (int max_nodes : {1, 6, 40}) {
      for (std::int64_t V : {1, 4, 300, 2100}) {
        auto c = specdec_test::random_chain_batch(R, max_nodes, V, R * 100 + max_nodes * 10 + V);
        outputs o(c);
        run(c, o, specdec::host{.num_threads = 2});
        accepted_total += specdec_test::check_tree_outputs(c.expected, c.node_indptr, c.tokens, o);
        for (int r = 0; r < c.requests(); ++r)
          rejected += o.num_accepted[r] < c.node_indptr[r + 1] - c.node_indptr[r];
      }
    }
  }
  CHECK(accepted_total > 100);
  CHECK(rejected > 50);  // the residual path is taken
}

TEST_CASE("verify_chain_speculative_batch (arrays, host) rejects bad values and leaves the outputs untouched",
          "[verify][chain][validation]") {
  auto c = specdec_test::random_chain_batch(3, 6, 5, 99);
  while (c.node_indptr[2] - c.node_indptr[1] < 2) c = specdec_test::random_chain_batch(3, 6, 5, c.tokens.size() + 7);
  auto reject = [](chain_batch_case bad, const std::string& what) {
    outputs o(bad);
    const outputs fresh(bad);
    CHECK_THROWS_WITH(run(bad, o), Catch::Contains("verify_chain_speculative_batch") && Catch::Contains(what));
    CHECK(o == fresh);
  };
  const int b1 = c.node_indptr[1];
  {
    auto bad = c;
    bad.parents[b1 + 1] = -1;  // a valid tree, but not a chain
    reject(bad, "a chain");
  }
  {
    auto bad = c;
    bad.q[(b1 + 1) * c.vocab + c.tokens[b1]] = 0.0f;  // q_0(x_0) = 0 in request 1
    reject(bad, "q_i(x_i) > 0");
  }
  {
    auto bad = c;
    bad.p[(c.node_indptr[2] + 2) * c.vocab] = std::numeric_limits<float>::infinity();  // request 2's first row
    reject(bad, "target_probs");
  }
  {
    auto bad = c;
    bad.q[(c.node_indptr[2] + 2) * c.vocab] = -1.0f;
    reject(bad, "draft_probs");
  }
  {  // draft_probs of the wrong shape
    outputs o(c);
    const auto pv = specdec::make_view<2>(c.p.data(), {c.nodes() + c.requests(), c.vocab});
    const auto qv = specdec::make_view<2>(c.q.data(), {c.nodes() + c.requests(), c.vocab - 1});
    CHECK_THROWS_WITH(specdec::verify_chain_speculative_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens),
                                                              v1(c.parents), pv, qv, v1(c.seeds), v1(c.streams),
                                                              v1(o.accepted), v1(o.num_accepted), v1(o.bonus),
                                                              v1(o.emitted), v1(o.status)),
                      Catch::Contains("draft_probs"));
  }
}

namespace {

using specdec_test::sampled_logits_case;

//! The logits form on c (its kind), into o (tests/verify/sample_and_match_batch_util.hpp).
void run_logits(const sampled_logits_case& c, specdec_test::tree_outputs& o, const specdec::host& policy = {},
                std::int64_t pad = 0) {
  specdec_test::run_host_logits(c, o, policy, pad);
}

}  // namespace

TEST_CASE("verify_chain_speculative_batch from logits (host) equals processing every row, then the probabilities form",
          "[verify][chain]") {
  int accepted_total = 0, rejected = 0, cases = 0;
  for (const bool penalties : {false, true})
    for (int R : {0, 1, 5, 17})
      for (int max_nodes : {1, 6, 30})
        for (std::int64_t V : {1, 3, 200, 3000}) {
          const sampled_logits_case c(R, max_nodes, V, static_cast<int>(std::min<std::int64_t>(V, 3)), penalties,
                                      static_cast<std::uint64_t>(R * 100000 + max_nodes * 100 + V + (penalties ? 7 : 0)),
                                      specdec_test::logits_case_kind::chain);
          specdec_test::tree_outputs o(static_cast<std::size_t>(c.requests()), c.tokens.size());
          run_logits(c, o, specdec::host{.num_threads = 2}, (R + V) % 2 == 0 ? 0 : 3);
          accepted_total += c.matches(o);
          for (int r = 0; r < c.requests(); ++r)
            rejected += o.num_accepted[static_cast<std::size_t>(r)] < c.node_indptr[r + 1] - c.node_indptr[r];
          ++cases;
        }
  CHECK(cases == 96);
  CHECK(accepted_total > 100);  // accepted nodes, not only first rejections
  CHECK(rejected > 50);         // the residual path is taken
}

TEST_CASE("verify_chain_speculative_batch from logits reads no target row after the first rejection",
          "[verify][chain][validation]") {
  // the hand case of rejected_root_case: node 0 rejected at temperature 0, rows 1 and 2 never read
  auto h = specdec_test::rejected_root_case(specdec_test::logits_case_kind::chain);
  specdec_test::tree_outputs o(1, 2);
  run_logits(h, o);
  CHECK(o.status == std::vector<std::int32_t>{0, -1, -1});
  CHECK(o.num_accepted[0] == 0);
  CHECK(o.bonus[0] == 3);
  CHECK(o.emitted == std::vector<std::int32_t>{3, -9, -9});
  // the root row peaking on token 1 instead: node 0 accepted (p_0(1) = 1 >= q), row 1 read and refused
  h.logits[1] = 20.0f;
  h.row_params[1] = 0;
  o = specdec_test::tree_outputs(1, 2);
  CHECK_THROWS_WITH(run_logits(h, o), Catch::Contains("target_logits") && Catch::Contains("row 1"));
  CHECK(o == specdec_test::tree_outputs(1, 2));
}

TEST_CASE("verify_chain_speculative_batch from logits (host) rejects bad values and leaves the outputs untouched",
          "[verify][chain][validation]") {
  sampled_logits_case c(3, 6, 40, 3, true, 99, specdec_test::logits_case_kind::chain);
  for (std::uint64_t s = 100; c.node_indptr[1] - c.node_indptr[0] < 2; ++s) c = sampled_logits_case(3, 6, 40, 3, true, s, specdec_test::logits_case_kind::chain);
  const auto reject = [](const sampled_logits_case& bad, const std::string& what) {
    specdec_test::tree_outputs o(static_cast<std::size_t>(bad.requests()), bad.tokens.size());
    const auto fresh = o;
    CHECK_THROWS_WITH(run_logits(bad, o), Catch::Contains("verify_chain_speculative_batch") && Catch::Contains(what));
    CHECK(o == fresh);
  };
  specdec_test::common_logits_refusals(c, reject);  // in request 0's root row (always read)
  {  // a valid tree, but not a chain
    auto bad = c;
    bad.parents[1] = -1;
    reject(bad, "a chain");
  }
  {  // q_1(x_1) = 0 in request 0: refused up front, before any row is processed
    auto bad = c;
    bad.q[static_cast<std::size_t>(1 * c.vocab + c.tokens[1])] = 0.0f;
    reject(bad, "q_i(x_i) > 0");
  }
  {  // a bad entry in request 0's first draft row (the first decision reads it in full)
    auto bad = c;
    bad.q[static_cast<std::size_t>(c.tokens[0] == 0 ? 1 : 0)] = -1.0f;
    reject(bad, "draft_probs");
  }
  {  // shapes and overlaps first: a short workspace, the workspace over the draft rows
    specdec_test::tree_outputs o(3, c.tokens.size());
    const auto fresh = o;
    const auto lg = specdec::make_view<2>(c.logits.data(), {c.rows(), c.vocab});
    auto q = c.q;
    const auto qv = specdec::make_view<2>(static_cast<const float*>(q.data()), {c.rows(), c.vocab});
    const auto pa = specdec::make_view<1>(c.params.data(), {3});
    std::vector<float> w_short(static_cast<std::size_t>(c.vocab));
    const auto call = [&](auto ws) {
      specdec::verify_chain_speculative_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens), v1(c.parents), lg, qv,
                                              pa, v1(c.row_params), c.b.view(), v1(c.seeds), v1(c.streams), ws,
                                              v1(o.accepted), v1(o.num_accepted), v1(o.bonus), v1(o.emitted),
                                              v1(o.status));
    };
    CHECK_THROWS_WITH(call(specdec::make_view<2>(w_short.data(), {1, c.vocab})), Catch::Contains("workspace"));
    CHECK_THROWS_WITH(call(specdec::make_view<2>(q.data(), {3, c.vocab})),
                      Catch::Contains("workspace") && Catch::Contains("draft_probs"));
    CHECK(o == fresh);
  }
}

TEST_CASE("verify_chain_speculative_batch (arrays) refuses outputs over the draft rows, seeds or streams",
          "[verify][chain][validation]") {
  auto c = specdec_test::random_chain_batch(2, 4, 6, 31);
  outputs o(c);
  const auto pv = specdec::make_view<2>(c.p.data(), {c.nodes() + c.requests(), c.vocab});
  const auto qv = specdec::make_view<2>(c.q.data(), {c.nodes() + c.requests(), c.vocab});
  // status (3 int32) written over the first draft row, then over the seeds
  const auto status_over_q = specdec::make_view<1>(reinterpret_cast<std::int32_t*>(c.q.data()), {3});
  CHECK_THROWS_WITH(specdec::verify_chain_speculative_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens),
                                                            v1(c.parents), pv, qv, v1(c.seeds), v1(c.streams),
                                                            v1(o.accepted), v1(o.num_accepted), v1(o.bonus),
                                                            v1(o.emitted), status_over_q),
                    Catch::Contains("'draft_probs'") && Catch::Contains("disjoint from 'status'"));
  const auto bonus_over_seeds = specdec::make_view<1>(reinterpret_cast<std::int32_t*>(c.seeds.data()), {c.requests()});
  CHECK_THROWS_WITH(specdec::verify_chain_speculative_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens),
                                                            v1(c.parents), pv, qv, v1(c.seeds), v1(c.streams),
                                                            v1(o.accepted), v1(o.num_accepted), bonus_over_seeds,
                                                            v1(o.emitted), v1(o.status)),
                    Catch::Contains("'seeds'") && Catch::Contains("disjoint from 'bonus'"));
  CHECK(o.status == std::vector<std::int32_t>{7, 7, 7});
}
