#pragma once
// Random repetition and contextual penalties, and random processors, for the tests of the batch forms
// (host: tests/sampling/test_logits_batch.cpp, tests/verify/sample_and_match_batch_util.hpp; CUDA:
// tests/cuda/test_sampling_batch.cu).
#include <cstdint>

#include "specdec/core/philox.hpp"
#include "specdec/sampling/logits_processor.hpp"

namespace specdec_test {

//! Sets p's penalties at random: a repetition and a contextual penalty each with probability 3/4
//! (values in [1, 3)), the window 1024 with probability 1 / window_odds and else below(window_max),
//! sign-aware or not. The draws are always taken in this order.
inline void add_random_penalties(specdec::sampling_params& p, specdec::philox_stream& rng, std::uint32_t window_odds,
                                 std::uint32_t window_max) {
  if (rng.below(4) != 0) p.repetition_penalty = 1.0f + 2.0f * rng.uniform();
  if (rng.below(4) != 0) p.contextual_penalty = 1.0f + 2.0f * rng.uniform();
  p.penalty_window = static_cast<int>(rng.below(window_odds) == 0 ? 1024 : rng.below(window_max));
  p.contextual_sign_aware = rng.below(2) == 0;
}

//! Sets p's processors at random: the temperature 0 (1 in 8), 1 (1 in 8 of the rest) or in [0.2, 2),
//! then 1e-30 (1 in 8: temperature's shifted path); top-k in [1, min(v + 2, 3000)], top-p (1e-6 in 1
//! of 6, else in [0.05, 0.95)), min-p in [0, 0.3) and eta's epsilon in [0, 0.2), each with
//! probability 1/2. The draws are always taken in this order.
inline void add_random_processors(specdec::sampling_params& p, specdec::philox_stream& rng, std::int64_t v) {
  const auto pick = [&] { return rng.below(2) == 0; };
  p.temperature = rng.below(8) == 0 ? 0.0f : rng.below(8) == 0 ? 1.0f : 0.2f + 1.8f * rng.uniform();
  if (rng.below(8) == 0) p.temperature = 1e-30f;
  if (pick()) p.top_k = 1 + static_cast<int>(rng.below(static_cast<std::uint32_t>(v + 2 < 3000 ? v + 2 : 3000)));
  if (pick()) p.top_p = rng.below(6) == 0 ? 1e-6f : 0.05f + 0.9f * rng.uniform();
  if (pick()) p.min_p = 0.3f * rng.uniform();
  if (pick()) p.eta_epsilon = 0.2f * rng.uniform();
}

}  // namespace specdec_test
