// The array form of verify_multi_draft_batch (its cuda twin: tests/cuda/test_verify_multi_draft.cu):
// equal to verify_multi_draft per request with the request's (seed, stream), with and without
// replacement; bad values throw naming the problem and leave the outputs untouched. Its logits form
// equals processing every row, logits_to_probs_batch and the probabilities form (both modes), reads
// no row the walk does not reach, and refuses what it reads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "specdec/verify/multi_draft.hpp"
#include "verify/multi_draft_batch_util.hpp"
#include "verify/sample_and_match_batch_util.hpp"
#include "verify/tree_arrays_util.hpp"

using specdec::draft_sampling;
using specdec_test::multi_draft_batch_case;

namespace {

using specdec_test::v1;

struct outputs : specdec_test::tree_outputs {
  explicit outputs(const multi_draft_batch_case& c) : tree_outputs(c.node_indptr.size() - 1, c.tokens.size()) {}
};

void run(multi_draft_batch_case& c, outputs& o, const specdec::host& policy = {}) {
  const auto pv = specdec::make_view<2>(c.p.data(), {c.nodes() + c.requests(), c.vocab});
  const auto qv = specdec::make_view<2>(c.q.data(), {c.nodes() + c.requests(), c.vocab});
  specdec::verify_multi_draft_batch(policy, v1(c.node_indptr), v1(c.tokens), v1(c.parents), pv, qv, c.mode,
                                    v1(c.seeds), v1(c.streams), v1(o.accepted), v1(o.num_accepted), v1(o.bonus),
                                    v1(o.emitted), v1(o.status));
}

//! Requests whose walk ended at a node with children, all rejected (the residual's bonus draw).
int ended_after_rejections(const multi_draft_batch_case& c, const outputs& o) {
  int count = 0;
  for (int r = 0; r < c.requests(); ++r) {
    const int b = c.node_indptr[r], n = c.node_indptr[r + 1] - b, k = o.num_accepted[r];
    const int last = k == 0 ? -1 : o.accepted[b + k - 1];
    for (int i = 0; i < n; ++i)
      if (c.parents[b + i] == last) {
        ++count;
        break;
      }
  }
  return count;
}

}  // namespace

TEST_CASE("the multi-draft CUDA kernel's walk, run serially (its host twin), equals the host walk", "[verify][multi_draft]") {
  for (auto mode : {draft_sampling::with_replacement, draft_sampling::without_replacement}) {
    int accepted = 0, requests = 0;
    specdec_test::multi_draft_branches seen;
    for (int R : {1, 6, 40}) {
      for (int max_nodes : {1, 12, 90}) {
        for (std::int64_t V : {1, 3, 700, 3000}) {
          const auto c = specdec_test::random_multi_draft_batch(R, max_nodes, V, mode, R * 37 + max_nodes * 7 + V, 9);
          for (int r = 0; r < c.requests(); ++r) {
            const int b = c.node_indptr[r], n = c.node_indptr[r + 1] - b;
            const auto t = specdec_test::multi_draft_kernel_twin(seen, c.tokens.data() + b, c.parents.data() + b, n, c.p.data() + (b + r) * V,
                                       c.q.data() + (b + r) * V, V, mode, c.seeds[r], c.streams[r]);
            const auto want = c.expected.request(r);
            CHECK(t.bonus == want.bonus);
            CHECK(t.accepted == std::vector<std::int32_t>(want.accepted.begin(), want.accepted.end()));
            accepted += static_cast<int>(want.accepted.size());
            ++requests;
          }
        }
      }
    }
    INFO("mode " << static_cast<int>(mode));
    CHECK(accepted > 200);
    CHECK(requests > 400);
    // every branch of the residual's bookkeeping is taken (multi_draft_batch_util.hpp's row kinds)
    CHECK(seen.residual > 100);
    CHECK(seen.zero_from_p > 20);
    CHECK(seen.reset > 10);
  }
}

TEST_CASE("verify_multi_draft_batch (arrays, host) equals verify_multi_draft per request", "[verify][multi_draft]") {
  for (auto mode : {draft_sampling::with_replacement, draft_sampling::without_replacement}) {
    int accepted_total = 0, rejected_all = 0;
    for (int R : {0, 1, 5, 30}) {
      for (int max_nodes : {1, 6, 40}) {
        for (std::int64_t V : {1, 4, 300, 2100}) {
          auto c = specdec_test::random_multi_draft_batch(R, max_nodes, V, mode,
                                                          R * 1000 + max_nodes * 10 + V + static_cast<int>(mode));
          outputs o(c);
          run(c, o, specdec::host{.num_threads = 2});
          accepted_total += specdec_test::check_tree_outputs(c.expected, c.node_indptr, c.tokens, o);
          rejected_all += ended_after_rejections(c, o);
        }
      }
    }
    INFO("mode " << static_cast<int>(mode));
    CHECK(accepted_total > 100);
    CHECK(rejected_all > 50);  // the residual's bonus draw is taken
  }
}

TEST_CASE("verify_multi_draft_batch (arrays, host) rejects bad values and leaves the outputs untouched",
          "[verify][multi_draft][validation]") {
  auto c = specdec_test::random_multi_draft_batch(3, 8, 6, draft_sampling::without_replacement, 99);
  for (std::uint64_t s = 100; c.node_indptr[2] - c.node_indptr[1] < 3; ++s)
    c = specdec_test::random_multi_draft_batch(3, 8, 6, draft_sampling::without_replacement, s);
  auto reject = [](multi_draft_batch_case bad, const std::string& what) {
    outputs o(bad);
    const outputs fresh(bad);
    CHECK_THROWS_WITH(run(bad, o), Catch::Contains("verify_multi_draft_batch") && Catch::Contains(what));
    CHECK(o == fresh);
  };
  const int b1 = c.node_indptr[1];
  const std::int64_t row1 = b1 + 1;  // request 1's first row
  {
    auto bad = c;
    bad.q[(row1 + bad.parents[b1] + 1) * c.vocab + c.tokens[b1]] = 0.0f;  // q = 0 at node 0's token
    reject(bad, "q > 0");
  }
  {
    auto bad = c;
    bad.p[row1 * c.vocab] = std::numeric_limits<float>::infinity();  // the root's target row
    reject(bad, "target_probs");
  }
  {
    auto bad = c;
    bad.q[row1 * c.vocab + (c.tokens[b1] + 1) % c.vocab] = -1.0f;  // the root's draft row
    reject(bad, "draft_probs");
  }
  {  // two root children with one token, drawn "without replacement"
    auto bad = c;
    bad.parents[b1 + 1] = -1;
    bad.parents[b1] = -1;
    bad.tokens[b1 + 1] = bad.tokens[b1];
    reject(bad, "distinct sibling tokens");
  }
  {
    auto bad = c;
    bad.parents[b1 + 1] = 1;  // not before the node
    reject(bad, "parents");
  }
  {  // a mode that is not an enumerator
    auto bad = c;
    bad.mode = static_cast<draft_sampling>(7);
    reject(bad, "mode");
  }
  {  // draft_probs of the wrong shape
    outputs o(c);
    const auto pv = specdec::make_view<2>(c.p.data(), {c.nodes() + c.requests(), c.vocab});
    const auto qv = specdec::make_view<2>(c.q.data(), {c.nodes() + c.requests(), c.vocab - 1});
    CHECK_THROWS_WITH(specdec::verify_multi_draft_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens),
                                                        v1(c.parents), pv, qv, c.mode, v1(c.seeds), v1(c.streams),
                                                        v1(o.accepted), v1(o.num_accepted), v1(o.bonus), v1(o.emitted),
                                                        v1(o.status)),
                      Catch::Contains("draft_probs"));
  }
}

TEST_CASE("verify_multi_draft_batch (arrays, host) reads only the rows its walk visits", "[verify][multi_draft]") {
  // The CUDA test plants the same rows (tests/cuda/test_verify_multi_draft.cu): NaN / negative
  // entries in every row of request 0 that its walk does not visit, at tokens no child carries.
  auto c = specdec_test::random_multi_draft_batch(6, 10, 9, draft_sampling::with_replacement, 555);
  auto dirty = c;
  const int planted = specdec_test::spoil_unvisited_rows(dirty);
  CHECK(planted > 0);
  outputs o(dirty);
  run(dirty, o);
  specdec_test::check_tree_outputs(c.expected, c.node_indptr, c.tokens, o);
}

namespace {

using specdec_test::logits_case_kind;
using specdec_test::sampled_logits_case;

//! The logits form on c (its kind), into o (tests/verify/sample_and_match_batch_util.hpp).
void run_logits(const sampled_logits_case& c, specdec_test::tree_outputs& o, const specdec::host& policy = {},
                std::int64_t pad = 0) {
  specdec_test::run_host_logits(c, o, policy, pad);
}

}  // namespace

TEST_CASE("verify_multi_draft_batch from logits (host) equals processing every row, then the probabilities form",
          "[verify][multi_draft]") {
  int accepted_total = 0, rejected_children = 0, cases = 0;
  for (const auto kind : {logits_case_kind::multi_draft, logits_case_kind::multi_draft_wor})
    for (const bool penalties : {false, true})
      for (int R : {0, 1, 5, 17})
        for (int max_nodes : {1, 9, 40})
          for (std::int64_t V : {1, 3, 200, 3000}) {
            const sampled_logits_case c(
                R, max_nodes, V, static_cast<int>(std::min<std::int64_t>(V, 3)), penalties,
                static_cast<std::uint64_t>(R * 100000 + max_nodes * 100 + V + (penalties ? 7 : 0)), kind);
            specdec_test::tree_outputs o(static_cast<std::size_t>(c.requests()), c.tokens.size());
            run_logits(c, o, specdec::host{.num_threads = 2}, (R + V) % 2 == 0 ? 0 : 3);
            accepted_total += c.matches(o);
            for (int r = 0; r < c.requests(); ++r) {  // the walk ended at a node with children: all rejected
              const int b = c.node_indptr[r], n = c.node_indptr[r + 1] - b, k = o.num_accepted[static_cast<std::size_t>(r)];
              const int last = k == 0 ? -1 : o.accepted[static_cast<std::size_t>(b + k - 1)];
              rejected_children += std::any_of(c.parents.begin() + b, c.parents.begin() + b + n,
                                               [&](std::int32_t p) { return p == last; });
            }
            ++cases;
          }
  CHECK(cases == 192);
  CHECK(accepted_total > 100);   // accepted nodes, not only bonus tokens
  CHECK(rejected_children > 50);  // the residual path is taken
}

TEST_CASE("verify_multi_draft_batch from logits reads no target row the walk does not reach",
          "[verify][multi_draft][validation]") {
  // the hand case of rejected_root_case: node 0 rejected at temperature 0, rows 1 and 2 never read
  auto h = specdec_test::rejected_root_case(logits_case_kind::multi_draft);
  specdec_test::tree_outputs o(1, 2);
  run_logits(h, o);
  CHECK(o.status == std::vector<std::int32_t>{0, -1, -1});
  CHECK(o.num_accepted[0] == 0);
  CHECK(o.bonus[0] == 3);
  CHECK(o.emitted == std::vector<std::int32_t>{3, -9, -9});
  // the root row peaking on token 1 instead: node 0 accepted (p(1) = 1 >= q), row 1 reached and refused
  h.logits[1] = 20.0f;
  h.row_params[1] = 0;
  o = specdec_test::tree_outputs(1, 2);
  CHECK_THROWS_WITH(run_logits(h, o), Catch::Contains("target_logits") && Catch::Contains("row 1"));
  CHECK(o == specdec_test::tree_outputs(1, 2));
  // a rejected sibling's row is not read either: node 0 rejected, node 1 accepted from the residual
  const auto sib = specdec_test::rejected_sibling_case();
  o = specdec_test::tree_outputs(1, 2);
  run_logits(sib, o);
  CHECK(o.status == std::vector<std::int32_t>{0, -1, -1});
  CHECK(o.num_accepted[0] == 1);
  CHECK(o.accepted[0] == 1);
  CHECK(o.emitted == std::vector<std::int32_t>{3, 4, -9});
}

TEST_CASE("verify_multi_draft_batch from logits (host) rejects bad values and leaves the outputs untouched",
          "[verify][multi_draft][validation]") {
  sampled_logits_case c(3, 6, 40, 3, true, 99, logits_case_kind::multi_draft_wor);
  for (std::uint64_t s = 100; c.node_indptr[1] - c.node_indptr[0] < 2; ++s)
    c = sampled_logits_case(3, 6, 40, 3, true, s, logits_case_kind::multi_draft_wor);
  const auto reject = [](const sampled_logits_case& bad, const std::string& what) {
    specdec_test::tree_outputs o(static_cast<std::size_t>(bad.requests()), bad.tokens.size());
    const auto fresh = o;
    CHECK_THROWS_WITH(run_logits(bad, o), Catch::Contains("verify_multi_draft_batch") && Catch::Contains(what));
    CHECK(o == fresh);
  };
  specdec_test::common_logits_refusals(c, reject);  // in request 0's root row (always read)
  {  // q = 0 at node 1's token in its parent's draft row: refused up front
    auto bad = c;
    bad.q[static_cast<std::size_t>((c.parents[1] + 1) * c.vocab + c.tokens[1])] = 0.0f;
    reject(bad, "q > 0 at the parent's draft row");
  }
  {  // two siblings with one token, without replacement
    auto bad = c;
    bad.parents[1] = bad.parents[0];
    bad.tokens[1] = bad.tokens[0];
    reject(bad, "distinct sibling tokens");
  }
  {  // a bad entry in request 0's root draft row (the root has children: its decisions read it in full),
     // refused even where the decision does not need it: the first child's token peaks in the root
     // row (p ~ 1) with q = 0.5 there, so the child is accepted and the row is not summed for a residual
    auto bad = c;
    const auto x = static_cast<std::size_t>(c.tokens[0]);  // node 0 is the root's first child
    bad.params[0] = specdec::sampling_params{};  // plain softmax: the peak keeps p ~ 1
    bad.logits[x] = 60.0f;
    bad.q[x] = 0.5f;
    bad.q[x == 0 ? 1 : 0] = -1.0f;
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
      specdec::verify_multi_draft_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens), v1(c.parents), lg, qv,
                                        c.mode(), pa, v1(c.row_params), c.b.view(), v1(c.seeds), v1(c.streams), ws,
                                        v1(o.accepted), v1(o.num_accepted), v1(o.bonus), v1(o.emitted), v1(o.status));
    };
    CHECK_THROWS_WITH(call(specdec::make_view<2>(w_short.data(), {1, c.vocab})), Catch::Contains("workspace"));
    CHECK_THROWS_WITH(call(specdec::make_view<2>(q.data(), {3, c.vocab})),
                      Catch::Contains("workspace") && Catch::Contains("draft_probs"));
    CHECK(o == fresh);
  }
}
