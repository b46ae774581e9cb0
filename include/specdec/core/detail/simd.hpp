#pragma once
//! \file simd.hpp
//! 16-lane float vectors for the host SIMD kernels (the code is in simd.inl). Included normally,
//! it defines them at the including file's own flags in specdec::detail::SPECDEC_HOST_ISA; kernel
//! families that dispatch at run time (core/simd_level.hpp) include simd.inl again per level.

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "specdec/core/bfloat16.hpp"
#include "specdec/core/config.hpp"
#include "specdec/core/half.hpp"
#include "specdec/core/isa.hpp"
#include "specdec/core/numeric.hpp"
#include "specdec/core/simd_level.hpp"

// With dispatch every intrinsic is needed whatever the file's flags (GCC and Clang declare them
// all, so the level regions can use the AVX2/AVX-512 ones); otherwise only the file's own.
#if SPECDEC_ISA_DISPATCH || defined(__F16C__) || defined(__AVX__) || defined(__AVX512F__)
#include <immintrin.h>
#elif (defined(__x86_64__) || defined(__i386__)) && defined(__SSE__) && !defined(__CUDACC__)
#include <xmmintrin.h>  // vmax / vmin's SSE form
#endif

// A 64-byte vector passed or returned by value has a different ABI with and without AVX-512.
// Everything here is always-inline, so that ABI never crosses a function boundary, but GCC still
// diagnoses it in a TU built without AVX-512: a -Wpsabi *warning* for returns, which the pragma
// below silences, and a -Wpsabi *note* for by-value parameters, which no pragma reaches. Hence
// every vector parameter is a const reference (free once inlined).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

// vpack's per-part loops, unrolled: GCC 12 at -O2 otherwise keeps them as loops with the parts in
// memory (an exp-sum over 128K floats: 524 us as 4 x xmm, 123 us unrolled, same bits).
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define SPECDEC_UNROLL_PARTS _Pragma("GCC unroll 4")
#else
#define SPECDEC_UNROLL_PARTS
#endif
// The same for the loops over a kernel's register block (its rows, keys, accumulator sets and
// column vectors: compile-time extents of at most 16), which GCC 12 at -O2 does not unroll either,
// so the block's accumulators live in memory: the attention kernels ran 1.5-2.5x slower at -O2
// than at -O3 on a Zen 3 core until these loops were marked (RESULTS.md, session 35). -O2 is what
// distributions and the README's examples build with. GCC only: clang unrolls such loops by itself
// at -O2, and honours the pragma even at -O1, where it made the ASan fuzzing build's attention
// target take 217 s instead of 125 (clang 14).
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define SPECDEC_UNROLL _Pragma("GCC unroll 16")
#else
#define SPECDEC_UNROLL
#endif

// This header is often first included by isa_family.inl or isa_levels.inl, while a dispatching
// header's SPECDEC_ISA_BODIES is defined: keep that definition around this one.
#pragma push_macro("SPECDEC_ISA_BODIES")
#undef SPECDEC_ISA_BODIES
#define SPECDEC_ISA_BODIES "specdec/core/detail/simd.inl"
#include "specdec/core/detail/isa_native.inl"  // at this file's own flags, in lvl_native
#pragma pop_macro("SPECDEC_ISA_BODIES")
