// Second translation unit of attention.isa_mixed_flags, built with -march=x86-64-v3 (AVX2, FMA,
// F16C) while the test's main file uses the project's default flags; see isa_mixed_flags.hpp.
#include "isa_mixed_flags.hpp"

#if !defined(__AVX2__) || !defined(__F16C__)
#error "isa_mixed_flags_v3.cpp must be compiled with -march=x86-64-v3"
#endif

namespace isa_mixed {
file_result run_x86_64_v3() { return run_in_this_file(); }
}  // namespace isa_mixed
