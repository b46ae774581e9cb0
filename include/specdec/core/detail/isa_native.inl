// isa_native.inl: compiles the bodies named by SPECDEC_ISA_BODIES at the including file's own flags,
// in detail::SPECDEC_HOST_ISA::lvl_native, made visible to ordinary lookup by a using-directive
// (isa_levels.inl says why not as direct members). The one place that opens that namespace: the
// vector layer (simd.hpp), the attention backend's level headers (which run.hpp then compiles per
// level through kernels.inl) and isa_family.inl (every other dispatching family) all include it.
// No include guard; include it at global scope, after every header the bodies use:
//
//   #define SPECDEC_ISA_BODIES "specdec/attention/detail/host/tile.inl"
//   #include "specdec/core/detail/isa_native.inl"
//   #undef SPECDEC_ISA_BODIES

#if !defined(SPECDEC_ISA_BODIES)
#error "isa_native.inl: define SPECDEC_ISA_BODIES (the bodies to compile at the file's flags) first"
#endif

namespace specdec::detail {
inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp
namespace lvl_native {
#include SPECDEC_ISA_BODIES
}  // namespace lvl_native
using namespace lvl_native;
}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec::detail
