#pragma once
//! \file metrics.hpp
//! Speculative-decoding metrics: tau (mean tokens per target forward, LongSpec §4), alpha (TokenSwift
//! Eq. 4), Leviathan et al.'s expected speedup (GLIDE §5.1), Distinct-n (Li et al. 2016, as TokenSwift
//! reports it) and per-phase wall-clock timers (draft, target, verify; cf. LongSpec's Table 5).
//! Non-finite numbers: every floating-point argument is checked (NaN and infinities rejected with
//! specdec::invalid_argument naming it); denormals are ordinary numbers.

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/verify/verify_result.hpp"

namespace specdec {

//! alpha of TokenSwift Eq. 4: sum_i a_i / ((gamma + 1) T), where a_i is the number of tokens accepted at
//! step i (at most gamma + 1, the draft tokens per step) and T the number of steps. (Unlike Leviathan et
//! al.'s per-token acceptance probability; see mean_accepted_length for tau.)
//! Preconditions: gamma >= 0; every a_i in [0, gamma + 1]; T >= 1. O(T).
[[nodiscard]] inline double acceptance_rate_eq4(std::span<const std::int32_t> accepted_per_step, int gamma) {
  constexpr std::string_view fn = "specdec::acceptance_rate_eq4";
  require(gamma >= 0, fn, "gamma", ">= 0", gamma);
  require(!accepted_per_step.empty(), fn, "accepted_per_step", "at least one step", accepted_per_step.size());
  const std::int64_t per_step = std::int64_t{gamma} + 1;  // gamma may be INT_MAX
  double s = 0.0;
  for (std::size_t i = 0; i < accepted_per_step.size(); ++i) {
    const auto a = accepted_per_step[i];
    if (a < 0 || a > per_step) [[unlikely]]
      throw_invalid_argument(fn, "accepted_per_step[" + std::to_string(i) + "]",
                             "a value in [0, gamma + 1 = " + std::to_string(per_step) + "]", a);
    s += a;
  }
  return s / (static_cast<double>(per_step) * static_cast<double>(accepted_per_step.size()));
}

//! tau, the mean accepted length (LongSpec §4: "the average number of tokens accepted per forward pass
//! of the target LLM"): emitted tokens (accepted + the bonus) per verification step. O(T).
[[nodiscard]] inline double mean_accepted_length(std::span<const verify_result> steps) {
  require(!steps.empty(), "specdec::mean_accepted_length", "steps", "at least one step", steps.size());
  double s = 0.0;
  for (const auto& r : steps) s += r.num_emitted();
  return s / static_cast<double>(steps.size());
}

//! Expected walltime improvement of speculative sampling (Leviathan et al. 2023, GLIDE §5.1):
//! (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1)), with alpha the per-token acceptance rate, gamma
//! the proposal length and c the draft/target cost ratio; at alpha = 1 its limit (gamma + 1)/(gamma c + 1).
//! Preconditions: alpha in [0, 1], gamma >= 0, c >= 0 and finite. O(1).
[[nodiscard]] inline double expected_speedup(double alpha, int gamma, double c) {
  constexpr std::string_view fn = "specdec::expected_speedup";
  require(alpha >= 0.0 && alpha <= 1.0, fn, "alpha", "a value in [0, 1]", alpha);
  require(gamma >= 0, fn, "gamma", ">= 0", gamma);
  require(std::isfinite(c) && c >= 0.0, fn, "c", "a finite value >= 0", c);
  const double denom = static_cast<double>(gamma) * c + 1.0;
  if (alpha == 1.0) return (gamma + 1.0) / denom;
  return (1.0 - std::pow(alpha, static_cast<double>(gamma) + 1.0)) / ((1.0 - alpha) * denom);
}

//! Distinct-n (Li et al. 2016): number of distinct n-grams / number of n-grams in `tokens`; 0 when the
//! sequence is shorter than n. Preconditions: n >= 1. O(L log L) for L tokens.
[[nodiscard]] inline double distinct_n(std::span<const std::int32_t> tokens, int n) {
  require(n >= 1, "specdec::distinct_n", "n", ">= 1", n);
  if (tokens.size() < static_cast<std::size_t>(n)) return 0.0;
  const std::size_t total = tokens.size() - static_cast<std::size_t>(n) + 1;
  std::set<std::vector<std::int32_t>> seen;
  for (std::size_t i = 0; i < total; ++i) seen.emplace(tokens.begin() + static_cast<std::ptrdiff_t>(i),
                                                       tokens.begin() + static_cast<std::ptrdiff_t>(i) + n);
  return static_cast<double>(seen.size()) / static_cast<double>(total);
}

//! Decoding phases timed separately.
enum class decode_phase : std::uint8_t { draft, target, verify };

//! Accumulates per-step statistics and per-phase wall time (milliseconds, steady clock) of a
//! speculative decoder. record() each verification result; time phases with scoped(phase).
class decode_metrics {
 public:
  //! RAII timer: adds the elapsed time to its phase on destruction (the phase is checked here, so the
  //! destructor does not throw).
  class scoped_timer {
   public:
    scoped_timer(decode_metrics& m, decode_phase p) : m_(m), p_(p), t0_(std::chrono::steady_clock::now()) {
      static_cast<void>(phase_index(p, "specdec::decode_metrics::scoped"));
    }
    scoped_timer(const scoped_timer&) = delete;
    scoped_timer& operator=(const scoped_timer&) = delete;
    ~scoped_timer() {
      m_.add_ms(p_, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count());
    }

   private:
    decode_metrics& m_;
    decode_phase p_;
    std::chrono::steady_clock::time_point t0_;
  };

  //! Starts timing `phase` until the returned object is destroyed.
  [[nodiscard]] scoped_timer scoped(decode_phase phase) { return scoped_timer(*this, phase); }
  //! Adds `ms` milliseconds to a phase (ms finite and >= 0: an infinite time would poison the total).
  void add_ms(decode_phase phase, double ms) {
    require(ms >= 0.0 && ms <= std::numeric_limits<double>::max(), "specdec::decode_metrics::add_ms", "ms",
            "a finite value >= 0", ms);
    ms_[phase_index(phase, "specdec::decode_metrics::add_ms")] += ms;
  }
  //! Records one verification step (one target forward).
  void record(const verify_result& r) {
    ++steps_;
    emitted_ += r.num_emitted();
    accepted_.push_back(static_cast<std::int32_t>(r.accepted.size()));
  }
  [[nodiscard]] std::int64_t steps() const noexcept { return steps_; }
  [[nodiscard]] std::int64_t emitted() const noexcept { return emitted_; }
  //! tau: emitted tokens per target forward (0 before the first step).
  [[nodiscard]] double tau() const noexcept { return steps_ ? static_cast<double>(emitted_) / steps_ : 0.0; }
  //! TokenSwift Eq. 4 over the recorded steps (accepted draft tokens per step, gamma + 1 per step).
  [[nodiscard]] double alpha(int gamma) const { return acceptance_rate_eq4(accepted_, gamma); }
  //! Accumulated milliseconds of a phase.
  [[nodiscard]] double ms(decode_phase phase) const { return ms_[phase_index(phase, "specdec::decode_metrics::ms")]; }
  //! Accepted draft tokens per recorded step.
  [[nodiscard]] std::span<const std::int32_t> accepted_per_step() const noexcept { return accepted_; }

 private:
  static constexpr int num_phases = 3;
  //! The slot of `phase` in ms_; invalid_argument for a value that is no decode_phase enumerator.
  static std::size_t phase_index(decode_phase phase, std::string_view fn) {
    const int i = static_cast<int>(phase);
    require(i >= 0 && i < num_phases, fn, "phase", "decode_phase::draft, target or verify", i);
    return static_cast<std::size_t>(i);
  }
  std::int64_t steps_ = 0, emitted_ = 0;
  std::vector<std::int32_t> accepted_;
  double ms_[num_phases] = {0.0, 0.0, 0.0};
};

}  // namespace specdec
