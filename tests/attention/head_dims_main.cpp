// attention.head_dims: SPECDEC_HOST_HEAD_DIMS (core/isa.hpp) restricts the head dims a file compiles
// the host attention kernels for. One executable links a file that compiles all three (this one)
// and one that compiles 64 only (head_dims_hd64.cpp), as an engine may. Checks: the restricted file
// runs 64 and rejects 128 with an error naming the macro; the other file runs both; both agree with
// the reference; and each file's entry point is its own (with one shared symbol the linker could
// hand this file the 64-only body, and a call at 128 would throw).
#include <catch2/catch.hpp>

#include <cmath>

#include "head_dims.hpp"
#include "specdec/reference/attention.hpp"

#if SPECDEC_HOST_HEAD_DIM_MASK != 7
#error "head_dims_main.cpp must be compiled without SPECDEC_HOST_HEAD_DIMS"
#endif

namespace head_dims {
file_result run_all_dims() { return run_in_this_file(); }
}  // namespace head_dims

using namespace head_dims;

namespace {
double worst_error(const problem& p, const std::vector<float>& out, const std::vector<float>& lse) {
  const auto ref = specdec::reference::decode_attention(p.q_view(), p.cache(), p.indptr_view());
  REQUIRE(out.size() == ref.out.size());
  REQUIRE(lse.size() == ref.lse.size());
  double worst = 0;
  for (std::size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::abs(out[i] - ref.out[i]));
  for (std::size_t i = 0; i < lse.size(); ++i) worst = std::max(worst, std::abs(lse[i] - ref.lse[i]));
  return worst;
}
}  // namespace

TEST_CASE("SPECDEC_HOST_HEAD_DIMS: a file compiles only the head dims it names, and says so") {
  const file_result all = run_all_dims();
  const file_result hd64 = run_hd64();
  INFO("all-dims file: " << all.isa << "; 64-only file: " << hd64.isa);
  CHECK(all.isa.find("_hd") == std::string::npos);
  CHECK(hd64.isa.size() == all.isa.size() + 5);
  CHECK(hd64.isa.substr(hd64.isa.size() - 5) == "_hd64");
  CHECK(all.compiled[0]);
  CHECK(all.compiled[1]);
  CHECK(all.compiled[2]);
  CHECK(hd64.compiled[0]);
  CHECK_FALSE(hd64.compiled[1]);
  CHECK_FALSE(hd64.compiled[2]);
  CHECK(all.decode_entry != hd64.decode_entry);

  // head_dim 64 runs in both files; 128 only in the all-dims one.
  CHECK(all.error[0].empty());
  CHECK(hd64.error[0].empty());
  CHECK(all.error[1].empty());
  REQUIRE_FALSE(hd64.error[1].empty());
  INFO(hd64.error[1]);
  CHECK(hd64.error[1].find("specdec::decode_attention") != std::string::npos);
  CHECK(hd64.error[1].find("SPECDEC_HOST_HEAD_DIMS = 64") != std::string::npos);
  CHECK(hd64.error[1].find("128") != std::string::npos);
  CHECK(hd64.out[1].empty());
}

TEST_CASE("SPECDEC_HOST_HEAD_DIMS: the compiled head dims compute the reference result") {
  const file_result all = run_all_dims();
  const file_result hd64 = run_hd64();
  const problem p64(64), p128(128);
  REQUIRE(all.error[0].empty());
  REQUIRE(hd64.error[0].empty());
  REQUIRE(all.error[1].empty());
  // fp32 accumulation over at most 130 keys against the double reference.
  CHECK(worst_error(p64, all.out[0], all.lse[0]) <= 1e-5);
  CHECK(worst_error(p64, hd64.out[0], hd64.lse[0]) <= 1e-5);
  CHECK(worst_error(p128, all.out[1], all.lse[1]) <= 1e-5);
  // Same flags, same level, same kernel source: the same bits.
  CHECK(all.out[0] == hd64.out[0]);
  CHECK(all.lse[0] == hd64.lse[0]);
}
