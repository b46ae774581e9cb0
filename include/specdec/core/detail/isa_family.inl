// isa_family.inl: compiles a kernel family's bodies (SPECDEC_ISA_BODIES) at the including file's own
// flags, in detail::SPECDEC_HOST_ISA::lvl_native (made visible to ordinary lookup by a using-directive;
// see isa_levels.inl for why not as direct members), and, with run-time dispatch, once per level
// through isa_levels.inl. No include guard: a dispatching header includes it once per family, at
// global scope, after every type and header the bodies use:
//
//   #define SPECDEC_ISA_BODIES "specdec/kv/detail/partial_kv_kernels.inl"
//   #include "specdec/core/detail/isa_family.inl"
//   #undef SPECDEC_ISA_BODIES
//
// and calls them with SPECDEC_ISA_DISPATCH_CALL / SPECDEC_ISA_DISPATCH_RETURN (core/simd_level.hpp).

#if !defined(SPECDEC_ISA_BODIES)
#error "isa_family.inl: define SPECDEC_ISA_BODIES (the kernel bodies to compile) first"
#endif

#include "specdec/core/detail/simd.hpp"  // the vector layer at the file's flags (lvl_native)

#include "specdec/core/detail/isa_native.inl"

#include "specdec/core/detail/isa_levels.inl"
