#pragma once
// Shared by the specdec libFuzzer targets (tests/fuzz/README.md): the target registry, a decoder that
// turns the fuzzer's bytes into API arguments biased towards edge values, and the finding check.
//
// A target decodes its bytes into arguments of one public entry point, calls it, and checks what it
// can check cheaply about the result. specdec::invalid_argument is a fine outcome (the driver catches
// it); any other exception, a sanitizer report, or a failed check() is a finding (abort).

#include <fuzzer/FuzzedDataProvider.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/tree/token_tree.hpp"

namespace specdec_fuzz {

//! One fuzz target: `run` gets the raw input; `what` is the one-line description -target=list prints.
struct target {
  std::string_view name;
  void (*run)(const std::uint8_t* data, std::size_t size);
  std::string_view what;
};

//! Every target linked into the executable, in registration order (defined in fuzz_main.cpp).
std::vector<target>& registry();

//! Registers a target at static-initialisation time (one object per target, see SPECDEC_FUZZ_TARGET).
struct registrar {
  registrar(std::string_view name, void (*run)(const std::uint8_t*, std::size_t), std::string_view what) {
    registry().push_back({name, run, what});
  }
};

//! Defines and registers target `name`: the body sees `data` and `size`.
#define SPECDEC_FUZZ_TARGET(name, what)                                                              \
  static void specdec_fuzz_##name(const std::uint8_t* data, std::size_t size);                      \
  static const ::specdec_fuzz::registrar specdec_fuzz_registrar_##name{#name, specdec_fuzz_##name, what}; \
  static void specdec_fuzz_##name(const std::uint8_t* data, std::size_t size)

//! Reports a finding and aborts, so libFuzzer saves the input as a crash artifact.
[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "\n==specdec-fuzz== FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

//! The invariant `cond` must hold; otherwise a finding described by the message expression, which is
//! evaluated only then (messages are built from strings: building them on every check would
//! dominate the execution time).
#define FUZZ_CHECK(cond, ...)                                             \
  do {                                                                    \
    if (!(cond)) [[unlikely]] ::specdec_fuzz::finding(__VA_ARGS__);       \
  } while (0)

//! True (the default) while the targets steer around the open finding `id` (findings/<id>), so a CI
//! run reports only new ones; -open_findings=1 (all) or -open_findings=<id> (that one) turn it off.
bool avoid_open_finding(std::string_view id);

//! Steering around the open finding `id` (its input is findings/<target>/<id>): true when this input
//! would reproduce it (`reproduces`) and the run avoids open findings; the target then returns. One
//! call per open finding, next to the call it guards; delete it when the fix lands.
inline bool steer(std::string_view id, bool reproduces) { return reproduces && avoid_open_finding(id); }

//! The fuzzer's bytes as API arguments. Sizes are small (fast executions, dense coverage); integers
//! and floats come from palettes biased to the values where bugs live (0, -1, INT32_MAX, denormals,
//! +-inf, NaN) mixed with ordinary values.
class input {
 public:
  input(const std::uint8_t* data, std::size_t size) : p_(data, size) {}

  [[nodiscard]] FuzzedDataProvider& provider() noexcept { return p_; }
  [[nodiscard]] bool empty() { return p_.remaining_bytes() == 0; }

  //! An integer in [lo, hi].
  int range(int lo, int hi) { return p_.ConsumeIntegralInRange<int>(lo, hi); }
  //! True with probability about percent / 100.
  bool chance(int percent) { return p_.ConsumeIntegralInRange<int>(0, 99) < percent; }
  bool coin() { return p_.ConsumeBool(); }
  std::uint64_t u64() { return p_.ConsumeIntegral<std::uint64_t>(); }

  //! An int32 argument: usually in [lo, hi], sometimes an edge of the int32 range or anything.
  std::int32_t int32(std::int32_t lo, std::int32_t hi) {
    hi = std::max(lo, hi);
    const int sel = range(0, 15);
    if (sel < 12) return p_.ConsumeIntegralInRange<std::int32_t>(lo, hi);
    if (sel < 15) {
      static constexpr std::int32_t edge[] = {0, -1, -2, 1, std::numeric_limits<std::int32_t>::max(),
                                              std::numeric_limits<std::int32_t>::max() - 1,
                                              std::numeric_limits<std::int32_t>::min(), 1 << 30, (1 << 30) + 1,
                                              65535, 65536};
      return edge[range(0, static_cast<int>(std::size(edge)) - 1)];
    }
    return p_.ConsumeIntegral<std::int32_t>();
  }

  //! A float: ordinary values in [lo, hi] most of the time, otherwise a special value.
  float real(float lo, float hi, int special_percent = 12) {
    if (!chance(special_percent)) return p_.ConsumeFloatingPointInRange<float>(lo, hi);
    constexpr float inf = std::numeric_limits<float>::infinity();
    static constexpr float special[] = {0.0f,
                                        -0.0f,
                                        1.0f,
                                        -1.0f,
                                        std::numeric_limits<float>::denorm_min(),
                                        std::numeric_limits<float>::min(),
                                        std::numeric_limits<float>::max(),
                                        -std::numeric_limits<float>::max(),
                                        inf,
                                        -inf,
                                        std::numeric_limits<float>::quiet_NaN(),
                                        1e-30f,
                                        1e30f,
                                        -1e30f,
                                        88.7f,
                                        -103.9f,
                                        1e-3f,
                                        0.5f};
    return special[range(0, static_cast<int>(std::size(special)) - 1)];
  }
  //! A logit: mostly in [-20, 20].
  float logit() { return real(-20.0f, 20.0f); }
  //! A log-probability: mostly in [-20, 0].
  float logprob() { return real(-20.0f, 0.0f); }
  //! A probability-like weight: mostly in [0, 1].
  float prob() { return real(0.0f, 1.0f); }

  //! n values of `gen`.
  template <class Gen>
  auto many(std::size_t n, Gen&& gen) {
    std::vector<decltype(gen())> out;
    out.reserve(n);
    for (std::size_t i = 0; i < n; ++i) out.push_back(gen());
    return out;
  }

  //! A token id: in [0, vocab) usually, sometimes just outside it, rarely any int32.
  std::int32_t token(int vocab) {
    if (vocab <= 0) return int32(0, 8);
    const int sel = range(0, 31);
    if (sel < 29) return range(0, vocab - 1);
    if (sel == 29) return vocab;
    if (sel == 30) return -1;
    return p_.ConsumeIntegral<std::int32_t>();
  }

  //! Parents of an n-node tree in topological order: valid (parent in [-1, i)) unless `invalid`,
  //! with shapes from chains to stars.
  std::vector<std::int32_t> parents(int n, bool allow_invalid = false) {
    std::vector<std::int32_t> par(static_cast<std::size_t>(n));
    const int shape = range(0, 3);  // 0: random, 1: chain, 2: star, 3: mostly chain with branches
    for (int i = 0; i < n; ++i) {
      std::int32_t p;
      if (shape == 1) p = i - 1;
      else if (shape == 2) p = -1;
      else if (shape == 3) p = chance(80) ? i - 1 : range(-1, i - 1);
      else p = range(-1, i - 1);
      if (allow_invalid && chance(3)) p = int32(-3, n + 2);
      par[static_cast<std::size_t>(i)] = p;
    }
    return par;
  }

  //! A valid token_tree of at most max_nodes nodes over tokens from token(vocab).
  specdec::token_tree tree(int max_nodes, int vocab) {
    const int n = range(0, max_nodes);
    const auto par = parents(n);
    specdec::token_tree t;
    for (int i = 0; i < n; ++i) t.add(token(vocab), par[static_cast<std::size_t>(i)], logprob());
    return t;
  }

 private:
  FuzzedDataProvider p_;
};

//! Bitwise tree equality (token_tree's operator== says NaN log-probs differ from themselves).
inline bool same_tree(const specdec::token_tree& a, const specdec::token_tree& b) {
  const auto bits = [](std::span<const float> x, std::span<const float> y) {
    return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size_bytes()) == 0);
  };
  return a.size() == b.size() && std::equal(a.tokens().begin(), a.tokens().end(), b.tokens().begin()) &&
         std::equal(a.parents().begin(), a.parents().end(), b.parents().begin()) && bits(a.logprobs(), b.logprobs()) &&
         bits(a.scores(), b.scores());
}

//! True iff x is NaN or +inf (the values token-producing entry points must reject).
inline bool nan_or_posinf(float x) { return std::isnan(x) || x == std::numeric_limits<float>::infinity(); }

//! True iff some entry of `row` is NaN or +inf.
inline bool any_nan_or_posinf(std::span<const float> row) {
  for (float x : row)
    if (nan_or_posinf(x)) return true;
  return false;
}

//! A float in a finding message, exactly enough to reproduce it ("%.9g": 1e-45, not 0.000000).
inline std::string num(float x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(x));
  return buf;
}

//! "[a, b, c]" for finding messages.
template <class T>
std::string list(std::span<const T> v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}
template <class T>
std::string list(const std::vector<T>& v) {
  return list(std::span<const T>(v));
}

}  // namespace specdec_fuzz
