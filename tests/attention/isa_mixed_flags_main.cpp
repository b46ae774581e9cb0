// attention.isa_mixed_flags: one executable linking two translation units built with different
// target flags (this file: the project's defaults; isa_mixed_flags_v3.cpp: -march=x86-64-v3), as an
// engine that dispatches on the CPU at run time does. Without per-feature-set symbols
// (core/isa.hpp) both files would instantiate specdec::decode_attention<...> under one mangled
// name and the linker would keep one body for both, so the baseline file could run AVX2 code. Checks:
// each file's host entry points resolve to its own instantiation, and both compute the reference
// result.
#include <catch2/catch.hpp>

#include <cmath>

#include "isa_mixed_flags.hpp"
#include "specdec/reference/attention.hpp"

namespace isa_mixed {
file_result run_default_flags() { return run_in_this_file(); }
}  // namespace isa_mixed

using namespace isa_mixed;

TEST_CASE("files built with different target flags get their own host kernel instantiations") {
  const file_result base = run_default_flags();
  const file_result v3 = run_x86_64_v3();
  INFO("default-flags file: " << base.isa << ", x86-64-v3 file: " << v3.isa);
  CHECK(base.isa != v3.isa);
  CHECK(v3.isa.find("avx2") != std::string::npos);
  CHECK(v3.isa.find("f16c") != std::string::npos);
  // Distinct entry points: with one shared symbol these addresses would be equal.
  CHECK(base.decode_entry != v3.decode_entry);
  CHECK(base.merge_entry != v3.merge_entry);
  CHECK(base.rope_entry != v3.rope_entry);
  // ... and so do the validation helpers every entry point calls (core/tensor.hpp, kv/kv_layout.hpp).
  CHECK(base.shape_check != v3.shape_check);
  CHECK(base.layout_check != v3.layout_check);
}

TEST_CASE("both instantiations compute the reference result") {
  const file_result base = run_default_flags();
  const file_result v3 = run_x86_64_v3();
  inputs in;
  const int tokens = q_indptr().back();
  const auto ref = specdec::reference::decode_attention(
      specdec::make_view<3>(static_cast<const specdec::half*>(in.q.data()), {tokens, hq, dim}), in.cache(),
      specdec::make_view<1>(q_indptr().data(), {requests + 1}));
  REQUIRE(base.out.size() == ref.out.size());
  REQUIRE(v3.out.size() == ref.out.size());
  // fp16 outputs: one rounding of the output (2^-11 relative) plus fp32-accumulation slack.
  auto err = [&](specdec::half got, double want) {
    return std::abs(static_cast<double>(static_cast<float>(got)) - want) / std::max(1.0, std::abs(want));
  };
  double worst_base = 0, worst_v3 = 0, worst_lse = 0, worst_merge = 0;
  for (std::size_t i = 0; i < ref.out.size(); ++i) {
    worst_base = std::max(worst_base, err(base.out[i], ref.out[i]));
    worst_v3 = std::max(worst_v3, err(v3.out[i], ref.out[i]));
    // (o, lse) merged with (o, lse - ln 2): the same O (up to one more rounding), LSE + ln(3/2).
    worst_merge = std::max({worst_merge, err(base.merged[i], ref.out[i]), err(v3.merged[i], ref.out[i])});
  }
  for (std::size_t i = 0; i < ref.lse.size(); ++i) {
    const double want = ref.lse[i], merged = ref.lse[i] + std::log(1.5);
    worst_lse = std::max({worst_lse, std::abs(base.lse[i] - want), std::abs(v3.lse[i] - want),
                          std::abs(base.merged_lse[i] - merged), std::abs(v3.merged_lse[i] - merged)});
  }
  INFO("worst relative O error: default flags " << worst_base << ", x86-64-v3 " << worst_v3 << "; LSE "
                                                << worst_lse << "; merged O " << worst_merge);
  CHECK(worst_base <= 1e-3);
  CHECK(worst_v3 <= 1e-3);
  CHECK(worst_lse <= 1e-5);
  CHECK(worst_merge <= 2e-3);

  // RoPE: fp16 rows rotated in float and rounded once; the two files may differ by one rounding.
  REQUIRE(base.roped.size() == v3.roped.size());
  int differ_by_more_than_an_ulp = 0;
  for (std::size_t i = 0; i < base.roped.size(); ++i) {
    const int a = base.roped[i].bits, b = v3.roped[i].bits;
    differ_by_more_than_an_ulp += std::abs(a - b) > 1 && !(a == 0x8000 && b == 0) && !(a == 0 && b == 0x8000);
  }
  CHECK(differ_by_more_than_an_ulp == 0);
  bool rotated = false;
  for (std::size_t i = 0; i < base.roped.size(); ++i) rotated = rotated || base.roped[i].bits != in.k[i].bits;
  CHECK(rotated);
}
