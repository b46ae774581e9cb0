// The array form of verify_multi_draft_batch (its cuda twin: tests/cuda/test_verify_multi_draft.cu):
// equal to verify_multi_draft per request with the request's (seed, stream), with and without
// replacement; bad values throw naming the problem and leave the outputs untouched.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "specdec/verify/multi_draft.hpp"
#include "verify/multi_draft_batch_util.hpp"
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
