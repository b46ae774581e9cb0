#pragma once
//! \file demo.hpp
//! The end-to-end demo behind examples/specdec_demo.cpp (kept in a header so tests run it at tiny
//! sizes): long-context generation with the reference LLaMA (float), once autoregressively and once
//! with speculative_decoder<llama, drafter, tree builder, verifier>, then a report. Greedy (the default):
//! the greedy verifier, and the two outputs compared token for token. Sampled (temperature > 0, top-p):
//! sample-and-match verification, which is exact in distribution (tests/verify's chi-square tests), so
//! the two runs are two different draws and only their speed and acceptance are compared. The drafter
//! (demo_drafter) is, by default, prompt lookup where the context repeats and LongSpec's draft model
//! elsewhere; or LongSpec's draft model alone over one of four trees (demo_tree), TokenSwift
//! self-drafting, or prompt lookup alone.
//!
//! By default the models are the trained byte-level pair of examples/weights (examples/training/
//! train.py: a LLaMA-style target and a LongSpec draft trained on this machine's C/C++ headers) and the
//! prompt is prompt_tokens bytes of a file the training held out (from byte prompt_offset), read from
//! /usr/include at run time; the report then shows the end of the prompt and the generated continuation.
//! demo_options::random_model selects the seeded random model and a draft derived from it instead.

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#if __has_include(<unistd.h>)
#include <unistd.h>  // sysconf: require_fits_in_memory
#endif

#include "longspec_draft.hpp"
#include "specdec/decoder/speculative_decoder.hpp"
#include "specdec/decoder/tree_builders.hpp"
#include "specdec/draft/lookup_first_drafter.hpp"
#include "specdec/draft/ngram_drafter.hpp"
#include "specdec/sampling/logits_processor.hpp"
#include "tokenswift_draft.hpp"

namespace specdec::examples {

//! Where the trained weights live: $SPECDEC_WEIGHTS_DIR when set, else the source tree's
//! examples/weights (the build passes its path as SPECDEC_EXAMPLES_WEIGHTS_DIR).
[[nodiscard]] inline std::string default_weights_dir() {
  if (const char* env = std::getenv("SPECDEC_WEIGHTS_DIR"); env != nullptr && *env != 0) return env;
#ifdef SPECDEC_EXAMPLES_WEIGHTS_DIR
  return SPECDEC_EXAMPLES_WEIGHTS_DIR;
#else
  return "examples/weights";
#endif
}

//! The demo's default prompt: bits/stl_list.h of the newest /usr/include/c++/<version>, one of the
//! files examples/training/train.py holds out of training (HELD_OUT there). Empty when not found.
[[nodiscard]] inline std::string default_prompt_file() {
  namespace fs = std::filesystem;
  std::error_code ec;
  int best = -1;
  std::string path;
  for (const auto& d : fs::directory_iterator("/usr/include/c++", ec)) {
    const std::string v = d.path().filename().string();
    if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 6) continue;
    const fs::path f = d.path() / "bits" / "stl_list.h";
    if (std::stoi(v) > best && fs::is_regular_file(f, ec)) best = std::stoi(v), path = f.string();
  }
  return path;
}

//! max_bytes bytes of a file from byte `offset` on, as byte tokens (0..255). Throws naming the path
//! when it cannot be read or has fewer than min_bytes bytes there.
[[nodiscard]] inline std::vector<std::int32_t> read_byte_tokens(const std::string& path, int min_bytes, int max_bytes,
                                                                std::int64_t offset = 0) {
  constexpr std::string_view fn = "specdec::examples::read_byte_tokens";
  require(offset >= 0, fn, "offset", ">= 0", offset);
  std::ifstream in(path, std::ios::binary);
  require(static_cast<bool>(in), fn, "path", "a readable file", path.empty() ? std::string("(none found)") : path);
  in.seekg(offset);
  std::vector<std::int32_t> out;
  for (char ch; static_cast<int>(out.size()) < max_bytes && in.get(ch);)
    out.push_back(static_cast<std::int32_t>(static_cast<unsigned char>(ch)));
  require(static_cast<int>(out.size()) >= min_bytes, fn, path,
          "at least " + std::to_string(min_bytes) + " bytes from offset " + std::to_string(offset), out.size());
  return out;
}

//! Byte tokens as printable text: newlines and tabs kept, other control bytes and bytes >= 127 shown as '?'.
[[nodiscard]] inline std::string bytes_as_text(std::span<const std::int32_t> tokens) {
  std::string s;
  for (const auto t : tokens) s += (t == '\n' || t == '\t' || (t >= 32 && t < 127)) ? static_cast<char>(t) : '?';
  return s;
}

//! Which drafter proposes the tokens the target verifies.
enum class demo_drafter {
  longspec,    //!< LongSpec's one-layer draft: sliding-window self-attention + cross-attention into the target's KV
  tokenswift,  //!< TokenSwift self-drafting: the target itself over a 256-token partial view of its KV, 3 residual
               //!< heads and 4-gram reuse, TokenSwift's Cartesian + n-gram tree
  ngram,       //!< prompt lookup: the continuation of the context's longest (1 to lookup_max tokens) latest match (no model)
  //! lookup_first_drafter: prompt lookup where the last lookup_min (2) or more tokens occurred before, else the
  //! LongSpec draft (the default)
  lookup_longspec,
};

//! The names of demo_drafter's values, in enum order (the --drafter flag and the report's summary line).
inline constexpr std::string_view demo_drafter_names[] = {"longspec", "tokenswift", "ngram", "lookup+longspec"};

namespace detail {
//! The value of an enum whose names (in enum order) are `names`; throws naming them all otherwise.
template <class E, std::size_t N>
[[nodiscard]] E enum_from_name(std::string_view name, const std::string_view (&names)[N], std::string_view fn) {
  std::string all;
  for (std::size_t i = 0; i < N; ++i) {
    if (names[i] == name) return static_cast<E>(i);
    all += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + std::string(names[i]);
  }
  throw_invalid_argument(fn, "name", all, std::string(name));
}
}  // namespace detail

//! demo_drafter by name (demo_drafter_names); throws naming the accepted names otherwise.
[[nodiscard]] inline demo_drafter demo_drafter_from_name(std::string_view name) {
  return detail::enum_from_name<demo_drafter>(name, demo_drafter_names, "specdec::examples::demo_drafter_from_name");
}

//! True for the drafters that run the LongSpec draft model (and so load its weights).
[[nodiscard]] constexpr bool uses_longspec_draft(demo_drafter d) noexcept {
  return d == demo_drafter::longspec || d == demo_drafter::lookup_longspec;
}

//! The token tree the LongSpec draft proposes (the other drafters bring their own: TokenSwift's Cartesian +
//! n-gram tree, prompt lookup's chain).
enum class demo_tree {
  chain,      //!< the draft's greedy chain
  cartesian,  //!< Cartesian (demo_cartesian_widths) over the draft's alternatives (TokenSwift §3.4's shape)
  cape,       //!< GLIDE's confidence-aware proposal expansion (§4.2 bins) of the chain, capped at tree_nodes
  beam,       //!< LongSpec's dynamic beam tree (Appendix B, widths [4, 16, 16, 16, 16]), its best tree_nodes nodes
};

//! The names of demo_tree's values, in enum order.
inline constexpr std::string_view demo_tree_names[] = {"chain", "cartesian", "cape", "beam"};

//! LongSpec's beam widths (Appendix B): demo_tree::beam drafts one level per width.
inline constexpr int demo_beam_widths[] = {4, 16, 16, 16, 16};
//! demo_tree::cartesian's widths per depth.
inline constexpr int demo_cartesian_widths[] = {1, 2, 2, 1};

namespace detail {
//! "[a, b, ...]": a width list as the report's model line shows it.
template <std::size_t N>
[[nodiscard]] std::string bracketed(const int (&v)[N]) {
  std::string s = "[";
  for (std::size_t i = 0; i < N; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
}  // namespace detail

//! demo_tree by name (demo_tree_names); throws naming the accepted names otherwise.
[[nodiscard]] inline demo_tree demo_tree_from_name(std::string_view name) {
  return detail::enum_from_name<demo_tree>(name, demo_tree_names, "specdec::examples::demo_tree_from_name");
}

//! The demo's verifier: greedy verification at temperature 0, sample-and-match above it, chosen per run
//! (one decoder type per drafter and tree instead of two). Both accept any tree and need no draft q. No
//! default constructor: the choice must be made with the run's temperature (verify_input does not carry it).
struct demo_verifier {
  static constexpr bool is_lossless_for_sampling = true;
  static constexpr tree_shape accepts = tree_shape::tree;
  static constexpr bool needs_draft_q = false;
  explicit demo_verifier(bool sampled) : sampled_(sampled) {}
  void verify(const verify_input& in, verify_result& out) {
    if (sampled_) sampler_.verify(in, out);
    else greedy_.verify(in, out);
  }

 private:
  bool sampled_ = false;
  greedy_verifier greedy_;
  sample_and_match_verifier sampler_;
};
static_assert(check_verifier<demo_verifier>());

struct demo_options {
  //! The random model's geometry (random_model only; the trained pair's comes from its file).
  llama_config model{.vocab_size = 1024, .hidden = 256, .layers = 6, .heads = 4, .kv_heads = 1, .head_dim = 64,
                     .ffn_hidden = 512};
  bool random_model = false;  //!< seeded random model + derived draft instead of the trained pair
  std::string weights_dir = default_weights_dir();
  std::string draft_file = "longspec_draft.safetensors";  //!< in weights_dir (the ablation: longspec_draft_vanilla)
  std::string prompt_file;    //!< trained pair: the prompt's file; empty = default_prompt_file()
  //! Trained pair: the first this many bytes of the prompt file. The shipped target was trained up to
  //! 16K-byte windows and keeps its held-out bits per byte to 16K of context (benchmarks/RESULTS.md);
  //! the random model is also run at this length unless told otherwise.
  int prompt_tokens = 16384;
  //! Trained pair: where in the prompt file the prompt starts (8192: past stl_list.h's license header,
  //! inside its code).
  std::int64_t prompt_offset = 8192;
  int new_tokens = 512;
  int draft_depth = 4;        //!< the draft depth, or with `adaptive` the largest one
  //! Hardware-aware depth (generation_options::adaptive_depth): each step drafts the depth in
  //! [0, draft_depth] that maximises the expected tokens per second measured on this machine, plain
  //! decoding when speculation does not pay. false: always draft_depth.
  bool adaptive = true;
  int window = 512;           //!< LongSpec draft sliding window (random model; the trained draft's is in its file)
  //! The default is prompt lookup with the LongSpec draft where the lookup finds nothing: on this 4-layer target
  //! a LongSpec draft token costs about a third of a target step (its cross-attention reads the target's last
  //! layer, a quarter of the target's KV), so where the context repeats itself the free lookup pays more
  //! (benchmarks/RESULTS.md, "Longer lookup matches").
  demo_drafter drafter = demo_drafter::lookup_longspec;
  demo_tree tree = demo_tree::chain;  //!< LongSpec drafter only
  //! Prompt lookup's n-gram lengths. lookup+longspec: a match of >= lookup_min tokens drafts instead of the
  //! model (lookup_first_drafter); ngram: every length from 1. Both use the longest match up to lookup_max.
  //! A byte says less than a BPE token (PLD's usual 3-5), so this byte-level pair matches up to 12: at 16K,
  //! tau 2.4-2.6 against 2.1-2.3 with 1-4 (RESULTS.md, same section).
  int lookup_min = 2, lookup_max = 12;
  int tree_nodes = 32;        //!< cape / beam: most tree nodes verified per step (GLIDE verifies at most 32)
  float temperature = 0.0f;   //!< 0 = greedy; > 0: sampled (with top_p), verified by sample-and-match
  float top_p = 1.0f;         //!< nucleus mass with temperature > 0 (1 = off)
  bool paged = false;         //!< target KV in a paged_kv pool (16-token pages) instead of contiguous
  //! autoregressive decoding alternates with the speculative run step by step (after each speculative
  //! step it catches up to the same token count), so both loops pay the same noisy moments; else it
  //! runs first, alone (the figures in RESULTS.md up to session 53)
  bool interleave = false;
  std::uint64_t seed = 1;
  bool progress = true;
  int progress_every = 128;   //!< a live progress line (tok/s, tau) each time this many more tokens are done
  int show_bytes = 600;       //!< trained pair: bytes of the prompt's end and of the continuation printed
};

struct demo_report {
  std::string model;
  bool lossless = false;  //!< greedy: the speculative output equals the autoregressive one (sampled: not compared)
  bool sampled = false;   //!< temperature > 0
  int first_mismatch = -1;
  double ar_tokens_per_s = 0, spec_tokens_per_s = 0, ar_prefill_s = 0;
  decoder_stats stats;  //!< of the speculative run (tau(), alpha(), per-phase seconds, prefill_s)
  std::size_t draft_bytes = 0, target_kv_bytes = 0;
  int generated = 0;
  int prompt_tokens = 0;
  std::int64_t lookup_steps = 0, model_steps = 0;  //!< lookup+longspec: steps drafted by each
  std::vector<std::int32_t> prompt_tail, continuation;  //!< trained pair: what print_report shows
  std::vector<std::int32_t> output;                     //!< the speculative run's tokens
};

//! Refuses an allocation of `bytes` larger than this machine's physical memory (POSIX sysconf; no
//! bound elsewhere), naming `what`: a mistyped size is an error message, not an out-of-memory kill.
inline void require_fits_in_memory(double bytes, std::string_view what) {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGE_SIZE)
  const double memory = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  if (memory > 0 && bytes > memory) [[unlikely]]
    throw_invalid_argument("specdec::examples::run_demo", what,
                           "at most this machine's memory (" + std::to_string(static_cast<std::int64_t>(memory)) +
                               " bytes)",
                           std::to_string(static_cast<unsigned long long>(std::min(bytes, 1e19))) + " bytes");
#else
  (void)bytes, (void)what;
#endif
}

//! Runs both decodings, one after the other or interleaved step by step (demo_options::interleave).
//! O(prompt prefill + new_tokens
//! target steps) twice.
inline demo_report run_demo(const demo_options& o, std::ostream& log) {
  using clock = std::chrono::steady_clock;
  auto secs = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
  require(o.progress_every >= 1, "specdec::examples::run_demo", "progress_every", ">= 1", o.progress_every);
  require(o.tree_nodes >= 0, "specdec::examples::run_demo", "tree_nodes", ">= 0 (0 = no cap)", o.tree_nodes);
  // at least one token: the report's rates and speedup are per generated token
  require(o.new_tokens >= 1, "specdec::examples::run_demo", "new_tokens", ">= 1", o.new_tokens);
  require(o.draft_depth >= 0, "specdec::examples::run_demo", "draft_depth", ">= 0", o.draft_depth);
  require(o.prompt_tokens >= 1, "specdec::examples::run_demo", "prompt_tokens", ">= 1", o.prompt_tokens);
  if (o.random_model) {  // before the weights and the prompt are allocated
    o.model.validate("specdec::examples::run_demo (model)");
    require(o.window >= 1, "specdec::examples::run_demo", "window", ">= 1 (the random draft's sliding window)", o.window);
    const double H = o.model.hidden, F = o.model.ffn_hidden, Dq = double(o.model.heads) * o.model.head_dim,
                 Dk = double(o.model.kv_heads) * o.model.head_dim;
    require_fits_in_memory((2.0 * o.model.vocab_size * H + o.model.layers * (2 * Dq * H + 2 * Dk * H + 3 * F * H)) *
                               sizeof(float),
                           "the random model's weights (--vocab, --hidden, --layers, --heads, --ffn)");
  }
  // the lookup's lengths, by the library's own check, before the long runs (ngram matches from 1 token)
  if (o.drafter == demo_drafter::ngram || o.drafter == demo_drafter::lookup_longspec)
    specdec::detail::validate_pld("specdec::examples::run_demo (lookup_min, lookup_max)",
                                  {.min_ngram = o.drafter == demo_drafter::ngram ? 1 : o.lookup_min, .max_ngram = o.lookup_max});
  const sampling_params sp{.temperature = o.temperature, .top_p = o.top_p};
  validate_sampling_params(sp, "specdec::examples::run_demo");
  require(o.drafter == demo_drafter::longspec || o.tree == demo_tree::chain, "specdec::examples::run_demo", "tree",
          "chain unless the drafter is longspec (TokenSwift and prompt lookup bring their own trees; lookup+longspec "
          "drafts a chain)",
          static_cast<int>(o.tree));
  demo_report rep;
  llama_config c = o.model;
  llama_weights<float> w;
  longspec_draft_config dc;
  longspec_draft_weights<float> dw;   // drafter longspec
  residual_head_weights<float> heads;  // drafter tokenswift
  std::vector<std::int32_t> prompt;
  auto random_tokens = [&](std::uint64_t stream, int n) {
    philox_stream rng(o.seed, stream);
    std::vector<std::int32_t> t(static_cast<std::size_t>(n));
    for (auto& x : t) x = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(c.vocab_size)));
    return t;
  };
  if (o.random_model) {
    w = random_llama_weights<float>(c, o.seed);
    dc.window = o.window;
    if (uses_longspec_draft(o.drafter)) dw = derive_longspec_draft(w, dc);
    // TokenSwift's heads for an untrained model: fitted by ridge regression on its own greedy text after
    // another random prompt (examples/common/tokenswift_draft.hpp, as examples/tokenswift_decoder --random)
    if (o.drafter == demo_drafter::tokenswift)
      heads = fit_residual_heads(greedy_hidden_states(c, w, random_tokens(0xde71, 64), 400), /*gamma=*/3);
    prompt = random_tokens(0xde70, o.prompt_tokens);
    rep.model = "seeded random LLaMA-style model (NOT trained; seed " + std::to_string(o.seed) + ")";
  } else {
    const auto tf = safetensors_file::load(o.weights_dir + "/target.safetensors");
    c = llama_config_from_metadata(tf);
    w = load_llama_weights<float>(tf, c);
    if (uses_longspec_draft(o.drafter))
      dw = load_longspec_draft<float>(safetensors_file::load(o.weights_dir + "/" + o.draft_file), c, dc);
    if (o.drafter == demo_drafter::tokenswift) heads = load_residual_heads<float>(tf, c.hidden);
    const std::string file = o.prompt_file.empty() ? default_prompt_file() : o.prompt_file;
    prompt = read_byte_tokens(file, o.prompt_tokens, o.prompt_tokens, o.prompt_offset);
    rep.model = "trained byte-level pair from " + o.weights_dir + " (target.safetensors" +
                (uses_longspec_draft(o.drafter) ? ", " + o.draft_file : std::string()) + "); prompt: " +
                std::to_string(prompt.size()) + " bytes of " + file + " from byte " + std::to_string(o.prompt_offset) +
                " (held out of training)";
  }
  rep.model += ": vocab " + std::to_string(c.vocab_size) + ", hidden " + std::to_string(c.hidden) + ", layers " +
               std::to_string(c.layers) + ", heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) +
               " (q/kv), head_dim " + std::to_string(c.head_dim) + ", ffn " + std::to_string(c.ffn_hidden) + "; draft: ";
  switch (o.drafter) {
    case demo_drafter::longspec:
      rep.model += std::to_string(dc.layers) + "-layer LongSpec (window " + std::to_string(dc.window) + ") " +
                   (o.random_model ? "derived from the target" : "trained") + ", ";
      switch (o.tree) {
        case demo_tree::chain: rep.model += "chain"; break;
        case demo_tree::cartesian: rep.model += "Cartesian tree " + detail::bracketed(demo_cartesian_widths); break;
        case demo_tree::cape:
          rep.model += "CAPE tree (GLIDE 4.2 bins, " +
                       (o.tree_nodes > 0 ? "<= " + std::to_string(o.tree_nodes) + " nodes)" : std::string("no node cap)"));
          break;
        case demo_tree::beam:
          rep.model += "beam tree " + detail::bracketed(demo_beam_widths) + ", " +
                       (o.tree_nodes > 0 ? "best " + std::to_string(o.tree_nodes) + " nodes" : std::string("no node cap")) +
                       ", " + std::to_string(std::size(demo_beam_widths)) + " levels";
          break;
      }
      break;
    case demo_drafter::tokenswift:
      rep.model += "TokenSwift self-drafting (partial KV 256 tokens with 16 sinks, " + std::to_string(heads.gamma) +
                   " residual heads " + (o.random_model ? "fitted" : "trained") + ", 4-grams; tree [1, 3, 3, 3], 64 nodes)";
      break;
    case demo_drafter::ngram:
      rep.model += "prompt lookup (1-" + std::to_string(o.lookup_max) + "-grams, no model), chain";
      break;
    case demo_drafter::lookup_longspec:
      rep.model += "prompt lookup where the last " + std::to_string(o.lookup_min) + "-" + std::to_string(o.lookup_max) +
                   " tokens occurred before, else the " + std::to_string(dc.layers) +
                   "-layer LongSpec (window " + std::to_string(dc.window) + ") " +
                   (o.random_model ? "derived from the target" : "trained") + "; chain";
      break;
  }
  rep.model += std::string("; target KV ") + (o.paged ? "paged (16-token pages)" : "contiguous");
  rep.prompt_tokens = static_cast<int>(prompt.size());
  // room for the last step's whole tree past new_tokens: the beam (68 nodes uncapped) and TokenSwift (64)
  // verify their full trees even when fewer tokens are left; CAPE adds up to 7 per depth; the node cap
  // counts only where it caps a tree (CAPE and the beam)
  const bool capped_tree = o.drafter == demo_drafter::longspec && (o.tree == demo_tree::cape || o.tree == demo_tree::beam);
  const std::int64_t max_tree =
      std::max<std::int64_t>({68, std::int64_t{8} * o.draft_depth, capped_tree ? o.tree_nodes : 0});
  const std::int64_t cap64 = static_cast<std::int64_t>(prompt.size()) + o.new_tokens + max_tree + 1;
  require(cap64 <= INT_MAX, "specdec::examples::run_demo", "new_tokens",
          "a prompt, new tokens and a last tree (8 x depth nodes) of at most INT_MAX tokens in all", o.new_tokens);
  const int capacity = static_cast<int>(cap64);
  // the target's two request slots are allocated whole, up front
  require_fits_in_memory(double(cap64) * 2 * c.layers * c.kv_heads * c.head_dim * 2 * sizeof(float),
                         "the target's KV cache (--prompt + --new + the last tree: --depth, --nodes)");
  // Two request slots: the speculative decoder runs in slot 0, autoregressive decoding in slot 1.
  llama_model<float> target(c, std::move(w), 2, capacity,
                            {.storage = o.paged ? kv_storage::paged : kv_storage::contiguous, .page_size = 16});

  // 1. Autoregressive decoding: greedy, the reference the speculative output must equal; sampled, a draw
  // of the same processed distribution (the speed reference). ar_catch_up decodes up to a token count;
  // it runs all of them before the speculative run, or with o.interleave after each speculative step
  // (the two loops alternate, so both pay the same moments of a noisy machine). Each loop's clock
  // counts its own work only.
  rep.sampled = o.temperature > 0.0f;
  constexpr int ar_slot = 1;
  sampling_workspace ws;
  philox_stream ar_rng(o.seed, 0xa7);
  auto t0 = clock::now();
  target.prefill(ar_slot, prompt);
  rep.ar_prefill_s = secs(t0);
  std::vector<std::int32_t> ar;
  std::vector<float> logits(static_cast<std::size_t>(c.vocab_size));
  std::int32_t root = prompt.back();
  double ar_s = 0;
  auto ar_catch_up = [&](int upto) {
    const auto ta = clock::now();
    for (int i = static_cast<int>(ar.size()); i < std::min(upto, o.new_tokens); ++i) {
      target.forward(ar_slot, root, token_tree{}, logits);
      target.commit(ar_slot, {});
      if (rep.sampled) {
        process_logits(logits, sp, {}, ws);  // sp sets no penalties, so no context is read
        root = sample_token(logits, ar_rng);
      } else {
        root = greedy_token(logits);
      }
      ar.push_back(root);
    }
    ar_s += secs(ta);
  };
  if (!o.interleave) {
    ar_catch_up(o.new_tokens);
    if (o.progress && o.new_tokens >= o.progress_every)  // as the progress lines: none below one interval
      log << "[autoregressive] " << ar.size() << " tokens, " << static_cast<double>(ar.size()) / ar_s << " tok/s\n";
  }

  // 2. Speculative decoding. One code path for every drafter and tree builder: they differ only in type.
  // depth: the most a step drafts, o.draft_depth unless given (the beam: its number of levels; the
  // drafter drafts the first min(depth, levels) of them, so adaptive depth plans beams by level count).
  auto run = [&](auto drafter, auto builder, int width, int depth = 0) {
    speculative_decoder<llama_model<float>, decltype(drafter), decltype(builder), demo_verifier> dec(
        target, std::move(drafter), std::move(builder), demo_verifier(rep.sampled));
    generation_options g{.max_new_tokens = o.new_tokens, .sampling = sp, .seed = o.seed,
                         .draft_depth = depth > 0 ? depth : o.draft_depth, .draft_width = width,
                         .adaptive_depth = o.adaptive};
    const auto t1 = clock::now();
    int done = 0;
    double interleaved_s = 0;  // autoregressive time spent inside this run's callbacks
    g.on_tokens = [&](int, std::span<const std::int32_t> toks) {
      const int before = done;
      done += static_cast<int>(toks.size());
      const double ar_before = ar_s;  // the catch-up's time is not the speculative loop's
      if (o.interleave) ar_catch_up(done);
      if (o.progress && done / o.progress_every != before / o.progress_every)
        log << "\r[speculative " << done << "/" << o.new_tokens << " tokens, "
            << done / (secs(t1) - dec.stats().prefill_s - (ar_s - ar_before) - interleaved_s) << " tok/s, tau "
            << dec.stats().tau() << "; autoregressive " << static_cast<double>(ar.size()) / ar_s << " tok/s]   "
            << std::flush;
      interleaved_s += ar_s - ar_before;
    };
    auto out = dec.generate(prompt, g);
    ar_catch_up(o.new_tokens);  // the rest, when the speculative run stopped early
    rep.ar_tokens_per_s = static_cast<double>(ar.size()) / ar_s;
    rep.stats = dec.stats();
    if constexpr (requires { dec.drafter().lookup_steps(); }) {
      rep.lookup_steps = dec.drafter().lookup_steps();
      rep.model_steps = dec.drafter().model_steps();
    }
    rep.spec_tokens_per_s = static_cast<double>(out.tokens.size()) / rep.stats.total_s();
    return out.tokens;
  };
  std::vector<std::int32_t> spec;
  switch (o.drafter) {
    case demo_drafter::longspec: {
      longspec_draft_model<float> draft(target, dc, std::move(dw));
      using drafter_t = longspec_drafter<longspec_draft_model<float>>;
      switch (o.tree) {
        case demo_tree::chain: spec = run(drafter_t(draft), chain_tree_builder{}, 2); break;
        case demo_tree::cartesian:
          spec = run(drafter_t(draft),
                     cartesian_tree_builder({std::begin(demo_cartesian_widths), std::end(demo_cartesian_widths)}), 2);
          break;
        // width 8: the draft's top 8 per depth, so the §4.2 bins' largest expansion set (7) is full
        case demo_tree::cape: spec = run(drafter_t(draft), cape_tree_builder(o.tree_nodes), 8); break;
        case demo_tree::beam:
          // the budget inside the beam (beam_tree_builder keeps its best tree_nodes nodes by cumulative
          // log-probability), not in the trie builder, whose budget would keep the first sequences listed
          spec = run(drafter_t(draft, beam_tree_params{{std::begin(demo_beam_widths), std::end(demo_beam_widths)}, o.tree_nodes}),
                     trie_tree_builder{}, 2, static_cast<int>(std::size(demo_beam_widths)));
          break;
      }
      rep.draft_bytes = draft.state_bytes();
      break;
    }
    case demo_drafter::tokenswift: {
      // compact: the draft attends over a dense copy of each layer's 256-token view (the host's fast path)
      tokenswift_self_draft<float> draft(target, {.budget = 256, .sink = 16, .compact = true}, heads);
      spec = run(self_drafter<tokenswift_self_draft<float>>(draft), tokenswift_tree_builder({1, 3, 3, 3}, 64), 3);
      rep.draft_bytes = draft.draft_bytes();
      break;
    }
    case demo_drafter::ngram:
      spec = run(ngram_drafter{.max_ngram = o.lookup_max, .min_ngram = 1}, chain_tree_builder{}, 2);
      break;
    case demo_drafter::lookup_longspec: {
      longspec_draft_model<float> draft(target, dc, std::move(dw));
      spec = run(lookup_first_drafter(longspec_drafter<longspec_draft_model<float>>(draft),
                                      ngram_drafter{.max_ngram = o.lookup_max, .min_ngram = o.lookup_min}),
                 chain_tree_builder{}, 2);
      rep.draft_bytes = draft.state_bytes();
      break;
    }
  }
  if (o.progress) log << "\n";
  rep.generated = static_cast<int>(spec.size());
  rep.output = spec;
  rep.lossless = !rep.sampled && spec == ar;
  for (std::size_t i = 0; !rep.sampled && i < std::min(spec.size(), ar.size()) && rep.first_mismatch < 0; ++i)
    if (spec[i] != ar[i]) rep.first_mismatch = static_cast<int>(i);
  // the target caches every committed token but the last (the next root); the decoder released the
  // request's slot when it finished, so this is computed, not read back
  rep.target_kv_bytes = (prompt.size() + spec.size() - 1) * target.kv_bytes_per_token();
  if (!o.random_model) {
    const std::size_t show = static_cast<std::size_t>(std::max(o.show_bytes, 0));
    rep.prompt_tail.assign(prompt.end() - static_cast<std::ptrdiff_t>(std::min(show, prompt.size())), prompt.end());
    rep.continuation.assign(spec.begin(), spec.begin() + static_cast<std::ptrdiff_t>(std::min(show, spec.size())));
  }
  return rep;
}

//! The human-readable report.
inline void print_report(const demo_options& o, const demo_report& r, std::ostream& os) {
  const auto& s = r.stats;
  if (!r.prompt_tail.empty() || !r.continuation.empty())
    os << "----- end of the prompt -----\n" << bytes_as_text(r.prompt_tail) << "\n----- generated (first "
       << r.continuation.size() << " of " << r.generated << " bytes) -----\n" << bytes_as_text(r.continuation)
       << "\n-----------------------------\n";
  os << "specdec demo: " << (r.prompt_tokens > 0 ? r.prompt_tokens : o.prompt_tokens) << "-token prompt, " << o.new_tokens
     << " new tokens, "
     << (r.sampled ? "sampled (temperature " : "greedy");
  if (r.sampled) os << o.temperature << ", top-p " << o.top_p << ")";
  os << "\nmodel:        " << r.model << "\n";
  if (r.sampled)
    os << "lossless:     in distribution (sample-and-match verification; tests/verify's chi-square tests); the two runs "
          "are different draws, not compared token by token\n";
  else
    os << "lossless:     " << (r.lossless ? "yes" : "NO") << " (speculative output == autoregressive output, " << r.generated
       << " tokens" << (r.first_mismatch >= 0 ? ", first mismatch at " + std::to_string(r.first_mismatch) : "") << ")\n";
  // The depth: for the LongSpec beam it counts beam levels (longspec_drafter drafts min(depth, levels)).
  const bool beam = o.drafter == demo_drafter::longspec && o.tree == demo_tree::beam;
  const std::string depth_max = beam ? std::to_string(std::size(demo_beam_widths)) : std::to_string(o.draft_depth);
  std::string depth;
  if (o.adaptive) depth = "adaptive in [0, " + depth_max + (beam ? "] beam levels" : "]");
  else depth = beam ? "the beam's " + depth_max + " levels every step" : "fixed " + depth_max;
  os
     << "tau:          " << s.tau() << " tokens per target forward;  alpha: " << s.alpha() << ";  depth: " << depth
     << ", mean drafted "
     << (s.steps ? static_cast<double>(s.draft_depth) / static_cast<double>(s.steps) : 0.0)
     << (o.drafter == demo_drafter::lookup_longspec
             ? ";  drafted by prompt lookup on " + std::to_string(r.lookup_steps) + " steps, by LongSpec on " +
                   std::to_string(r.model_steps)
             : std::string())
     << "\n"
     << "tokens/s:     autoregressive " << r.ar_tokens_per_s << ", speculative " << r.spec_tokens_per_s
     << "  (speedup " << r.spec_tokens_per_s / r.ar_tokens_per_s << "x; prefill excluded: " << r.ar_prefill_s << " s"
     << (s.calibrate_s > 0 ? "; step-cost calibration excluded: " + std::to_string(s.calibrate_s) +
                                 " s once, with it " + std::to_string(r.generated / (s.total_s() + s.calibrate_s) / r.ar_tokens_per_s) + "x"
                           : std::string())
     << ")\n"
     << "phases (ms):  draft " << 1e3 * s.draft_s << ", tree " << 1e3 * s.build_s << ", target " << 1e3 * s.target_s
     << ", verify " << 1e3 * s.verify_s << ", commit " << 1e3 * s.commit_s << "  over " << s.steps << " steps\n"
     << "memory:       "
     << (o.drafter == demo_drafter::ngram ? std::string("draft: an n-gram index over the context (no model state)")
                                          : "draft state " + std::to_string(r.draft_bytes) + " bytes (constant in the context length)")
     << ", target KV " << r.target_kv_bytes << " bytes\n";
  // one key=value line for scripts (benchmarks/demo_report.sh)
  os << "summary:      drafter=" << demo_drafter_names[static_cast<int>(o.drafter)]
     << " tree=" << (o.drafter == demo_drafter::longspec ? demo_tree_names[static_cast<int>(o.tree)] : "own")
     << " temperature=" << o.temperature << " top_p=" << o.top_p << " prompt=" << r.prompt_tokens
     << " new=" << r.generated << " tau=" << s.tau() << " alpha=" << s.alpha() << " ar_tok_s=" << r.ar_tokens_per_s
     << " spec_tok_s=" << r.spec_tokens_per_s << " speedup=" << r.spec_tokens_per_s / r.ar_tokens_per_s
     << " lossless=" << (r.sampled ? "distribution" : r.lossless ? "yes" : "NO") << " draft_bytes=" << r.draft_bytes
     << " target_kv_bytes=" << r.target_kv_bytes << "\n";
}

}  // namespace specdec::examples
