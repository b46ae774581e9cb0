#pragma once
// Statistics for the losslessness tests: a chi-square goodness-of-fit test with a p-value computed
// here (regularized upper incomplete gamma, Numerical Recipes §6.2: series for x < a + 1, Lentz
// continued fraction otherwise), plus small helpers to build random distributions.
//
// Threshold used by every statistical test in tests/verify and tests/sampling: a correct sampler must
// give p-value > 1e-4 (fixed seeds, so a pass is reproducible; the chance that a correct sampler fails
// is 1e-4 per case for an unlucky seed). Cells with expected count < 5 are pooled into one cell so the
// chi-square approximation holds.

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <stdexcept>
#include <vector>

#include "specdec/core/philox.hpp"

namespace stat {

inline constexpr double p_threshold = 1e-4;

// P(a, x) by series; valid and fast for x < a + 1.
inline double gamma_p_series(double a, double x) {
  double sum = 1.0 / a, term = sum, ap = a;
  for (int n = 0; n < 100000; ++n) {
    ap += 1.0;
    term *= x / ap;
    sum += term;
    if (std::fabs(term) < std::fabs(sum) * 1e-16) break;
  }
  return sum * std::exp(-x + a * std::log(x) - std::lgamma(a));
}

// Q(a, x) by continued fraction (modified Lentz); valid for x >= a + 1.
inline double gamma_q_cf(double a, double x) {
  const double tiny = 1e-300;
  double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
  for (int i = 1; i < 100000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1.0) < 1e-16) break;
  }
  return std::exp(-x + a * std::log(x) - std::lgamma(a)) * h;
}

// Regularized upper incomplete gamma Q(a, x) = Gamma(a, x) / Gamma(a).
inline double gamma_q(double a, double x) {
  if (x <= 0.0) return 1.0;
  if (x < a + 1.0) return 1.0 - gamma_p_series(a, x);
  return gamma_q_cf(a, x);
}

// Upper tail of the chi-square distribution with k degrees of freedom.
inline double chi2_sf(double x, double k) { return gamma_q(0.5 * k, 0.5 * x); }

struct chi2_result {
  double statistic = 0.0;
  int dof = 0;
  double p_value = 1.0;
};

// Goodness of fit of observed counts (keyed by outcome) against exact probabilities (same keys; sum 1).
// An observed outcome with zero expected probability makes the statistic infinite (p = 0).
template <class Key>
chi2_result chi_square(const std::map<Key, std::int64_t>& observed, const std::map<Key, double>& expected,
                       std::int64_t trials) {
  chi2_result r;
  for (const auto& [k, c] : observed)
    if (c > 0 && (!expected.count(k) || expected.at(k) <= 0.0)) {
      r.statistic = std::numeric_limits<double>::infinity();
      r.p_value = 0.0;
      return r;
    }
  double pooled_e = 0.0, pooled_o = 0.0;
  int cells = 0;
  for (const auto& [k, p] : expected) {
    const double e = p * static_cast<double>(trials);
    const auto it = observed.find(k);
    const double o = it == observed.end() ? 0.0 : static_cast<double>(it->second);
    if (e < 5.0) {
      pooled_e += e;
      pooled_o += o;
      continue;
    }
    r.statistic += (o - e) * (o - e) / e;
    ++cells;
  }
  if (pooled_e > 0.0) {
    if (pooled_e >= 1.0) {
      r.statistic += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
      ++cells;
    } else if (pooled_o > 5.0) {  // a tiny pooled cell that is hit often is itself evidence of bias
      r.statistic += (pooled_o - pooled_e) * (pooled_o - pooled_e) / std::max(pooled_e, 1e-12);
      ++cells;
    }
  }
  r.dof = std::max(1, cells - 1);
  r.p_value = chi2_sf(r.statistic, r.dof);
  return r;
}

// A random probability vector of size v with roughly `zeros` exact zeros (Dirichlet-like via
// exponentials raised to a power for varied peakedness). Deterministic in (seed, stream).
inline std::vector<double> random_dist(int v, specdec::philox_stream& rng, double sharpness = 1.0, int zeros = 0) {
  std::vector<double> p(static_cast<std::size_t>(v));
  double s = 0.0;
  for (auto& x : p) {
    x = std::pow(-std::log(1.0 - rng.uniform_double()), sharpness);
    s += x;
  }
  for (int z = 0; z < zeros; ++z) {
    const auto i = static_cast<std::size_t>(rng.below(static_cast<std::uint32_t>(v)));
    s -= p[i];
    p[i] = 0.0;
  }
  if (s <= 0.0) {
    p[0] = 1.0;
    s = 1.0;
  }
  for (auto& x : p) x /= s;
  return p;
}

}  // namespace stat
