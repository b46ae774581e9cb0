#pragma once
//! \file isa.hpp
//! SPECDEC_HOST_ISA: the name of an inline namespace spelled from the instruction-set features the
//! including translation unit is compiled for, plus `_dispatch` when it compiles the host kernels
//! once per level and chooses at run time (core/simd_level.hpp; the macros that decide it are
//! below: SPECDEC_NATIVE_SIMD_*, SPECDEC_ISA_DISPATCH), plus `_hd64`, `_hd64_128`, ... when
//! SPECDEC_HOST_HEAD_DIMS restricts the head dims the host attention is compiled for (28 feature macros, e.g.
//! `isa_x86_sse41_popcnt_avx_avx2_fma_f16c_bmi_bmi2_lzcnt_movbe` under -march=x86-64-v3; x86-64-v4
//! adds `_avx512f_avx512bw_avx512dq_avx512vl`, Sapphire Rapids also its FP16/BF16/VNNI/VBMI sets).
//!
//! Why: the host kernels are inline templates whose code depends on the compile flags (simd.hpp
//! picks zmm, ymm or xmm vectors from `__AVX512F__` / `__AVX__`; F16C conversions from `__F16C__`).
//! An engine that dispatches at run time compiles some files with, say, -march=x86-64-v4 and others
//! with -march=x86-64-v3, and may include the same specdec header in both. Without a distinct name
//! per feature set, both files instantiate `specdec::decode_attention<...>` under one mangled name,
//! the linker keeps one body (possibly the AVX-512 one), and the AVX2 path runs AVX-512
//! instructions: a one-definition-rule violation that surfaces as SIGILL on another machine. Users
//! still write `specdec::decode_attention(...)`: an inline namespace is transparent to lookup.
//!
//! What is inside `inline namespace SPECDEC_HOST_ISA`: the host attention path (public entry
//! points, validation, backends, kernels, simd.hpp), lse_merge, RoPE's host path, and the free
//! helpers those call (core/error.hpp's require* and formatting, core/tensor.hpp's shape checks,
//! the kv layouts' validate_layout / validate_kv_layout, RoPE's parameter checks and frequencies).
//!
//! What is not, and cannot be: types (an engine's own headers pass specdec types between files
//! built with different flags, so their names must agree) and therefore their member functions --
//! tensor views' and kv layouts' accessors, half/bfloat16 conversions, thread_pool -- as well as
//! the standard library's own inline templates (std::string, std::vector, ...) that the code above
//! calls. These are small and usually inlined, but where the compiler emits an out-of-line copy the
//! linker keeps one for the whole program, as it does for any C++ library. So the namespace keeps
//! the kernels apart; a guarantee for everything needs one of: the same target flags for every
//! file that includes specdec, or each ISA-specific part linked into its own shared object with
//! hidden visibility (-fvisibility=hidden, so its copies bind locally).
//!
//! Within one file, run-time dispatch (core/simd_level.hpp) adds nested namespaces
//! SPECDEC_HOST_ISA::lvl_{portable,avx2,avx512} for the kernels compiled under target pragmas, and
//! keeps the file's own copy in SPECDEC_HOST_ISA::lvl_native: every copy has its own name.
//!
//! CUDA kernels stay outside it: they gain nothing from it. (Were one inside, its name would still
//! agree between nvcc's passes: the device pass sees the host compiler's target macros too; checked
//! with nvcc 13.0 and -Xcompiler -mavx2.)

#include <string_view>

// ---- What this translation unit's own flags give ------------------------------------------------
// SPECDEC_NATIVE_SIMD_{AVX512,AVX,F16C,FMA}: the vector features simd.inl may use at the file's flags
// (the choices simd.hpp always made from the compiler's macros); SPECDEC_NATIVE_SIMD_LEVEL: the
// dispatch level those flags already reach.
#if defined(__AVX512F__)
#define SPECDEC_NATIVE_SIMD_AVX512 1
#else
#define SPECDEC_NATIVE_SIMD_AVX512 0
#endif
#if defined(__AVX__)
#define SPECDEC_NATIVE_SIMD_AVX 1
#else
#define SPECDEC_NATIVE_SIMD_AVX 0
#endif
#if defined(__F16C__) || defined(__AVX512F__)
#define SPECDEC_NATIVE_SIMD_F16C 1
#else
#define SPECDEC_NATIVE_SIMD_F16C 0
#endif
// Fused multiply-add instructions (kernels that fuse explicitly, so their rounding does not depend
// on the compiler's contraction: fast_exp in sampling/detail/vec.inl).
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define SPECDEC_NATIVE_SIMD_FMA 1
#else
#define SPECDEC_NATIVE_SIMD_FMA 0
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__) && \
    defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define SPECDEC_NATIVE_SIMD_LEVEL 2
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define SPECDEC_NATIVE_SIMD_LEVEL 1
#else
#define SPECDEC_NATIVE_SIMD_LEVEL 0
#endif

//! 1 when this file compiles the dispatched kernels once per level and chooses at run time; 0 when
//! it compiles them once at its own flags. Define it to 0 before including specdec to opt out (one
//! copy, the file's flags, faster builds).
#if !defined(SPECDEC_ISA_DISPATCH)
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(__CUDACC__) && !defined(__NVCOMPILER) && SPECDEC_NATIVE_SIMD_LEVEL < 2
#define SPECDEC_ISA_DISPATCH 1
#else
#define SPECDEC_ISA_DISPATCH 0
#endif
#endif
#if SPECDEC_ISA_DISPATCH && (SPECDEC_NATIVE_SIMD_LEVEL >= 2 || !(defined(__x86_64__) || defined(__i386__)) || \
                             !(defined(__GNUC__) || defined(__clang__)) || defined(__CUDACC__))
#error "SPECDEC_ISA_DISPATCH=1 needs x86 with GCC or Clang (not nvcc) and flags below the AVX-512 level"
#endif

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
#if defined(__POPCNT__)
#define SPECDEC_ISA_F1_ _popcnt
#else
#define SPECDEC_ISA_F1_
#endif
#if defined(__AVX__)
#define SPECDEC_ISA_F2_ _avx
#else
#define SPECDEC_ISA_F2_
#endif
#if defined(__AVX2__)
#define SPECDEC_ISA_F3_ _avx2
#else
#define SPECDEC_ISA_F3_
#endif
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
#define SPECDEC_ISA_F4_ _fma
#else
#define SPECDEC_ISA_F4_
#endif
#if defined(__F16C__)
#define SPECDEC_ISA_F5_ _f16c
#else
#define SPECDEC_ISA_F5_
#endif
#if defined(__BMI__)
#define SPECDEC_ISA_F6_ _bmi
#else
#define SPECDEC_ISA_F6_
#endif
#if defined(__BMI2__)
#define SPECDEC_ISA_F7_ _bmi2
#else
#define SPECDEC_ISA_F7_
#endif
#if defined(__LZCNT__)
#define SPECDEC_ISA_F8_ _lzcnt
#else
#define SPECDEC_ISA_F8_
#endif
#if defined(__MOVBE__)
#define SPECDEC_ISA_F9_ _movbe
#else
#define SPECDEC_ISA_F9_
#endif
#if defined(__AVXVNNI__)
#define SPECDEC_ISA_F10_ _avxvnni
#else
#define SPECDEC_ISA_F10_
#endif
#if defined(__AVX512F__)
#define SPECDEC_ISA_F11_ _avx512f
#else
#define SPECDEC_ISA_F11_
#endif
#if defined(__AVX512BW__)
#define SPECDEC_ISA_F12_ _avx512bw
#else
#define SPECDEC_ISA_F12_
#endif
#if defined(__AVX512DQ__)
#define SPECDEC_ISA_F13_ _avx512dq
#else
#define SPECDEC_ISA_F13_
#endif
#if defined(__AVX512VL__)
#define SPECDEC_ISA_F14_ _avx512vl
#else
#define SPECDEC_ISA_F14_
#endif
#if defined(__AVX512VNNI__)
#define SPECDEC_ISA_F15_ _avx512vnni
#else
#define SPECDEC_ISA_F15_
#endif
#if defined(__AVX512BF16__)
#define SPECDEC_ISA_F16_ _avx512bf16
#else
#define SPECDEC_ISA_F16_
#endif
#if defined(__AVX512FP16__)
#define SPECDEC_ISA_F17_ _avx512fp16
#else
#define SPECDEC_ISA_F17_
#endif
#if defined(__AVX512VBMI__)
#define SPECDEC_ISA_F18_ _avx512vbmi
#else
#define SPECDEC_ISA_F18_
#endif
#if defined(__AVX512VBMI2__)
#define SPECDEC_ISA_F19_ _avx512vbmi2
#else
#define SPECDEC_ISA_F19_
#endif
#if defined(__AVX512VPOPCNTDQ__)
#define SPECDEC_ISA_F20_ _avx512vpopcntdq
#else
#define SPECDEC_ISA_F20_
#endif
#if defined(__AVX512BITALG__)
#define SPECDEC_ISA_F21_ _avx512bitalg
#else
#define SPECDEC_ISA_F21_
#endif
#if defined(__GFNI__)
#define SPECDEC_ISA_F22_ _gfni
#else
#define SPECDEC_ISA_F22_
#endif
#if defined(__ARM_FEATURE_SVE)
#define SPECDEC_ISA_F23_ _sve
#else
#define SPECDEC_ISA_F23_
#endif
#if defined(__ARM_FEATURE_SVE2)
#define SPECDEC_ISA_F24_ _sve2
#else
#define SPECDEC_ISA_F24_
#endif
#if defined(__ARM_FEATURE_FP16_VECTOR_ARITHMETIC)
#define SPECDEC_ISA_F25_ _fp16
#else
#define SPECDEC_ISA_F25_
#endif
#if defined(__ARM_FEATURE_BF16)
#define SPECDEC_ISA_F26_ _bf16
#else
#define SPECDEC_ISA_F26_
#endif
#if defined(__ARM_FEATURE_DOTPROD)
#define SPECDEC_ISA_F27_ _dotprod
#else
#define SPECDEC_ISA_F27_
#endif
// Files that dispatch at run time and files that do not, at the same flags, compile different
// bodies for the entry points (which copy they call): they must not share names either.
#if SPECDEC_ISA_DISPATCH
#define SPECDEC_ISA_F28_ _dispatch
#else
#define SPECDEC_ISA_F28_
#endif

// ---- The head dimensions this file compiles the host attention kernels for ------------------------
//! SPECDEC_HOST_HEAD_DIMS: define it (before including specdec, or -DSPECDEC_HOST_HEAD_DIMS=64,128)
//! to a comma list drawn from 64, 128 and 256 to compile the host attention kernels
//! (attention/detail/host/run.hpp) for those head dimensions only; left undefined, all three. Each
//! head_dim is a separate instantiation of the whole backend (times three levels under run-time
//! dispatch), about half of the compile time of a file that calls attention at one head_dim: an
//! engine knows its models' head_dim, as FlashInfer's and llama.cpp's builds let one choose. A call
//! with a head_dim the file did not compile is rejected with an invalid_argument that names this
//! macro. Files with different sets compile different bodies for the entry points, so a set other
//! than all three is part of the inline namespace name (`_hd64`, `_hd64_128`, ...; see below).
#define SPECDEC_HD_BIT_64 1
#define SPECDEC_HD_BIT_128 2
#define SPECDEC_HD_BIT_256 4
#define SPECDEC_HD_BIT_(d) SPECDEC_HD_BIT_##d
#define SPECDEC_HD_BIT(d) SPECDEC_HD_BIT_(d)
#define SPECDEC_HD_OK(d) (SPECDEC_HD_BIT(d) + 0 != 0)
#define SPECDEC_HD_MASK_1(a) SPECDEC_HD_BIT(a)
#define SPECDEC_HD_MASK_2(a, b) (SPECDEC_HD_BIT(a) | SPECDEC_HD_BIT(b))
#define SPECDEC_HD_MASK_3(a, b, c) (SPECDEC_HD_BIT(a) | SPECDEC_HD_BIT(b) | SPECDEC_HD_BIT(c))
#define SPECDEC_HD_VALID_1(a) SPECDEC_HD_OK(a)
#define SPECDEC_HD_VALID_2(a, b) (SPECDEC_HD_OK(a) && SPECDEC_HD_OK(b))
#define SPECDEC_HD_VALID_3(a, b, c) (SPECDEC_HD_OK(a) && SPECDEC_HD_OK(b) && SPECDEC_HD_OK(c))
#define SPECDEC_HD_VALID_4(...) 0
#define SPECDEC_HD_MASK_4(...) 0
#define SPECDEC_HD_PICK_(_1, _2, _3, _4, _5, _6, _7, _8, n, ...) n
#define SPECDEC_HD_COUNT(...) SPECDEC_HD_PICK_(__VA_ARGS__, 4, 4, 4, 4, 4, 3, 2, 1, 0)
#define SPECDEC_HD_CAT_(a, b) a##b
#define SPECDEC_HD_CAT(a, b) SPECDEC_HD_CAT_(a, b)
#define SPECDEC_HD_APPLY_(f, ...) f(__VA_ARGS__)
#define SPECDEC_HD_APPLY(f, ...) SPECDEC_HD_APPLY_(f, __VA_ARGS__)
#define SPECDEC_HD_STR_(...) #__VA_ARGS__
#define SPECDEC_HD_STR(...) SPECDEC_HD_STR_(__VA_ARGS__)
#if defined(SPECDEC_HOST_HEAD_DIMS)
#if !SPECDEC_HD_APPLY(SPECDEC_HD_CAT(SPECDEC_HD_VALID_, SPECDEC_HD_COUNT(SPECDEC_HOST_HEAD_DIMS)), SPECDEC_HOST_HEAD_DIMS)
#error "SPECDEC_HOST_HEAD_DIMS must be a comma list of one to three of 64, 128 and 256 (e.g. 64 or 64,128)"
#endif
//! Bit i set: head_dim 64 << i is compiled (1 = 64, 2 = 128, 4 = 256).
#define SPECDEC_HOST_HEAD_DIM_MASK \
  SPECDEC_HD_APPLY(SPECDEC_HD_CAT(SPECDEC_HD_MASK_, SPECDEC_HD_COUNT(SPECDEC_HOST_HEAD_DIMS)), SPECDEC_HOST_HEAD_DIMS)
#define SPECDEC_HOST_HEAD_DIMS_STRING SPECDEC_HD_STR(SPECDEC_HOST_HEAD_DIMS)
#else
#define SPECDEC_HOST_HEAD_DIM_MASK 7
#define SPECDEC_HOST_HEAD_DIMS_STRING "64,128,256"
#endif
#if SPECDEC_HOST_HEAD_DIM_MASK == 1
#define SPECDEC_ISA_F29_ _hd64
#elif SPECDEC_HOST_HEAD_DIM_MASK == 2
#define SPECDEC_ISA_F29_ _hd128
#elif SPECDEC_HOST_HEAD_DIM_MASK == 3
#define SPECDEC_ISA_F29_ _hd64_128
#elif SPECDEC_HOST_HEAD_DIM_MASK == 4
#define SPECDEC_ISA_F29_ _hd256
#elif SPECDEC_HOST_HEAD_DIM_MASK == 5
#define SPECDEC_ISA_F29_ _hd64_256
#elif SPECDEC_HOST_HEAD_DIM_MASK == 6
#define SPECDEC_ISA_F29_ _hd128_256
#else
#define SPECDEC_ISA_F29_
#endif

#define SPECDEC_ISA_PASTE_(a, f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, \
                           f19, f20, f21, f22, f23, f24, f25, f26, f27, f28, f29)                                  \
  a##f0##f1##f2##f3##f4##f5##f6##f7##f8##f9##f10##f11##f12##f13##f14##f15##f16##f17##f18##f19##f20##f21##f22##f23##f24##f25##f26##f27##f28##f29
#define SPECDEC_ISA_PASTE(a, f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, \
                          f20, f21, f22, f23, f24, f25, f26, f27, f28, f29)                                            \
  SPECDEC_ISA_PASTE_(a, f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, f13, f14, f15, f16, f17, f18, f19, f20, \
                     f21, f22, f23, f24, f25, f26, f27, f28, f29)
#define SPECDEC_ISA_STR_(x) #x
#define SPECDEC_ISA_STR(x) SPECDEC_ISA_STR_(x)

//! Name of the inline namespace holding this translation unit's ISA-dependent
//! host code.
#define SPECDEC_HOST_ISA                                                                                      \
  SPECDEC_ISA_PASTE(SPECDEC_ISA_ARCH_, SPECDEC_ISA_F0_, SPECDEC_ISA_F1_, SPECDEC_ISA_F2_, SPECDEC_ISA_F3_,    \
                    SPECDEC_ISA_F4_, SPECDEC_ISA_F5_, SPECDEC_ISA_F6_, SPECDEC_ISA_F7_, SPECDEC_ISA_F8_,      \
                    SPECDEC_ISA_F9_, SPECDEC_ISA_F10_, SPECDEC_ISA_F11_, SPECDEC_ISA_F12_, SPECDEC_ISA_F13_,  \
                    SPECDEC_ISA_F14_, SPECDEC_ISA_F15_, SPECDEC_ISA_F16_, SPECDEC_ISA_F17_, SPECDEC_ISA_F18_, \
                    SPECDEC_ISA_F19_, SPECDEC_ISA_F20_, SPECDEC_ISA_F21_, SPECDEC_ISA_F22_, SPECDEC_ISA_F23_, \
                    SPECDEC_ISA_F24_, SPECDEC_ISA_F25_, SPECDEC_ISA_F26_, SPECDEC_ISA_F27_, SPECDEC_ISA_F28_, \
                    SPECDEC_ISA_F29_)

namespace specdec {
inline namespace SPECDEC_HOST_ISA {

//! The feature set this translation unit's host kernels are compiled for, as the inline namespace
//! spells it (e.g. "isa_x86_sse41_popcnt_avx_avx2_fma_f16c_bmi_bmi2_lzcnt_movbe"). Useful in an
//! engine's startup log, and different in each file built with different target flags.
[[nodiscard]] constexpr std::string_view host_isa_name() noexcept { return SPECDEC_ISA_STR(SPECDEC_HOST_ISA); }

}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec
