#pragma once
//! \file simd_level.hpp
//! Runtime ISA dispatch of the host SIMD kernels: which vector instruction set they run at, chosen
//! once from the CPU (CPUID), overridable by `set_simd_level` and the `SPECDEC_ISA` environment
//! variable.
//!
//! A translation unit built with default flags (baseline x86-64, as most distributions and wheels
//! are) compiles each dispatched kernel family once per level -- `portable` at the file's own flags,
//! `avx2` (AVX2 + FMA + F16C, x86-64-v3) and `avx512` (AVX-512 F/BW/DQ/VL, x86-64-v4) under GCC/Clang
//! target pragmas -- into the namespaces `detail::SPECDEC_HOST_ISA::lvl_{portable,avx2,avx512}`
//! (core/detail/isa_levels.inl), and each public call picks one at its entry. A file whose own
//! flags already reach AVX-512 (-march=native on such a machine, -march=x86-64-v4) compiles one copy
//! at those flags and calls it directly: no dispatch, no table, today's code. So do CUDA translation
//! units (nvcc), other architectures (aarch64: the portable NEON path), other compilers, and any
//! file built with -DSPECDEC_ISA_DISPATCH=0.
//!
//! Which kernels are dispatched (each family: a body .inl compiled per level, an entry point that
//! picks the level): the host attention backend (decode_attention, tree_attention,
//! hybrid_tree_attention and the attention inside the cross/sliding-window helpers: tile, rows and
//! merge passes); the public lse_merge (attention/detail/host/merge.inl); apply_rope
//! (position/detail/rope_kernels.inl); residual_heads (draft/detail/residual_kernels.inl);
//! kv_importance (kv/detail/partial_kv_kernels.inl); topk's block scan (core/detail/topk.inl); the
//! drafters' log-softmax (draft/detail/draft_rows.inl); and the row kernels of logits processing,
//! sampling and verification (sampling/detail/vec.inl). Every level namespace starts with the
//! vector layer (core/detail/simd.inl), included once per level and file.
//!
//! Results may differ between levels in the last bits (FMA contraction and the register blocking
//! change the summation order), never in anything the tests' tolerances or the greedy decoders'
//! argmax could see except exact ties.

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

#include "specdec/core/isa.hpp"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif

// The vector features the kernel bodies (*.inl) are written against. Outside a level region they
// are the file's own; core/detail/isa_levels.inl sets them per level while it includes the bodies.
#define SPECDEC_SIMD_AVX512 SPECDEC_NATIVE_SIMD_AVX512
#define SPECDEC_SIMD_AVX SPECDEC_NATIVE_SIMD_AVX
#define SPECDEC_SIMD_F16C SPECDEC_NATIVE_SIMD_F16C
#define SPECDEC_SIMD_FMA SPECDEC_NATIVE_SIMD_FMA

// Level regions: every function defined between BEGIN and END (lambdas and templates included)
// gets the level's target features. The target strings are what the CPU check below requires.
#if defined(__clang__)
#define SPECDEC_ISA_REGION_BEGIN_AVX2 \
  _Pragma("clang attribute push(__attribute__((target(\"avx2,fma,f16c\"))), apply_to = function)")
// (_Pragma takes one string literal, so the long one is not split.)
#define SPECDEC_ISA_REGION_BEGIN_AVX512 \
  _Pragma("clang attribute push(__attribute__((target(\"avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c\"))), apply_to = function)")
#define SPECDEC_ISA_REGION_END _Pragma("clang attribute pop")
#elif defined(__GNUC__)
#define SPECDEC_ISA_REGION_BEGIN_AVX2 _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,f16c\")")
#define SPECDEC_ISA_REGION_BEGIN_AVX512 \
  _Pragma("GCC push_options") _Pragma("GCC target(\"avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c\")")
#define SPECDEC_ISA_REGION_END _Pragma("GCC pop_options")
#endif

//! SPECDEC_ISA_DISPATCH_CALL(fn<targs>(args...)): the statement that calls the kernel `fn` of a
//! family compiled per level (core/detail/isa_levels.inl) at the level this call dispatches to --
//! detail::SPECDEC_HOST_ISA::lvl_<level>::fn -- or, without dispatch, the copy compiled at the file's
//! own flags, detail::SPECDEC_HOST_ISA::lvl_native::fn. One relaxed atomic load and a switch.
//! SPECDEC_ISA_DISPATCH_RETURN(fn(args...)): the same call as `return fn(args...);`.
//! With SPECDEC_ISA_DISPATCH_TRACE=1 (the dispatching tests), each call also records its level in
//! detail::dispatch_trace, so a test run can prove which copies ran (tests/catch_main.cpp).
#define SPECDEC_ISA_DISPATCH_CALL(...) SPECDEC_ISA_DISPATCH_SWITCH_(, break, __VA_ARGS__)
#define SPECDEC_ISA_DISPATCH_RETURN(...) SPECDEC_ISA_DISPATCH_SWITCH_(return, , __VA_ARGS__)
#if defined(SPECDEC_ISA_DISPATCH_TRACE) && SPECDEC_ISA_DISPATCH_TRACE
#define SPECDEC_ISA_TRACE_(level) ::specdec::detail::dispatch_trace.fetch_or(1u << (level), std::memory_order_relaxed)
#else
#define SPECDEC_ISA_TRACE_(level) static_cast<void>(0)
#endif
#if SPECDEC_ISA_DISPATCH && SPECDEC_NATIVE_SIMD_LEVEL == 0
#define SPECDEC_ISA_DISPATCH_SWITCH_(pre, post, ...)                            \
  switch (::specdec::detail::dispatch_simd_level()) {                           \
    case 2: SPECDEC_ISA_TRACE_(2); pre ::specdec::detail::lvl_avx512::__VA_ARGS__; post; \
    case 1: SPECDEC_ISA_TRACE_(1); pre ::specdec::detail::lvl_avx2::__VA_ARGS__; post;   \
    default: SPECDEC_ISA_TRACE_(0); pre ::specdec::detail::lvl_portable::__VA_ARGS__; post; \
  }
#elif SPECDEC_ISA_DISPATCH  // the file's own flags are at the avx2 level: no portable copy
#define SPECDEC_ISA_DISPATCH_SWITCH_(pre, post, ...)                            \
  switch (::specdec::detail::dispatch_simd_level()) {                           \
    case 2: SPECDEC_ISA_TRACE_(2); pre ::specdec::detail::lvl_avx512::__VA_ARGS__; post; \
    default: SPECDEC_ISA_TRACE_(1); pre ::specdec::detail::lvl_avx2::__VA_ARGS__; post;  \
  }
#else
#define SPECDEC_ISA_DISPATCH_SWITCH_(pre, post, ...) pre ::specdec::detail::lvl_native::__VA_ARGS__
#endif

namespace specdec {

//! The vector instruction-set levels the dispatched host kernels are compiled for.
enum class simd_level : int {
  portable = 0,  //!< the including file's own flags (SSE2 on baseline x86-64; NEON on aarch64)
  avx2 = 1,      //!< AVX2, FMA and F16C (x86-64-v3): 16-lane vectors as two ymm registers
  avx512 = 2,    //!< AVX-512 F/BW/DQ/VL (x86-64-v4): 16-lane vectors as one zmm register
};

//! "portable", "avx2" or "avx512".
[[nodiscard]] constexpr std::string_view to_string(simd_level l) noexcept {
  switch (l) {
    case simd_level::avx2: return "avx2";
    case simd_level::avx512: return "avx512";
    default: return "portable";
  }
}

namespace detail {

//! The highest level this CPU and OS run (CPUID; AVX/AVX-512 register state enabled by the OS,
//! which the compilers' __builtin_cpu_supports checks). Computed once.
[[nodiscard]] inline int detect_cpu_simd_level() noexcept {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  unsigned a = 0, b = 0, c = 0, d = 0;
  // F16C: CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports does not know "f16c").
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & (1u << 29)) != 0;
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
  const bool v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return v4 ? 2 : v3 ? 1 : 0;
#else
  return 0;
#endif
}

[[nodiscard]] inline int cpu_simd_level_cached() noexcept {
  static const int level = detect_cpu_simd_level();
  return level;
}

//! The level SPECDEC_ISA names: portable (alias baseline), avx2, avx512, best (or unset: the CPU's).
//! Anything else is an error, not a silent fallback.
[[nodiscard]] inline int simd_level_from_env() {
  const char* v = std::getenv("SPECDEC_ISA");
  const std::string_view s = v == nullptr ? std::string_view{} : std::string_view{v};
  if (s.empty() || s == "best") return 2;
  if (s == "portable" || s == "baseline") return 0;
  if (s == "avx2") return 1;
  if (s == "avx512") return 2;
  throw std::invalid_argument("specdec: environment variable SPECDEC_ISA: expected portable, baseline, avx2, "
                              "avx512 or best, got \"" + std::string(s) + "\"");
}

//! Bit l set: a dispatched call ran level l's copy (recorded only where SPECDEC_ISA_DISPATCH_TRACE
//! is 1). Process-wide, like simd_request.
inline std::atomic<unsigned> dispatch_trace{0};
//! Whether set_simd_level has been called in this process (tests that walk the levels themselves).
inline std::atomic<bool> simd_level_set_in_process{false};

//! The process-wide requested ceiling (-1: not read yet). Outside the ISA namespace on purpose:
//! every file of the program shares this one object, so one set_simd_level reaches all of them.
inline std::atomic<int> simd_request{-1};

[[nodiscard]] inline int requested_simd_level() {
  int r = simd_request.load(std::memory_order_relaxed);
  if (r < 0) [[unlikely]] {
    r = simd_level_from_env();
    int expected = -1;
    if (!simd_request.compare_exchange_strong(expected, r, std::memory_order_relaxed)) r = expected;
  }
  return r;
}

inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp: each file answers for its own flags
//! The level this file's dispatched kernels run at now: the request capped by the CPU, but never
//! below what the file's own flags already assume.
[[nodiscard]] inline int dispatch_simd_level() {
  return std::max(std::min(requested_simd_level(), cpu_simd_level_cached()), SPECDEC_NATIVE_SIMD_LEVEL);
}
}  // namespace SPECDEC_HOST_ISA

}  // namespace detail

//! The highest level this machine runs.
[[nodiscard]] inline simd_level cpu_simd_level() noexcept {
  return static_cast<simd_level>(detail::cpu_simd_level_cached());
}

//! Caps the level of every dispatched host kernel in the process at `l` (tests and benchmarks run
//! each level this way; SPECDEC_ISA does the same from the environment). Returns false, and
//! changes nothing, when this CPU cannot run `l`. Not to be called while kernels run on other
//! threads. A file whose own flags are above `l` keeps running at its flags (see active_simd_level).
inline bool set_simd_level(simd_level l) noexcept {
  if (static_cast<int>(l) > detail::cpu_simd_level_cached() || static_cast<int>(l) < 0) return false;
  detail::simd_request.store(static_cast<int>(l), std::memory_order_relaxed);
  detail::simd_level_set_in_process.store(true, std::memory_order_relaxed);
  return true;
}

//! Back to the default: SPECDEC_ISA if set, else the best level the CPU runs. Throws
//! std::invalid_argument (naming the variable) when SPECDEC_ISA holds an unknown value.
inline void reset_simd_level() { detail::simd_request.store(detail::simd_level_from_env(), std::memory_order_relaxed); }

inline namespace SPECDEC_HOST_ISA {
//! The level the dispatched kernels called from this file run at now (an engine's startup log
//! should print it). Without dispatch (see SPECDEC_ISA_DISPATCH): the level the file's flags give.
[[nodiscard]] inline simd_level active_simd_level() {
#if SPECDEC_ISA_DISPATCH
  return static_cast<simd_level>(detail::dispatch_simd_level());
#else
  return static_cast<simd_level>(SPECDEC_NATIVE_SIMD_LEVEL);
#endif
}
}  // namespace SPECDEC_HOST_ISA

}  // namespace specdec
