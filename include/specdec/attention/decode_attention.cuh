#pragma once
//! \file decode_attention.cuh
//! The specdec::cuda backend of decode_attention and decode_attention_workspace_bytes (split-KV
//! flash-decoding, LongSpec §3.3 "Flash_Decoding"). The entry points and their documentation, cuda
//! rules included, are in decode_attention.hpp; kernels and plan in attention/detail/cuda/.
//! Include this header (compiled with nvcc) to call them with a specdec::cuda policy.

#include "specdec/attention/decode_attention.hpp"
#include "specdec/attention/detail/cuda/launch.cuh"
