// cuda_greedy_verifier (decoder/device_verifiers.cuh): speculative_batch over a target whose
// forward_batch returns its logits in device memory equals the same batch over host logits with
// greedy_verifier, request by request (continuous batching: joins, aborts, stop rules), and each
// output is the request's own greedy decoding; with repetition and contextual penalties (processed on
// the device, from the penalty_history speculative_batch keeps per request) the same against the
// host; penalties without committed tokens or histories, and histories that are missing, too short
// or of another vocabulary, refused ([nogpu]);
// a bad tree value found on the device is reported as invalid_argument with the device's message.
// cuda_sample_and_match_verifier (every row processed, and only the visited rows): the same at
// temperature > 0 with top-k / top-p / min-p, token for
// token against sample_and_match_verifier on the host (this file's host code, built for x86-64-v3
// where the machine runs it: weights the device reproduces), with penalties too; mismatched arrays
// refused before any CUDA call ([nogpu]). cuda_chain_speculative_verifier (every row processed, and
// only the rows the walks reach): the same against
// chain_speculative_verifier with a sampling chain drafter whose q rows are copied, viewed in host
// memory, viewed in device memory, or absent (one-hot rows); bad drafts refused ([nogpu]).
// cuda_multi_draft_verifier (every row, and only the rows the walks reach): the same against
// multi_draft_verifier, 3 drafts per step from the
// library's multi_draft_sampler over a bigram draft table, with and without replacement; a step of
// mixed modes refused ([nogpu]).
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.cuh"
#include "specdec/core/philox.hpp"
#include "specdec/decoder/device_verifiers.cuh"
#include "specdec/decoder/speculative_batch.hpp"
#include "specdec/draft/multi_draft_sampler.hpp"

using specdec::memory_space;

namespace {

constexpr int V = 32;

// A bigram target: the logits after token t are row t of a fixed random table, so its greedy
// decoding is next = argmax(table[last]). forward_batch writes each entry's rows (the root's, then
// each tree node's) on the host and returns them uploaded to device memory, as a GPU target would
// (or on the host, for the reference batch).
struct bigram_target {
  bool on_device = true;
  int slots = 3;
  std::vector<float> table = make_table();
  std::vector<std::vector<std::int32_t>> ctx = std::vector<std::vector<std::int32_t>>(3);
  std::vector<float> rows{};
  std::unique_ptr<specdec_test::device_buffer<float>> dev{};
  static std::vector<float> make_table() {
    specdec::philox_stream rng(17, 0);
    std::vector<float> t(V * V);
    for (auto& x : t) x = 4.0f * rng.uniform() - 2.0f;
    return t;
  }
  [[nodiscard]] int vocab_size() const { return V; }
  [[nodiscard]] int max_requests() const { return slots; }
  void prefill(int r, std::span<const std::int32_t> p) { ctx[static_cast<std::size_t>(r)].assign(p.begin(), p.end()); }
  void commit(int, std::span<const std::int32_t>) {}  // the batch appends the emitted tokens; nothing cached here
  specdec::strided_view<float, 2> forward_batch(const specdec::target_batch& b) {
    rows.resize(static_cast<std::size_t>(b.total_rows()) * V);
    for (int e = 0; e < b.size(); ++e) {
      const auto toks = b.tokens(e);
      for (std::int32_t i = 0; i <= static_cast<std::int32_t>(toks.size()); ++i) {
        const std::int32_t t = i == 0 ? b.roots[static_cast<std::size_t>(e)] : toks[static_cast<std::size_t>(i - 1)];
        std::copy_n(table.begin() + t * V, V, rows.begin() + (b.row_indptr[e] + i) * V);
      }
    }
    if (!on_device) return specdec::make_view<2>(rows.data(), {b.total_rows(), V});
    dev = std::make_unique<specdec_test::device_buffer<float>>(rows);
    return specdec::make_view<2>(dev->data(), {b.total_rows(), V}, memory_space::device);
  }
  //! The greedy continuation of `prompt`, n tokens.
  [[nodiscard]] std::vector<std::int32_t> greedy(std::int32_t last, int n) const {
    std::vector<std::int32_t> out;
    for (int k = 0; k < n; ++k) {
      const auto row = table.begin() + last * V;
      last = static_cast<std::int32_t>(std::max_element(row, row + V) - row);
      out.push_back(last);
    }
    return out;
  }
};

std::vector<std::int32_t> prompt_of(std::uint32_t id) {
  std::vector<std::int32_t> p;
  for (std::uint32_t j = 0; j <= id % 7; ++j) p.push_back(static_cast<std::int32_t>((id * 5 + j * 3) % V));
  return p;
}

template <class Batch>
std::map<std::uint32_t, std::vector<std::int32_t>> run_all(Batch& batch, int requests,
                                                           specdec::sampling_params (*sampling)(std::uint32_t) = nullptr) {
  std::map<std::uint32_t, std::vector<std::int32_t>> got;
  std::uint32_t next = 0;
  int step = 0;
  while (next < static_cast<std::uint32_t>(requests) || batch.active() > 0) {
    while (next < static_cast<std::uint32_t>(requests) && batch.free_slots() > 0) {
      specdec::generation_options opt{.max_new_tokens = 10 + static_cast<int>(next % 9), .draft_depth = 1 + static_cast<int>(next % 4)};
      if (sampling != nullptr) opt.sampling = sampling(next), opt.seed = 1000 + next;
      batch.add_request(next, prompt_of(next), opt);
      ++next;
    }
    if (step == 3 && batch.contains(1)) batch.abort(1);  // an abort between steps
    for (const auto& out : batch.step()) got[out.id].insert(got[out.id].end(), out.tokens.begin(), out.tokens.end());
    ++step;
  }
  return got;
}

//! What Verifier::verify_batch says of a two-request step (one node each, V = 8) whose entries carry
//! `first` and `second`, with `seeds` seeds and streams and the given drafts: its logits are host
//! memory labelled device memory, so the step must be refused before any CUDA call ("not refused"
//! otherwise).
template <class Verifier>
std::string refusal(const specdec::sampling_params& first, const specdec::sampling_params& second, int seeds,
                    std::span<const specdec::draft_candidates* const> drafts = {},
                    std::span<const std::span<const std::int32_t>> committed = {},
                    std::span<const specdec::penalty_history* const> histories = {}) {
  const specdec::sampling_params* sp[] = {&first, &second};
  const std::vector<std::int32_t> indptr{0, 1, 2}, tokens{1, 2}, parents{-1, -1};
  const std::vector<std::uint64_t> zero(static_cast<std::size_t>(seeds), 0);
  static const std::vector<float> never_read(4 * 8);
  Verifier v{nullptr};
  specdec::verify_batch_result out;
  const specdec::batch_verify_input in{
      indptr, tokens, parents, specdec::make_view<2>(never_read.data(), {4, 8}, memory_space::device),
      sp, zero, zero, committed, drafts, histories};
  try {
    v.verify_batch(in, out);
  } catch (const specdec::invalid_argument& e) {
    return std::string(e.what());
  }
  return std::string("not refused");
}

//! run_all over host logits with HostVerifier (want) and over device logits with DeviceVerifier (got),
//! 12 requests each.
template <class HostVerifier, class DeviceVerifier, class Drafter = specdec::ngram_drafter,
          class Builder = specdec::trie_tree_builder>
auto host_and_device(specdec::sampling_params (*sampling)(std::uint32_t) = nullptr, const Drafter& host_drafter = {},
                     const Drafter& device_drafter = {}) {
  bigram_target t_host{false}, t_dev{true};
  specdec::speculative_batch<bigram_target, Drafter, Builder, HostVerifier> on_host(t_host, host_drafter);
  specdec::speculative_batch<bigram_target, Drafter, Builder, DeviceVerifier> on_dev(
      t_dev, device_drafter, {}, DeviceVerifier{nullptr});  // the target uploads synchronously
  auto want = run_all(on_host, 12, sampling);
  return std::pair{want, run_all(on_dev, 12, sampling)};
}

}  // namespace

TEST_CASE("cuda_greedy_verifier: a step over device logits equals host greedy verification", "[cuda][decoder]") {
  const bigram_target t_host{false};
  const auto [want, got] = host_and_device<specdec::greedy_verifier, specdec::cuda_greedy_verifier>();
  CHECK(got == want);
  int checked = 0;
  for (const auto& [id, tokens] : want) {
    if (id == 1) continue;  // aborted
    CHECK(tokens == t_host.greedy(prompt_of(id).back(), static_cast<int>(tokens.size())));
    checked += !tokens.empty();
  }
  CHECK(checked >= 10);
}

TEST_CASE("cuda_greedy_verifier refuses a bad tree value over device logits, then verifies the next step",
          "[cuda][decoder]") {
  // A token >= V: the device's own check reported it (session 31); since session 57 the host's tree
  // check refuses it before any upload (the [nogpu] case below covers each kind), so what is left to
  // see on a GPU is that the refused call leaves the verifier usable.
  std::vector<float> logits(3 * V, 0.0f);
  logits[2 * V + 5] = 1.0f;  // row 2 (request 0's bonus row after nodes 0 and 1) peaks at token 5
  specdec_test::device_buffer<float> rows(logits);
  const std::vector<std::int32_t> indptr{0, 2}, bad_tokens{1, V + 1}, tokens{0, 0}, parents{-1, 0};
  const specdec::sampling_params greedy{.temperature = 0.0f};
  const specdec::sampling_params* sp[] = {&greedy};
  const std::uint64_t zero[] = {0};
  specdec::cuda_greedy_verifier v{nullptr};
  specdec::verify_batch_result out;
  const auto lv = specdec::make_view<2>(static_cast<const float*>(rows.data()), {3, V}, memory_space::device);
  const specdec::batch_verify_input bad{indptr, bad_tokens, parents, lv, sp, zero, zero};
  REQUIRE_THROWS_WITH(v.verify_batch(bad, out), Catch::Contains("verify_batch") && Catch::Contains("'tokens'") &&
                                                    Catch::Contains(std::to_string(V + 1)));
  // rows 0 and 1 are all zeros (argmax 0, the first of the ties): nodes 0 and 1 (token 0) accepted,
  // row 2's argmax 5 is the bonus
  const specdec::batch_verify_input good{indptr, tokens, parents, lv, sp, zero, zero};
  v.verify_batch(good, out);
  REQUIRE(out.num_requests() == 1);
  CHECK(std::vector<std::int32_t>(out.accepted_nodes(0).begin(), out.accepted_nodes(0).end()) ==
        std::vector<std::int32_t>{0, 1});
  CHECK(out.bonus[0] == 5);
}

TEST_CASE("cuda sampled verifiers take a one-row step whose row stride is below the vocabulary", "[cuda][decoder]") {
  // One request with an empty tree: the logits' one row is never stepped over, so its stride may be
  // anything (check_step_logits allows it), and the rows' copy must not pass it on as the source
  // pitch (cudaMemcpy2D refuses a pitch below the row's width).
  std::vector<float> logits(V, 0.0f);
  logits[5] = 3.0f;
  specdec_test::device_buffer<float> rows(logits);
  const std::vector<std::int32_t> indptr{0, 0}, none;
  const specdec::sampling_params top1{.temperature = 0.7f, .top_k = 1};  // the draw is token 5
  const specdec::sampling_params* sp[] = {&top1};
  const std::uint64_t zero[] = {0};
  specdec::cuda_sample_and_match_verifier v{nullptr};
  specdec::verify_batch_result out;
  const specdec::strided_view<const float, 2> lv(rows.data(), {1, V}, {1, 1}, memory_space::device);
  v.verify_batch(specdec::batch_verify_input{indptr, none, none, lv, sp, zero, zero}, out);
  REQUIRE(out.num_requests() == 1);
  CHECK(out.accepted_nodes(0).empty());
  CHECK(out.bonus[0] == 5);
}

TEST_CASE("cuda_greedy_verifier checks the logits' shape, memory and row spacing before any CUDA call",
          "[cuda][decoder][nogpu]") {
  std::vector<float> fake(16 * V, 0.0f);  // never read: every call is refused on the host
  const std::vector<std::int32_t> indptr{0, 2}, tokens{1, 2}, parents{-1, 0};  // N + B = 3 rows
  const specdec::sampling_params greedy{.temperature = 0.0f};
  const specdec::sampling_params* sp[] = {&greedy};
  const std::uint64_t zero[] = {0};
  specdec::cuda_greedy_verifier v{nullptr};
  specdec::verify_batch_result out;
  const auto refused = [&](std::int64_t rows, std::int64_t cols, std::int64_t stride, memory_space space) {
    const specdec::batch_verify_input in{
        indptr, tokens, parents,
        specdec::strided_view<const float, 2>(fake.data(), {rows, cols}, {stride, 1}, space), sp, zero, zero};
    try {
      v.verify_batch(in, out);
    } catch (const specdec::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("not refused on the host");
  };
  CHECK_THAT(refused(7, V, V, memory_space::device), Catch::Contains("'logits'") && Catch::Contains("shape [3, *]"));
  CHECK_THAT(refused(3, 0, V, memory_space::device), Catch::Contains("'logits'") && Catch::Contains("vocab >= 1"));
  CHECK_THAT(refused(3, V, 1, memory_space::device), Catch::Contains("rows at least vocab apart"));
  CHECK_THAT(refused(3, V, V, memory_space::host), Catch::Contains("'logits'"));
}

TEST_CASE("cuda_greedy_verifier refuses a temperature, and penalties without committed tokens, before any CUDA call",
          "[cuda][decoder][nogpu]") {
  const specdec::sampling_params plain{.temperature = 0.0f}, rep{.temperature = 0.0f, .repetition_penalty = 1.1f},
      ctx{.temperature = 0.0f, .contextual_penalty = 1.2f}, hot{.temperature = 0.7f};
  const auto refuse = [](const specdec::sampling_params& first, const specdec::sampling_params& second) {
    return refusal<specdec::cuda_greedy_verifier>(first, second, 2);
  };
  // refusal() passes no committed tokens: a penalty needs them
  CHECK_THAT(refuse(plain, rep), Catch::Contains("committed.size()"));
  CHECK_THAT(refuse(ctx, plain), Catch::Contains("committed.size()"));
  CHECK_THAT(refuse(plain, hot), Catch::Contains("request 1") && Catch::Contains("temperature"));
  // histories in place of committed tokens: one for each penalized request, as long as its tokens
  specdec::penalty_history h(8);
  h.append(std::vector<std::int32_t>{3, 4});
  const std::vector<std::int32_t> two{3, 4}, three{3, 4, 5};
  const std::span<const std::int32_t> c2[] = {two, two}, c3[] = {two, three};
  const specdec::penalty_history* null_second[] = {&h, nullptr};
  const specdec::penalty_history* both[] = {&h, &h};
  const auto with = [&](std::span<const std::span<const std::int32_t>> c, std::span<const specdec::penalty_history* const> hs) {
    return refusal<specdec::cuda_greedy_verifier>(plain, rep, 2, {}, c, hs);
  };
  CHECK_THAT(with({}, null_second), Catch::Contains("'histories'") && Catch::Contains("null at 1"));
  CHECK_THAT(with(c3, both), Catch::Contains("'histories'") && Catch::Contains("(3 at 1)"));
  CHECK_THAT(with({}, std::span(both).first(1)), Catch::Contains("histories.size()"));
  // a history of another vocabulary (V = 8 here) is refused too
  specdec::penalty_history h9(9);
  h9.append(two);
  const specdec::penalty_history* other[] = {&h, &h9};
  CHECK_THAT(with(c2, other), Catch::Contains("history.vocab()"));
}

namespace {

//! Greedy requests, some with a repetition or contextual penalty (which moves the argmax).
specdec::sampling_params greedy_penalized(std::uint32_t id) {
  specdec::sampling_params p{.temperature = 0.0f};
  if (id % 3 == 0) p.repetition_penalty = 1.5f;
  if (id % 3 == 1) p.contextual_penalty = 2.0f, p.penalty_window = 4, p.contextual_sign_aware = id % 2 == 0;
  return p;
}

}  // namespace

TEST_CASE("cuda_greedy_verifier with penalties equals host greedy verification over processed rows", "[cuda][decoder]") {
  const bigram_target t_host{false};
  const auto [want, got] = host_and_device<specdec::greedy_verifier, specdec::cuda_greedy_verifier>(greedy_penalized);
  CHECK(got == want);
  // the penalties changed what was emitted (the plain greedy continuation of some request differs)
  int moved = 0;
  for (const auto& [id, tokens] : want)
    moved += id != 1 && tokens != t_host.greedy(prompt_of(id).back(), static_cast<int>(tokens.size()));
  CHECK(moved >= 4);
}

namespace {

//! Request id's processing for the sampled tests: temperatures, top-k, top-p and min-p in turn.
specdec::sampling_params sampled_params(std::uint32_t id) {
  specdec::sampling_params p{.temperature = 0.5f + 0.25f * static_cast<float>(id % 4)};
  if (id % 3 == 0) p.top_k = 5;
  if (id % 3 == 1) p.top_p = 0.8f;
  if (id % 5 == 2) p.min_p = 0.1f;
  if (id == 7) p.temperature = 0.0f;  // greedy among sampled requests
  return p;
}

//! cuda_sample_and_match_verifier processing only the rows its walks visit (the logits form of
//! verify_sample_and_match_batch); the tests' small steps would take every_row under automatic.
struct visited_rows_verifier : specdec::cuda_sample_and_match_verifier {
  explicit visited_rows_verifier(cudaStream_t s)
      : specdec::cuda_sample_and_match_verifier(s, specdec::sampled_rows::visited_rows) {}
};

}  // namespace

TEST_CASE("cuda_sample_and_match_verifier: a sampled step over device logits equals the host's, token for token",
          "[cuda][decoder]") {
  if (SPECDEC_NATIVE_SIMD_FMA == 0) {  // the host half is built for x86-64-v3 where the machine runs it
    WARN("this file's host code has no FMA level: its weights are not the device's; nothing compared");
    return;
  }
  const auto [want, got] =
      host_and_device<specdec::sample_and_match_verifier, specdec::cuda_sample_and_match_verifier>(sampled_params);
  CHECK(got == want);
  CHECK(host_and_device<specdec::sample_and_match_verifier, visited_rows_verifier>(sampled_params).second == want);
  std::size_t tokens = 0;
  for (const auto& [id, t] : want) tokens += t.size();
  CHECK(tokens >= 100);
}

TEST_CASE("cuda_sample_and_match_verifier with penalties equals the host's, token for token", "[cuda][decoder]") {
  if (SPECDEC_NATIVE_SIMD_FMA == 0) {
    WARN("this file's host code has no FMA level: its weights are not the device's; nothing compared");
    return;
  }
  const auto penalized = [](std::uint32_t id) {
    specdec::sampling_params p = sampled_params(id);
    if (id % 2 == 0) p.repetition_penalty = 1.3f;
    if (id % 3 != 2) p.contextual_penalty = 1.6f, p.penalty_window = 3 + static_cast<int>(id % 5);
    return p;
  };
  const auto [want, got] =
      host_and_device<specdec::sample_and_match_verifier, specdec::cuda_sample_and_match_verifier>(+penalized);
  CHECK(got == want);
  CHECK(host_and_device<specdec::sample_and_match_verifier, visited_rows_verifier>(+penalized).second == want);
  // the penalties changed what was drawn (the same seeds without them give other tokens)
  const auto plain =
      host_and_device<specdec::sample_and_match_verifier, specdec::cuda_sample_and_match_verifier>(sampled_params).first;
  int moved = 0;
  for (const auto& [id, t] : want) moved += plain.count(id) == 0 || plain.at(id) != t;
  CHECK(moved >= 4);
  std::size_t tokens = 0;
  for (const auto& [id, t] : want) tokens += t.size();
  CHECK(tokens >= 100);
}

TEST_CASE("cuda_sample_and_match_verifier refuses penalties without committed tokens and mismatched arrays before "
          "any CUDA call",
          "[cuda][decoder][nogpu]") {
  const specdec::sampling_params hot{.temperature = 0.7f}, rep{.temperature = 0.7f, .repetition_penalty = 1.1f},
      bad{.temperature = -1.0f};
  const auto refuse = [](const specdec::sampling_params& first, const specdec::sampling_params& second, int seeds) {
    return refusal<specdec::cuda_sample_and_match_verifier>(first, second, seeds);
  };
  CHECK_THAT(refuse(hot, rep, 2), Catch::Contains("committed.size()"));
  CHECK_THAT(refuse(bad, hot, 2), Catch::Contains("temperature"));
  CHECK_THAT(refuse(hot, hot, 1), Catch::Contains("seeds.size()"));
}

namespace {

// A sampling chain drafter with a fixed q per depth and last context token t, q_d(v) proportional to
// 1 + ((v + d + t) mod 3) + 2 [v == (d + t) mod V]: its q rows copied into draft_candidates::q (copy), handed over as a view
// of its own buffer in host or device memory (view_host, view_device), or not given (none: one-hot rows).
enum class q_mode { copy, view_host, view_device, none };
struct fixed_q_drafter {
  static constexpr specdec::draft_output provides = specdec::draft_output::q_rows;
  q_mode mode = q_mode::copy;
  // one buffer per request slot: a view must stay valid while the other requests of the step draft
  std::map<int, std::vector<float>> host_rows{};
  std::map<int, std::shared_ptr<specdec_test::device_buffer<float>>> dev_rows{};
  void reset(int) {}
  void propose(const specdec::draft_request& req, specdec::draft_candidates& out) {
    out.clear();
    auto& own = host_rows[req.request];
    own.assign(static_cast<std::size_t>(req.depth) * V, 0.0f);
    for (int d = 0; d < req.depth; ++d) {
      float* q = own.data() + static_cast<std::size_t>(d) * V;
      float s = 0;
      // q depends on the request's last token: a verifier reading another request's rows would differ
      const int shift = d + static_cast<int>(req.tokens.back());
      for (int v = 0; v < V; ++v) s += q[v] = 1.0f + static_cast<float>((v + shift) % 3) + (v == shift % V ? 2.0f : 0.0f);
      for (int v = 0; v < V; ++v) q[v] /= s;
      out.chain.push_back({specdec::sample_from_probs(std::span<const float>(q, static_cast<std::size_t>(V)), *req.rng), 0.0f});
    }
    out.vocab = V;
    if (mode == q_mode::copy) out.q = own;
    if (mode == q_mode::view_host)
      out.q_rows = specdec::strided_view<const float, 2>(own.data(), {req.depth, V}, {V, 1});
    if (mode == q_mode::view_device && req.depth > 0) {
      auto& dev = dev_rows[req.request];
      dev = std::make_shared<specdec_test::device_buffer<float>>(own);
      out.q_rows = specdec::strided_view<const float, 2>(dev->data(), {req.depth, V}, {V, 1}, memory_space::device);
    }
  }
};

//! cuda_chain_speculative_verifier processing only the rows its walks reach (the logits form of
//! verify_chain_speculative_batch).
struct visited_rows_chain_verifier : specdec::cuda_chain_speculative_verifier {
  explicit visited_rows_chain_verifier(cudaStream_t s)
      : specdec::cuda_chain_speculative_verifier(s, specdec::sampled_rows::visited_rows) {}
};

//! cuda_multi_draft_verifier processing only the rows its walks reach (the logits form of
//! verify_multi_draft_batch).
struct visited_rows_multi_verifier : specdec::cuda_multi_draft_verifier {
  explicit visited_rows_multi_verifier(cudaStream_t s)
      : specdec::cuda_multi_draft_verifier(s, specdec::sampled_rows::visited_rows) {}
};

}  // namespace

TEST_CASE("cuda_chain_speculative_verifier equals the host's, token for token, wherever the q rows live",
          "[cuda][decoder]") {
  if (SPECDEC_NATIVE_SIMD_FMA == 0) {
    WARN("this file's host code has no FMA level: its weights are not the device's; nothing compared");
    return;
  }
  const auto penalized = [](std::uint32_t id) {
    specdec::sampling_params p = sampled_params(id);
    if (id % 4 == 1) p.repetition_penalty = 1.2f;
    return p;
  };
  std::map<std::uint32_t, std::vector<std::int32_t>> with_q;
  for (const q_mode m : {q_mode::copy, q_mode::view_host, q_mode::view_device, q_mode::none}) {
    const fixed_q_drafter host_side{m == q_mode::view_device ? q_mode::view_host : m}, device_side{m};
    const auto [want, got] = host_and_device<specdec::chain_speculative_verifier, specdec::cuda_chain_speculative_verifier,
                                             fixed_q_drafter, specdec::chain_tree_builder>(+penalized, host_side, device_side);
    INFO("q mode " << static_cast<int>(m));
    CHECK(got == want);
    // only the rows the walks reach processed (the logits form)
    CHECK(host_and_device<specdec::chain_speculative_verifier, visited_rows_chain_verifier, fixed_q_drafter,
                          specdec::chain_tree_builder>(+penalized, host_side, device_side)
              .second == want);
    std::size_t tokens = 0;
    for (const auto& [id, t] : want) tokens += t.size();
    CHECK(tokens >= 100);
    if (m == q_mode::copy) with_q = want;
    if (m == q_mode::view_device) CHECK(want == with_q);  // the same rows, wherever they were
    if (m == q_mode::none) CHECK(want != with_q);         // one-hot rows draw otherwise: the q rows are read
  }
}

TEST_CASE("cuda_chain_speculative_verifier refuses missing drafts and misshapen q rows before any CUDA call",
          "[cuda][decoder][nogpu]") {
  const specdec::sampling_params hot{.temperature = 0.7f};
  specdec::draft_candidates a, b;
  std::vector<float> rows(2 * 8, 0.125f);
  a.q_rows = specdec::strided_view<const float, 2>(rows.data(), {1, 8}, {8, 1});
  b.q_rows = specdec::strided_view<const float, 2>(rows.data(), {2, 7}, {8, 1});  // 7 columns: not the vocabulary
  const specdec::draft_candidates* one[] = {&a};
  const specdec::draft_candidates* both[] = {&a, &b};
  const auto refused = [&](std::span<const specdec::draft_candidates* const> drafts) {
    return refusal<specdec::cuda_chain_speculative_verifier>(hot, hot, 2, drafts);
  };
  CHECK_THAT(refused(one), Catch::Contains("drafts.size()"));
  CHECK_THAT(refused(both), Catch::Contains("draft.q_rows of request 1") && Catch::Contains("[>= 1 (the chain), 8"));
  const specdec::draft_candidates* missing[] = {&a, nullptr};
  CHECK_THAT(refused(missing), Catch::Contains("a draft for every request with a tree (entry 1)"));
}

namespace {

//! What Verifier::verify_batch says of a step of the given trees, sampling entries and vocabulary
//! `vocab` (its logits host memory labelled device memory, never read): "not refused" when it
//! passes the host checks.
template <class Verifier>
std::string refused_step(std::vector<std::int32_t> indptr, std::vector<std::int32_t> tokens,
                         std::vector<std::int32_t> parents, std::span<const specdec::sampling_params* const> sp,
                         std::int64_t vocab, std::span<const specdec::draft_candidates* const> drafts = {}) {
  const std::vector<std::uint64_t> zero(indptr.size() - 1, 0);
  static const std::vector<float> never_read(8);
  const auto rows = static_cast<std::int64_t>(tokens.size() + indptr.size() - 1);
  Verifier v{nullptr};
  specdec::verify_batch_result out;
  const specdec::batch_verify_input in{
      indptr, tokens, parents,
      specdec::strided_view<const float, 2>(never_read.data(), {rows, vocab}, {vocab, 1}, memory_space::device),
      sp, zero, zero, {}, drafts};
  try {
    v.verify_batch(in, out);
  } catch (const specdec::invalid_argument& e) {
    return std::string(e.what());
  }
  return std::string("not refused");
}

}  // namespace

TEST_CASE("The device verifiers check the trees, the sampling entries and the sampled vocabulary on the host, as the "
          "host verifiers do, before any CUDA call",
          "[cuda][decoder][nogpu]") {
  const specdec::sampling_params greedy{.temperature = 0.0f}, hot{.temperature = 0.7f},
      bad_k{.temperature = 0.0f, .top_k = -3};
  const specdec::sampling_params* g2[] = {&greedy, &greedy};
  const specdec::sampling_params* h2[] = {&hot, &hot};
  const specdec::sampling_params* null_second[] = {&greedy, nullptr};
  const specdec::sampling_params* bad_second[] = {&greedy, &bad_k};
  using greedy_v = specdec::cuda_greedy_verifier;
  using sample_v = specdec::cuda_sample_and_match_verifier;
  // a token outside the vocabulary, a parent after its node: refused on the host (they reached the
  // device's own check only after uploads and launches)
  CHECK_THAT(refused_step<greedy_v>({0, 1, 2}, {1, 37}, {-1, -1}, g2, 32),
             Catch::Contains("'tokens'") && Catch::Contains("request 1") && Catch::Contains("37"));
  CHECK_THAT(refused_step<sample_v>({0, 1, 2}, {1, 37}, {-1, -1}, h2, 32),
             Catch::Contains("'tokens'") && Catch::Contains("request 1"));
  CHECK_THAT(refused_step<greedy_v>({0, 1, 3}, {1, 2, 3}, {-1, -1, 1}, g2, 32),
             Catch::Contains("'parents'") && Catch::Contains("request 1"));
  // a null sampling entry (it was dereferenced) and invalid parameters under greedy verification
  CHECK_THAT(refused_step<greedy_v>({0, 1, 2}, {1, 2}, {-1, -1}, null_second, 32),
             Catch::Contains("'sampling'") && Catch::Contains("null at 1"));
  CHECK_THAT(refused_step<sample_v>({0, 1, 2}, {1, 2}, {-1, -1}, null_second, 32),
             Catch::Contains("'sampling'") && Catch::Contains("null at 1"));
  CHECK_THAT(refused_step<greedy_v>({0, 1, 2}, {1, 2}, {-1, -1}, bad_second, 32), Catch::Contains("top_k"));
  // the sampled verifiers' device draws take at most device_cdf_max_vocab tokens: refused before the
  // rows are uploaded and processed (the greedy verifier has no such bound)
  const std::int64_t big = specdec::detail::device_cdf_max_vocab + 64;
  CHECK_THAT(refused_step<sample_v>({0, 1, 2}, {1, 2}, {-1, -1}, h2, big),
             Catch::Contains("'logits'") && Catch::Contains("device_cdf_max_vocab"));
  // the chain verifier takes chains only (node 1's parent is the root, not node 0)
  specdec::draft_candidates none;
  const specdec::draft_candidates* drafts[] = {&none, &none};
  CHECK_THAT(refused_step<specdec::cuda_chain_speculative_verifier>({0, 0, 2}, {1, 2}, {-1, -1}, h2, 32, drafts),
             Catch::Contains("'tree'") && Catch::Contains("a chain") && Catch::Contains("request 1"));
}

namespace {

// A multi-draft drafter over a bigram draft table (the target's, scaled and shifted: a close but
// different q): k = 3 drafts drawn by the library's multi_draft_sampler, with their q rows.
struct bigram_multi_drafter {
  static constexpr specdec::draft_output provides = specdec::draft_output::q_rows | specdec::draft_output::iid_drafts;
  specdec::multi_draft_params params{};
  std::vector<float> table = make_draft_table();
  specdec::detail::multi_draft_sampler sampler{};
  static std::vector<float> make_draft_table() {
    auto t = bigram_target::make_table();
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = 0.8f * t[i] + 0.3f * static_cast<float>(i % 5) - 0.6f;
    return t;
  }
  void reset(int) {}
  void propose(const specdec::draft_request& req, specdec::draft_candidates& out) {
    specdec::draft_request r = req;
    r.width = 3;
    const auto row = [&](std::int32_t t) { return std::span<const float>(table.data() + t * V, V); };
    sampler.run(row(req.tokens.back()), r, params, [&](std::int32_t t, int, bool) { return row(t); }, out);
  }
};

}  // namespace

TEST_CASE("cuda_multi_draft_verifier equals the host's, token for token, with and without replacement",
          "[cuda][decoder]") {
  if (SPECDEC_NATIVE_SIMD_FMA == 0) {
    WARN("this file's host code has no FMA level: its weights are not the device's; nothing compared");
    return;
  }
  std::map<std::uint32_t, std::vector<std::int32_t>> first;
  for (const auto mode : {specdec::draft_sampling::with_replacement, specdec::draft_sampling::without_replacement}) {
    bigram_multi_drafter d;
    d.params.mode = mode;
    const auto [want, got] = host_and_device<specdec::multi_draft_verifier, specdec::cuda_multi_draft_verifier,
                                             bigram_multi_drafter, specdec::multi_draft_tree_builder>(sampled_params, d, d);
    INFO("without replacement: " << (mode == specdec::draft_sampling::without_replacement));
    CHECK(got == want);
    // only the rows the walks reach processed (the logits form)
    CHECK(host_and_device<specdec::multi_draft_verifier, visited_rows_multi_verifier, bigram_multi_drafter,
                          specdec::multi_draft_tree_builder>(sampled_params, d, d)
              .second == want);
    std::size_t tokens = 0;
    for (const auto& [id, t] : want) tokens += t.size();
    CHECK(tokens >= 100);
    if (first.empty())
      first = want;
    else
      CHECK(want != first);  // the mode reaches the verification (other drafts, other draws)
  }
}

TEST_CASE("cuda_multi_draft_verifier refuses missing drafts and a step of mixed draft_sampling modes before any "
          "CUDA call",
          "[cuda][decoder][nogpu]") {
  const specdec::sampling_params hot{.temperature = 0.7f};
  specdec::draft_candidates a, b;
  a.chain = {{1, 0.0f}}, b.chain = {{2, 0.0f}};
  a.sampled_as = specdec::draft_sampling::with_replacement;
  b.sampled_as = specdec::draft_sampling::without_replacement;
  const specdec::draft_candidates* one[] = {&a};
  const specdec::draft_candidates* mixed[] = {&a, &b};
  const auto refused = [&](std::span<const specdec::draft_candidates* const> drafts) {
    return refusal<specdec::cuda_multi_draft_verifier>(hot, hot, 2, drafts);
  };
  CHECK_THAT(refused(one), Catch::Contains("drafts.size()"));
  CHECK_THAT(refused(mixed), Catch::Contains("one draft_sampling mode") && Catch::Contains("request 1"));
}
