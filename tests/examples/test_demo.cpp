// The demo's code path at tiny sizes: both decodings run, the report says lossless, tau >= 1, the
// draft memory is constant in the prompt length, a paged target KV is lossless too, and specdec_demo's
// argument parsing works; the live progress lines report growing token counts, tok/s and tau.
#include <catch2/catch.hpp>

#include <climits>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#define main specdec_demo_main
#include "../../examples/specdec_demo.cpp"
#undef main

using namespace specdec::examples;

namespace {
//! The demo at test size: a tiny model, 64 new tokens, a 16-token draft window.
demo_options tiny_options(int prompt_tokens) {
  demo_options o;
  o.random_model = true;
  o.model = {.vocab_size = 128, .hidden = 32, .layers = 2, .heads = 2, .kv_heads = 1, .head_dim = 64, .ffn_hidden = 48};
  o.prompt_tokens = prompt_tokens;
  o.new_tokens = 64;
  o.window = 16;
  o.drafter = demo_drafter::longspec;  // most cases here check the LongSpec draft's own paths (the default is lookup+longspec)
  return o;
}
}  // namespace

TEST_CASE("demo at tiny sizes: lossless report, constant draft memory", "[examples][demo]") {
  demo_options o = tiny_options(96);
  std::ostringstream log, out;
  const auto small = run_demo(o, log);
  CHECK(small.lossless);
  CHECK(small.first_mismatch == -1);
  CHECK(small.generated == 64);
  CHECK(small.stats.tau() >= 1.0);
  CHECK(small.stats.steps > 0);
  CHECK(small.ar_tokens_per_s > 0);
  CHECK(log.str().find("tok/s") == std::string::npos);  // progress lines appear every 128 tokens only
  print_report(o, small, out);
  CHECK(out.str().find("lossless:     yes") != std::string::npos);
  CHECK(out.str().find("NOT trained") != std::string::npos);
  CHECK(out.str().find("depth: adaptive in [0, 4]") != std::string::npos);  // the default
  // the key=value line benchmarks/demo_report.sh reads
  CHECK(out.str().find("summary:      drafter=longspec tree=chain temperature=0 top_p=1 prompt=96 new=64 tau=") !=
        std::string::npos);
  CHECK(out.str().find(" lossless=yes draft_bytes=" + std::to_string(small.draft_bytes)) != std::string::npos);
  CHECK(small.stats.calibrate_s > 0.0);  // the step cost curve was measured once
  o.prompt_tokens = 300;
  o.adaptive = false;
  o.tree = demo_tree::cartesian;
  o.paged = true;  // and the target's KV in a paged pool: still lossless, same draft memory
  const auto longer = run_demo(o, log);
  CHECK(longer.lossless);
  CHECK(longer.model.find("paged") != std::string::npos);
  CHECK(longer.draft_bytes == small.draft_bytes);
  CHECK(longer.target_kv_bytes > small.target_kv_bytes);
  std::ostringstream fixed;
  print_report(o, longer, fixed);
  CHECK(fixed.str().find("depth: fixed 4") != std::string::npos);
  CHECK(longer.stats.calibrate_s == 0.0);
}

TEST_CASE("demo with each drafter: TokenSwift self-drafting and prompt lookup are lossless too", "[examples][demo]") {
  // The tiny random model's greedy text soon repeats itself, so prompt lookup finds matches in it; the
  // TokenSwift heads are fitted to that text (demo.hpp).
  for (const auto d : {demo_drafter::tokenswift, demo_drafter::ngram, demo_drafter::lookup_longspec}) {
    demo_options o = tiny_options(96);
    o.drafter = d;
    o.adaptive = false;  // always draft: every step goes through the drafter and the verifier
    std::ostringstream log, out;
    const auto r = run_demo(o, log);
    INFO(r.model);
    CHECK(r.lossless);
    CHECK(r.generated == 64);
    CHECK(r.stats.draft_depth > 0);  // the drafter proposed tokens
    CHECK(r.stats.accepted > 0);     // and the target accepted some
    print_report(o, r, out);
    CHECK(out.str().find("lossless:     yes") != std::string::npos);
    CHECK(out.str().find("drafter=" + std::string(demo_drafter_names[static_cast<int>(d)]) + " tree=own") !=
          std::string::npos);
    if (d == demo_drafter::lookup_longspec) {
      // both parts drafted: the lookup where the random model's text repeats, LongSpec elsewhere
      CHECK(r.lookup_steps > 0);
      CHECK(r.model_steps > 0);
      CHECK(out.str().find("drafted by prompt lookup on " + std::to_string(r.lookup_steps) + " steps, by LongSpec on " +
                           std::to_string(r.model_steps)) != std::string::npos);
      CHECK(r.model.find("else the 1-layer LongSpec (window 16)") != std::string::npos);
      CHECK(r.draft_bytes > 0);
    } else if (d == demo_drafter::tokenswift) {
      CHECK(r.model.find("TokenSwift self-drafting") != std::string::npos);
      CHECK(r.draft_bytes > 0);
    } else {
      CHECK(r.model.find("prompt lookup") != std::string::npos);
      CHECK(out.str().find("n-gram index") != std::string::npos);
    }
  }
  // sampled (T = 0.7, top-p 0.9): sample-and-match verification with every drafter; the two runs are two
  // draws, so the report says so instead of comparing them, and a bad temperature is refused up front
  for (const auto d : {demo_drafter::longspec, demo_drafter::tokenswift, demo_drafter::ngram, demo_drafter::lookup_longspec}) {
    demo_options o = tiny_options(96);
    o.drafter = d;
    o.adaptive = false;
    o.temperature = 0.7f;
    o.top_p = 0.9f;
    std::ostringstream log, out;
    const auto r = run_demo(o, log);
    CHECK(r.sampled);
    CHECK(r.generated == 64);
    CHECK(r.stats.draft_depth > 0);
    CHECK(r.stats.accepted > 0);
    print_report(o, r, out);
    CHECK(out.str().find("sampled (temperature 0.7") != std::string::npos);
    CHECK(out.str().find("lossless:     in distribution") != std::string::npos);
    CHECK(out.str().find("temperature=0.7 top_p=0.9") != std::string::npos);
    CHECK(out.str().find("lossless=distribution") != std::string::npos);
    o.temperature = -1.0f;
    CHECK_THROWS_AS(run_demo(o, log), specdec::invalid_argument);
  }
  // the sampled run really samples: its output differs from the greedy output of the same model and prompt
  // (64 tokens at T = 0.7 from a 128-token vocabulary), and another seed gives another draw
  {
    demo_options o = tiny_options(96);
    const auto greedy = run_demo(o, std::cerr);
    o.temperature = 0.7f;
    std::ostringstream log;
    const auto a = run_demo(o, log);
    o.seed = 2;  // (also reseeds the random model: compared with its own greedy run)
    const auto b = run_demo(o, log);
    o.temperature = 0.0f;
    const auto greedy_b = run_demo(o, log);
    CHECK(greedy.output.size() == 64);
    CHECK(a.output != greedy.output);
    CHECK(b.output != greedy_b.output);
  }
  CHECK(demo_drafter_from_name("tokenswift") == demo_drafter::tokenswift);
  CHECK(demo_drafter_from_name("ngram") == demo_drafter::ngram);
  CHECK(demo_drafter_from_name("longspec") == demo_drafter::longspec);
  CHECK(demo_drafter_from_name("lookup+longspec") == demo_drafter::lookup_longspec);
  CHECK_THROWS_AS(demo_drafter_from_name("medusa"), specdec::invalid_argument);
}

TEST_CASE("demo with each LongSpec tree: CAPE and the beam tree under a node budget are lossless", "[examples][demo]") {
  for (const auto t : {demo_tree::cape, demo_tree::beam}) {
    demo_options o = tiny_options(96);
    o.tree = t;
    o.tree_nodes = 12;
    o.adaptive = false;
    std::ostringstream log, out;
    const auto r = run_demo(o, log);
    INFO(r.model);
    CHECK(r.lossless);
    CHECK(r.generated == 64);
    CHECK(r.stats.accepted > 0);
    // the budget caps every verified tree: at most 12 drafted nodes a step (which nodes the beam keeps:
    // test_longspec_beam_tree.cpp)
    CHECK(r.stats.tree_nodes <= 12 * r.stats.steps);
    CHECK(r.stats.tree_nodes > 2 * r.stats.steps);  // and the trees are not chains of 1-2 tokens
    print_report(o, r, out);
    CHECK(r.model.find(t == demo_tree::cape ? "CAPE tree" : "beam tree [4, 16, 16, 16, 16], best 12 nodes") !=
          std::string::npos);
    if (t == demo_tree::beam) CHECK(out.str().find("the beam's 5 levels every step") != std::string::npos);
  }
  {  // adaptive depth plans the beam's level count: still lossless, never deeper than its 5 levels
    demo_options o = tiny_options(96);
    o.tree = demo_tree::beam;
    o.tree_nodes = 12;
    std::ostringstream log, out;
    const auto r = run_demo(o, log);
    CHECK(r.lossless);
    CHECK(r.generated == 64);
    CHECK(r.stats.draft_depth <= 5 * r.stats.steps);
    CHECK(r.stats.tree_nodes <= 12 * r.stats.steps);
    print_report(o, r, out);
    CHECK(out.str().find("adaptive in [0, 5] beam levels") != std::string::npos);
  }
  CHECK(demo_tree_from_name("cape") == demo_tree::cape);
  CHECK(demo_tree_from_name("beam") == demo_tree::beam);
  CHECK_THROWS_AS(demo_tree_from_name("forest"), specdec::invalid_argument);
  demo_options o = tiny_options(32);
  o.drafter = demo_drafter::ngram;
  o.tree = demo_tree::cape;  // prompt lookup brings its own chain: refused, not ignored
  std::ostringstream log;
  CHECK_THROWS_AS(run_demo(o, log), specdec::invalid_argument);
  o.drafter = demo_drafter::lookup_longspec;  // drafts a chain only
  CHECK_THROWS_AS(run_demo(o, log), specdec::invalid_argument);
  o.drafter = demo_drafter::longspec;
  o.tree_nodes = -1;
  CHECK_THROWS_AS(run_demo(o, log), specdec::invalid_argument);
  o.tree_nodes = 0;
  // sizes whose sum (the target's capacity) overflowed int: refused before anything is allocated
  o.draft_depth = 300000000;
  CHECK_THROWS_WITH(run_demo(o, log), Catch::Contains("'new_tokens'") && Catch::Contains("INT_MAX"));
  o.draft_depth = 4;
  o.new_tokens = INT_MAX;
  CHECK_THROWS_WITH(run_demo(o, log), Catch::Contains("'new_tokens'") && Catch::Contains("INT_MAX"));
  o.new_tokens = -1;
  CHECK_THROWS_WITH(run_demo(o, log), Catch::Contains("'new_tokens'") && Catch::Contains(">= 1"));
  o.new_tokens = 0;  // the report's rates divided by zero
  CHECK_THROWS_WITH(run_demo(o, log), Catch::Contains("'new_tokens'") && Catch::Contains(">= 1"));
}

TEST_CASE("demo live progress: rewritten lines with growing token counts, both loops' tok/s and tau", "[examples][demo]") {
  demo_options o = tiny_options(64);
  o.progress_every = 8;  // the default 128 would print nothing at this size
  {  // the autoregressive run first, alone (the default): one line for it, then the speculative lines
    std::ostringstream log;
    REQUIRE(run_demo(o, log).lossless);
    int n = 0;
    double ar_tok_s = 0;
    CHECK(std::sscanf(log.str().c_str(), "[autoregressive] %d tokens, %lf tok/s", &n, &ar_tok_s) == 2);
    CHECK(n == 64);
    CHECK(ar_tok_s > 0);
  }
  o.interleave = true;
  std::ostringstream log;
  const auto rep = run_demo(o, log);
  REQUIRE(rep.lossless);
  CHECK(rep.ar_tokens_per_s > 0);
  // Each progress line is rewritten in place: segments are separated by '\r' (and '\n' at the end).
  // Interleaved, the two loops alternate (autoregressive decoding catches up after each speculative
  // step), and every line reports both.
  std::vector<int> spec_counts;
  std::vector<double> taus;
  std::string seg;
  std::istringstream in(log.str());
  int n = 0, total = 0;
  double tok_s = 0, tau = 0, ar_tok_s = 0;
  while (std::getline(in, seg, '\r')) {
    if (!seg.empty() && seg.back() == '\n') seg.pop_back();
    if (seg.empty()) continue;
    INFO(seg);
    REQUIRE(std::sscanf(seg.c_str(), "[speculative %d/%d tokens, %lf tok/s, tau %lf; autoregressive %lf tok/s]", &n,
                        &total, &tok_s, &tau, &ar_tok_s) == 5);
    spec_counts.push_back(n);
    taus.push_back(tau);
    CHECK(tau >= 1.0);  // every step emits at least one token
    CHECK(total == 64);
    CHECK(tok_s > 0);
    CHECK(ar_tok_s > 0);
  }
  REQUIRE(spec_counts.size() >= 2);
  for (std::size_t i = 1; i < spec_counts.size(); ++i) {
    CHECK(spec_counts[i] > spec_counts[i - 1]);
    CHECK(spec_counts[i] / 8 > spec_counts[i - 1] / 8);
  }
  CHECK(spec_counts.back() == 64);
  CHECK(taus.back() == Approx(rep.stats.tau()).epsilon(1e-4));
  // progress off: nothing at all on the log stream
  o.progress = false;
  std::ostringstream quiet;
  (void)run_demo(o, quiet);
  CHECK(quiet.str().empty());
  o.progress_every = 0;  // would divide by zero: rejected up front
  CHECK_THROWS_AS(run_demo(o, quiet), specdec::invalid_argument);
}

TEST_CASE("specdec_demo main: the default drafter, and --tree alone selects the LongSpec draft", "[examples][demo]") {
  CHECK(demo_options{}.drafter == demo_drafter::lookup_longspec);
  CHECK(demo_options{}.lookup_min == 2);
  CHECK(demo_options{}.lookup_max == 12);
  // specdec_demo_main's report goes to std::cout: captured here
  auto run_main = [](std::vector<const char*> args, std::string& out) {
    std::ostringstream buf;
    struct restore {  // std::cout gets its buffer back however the call ends
      std::streambuf* old;
      ~restore() { std::cout.rdbuf(old); }
    } r{std::cout.rdbuf(buf.rdbuf())};
    const int rc = specdec_demo_main(static_cast<int>(args.size()), const_cast<char**>(args.data()));
    out = buf.str();
    return rc;
  };
  const std::vector<const char*> tiny{"specdec_demo", "--random", "--prompt", "40", "--new", "16", "--vocab", "64", "--hidden", "16",
                                      "--layers", "2", "--heads", "1", "--kv-heads", "1", "--ffn", "16", "--window", "8", "--quiet"};
  std::string out;
  REQUIRE(run_main(tiny, out) == 0);
  CHECK(out.find("drafter=lookup+longspec tree=own") != std::string::npos);
  CHECK(out.find("prompt lookup where the last 2-12 tokens occurred before") != std::string::npos);
  auto with = [&](std::initializer_list<const char*> extra) {
    auto a = tiny;
    a.insert(a.end(), extra);
    return a;
  };
  REQUIRE(run_main(with({"--tree", "cartesian"}), out) == 0);  // the trees are the LongSpec draft's
  CHECK(out.find("drafter=longspec tree=cartesian") != std::string::npos);
  REQUIRE(run_main(with({"--cartesian"}), out) == 0);  // the older spelling of --tree cartesian
  CHECK(out.find("drafter=longspec tree=cartesian") != std::string::npos);
  REQUIRE(run_main(with({"--tree", "chain"}), out) == 0);  // the default drafter drafts a chain: kept
  CHECK(out.find("drafter=lookup+longspec tree=own") != std::string::npos);
  REQUIRE(run_main(with({"--lookup-min", "3", "--lookup-max", "5"}), out) == 0);
  CHECK(out.find("prompt lookup where the last 3-5 tokens occurred before") != std::string::npos);
  REQUIRE(run_main(with({"--drafter", "ngram", "--lookup-max", "6"}), out) == 0);
  CHECK(out.find("prompt lookup (1-6-grams, no model)") != std::string::npos);
  // an explicit drafter keeps the rule that only the LongSpec draft takes a tree
  CHECK(run_main(with({"--drafter", "lookup+longspec", "--tree", "beam"}), out) == 2);
  CHECK(run_main(with({"--lookup-min", "5", "--lookup-max", "4"}), out) == 2);  // checked before the runs
  CHECK(run_main(with({"--lookup-max", "0"}), out) == 2);
  REQUIRE(run_main(with({"--drafter", "ngram", "--lookup-max", "1"}), out) == 0);  // ngram reads no lookup_min
  CHECK(out.find("prompt lookup (1-1-grams, no model)") != std::string::npos);
}

TEST_CASE("specdec_demo main: flags and errors", "[examples][demo]") {
  const char* ok[] = {"specdec_demo", "--random", "--prompt", "40", "--new", "16", "--vocab", "64", "--hidden", "16", "--layers", "2",
                      "--heads", "1", "--kv-heads", "1", "--ffn", "16", "--window", "8", "--depth", "3", "--paged", "--quiet"};
  CHECK(specdec_demo_main(static_cast<int>(std::size(ok)), const_cast<char**>(ok)) == 0);
  const char* bad[] = {"specdec_demo", "--bogus"};
  CHECK(specdec_demo_main(2, const_cast<char**>(bad)) == 2);
  const char* bad_dim[] = {"specdec_demo", "--random", "--prompt", "8", "--new", "4", "--heads", "3", "--kv-heads", "2", "--quiet"};
  CHECK(specdec_demo_main(static_cast<int>(std::size(bad_dim)), const_cast<char**>(bad_dim)) == 2);  // 3 % 2 != 0... rejected
  const char* no_weights[] = {"specdec_demo", "--weights-dir", "/nonexistent", "--quiet"};
  CHECK(specdec_demo_main(static_cast<int>(std::size(no_weights)), const_cast<char**>(no_weights)) == 2);
  const char* no_prompt[] = {"specdec_demo", "--prompt-file", "/nonexistent", "--quiet"};
  CHECK(specdec_demo_main(static_cast<int>(std::size(no_prompt)), const_cast<char**>(no_prompt)) == 2);
  const char* no_path[] = {"specdec_demo", "--draft-weights"};
  CHECK(specdec_demo_main(2, const_cast<char**>(no_path)) == 2);
  const char* ngram[] = {"specdec_demo", "--random", "--prompt", "40", "--new", "16", "--vocab", "64", "--hidden", "16",
                         "--layers", "2", "--heads", "1", "--kv-heads", "1", "--ffn", "16", "--drafter", "ngram", "--quiet"};
  CHECK(specdec_demo_main(static_cast<int>(std::size(ngram)), const_cast<char**>(ngram)) == 0);
  const char* sampled[] = {"specdec_demo", "--random", "--prompt", "40", "--new", "16", "--vocab", "64", "--hidden", "16",
                           "--layers", "2", "--heads", "1", "--kv-heads", "1", "--ffn", "16", "--temperature", "0.7",
                           "--top-p", "0.9", "--quiet"};
  CHECK(specdec_demo_main(static_cast<int>(std::size(sampled)), const_cast<char**>(sampled)) == 0);
  const char* bad_top_p[] = {"specdec_demo", "--random", "--prompt", "8", "--new", "4", "--temperature", "0.7", "--top-p", "0", "--quiet"};
  CHECK(specdec_demo_main(static_cast<int>(std::size(bad_top_p)), const_cast<char**>(bad_top_p)) == 2);
  const char* bad_drafter[] = {"specdec_demo", "--drafter", "medusa"};
  CHECK(specdec_demo_main(3, const_cast<char**>(bad_drafter)) == 2);
  const char* no_drafter[] = {"specdec_demo", "--drafter"};
  CHECK(specdec_demo_main(2, const_cast<char**>(no_drafter)) == 2);
  // every failure below exits 2 before any model runs
  const auto rc = [](std::vector<const char*> args) {
    return specdec_demo_main(static_cast<int>(args.size()), const_cast<char**>(args.data()));
  };
  const std::vector<const char*> tiny{"specdec_demo", "--random", "--prompt", "40", "--vocab", "64", "--hidden", "16",
                                      "--layers", "2", "--heads", "1", "--kv-heads", "1", "--ffn", "16", "--quiet"};
  const auto tiny_with = [&](std::initializer_list<const char*> extra) {
    auto a = tiny;
    a.insert(a.end(), extra);
    return a;
  };
  // integer options: text, trailing characters and values out of range were read as 0, cut or wrapped
  CHECK(rc(tiny_with({"--new", "abc"})) == 2);
  CHECK(rc(tiny_with({"--new", "16x"})) == 2);
  CHECK(rc(tiny_with({"--new", "4294967312"})) == 2);  // 2^32 + 16: ran as 16
  CHECK(rc(tiny_with({"--new", "16", "--seed", "-1"})) == 2);
  CHECK(rc(tiny_with({"--new", "16", "--depth", ""})) == 2);
  // at least one new token (the report divided by zero), and a prompt before anything is allocated
  CHECK(rc(tiny_with({"--new", "0"})) == 2);
  CHECK(rc({"specdec_demo", "--random", "--prompt", "-5", "--new", "4", "--quiet"}) == 2);
  // options that do not apply to the run are refused, not ignored
  CHECK(rc({"specdec_demo", "--vocab", "64", "--quiet"}) == 2);              // shapes only the random model
  CHECK(rc(tiny_with({"--new", "16", "--prompt-file", "/etc/hostname"})) == 2);  // the trained pair's
  CHECK(rc(tiny_with({"--new", "16", "--top-p", "0.5"})) == 2);              // greedy: no top-p
  CHECK(rc(tiny_with({"--new", "16", "--nodes", "300000"})) == 2);           // no capped tree: it sized the cache
  // sizes past this machine's memory are refused before they are allocated
  CHECK(rc(tiny_with({"--new", "16", "--depth", "200000000", "--fixed-depth"})) == 2);    // ~3 TB of KV cache
  CHECK(rc({"specdec_demo", "--random", "--prompt", "8", "--new", "4", "--vocab", "2000000000", "--hidden", "4096",
            "--quiet"}) == 2);  // ~65 TB of weights
  CHECK(rc(tiny_with({"--new", "16", "--window", "0"})) == 2);
  CHECK(rc(tiny_with({"--new", "16", "--window", "8", "--drafter", "ngram"})) == 0);  // --window is the random draft's
}
