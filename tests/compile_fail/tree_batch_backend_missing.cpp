// Compiled by compile_fail.cmake (never built as part of the project): a plain C++ translation unit
// that calls build_tree_batch. With USE_CUDA_POLICY it passes specdec::cuda without having included
// tree/tree_batch.cuh, which must fail with the backend seam's one static_assert (tree_batch_backend
// in tree/tree_batch.hpp); without it (the positive control) the same call with specdec::host compiles.
#include <cstdint>
#include <vector>

#include "specdec/tree/tree_batch.hpp"

#ifdef USE_CUDA_POLICY
#define POLICY specdec::cuda
#define SPACE specdec::memory_space::device
#else
#define POLICY specdec::host
#define SPACE specdec::memory_space::host
#endif

void call() {
  std::vector<std::int32_t> indptr{0, 2}, parents{-1, 0}, committed{5}, depths(2), positions(2), status(3);
  std::vector<std::int64_t> mask_indptr(2);
  std::vector<specdec::mask_word> mask(2);
  auto v = [](auto& x) { return specdec::make_view<1>(x.data(), {static_cast<std::int64_t>(x.size())}, SPACE); };
  specdec::build_tree_batch(POLICY{}, v(indptr), v(parents), v(committed), v(depths), v(positions), v(mask_indptr),
                            v(mask), v(status));
}
