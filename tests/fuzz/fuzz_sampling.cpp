// Fuzz targets for sampling (include/specdec/sampling/): the samplers (greedy_token, sample_token,
// sample_from_probs, logits_to_probs) and the logits-processor chain (process_logits,
// process_tree_logits). Token results must be in the vocabulary with positive weight; a processed
// row must stay a row a sampler accepts (no NaN, no +inf, some token above -inf, masked tokens stay
// masked, the penalised argmax survives); NaN or +inf inputs must be rejected (the notes' policy 3);
// a reused workspace must give what a fresh one gives; process_tree_logits must process row i+1 as
// process_logits does with the node's root path as context; top-p's kept set must be the documented
// rule computed with a full sort, and process_logits_batch must process each row as process_logits;
// penalty_history and penalty_context_builder must give each token's last position; penalized_argmax_batch
// must give the index process_logits_batch makes one-hot at temperature 0 (or throw with it).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "../sampling/sampling_reference.hpp"  // ref::top_p_by_sort
#include "fuzz_util.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/tensor.hpp"
#include "specdec/sampling/logits_processor.hpp"
#include "specdec/sampling/penalty_context.hpp"
#include "specdec/sampling/sampler.hpp"

namespace {
using specdec_fuzz::input;
constexpr float inf = std::numeric_limits<float>::infinity();

std::string what_row(std::span<const float> row) {
  std::string s = "[";
  for (std::size_t i = 0; i < row.size() && i < 32; ++i) s += (i ? ", " : "") + specdec_fuzz::num(row[i]);
  return s + (row.size() > 32 ? ", ...]" : "]");
}
}  // namespace

SPECDEC_FUZZ_TARGET(sampler, "greedy_token, sample_token, sample_from_probs, logits_to_probs") {
  input in(data, size);
  const int op = in.range(0, 3);
  const int vocab = in.chance(3) ? in.range(1000, 3000) : in.range(0, 40);
  std::vector<float> row(static_cast<std::size_t>(vocab));
  const int fill = in.range(0, 3);  // 0: palette; 1: mostly -inf / 0; 2: one value repeated; 3: denormal mass only
  for (float& x : row) {
    if (fill == 1) x = in.chance(90) ? (op == 2 ? 0.0f : -inf) : (op == 2 ? in.prob() : in.logit());
    else if (fill == 2) x = row.empty() || &x == row.data() ? (op == 2 ? in.prob() : in.logit()) : row.front();
    else if (fill == 3 && op == 2) x = in.coin() ? 0.0f : std::numeric_limits<float>::denorm_min() * static_cast<float>(in.range(1, 9));
    else x = op == 2 ? in.prob() : in.logit();
  }
  const bool nan_or_posinf = specdec_fuzz::any_nan_or_posinf(row);
  specdec::philox_stream rng(in.u64(), in.u64());
  if (op == 0) {
    const auto t = specdec::greedy_token(row);
    FUZZ_CHECK(!nan_or_posinf, "greedy_token returned a token for a row with NaN or +inf: " + what_row(row));
    const auto best = std::max_element(row.begin(), row.end()) - row.begin();
    FUZZ_CHECK(t == best, "greedy_token is not the first argmax");
  } else if (op == 1) {
    const auto t = specdec::sample_token(row, rng);
    FUZZ_CHECK(!nan_or_posinf, "sample_token returned a token for a row with NaN or +inf: " + what_row(row));
    FUZZ_CHECK(t >= 0 && t < vocab, "sample_token: token outside the vocabulary");
    const float m = *std::max_element(row.begin(), row.end());
    FUZZ_CHECK(row[static_cast<std::size_t>(t)] > -inf && specdec::detail::fast_exp(row[static_cast<std::size_t>(t)] - m) > 0.0f,
          "sample_token drew a token of weight 0");
  } else if (op == 2) {
    const auto t = specdec::sample_from_probs(row, rng);
    FUZZ_CHECK(t >= 0 && t < vocab && row[static_cast<std::size_t>(t)] > 0.0f,
          "sample_from_probs drew a token of probability 0: " + what_row(row));
  } else {
    std::vector<float> probs(row.size() + (in.chance(3) ? 1 : 0));
    specdec::logits_to_probs(row, probs);
    FUZZ_CHECK(!nan_or_posinf, "logits_to_probs accepted NaN or +inf");
    double s = 0;
    for (std::size_t i = 0; i < row.size(); ++i) {
      FUZZ_CHECK(probs[i] >= 0.0f && probs[i] <= 1.0f, "logits_to_probs: a probability outside [0, 1]");
      FUZZ_CHECK((row[i] == -inf) == (probs[i] == 0.0f) || row[i] != -inf, "logits_to_probs: a masked token got mass");
      s += probs[i];
    }
    FUZZ_CHECK(std::abs(s - 1.0) < 1e-5, "logits_to_probs: probabilities sum to " + std::to_string(s));
  }
}

namespace {
specdec::sampling_params fuzz_params(input& in, int vocab) {
  specdec::sampling_params p;
  p.temperature = in.chance(20) ? 0.0f : in.chance(30) ? 1.0f : in.real(0.05f, 4.0f);
  p.top_k = in.chance(50) ? 0 : in.int32(1, vocab + 1);
  p.top_p = in.chance(50) ? 1.0f : in.real(0.01f, 1.0f);
  p.min_p = in.chance(60) ? 0.0f : in.prob();
  p.eta_epsilon = in.chance(60) ? 0.0f : in.real(0.0f, 0.5f);
  p.eta_alpha = in.chance(50) ? -1.0f : in.real(0.01f, 3.0f);
  p.repetition_penalty = in.chance(50) ? 1.0f : in.real(1.0f, 3.0f);
  p.contextual_penalty = in.chance(50) ? 1.0f : in.real(1.0f, 3.0f);
  p.penalty_window = in.int32(0, 12);
  p.contextual_sign_aware = in.coin();
  return p;
}

std::string what_params(const specdec::sampling_params& p) {
  return "{temperature " + specdec_fuzz::num(p.temperature) + ", top_k " + std::to_string(p.top_k) + ", top_p " +
         specdec_fuzz::num(p.top_p) + ", min_p " + specdec_fuzz::num(p.min_p) + ", eta_epsilon " + specdec_fuzz::num(p.eta_epsilon) +
         ", eta_alpha " + specdec_fuzz::num(p.eta_alpha) + ", repetition " + specdec_fuzz::num(p.repetition_penalty) +
         ", contextual " + specdec_fuzz::num(p.contextual_penalty) + ", window " + std::to_string(p.penalty_window) +
         (p.contextual_sign_aware ? ", sign_aware}" : "}");
}

//! The invariants of one processed row (input `before`, output `after`).
void check_processed(std::span<const float> before, std::span<const float> after, const specdec::sampling_params& p,
                     std::span<const float> penalised, const std::string& what) {
  const std::string who = what + " (params " + what_params(p) + ", row " + what_row(before) + " -> " + what_row(after) + ")";
  FUZZ_CHECK(!specdec_fuzz::any_nan_or_posinf(before), who + " accepted a row with NaN or +inf");
  bool alive = false;
  for (std::size_t i = 0; i < after.size(); ++i) {
    FUZZ_CHECK(!std::isnan(after[i]), who + ": NaN in the processed row from " + what_row(before));
    FUZZ_CHECK(after[i] != inf, who + ": +inf in the processed row from " + what_row(before) + " (temperature " +
                               specdec_fuzz::num(p.temperature) + ")");
    FUZZ_CHECK(before[i] != -inf || after[i] == -inf, who + ": a masked (-inf) token was unmasked");
    alive |= after[i] > -inf;
  }
  FUZZ_CHECK(alive, who + ": every token masked");
  // The most probable token survives every truncation (each keeps the best). Top-p ranks by the
  // rounded weight fast_exp(l - max), so a token whose weight rounds to the top weight counts too.
  const auto best = static_cast<std::size_t>(std::max_element(penalised.begin(), penalised.end()) - penalised.begin());
  bool top_kept = false;
  for (std::size_t i = 0; i < after.size(); ++i)
    top_kept |= after[i] > -inf && specdec::detail::fast_exp(penalised[i] - penalised[best]) == 1.0f;
  FUZZ_CHECK(top_kept, who + ": every most probable token after the penalties was removed");
  if (p.temperature == 0.0f)
    for (std::size_t i = 0; i < after.size(); ++i)
      FUZZ_CHECK(after[i] == (i == best ? 0.0f : -inf), who + ": temperature 0 is not one-hot at the argmax");
  if (p.top_k > 0) {
    const auto kept = std::count_if(after.begin(), after.end(), [](float x) { return x > -inf; });
    FUZZ_CHECK(kept <= p.top_k, who + ": more than top_k tokens kept");
  }
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}
}  // namespace

SPECDEC_FUZZ_TARGET(logits_processor, "process_logits / process_tree_logits: admissible rows, workspace reuse, tree rows") {
  input in(data, size);
  const int vocab = in.range(0, 24);
  const auto params = fuzz_params(in, vocab);
  specdec::sampling_workspace ws;  // reused by every call below, as an engine does
  if (in.coin()) {
    for (int call = 0; call < 2; ++call) {
      const int v = call == 0 ? vocab : in.range(1, 24);
      std::vector<float> row = in.many(static_cast<std::size_t>(v), [&] { return in.chance(15) ? -inf : in.logit(); });
      const auto ctx = in.many(static_cast<std::size_t>(in.range(0, 12)), [&] { return in.token(v); });
      const auto suffix = in.many(static_cast<std::size_t>(in.range(0, 4)), [&] { return in.token(v); });
      const std::vector<float> before = row;
      std::vector<float> fresh = row;
      specdec::sampling_workspace ws2;
      specdec::process_logits(row, params, ctx, suffix, ws);
      specdec::process_logits(fresh, params, ctx, suffix, ws2);
      FUZZ_CHECK(same_bits(row, fresh), "process_logits: a reused workspace changed the result");
      specdec::sampling_params pen;  // the penalties alone, to find the argmax every later step keeps
      pen.repetition_penalty = params.repetition_penalty;
      pen.contextual_penalty = params.contextual_penalty;
      pen.penalty_window = params.penalty_window;
      pen.contextual_sign_aware = params.contextual_sign_aware;
      std::vector<float> penalised = before;
      specdec::process_logits(penalised, pen, ctx, suffix, ws2);
      if (params.temperature != 0.0f && params.temperature != 1.0f)  // the same scaling as step 3
        specdec::detail::apply_temperature(std::span<float>(penalised), params.temperature,
                                           specdec::detail::scan_logits(penalised.data(), penalised.size()));
      check_processed(before, row, params, penalised, "process_logits");
    }
  } else {
    const int n = in.range(0, 6);
    const auto tokens = in.many(static_cast<std::size_t>(n), [&] { return in.token(std::max(vocab, 1)); });
    auto parents = in.parents(n, /*allow_invalid=*/true);
    const auto committed = in.many(static_cast<std::size_t>(in.range(0, 8)), [&] { return in.token(std::max(vocab, 1)); });
    std::vector<float> rows = in.many(static_cast<std::size_t>(n + 1) * static_cast<std::size_t>(vocab),
                                      [&] { return in.chance(15) ? -inf : in.logit(); });
    const std::vector<float> before = rows;
    specdec::process_tree_logits(specdec::make_view<2>(rows.data(), {n + 1, vocab}), params, committed, tokens, parents, ws);
    for (int r = 0; r <= n; ++r) {
      std::vector<std::int32_t> path;
      for (std::int32_t a = r - 1; a >= 0; a = parents[static_cast<std::size_t>(a)]) path.push_back(tokens[static_cast<std::size_t>(a)]);
      std::reverse(path.begin(), path.end());
      const std::span<const float> in_row(before.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(vocab), static_cast<std::size_t>(vocab));
      const std::span<const float> out_row(rows.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(vocab), static_cast<std::size_t>(vocab));
      std::vector<float> one(in_row.begin(), in_row.end());
      specdec::sampling_workspace ws2;
      try {
        specdec::process_logits(one, params, committed, path, ws2);
      } catch (const specdec::invalid_argument& e) {
        specdec_fuzz::finding("process_tree_logits accepted row " + std::to_string(r) + " that process_logits rejects: " + e.what());
      }
      FUZZ_CHECK(same_bits(one, out_row), "process_tree_logits row " + std::to_string(r) +
                                         " differs from process_logits with context committed ++ path");
    }
  }
}

SPECDEC_FUZZ_TARGET(top_p, "process_logits' top-p against a full sort; process_logits_batch == process_logits per row") {
  input in(data, size);
  const int vocab = in.chance(10) ? in.range(300, 3000) : in.range(1, 60);
  const int shape = in.range(0, 3);  // 0: palette; 1: few distinct values (ties); 2: nearly flat; 3: mostly -inf
  std::vector<float> row(static_cast<std::size_t>(vocab));
  const float base = in.logit();
  for (float& x : row) {
    if (shape == 1) x = static_cast<float>(in.range(-3, 3));
    else if (shape == 2) x = base + in.real(0.0f, 1e-3f, 0);
    else if (shape == 3) x = in.chance(80) ? -inf : in.logit();
    else x = in.chance(10) ? -inf : in.logit();
  }
  if (std::none_of(row.begin(), row.end(), [](float x) { return x > -inf; })) row[0] = in.logit();
  if (specdec_fuzz::any_nan_or_posinf(row)) return;  // the palette's NaN / +inf: the other targets check their refusal
  specdec::sampling_params p;
  p.top_p = in.real(1e-7f, 1.0f, 0);
  if (in.coin()) p.temperature = in.real(0.05f, 4.0f, 0);
  std::vector<float> got = row;
  specdec::sampling_workspace ws;
  specdec::process_logits(got, p, {}, ws);
  std::vector<float> scaled = row;  // temperature as step 3 applies it, then the sort-based rule
  if (p.temperature != 1.0f)
    specdec::detail::apply_temperature(std::span<float>(scaled), p.temperature,
                                       specdec::detail::scan_logits(scaled.data(), scaled.size()));
  const auto want = p.top_p < 1.0f ? ref::top_p_by_sort(scaled, p.top_p) : scaled;
  FUZZ_CHECK(same_bits(got, want), "top-p differs from the full-sort rule (params " + what_params(p) + ", row " +
                                       what_row(row) + " -> " + what_row(got) + ", want " + what_row(want) + ")");
  // the batch form over two rows (this one and its reverse) gives the per-row results
  std::vector<float> rev(row.rbegin(), row.rend()), both = row;
  both.insert(both.end(), rev.begin(), rev.end());
  specdec::process_logits(rev, p, {}, ws);
  const std::vector<specdec::sampling_params> params{p};
  const std::vector<std::int32_t> row_params{0, 0};
  std::vector<std::int32_t> status(3);
  specdec::process_logits_batch(specdec::host{}, specdec::make_view<2>(both.data(), {2, vocab}),
                                specdec::make_view<1>(params.data(), {1}), specdec::make_view<1>(row_params.data(), {2}),
                                specdec::make_view<1>(status.data(), {3}));
  FUZZ_CHECK(std::memcmp(both.data(), got.data(), got.size() * sizeof(float)) == 0 &&
                 std::memcmp(both.data() + vocab, rev.data(), rev.size() * sizeof(float)) == 0,
             "process_logits_batch differs from process_logits per row");
}

SPECDEC_FUZZ_TARGET(penalty_context, "penalty_history::append, penalty_context_builder::add_context (lists and histories)") {
  // After each append (some with tokens outside the vocabulary, which must throw and change nothing),
  // the history's pairs and the builder's pairs of the whole list, and of the history, equal a map of
  // each token's last position.
  input in(data, size);
  const int vocab = in.chance(10) ? in.range(1000, 200000) : in.range(1, 50);
  specdec::penalty_history h(vocab);
  specdec::penalty_context_builder b(vocab);
  std::vector<std::int32_t> all;
  std::map<std::int32_t, std::int32_t> want;
  const auto pairs_of = [](std::span<const std::int32_t> d, std::span<const std::int32_t> l) {
    return std::pair{std::vector<std::int32_t>(d.begin(), d.end()), std::vector<std::int32_t>(l.begin(), l.end())};
  };
  for (int a = 0; a < 12 && !in.empty(); ++a) {
    const int n = in.chance(10) ? in.range(0, 600) : in.range(0, 12);
    const int band = in.coin() ? vocab : in.range(1, vocab);  // a narrow band: repeats, new ids between old ones
    std::vector<std::int32_t> add(static_cast<std::size_t>(n));
    bool bad = false;
    for (auto& t : add) {
      t = in.chance(3) ? in.int32(-2, vocab + 1) : in.range(0, band - 1);
      bad = bad || t < 0 || t >= vocab;
    }
    const auto before = pairs_of(h.distinct(), h.last());
    const std::int64_t length = h.length();
    bool threw = false;
    try {
      h.append(add);
    } catch (const specdec::invalid_argument&) {
      threw = true;
    }
    FUZZ_CHECK(threw == bad, bad ? "an append with a token outside the vocabulary was accepted"
                                 : "an append of valid tokens threw");
    if (threw) {
      FUZZ_CHECK(h.length() == length && pairs_of(h.distinct(), h.last()) == before, "a refused append changed the history");
      continue;
    }
    for (const auto t : add) want[t] = static_cast<std::int32_t>(all.size()), all.push_back(t);
    std::vector<std::int32_t> wd, wl;
    for (const auto& [t, p] : want) wd.push_back(t), wl.push_back(p);
    FUZZ_CHECK(h.length() == static_cast<std::int64_t>(all.size()), "history length " + std::to_string(h.length()));
    FUZZ_CHECK(pairs_of(h.distinct(), h.last()) == std::pair(wd, wl), "history pairs differ from the map after " +
                                                                           std::to_string(all.size()) + " tokens");
    b.clear();
    const auto c_list = b.add_context(all), c_hist = b.add_context(h);
    const auto ip = b.context_indptr();
    for (const auto c : {c_list, c_hist}) {
      const auto lo = static_cast<std::size_t>(ip[static_cast<std::size_t>(c)]);
      const auto hi = static_cast<std::size_t>(ip[static_cast<std::size_t>(c) + 1]);
      FUZZ_CHECK(pairs_of(b.distinct().subspan(lo, hi - lo), b.last().subspan(lo, hi - lo)) == std::pair(wd, wl),
                 std::string("builder pairs differ from the map (") + (c == c_list ? "list" : "history") + ")");
      FUZZ_CHECK(b.context_length()[static_cast<std::size_t>(c)] == static_cast<std::int32_t>(all.size()),
                 "builder context length");
    }
  }
}

SPECDEC_FUZZ_TARGET(penalized_argmax, "penalized_argmax_batch == the one-hot index of process_logits_batch (penalties, temperature 0)") {
  // One committed context and a few rows with their own suffixes (tokens from a narrow band, so
  // contexts and suffixes share tokens; windows short enough that suffixes bring context tokens into
  // them), any penalties, rows with ties, -inf, values near FLT_MAX (penalties overflow them), NaN
  // now and then: penalized_argmax_batch must throw exactly when process_logits_batch does, else give
  // each row the index process_logits_batch makes one-hot, reading the rows only.
  input in(data, size);
  const int vocab = in.chance(10) ? in.range(300, 3000) : in.range(1, 40);
  const int band = in.range(1, vocab);
  const int rows = in.range(1, 4);
  specdec::sampling_params p;
  p.temperature = 0.0f;
  if (in.coin()) p.repetition_penalty = in.chance(10) ? 1.0f : in.real(1.0f, 4.0f, 0);
  if (in.coin()) p.contextual_penalty = in.real(1.0f, 4.0f, 0);
  p.penalty_window = in.chance(20) ? in.range(0, 2000) : in.range(0, 10);
  p.contextual_sign_aware = in.coin();
  const auto token = [&] { return in.range(0, band - 1); };
  std::vector<std::int32_t> committed(static_cast<std::size_t>(in.range(0, 30)));
  for (auto& t : committed) t = token();
  specdec::penalty_context_builder b(vocab);
  const auto c = b.add_context(committed);
  for (int r = 0; r < rows; ++r) {
    std::vector<std::int32_t> suffix(static_cast<std::size_t>(in.range(0, 8)));
    for (auto& t : suffix) t = token();
    b.add_row(in.chance(15) ? -1 : c, suffix);
  }
  const int shape = in.range(0, 3);  // 0: palette; 1: ties; 2: near FLT_MAX; 3: mostly -inf
  std::vector<float> logits(static_cast<std::size_t>(rows * vocab));
  for (float& x : logits) {
    if (shape == 1) x = static_cast<float>(in.range(-3, 3));
    else if (shape == 2) x = in.chance(20) ? -inf : (in.coin() ? 1.0f : -1.0f) * in.real(3e38f, 3.4e38f, 0);
    else if (shape == 3) x = in.chance(80) ? -inf : in.logit();
    else x = in.chance(10) ? -inf : in.logit();
  }
  if (in.chance(3)) logits[static_cast<std::size_t>(in.range(0, rows * vocab - 1))] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<specdec::sampling_params> params{p};
  const std::vector<std::int32_t> row_params(static_cast<std::size_t>(rows), 0);
  std::vector<std::int32_t> status(3), argmax(static_cast<std::size_t>(rows), -7);
  auto one_hot = logits;
  bool process_threw = false, argmax_threw = false;
  try {
    specdec::process_logits_batch(specdec::host{}, specdec::make_view<2>(one_hot.data(), {rows, vocab}),
                                  specdec::make_view<1>(params.data(), {1}), specdec::make_view<1>(row_params.data(), {rows}),
                                  b.view(), specdec::make_view<1>(status.data(), {3}));
  } catch (const specdec::invalid_argument&) {
    process_threw = true;
  }
  const auto before = logits;
  try {
    specdec::penalized_argmax_batch(specdec::host{}, specdec::make_view<2>(static_cast<const float*>(logits.data()), {rows, vocab}),
                                    specdec::make_view<1>(params.data(), {1}), specdec::make_view<1>(row_params.data(), {rows}),
                                    b.view(), specdec::make_view<1>(argmax.data(), {rows}),
                                    specdec::make_view<1>(status.data(), {3}));
  } catch (const specdec::invalid_argument&) {
    argmax_threw = true;
  }
  FUZZ_CHECK(std::memcmp(before.data(), logits.data(), logits.size() * sizeof(float)) == 0,
             "penalized_argmax_batch wrote its rows");
  FUZZ_CHECK(process_threw == argmax_threw, std::string("penalized_argmax_batch ") + (argmax_threw ? "threw" : "did not throw") +
                                                " where process_logits_batch " + (process_threw ? "threw" : "did not") +
                                                " (params " + what_params(p) + ")");
  if (process_threw || argmax_threw) {
    FUZZ_CHECK(argmax == std::vector<std::int32_t>(static_cast<std::size_t>(rows), -7), "a refused call wrote argmax");
    return;
  }
  for (int r = 0; r < rows; ++r) {
    const auto first = one_hot.begin() + static_cast<std::ptrdiff_t>(r) * vocab;
    const auto want = std::find(first, first + vocab, 0.0f) - first;
    FUZZ_CHECK(argmax[static_cast<std::size_t>(r)] == want,
               "row " + std::to_string(r) + ": penalized argmax " + std::to_string(argmax[static_cast<std::size_t>(r)]) +
                   ", one-hot at " + std::to_string(want) + " (params " + what_params(p) + ", row " +
                   what_row(std::span<const float>(logits).subspan(static_cast<std::size_t>(r) * vocab, vocab)) + ")");
  }
}
