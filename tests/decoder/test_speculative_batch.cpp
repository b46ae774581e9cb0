// speculative_batch, the step an engine drives: requests join and leave between steps (continuous
// batching) and each output is bit-identical to that request's own greedy decoding; aborts leave
// the other requests untouched; a sampled request's output does not depend on its slot, its
// neighbours or when it joined; one target call per step; logits in any element type are taken,
// device logits are refused; bad requests are rejected before the target is touched.
#include <catch2/catch.hpp>

#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <random>

#include "../../examples/common/llama.hpp"
#include "small_model.hpp"
#include "distribution_util.hpp"
#include "specdec/decoder/speculative_batch.hpp"
#include "specdec/verify/greedy.hpp"

using namespace specdec;
using namespace specdec::examples;

namespace {
using small_model::cfg;
using small_model::greedy_of;
using small_model::weights;

// A target with only the batched forward: the per-request model run entry by entry into a buffer of
// element type E (half / bfloat16 / float), in the memory space it reports. Counts its calls.
template <class E>
struct batched_only {
  llama_model<double>* model;
  memory_space space = memory_space::host;
  int calls = 0, max_rows = 0;
  std::vector<E> rows{};
  std::vector<double> tmp{};
  [[nodiscard]] int vocab_size() const { return model->vocab_size(); }
  [[nodiscard]] int max_requests() const { return model->max_requests(); }
  void prefill(int r, std::span<const std::int32_t> p) { model->prefill(r, p); }
  void commit(int r, std::span<const std::int32_t> a) { model->commit(r, a); }
  strided_view<E, 2> forward_batch(const target_batch& b) {
    ++calls;
    max_rows = std::max(max_rows, static_cast<int>(b.total_rows()));
    const int V = vocab_size();
    rows.resize(static_cast<std::size_t>(b.total_rows()) * V);
    for (int e = 0; e < b.size(); ++e) {
      const auto n = static_cast<std::size_t>(b.row_indptr[e + 1] - b.row_indptr[e]);
      tmp.resize(n * V);
      model->forward(b.slots[e], b.roots[e], *b.request_trees[e], tmp);
      for (std::size_t i = 0; i < tmp.size(); ++i)
        rows[static_cast<std::size_t>(b.row_indptr[e]) * V + i] = static_cast<E>(static_cast<float>(tmp[i]));
    }
    return make_view<2>(rows.data(), {b.total_rows(), V}, space);
  }
};
static_assert(target_model<batched_only<half>> && !target_has_forward<batched_only<half>>);

// The same with a batched commit (one call per step; validates every entry, then commits).
template <class E>
struct batched_commit : batched_only<E> {
  int commit_calls = 0;
  void commit_batch(const target_batch& b, const verify_batch_result& res) {
    ++commit_calls;
    REQUIRE(res.num_requests() == b.size());
    for (int e = 0; e < b.size(); ++e) this->model->commit(b.slots[static_cast<std::size_t>(e)], res.accepted_nodes(e));
  }
};
static_assert(target_has_commit_batch<batched_commit<float>> && !target_has_commit_batch<batched_only<float>>);

// A batch verifier standing in on the CPU for a device one (cuda_greedy_verifier): the target
// labels its host rows as device memory, and verify_batch reads them back as host rows through the
// array form (verify_greedy_batch on the host, the same walk the CUDA backend runs), checking what
// speculative_batch hands it.
struct array_greedy_verifier : greedy_verifier {
  // where to record (seed, stream, top_k) of every entry of every verify_batch, in call and batch order
  std::vector<std::tuple<std::uint64_t, std::uint64_t, int>>* seen = nullptr;
  void verify_batch(const batch_verify_input& in, verify_batch_result& out) {
    const auto B = static_cast<std::int64_t>(in.node_indptr.size()) - 1, N = static_cast<std::int64_t>(in.tokens.size());
    REQUIRE(B >= 1);
    REQUIRE(in.node_indptr.back() == N);
    REQUIRE(static_cast<std::int64_t>(in.parents.size()) == N);
    REQUIRE(static_cast<std::int64_t>(in.sampling.size()) == B);
    REQUIRE(static_cast<std::int64_t>(in.seeds.size()) == B);
    REQUIRE(static_cast<std::int64_t>(in.streams.size()) == B);
    REQUIRE(in.logits.space() == memory_space::device);
    REQUIRE(in.logits.extent(0) == N + B);
    for (std::int64_t b = 0; b < B; ++b) {
      REQUIRE(in.sampling[static_cast<std::size_t>(b)]->temperature == 0.0f);
      if (seen != nullptr)
        seen->emplace_back(in.seeds[static_cast<std::size_t>(b)], in.streams[static_cast<std::size_t>(b)],
                           in.sampling[static_cast<std::size_t>(b)]->top_k);
    }
    const strided_view<const float, 2> rows(in.logits.data(), {in.logits.extent(0), in.logits.extent(1)},
                                           {in.logits.stride(0), 1});
    std::vector<std::int32_t> acc(static_cast<std::size_t>(N)), num(static_cast<std::size_t>(B)),
        bonus(static_cast<std::size_t>(B)), emitted(static_cast<std::size_t>(N + B)), status(3);
    const auto c1 = [](std::span<const std::int32_t> x) {
      return make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())});
    };
    const auto m1 = [](std::vector<std::int32_t>& x) { return make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())}); };
    verify_greedy_batch(host{}, c1(in.node_indptr), c1(in.tokens), c1(in.parents), rows, m1(acc), m1(num), m1(bonus),
                        m1(emitted), m1(status));
    out = {};
    for (std::int64_t b = 0; b < B; ++b) {
      const auto first = acc.begin() + in.node_indptr[static_cast<std::size_t>(b)];
      out.push_back(verify_result{std::vector<std::int32_t>(first, first + num[static_cast<std::size_t>(b)]),
                                  bonus[static_cast<std::size_t>(b)]});
    }
  }
};
static_assert(verifier_has_verify_batch<array_greedy_verifier> && !verifier_has_verify_batch<greedy_verifier>);

// A batch verifier that returns a wrong result (one entry short, or an accepted node that is not a
// child of the previous one) to show speculative_batch checks verify_batch's output before commits.
struct bad_batch_verifier : greedy_verifier {
  enum class fault { short_result, bad_node, bad_offsets } kind = fault::short_result;
  void verify_batch(const batch_verify_input& in, verify_batch_result& out) {
    out = {};
    const auto B = in.node_indptr.size() - 1;
    for (std::size_t b = 0; b < (kind == fault::short_result ? B - 1 : B); ++b)
      out.push_back(verify_result{kind == fault::bad_node ? std::vector<std::int32_t>{5000} : std::vector<std::int32_t>{}, 0});
    if (kind == fault::bad_offsets) out.accepted_indptr[1] = 1000000;  // past accepted: never read
  }
};

struct arrival {
  std::uint32_t id;
  int at_step;  // joins before this step
  std::vector<std::int32_t> prompt;
  generation_options opt;
  int abort_at = -1;  // aborted before this step (-1: never)
};

std::vector<arrival> random_arrivals(std::uint32_t seed, int count) {
  std::mt19937 g(seed);
  std::vector<arrival> out;
  for (int i = 0; i < count; ++i) {
    arrival a;
    a.id = 1000 + static_cast<std::uint32_t>(i) * 7;
    a.at_step = static_cast<int>(g() % 12);
    const int len = 1 + static_cast<int>(g() % 20);
    for (int j = 0; j < len; ++j) a.prompt.push_back(static_cast<std::int32_t>(g() % 32));
    a.opt.max_new_tokens = static_cast<int>(g() % 40);
    a.opt.draft_depth = static_cast<int>(g() % 6);
    a.opt.draft_width = 1 + static_cast<int>(g() % 3);
    if (i % 5 == 3) a.abort_at = a.at_step + 1 + static_cast<int>(g() % 4);
    out.push_back(std::move(a));
  }
  return out;
}

// Drives a batch through the arrivals (joins wait for a free slot); returns each id's tokens and
// whether it finished (true) or was aborted (false).
template <class Batch>
std::map<std::uint32_t, std::pair<std::vector<std::int32_t>, bool>> drive(Batch& batch, const std::vector<arrival>& arrivals,
                                                                         int* steps_out = nullptr) {
  std::map<std::uint32_t, std::pair<std::vector<std::int32_t>, bool>> got;
  std::size_t next = 0;
  int step = 0;
  std::vector<const arrival*> live;
  while (next < arrivals.size() || batch.active() > 0) {
    for (auto it = live.begin(); it != live.end();) {
      if ((*it)->abort_at >= 0 && step >= (*it)->abort_at && batch.contains((*it)->id)) {
        CHECK(batch.abort((*it)->id));
        CHECK_FALSE(batch.contains((*it)->id));
        got[(*it)->id].second = false;
        it = live.erase(it);
      } else {
        ++it;
      }
    }
    while (next < arrivals.size() && arrivals[next].at_step <= step && batch.free_slots() > 0) {
      batch.add_request(arrivals[next].id, arrivals[next].prompt, arrivals[next].opt);
      got[arrivals[next].id] = {{}, false};
      live.push_back(&arrivals[next]);
      ++next;
    }
    for (const auto& out : batch.step()) {
      auto& g = got[out.id];
      g.first.insert(g.first.end(), out.tokens.begin(), out.tokens.end());
      if (out.finished) {
        g.second = true;
        CHECK_FALSE(batch.contains(out.id));
        std::erase_if(live, [&](const arrival* a) { return a->id == out.id; });
      }
    }
    ++step;
  }
  if (steps_out) *steps_out = step;
  return got;
}
}  // namespace

TEST_CASE("continuous batching: every request equals its own greedy decoding, joins and aborts mid-flight",
          "[decoder][batch]") {
  for (const bool paged : {false, true}) {
    const auto arrivals = random_arrivals(paged ? 11u : 5u, 14);
    llama_model<double> target(cfg, weights(), 4, 1024,
                               {.storage = paged ? kv_storage::paged : kv_storage::contiguous, .page_size = 16});
    speculative_batch<llama_model<double>, ngram_drafter, trie_tree_builder, greedy_verifier> batch(target);
    const auto got = drive(batch, arrivals);
    REQUIRE(got.size() == arrivals.size());
    int aborted = 0;
    for (const auto& a : arrivals) {
      const auto& [tokens, finished] = got.at(a.id);
      const auto want = greedy_of(a.prompt, a.opt.max_new_tokens);
      INFO("request " << a.id << (paged ? " (paged)" : ""));
      if (finished) {
        CHECK(tokens == want);
      } else {  // aborted: what it emitted before leaving is a prefix of its greedy output
        ++aborted;
        REQUIRE(tokens.size() <= want.size());
        CHECK(std::equal(tokens.begin(), tokens.end(), want.begin()));
      }
    }
    CHECK(aborted > 0);
    CHECK(batch.active() == 0);
    CHECK(batch.free_slots() == 4);
    CHECK(batch.stats().batch_steps > 0);
    CHECK(batch.stats().steps >= batch.stats().batch_steps);  // request-steps: several per batched call
  }
}

TEST_CASE("a target sized for prompt + max_new_tokens has room for every step's tree, however wide",
          "[decoder][batch]") {
  // A repetitive prompt gives the n-gram drafter three continuations, so the trie is up to 3 wide: up
  // to 12 nodes at depth 4, more than the last steps' room. The step cuts each tree to the tokens its
  // request has left (the target refused cache + nodes + 1 > capacity on every retry before).
  const std::vector<std::int32_t> p{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 4, 1, 2, 5, 1, 2};
  const int prompt = static_cast<int>(p.size());
  for (const int m : {1, 2, 3, 5, 8, 12}) {
    INFO("max_new_tokens " << m);
    llama_model<double> target(cfg, weights(), 2, prompt + m);
    speculative_batch<llama_model<double>, ngram_drafter, trie_tree_builder, greedy_verifier> batch(target);
    batch.add_request(1, p, {.max_new_tokens = m, .draft_depth = 4, .draft_width = 3});
    batch.add_request(2, p, {.max_new_tokens = m, .draft_depth = 4, .draft_width = 1});
    std::map<std::uint32_t, std::vector<std::int32_t>> got;
    while (batch.active() > 0)
      for (const auto& o : batch.step()) got[o.id].insert(got[o.id].end(), o.tokens.begin(), o.tokens.end());
    CHECK(got[1] == greedy_of(p, m));
    CHECK(got[2] == greedy_of(p, m));
    CHECK((batch.stats().tree_nodes > 0) == (m > 1));  // max_new_tokens 1: nothing to draft
  }
  // i.i.d. drafts (one unmerged branch each): k = 3 drafts of depth 3 are 9 nodes, cut to the first
  // drafts whole and a prefix of the next (a cut no drawn value decides; the law of such cuts is
  // checked by test_distribution_multi_draft.cpp, whose first step cuts 4 nodes to 3).
  const auto& q = distribution::prompt;  // distribution_util's 6-token model and its one-layer draft
  llama_model<double> target(distribution::cfg, distribution::weights(), 1, static_cast<int>(q.size()) + 4);
  distribution::drafters d(target);
  using cd = chain_drafter<llama_model<double>>;
  speculative_batch<llama_model<double>, cd, multi_draft_tree_builder, multi_draft_verifier> batch(
      target, cd(d.small, multi_draft_params{.mode = draft_sampling::with_replacement}));
  for (std::uint32_t seed = 1; seed <= 20; ++seed) {
    batch.add_request(seed, q, {.max_new_tokens = 4, .sampling = {.temperature = 0.9f}, .seed = seed,
                                .draft_depth = 3, .draft_width = 3});
    int tokens = 0;
    while (batch.active() > 0)
      for (const auto& o : batch.step()) tokens += static_cast<int>(o.tokens.size());
    CHECK(tokens == 4);
  }
}

TEST_CASE("one target call per step over all active requests; half, bfloat16 and float logits", "[decoder][batch]") {
  const auto arrivals = random_arrivals(3, 6);
  auto check_elem = [&](auto tag) {
    using E = decltype(tag);
    llama_model<double> model(cfg, weights(), 3, 1024);
    batched_only<E> target{&model, memory_space::host, 0, 0, {}, {}};
    speculative_batch<batched_only<E>, ngram_drafter, trie_tree_builder, greedy_verifier> batch(target);
    int steps = 0;
    const auto got = drive(batch, arrivals, &steps);
    CHECK(target.calls == batch.stats().batch_steps);
    CHECK(target.calls <= steps);
    CHECK(target.max_rows > 1);
    // greedy over rounded logits may split near-ties differently from double: compare with the
    // per-request decoder over the same rounded target instead
    for (const auto& a : arrivals) {
      if (a.abort_at >= 0) continue;
      llama_model<double> m1(cfg, weights(), 1, 1024);
      batched_only<E> t1{&m1, memory_space::host, 0, 0, {}, {}};
      speculative_batch<batched_only<E>, ngram_drafter, trie_tree_builder, greedy_verifier> alone(t1);
      const auto one = drive(alone, {arrival{a.id, 0, a.prompt, a.opt}});
      CHECK(got.at(a.id).first == one.at(a.id).first);
    }
  };
  check_elem(half{});
  check_elem(bfloat16{});
  check_elem(float{});
}

TEST_CASE("a sampled request's output does not depend on its slot, its neighbours or when it joined", "[decoder][batch]") {
  generation_options opt{.max_new_tokens = 60, .sampling = {.temperature = 0.9f, .top_k = 20}, .seed = 42,
                         .draft_depth = 4, .draft_width = 2};
  const std::vector<std::int32_t> p{3, 1, 4, 1, 5, 9, 2, 6};
  using batch_t = speculative_batch<llama_model<double>, ngram_drafter, trie_tree_builder, sample_and_match_verifier>;
  llama_model<double> m1(cfg, weights(), 1, 1024);
  batch_t alone(m1);
  const auto a = drive(alone, {arrival{77, 0, p, opt}});
  llama_model<double> m2(cfg, weights(), 4, 1024);
  batch_t crowd(m2);
  std::vector<arrival> arrivals{arrival{1, 0, {5, 5, 5}, opt}, arrival{2, 0, {7, 1}, opt}, arrival{3, 0, {9}, opt},
                                arrival{77, 3, p, opt}};
  arrivals[0].opt.seed = 1;  // another seed: other draws for a neighbour
  arrivals[2].abort_at = 2;  // frees slot 2, where 77 joins at step 3 while 1 and 2 still run
  const auto b = drive(crowd, arrivals);
  CHECK(b.at(77).first == a.at(77).first);
  CHECK(b.at(77).second);
  llama_model<double> m3(cfg, weights(), 4, 1024);
  batch_t late(m3);  // 77 joins at step 5 into slot 1
  const auto c = drive(late, {arrival{1, 0, {5, 5, 5}, opt}, arrival{77, 5, p, opt}});
  CHECK(c.at(77).first == a.at(77).first);
  // and a different id draws different numbers (the streams are keyed by id)
  llama_model<double> m4(cfg, weights(), 1, 1024);
  batch_t other(m4);
  const auto d = drive(other, {arrival{78, 0, p, opt}});
  CHECK(d.at(78).first != a.at(77).first);
}

namespace {
//! V's verify without its verify_logits: speculative_batch then processes every row before verify.
template <class V>
struct every_row_processed {
  static constexpr bool is_lossless_for_sampling = V::is_lossless_for_sampling;
  static constexpr tree_shape accepts = V::accepts;
  static constexpr bool needs_draft_q = V::needs_draft_q;
  V v;
  void verify(const verify_input& in, verify_result& out) { v.verify(in, out); }
};
static_assert(verifier_has_verify_logits<sample_and_match_verifier> && verifier_has_verify_logits<greedy_verifier> &&
              verifier_has_verify_logits<chain_speculative_verifier> && verifier_has_verify_logits<multi_draft_verifier>);
static_assert(!verifier_has_verify_logits<every_row_processed<sample_and_match_verifier>>);
//! A verifier derived from one with verify_logits that declares its own verify: speculative_batch must
//! call that verify (on processed rows), not the inherited verify_logits.
struct own_verify : greedy_verifier {
  void verify(const verify_input& in, verify_result& out) const { greedy_verifier::verify(in, out); }
};
static_assert(!verifier_has_verify_logits<own_verify>);
struct adds_batch_only : sample_and_match_verifier {  // like the cuda verifiers: verify_logits still applies
  void verify_batch(const batch_verify_input&, verify_batch_result&) {}
};
static_assert(verifier_has_verify_logits<adds_batch_only>);
}  // namespace

namespace {
//! A chain_drafter over a 1-layer model sharing the test model's first layer, embedding and head, with
//! three request slots; multi: k independent sampled drafts instead of one chain.
struct small_chain_drafter {
  std::unique_ptr<llama_model<double>> model;
  std::optional<multi_draft_params> multi;
  explicit small_chain_drafter(std::optional<multi_draft_params> m = {}) : multi(m) {
    auto c = cfg;
    c.layers = 1;
    auto w = weights();
    w.layers.resize(1);
    model = std::make_unique<llama_model<double>>(c, std::move(w), 3, 1024);
  }
  [[nodiscard]] chain_drafter<llama_model<double>> policy() const {
    return multi ? chain_drafter<llama_model<double>>(*model, *multi) : chain_drafter<llama_model<double>>(*model);
  }
};
}  // namespace

TEST_CASE("verifiers with verify_logits (only the rows their walks read processed) give the outputs of processing every row",
          "[decoder][batch]") {
  const std::vector<std::int32_t> p{3, 1, 4, 1, 5, 9, 2, 6};
  // V over drafter and builder from make(): a fresh drafter for each of the two batches
  const auto both = [&]<class V>(V*, auto make, auto builder, const generation_options& opt) {
    using drafter_t = decltype(make());
    using builder_t = decltype(builder);
    llama_model<double> m1(cfg, weights(), 3, 1024), m2(cfg, weights(), 3, 1024);
    speculative_batch<llama_model<double>, drafter_t, builder_t, V> lazy(m1, make(), builder);
    speculative_batch<llama_model<double>, drafter_t, builder_t, every_row_processed<V>> all(m2, make(), builder);
    std::vector<arrival> arrivals{arrival{1, 0, p, opt}, arrival{2, 0, {5, 5, 5, 5}, opt}, arrival{3, 2, {9, 2}, opt}};
    arrivals[1].opt.seed = 7;
    const auto a = drive(lazy, arrivals), b = drive(all, arrivals);
    std::size_t tokens = 0;
    for (const auto& [id, out] : b) {
      CHECK(a.at(id).first == out.first);
      CHECK(a.at(id).second);
      tokens += out.first.size();
    }
    CHECK(tokens >= 100);
    CHECK(lazy.stats().accepted > 0);  // drafts were accepted: the walks went past the root
  };
  const sampling_params every_processor{.temperature = 0.9f, .top_k = 20, .top_p = 0.9f, .min_p = 0.02f,
                                        .repetition_penalty = 1.3f, .contextual_penalty = 1.2f, .penalty_window = 6};
  const auto ngram = [] { return ngram_drafter{}; };
  // sampling with every processor and both penalties (the penalties read each row's root path)
  both(static_cast<sample_and_match_verifier*>(nullptr), ngram, trie_tree_builder{},
       generation_options{.max_new_tokens = 50, .sampling = every_processor, .seed = 42, .draft_depth = 4,
                          .draft_width = 2});
  // greedy with penalties (they move the argmax)
  both(static_cast<greedy_verifier*>(nullptr), ngram, trie_tree_builder{},
       generation_options{.max_new_tokens = 50,
                          .sampling = {.temperature = 0.0f, .repetition_penalty = 1.5f, .contextual_penalty = 1.3f,
                                       .penalty_window = 4},
                          .draft_depth = 4, .draft_width = 2});
  // chain speculative sampling with the drafter's q rows (a sampled chain)
  std::vector<std::unique_ptr<small_chain_drafter>> keep;  // the draft models outlive the batches
  const auto chain = [&](std::optional<multi_draft_params> m) {
    return [&keep, m] { return keep.emplace_back(std::make_unique<small_chain_drafter>(m))->policy(); };
  };
  both(static_cast<chain_speculative_verifier*>(nullptr), chain({}), chain_tree_builder{},
       generation_options{.max_new_tokens = 50, .sampling = every_processor, .seed = 5, .draft_depth = 4});
  // multi-draft speculative sampling of k = 3 sampled drafts (draft_width), with and without replacement
  for (const auto mode : {draft_sampling::with_replacement, draft_sampling::without_replacement})
    both(static_cast<multi_draft_verifier*>(nullptr), chain(multi_draft_params{.mode = mode}), multi_draft_tree_builder{},
         generation_options{.max_new_tokens = 50, .sampling = every_processor, .seed = 9, .draft_depth = 3,
                            .draft_width = 3});
}

TEST_CASE("speculative_batch rejects bad requests before touching the target, and device logits", "[decoder][batch]") {
  using Catch::Contains;
  llama_model<double> target(cfg, weights(), 2, 1024);
  speculative_batch<llama_model<double>, ngram_drafter, trie_tree_builder, greedy_verifier> batch(target);
  const std::vector<std::int32_t> p{1, 2, 3};
  CHECK(batch.step().empty());
  CHECK(batch.add_request(5, p) == 0);
  REQUIRE_THROWS_WITH(batch.add_request(5, p), Contains("add_request") && Contains("'id'"));
  REQUIRE_THROWS_WITH(batch.add_request(6, std::vector<std::int32_t>{}), Contains("'prompt'"));
  REQUIRE_THROWS_WITH(batch.add_request(6, std::vector<std::int32_t>{1, 32}), Contains("prompt[j]"));
  REQUIRE_THROWS_WITH(batch.add_request(6, p, {.sampling = {.temperature = 0.5f}}),
                      Contains("greedy-only verifier"));
  CHECK(batch.active() == 1);
  CHECK(batch.add_request(6, p) == 1);
  REQUIRE_THROWS_WITH(batch.add_request(7, p), Contains("free slot"));
  CHECK_FALSE(batch.abort(99));
  CHECK(batch.abort(5));
  CHECK(batch.add_request(7, p) == 0);  // the lowest free slot
  CHECK(batch.slot_of(7) == 0);
  CHECK(batch.tokens(7).size() == 3);

  llama_model<double> model(cfg, weights(), 1, 1024);
  batched_only<float> dev{&model, memory_space::device, 0, 0, {}, {}};
  speculative_batch<batched_only<float>, ngram_drafter, trie_tree_builder, greedy_verifier> on_device(dev);
  on_device.add_request(1, p);
  REQUIRE_THROWS_WITH(on_device.step(), Contains("host-accessible") && Contains("device"));
  CHECK(on_device.tokens(1).size() == 3);  // nothing committed
}

TEST_CASE("device logits go to the verifier's verify_batch: the same outputs as host verification", "[decoder][batch]") {
  // The same arrivals through a host-logits batch (greedy_verifier per request) and a batch whose
  // target reports device logits (array_greedy_verifier: one verify_batch per step); greedy, so
  // every output is also the request's own greedy decoding.
  const auto arrivals = random_arrivals(29, 14);
  llama_model<double> m_host(cfg, weights(), 3, 1024), m_dev(cfg, weights(), 3, 1024);
  batched_only<float> t_host{&m_host, memory_space::host, 0, 0, {}, {}};
  batched_only<float> t_dev{&m_dev, memory_space::device, 0, 0, {}, {}};
  speculative_batch<batched_only<float>, ngram_drafter, trie_tree_builder, greedy_verifier> on_host(t_host);
  speculative_batch<batched_only<float>, ngram_drafter, trie_tree_builder, array_greedy_verifier> on_dev(t_dev);
  int steps = 0;
  const auto want = drive(on_host, arrivals);
  const auto got = drive(on_dev, arrivals, &steps);
  CHECK(got == want);
  CHECK(t_dev.calls > 5);  // one forward (and one verify_batch) per step with running requests
  CHECK(t_dev.calls == t_host.calls);
}

TEST_CASE("verify_batch gets each request's own seed, Philox stream and sampling, in batch order; commit_batch "
          "targets too",
          "[decoder][batch]") {
  // Distinct seeds (1000 + i) and top_k (i + 1) per request: every entry verify_batch sees must be
  // request i's, at stream_id(id, s) for its steps s = 0, 1, ... in order.
  auto arrivals = random_arrivals(31, 10);
  std::map<std::uint64_t, std::uint32_t> id_of_seed;
  for (std::size_t i = 0; i < arrivals.size(); ++i) {
    arrivals[i].opt.seed = 1000 + i;
    arrivals[i].opt.sampling.top_k = static_cast<int>(i) + 1;
    id_of_seed[1000 + i] = arrivals[i].id;
  }
  llama_model<double> m_host(cfg, weights(), 3, 1024), m_dev(cfg, weights(), 3, 1024);
  batched_only<float> t_host{&m_host, memory_space::host, 0, 0, {}, {}};
  batched_commit<float> t_dev{{&m_dev, memory_space::device, 0, 0, {}, {}}, 0};
  speculative_batch<batched_only<float>, ngram_drafter, trie_tree_builder, greedy_verifier> on_host(t_host);
  std::vector<std::tuple<std::uint64_t, std::uint64_t, int>> seen;
  speculative_batch<batched_commit<float>, ngram_drafter, trie_tree_builder, array_greedy_verifier> on_dev(
      t_dev, {}, {}, array_greedy_verifier{{}, &seen});
  CHECK(drive(on_dev, arrivals) == drive(on_host, arrivals));
  CHECK(t_dev.commit_calls == t_dev.calls);  // one commit_batch per step
  REQUIRE(seen.size() > 20);
  std::map<std::uint32_t, std::uint64_t> steps;  // per id, the next step expected
  for (const auto& [seed, stream, top_k] : seen) {
    REQUIRE(id_of_seed.count(seed) == 1);
    const std::uint32_t id = id_of_seed[seed];
    CHECK(top_k == static_cast<int>(seed - 1000) + 1);
    CHECK(stream == stream_id(id, steps[id]++));
  }
}

// A batch verifier that applies penalties as cuda_greedy_verifier does (device_step_rows): the rows
// processed by process_logits_batch with a penalty_context built from batch_verify_input::histories,
// then verify_greedy_batch. It checks each history it is handed against the request's committed
// tokens (the same pairs as a context built from them), so a history that fell behind or ran ahead
// fails here, not only through a different token.
struct array_penalty_verifier : greedy_verifier {
  int* checked = nullptr;  // counts the histories compared with their committed tokens
  void verify_batch(const batch_verify_input& in, verify_batch_result& out) {
    const auto B = in.node_indptr.size() - 1;
    const std::int64_t rows = in.logits.extent(0), V = in.logits.extent(1);
    REQUIRE(in.histories.size() == B);
    REQUIRE(in.committed.size() == B);
    penalty_context_builder ctx(static_cast<std::int32_t>(V)), want(static_cast<std::int32_t>(V));
    std::vector<std::int32_t> row_params;
    for (std::size_t b = 0; b < B; ++b) {
      const auto lo = static_cast<std::size_t>(in.node_indptr[b]), hi = static_cast<std::size_t>(in.node_indptr[b + 1]);
      const auto tokens = in.tokens.subspan(lo, hi - lo), parents = in.parents.subspan(lo, hi - lo);
      row_params.insert(row_params.end(), hi - lo + 1, static_cast<std::int32_t>(b));
      const penalty_history* h = in.histories[b];
      if (in.sampling[b]->repetition_penalty == 1.0f && in.sampling[b]->contextual_penalty == 1.0f) {
        CHECK(h == nullptr);
        for (std::size_t r = 0; r <= hi - lo; ++r) ctx.add_row(-1, {});
        continue;
      }
      REQUIRE(h != nullptr);
      REQUIRE(h->length() == static_cast<std::int64_t>(in.committed[b].size()));
      want.clear();
      want.add_context(in.committed[b]);
      CHECK(std::vector<std::int32_t>(h->distinct().begin(), h->distinct().end()) ==
            std::vector<std::int32_t>(want.distinct().begin(), want.distinct().end()));
      CHECK(std::vector<std::int32_t>(h->last().begin(), h->last().end()) ==
            std::vector<std::int32_t>(want.last().begin(), want.last().end()));
      ++*checked;
      ctx.add_tree_rows(ctx.add_context(*h), tokens, parents);
    }
    std::vector<float> processed(static_cast<std::size_t>(rows * V));
    for (std::int64_t i = 0; i < rows; ++i)
      for (std::int64_t v = 0; v < V; ++v) processed[static_cast<std::size_t>(i * V + v)] = in.logits.data()[i * in.logits.stride(0) + v];
    std::vector<sampling_params> params;
    for (const sampling_params* p : in.sampling) params.push_back(*p);
    std::vector<std::int32_t> status(3), acc(in.tokens.size()), num(B), bonus(B), emitted(static_cast<std::size_t>(rows));
    const auto m1 = [](auto& x) { return make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())}); };
    const auto c1 = [](std::span<const std::int32_t> x) { return make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())}); };
    process_logits_batch(host{}, make_view<2>(processed.data(), {rows, V}),
                         make_view<1>(static_cast<const sampling_params*>(params.data()), {static_cast<std::int64_t>(B)}),
                         m1(row_params), ctx.view(), m1(status));
    REQUIRE(status[0] == 0);
    verify_greedy_batch(host{}, c1(in.node_indptr), c1(in.tokens), c1(in.parents),
                        make_view<2>(static_cast<const float*>(processed.data()), {rows, V}), m1(acc), m1(num), m1(bonus),
                        m1(emitted), m1(status));
    out = {};
    for (std::size_t b = 0; b < B; ++b) {
      const auto first = acc.begin() + in.node_indptr[b];
      out.push_back(verify_result{std::vector<std::int32_t>(first, first + num[b]), bonus[b]});
    }
  }
};

TEST_CASE("device logits with penalties: each request's penalty_history kept across steps, the same outputs as host "
          "verification",
          "[decoder][batch]") {
  // Requests with repetition and contextual penalties (small windows, so tokens enter and leave them)
  // and some without, joining, finishing and aborting; the device-logits batch hands its verifier a
  // history per penalized request, checked against the committed tokens at every step, and its
  // outputs equal the host batch's (process_tree_logits over the committed tokens, greedy).
  auto arrivals = random_arrivals(37, 14);
  for (std::size_t i = 0; i < arrivals.size(); ++i) {
    auto& sp = arrivals[i].opt.sampling;
    if (i % 3 != 2) sp.repetition_penalty = 1.0f + 0.4f * static_cast<float>(i % 4);
    if (i % 2 == 0) sp.contextual_penalty = 1.5f, sp.penalty_window = 2 + static_cast<int>(i % 5);
  }
  llama_model<double> m_host(cfg, weights(), 3, 1024), m_dev(cfg, weights(), 3, 1024);
  batched_only<float> t_host{&m_host, memory_space::host, 0, 0, {}, {}};
  batched_only<float> t_dev{&m_dev, memory_space::device, 0, 0, {}, {}};
  speculative_batch<batched_only<float>, ngram_drafter, trie_tree_builder, greedy_verifier> on_host(t_host);
  int checked = 0;
  speculative_batch<batched_only<float>, ngram_drafter, trie_tree_builder, array_penalty_verifier> on_dev(
      t_dev, {}, {}, array_penalty_verifier{{}, &checked});
  const auto want = drive(on_host, arrivals);
  CHECK(drive(on_dev, arrivals) == want);
  CHECK(checked > 30);
  // the penalties matter here: without them the same arrivals decode differently
  auto plain = arrivals;
  for (auto& a : plain) a.opt.sampling.repetition_penalty = a.opt.sampling.contextual_penalty = 1.0f;
  llama_model<double> m_plain(cfg, weights(), 3, 1024);
  speculative_batch<llama_model<double>, ngram_drafter, trie_tree_builder, greedy_verifier> no_penalty(m_plain);
  CHECK(drive(no_penalty, plain) != want);
}

TEST_CASE("device logits: non-float rows and a bad verify_batch result are refused before any commit", "[decoder][batch]") {
  using Catch::Contains;
  const std::vector<std::int32_t> p{1, 2, 3};
  {
    llama_model<double> model(cfg, weights(), 1, 1024);
    batched_only<half> dev{&model, memory_space::device, 0, 0, {}, {}};
    speculative_batch<batched_only<half>, ngram_drafter, trie_tree_builder, array_greedy_verifier> batch(dev);
    batch.add_request(1, p, {.max_new_tokens = 8, .draft_depth = 2});
    REQUIRE_THROWS_WITH(batch.step(), Contains("target logits") && Contains("float elements"));
    CHECK(batch.tokens(1).size() == 3);
  }
  {  // device rows at a null pointer
    struct null_rows : batched_only<float> {
      strided_view<float, 2> forward_batch(const target_batch& b) {
        return make_view<2>(static_cast<float*>(nullptr), {b.total_rows(), vocab_size()}, memory_space::device);
      }
    };
    llama_model<double> model(cfg, weights(), 1, 1024);
    null_rows dev{{&model, memory_space::device, 0, 0, {}, {}}};
    speculative_batch<null_rows, ngram_drafter, trie_tree_builder, array_greedy_verifier> batch(dev);
    batch.add_request(1, p, {.max_new_tokens = 8, .draft_depth = 2});
    REQUIRE_THROWS_WITH(batch.step(), Contains("target logits") && Contains("non-null"));
    CHECK(batch.tokens(1).size() == 3);
  }
  using fault = bad_batch_verifier::fault;
  for (const fault kind : {fault::short_result, fault::bad_node, fault::bad_offsets}) {
    llama_model<double> model(cfg, weights(), 2, 1024);
    batched_only<float> dev{&model, memory_space::device, 0, 0, {}, {}};
    speculative_batch<batched_only<float>, ngram_drafter, trie_tree_builder, bad_batch_verifier> batch(
        dev, {}, {}, bad_batch_verifier{{}, kind});
    batch.add_request(1, p, {.max_new_tokens = 8, .draft_depth = 2});
    batch.add_request(2, p, {.max_new_tokens = 8, .draft_depth = 2});
    if (kind == fault::short_result)
      REQUIRE_THROWS_WITH(batch.step(), Contains("verify_batch") && Contains("one entry per request"));
    else if (kind == fault::bad_offsets)
      REQUIRE_THROWS_WITH(batch.step(), Contains("verify_batch") && Contains("accepted_indptr"));
    else
      REQUIRE_THROWS(batch.step());
    CHECK(batch.tokens(1).size() == 3);  // nothing committed or emitted
    CHECK(batch.tokens(2).size() == 3);
  }
}

TEST_CASE("continuous batching at T > 0 is distributed as the target's sampling (chi-square)", "[decoder][batch]") {
  // 3000 requests of 3 tokens, 4 slots, each joining as soon as a slot frees: the joint law of the first
  // two tokens against the exact autoregressive law (distribution_util.hpp). One seed for all: the
  // requests differ only by id, so this also checks that id-keyed streams are independent.
  using namespace distribution;
  llama_model<double> target(distribution::cfg, distribution::weights(), 4, 64);
  speculative_batch<llama_model<double>, ngram_drafter, trie_tree_builder, sample_and_match_verifier> batch(target);
  const generation_options opt{.max_new_tokens = 3, .sampling = distribution::params, .seed = 77, .draft_depth = 3,
                               .draft_width = 2};
  std::vector<int> counts(V * V, 0);
  std::map<std::uint32_t, std::vector<std::int32_t>> got;
  std::uint32_t next = 0;
  while (next < static_cast<std::uint32_t>(runs) || batch.active() > 0) {
    while (next < static_cast<std::uint32_t>(runs) && batch.free_slots() > 0) batch.add_request(next++, distribution::prompt, opt);
    for (const auto& out : batch.step()) {
      auto& g = got[out.id];
      g.insert(g.end(), out.tokens.begin(), out.tokens.end());
      if (out.finished) {
        REQUIRE(g.size() == 3);
        ++counts[g[0] * V + g[1]];
        got.erase(out.id);
      }
    }
  }
  const auto [stat, crit] = chi_square(counts, exact_joint(), runs);
  INFO("chi2 " << stat << " critical " << crit << " tau " << batch.stats().tau());
  CHECK(stat < crit);
  CHECK(batch.stats().accepted > 0);
  CHECK(batch.stats().steps > batch.stats().batch_steps);  // several requests per target call
}

namespace {
// A sampling drafter with a fixed q per depth: q_d(v) proportional to 1 + ((v + d) mod 3). It copies
// its q rows into draft_candidates::q (q_mode::copy), hands over a view of its own buffer
// (draft_candidates::q_rows, in `space`; q_mode::view) or gives none (q_mode::none: the verifier
// then uses one-hot rows at the drafted tokens, also exact but with other draws).
enum class q_mode { copy, view, none };
struct fixed_q_drafter {
  static constexpr draft_output provides = draft_output::q_rows;
  q_mode mode = q_mode::copy;
  memory_space space = memory_space::host;
  std::vector<float> own{};
  void reset(int) {}
  void propose(const draft_request& req, draft_candidates& out) {
    out.clear();
    const int V = distribution::V;
    own.assign(static_cast<std::size_t>(req.depth) * V, 0.0f);
    for (int d = 0; d < req.depth; ++d) {
      float* q = own.data() + static_cast<std::size_t>(d) * V;
      float s = 0;
      for (int v = 0; v < V; ++v) s += q[v] = 1.0f + static_cast<float>((v + d) % 3);
      for (int v = 0; v < V; ++v) q[v] /= s;
      out.chain.push_back({sample_from_probs(std::span<const float>(q, static_cast<std::size_t>(V)), *req.rng), 0.0f});
    }
    out.vocab = V;
    if (mode == q_mode::copy) out.q = own;
    else if (mode == q_mode::view) out.q_rows = strided_view<const float, 2>(own.data(), {req.depth, V}, {V, 1}, space);
  }
};
}  // namespace

TEST_CASE("draft q rows handed over as a view verify exactly as copied rows; device rows are refused", "[decoder][batch]") {
  using Catch::Contains;
  using batch_t = speculative_batch<llama_model<double>, fixed_q_drafter, chain_tree_builder, chain_speculative_verifier>;
  const generation_options opt{.max_new_tokens = 12, .sampling = distribution::params, .draft_depth = 3};
  auto run = [&](q_mode mode, std::uint32_t id) {
    llama_model<double> target(distribution::cfg, distribution::weights(), 1, 64);
    batch_t batch(target, fixed_q_drafter{mode, memory_space::host, {}});
    return drive(batch, {arrival{id, 0, distribution::prompt, opt}}).at(id).first;
  };
  int differs_from_one_hot = 0;
  for (std::uint32_t id = 0; id < 40; ++id) {
    const auto copied = run(q_mode::copy, id);
    CHECK(copied == run(q_mode::view, id));
    differs_from_one_hot += copied != run(q_mode::none, id);
  }
  CHECK(differs_from_one_hot > 0);  // the rows are read, not ignored
  llama_model<double> target(distribution::cfg, distribution::weights(), 1, 64);
  batch_t on_device(target, fixed_q_drafter{q_mode::view, memory_space::device, {}});
  on_device.add_request(1, distribution::prompt, opt);
  REQUIRE_THROWS_WITH(on_device.step(), Contains("draft.q_rows") && Contains("host-accessible"));
}

TEST_CASE("a target with commit_batch is committed once per step, with the same outputs", "[decoder][batch]") {
  const auto arrivals = random_arrivals(21, 8);
  llama_model<double> m1(cfg, weights(), 3, 1024), m2(cfg, weights(), 3, 1024);
  batched_only<float> per_entry{&m1, memory_space::host, 0, 0, {}, {}};
  batched_commit<float> once{{&m2, memory_space::host, 0, 0, {}, {}}, 0};
  speculative_batch<batched_only<float>, ngram_drafter, trie_tree_builder, greedy_verifier> a(per_entry);
  speculative_batch<batched_commit<float>, ngram_drafter, trie_tree_builder, greedy_verifier> b(once);
  const auto ga = drive(a, arrivals), gb = drive(b, arrivals);
  CHECK(ga == gb);
  CHECK(once.commit_calls == b.stats().batch_steps);
  CHECK(b.stats().steps > b.stats().batch_steps);
}

namespace {
// A toy target (next token = context token + 1 mod V) whose vocabulary may change after a number of
// vocab_size() calls, and whose release may throw once.
struct toy_next {
  using logit_type = float;
  int V = 8;
  mutable int vocab_calls = 0;
  int vocab_after = -1, switch_at = 1 << 30;
  int releases = 0;
  bool throw_on_first_release = false;
  std::function<void()> on_prefill, on_forward, on_release;  // a target that calls back into its batch
  int vocab_size() const { return ++vocab_calls > switch_at ? vocab_after : V; }
  int max_requests() const { return 4; }
  void prefill(int, std::span<const std::int32_t>) {
    if (on_prefill) on_prefill();
  }
  void forward(int, std::int32_t root, const token_tree& t, std::span<float> logits) {
    if (on_forward) on_forward();
    const auto n = static_cast<std::size_t>(t.size());
    const std::size_t v = logits.size() / (n + 1);
    std::fill(logits.begin(), logits.end(), 0.0f);
    logits[static_cast<std::size_t>(root + 1) % v] = 5.0f;
    for (std::size_t i = 0; i < n; ++i) logits[(i + 1) * v + static_cast<std::size_t>(t.token(static_cast<int>(i)) + 1) % v] = 5.0f;
  }
  void commit(int, std::span<const std::int32_t>) {}
  void release(int) {
    if (on_release) on_release();
    if (releases++ == 0 && throw_on_first_release) throw std::runtime_error("release failed once");
  }
};

// A batched target whose logits view claims rows 2^62 elements apart.
struct far_rows {
  std::vector<float> buf;
  int vocab_size() const { return 8; }
  int max_requests() const { return 4; }
  void prefill(int, std::span<const std::int32_t>) {}
  strided_view<float, 2> forward_batch(const target_batch& b) {
    buf.assign(static_cast<std::size_t>(b.total_rows()) * 8, 0.0f);
    return strided_view<float, 2>(buf.data(), {b.total_rows(), std::int64_t{8}}, {std::int64_t{1} << 62, 1});
  }
  void commit(int, std::span<const std::int32_t>) {}
};
}  // namespace

TEST_CASE("a target that misbehaves through its own type is refused: vocabulary, release, batch arrays, logits strides",
          "[decoder][batch]") {
  using Catch::Contains;
  const std::vector<std::int32_t> p{1, 2, 3};
  {  // vocab_size() drops to 0 after add_request: step and calibration refuse it (no division by 0)
    toy_next t;
    t.switch_at = 1, t.vocab_after = 0;
    speculative_batch<toy_next, ngram_drafter, trie_tree_builder, greedy_verifier> b(t);
    b.add_request(7, p, {.max_new_tokens = 32, .adaptive_depth = true});
    REQUIRE_THROWS_WITH(b.calibrate_costs(7), Contains("'target.vocab_size()'") && Contains("got 0"));
    REQUIRE_THROWS_WITH(b.step(), Contains("'target.vocab_size()'"));
  }
  {  // it shrinks below the request's last token: the root is refused before the forward
    toy_next t;
    t.switch_at = 1, t.vocab_after = 3;
    speculative_batch<toy_next, ngram_drafter, trie_tree_builder, greedy_verifier> b(t);
    b.add_request(7, p, {.max_new_tokens = 4});
    REQUIRE_THROWS_WITH(b.step(), Contains("'root (the request's last token)'") && Contains("got 3"));
    CHECK(b.tokens(7).size() == 3);
  }
  {  // draft_depth is bounded for every request, adaptive or not (planning sizes arrays by it)
    toy_next t;
    speculative_batch<toy_next, ngram_drafter, trie_tree_builder, greedy_verifier> b(t);
    REQUIRE_THROWS_WITH(b.add_request(1, p, {.draft_depth = INT_MAX}), Contains("max_draft_depth"));
    CHECK(b.add_request(1, p, {.draft_depth = max_draft_depth}) == 0);
  }
  {  // a release that throws: every finished request has still left (none generates past its EOS)
    toy_next t;
    t.throw_on_first_release = true;
    speculative_batch<toy_next, ngram_drafter, trie_tree_builder, greedy_verifier> b(t);
    b.add_request(1, p, {.max_new_tokens = 1});
    b.add_request(2, p, {.max_new_tokens = 10, .eos = 4});  // emits 4 in its first step
    REQUIRE_THROWS_WITH(b.step(), Contains("release failed once"));
    CHECK(b.active() == 0);
    CHECK_FALSE(b.contains(1));
    CHECK_FALSE(b.contains(2));
    CHECK(t.releases == 2);
    // ... and their outputs are not lost: the next step returns them (no request is left to step)
    CHECK(b.carried_outputs() == 2);
    const auto late = b.step();
    REQUIRE(late.size() == 2);
    for (std::size_t i = 0; i < 2; ++i) {
      CHECK(late[i].id == i + 1);
      CHECK(late[i].finished);
      CHECK(late[i].tokens == std::vector<std::int32_t>{4});
    }
    CHECK(late[1].reason == stop_reason::eos);
    CHECK(b.carried_outputs() == 0);
    CHECK(b.step().empty());
  }
  {  // a request that goes on reports the tokens of the step whose release threw in its next step,
     // after the carried outputs of the requests that finished in it
    toy_next t;
    t.throw_on_first_release = true;
    speculative_batch<toy_next, ngram_drafter, trie_tree_builder, greedy_verifier> b(t);
    b.add_request(1, p, {.max_new_tokens = 1});
    b.add_request(2, p, {.max_new_tokens = 6});
    b.add_request(3, p, {.max_new_tokens = 10, .eos = 4});
    REQUIRE_THROWS_WITH(b.step(), Contains("release failed once"));
    REQUIRE(b.active() == 1);
    const auto next = b.step();
    REQUIRE(next.size() == 3);
    CHECK((next[0].id == 1 && next[0].finished && next[1].id == 3 && next[1].finished));
    CHECK(next[2].id == 2);
    std::vector<std::int32_t> streamed(next[2].tokens.begin(), next[2].tokens.end());
    while (b.active() > 0)
      for (const auto& o : b.step()) streamed.insert(streamed.end(), o.tokens.begin(), o.tokens.end());
    CHECK(streamed == std::vector<std::int32_t>{4, 5, 6, 7, 0, 1});  // next token = last + 1 mod 8
  }
  {  // the adapter checks a hand-built batch's arrays; target_batch's accessors check the entry
    toy_next t;
    batched_target_adapter<toy_next> a(t);
    token_tree tree;
    token_tree_batch trees;
    trees.push_back(tree, 3), trees.push_back(tree, 3);
    const std::vector<int> slots{0, 1};
    const std::vector<std::int32_t> roots{3, 3}, bad{0, 4, 2}, wrong_count{0, 2, 3}, good{0, 1, 2};
    const std::vector<const token_tree*> ptrs{&tree, &tree};
    REQUIRE_THROWS_WITH(a.forward_batch(target_batch{slots, roots, trees, bad, ptrs}),
                        Contains("non-decreasing row_indptr"));
    REQUIRE_THROWS_WITH(a.forward_batch(target_batch{slots, roots, trees, wrong_count, ptrs}),
                        Contains("n_b + 1 rows for entry 0"));
    CHECK(a.forward_batch(target_batch{slots, roots, trees, good, ptrs}).extent(0) == 2);
    const target_batch tb{slots, roots, trees, good, ptrs};
    REQUIRE_THROWS_WITH(tb.tokens(3), Contains("target_batch::tokens") && Contains("'b'"));
    REQUIRE_THROWS_WITH(tb.parents(-1), Contains("target_batch::parents"));
    CHECK(tb.tokens(1).empty());
  }
  {  // a target that calls back into the batch that is calling it: refused, and the batch still works
    toy_next t;
    using batch_t = speculative_batch<toy_next, ngram_drafter, trie_tree_builder, greedy_verifier>;
    batch_t b(t);
    const std::string refused = "re-entrant call";
    t.on_prefill = [&] { (void)b.add_request(9, p); };
    REQUIRE_THROWS_WITH(b.add_request(1, p, {.max_new_tokens = 4}),
                        Contains("add_request") && Contains("not made from the batch's own target") &&
                            Contains("got a re-entrant call"));
    CHECK(b.active() == 0);
    t.on_prefill = {};
    b.add_request(1, p, {.max_new_tokens = 4});
    b.add_request(2, p, {.max_new_tokens = 1});
    for (const auto& call : std::vector<std::function<void()>>{[&] { (void)b.step(); }, [&] { (void)b.abort(2); },
                                                               [&] { (void)b.add_request(3, p); },
                                                               [&] { b.calibrate_costs(1); }}) {
      t.on_forward = call;
      REQUIRE_THROWS_WITH(b.step(), Contains(refused));
      CHECK(b.active() == 2);
      CHECK(b.tokens(1).size() == 3);  // nothing committed by the refused step
    }
    t.on_forward = {};
    t.on_release = [&] { (void)b.abort(1); };  // request 2 finishes in this step and is released
    REQUIRE_THROWS_WITH(b.step(), Contains(refused));
    CHECK_FALSE(b.contains(2));
    CHECK(b.contains(1));
    t.on_release = {};
    const auto after = b.step();  // the batch is usable again after every refusal:
    REQUIRE(after.size() == 2);   // request 2's output of the step whose release threw, then request 1's
    CHECK((after[0].id == 2 && after[0].finished && after[1].id == 1));
    CHECK(b.abort(1));
  }
  {  // logits rows whose offsets overflow are refused before a row is read
    far_rows t;
    speculative_batch<far_rows, ngram_drafter, trie_tree_builder, greedy_verifier> b(t);
    for (std::uint32_t id = 0; id < 3; ++id) b.add_request(id, p, {.max_new_tokens = 4});
    REQUIRE_THROWS_WITH(b.step(), Contains("'target logits'") && Contains("fit int64"));
  }
}

namespace {
// A 4-token target whose integers (vocab_size(), max_requests()) are of type I and whose per-request
// logits are `hi` for token 1 and `lo` elsewhere, of type L.
template <class I, class L>
struct typed_target {
  using logit_type = L;
  I vocab = 4, slots = 1;
  L lo{}, hi{};
  I vocab_size() const { return vocab; }
  I max_requests() const { return slots; }
  void prefill(int, std::span<const std::int32_t>) {}
  void forward(int, std::int32_t, const token_tree&, std::span<L> logits) {
    for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = i % 4 == 1 ? hi : lo;
  }
  void commit(int, std::span<const std::int32_t>) {}
};

// The same logits as a batched double target whose view has inner stride 2 (gathered by the batch).
struct strided_double_target {
  double lo = 0, hi = 0;
  std::vector<double> buf;
  int vocab_size() const { return 4; }
  int max_requests() const { return 1; }
  void prefill(int, std::span<const std::int32_t>) {}
  strided_view<double, 2> forward_batch(const target_batch& b) {
    buf.assign(static_cast<std::size_t>(b.total_rows()) * 8, std::numeric_limits<double>::quiet_NaN());
    for (std::size_t i = 0; i < buf.size(); i += 2) buf[i] = (i / 2) % 4 == 1 ? hi : lo;
    return strided_view<double, 2>(buf.data(), {b.total_rows(), std::int64_t{4}}, {8, 2});
  }
  void commit(int, std::span<const std::int32_t>) {}
};

template <class Target>
std::vector<std::int32_t> decode_three(Target& t) {
  speculative_batch<Target, ngram_drafter, trie_tree_builder, greedy_verifier> b(t);
  b.add_request(7, std::vector<std::int32_t>{1, 2, 3}, {.max_new_tokens = 3});
  std::vector<std::int32_t> out;
  while (b.active() > 0)
    for (const auto& o : b.step()) out.insert(out.end(), o.tokens.begin(), o.tokens.end());
  return out;
}
}  // namespace

TEST_CASE("a target's wide integers and double logits beyond float's range are refused, not narrowed",
          "[decoder][batch][errors]") {
  using Catch::Contains;
  const std::vector<std::int32_t> p{1, 2, 3};
  {  // vocab_size() = 2^32 + 4 was decoded as a vocabulary of 4
    typed_target<std::int64_t, float> t{(std::int64_t{1} << 32) + 4, 1, 0.0f, 1.0f};
    speculative_batch<decltype(t), ngram_drafter, trie_tree_builder, greedy_verifier> b(t);
    REQUIRE_THROWS_WITH(b.add_request(7, p), Contains("speculative_batch::add_request") &&
                                                 Contains("'target.vocab_size()'") &&
                                                 Contains("a value that fits in int") && Contains("got 4294967300"));
    t.vocab = 4;  // the same target with an int-sized vocabulary decodes
    CHECK(decode_three(t) == std::vector<std::int32_t>{1, 1, 1});
  }
  {  // max_requests() = 2^32 + 1 was read as 1 slot
    typed_target<std::int64_t, float> t{4, (std::int64_t{1} << 32) + 1, 0.0f, 1.0f};
    using batch_t = speculative_batch<decltype(t), ngram_drafter, trie_tree_builder, greedy_verifier>;
    REQUIRE_THROWS_WITH(batch_t(t), Contains("specdec::speculative_batch") && Contains("'target.max_requests()'") &&
                                        Contains("a value that fits in int") && Contains("got 4294967297"));
  }
  const std::string in_range = "logits within float's range (|x| <= FLT_MAX, or +-inf)";
  {  // finite doubles below -FLT_MAX were all -inf after narrowing ("all -inf", a value never returned)
    typed_target<int, double> t{4, 1, -2e300, -1e300};
    REQUIRE_THROWS_WITH(decode_three(t), Contains("speculative_batch::step") && Contains("'target logits'") &&
                                             Contains(in_range + " (row 0, token 0)") && Contains("got -2e+300"));
  }
  {  // a finite 1e300 read as +inf ("no +inf")
    typed_target<int, double> t{4, 1, 0.0, 1e300};
    REQUIRE_THROWS_WITH(decode_three(t), Contains(in_range + " (row 0, token 1)") && Contains("got 1e+300"));
    t.hi = 1e30;  // within float's range: converted and decoded
    CHECK(decode_three(t) == std::vector<std::int32_t>{1, 1, 1});
  }
  {  // the same through a strided double view
    strided_double_target t{0.0, 1e300, {}};
    REQUIRE_THROWS_WITH(decode_three(t), Contains(in_range + " (row 0, token 1)") && Contains("got 1e+300"));
    t.hi = 1.0;
    CHECK(decode_three(t) == std::vector<std::int32_t>{1, 1, 1});
  }
}
