#pragma once
//! \file isa.hpp
//! SPECDEC_HOST_ISA: the name of an inline namespace spelled from the instruction-set features the
//! including translation unit is compiled for (`isa_x86_avx_avx2_fma_f16c_bmi2` under
//! -march=x86-64-v3, for example).
//!
//! Why: the host kernels are inline templates whose code depends on the compile flags (simd.hpp
//! picks zmm, ymm or xmm vectors from `__AVX512F__` / `__AVX__`; F16C conversions from `__F16C__`).
//! An engine that dispatches at run time compiles some files with, say, -march=x86-64-v4 and
//! others with -march=x86-64-v3, and may include the same specdec header in both. Without a
//! distinct name per feature set, both files instantiate `specdec::decode_attention<...>` under
//! one mangled name, the linker keeps one body (possibly the AVX-512 one), and the AVX2 path runs
//! AVX-512 instructions: a one-definition-rule violation that surfaces as SIGILL on another
//! machine. Code whose generated instructions depend on these flags, and every function on the
//! call path from a public entry point down to it, is declared inside
//! `inline namespace SPECDEC_HOST_ISA`, so each feature set gets its own symbols. Users still
//! write `specdec::decode_attention(...)`: an inline namespace is transparent to lookup.
//!
//! Scope (design.md, "Performance habits"): the host attention path (public entry points,
//! validation, kernels, backends), lse_merge and RoPE's host path. Types stay outside the ISA
//! namespace, so an engine's own headers can pass specdec types between files compiled with
//! different flags. Small inline helpers outside that path (tensor views, KV layout accessors,
//! samplers) follow the usual C++ rule, as the standard library's own templates do: files that
//! share them should be compiled with the same target flags, or the ISA-specific files linked
//! into separate shared objects with hidden visibility.
//!
//! CUDA kernels stay outside it: they gain nothing from it. (Were one inside, its name would still
//! agree between nvcc's passes: the device pass sees the host compiler's target macros too; checked
//! with nvcc 13.0 and -Xcompiler -mavx2.)

#include <string_view>

// One token per feature, pasted after the platform: an empty macro pastes as nothing.
#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#define SPECDEC_ISA_ARCH_ isa_x86
#elif defined(__aarch64__)
#define SPECDEC_ISA_ARCH_ isa_arm64
#else
#define SPECDEC_ISA_ARCH_ isa_generic
#endif
#if defined(__SSE4_1__)
#define SPECDEC_ISA_F0_ _sse41
#else
#define SPECDEC_ISA_F0_
#endif
#if defined(__AVX__)
#define SPECDEC_ISA_F1_ _avx
#else
#define SPECDEC_ISA_F1_
#endif
#if defined(__AVX2__)
#define SPECDEC_ISA_F2_ _avx2
#else
#define SPECDEC_ISA_F2_
#endif
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define SPECDEC_ISA_F3_ _fma
#else
#define SPECDEC_ISA_F3_
#endif
#if defined(__F16C__)
#define SPECDEC_ISA_F4_ _f16c
#else
#define SPECDEC_ISA_F4_
#endif
#if defined(__BMI2__)
#define SPECDEC_ISA_F5_ _bmi2
#else
#define SPECDEC_ISA_F5_
#endif
#if defined(__AVX512F__)
#define SPECDEC_ISA_F6_ _avx512f
#else
#define SPECDEC_ISA_F6_
#endif
#if defined(__AVX512BW__)
#define SPECDEC_ISA_F7_ _avx512bw
#else
#define SPECDEC_ISA_F7_
#endif
#if defined(__AVX512DQ__)
#define SPECDEC_ISA_F8_ _avx512dq
#else
#define SPECDEC_ISA_F8_
#endif
#if defined(__AVX512VL__)
#define SPECDEC_ISA_F9_ _avx512vl
#else
#define SPECDEC_ISA_F9_
#endif
#if defined(__ARM_FEATURE_SVE)
#define SPECDEC_ISA_F10_ _sve
#else
#define SPECDEC_ISA_F10_
#endif
#if defined(__ARM_FEATURE_FP16_VECTOR_ARITHMETIC)
#define SPECDEC_ISA_F11_ _fp16
#else
#define SPECDEC_ISA_F11_
#endif

#define SPECDEC_ISA_PASTE_(a, b, c, d, e, f, g, h, i, j, k, l, m) a##b##c##d##e##f##g##h##i##j##k##l##m
#define SPECDEC_ISA_PASTE(a, b, c, d, e, f, g, h, i, j, k, l, m) SPECDEC_ISA_PASTE_(a, b, c, d, e, f, g, h, i, j, k, l, m)
#define SPECDEC_ISA_STR_(x) #x
#define SPECDEC_ISA_STR(x) SPECDEC_ISA_STR_(x)

//! Name of the inline namespace holding this translation unit's ISA-dependent host code.
#define SPECDEC_HOST_ISA                                                                                          \
  SPECDEC_ISA_PASTE(SPECDEC_ISA_ARCH_, SPECDEC_ISA_F0_, SPECDEC_ISA_F1_, SPECDEC_ISA_F2_, SPECDEC_ISA_F3_,         \
                    SPECDEC_ISA_F4_, SPECDEC_ISA_F5_, SPECDEC_ISA_F6_, SPECDEC_ISA_F7_, SPECDEC_ISA_F8_,          \
                    SPECDEC_ISA_F9_, SPECDEC_ISA_F10_, SPECDEC_ISA_F11_)

namespace specdec {
inline namespace SPECDEC_HOST_ISA {

//! The feature set this translation unit's host kernels are compiled for, as the inline namespace
//! spells it (e.g. "isa_x86_sse41_avx_avx2_fma_f16c_bmi2"). Useful in an engine's startup log, and
//! different in each file built with different target flags.
[[nodiscard]] constexpr std::string_view host_isa_name() noexcept { return SPECDEC_ISA_STR(SPECDEC_HOST_ISA); }

}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec
