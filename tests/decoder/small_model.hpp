#pragma once
// The 32-token reference LLaMA (double) the decoder and batch tests decode with, and its own greedy
// decoding (the losslessness oracle).
#include <vector>

#include "../../examples/common/llama.hpp"

namespace small_model {
inline const specdec::examples::llama_config cfg{.vocab_size = 32, .hidden = 16, .layers = 2, .heads = 2, .kv_heads = 1,
                                                 .head_dim = 64, .ffn_hidden = 16};
inline const specdec::examples::llama_weights<double>& weights() {
  static const auto w = specdec::examples::random_llama_weights<double>(cfg, 9);
  return w;
}
//! The first n greedy tokens after `prompt`.
inline std::vector<std::int32_t> greedy_of(const std::vector<std::int32_t>& prompt, int n) {
  specdec::examples::llama_model<double> m(cfg, weights(), 1, 1024);
  return specdec::examples::greedy_reference(m, 0, prompt, n);
}
}  // namespace small_model
