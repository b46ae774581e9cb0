#pragma once
//! \file stochastic.hpp
//! Internals shared by the stochastic verifiers: residual sampling and per-request Philox streams.

#include <cstdint>
#include <span>
#include <string>

#include "specdec/core/error.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/sampling/sampler.hpp"
#include "specdec/tree/token_tree.hpp"

namespace specdec::detail {

//! Sum over tokens [lo, hi) of max(0, p - q) in double (`lanes` partial sums: vectorizes), and
//! whether any entry of either row there breaks the non-finite policy.
inline prob_sum residual_block_sum(const float* p, const float* q, std::size_t lo, std::size_t hi) noexcept {
  double acc[lanes] = {};
  std::size_t i = lo;
  for (; i + lanes <= hi; i += lanes)
    for (int j = 0; j < lanes; ++j) {
      const double d = static_cast<double>(p[i + j]) - static_cast<double>(q[i + j]);
      acc[j] += d > 0.0 ? d : 0.0;
    }
  prob_sum r{0.0, any_inadmissible_prob(p + lo, hi - lo) || any_inadmissible_prob(q + lo, hi - lo)};
  for (; i < hi; ++i) {
    const double d = static_cast<double>(p[i]) - static_cast<double>(q[i]);
    r.sum += d > 0.0 ? d : 0.0;
  }
  for (int j = 0; j < lanes; ++j) r.sum += acc[j];
  return r;
}

//! Draws from norm(max(0, p - q)) over two rows (the speculative-sampling residual, GLIDE §3 /
//! TokenSwift Appendix A) by blocked inverse CDF; the block-sum pass reads every entry of both rows
//! and applies the non-finite policy (errors name `at_p` / `at_q` and the token).
//! If the residual is identically zero (p <= q everywhere; for two distributions that means p == q,
//! so the rejection that led here had probability zero and only rounding got here) it draws from p:
//! the law the emitted token must have, so the output law stays exact. (vLLM's rejection sampler
//! clamps the residual to the smallest normal float instead, which makes this case a uniform draw over
//! the vocabulary, and FlashInfer's chain_speculative_sampling leaves its default, the last vocabulary
//! id: both can emit a token p gives probability 0.)
inline std::int32_t sample_residual(std::span<const float> p, std::span<const float> q, philox_stream& rng,
                                    const row_ref& at_p, const row_ref& at_q) {
  const float* a = p.data();
  const float* b = q.data();
  cdf_blocks blocks;
  blocks.compute(p.size(), [&](std::size_t lo, std::size_t hi) {
    const prob_sum r = residual_block_sum(a, b, lo, hi);
    if (r.bad) [[unlikely]] {
      const std::size_t ip = lo + first_inadmissible_prob(a + lo, hi - lo);
      if (ip < hi) throw_bad_entry(at_p, bad_prob_text, static_cast<std::int64_t>(ip), a[ip]);
      const std::size_t iq = lo + first_inadmissible_prob(b + lo, hi - lo);
      throw_bad_entry(at_q, bad_prob_text, static_cast<std::int64_t>(iq), b[iq]);
    }
    return r.sum;
  });
  if (!(blocks.total() > 0.0)) return draw_from_probs(p, rng, at_p);
  return blocks.draw(
      [&](std::size_t i) {
        const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
        return d > 0.0 ? d : 0.0;
      },
      rng, at_p);
}

//! The Philox stream of request r at decoding step `step`: (seed, stream_id(request id, step)).
inline philox_stream request_stream(std::uint64_t seed, std::uint32_t step, std::span<const std::uint32_t> request_ids,
                                    int r) {
  const std::uint32_t id = request_ids.empty() ? static_cast<std::uint32_t>(r) : request_ids[static_cast<std::size_t>(r)];
  return philox_stream(seed, stream_id(id, step));
}

inline void check_request_ids(std::span<const std::uint32_t> request_ids, int requests, std::string_view function) {
  require(request_ids.empty() || request_ids.size() == static_cast<std::size_t>(requests), function,
          "request_ids.size()", "0 (use the batch index) or num_requests = " + std::to_string(requests),
          request_ids.size());
}

}  // namespace specdec::detail
