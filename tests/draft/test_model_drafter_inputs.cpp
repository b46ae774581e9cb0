// Bad input that reaches the model drafters through a user's own model or through the request, found
// by a session-56 review (each reproduced first under ASan/UBSan or as a wrong draft), now a clear
// error:
//  - chain_drafter: a negative cache_length() (read tokens before the context);
//  - longspec_drafter: a negative absorbed() (read tokens before the context), a negative
//    receptive_field() (no step ran: the chain was drafted from a stale root row);
//  - integer answers wider than int (vocab_size() of 2^32 + 4 drafted as 4, num_draft_heads());
//  - a context of more than 2^31 - 1 - max_draft_depth tokens (its size was narrowed to int);
//  - depth past max_draft_depth, and a multi-draft width past max_multi_drafts (unbounded forwards,
//    unbounded memory);
//  - double logits outside float's range, narrowed before their check (refused as "inf", or taken
//    for masked tokens);
//  - (session 65) self_drafter dropping a request's n-gram pool for a new sequence it then refused;
//  - (session 66) chain_drafter / longspec_drafter handing a bad slot or tokens outside the draft
//    vocabulary to the user's model, a width of 0 drafted as 1, longspec_drafter keeping its
//    speculation after a later depth threw.
#include <catch2/catch.hpp>

#include <sys/mman.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include "specdec/draft/chain_drafter.hpp"
#include "specdec/draft/longspec_drafter.hpp"
#include "specdec/draft/ngram_drafter.hpp"
#include "specdec/draft/self_drafter.hpp"

namespace sd = specdec;
using Catch::Contains;

namespace {
// A chain_drafter model over 4 tokens whose logits favour token 2; cache_length and vocab_size are
// what the test sets (of type I).
template <class I = int>
struct chain_model {
  using logit_type = float;
  I cache = 0, vocab = 4;
  int forwards = 0;
  I vocab_size() const { return vocab; }
  int max_requests() const { return 1; }
  void prefill(int, std::span<const std::int32_t>) {}
  void forward(int, std::int32_t, const sd::token_tree&, std::span<float> l) {
    ++forwards;
    std::fill(l.begin(), l.end(), 0.0f);
    l[2] = 5.0f;
  }
  void commit(int, std::span<const std::int32_t>) {}
  I cache_length(int) const { return cache; }
  void truncate(int, int) {}
};

// A longspec_drafter model whose absorbed() and receptive_field() the test sets; its rows favour 2.
struct longspec_model {
  using logit_type = float;
  int absorbed_tokens = 0, field = 1000, steps = 0;
  int vocab_size() const { return 4; }
  int absorbed(int) const { return absorbed_tokens; }
  void reset(int) { absorbed_tokens = 0; }
  void step(int, std::int32_t, int, bool, std::span<float> l) {
    ++steps;
    std::fill(l.begin(), l.end(), 0.0f);
    if (!l.empty()) l[2] = 5.0f;
  }
  void discard_speculation(int) {}
  int receptive_field() const { return field; }
};

// Double logits: a row of `big` with token 2 at big + 1 (finite in double).
struct double_model {
  using logit_type = double;
  double big = 0.0;
  int vocab_size() const { return 4; }
  int max_requests() const { return 1; }
  void prefill(int, std::span<const std::int32_t>) {}
  void forward(int, std::int32_t, const sd::token_tree&, std::span<double> l) { fill(l); }
  void commit(int, std::span<const std::int32_t>) {}
  int cache_length(int) const { return 2; }
  void truncate(int, int) {}
  int num_draft_heads() const { return 1; }
  void self_draft(int, std::span<const std::int32_t>, std::span<double> rows) { fill(rows); }
  void reset_draft(int) {}
  void fill(std::span<double> l) const {
    std::fill(l.begin(), l.end(), big);
    for (std::size_t i = 2; i < l.size(); i += 4) l[i] = big + 1.0;
  }
};

struct wide_self_model {
  using logit_type = float;
  std::int64_t heads = 2, vocab = 4;
  std::int64_t vocab_size() const { return vocab; }
  std::int64_t num_draft_heads() const { return heads; }
  void self_draft(int, std::span<const std::int32_t>, std::span<float> rows) { std::fill(rows.begin(), rows.end(), 0.0f); }
  void reset_draft(int) {}
};

// Vocabulary 8; every draft row puts its mass on token 3.
struct small_self_model {
  using logit_type = float;
  int vocab_size() const { return 8; }
  int num_draft_heads() const { return 1; }
  void self_draft(int, std::span<const std::int32_t>, std::span<float> rows) {
    std::fill(rows.begin(), rows.end(), 0.0f);
    rows[3] = 1.0f;
  }
  void reset_draft(int) {}
};
}  // namespace

TEST_CASE("self_drafter: a rejected new sequence keeps the request's n-gram pool", "[draft][inputs]") {
  // A shorter token list (a new sequence) dropped the request's pool before its tokens were checked:
  // a call refused for an out-of-vocabulary id had already wiped the n-grams (session-65 review).
  small_self_model m;
  sd::self_drafter<small_self_model> d(m, {.ngram_candidates = 20, .ngram = {.n = 2}, .ngrams_from_prompt = true});
  sd::draft_candidates out;
  const std::vector<std::int32_t> a{1, 2, 3, 1, 2, 3, 1, 2}, bad{1, 99};
  d.propose({.request = 0, .tokens = a, .depth = 2}, out);
  const auto size = d.pool(0).size();
  const auto seen = d.pool(0).tokens_seen();
  REQUIRE(size > 0);
  CHECK_THROWS_AS(d.propose({.request = 0, .tokens = bad, .depth = 2}, out), sd::invalid_argument);
  CHECK(d.pool(0).size() == size);
  CHECK(d.pool(0).tokens_seen() == seen);
  // the original sequence continues where it was
  std::vector<std::int32_t> more = a;
  more.push_back(3);
  d.propose({.request = 0, .tokens = more, .depth = 2}, out);
  CHECK(d.pool(0).tokens_seen() == seen + 1);
}

TEST_CASE("chain_drafter refuses a negative cache length and integer answers wider than int", "[draft][inputs]") {
  const std::vector<std::int32_t> toks{1, 2, 3};
  sd::draft_candidates out;
  chain_model<> m;
  m.cache = -3;
  sd::chain_drafter<chain_model<>> d(m);
  REQUIRE_THROWS_WITH(d.propose({.request = 0, .tokens = toks, .depth = 1}, out),
                      Contains("'model.cache_length(request)'") && Contains(">= 0"));
  CHECK(m.forwards == 0);
  m.cache = 2;  // control: the root's row drafts token 2
  d.propose({.request = 0, .tokens = toks, .depth = 1}, out);
  REQUIRE(out.chain.size() == 1);
  CHECK(out.chain[0].token == 2);

  chain_model<std::int64_t> w;
  w.vocab = (std::int64_t{1} << 32) + 4;
  sd::chain_drafter<chain_model<std::int64_t>> dw(w);
  REQUIRE_THROWS_WITH(dw.propose({.request = 0, .tokens = toks, .depth = 1}, out),
                      Contains("'model.vocab_size()'") && Contains("fits in int") && Contains("4294967300"));
  w.vocab = 4;
  w.cache = std::int64_t{1} << 33;
  REQUIRE_THROWS_WITH(dw.propose({.request = 0, .tokens = toks, .depth = 1}, out), Contains("'model.cache_length(request)'"));
  CHECK(w.forwards == 0);
}

TEST_CASE("longspec_drafter refuses a negative absorbed count or receptive field", "[draft][inputs]") {
  const std::vector<std::int32_t> toks{1, 2, 3};
  sd::draft_candidates out;
  longspec_model m;
  sd::longspec_drafter<longspec_model> d(m);
  m.absorbed_tokens = -1000000;
  REQUIRE_THROWS_WITH(d.propose({.request = 0, .tokens = toks, .depth = 1}, out),
                      Contains("'model.absorbed(request)'") && Contains(">= 0"));
  m.absorbed_tokens = 0;
  m.field = -5;
  REQUIRE_THROWS_WITH(d.propose({.request = 0, .tokens = toks, .depth = 1}, out),
                      Contains("'model.receptive_field()'") && Contains(">= 0"));
  CHECK(m.steps == 0);
  m.field = INT_MAX;  // L - 1 - field counted in int64: every token stepped
  d.propose({.request = 0, .tokens = toks, .depth = 1}, out);
  CHECK(m.steps >= 3);  // the three context tokens stepped (the last one gives the root row)
  REQUIRE(out.chain.size() == 1);
  CHECK(out.chain[0].token == 2);
}

TEST_CASE("self_drafter refuses head and vocabulary counts wider than int", "[draft][inputs]") {
  const std::vector<std::int32_t> toks{1};
  sd::draft_candidates out;
  wide_self_model m;
  sd::self_drafter<wide_self_model> d(m, {.ngram_candidates = 0});
  m.heads = (std::int64_t{1} << 32) + 1;
  REQUIRE_THROWS_WITH(d.propose({.request = 0, .tokens = toks, .depth = 4}, out), Contains("'model.num_draft_heads()'"));
  m.heads = 2;
  m.vocab = (std::int64_t{1} << 32) + 4;
  REQUIRE_THROWS_WITH(d.propose({.request = 0, .tokens = toks, .depth = 4}, out), Contains("'model.vocab_size()'"));
  m.vocab = 4;
  d.propose({.request = 0, .tokens = toks, .depth = 4}, out);  // control
  CHECK(out.chain.size() == 3);  // the root row and two heads' rows
}

TEST_CASE("model drafters bound the depth, the multi-draft width and the context length", "[draft][inputs]") {
  const std::vector<std::int32_t> toks{1, 2, 3};
  sd::draft_candidates out;
  chain_model<> m;
  m.cache = 2;
  sd::chain_drafter<chain_model<>> d(m);
  REQUIRE_THROWS_WITH(d.propose({.request = 0, .tokens = toks, .depth = sd::max_draft_depth + 1}, out),
                      Contains("'req.depth'") && Contains("max_draft_depth"));
  CHECK(m.forwards == 0);
  sd::philox_stream rng(1, 2);
  sd::chain_drafter<chain_model<>> multi(m, sd::multi_draft_params{});
  REQUIRE_THROWS_WITH(multi.propose({.request = 0, .tokens = toks, .depth = 1, .width = INT_MAX, .rng = &rng}, out),
                      Contains("'req.width'") && Contains("max_multi_drafts"));
  CHECK(m.forwards == 0);
  multi.propose({.request = 0, .tokens = toks, .depth = 2, .width = 3, .rng = &rng}, out);  // control
  CHECK(out.sequences.size() == 2);  // three drafts: the chain and two more

  // A context past 2^31 - 1 - max_draft_depth tokens: read-only zero pages that are never touched
  // (the size is refused before any token is read). Skipped where the address space is limited.
  const std::size_t n = std::size_t{INT_MAX} - sd::max_draft_depth + 1;
  void* p = mmap(nullptr, n * sizeof(std::int32_t), PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    WARN("mmap of " << n * sizeof(std::int32_t) << " bytes failed: the long-context case is skipped");
    return;
  }
  const std::span<const std::int32_t> huge(static_cast<const std::int32_t*>(p), n);
  longspec_model lm;
  sd::longspec_drafter<longspec_model> ld(lm);
  CHECK_THROWS_WITH(d.propose({.request = 0, .tokens = huge, .depth = 1}, out), Contains("'req.tokens.size()'"));
  CHECK_THROWS_WITH(ld.propose({.request = 0, .tokens = huge, .depth = 1}, out), Contains("'req.tokens.size()'"));
  CHECK(lm.steps == 0);
  munmap(p, n * sizeof(std::int32_t));
}

TEST_CASE("double draft logits outside float's range are refused by name, not narrowed", "[draft][inputs]") {
  const std::vector<std::int32_t> toks{1, 2, 3};
  sd::draft_candidates out;
  double_model m;
  const sd::sampling_params sampling{.temperature = 1.0f};
  sd::philox_stream rng(3, 4);
  sd::chain_drafter<double_model> chain(m);
  sd::self_drafter<double_model> self(m, {.ngram_candidates = 0});
  const sd::draft_request sampled{.request = 0, .tokens = toks, .depth = 1, .sampling = &sampling, .rng = &rng};
  m.big = -1e39;  // finite in double, -inf as a float
  REQUIRE_THROWS_WITH(chain.propose(sampled, out), Contains("float's range") && Contains("-1e+39"));
  REQUIRE_THROWS_WITH(self.propose({.request = 0, .tokens = toks, .depth = 2}, out), Contains("float's range"));
  m.big = 1e39;
  REQUIRE_THROWS_WITH(self.propose({.request = 0, .tokens = toks, .depth = 2}, out), Contains("float's range"));
  m.big = -50.0;  // control: the same rows within float's range
  chain.propose(sampled, out);
  REQUIRE(out.chain.size() == 1);
  self.propose({.request = 0, .tokens = toks, .depth = 2}, out);
  REQUIRE(out.chain.size() == 2);
  CHECK(out.chain[0].token == 2);
}

namespace {
// A model over 4 tokens that counts the calls it gets with a slot outside [0, 2^20) or a token outside
// its vocabulary (the inputs a drafter must not hand it), and, for longspec_drafter, the speculative
// steps not yet discarded; step() throws at speculative step number `throw_at` (0 = never).
struct watching_model {
  using logit_type = float;
  mutable int bad_inputs = 0, calls = 0;
  int speculative = 0, throw_at = 0, spec_steps = 0;
  int absorbed_tokens = 0;
  int cache = 0;
  void see(int r, std::int32_t t = 0) const {
    ++calls;
    if (r < 0 || r > sd::max_request_slot || t < 0 || t >= 4) ++bad_inputs;
  }
  int vocab_size() const { return 4; }
  // chain_drafter's side
  int max_requests() const { return 1; }
  void prefill(int r, std::span<const std::int32_t> p) {
    for (auto t : p) see(r, t);
    cache = static_cast<int>(p.size());
  }
  void forward(int r, std::int32_t root, const sd::token_tree& tree, std::span<float> l) {
    see(r, root);
    for (int i = 0; i < tree.size(); ++i) see(r, tree.token(i));
    std::fill(l.begin(), l.end(), 0.0f);
    for (std::size_t i = 2; i < l.size(); i += 4) l[i] = 5.0f;
  }
  void commit(int r, std::span<const std::int32_t> acc) {
    see(r);
    cache += 1 + static_cast<int>(acc.size());
  }
  int cache_length(int r) const {
    see(r);
    return cache;
  }
  void truncate(int r, int n) {
    see(r);
    cache = std::min(cache, n);
  }
  // longspec_drafter's side
  int absorbed(int r) const {
    see(r);
    return absorbed_tokens;
  }
  void reset(int r) {
    see(r);
    absorbed_tokens = 0;
  }
  void step(int r, std::int32_t t, int, bool commit, std::span<float> l) {
    see(r, t);
    if (commit) {
      ++absorbed_tokens;
    } else {
      ++speculative;
      if (++spec_steps == throw_at) throw std::runtime_error("draft step failed");
    }
    std::fill(l.begin(), l.end(), 0.0f);
    if (!l.empty()) l[2] = 5.0f;
  }
  void discard_speculation(int r) {
    see(r);
    speculative = 0;
  }
};
}  // namespace

TEST_CASE("model drafters refuse a bad slot, width or token before their model sees it", "[draft][inputs]") {
  // chain_drafter and longspec_drafter handed a negative or huge slot and token ids outside the draft
  // model's vocabulary (a target's token the smaller draft does not know) to the user's model, which
  // indexes its state and embedding rows with them; a width of 0 was drafted as 1 (session-65 leads).
  const std::vector<std::int32_t> ok{1, 2, 3}, bad_last{1, 2, 9}, bad_first{-1, 2, 3};
  sd::draft_candidates out;
  watching_model m;
  sd::chain_drafter<watching_model> chain(m);
  sd::longspec_drafter<watching_model> longspec(m);
  const auto both = [&](const sd::draft_request& req, const char* what) {
    INFO(what);
    CHECK_THROWS_WITH(chain.propose(req, out), Contains(what));
    CHECK_THROWS_WITH(longspec.propose(req, out), Contains(what));
  };
  both({.request = -1, .tokens = ok, .depth = 2}, "'req.request'");
  both({.request = sd::max_request_slot + 1, .tokens = ok, .depth = 2}, "'req.request'");
  both({.request = 0, .tokens = ok, .depth = 2, .width = 0}, "'req.width'");
  both({.request = 0, .tokens = bad_last, .depth = 2}, "'req.tokens[2]'");
  both({.request = 0, .tokens = bad_first, .depth = 2}, "'req.tokens[0]'");
  CHECK(m.bad_inputs == 0);
  // only the tokens a step feeds are read: tokens the model absorbed earlier are not checked again
  m.cache = 2;
  chain.propose({.request = 0, .tokens = bad_first, .depth = 2}, out);
  CHECK(out.chain.size() == 2);
  m.absorbed_tokens = 2;
  longspec.propose({.request = 0, .tokens = bad_first, .depth = 2}, out);
  CHECK(out.chain.size() == 2);
  CHECK(m.bad_inputs == 0);
  CHECK(m.calls > 0);

  sd::philox_stream rng(1, 2);
  sd::chain_drafter<watching_model> multi(m, sd::multi_draft_params{});
  CHECK_THROWS_WITH(multi.propose({.request = 0, .tokens = ok, .depth = 1, .width = 0, .rng = &rng}, out),
                    Contains("'req.width'"));
  sd::ngram_drafter ngram;
  CHECK_THROWS_WITH(ngram.propose({.request = 0, .tokens = ok, .depth = 2, .width = 0}, out), Contains("'req.width'"));
}

TEST_CASE("longspec_drafter drops its speculation when a later depth throws", "[draft][inputs]") {
  // The chain's speculative steps stayed in the model after a step threw (until the next propose):
  // a caller that committed or stepped the model in between saw them as context.
  const std::vector<std::int32_t> toks{1, 2, 3};
  sd::draft_candidates out;
  watching_model m;
  m.throw_at = 2;  // the chain's second speculative step
  sd::longspec_drafter<watching_model> d(m);
  REQUIRE_THROWS_WITH(d.propose({.request = 0, .tokens = toks, .depth = 4}, out), Contains("draft step failed"));
  CHECK(m.speculative == 0);
  CHECK(out.empty());
  m.throw_at = 0;
  d.propose({.request = 0, .tokens = toks, .depth = 4}, out);  // the next proposal drafts in full
  CHECK(out.chain.size() == 4);
  CHECK(m.speculative == 0);
  CHECK(m.bad_inputs == 0);
}
