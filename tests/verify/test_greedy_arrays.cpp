// The array form of verify_greedy_batch (the one a GPU engine calls; its cuda twin is tested in
// tests/cuda/test_verify_greedy.cu against this host backend): equal to verify_greedy per request,
// emitted tokens laid out at node_indptr[r] + r, bad values throw and leave the outputs untouched.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "specdec/verify/greedy.hpp"
#include "verify/greedy_batch_util.hpp"
#include "verify/tree_arrays_util.hpp"

using specdec::memory_space;
using specdec_test::greedy_batch_case;

namespace {

using specdec_test::v1;

struct outputs : specdec_test::tree_outputs {
  explicit outputs(const greedy_batch_case& c) : tree_outputs(c.node_indptr.size() - 1, c.tokens.size()) {}
};

void run(greedy_batch_case& c, outputs& o) {
  const auto lg = specdec::make_view<2>(c.logits.data(), {c.nodes() + c.requests(), c.vocab});
  specdec::verify_greedy_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens), v1(c.parents), lg, v1(o.accepted),
                               v1(o.num_accepted), v1(o.bonus), v1(o.emitted), v1(o.status));
}

}  // namespace

TEST_CASE("verify_greedy_batch (arrays, host) equals verify_greedy per request", "[verify][greedy]") {
  int accepted_total = 0;
  for (int R : {0, 1, 4, 33}) {
    for (int max_nodes : {1, 8, 70}) {
      for (std::int64_t V : {1, 5, 300}) {
        auto c = specdec_test::random_greedy_batch(R, max_nodes, V, static_cast<int>(std::min<std::int64_t>(V, 4)),
                                                   R * 1000 + max_nodes * 10 + V);
        outputs o(c);
        run(c, o);
        accepted_total += specdec_test::check_tree_outputs(c.expected, c.node_indptr, c.tokens, o);
      }
    }
  }
  CHECK(accepted_total > 100);  // the generator makes long accepted paths, not only bonus tokens
}

TEST_CASE("verify_greedy_batch (arrays, host) with penalties equals processing the rows and verifying them",
          "[verify][greedy]") {
  int moved = 0, accepted_total = 0;
  for (int R : {1, 4, 9}) {
    for (int max_nodes : {1, 8, 40}) {
      for (std::int64_t V : {3, 7, 300}) {
        specdec_test::penalized_greedy_case pc(R, max_nodes, V, static_cast<int>(std::min<std::int64_t>(V, 4)),
                                               R * 977 + max_nodes * 13 + V);
        auto& c = pc.c;
        outputs o(c);
        const auto unprocessed = c.logits;
        const std::int64_t rows = c.nodes() + c.requests();
        specdec::verify_greedy_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens), v1(c.parents),
                                     specdec::make_view<2>(static_cast<const float*>(c.logits.data()), {rows, V}),
                                     v1(pc.params), v1(pc.row_params), pc.b.view(), v1(o.accepted), v1(o.num_accepted),
                                     v1(o.bonus), v1(o.emitted), v1(o.status));
        INFO("R " << R << " nodes <= " << max_nodes << " V " << V);
        accepted_total += specdec_test::check_tree_outputs(pc.expected, c.node_indptr, c.tokens, o);
        CHECK(c.logits == unprocessed);
        moved += pc.moved();
      }
    }
  }
  CHECK(moved >= 10);  // the penalties do move argmaxes
  CHECK(accepted_total > 50);
  // every row is read, unlike the plain form: a NaN in a row the walk does not reach (unread_nan_case:
  // the plain form accepts it) is refused, naming the function; nothing written
  {
    auto h = specdec_test::unread_nan_case();
    std::vector<specdec::sampling_params> params(1);
    params[0].temperature = 0.0f, params[0].repetition_penalty = 1.5f;
    std::vector<std::int32_t> row_params(3, 0);
    specdec::penalty_context_builder b(static_cast<std::int32_t>(h.vocab));
    b.add_tree_rows(b.add_context(std::vector<std::int32_t>{0}), h.tokens, h.parents);
    outputs o(h);
    const outputs fresh(h);
    CHECK_THROWS_WITH(specdec::verify_greedy_batch(specdec::host{}, v1(h.node_indptr), v1(h.tokens), v1(h.parents),
                                                   specdec::make_view<2>(h.logits.data(), {3, h.vocab}), v1(params),
                                                   v1(row_params), b.view(), v1(o.accepted), v1(o.num_accepted),
                                                   v1(o.bonus), v1(o.emitted), v1(o.status)),
                      Catch::Contains("specdec::verify_greedy_batch") && Catch::Contains("'target_logits'") &&
                          Catch::Contains("row 2"));
    CHECK(o == fresh);
    run(h, o);  // the plain form does not read that row
    CHECK(o.status == std::vector<std::int32_t>{0, -1, -1});
  }
  specdec_test::penalized_greedy_case pc(2, 5, 6, 3, 17);
  outputs o(pc.c);
  const outputs fresh(pc.c);
  const std::int64_t rows = pc.c.nodes() + pc.c.requests();
  const auto call = [&](auto row_params, specdec::penalty_context ctx) {
    specdec::verify_greedy_batch(specdec::host{}, v1(pc.c.node_indptr), v1(pc.c.tokens), v1(pc.c.parents),
                                 specdec::make_view<2>(pc.c.logits.data(), {rows, 6}), v1(pc.params), row_params, ctx,
                                 v1(o.accepted), v1(o.num_accepted), v1(o.bonus), v1(o.emitted), v1(o.status));
  };
  // an entry out of range, a malformed context, a context sharing memory with an output: refused first
  auto bad_rp = pc.row_params;
  bad_rp[0] = 2;
  CHECK_THROWS_WITH(call(v1(bad_rp), pc.b.view()), Catch::Contains("'row_params'"));
  std::vector<std::int32_t> bad_path(pc.b.path().begin(), pc.b.path().end());
  REQUIRE(!bad_path.empty());
  bad_path[0] = 6;
  auto ctx = pc.b.view();
  ctx.path = specdec::make_view<1>(static_cast<const std::int32_t*>(bad_path.data()), {static_cast<std::int64_t>(bad_path.size())});
  CHECK_THROWS_WITH(call(v1(pc.row_params), ctx), Catch::Contains("'context'") && Catch::Contains("path tokens in [0, V)"));
  CHECK(o == fresh);
  ctx = pc.b.view();
  REQUIRE(pc.b.context_length().size() == o.num_accepted.size());  // a context per request
  ctx.context_length = specdec::make_view<1>(static_cast<const std::int32_t*>(o.num_accepted.data()),
                                             {static_cast<std::int64_t>(o.num_accepted.size())});
  CHECK_THROWS_WITH(call(v1(pc.row_params), ctx), Catch::Contains("'context.context_length'") && Catch::Contains("disjoint"));
  CHECK(o == fresh);
  // a bad tree after good rows: refused by the walk's checks, the outputs (status too) untouched
  auto bad_parents = pc.c.parents;
  bad_parents.back() = static_cast<std::int32_t>(bad_parents.size());
  CHECK_THROWS_WITH(specdec::verify_greedy_batch(specdec::host{}, v1(pc.c.node_indptr), v1(pc.c.tokens), v1(bad_parents),
                                                 specdec::make_view<2>(pc.c.logits.data(), {rows, 6}), v1(pc.params),
                                                 v1(pc.row_params), pc.b.view(), v1(o.accepted), v1(o.num_accepted),
                                                 v1(o.bonus), v1(o.emitted), v1(o.status)),
                    Catch::Contains("specdec::verify_greedy_batch") && Catch::Contains("parent"));
  CHECK(o == fresh);
}

TEST_CASE("verify_greedy_batch (arrays, host) rejects bad values and leaves the outputs untouched",
          "[verify][greedy][validation]") {
  auto c = specdec_test::random_greedy_batch(3, 10, 6, 3, 4242);
  while (c.node_indptr[2] - c.node_indptr[1] < 2) c = specdec_test::random_greedy_batch(3, 10, 6, 3, c.tokens.size() + 1);
  auto reject = [](greedy_batch_case bad, const std::string& what) {
    outputs o(bad);
    const outputs fresh(bad);
    CHECK_THROWS_WITH(run(bad, o), Catch::Contains(what));
    CHECK(o == fresh);
  };
  const int b1 = c.node_indptr[1];
  {
    auto bad = c;
    bad.tokens[b1 + 1] = 6;
    reject(bad, "tree.tokens[" + std::to_string(b1 + 1) + "]");
  }
  {
    auto bad = c;
    bad.parents[b1 + 1] = 1;
    reject(bad, "parents[1]");
  }
  {
    auto bad = c;
    bad.node_indptr[1] = bad.node_indptr[2] + 1;
    reject(bad, "non-decreasing node_indptr");
  }
  {  // NaN in the root row of request 2: always read
    auto bad = c;
    bad.logits[(c.node_indptr[2] + 2) * c.vocab + 1] = std::numeric_limits<float>::quiet_NaN();
    reject(bad, "request 2");
  }
  {  // a NaN in a row the walk never reads is never looked at
    greedy_batch_case h = specdec_test::unread_nan_case();
    outputs o(h);
    run(h, o);
    CHECK(o.num_accepted[0] == 1);
    CHECK(o.accepted[0] == 0);
    CHECK(o.bonus[0] == 3);
    CHECK(o.emitted[0] == 1);
    CHECK(o.emitted[1] == 3);
    CHECK(o.status == std::vector<std::int32_t>{0, -1, -1});
    h.logits[1] = -1;  // now the root's argmax is 4: nothing accepted, bonus 4, the NaN row still unread
    outputs o2(h);
    run(h, o2);
    CHECK(o2.num_accepted[0] == 0);
    CHECK(o2.bonus[0] == 4);
    h.logits[2] = 20;  // now node 1 (token 2) is accepted and the NaN row after it is read: rejected
    outputs o3(h);
    CHECK_THROWS_WITH(run(h, o3), Catch::Contains("NaN"));
  }
}

TEST_CASE("verify_greedy_batch (arrays) checks shapes and memory spaces first", "[verify][greedy][validation]") {
  auto c = specdec_test::random_greedy_batch(2, 5, 4, 2, 5);
  outputs o(c);
  const auto lg = specdec::make_view<2>(c.logits.data(), {c.nodes() + c.requests(), c.vocab});
  auto dev = specdec::make_view<1>(o.status.data(), {3}, memory_space::device);
  CHECK_THROWS_WITH(specdec::verify_greedy_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens), v1(c.parents), lg,
                                                 v1(o.accepted), v1(o.num_accepted), v1(o.bonus), v1(o.emitted), dev),
                    Catch::Contains("status") && Catch::Contains("host-accessible"));
  // bonus is checked like every other array: its memory space, its stride, a null pointer
  const auto bonus_dev = specdec::make_view<1>(o.bonus.data(), {c.requests()}, memory_space::device);
  CHECK_THROWS_WITH(specdec::verify_greedy_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens), v1(c.parents), lg,
                                                 v1(o.accepted), v1(o.num_accepted), bonus_dev, v1(o.emitted),
                                                 v1(o.status)),
                    Catch::Contains("'bonus'") && Catch::Contains("host-accessible"));
  std::vector<std::int32_t> wide(2 * o.bonus.size());
  const auto bonus_strided =
      specdec::strided_view<std::int32_t, 1>(wide.data(), {static_cast<std::int64_t>(c.requests())}, {2});
  CHECK_THROWS_WITH(specdec::verify_greedy_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens), v1(c.parents), lg,
                                                 v1(o.accepted), v1(o.num_accepted), bonus_strided, v1(o.emitted),
                                                 v1(o.status)),
                    Catch::Contains("'bonus'"));
  const auto bonus_null = specdec::strided_view<std::int32_t, 1>(nullptr, {static_cast<std::int64_t>(c.requests())}, {1});
  CHECK_THROWS_WITH(specdec::verify_greedy_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens), v1(c.parents), lg,
                                                 v1(o.accepted), v1(o.num_accepted), bonus_null, v1(o.emitted),
                                                 v1(o.status)),
                    Catch::Contains("'bonus'"));
  std::vector<std::int32_t> short_emitted(o.emitted.size() - 1);
  CHECK_THROWS_WITH(specdec::verify_greedy_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens), v1(c.parents), lg,
                                                 v1(o.accepted), v1(o.num_accepted), v1(o.bonus), v1(short_emitted),
                                                 v1(o.status)),
                    Catch::Contains("emitted"));
  const auto lg_short = specdec::make_view<2>(c.logits.data(), {c.nodes() + c.requests() - 1, c.vocab});
  CHECK_THROWS_WITH(specdec::verify_greedy_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens), v1(c.parents),
                                                 lg_short, v1(o.accepted), v1(o.num_accepted), v1(o.bonus),
                                                 v1(o.emitted), v1(o.status)),
                    Catch::Contains("target_logits"));
}

TEST_CASE("verify_greedy_batch (arrays) refuses outputs that share memory with the trees or with each other",
          "[verify][greedy][validation]") {
  // A bonus written into node_indptr would move the next request's rows (found by a review: a heap
  // overflow before the check); an emitted array over tokens would change the tokens being emitted.
  auto c = specdec_test::random_greedy_batch(2, 5, 4, 2, 21);
  outputs o(c);
  const auto lg = specdec::make_view<2>(c.logits.data(), {c.nodes() + c.requests(), c.vocab});
  const auto bonus_over_indptr = specdec::make_view<1>(c.node_indptr.data() + 1, {2});
  CHECK_THROWS_WITH(specdec::verify_greedy_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens), v1(c.parents), lg,
                                                 v1(o.accepted), v1(o.num_accepted), bonus_over_indptr, v1(o.emitted),
                                                 v1(o.status)),
                    Catch::Contains("'node_indptr'") && Catch::Contains("disjoint from 'bonus'"));
  std::vector<std::int32_t> shared(c.tokens.size() + 2);
  std::copy(c.tokens.begin(), c.tokens.end(), shared.begin());
  const auto tokens_in_shared = specdec::make_view<1>(static_cast<const std::int32_t*>(shared.data()), {c.nodes()});
  const auto emitted_over_tokens = specdec::make_view<1>(shared.data(), {c.nodes() + c.requests()});
  CHECK_THROWS_WITH(specdec::verify_greedy_batch(specdec::host{}, v1(c.node_indptr), tokens_in_shared, v1(c.parents),
                                                 lg, v1(o.accepted), v1(o.num_accepted), v1(o.bonus),
                                                 emitted_over_tokens, v1(o.status)),
                    Catch::Contains("'tokens'") && Catch::Contains("disjoint from 'emitted'"));
  // two outputs over one array
  CHECK_THROWS_WITH(specdec::verify_greedy_batch(specdec::host{}, v1(c.node_indptr), v1(c.tokens), v1(c.parents), lg,
                                                 v1(o.accepted), v1(o.num_accepted), v1(o.num_accepted), v1(o.emitted),
                                                 v1(o.status)),
                    Catch::Contains("'bonus'") && Catch::Contains("disjoint from 'num_accepted'"));
  CHECK(o == outputs(c));  // nothing written
  // The logits may be read through any view that does not overlap the outputs: the call still runs.
  run(c, o);
  CHECK(o.status == std::vector<std::int32_t>{0, -1, -1});
}
