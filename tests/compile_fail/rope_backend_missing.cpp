// Compiled by compile_fail.cmake (never built as part of the project): a plain C++ translation unit
// that calls apply_rope. With USE_CUDA_POLICY it passes specdec::cuda without having included
// position/rope.cuh, which must fail with the RoPE backend seam's one static_assert (rope_backend in
// position/rope.hpp) rather than a cascade of template errors; without it (the positive control) the
// same call with specdec::host compiles.
#include <cstdint>
#include <vector>

#include "specdec/position/rope.hpp"

#ifdef USE_CUDA_POLICY
#define POLICY specdec::cuda
#else
#define POLICY specdec::host
#endif

void call() {
  std::vector<specdec::half> x(4 * 2 * 64);
  std::vector<std::int32_t> positions{0, 1, 2, 3};
  specdec::apply_rope(POLICY{}, specdec::rope_params{}, specdec::make_view<3>(x.data(), {4, 2, 64}),
                      specdec::make_view<1>(positions.data(), {4}));
}
