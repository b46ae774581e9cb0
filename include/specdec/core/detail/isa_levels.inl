// isa_levels.inl: includes the kernel bodies named by SPECDEC_ISA_BODIES once per dispatch level
// (core/simd_level.hpp), each in its own namespace specdec::detail::SPECDEC_HOST_ISA::lvl_<level>
// and, above the file's own level, inside a target region. No include guard: a dispatching header
// includes it once per kernel family, usually through isa_family.inl (which first compiles the same
// bodies at the file's own flags, in lvl_native), e.g.
//
//   #define SPECDEC_ISA_BODIES "specdec/kv/detail/partial_kv_kernels.inl"
//   #include "specdec/core/detail/isa_family.inl"
//   #undef SPECDEC_ISA_BODIES
//
// The attention backend includes it directly (run.hpp): its headers compile their bodies in
// lvl_native one by one, and kernels.inl lists them for the levels.
// Every level namespace starts with the vector layer (core/detail/simd.inl), included once per level
// however many kernel families a file dispatches, so bodies use vf16, vload, ... without including it.
//
// Rule for the bodies: no #include, no include guard, no namespace. Every header they need is
// included (at the file's own flags) before this file; a header first included inside a target
// region would compile its inline functions, under their ordinary names, with that region's
// instructions: the one-definition-rule hazard core/isa.hpp describes. Types stay outside the
// bodies (a type defined in a body would be a different type per level).
//
// Without dispatch (SPECDEC_ISA_DISPATCH == 0) this file does nothing: the dispatching header calls
// the copy its ordinary headers compiled at the file's own flags.
//
// That copy lives in the non-inline namespace detail::SPECDEC_HOST_ISA::lvl_native, made visible to
// ordinary lookup by a using-directive, never as a direct member of detail::SPECDEC_HOST_ISA:
// argument-dependent lookup searches detail (and its inline namespaces) for any argument whose type
// has a base or template argument there (half and bfloat16 derive from detail::storage16; the
// merge and plan structs live there), and would then find the file's own copy next to a level's,
// an ambiguous call. A using-directive is invisible to argument-dependent lookup.

#if !defined(SPECDEC_ISA_BODIES)
#error "isa_levels.inl: define SPECDEC_ISA_BODIES (the kernel bodies to include per level) first"
#endif

// The vector layer's header (its includes and macros), at the file's own flags, outside any region.
#include "specdec/core/detail/simd.hpp"

#if SPECDEC_ISA_DISPATCH
#undef SPECDEC_SIMD_AVX512
#undef SPECDEC_SIMD_AVX
#undef SPECDEC_SIMD_F16C
#undef SPECDEC_SIMD_FMA

#if SPECDEC_NATIVE_SIMD_LEVEL == 0
// portable: the file's own flags and features, no region.
#define SPECDEC_SIMD_AVX512 SPECDEC_NATIVE_SIMD_AVX512
#define SPECDEC_SIMD_AVX SPECDEC_NATIVE_SIMD_AVX
#define SPECDEC_SIMD_F16C SPECDEC_NATIVE_SIMD_F16C
#define SPECDEC_SIMD_FMA SPECDEC_NATIVE_SIMD_FMA
namespace specdec::detail {
inline namespace SPECDEC_HOST_ISA {
namespace lvl_portable {
#if !defined(SPECDEC_ISA_SIMD_DONE_PORTABLE)  // the vector layer, once per level and file
#define SPECDEC_ISA_SIMD_DONE_PORTABLE
#include "specdec/core/detail/simd.inl"
#endif
#include SPECDEC_ISA_BODIES
}  // namespace lvl_portable
}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec::detail
#undef SPECDEC_SIMD_AVX512
#undef SPECDEC_SIMD_AVX
#undef SPECDEC_SIMD_F16C
#undef SPECDEC_SIMD_FMA
#endif

#if SPECDEC_NATIVE_SIMD_LEVEL <= 1
#define SPECDEC_SIMD_AVX512 0
#define SPECDEC_SIMD_AVX 1
#define SPECDEC_SIMD_F16C 1
#define SPECDEC_SIMD_FMA 1
SPECDEC_ISA_REGION_BEGIN_AVX2
namespace specdec::detail {
inline namespace SPECDEC_HOST_ISA {
namespace lvl_avx2 {
#if !defined(SPECDEC_ISA_SIMD_DONE_AVX2)  // the vector layer, once per level and file
#define SPECDEC_ISA_SIMD_DONE_AVX2
#include "specdec/core/detail/simd.inl"
#endif
#include SPECDEC_ISA_BODIES
}  // namespace lvl_avx2
}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec::detail
SPECDEC_ISA_REGION_END
#undef SPECDEC_SIMD_AVX512
#undef SPECDEC_SIMD_AVX
#undef SPECDEC_SIMD_F16C
#undef SPECDEC_SIMD_FMA
#endif

#define SPECDEC_SIMD_AVX512 1
#define SPECDEC_SIMD_AVX 1
#define SPECDEC_SIMD_F16C 1
#define SPECDEC_SIMD_FMA 1
SPECDEC_ISA_REGION_BEGIN_AVX512
namespace specdec::detail {
inline namespace SPECDEC_HOST_ISA {
namespace lvl_avx512 {
#if !defined(SPECDEC_ISA_SIMD_DONE_AVX512)  // the vector layer, once per level and file
#define SPECDEC_ISA_SIMD_DONE_AVX512
#include "specdec/core/detail/simd.inl"
#endif
#include SPECDEC_ISA_BODIES
}  // namespace lvl_avx512
}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec::detail
SPECDEC_ISA_REGION_END
#undef SPECDEC_SIMD_AVX512
#undef SPECDEC_SIMD_AVX
#undef SPECDEC_SIMD_F16C
#undef SPECDEC_SIMD_FMA

// Back to the file's own features for whatever follows.
#define SPECDEC_SIMD_AVX512 SPECDEC_NATIVE_SIMD_AVX512
#define SPECDEC_SIMD_AVX SPECDEC_NATIVE_SIMD_AVX
#define SPECDEC_SIMD_F16C SPECDEC_NATIVE_SIMD_F16C
#define SPECDEC_SIMD_FMA SPECDEC_NATIVE_SIMD_FMA
#endif  // SPECDEC_ISA_DISPATCH
