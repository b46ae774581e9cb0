// Second translation unit of attention.head_dims, built with SPECDEC_HOST_HEAD_DIMS=64 while the
// test's main file compiles every head_dim; see head_dims.hpp.
#include "head_dims.hpp"

#if SPECDEC_HOST_HEAD_DIM_MASK != 1
#error "head_dims_hd64.cpp must be compiled with SPECDEC_HOST_HEAD_DIMS=64"
#endif

namespace head_dims {
file_result run_hd64() { return run_in_this_file(); }
}  // namespace head_dims
