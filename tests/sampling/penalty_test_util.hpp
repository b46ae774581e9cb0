#pragma once
// Random repetition and contextual penalties for the tests of the penalty forms (host:
// tests/sampling/test_logits_batch.cpp; CUDA: tests/cuda/test_sampling_batch.cu).
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

}  // namespace specdec_test
