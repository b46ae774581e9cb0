#pragma once
//! \file backend.hpp
//! The seam between the attention entry points and their backends. Each public primitive
//! (decode_attention, tree_attention, hybrid_tree_attention, lse_merge and their workspace queries)
//! is ONE template over the execution policy: it checks types, validates its arguments under the
//! policy's memory-space rules (validate.hpp), and hands the validated params to
//! attention_backend<Policy> / merge_backend<Policy>. The host backend is specialised in
//! host/backend.hpp and lse_merge.hpp; the cuda backend in cuda/launch.cuh and lse_merge.cuh,
//! which the primitives' .cuh headers include.
//!
//! Interface of attention_backend<P> (HasCache: a cache part; HasTree: a masked tree part; `cache`
//! is a kv_layout, or detail::no_cache of host/run.hpp when HasCache is false):
//!   template <bool HasCache, bool HasTree, class T, class L>
//!   static std::size_t workspace_bytes(std::string_view fn, const P&, const attention_io_params<T>&,
//!                                      const L& cache, const attention_options&);
//!   template <bool HasCache, bool HasTree, class T, class L>
//!   static void run(std::string_view fn, const P&, const attention_io_params<T>&, const L& cache,
//!                   const tree_kv_params<T>* tree, const attention_options&);
//! and of merge_backend<P>:
//!   template <class T> static void run(const P&, const lse_merge_params<T>&);
//!
//! Both primaries live in the ISA inline namespace (core/isa.hpp), so every specialisation's
//! members get per-feature-set symbols; a specialisation is still written in specdec::detail.

#include "specdec/core/execution.hpp"
#include "specdec/core/isa.hpp"

namespace specdec::detail {
inline namespace SPECDEC_HOST_ISA {  // see core/isa.hpp

template <class Policy>
struct attention_backend {
  static_assert(dependent_false_v<Policy>,
                "specdec: no attention backend for this execution policy in this translation unit. For "
                "specdec::cuda include the primitive's .cuh header (e.g. <specdec/attention/"
                "hybrid_tree_attention.cuh> or <specdec/specdec.cuh>) and compile the file with nvcc.");
};

template <class Policy>
struct merge_backend {
  static_assert(dependent_false_v<Policy>,
                "specdec: no lse_merge backend for this execution policy in this translation unit. For "
                "specdec::cuda include <specdec/attention/lse_merge.cuh> and compile the file with nvcc.");
};

}  // namespace SPECDEC_HOST_ISA
}  // namespace specdec::detail
