#pragma once
//! \file tree_attention.cuh
//! The specdec::cuda backend of tree_attention and tree_attention_workspace_bytes (LongSpec §3.3 fused_mask_attn):
//! key tiles past a row tile's last token are skipped (fully masked).
//! The entry points and their documentation, cuda rules included, are in tree_attention.hpp;
//! kernels and plan in attention/detail/cuda/. Include this header (compiled with
//! nvcc) to call them with a specdec::cuda policy.

#include "specdec/attention/detail/cuda/launch.cuh"
#include "specdec/attention/tree_attention.hpp"
