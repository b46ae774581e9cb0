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

//! Draws from norm(max(0, p - q)) over two rows (the speculative-sampling residual, GLIDE §3 /
//! TokenSwift Appendix A). If the residual is identically zero (p == q, so a rejection had
//! probability zero and only rounding got here) it draws from p.
inline std::int32_t sample_residual(std::span<const float> p, std::span<const float> q, philox_stream& rng) {
  double s = 0.0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double d = static_cast<double>(p[i]) - static_cast<double>(q[i]);
    s += d > 0.0 ? d : 0.0;
  }
  if (!(s > 0.0)) return sample_from_probs(p, rng);
  return inverse_cdf(
      p.size(),
      [&](std::size_t i) {
        const double d = static_cast<double>(p[i]) - static_cast<double>(q[i]);
        return d > 0.0 ? d : 0.0;
      },
      s, rng);
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
