// kernels.inl: the bodies of the host attention backend, in dependency order: what
// core/detail/isa_levels.inl compiles once per dispatch level (see run.hpp). The vector layer
// (simd.inl) comes first in every level from isa_levels.inl itself, and the merge (merge.inl) from
// merge.hpp, which compiles it per level for the public lse_merge too. No include guard, no
// #include of a header, no namespace.
#include "specdec/attention/detail/host/tile.inl"
#include "specdec/attention/detail/host/attend_rows.inl"
#include "specdec/attention/detail/host/attend_lanes.inl"
#include "specdec/attention/detail/host/attend_tiles.inl"
#include "specdec/attention/detail/host/passes.inl"
