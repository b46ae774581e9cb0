// The array form of verify_chain_speculative_batch (its cuda twin: tests/cuda/
// test_verify_chain_speculative.cu): equal to verify_chain_speculative per request with the
// request's (seed, stream); bad values throw naming the request and leave the outputs untouched.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <vector>

#include "specdec/verify/speculative_sampling.hpp"
#include "verify/chain_speculative_batch_util.hpp"
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
