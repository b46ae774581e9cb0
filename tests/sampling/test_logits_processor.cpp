#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "sampling/sampling_reference.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/sampling/logits_processor.hpp"

namespace {
constexpr float ninf = -std::numeric_limits<float>::infinity();

std::vector<float> random_row(int v, specdec::philox_stream& rng, float scale) {
  std::vector<float> r(static_cast<std::size_t>(v));
  for (auto& x : r) x = (rng.uniform() * 2.0f - 1.0f) * scale;
  // a few exact ties and a masked token, to exercise tie-breaking and -inf handling
  if (v > 4) {
    r[1] = r[3];
    if (rng.below(2)) r[static_cast<std::size_t>(rng.below(static_cast<std::uint32_t>(v)))] = ninf;
  }
  return r;
}

specdec::sampling_params random_params(specdec::philox_stream& rng, int v) {
  specdec::sampling_params p;
  const auto pick = [&] { return rng.below(3) == 0; };
  p.temperature = rng.below(8) == 0 ? 0.0f : 0.3f + 1.5f * rng.uniform();
  if (pick()) p.top_k = 1 + static_cast<int>(rng.below(static_cast<std::uint32_t>(v + 2)));
  if (pick()) p.top_p = 0.05f + 0.95f * rng.uniform();
  if (pick()) p.min_p = 0.5f * rng.uniform();
  if (pick()) p.eta_epsilon = 0.3f * rng.uniform();
  if (pick()) p.eta_alpha = 0.5f + rng.uniform();
  if (pick()) p.repetition_penalty = 1.0f + rng.uniform();
  if (pick()) p.contextual_penalty = 1.0f + rng.uniform();
  p.penalty_window = static_cast<int>(rng.below(20));
  p.contextual_sign_aware = rng.below(2) == 1;
  return p;
}

bool same_row(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i])) return false;  // -inf == -inf holds
  return true;
}
}  // namespace

TEST_CASE("processor chain equals the sort-based reference on random rows") {
  specdec::philox_stream rng(42, 1);
  specdec::sampling_workspace ws;
  int cases = 0;
  for (int v : {1, 2, 3, 16, 257, 2000}) {
    for (int c = 0; c < 150; ++c) {
      const auto params = random_params(rng, v);
      auto row = random_row(v, rng, v > 100 ? 8.0f : 3.0f);
      if (*std::max_element(row.begin(), row.end()) == ninf) row[0] = 0.0f;
      std::vector<std::int32_t> ctx(rng.below(40));
      for (auto& t : ctx) t = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(std::min(v, 12))));
      // split the context between prefix and suffix at a random point
      const std::size_t cut = ctx.empty() ? 0 : rng.below(static_cast<std::uint32_t>(ctx.size() + 1));
      auto expected = row;
      ref::process(expected, params, ctx);
      specdec::process_logits(row, params, std::span(ctx).first(cut), std::span(ctx).subspan(cut), ws);
      INFO("v = " << v << " case " << c << " temp " << params.temperature << " k " << params.top_k << " p "
                  << params.top_p << " minp " << params.min_p << " eta " << params.eta_epsilon);
      REQUIRE(same_row(row, expected));
      REQUIRE(*std::max_element(row.begin(), row.end()) > ninf);  // never empties a row
      ++cases;
    }
  }
  CHECK(cases == 900);
}

TEST_CASE("contextual penalty follows TokenSwift Eq. 3 and its sign-aware variant") {
  specdec::sampling_workspace ws;
  specdec::sampling_params p;
  p.contextual_penalty = 2.0f;
  p.temperature = 0.5f;
  p.penalty_window = 2;
  // context 3, 0, 1: window W = 2 holds {0, 1}; token 3 is outside it
  const std::vector<std::int32_t> ctx{3, 0, 1};
  std::vector<float> l{2.0f, -1.0f, 0.5f, 1.0f};
  auto row = l;
  specdec::process_logits(row, p, ctx, ws);
  // Eq. 3: l_i / (t * I(l_i)), I = theta inside the window
  CHECK(row[0] == Approx(2.0 / (0.5 * 2.0)));
  CHECK(row[1] == Approx(-1.0 / (0.5 * 2.0)));  // Eq. 3 raises a negative logit
  CHECK(row[2] == Approx(0.5 / 0.5));
  CHECK(row[3] == Approx(1.0 / 0.5));
  p.contextual_sign_aware = true;
  row = l;
  specdec::process_logits(row, p, ctx, ws);
  CHECK(row[0] == Approx(2.0 / (0.5 * 2.0)));
  CHECK(row[1] == Approx(-1.0 * 2.0 / 0.5));  // sign-aware always lowers
  // each token is penalised once however often it repeats in the window
  p.contextual_sign_aware = false;
  p.penalty_window = 1024;
  row = l;
  const std::vector<std::int32_t> rep{0, 0, 0, 0};
  specdec::process_logits(row, p, rep, ws);
  CHECK(row[0] == Approx(2.0 / (0.5 * 2.0)));
  // repetition penalty (CTRL) over the whole context, sign-aware
  specdec::sampling_params r;
  r.repetition_penalty = 1.5f;
  row = l;
  specdec::process_logits(row, r, ctx, ws);
  CHECK(row[0] == Approx(2.0 / 1.5));
  CHECK(row[1] == Approx(-1.5));
  CHECK(row[2] == 0.5f);
  CHECK(row[3] == Approx(1.0 / 1.5));
}

TEST_CASE("truncations keep the documented sets") {
  specdec::sampling_workspace ws;
  const std::vector<std::int32_t> none;
  auto logp = [](std::vector<double> p) {
    std::vector<float> l;
    for (double x : p) l.push_back(x > 0 ? static_cast<float>(std::log(x)) : ninf);
    return l;
  };
  auto kept = [](const std::vector<float>& r) {
    std::vector<int> k;
    for (std::size_t i = 0; i < r.size(); ++i)
      if (r[i] > ninf) k.push_back(static_cast<int>(i));
    return k;
  };
  SECTION("top-k breaks ties by lowest id") {
    specdec::sampling_params p;
    p.top_k = 2;
    std::vector<float> row{1.0f, 3.0f, 3.0f, 3.0f, 0.0f};
    specdec::process_logits(row, p, none, ws);
    CHECK(kept(row) == std::vector<int>{1, 2});
    p.top_k = 4;
    row = {1.0f, 3.0f, 3.0f, 3.0f, 0.0f};
    specdec::process_logits(row, p, none, ws);
    CHECK(kept(row) == std::vector<int>{0, 1, 2, 3});
  }
  SECTION("top-p keeps the smallest set reaching p") {
    specdec::sampling_params p;
    for (auto [pp, expect] : {std::pair{0.45f, std::vector<int>{1}}, std::pair{0.75f, std::vector<int>{0, 1}},
                              std::pair{0.81f, std::vector<int>{0, 1, 3}}, std::pair{0.99f, std::vector<int>{0, 1, 2, 3}}}) {
      p.top_p = pp;
      auto row = logp({0.3, 0.5, 0.05, 0.15});
      specdec::process_logits(row, p, none, ws);
      CHECK(kept(row) == expect);
    }
  }
  SECTION("min-p keeps P >= p_base * p_max") {
    specdec::sampling_params p;
    p.min_p = 0.5f;
    auto row = logp({0.4, 0.3, 0.19, 0.11});
    specdec::process_logits(row, p, none, ws);
    CHECK(kept(row) == std::vector<int>{0, 1});
  }
  SECTION("eta-sampling keeps P >= min(eps, alpha exp(-H))") {
    const std::vector<double> probs{0.6, 0.25, 0.1, 0.04, 0.01};
    double h = 0;
    for (double x : probs) h -= x * std::log(x);
    specdec::sampling_params p;
    p.eta_epsilon = 0.2f;  // alpha = sqrt(0.2) = 0.447: alpha exp(-H) = 0.447 * exp(-h)
    const double eta = std::min(0.2, std::sqrt(0.2) * std::exp(-h));
    auto row = logp(probs);
    specdec::process_logits(row, p, none, ws);
    std::vector<int> expect;
    for (std::size_t i = 0; i < probs.size(); ++i)
      if (probs[i] >= eta) expect.push_back(static_cast<int>(i));
    CHECK(kept(row) == expect);
    CHECK(expect.size() < probs.size());  // the case actually truncates
    // alpha > 1 with a flat distribution would empty the set: the argmax survives
    p.eta_epsilon = 0.9f;
    p.eta_alpha = 100.0f;
    row = logp({0.25, 0.25, 0.25, 0.25});
    specdec::process_logits(row, p, none, ws);
    CHECK(kept(row) == std::vector<int>{0});
  }
  SECTION("temperature 0 is greedy") {
    specdec::sampling_params p;
    p.temperature = 0.0f;
    std::vector<float> row{1.0f, 5.0f, 5.0f, -2.0f};
    specdec::process_logits(row, p, none, ws);
    CHECK(kept(row) == std::vector<int>{1});
    CHECK(row[1] == 0.0f);
  }
}

TEST_CASE("tree rows are processed with committed tokens plus the node's own root path") {
  specdec::philox_stream rng(7, 3);
  specdec::sampling_workspace ws, ws2;
  const int v = 50;
  // tree: 0,1 children of root; 2 child of 0; 3 child of 2; 4 child of 1; 5 child of 0
  const std::vector<std::int32_t> tokens{4, 9, 4, 11, 30, 2};
  const std::vector<std::int32_t> parents{-1, -1, 0, 2, 1, 0};
  std::vector<std::int32_t> committed(40);
  for (auto& t : committed) t = static_cast<std::int32_t>(rng.below(20));
  specdec::sampling_params p;
  p.repetition_penalty = 1.3f;
  p.contextual_penalty = 1.7f;
  p.penalty_window = 8;
  p.top_p = 0.9f;
  const int n = 6;
  std::vector<float> logits(static_cast<std::size_t>((n + 1) * v));
  for (auto& x : logits) x = 4.0f * rng.uniform() - 2.0f;
  auto processed = logits;
  specdec::process_tree_logits(specdec::make_view<2>(processed.data(), {n + 1, v}), p, committed, tokens, parents, ws);
  for (int r = 0; r <= n; ++r) {
    std::vector<std::int32_t> ctx = committed;
    std::vector<std::int32_t> path;
    for (int a = r - 1; a >= 0; a = parents[a]) path.insert(path.begin(), tokens[a]);
    ctx.insert(ctx.end(), path.begin(), path.end());
    std::vector<float> row(logits.begin() + r * v, logits.begin() + (r + 1) * v);
    specdec::process_logits(row, p, ctx, ws2);  // what autoregressive decoding does after that path
    std::vector<float> got(processed.begin() + r * v, processed.begin() + (r + 1) * v);
    INFO("row " << r);
    CHECK(same_row(got, row));
  }
}

TEST_CASE("processors validate their inputs") {
  specdec::sampling_workspace ws;
  std::vector<float> row{0.0f, 1.0f, 2.0f};
  const std::vector<std::int32_t> ctx{0, 1};
  auto bad = [&](auto mutate, const char* field) {
    specdec::sampling_params p;
    mutate(p);
    auto r = row;
    REQUIRE_THROWS_WITH(specdec::process_logits(r, p, ctx, ws), Catch::Contains(field) &&
                                                                   Catch::Contains("specdec::process_logits"));
    REQUIRE_THROWS_AS(specdec::process_logits(r, p, ctx, ws), specdec::invalid_argument);
  };
  bad([](auto& p) { p.temperature = -1.0f; }, "params.temperature");
  bad([](auto& p) { p.temperature = std::numeric_limits<float>::infinity(); }, "params.temperature");
  bad([](auto& p) { p.top_k = -2; }, "params.top_k");
  bad([](auto& p) { p.top_p = 0.0f; }, "params.top_p");
  bad([](auto& p) { p.top_p = 1.5f; }, "params.top_p");
  bad([](auto& p) { p.min_p = -0.1f; }, "params.min_p");
  bad([](auto& p) { p.eta_epsilon = 1.0f; }, "params.eta_epsilon");
  bad([](auto& p) { p.eta_alpha = 0.0f; }, "params.eta_alpha");
  bad([](auto& p) { p.repetition_penalty = 0.5f; }, "params.repetition_penalty");
  bad([](auto& p) { p.contextual_penalty = 0.9f; }, "params.contextual_penalty");
  bad([](auto& p) { p.penalty_window = -1; }, "params.penalty_window");
  specdec::sampling_params p;
  const std::vector<std::int32_t> out_of_range{0, 3};
  auto r = row;
  REQUIRE_THROWS_WITH(specdec::process_logits(r, p, out_of_range, ws), Catch::Contains("'context'"));
  REQUIRE_THROWS_WITH(specdec::process_logits(r, p, ctx, out_of_range, ws), Catch::Contains("'context_suffix'"));
  std::vector<float> empty;
  REQUIRE_THROWS_AS(specdec::process_logits(empty, p, ctx, ws), specdec::invalid_argument);
  std::vector<float> masked{ninf, ninf};
  REQUIRE_THROWS_WITH(specdec::process_logits(masked, p, ctx, ws), Catch::Contains("'logits'"));
  std::vector<float> nan{0.0f, std::nanf("")};
  REQUIRE_THROWS_WITH(specdec::process_logits(nan, p, ctx, ws), Catch::Contains("NaN"));

  // tree form
  std::vector<float> tl(3 * 3, 0.0f);
  const std::vector<std::int32_t> tok{1, 2}, par{-1, 0};
  const auto view = specdec::make_view<2>(tl.data(), {3, 3});
  REQUIRE_NOTHROW(specdec::process_tree_logits(view, p, ctx, tok, par, ws));
  const std::vector<std::int32_t> bad_par{-1, 1};
  REQUIRE_THROWS_WITH(specdec::process_tree_logits(view, p, ctx, tok, bad_par, ws), Catch::Contains("'parents'"));
  const std::vector<std::int32_t> short_par{-1};
  REQUIRE_THROWS_WITH(specdec::process_tree_logits(view, p, ctx, tok, short_par, ws), Catch::Contains("parents.size()"));
  const auto wrong = specdec::make_view<2>(tl.data(), {2, 3});
  REQUIRE_THROWS_WITH(specdec::process_tree_logits(wrong, p, ctx, tok, par, ws), Catch::Contains("'logits'"));
  const std::vector<std::int32_t> bad_tok{1, 7};
  REQUIRE_THROWS_WITH(specdec::process_tree_logits(view, p, ctx, bad_tok, par, ws), Catch::Contains("'tokens'"));

  std::vector<float> probs(2);
  REQUIRE_THROWS_WITH(specdec::logits_to_probs(row, probs), Catch::Contains("probs.size()"));
}

TEST_CASE("logits_to_probs is a softmax") {
  std::vector<float> l{1.0f, 2.0f, ninf, 0.0f}, pr(4);
  specdec::logits_to_probs(l, pr);
  const double s = std::exp(1.0) + std::exp(2.0) + 1.0;
  CHECK(pr[0] == Approx(std::exp(1.0) / s));
  CHECK(pr[1] == Approx(std::exp(2.0) / s));
  CHECK(pr[2] == 0.0f);
  CHECK(pr[3] == Approx(1.0 / s));
}
