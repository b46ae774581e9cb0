// Cross-attention with half and bfloat16 storage against the double reference computed from the
// same stored values (contiguous NHD/HND and paged target caches, ragged committed lengths, GQA).
#include "attention/test_cross_attention_util.hpp"

using namespace xtest;

TEST_CASE("cross attention (fp16, bf16) matches the reference") {
  sweep<specdec::half>(1e-4, 1.0 / 1024, 2, true);
  sweep<specdec::bfloat16>(1e-3, 1.0 / 128, 3, true);
}
