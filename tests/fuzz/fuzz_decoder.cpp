// Fuzz targets of the decoder: cost_curve, the adaptive depth's inputs that can come from outside
// (decoder/adaptive_depth.hpp): a step cost curve's text form, as a user's cache file hands it to
// speculative_batch::set_cost_curve. A parsed curve must print back to text that parses to the same
// curve, give a finite cost >= 0 at every row count, equal to a measured point where there is one, and
// feed choose_depths a choice. batch_step: the step loop an engine drives (below).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.hpp"
#include "specdec/decoder/adaptive_depth.hpp"
#include "specdec/decoder/speculative_batch.hpp"

SPECDEC_FUZZ_TARGET(cost_curve, "step_cost_curve::from_text, to_text round trip, seconds, choose_depths") {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto c = specdec::step_cost_curve::from_text(text);
  const std::string printed = c.to_text();
  specdec::step_cost_curve d;
  try {
    d = specdec::step_cost_curve::from_text(printed);
  } catch (const specdec::invalid_argument& e) {
    specdec_fuzz::finding(std::string("to_text of a parsed curve does not parse: ") + e.what());
  }
  FUZZ_CHECK(d.to_text() == printed, "round trip changed the curve:\n" + printed + "->\n" + d.to_text());
  FUZZ_CHECK(d.points() == c.points(), "round trip changed the number of points");
  if (c.empty()) return;
  for (double rows : {1.0, 1.5, 2.0, 3.0, 17.0, 1000.0, 16777216.0}) {
    const double s = c.seconds(rows);
    FUZZ_CHECK(std::isfinite(s) && s >= 0.0, "seconds(" + std::to_string(rows) + ") = " + std::to_string(s));
    FUZZ_CHECK(s == d.seconds(rows), "the reparsed curve costs rows differently");
  }
  // a measured point is its own value (one measurement per row count in a parsed curve)
  std::size_t line_start = 0;
  while (line_start < printed.size()) {
    const auto nl = printed.find('\n', line_start);
    const std::string line = printed.substr(line_start, nl - line_start);
    line_start = nl + 1;
    const auto sp = line.find(' ');
    double rows = 0, sec = 0;  // from_chars: std::stod rejects denormals, which the curve keeps
    std::from_chars(line.data(), line.data() + sp, rows);
    std::from_chars(line.data() + sp + 1, line.data() + line.size(), sec);
    FUZZ_CHECK(c.seconds(rows) == sec, "seconds at a measured row count != its value: " + line);
  }
  // choose_depths over it: one request, depths 0..3, a chain's nodes, no draft cost
  const std::vector<double> tokens{1.0, 1.5, 1.75, 1.875}, nodes{0, 1, 2, 3}, draft{0, 0, 0, 0};
  std::vector<int> got;
  const double rate = specdec::choose_depths(std::vector<specdec::depth_choice_input>{{tokens, nodes, draft}}, c, got);
  FUZZ_CHECK(got.size() == 1 && got[0] >= 0 && got[0] <= 3, "choose_depths chose no depth in range");
  FUZZ_CHECK(std::isfinite(rate) && rate > 0.0, "choose_depths rate " + std::to_string(rate));
}

// ---- batch_step ----------------------------------------------------------------------------------
// speculative_batch driven as an engine drives it, over a toy target (greedy next token of t is
// (a t + b) mod V, a deterministic rule the fuzzer picks) sized exactly prompt + max_new_tokens per
// request: requests join, are aborted, finish by length, EOS or a stop sequence; the fuzzer's drafts
// (any tokens, any width, now and then deeper than asked or out of the vocabulary) go through the trie
// builder and greedy verification; the drafter and the target's release throw now and then. After a
// step that throws, the request failed_request() names (its drafter or its drafted tree) is aborted,
// and a release failure is stepped past (the next step carries its outputs).
// Checked: every forward fits the target's capacity; failed_request() names the request whose drafter
// threw, and nothing for a release; every request that finished streamed exactly its greedy decoding
// with the stop rules, and an aborted one a prefix of it; the batch ends empty within a step bound.
namespace {
struct batch_fuzz_target {
  using logit_type = float;
  int V = 2, slots = 1;
  std::int32_t a = 1, b = 1;
  std::vector<std::int64_t> len, cap;
  int release_faults = 0;
  [[nodiscard]] std::int32_t next(std::int32_t t) const { return static_cast<std::int32_t>((a * std::int64_t{t} + b) % V); }
  [[nodiscard]] int vocab_size() const { return V; }
  [[nodiscard]] int max_requests() const { return slots; }
  void prefill(int r, std::span<const std::int32_t> prompt) { len[static_cast<std::size_t>(r)] = static_cast<std::int64_t>(prompt.size()) - 1; }
  void forward(int r, std::int32_t root, const specdec::token_tree& t, std::span<float> logits) {
    const auto s = static_cast<std::size_t>(r);
    FUZZ_CHECK(len[s] + t.size() + 1 <= cap[s], "a forward of " + std::to_string(t.size()) + " nodes at cache length " +
                                                    std::to_string(len[s]) + " past the capacity " + std::to_string(cap[s]));
    std::fill(logits.begin(), logits.end(), 0.0f);
    const auto row = [&](int i, std::int32_t prev) { logits[static_cast<std::size_t>(i * V + next(prev))] = 4.0f; };
    row(0, root);
    for (int i = 0; i < t.size(); ++i) row(i + 1, t.token(i));
  }
  void commit(int r, std::span<const std::int32_t> accepted) {
    len[static_cast<std::size_t>(r)] += 1 + static_cast<std::int64_t>(accepted.size());
  }
  void release(int) {
    if (release_faults > 0 && --release_faults % 2 == 0) throw std::runtime_error("fuzz release failed");
  }
};

struct batch_fuzz_drafter {
  specdec_fuzz::input* in = nullptr;
  int vocab = 2;  //!< the target's: most drafted tokens are in it
  int threw_slot = -1;
  void reset(int) {}
  void propose(const specdec::draft_request& q, specdec::draft_candidates& out) {
    out.clear();
    if (in->empty()) return;
    if (in->chance(3)) {
      threw_slot = q.request;
      throw std::runtime_error("fuzz drafter failed");
    }
    auto seq = [&] {  // now and then a level deeper than asked, or a token outside the vocabulary
      std::vector<specdec::draft_token> s(static_cast<std::size_t>(in->range(0, q.depth + (in->chance(3) ? 1 : 0))));
      for (auto& x : s) x = {in->chance(98) ? in->range(0, vocab - 1) : in->token(vocab), in->logprob()};
      return s;
    };
    out.chain = seq();
    for (int w = in->range(0, 3); w > 0; --w) out.sequences.push_back(seq());
  }
};
}  // namespace

SPECDEC_FUZZ_TARGET(batch_step, "speculative_batch step loop: joins, aborts, stop rules, failures, room per forward") {
  specdec_fuzz::input in(data, size);
  batch_fuzz_target target;
  target.V = in.range(2, 16);
  target.slots = in.range(1, 4);
  target.a = in.range(0, 15), target.b = in.range(0, 15);
  target.len.assign(static_cast<std::size_t>(target.slots), 0);
  target.cap.assign(static_cast<std::size_t>(target.slots), 0);
  target.release_faults = in.chance(20) ? in.range(1, 6) : 0;
  specdec::speculative_batch<batch_fuzz_target, batch_fuzz_drafter, specdec::trie_tree_builder, specdec::greedy_verifier>
      batch(target);
  batch.drafter().in = &in;
  batch.drafter().vocab = target.V;
  const int V = target.V;

  struct request {
    std::vector<std::int32_t> prompt, got;
    specdec::generation_options opt;
    bool finished = false, aborted = false;
  };
  std::vector<request> reqs;
  auto join = [&] {
    request r;
    r.prompt = in.many(static_cast<std::size_t>(in.range(1, 6)), [&] { return static_cast<std::int32_t>(in.range(0, V - 1)); });
    r.opt.max_new_tokens = in.range(0, 12);
    r.opt.draft_depth = in.range(0, 5);
    r.opt.draft_width = in.range(1, 3);
    if (in.chance(30)) r.opt.eos = in.range(0, V - 1);
    if (in.chance(30))
      r.opt.stop_sequences.push_back(in.many(static_cast<std::size_t>(in.range(1, 3)), [&] { return static_cast<std::int32_t>(in.range(0, V - 1)); }));
    const int slot = batch.add_request(static_cast<std::uint32_t>(reqs.size()), r.prompt, r.opt);
    target.cap[static_cast<std::size_t>(slot)] = static_cast<std::int64_t>(r.prompt.size()) + r.opt.max_new_tokens;
    reqs.push_back(std::move(r));
  };
  auto take = [&](std::span<const specdec::step_output> outs) {
    for (const auto& o : outs) {
      auto& r = reqs.at(o.id);
      FUZZ_CHECK(!r.finished && !r.aborted, "an output for request " + std::to_string(o.id) + " after it left");
      r.got.insert(r.got.end(), o.tokens.begin(), o.tokens.end());
      r.finished = o.finished;
    }
  };
  auto abort = [&](std::uint32_t id) {  // a release that throws: the request has left all the same
    try {
      return batch.abort(id);
    } catch (const std::runtime_error& e) {
      FUZZ_CHECK(std::string_view(e.what()) == "fuzz release failed", std::string("abort threw ") + e.what());
      FUZZ_CHECK(!batch.contains(id), "a request whose release threw is still in the batch");
      return true;
    }
  };
  for (int n = in.range(1, target.slots); n > 0; --n) join();
  for (int step = 0;; ++step) {
    FUZZ_CHECK(step < 400, "the batch made no progress in 400 steps");
    if (!in.empty()) {
      if (batch.free_slots() > 0 && in.chance(25) && reqs.size() < 24) join();
      if (batch.active() > 0 && in.chance(8)) {
        const auto id = static_cast<std::uint32_t>(in.range(0, static_cast<int>(reqs.size()) - 1));
        if (abort(id)) reqs[id].aborted = true;
      }
    }
    batch.drafter().threw_slot = -1;
    try {
      take(batch.step());
    } catch (const std::exception& e) {
      const std::string what = e.what();
      const auto failed = batch.failed_request();
      if (what.find("fuzz release failed") != std::string::npos) {
        FUZZ_CHECK(!failed, "failed_request() names a request for a release failure");
        continue;  // the next step returns the finished requests' outputs
      }
      FUZZ_CHECK(failed.has_value(), "a step threw with no request to blame: " + what);
      if (batch.drafter().threw_slot >= 0)
        FUZZ_CHECK(batch.slot_of(*failed) == batch.drafter().threw_slot, "failed_request() is not the drafter's request");
      FUZZ_CHECK(abort(*failed), "failed_request() is not active");
      reqs[*failed].aborted = true;
      continue;
    }
    if (batch.active() == 0 && (in.empty() || reqs.size() >= 24 || in.chance(30))) break;
  }
  for (std::size_t id = 0; id < reqs.size(); ++id) {
    const auto& r = reqs[id];
    FUZZ_CHECK(r.finished || r.aborted, "request " + std::to_string(id) + " neither finished nor aborted");
    std::vector<std::int32_t> want;  // greedy decoding under the stop rules
    for (std::int32_t t = r.prompt.back(); static_cast<int>(want.size()) < r.opt.max_new_tokens;) {
      want.push_back(t = target.next(t));
      if (r.opt.eos && t == *r.opt.eos) break;
      bool stop = false;
      for (const auto& s : r.opt.stop_sequences)
        stop = stop || (want.size() >= s.size() && std::equal(s.begin(), s.end(), want.end() - static_cast<std::ptrdiff_t>(s.size())));
      if (stop) break;
    }
    if (r.finished)
      FUZZ_CHECK(r.got == want, "request " + std::to_string(id) + " streamed other tokens than its greedy decoding");
    else
      FUZZ_CHECK(r.got.size() <= want.size() && std::equal(r.got.begin(), r.got.end(), want.begin()),
                 "aborted request " + std::to_string(id) + " streamed more than a prefix of its greedy decoding");
  }
}
