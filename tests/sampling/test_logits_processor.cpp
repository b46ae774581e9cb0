#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "sampling/sampling_reference.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/sampling/logits_processor.hpp"
#include "specdec/sampling/sampler.hpp"

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
  SECTION("min-p's cut is exact at large logits (the float sum max + ln(p) rounded below it)") {
    specdec::sampling_params p;
    p.min_p = 0.05f;  // ln 0.05 = -2.99573...
    // token 2 sits 2.99585 below the maximum: P / P_max = 0.049994 < 0.05, dropped
    std::vector<float> row{3000.0f, 2997.00439453125f, 2997.0041503906f, 2997.0f};
    specdec::process_logits(row, p, none, ws);
    CHECK(kept(row) == std::vector<int>{0, 1});
    row = {200000.0f, 199997.0f, 199990.0f};  // e^-3 = 0.0498 < 0.05: only the maximum
    specdec::process_logits(row, p, none, ws);
    CHECK(kept(row) == std::vector<int>{0});
    // every cut is the smallest float whose difference to the maximum reaches ln(min_p)
    specdec::philox_stream rng(0x313, 1);
    for (int i = 0; i < 20000; ++i) {
      const float m = (rng.uniform() - 0.5f) * std::ldexp(1.0f, static_cast<int>(rng.below(40)) - 10);
      const float mp = std::max(rng.uniform(), 1e-30f);
      const float c = specdec::detail::min_p_cut(m, mp);
      const double lnp = std::log(static_cast<double>(mp));
      REQUIRE(static_cast<double>(c) - m >= lnp);
      REQUIRE(static_cast<double>(std::nextafter(c, -INFINITY)) - m < lnp);
    }
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
    // alpha = 1 on a uniform row of N: P = 1/N = exp(-H) = eta exactly, so every token is kept. The
    // cut exp(-log N) * N rounded to 1 + 2^-52 for some N and masked all but token 0 (N = 7, 1000,
    // 3000 among these; a review finding).
    p.eta_epsilon = 0.5f;
    p.eta_alpha = 1.0f;
    for (int n : {2, 3, 5, 6, 7, 10, 100, 1000, 3000, 32000}) {
      CAPTURE(n);
      std::vector<float> flat(static_cast<std::size_t>(n), 0.0f);
      specdec::process_logits(flat, p, none, ws);
      CHECK(kept(flat).size() == static_cast<std::size_t>(n));
    }
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

TEST_CASE("process_logits and process_tree_logits refuse a row inside the workspace they are given") {
  // A row in ws.values came back all -inf from top-k (the top-k scratch shrank and the fill wrote over
  // it), one in ws.weights as its exp weights from top-p; no error either time.
  using Catch::Contains;
  specdec::sampling_workspace ws;
  ws.values = {1.0f, 2.0f, 3.0f, 4.0f};
  CHECK_THROWS_WITH(specdec::process_logits(std::span<float>(ws.values.data(), 4), {.top_k = 2}, {}, ws),
                    Contains("specdec::process_logits") && Contains("'logits'") && Contains("workspace.values"));
  CHECK(ws.values == std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f});
  ws.weights = {1.0f, 2.0f, 3.0f, 4.0f};
  CHECK_THROWS_WITH(specdec::process_logits(std::span<float>(ws.weights.data(), 4), {.top_p = 0.7f}, {}, ws),
                    Contains("workspace.weights"));
  CHECK(ws.weights == std::vector<float>{1.0f, 2.0f, 3.0f, 4.0f});
  CHECK_THROWS_WITH(specdec::process_tree_logits(specdec::make_view<2>(ws.weights.data(), {1, 4}), {.top_p = 0.7f}, {},
                                                 {}, {}, ws),
                    Contains("specdec::process_tree_logits") && Contains("workspace.weights"));
  // Token arrays inside the workspace's index scratch (session-65 review): a tree's tokens viewing
  // ws.idx were read after row 0's top-p had reallocated it (a use-after-free under ASan).
  {
    std::vector<float> warm{0.0f, -1.0f, -2.0f, -3.0f};
    specdec::process_logits(warm, {.top_p = 0.5f}, {}, ws);  // leaves ws.idx holding top-p's candidates
    REQUIRE(!ws.idx.empty());
    const auto n = static_cast<std::int64_t>(ws.idx.size());
    std::vector<float> rows(static_cast<std::size_t>((n + 1) * 4096), 0.0f);
    const std::vector<std::int32_t> parents(static_cast<std::size_t>(n), -1);
    const std::span<const std::int32_t> inside(ws.idx.data(), ws.idx.size());
    CHECK_THROWS_WITH(specdec::process_tree_logits(specdec::make_view<2>(rows.data(), {n + 1, 4096}), {.top_p = 0.5f},
                                                   {}, inside, parents, ws),
                      Contains("'tokens'") && Contains("workspace.idx"));
    CHECK_THROWS_WITH(specdec::process_tree_logits(specdec::make_view<2>(rows.data(), {n + 1, 4096}), {.top_p = 0.5f},
                                                   inside, std::vector<std::int32_t>(parents.size(), 0), parents, ws),
                      Contains("'committed'") && Contains("workspace.idx"));
    CHECK_THROWS_WITH(specdec::process_logits(std::span<float>(rows.data(), 4096), {.top_p = 0.5f}, inside, ws),
                      Contains("'context'") && Contains("workspace.idx"));
  }
  // the same row as a copy: processed
  std::vector<float> row{1.0f, 2.0f, 3.0f, 4.0f};
  specdec::process_logits(row, {.top_k = 2}, {}, ws);
  CHECK(row[2] == 3.0f);
  CHECK(row[3] == 4.0f);
  CHECK(row[0] == -std::numeric_limits<float>::infinity());
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
  // params filled as raw memory: a bool byte other than 0 or 1 is refused (reading it as bool is UB),
  // also where process_logits_batch takes its params (batch_sampling_params_ok, host and device)
  bad([](auto& p) {
    const unsigned char two = 2;
    std::memcpy(&p.contextual_sign_aware, &two, 1);
    p.contextual_penalty = 2.0f;
  }, "params.contextual_sign_aware");
  {
    specdec::sampling_params p;
    const unsigned char byte = 0x80;
    std::memcpy(&p.contextual_sign_aware, &byte, 1);
    CHECK_FALSE(specdec::detail::batch_sampling_params_ok(p, true));
    std::memcpy(&p.contextual_sign_aware, "\1", 1);
    CHECK(specdec::detail::batch_sampling_params_ok(p, true));
  }
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

namespace {
bool no_nan_or_posinf(const std::vector<float>& r) {
  for (float x : r)
    if (!(x < std::numeric_limits<float>::infinity())) return false;
  return true;
}
}  // namespace

TEST_CASE("temperature never turns finite logits into NaN or +inf (issue #20 item 8)") {
  // Both temperatures pass validation; scaling by 1/t used to give {inf, nan, -inf} and {inf, 0, -inf},
  // and top-p then indexed its 1024-bin histogram at 4092 (a -NaN weight's bits).
  specdec::sampling_workspace ws;
  const std::vector<std::int32_t> none;
  struct tcase {
    std::vector<float> row;
    float t;
  };
  for (const auto& c : {tcase{{1.0f, 0.0f, -1.0f, 1.0f}, 1e-45f}, tcase{{3e38f, 0.0f, -3e38f, 3e38f}, 0.5f},
                        tcase{{-3e38f, -3.2e38f, ninf, -3e38f}, 0.5f}}) {
    for (float top_p : {0.9f, 0.3f, 1.0f}) {  // top-p first: it is where the NaN weights indexed past the histogram
      specdec::sampling_params p;
      p.temperature = c.t;
      p.top_p = top_p;
      auto row = c.row;
      specdec::process_logits(row, p, none, ws);
      INFO("t " << c.t << " top_p " << top_p);
      REQUIRE(no_nan_or_posinf(row));
      // the t -> 0 limit / the overflow: the two tied maxima keep all the mass (shifted to exactly 0),
      // the others none (-inf, or a logit so far below that its weight is 0); top-p 0.3 keeps one maximum
      CHECK(row[0] == 0.0f);
      CHECK(row[3] == (top_p > 0.5f ? 0.0f : ninf));
      CHECK(row[1] < -1e30f);
      CHECK(row[2] == ninf);
      specdec::philox_stream rng(5, 5);
      std::set<int> drawn;
      for (int k = 0; k < 40; ++k) drawn.insert(specdec::sample_token(row, rng));
      CHECK(drawn == (top_p > 0.5f ? std::set<int>{0, 3} : std::set<int>{0}));
    }
  }
  // a temperature that scales finitely keeps the plain l / t (the same values as before the fix)
  specdec::sampling_params p;
  p.temperature = 0.5f;
  std::vector<float> row{1e38f, -1.0f};
  specdec::process_logits(row, p, none, ws);
  CHECK(row[0] == 1e38f * 2.0f);
  CHECK(row[1] == -2.0f);
}

TEST_CASE("top-p bins every weight inside its histogram") {
  using specdec::detail::top_p_bin;
  const float inf = std::numeric_limits<float>::infinity();
  for (float w : {0.0f, std::numeric_limits<float>::denorm_min(), 1e-30f, 0.5f, 1.0f, 1.5f, 2.0f, 3e38f, inf,
                  std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(), -1.0f})
    CHECK(top_p_bin(w) < specdec::detail::top_p_bins);
  // monotone in the weight, so whole bins above the boundary are the heaviest tokens
  float prev = 0.0f;
  for (float w = std::numeric_limits<float>::denorm_min(); w <= 1.0f; w = std::max(w * 1.37f, std::nextafter(w, 2.0f))) {
    CHECK(top_p_bin(prev) <= top_p_bin(w));
    prev = w;
  }
  // rows with huge, tiny and denormal logits at t = 1: top-p keeps the reference's set
  specdec::sampling_workspace ws;
  const float den = std::numeric_limits<float>::denorm_min();
  for (const auto& base : {std::vector<float>{3e38f, 3e38f, -3e38f, 0.0f}, std::vector<float>{den, 0.0f, -den, 2 * den},
                           std::vector<float>{-3e38f, -3e38f, ninf, -3.4e38f}}) {
    specdec::sampling_params p;
    p.top_p = 0.6f;
    auto row = base, expect = base;
    specdec::process_logits(row, p, std::vector<std::int32_t>{}, ws);
    ref::process(expect, p, {});
    CHECK(same_row(row, expect));
  }
}

TEST_CASE("logits processors follow the non-finite policy") {
  using Catch::Contains;
  specdec::sampling_workspace ws;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<std::int32_t> ctx{0, 2};
  specdec::sampling_params p;
  p.repetition_penalty = 1.3f;
  p.top_k = 3;
  // NaN and +inf: rejected naming the token, the row left as it was
  for (float bad : {nan, inf}) {
    std::vector<float> row{2.0f, 1.0f, -1.0f, bad, 0.5f};
    const auto before = row;
    REQUIRE_THROWS_WITH(specdec::process_logits(row, p, ctx, ws),
                        Contains("specdec::process_logits") && Contains("'logits'") && Contains("token 3"));
    CHECK(row[0] == before[0]);
    CHECK(row[2] == before[2]);
  }
  // all -inf: no admissible token
  std::vector<float> masked{ninf, ninf, ninf};
  REQUIRE_THROWS_WITH(specdec::process_logits(masked, p, ctx, ws), Contains("all -inf"));
  // -inf is a legal masked token, denormals ordinary values (ranked by value, not flushed)
  const float den = std::numeric_limits<float>::denorm_min();
  std::vector<float> row{ninf, den, 0.0f, 3 * den, ninf};
  specdec::sampling_params greedy;
  greedy.temperature = 0.0f;
  specdec::process_logits(row, greedy, std::vector<std::int32_t>{}, ws);
  CHECK(row == std::vector<float>{ninf, ninf, ninf, 0.0f, ninf});
  // a penalty that overflows every admissible logit to -inf (l * r < -FLT_MAX) would empty the row:
  // rejected, the row untouched; when another token survives, the overflowed one is just excluded
  specdec::sampling_params rep;
  rep.repetition_penalty = 2.0f;
  std::vector<float> huge{-3e38f, -2e38f, ninf};
  const std::vector<std::int32_t> both{0, 1};
  REQUIRE_THROWS_WITH(specdec::process_logits(huge, rep, both, ws), Contains("after the penalties"));
  CHECK(huge == std::vector<float>{-3e38f, -2e38f, ninf});
  const std::vector<std::int32_t> first{0};
  specdec::process_logits(huge, rep, first, ws);
  CHECK(huge == std::vector<float>{ninf, -2e38f, ninf});
  // the two penalties compound on a token inside the window: -1 * FLT_MAX is finite, * 3 is not, so
  // the row empties only through both (found by fuzzing: the growth bound was max(r, theta), the row
  // went through unchecked and came out NaN)
  specdec::sampling_params twice;
  twice.temperature = 0.0762118921f;
  twice.repetition_penalty = std::numeric_limits<float>::max();
  twice.contextual_penalty = 3.0f;
  twice.contextual_sign_aware = true;
  std::vector<float> one{-1.0f, ninf, ninf};
  const std::vector<std::int32_t> zero{0};
  REQUIRE_THROWS_WITH(specdec::process_logits(one, twice, zero, ws), Contains("after the penalties"));
  CHECK(one == std::vector<float>{-1.0f, ninf, ninf});
  std::vector<float> two{-1.0f, -5.0f, ninf};  // token 1 is outside the context: it survives
  specdec::process_logits(two, twice, zero, ws);
  CHECK(two[0] == ninf);
  CHECK(std::isfinite(two[1]));
  CHECK(two[2] == ninf);
}

TEST_CASE("process_tree_logits checks every row before writing any") {
  using Catch::Contains;
  specdec::sampling_workspace ws;
  specdec::sampling_params p;
  p.temperature = 0.5f;
  const std::vector<std::int32_t> tok{1, 2}, par{-1, 0}, committed{0};
  std::vector<float> rows{1.0f, 2.0f, 3.0f, 1.0f, 2.0f, 3.0f, 1.0f, std::nanf(""), 3.0f};
  const auto before = rows;
  const auto view = specdec::make_view<2>(rows.data(), {3, 3});
  REQUIRE_THROWS_WITH(specdec::process_tree_logits(view, p, committed, tok, par, ws),
                      Contains("specdec::process_tree_logits") && Contains("row 2, token 1"));
  CHECK(rows[0] == before[0]);  // rows 0 and 1 are valid but were not processed
  CHECK(rows[5] == before[5]);
  rows = {ninf, ninf, ninf, 1.0f, 2.0f, 3.0f, 1.0f, 2.0f, 3.0f};
  REQUIRE_THROWS_WITH(specdec::process_tree_logits(specdec::make_view<2>(rows.data(), {3, 3}), p, committed, tok, par, ws),
                      Contains("row 0") && Contains("all -inf"));
}

TEST_CASE("top-p ranks logits whose weights round equal by the logit, so filters never empty a row") {
  // Found by fuzzing: at a temperature near FLT_MAX every scaled logit is within a subnormal of the
  // others, exp(l - max) rounds to 1 for all, and top-p ranked the tie by id: it kept ids 0..8 and
  // dropped the most probable id 9, which eta keeps (it always keeps the argmax), so together they
  // masked every token.
  const std::vector<float> base{2.58823586f, 2.58823586f, 2.58823586f, 2.58823586f, 2.58823586f, 2.58823586f,
                                2.58823586f, 2.58823395f, -7.76470566f, 19.4227943f, -7.76470566f, -7.76470566f};
  specdec::sampling_workspace ws;
  const float big = std::numeric_limits<float>::max();
  auto top_p_only = base;
  specdec::process_logits(std::span<float>(top_p_only), {.temperature = big, .top_p = 0.71270591f},
                          std::span<const std::int32_t>{}, ws);
  CHECK(top_p_only[9] > -std::numeric_limits<float>::infinity());
  CHECK(top_p_only[8] == -std::numeric_limits<float>::infinity());  // the smallest logits go first
  auto all = base;
  specdec::process_logits(std::span<float>(all),
                          {.temperature = big, .top_p = 0.71270591f, .min_p = 0.709803939f, .eta_epsilon = 0.354901969f,
                           .eta_alpha = 2.13231373f},
                          std::span<const std::int32_t>{}, ws);
  int kept = 0;
  for (float x : all) kept += x > -std::numeric_limits<float>::infinity();
  CHECK(kept == 1);
  CHECK(all[9] > -std::numeric_limits<float>::infinity());
}
