#pragma once
//! \file hybrid_tree_attention.cuh
//! The specdec::cuda backend of hybrid_tree_attention and hybrid_tree_attention_workspace_bytes (LongSpec §3.3,
//! Figure 2b): the cache part (unmasked, split-KV) and the tree part (masked) run as parts of one
//! kernel launch and are merged by LSE (Appendix A, Proposition A.1) from their fp32 partials.
//! The entry points and their documentation, cuda rules included, are in hybrid_tree_attention.hpp;
//! kernels and plan in attention/detail/cuda/. Include this header (compiled with
//! nvcc) to call them with a specdec::cuda policy.

#include "specdec/attention/detail/cuda/launch.cuh"
#include "specdec/attention/hybrid_tree_attention.hpp"
