// specdec_demo: long-context speculative decoding end to end on the reference model.
//   specdec_demo [--prompt N] [--new N] [--drafter lookup+longspec|longspec|tokenswift|ngram] [--temperature T [--top-p P]]
//                [--tree chain|cartesian|cape|beam] [--nodes N] [--depth D] [--fixed-depth] [--cartesian] [--paged] [--interleave]
//                [--lookup-min N] [--lookup-max M]
//                [--quiet]
//                [--weights-dir DIR] [--draft-weights FILE] [--prompt-file PATH] [--prompt-offset N] [--show N]
//                [--random [--vocab V] [--hidden H] [--layers L] [--heads Hq] [--kv-heads Hkv] [--ffn F]
//                          [--window W] [--seed S]]
// Default: the trained byte-level pair of examples/weights (target.safetensors, longspec_draft.safetensors;
// --draft-weights longspec_draft_vanilla.safetensors is the draft trained without anchor-offset indices)
// on N (default 16384) bytes of a header file held out of training, from byte --prompt-offset (8192); --random: the seeded
// random model with a draft derived from it. Runs the target autoregressively and speculatively (--drafter:
// lookup+longspec, the default: prompt lookup where the last --lookup-min (2) to --lookup-max (12) tokens occurred
// before, the LongSpec draft's chain elsewhere; longspec: the LongSpec draft alone over --tree: its chain, a
// Cartesian tree, GLIDE's CAPE or LongSpec's beam tree, the last two capped at --nodes N (32) -- a --tree other
// than chain without --drafter selects longspec; tokenswift: TokenSwift self-drafting with the trained residual
// heads; ngram: prompt lookup alone, 1 to --lookup-max tokens);
// greedy verification, or with --temperature T > 0 sampling verified by sample-and-match; each step's depth in [0, D] (the beam: its
// levels in [0, 5]) chosen from the verification cost measured on this machine and the running acceptance, --fixed-depth: always D), shows live progress on stderr and prints the report (the prompt's end
// and the continuation, lossless yes/no, tau, alpha, tokens/s, speedup, per-phase ms, draft memory) on
// stdout. --interleave: the autoregressive run alternates with the speculative one step by step
// (each timed by its own clock) instead of running first, alone.
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <iostream>
#include <set>
#include <stdexcept>
#include <string>

#include "common/demo.hpp"

int main(int argc, char** argv) {
  specdec::examples::demo_options o;
  bool drafter_given = false;  // --tree beam alone means the LongSpec draft's beam (the trees are its)
  std::set<std::string> given;  // the options named, for the checks of what applies after the loop
  try {  // a bad value throws std::invalid_argument (the lambdas below): exit 2 with its message
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    given.insert(a);
    // an integer option's value: the whole argument a number in [lo, hi] (text, trailing characters or
    // a value out of range are errors: they were read as 0, cut, or wrapped)
    auto next_integer = [&](long long lo, long long hi) -> long long {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      const char* text = argv[++i];
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(text, &end, 10);
      if (end == text || *end != 0 || errno == ERANGE || v < lo || v > hi)
        throw std::invalid_argument(a + " needs an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                    "], got '" + text + "'");
      return v;
    };
    auto next = [&]() { return static_cast<int>(next_integer(INT_MIN, INT_MAX)); };
    auto next_float = [&]() -> float {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      char* end = nullptr;
      const float v = std::strtof(argv[++i], &end);
      if (end == argv[i] || *end != 0) throw std::invalid_argument(a + " needs a number, got '" + argv[i] + "'");
      return v;
    };
    if (a == "--prompt") o.prompt_tokens = next();
    else if (a == "--new") o.new_tokens = next();
    else if (a == "--vocab") o.model.vocab_size = next();
    else if (a == "--hidden") o.model.hidden = next();
    else if (a == "--layers") o.model.layers = next();
    else if (a == "--heads") o.model.heads = next();
    else if (a == "--kv-heads") o.model.kv_heads = next();
    else if (a == "--ffn") o.model.ffn_hidden = next();
    else if (a == "--window") o.window = next();
    else if (a == "--depth") o.draft_depth = next();
    else if (a == "--lookup-min") o.lookup_min = next();
    else if (a == "--lookup-max") o.lookup_max = next();
    else if (a == "--temperature") o.temperature = next_float();
    else if (a == "--top-p") o.top_p = next_float();
    else if (a == "--seed") o.seed = static_cast<std::uint64_t>(next_integer(0, LLONG_MAX));
    else if (a == "--show") o.show_bytes = next();
    else if (a == "--prompt-offset") o.prompt_offset = static_cast<long>(next_integer(LONG_MIN, LONG_MAX));
    else if (a == "--random") o.random_model = true;
    else if (a == "--cartesian") o.tree = specdec::examples::demo_tree::cartesian, given.insert("--tree");
    else if (a == "--nodes") o.tree_nodes = next();
    else if (a == "--fixed-depth") o.adaptive = false;
    else if (a == "--paged") o.paged = true;
    else if (a == "--interleave") o.interleave = true;
    else if (a == "--quiet") o.progress = false;
    else if (a == "--drafter" || a == "--tree") {
      if (i + 1 >= argc) return std::cerr << "specdec_demo: " << a << " needs a name\n", 2;
      try {
        if (a == "--drafter") o.drafter = specdec::examples::demo_drafter_from_name(argv[++i]), drafter_given = true;
        else o.tree = specdec::examples::demo_tree_from_name(argv[++i]);
      } catch (const std::exception& e) {
        return std::cerr << "specdec_demo: " << e.what() << "\n", 2;
      }
    } else if (a == "--weights-dir" || a == "--draft-weights" || a == "--prompt-file") {
      if (i + 1 >= argc) return std::cerr << "specdec_demo: " << a << " needs a path\n", 2;
      (a == "--weights-dir" ? o.weights_dir : a == "--draft-weights" ? o.draft_file : o.prompt_file) = argv[++i];
    } else {
      std::cerr << "specdec_demo: unknown argument " << a << " (see the comment at the top of specdec_demo.cpp)\n";
      return 2;
    }
  }
  } catch (const std::invalid_argument& e) {
    std::cerr << "specdec_demo: " << e.what() << "\n";
    return 2;
  }
  if (!drafter_given && o.tree != specdec::examples::demo_tree::chain) o.drafter = specdec::examples::demo_drafter::longspec;
  // options that do not apply to the run asked for are refused, not ignored
  const auto refuse = [&](const char* option, const char* why) {
    if (given.count(option) == 0) return false;
    std::cerr << "specdec_demo: " << option << " " << why << "\n";
    return true;
  };
  using specdec::examples::demo_tree;
  for (const char* f : {"--vocab", "--hidden", "--layers", "--heads", "--kv-heads", "--ffn", "--window"})
    if (!o.random_model && refuse(f, "shapes the seeded random model: it needs --random (the trained pair's shapes are its own)"))
      return 2;
  for (const char* f : {"--weights-dir", "--draft-weights", "--prompt-file", "--prompt-offset", "--show"})
    if (o.random_model && refuse(f, "applies to the trained pair, not to --random"))
      return 2;
  if (!(o.drafter == specdec::examples::demo_drafter::longspec && (o.tree == demo_tree::cape || o.tree == demo_tree::beam)) &&
      refuse("--nodes", "caps the LongSpec draft's CAPE or beam tree (--tree cape|beam)"))
    return 2;
  if (!(o.temperature > 0.0f) && refuse("--top-p", "applies to sampling: it needs --temperature > 0"))
    return 2;
  try {
    const auto report = specdec::examples::run_demo(o, std::cerr);
    specdec::examples::print_report(o, report, std::cout);
    return report.lossless || report.sampled ? 0 : 1;  // sampled runs are different draws: nothing to compare
  } catch (const std::exception& e) {
    std::cerr << "specdec_demo: " << e.what() << "\n";
    return 2;
  }
}
