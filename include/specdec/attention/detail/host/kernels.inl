// kernels.inl: every body of the host attention backend, in dependency order: what
// core/detail/isa_levels.inl compiles once per dispatch level (see run.hpp). No include guard, no
// #include of a header, no namespace.
#include "specdec/core/detail/simd.inl"
#include "specdec/attention/detail/host/tile.inl"
#include "specdec/attention/detail/host/merge.inl"
#include "specdec/attention/detail/host/attend_rows.inl"
#include "specdec/attention/detail/host/attend_tiles.inl"
#include "specdec/attention/detail/host/passes.inl"
