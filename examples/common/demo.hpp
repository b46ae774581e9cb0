#pragma once
//! \file demo.hpp
//! The end-to-end demo behind examples/specdec_demo.cpp (kept in a header so tests run it at tiny
//! sizes): long-context generation with the reference LLaMA (float), once autoregressively and once
//! with speculative_decoder<llama, longspec_drafter, chain/Cartesian tree, greedy verifier>, then a
//! token-for-token comparison and a report.

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "longspec_draft.hpp"
#include "specdec/decoder/speculative_decoder.hpp"

namespace specdec::examples {

struct demo_options {
  llama_config model{.vocab_size = 1024, .hidden = 256, .layers = 6, .heads = 4, .kv_heads = 1, .head_dim = 64,
                     .ffn_hidden = 512};
  int prompt_tokens = 8192;
  int new_tokens = 2048;
  int draft_depth = 4;
  int window = 512;           //!< LongSpec draft sliding window
  bool cartesian = false;     //!< Cartesian [1, 2, 2, 1] tree instead of a chain
  bool paged = false;         //!< target KV in a paged_kv pool (16-token pages) instead of contiguous
  std::uint64_t seed = 1;
  std::string weights;        //!< safetensors path; empty = seeded random init
  bool progress = true;
  int progress_every = 128;   //!< a live progress line (tok/s, tau) each time this many more tokens are done
};

struct demo_report {
  std::string model;
  bool lossless = false;
  int first_mismatch = -1;
  double ar_tokens_per_s = 0, spec_tokens_per_s = 0, ar_prefill_s = 0;
  decoder_stats stats;  //!< of the speculative run (tau(), alpha(), per-phase seconds, prefill_s)
  std::size_t draft_bytes = 0, target_kv_bytes = 0;
  int generated = 0;
};

//! Runs both decodings. O(prompt prefill + new_tokens target steps) twice.
inline demo_report run_demo(const demo_options& o, std::ostream& log) {
  using clock = std::chrono::steady_clock;
  auto secs = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
  require(o.progress_every >= 1, "specdec::examples::run_demo", "progress_every", ">= 1", o.progress_every);
  demo_report rep;
  llama_weights<float> w = o.weights.empty() ? random_llama_weights<float>(o.model, o.seed)
                                             : load_llama_weights<float>(safetensors_file::load(o.weights), o.model);
  rep.model = o.weights.empty() ? "seeded random LLaMA-style model (NOT trained; seed " + std::to_string(o.seed) + ")"
                                : "weights from " + o.weights;
  const auto& c = o.model;
  rep.model += ": vocab " + std::to_string(c.vocab_size) + ", hidden " + std::to_string(c.hidden) + ", layers " +
               std::to_string(c.layers) + ", heads " + std::to_string(c.heads) + "/" + std::to_string(c.kv_heads) +
               " (q/kv), head_dim " + std::to_string(c.head_dim) + ", ffn " + std::to_string(c.ffn_hidden) +
               "; draft: 1-layer LongSpec (window " + std::to_string(o.window) + ") derived from the target; target KV " +
               (o.paged ? "paged (16-token pages)" : "contiguous");
  const int capacity = o.prompt_tokens + o.new_tokens + 64;
  llama_model<float> target(c, std::move(w), 1, capacity,
                            {.storage = o.paged ? kv_storage::paged : kv_storage::contiguous, .page_size = 16});
  philox_stream rng(o.seed, 0xde70);
  std::vector<std::int32_t> prompt(static_cast<std::size_t>(o.prompt_tokens));
  for (auto& t : prompt) t = static_cast<std::int32_t>(rng.below(static_cast<std::uint32_t>(c.vocab_size)));

  // 1. Autoregressive greedy decoding (the reference the speculative output must equal).
  auto t0 = clock::now();
  target.prefill(0, prompt);
  rep.ar_prefill_s = secs(t0);
  std::vector<std::int32_t> ar;
  std::vector<float> logits(static_cast<std::size_t>(c.vocab_size));
  std::int32_t root = prompt.back();
  t0 = clock::now();
  for (int i = 0; i < o.new_tokens; ++i) {
    target.forward(0, root, token_tree{}, logits);
    target.commit(0, {});
    root = greedy_token(logits);
    ar.push_back(root);
    if (o.progress && (i + 1) % o.progress_every == 0)
      log << "\r[autoregressive] " << i + 1 << "/" << o.new_tokens << " tokens, " << (i + 1) / secs(t0) << " tok/s   " << std::flush;
  }
  rep.ar_tokens_per_s = o.new_tokens / secs(t0);
  if (o.progress) log << "\n";

  // 2. Speculative decoding with the LongSpec draft.
  longspec_draft_config dc;
  dc.window = o.window;
  auto dw = derive_longspec_draft(target.weights(), dc);
  longspec_draft_model<float> draft(target, dc, std::move(dw));
  using drafter_t = longspec_drafter<longspec_draft_model<float>>;
  // The chain and Cartesian decoders differ only in their tree builder's type: one code path for both.
  auto run = [&](auto builder) {
    speculative_decoder<llama_model<float>, drafter_t, decltype(builder), greedy_verifier> dec(target, drafter_t(draft),
                                                                                               std::move(builder));
    generation_options g{.max_new_tokens = o.new_tokens, .draft_depth = o.draft_depth, .draft_width = 2};
    const auto t1 = clock::now();
    int done = 0;
    g.on_tokens = [&](int, std::span<const std::int32_t> toks) {
      const int before = done;
      done += static_cast<int>(toks.size());
      if (o.progress && done / o.progress_every != before / o.progress_every)
        log << "\r[speculative]    " << done << "/" << o.new_tokens << " tokens, "
            << done / (secs(t1) - dec.stats().prefill_s) << " tok/s, tau " << dec.stats().tau() << "   " << std::flush;
    };
    auto out = dec.generate(prompt, g);
    rep.stats = dec.stats();
    rep.spec_tokens_per_s = static_cast<double>(out.tokens.size()) / rep.stats.total_s();
    return out.tokens;
  };
  const auto spec = o.cartesian ? run(cartesian_tree_builder({1, 2, 2, 1})) : run(chain_tree_builder{});
  if (o.progress) log << "\n";
  rep.generated = static_cast<int>(spec.size());
  rep.lossless = spec == ar;
  for (std::size_t i = 0; i < std::min(spec.size(), ar.size()) && rep.first_mismatch < 0; ++i)
    if (spec[i] != ar[i]) rep.first_mismatch = static_cast<int>(i);
  rep.draft_bytes = draft.state_bytes();
  // the target caches every committed token but the last (the next root); the decoder released the
  // request's slot when it finished, so this is computed, not read back
  rep.target_kv_bytes = (prompt.size() + spec.size() - 1) * target.kv_bytes_per_token();
  return rep;
}

//! The human-readable report.
inline void print_report(const demo_options& o, const demo_report& r, std::ostream& os) {
  const auto& s = r.stats;
  os << "specdec demo: " << o.prompt_tokens << "-token prompt, " << o.new_tokens << " new tokens, greedy\n"
     << "model:        " << r.model << "\n"
     << "lossless:     " << (r.lossless ? "yes" : "NO") << " (speculative output == autoregressive output, "
     << r.generated << " tokens" << (r.first_mismatch >= 0 ? ", first mismatch at " + std::to_string(r.first_mismatch) : "")
     << ")\n"
     << "tau:          " << s.tau() << " tokens per target forward;  alpha: " << s.alpha() << "\n"
     << "tokens/s:     autoregressive " << r.ar_tokens_per_s << ", speculative " << r.spec_tokens_per_s
     << "  (speedup " << r.spec_tokens_per_s / r.ar_tokens_per_s << "x; prefill excluded: " << r.ar_prefill_s << " s)\n"
     << "phases (ms):  draft " << 1e3 * s.draft_s << ", tree " << 1e3 * s.build_s << ", target " << 1e3 * s.target_s
     << ", verify " << 1e3 * s.verify_s << ", commit " << 1e3 * s.commit_s << "  over " << s.steps << " steps\n"
     << "memory:       draft state " << r.draft_bytes << " bytes (constant in the context length), target KV "
     << r.target_kv_bytes << " bytes\n";
}

}  // namespace specdec::examples
