// The 16-lane vector layer under the host attention kernels (core/detail/simd.hpp), checked
// lane by lane against scalar code (the cases are in simd_cases.inl), at this file's own flags.
// This file is built three times (baseline x86-64: four xmm per vector; x86-64-v3: two ymm and
// F16C; -march=native: one zmm on AVX-512 machines); test_simd_level.cpp runs the same cases at
// every run-time dispatch level in one binary.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "specdec/core/detail/simd.hpp"
#include "specdec/core/philox.hpp"
#include "specdec/core/simd_level.hpp"

using namespace specdec;
using namespace specdec::detail;

#include "simd_cases.inl"

TEST_CASE("simd: lane by lane at this file's flags") { simd_cases(); }
