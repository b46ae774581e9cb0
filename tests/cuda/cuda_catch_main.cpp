// Catch2 main shared by every CUDA test executable (tests/CMakeLists.txt links it in).
//
// How to write a CUDA test: add tests/cuda/test_<name>.cu with TEST_CASEs only (no main, no
// CATCH_CONFIG_MAIN); it is registered as ctest test cuda.test_<name> with label `cuda`. This main
// returns 77 -- which ctest reports as "skipped" (SKIP_RETURN_CODE) -- when cudaGetDeviceCount fails
// or finds no device, so the suite passes on CPU-only CI machines. Before that, it runs the test cases
// tagged [nogpu] (host-side validation of the CUDA entry points makes no CUDA call), so those run on
// every CI machine: their failure fails the executable. SPECDEC_CUDA_CHECK from
// <specdec/core/device_types.cuh> and the helpers in cuda/cuda_test_util.cuh keep tests short.
// Built with SPECDEC_CUDA_TEST_DEVICE_CODE=CHECK (the default where configure found no GPU), the
// executables carry unoptimized PTX for compile checks only, and they skip the GPU tests the same
// way on a machine that has a device: what they would time and compare is not the code users run.
// There the files are also compiled several to an executable (cuda_check_bundle_<i>, each file in a
// namespace of its own; ctest runs a file's cases by its tag [#test_<name>]): keep every #include at
// the top of a file, #undef a file's macros at its end, and keep test case names unique across files.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "catch_run.hpp"

int main(int argc, char** argv) {
  std::string skip;  // why the GPU tests do not run here; empty when they do
#ifdef SPECDEC_TEST_DEVICE_CODE_CHECK_ONLY
  skip = "this build's device code is for compile checks only (SPECDEC_CUDA_TEST_DEVICE_CODE=CHECK: unoptimized PTX); "
         "configure with FULL to run the GPU tests";
#else
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0)
    skip = std::string("no usable CUDA device (") +
           (status != cudaSuccess ? cudaGetErrorString(status) : "device count is 0") + ")";
#endif
  if (!skip.empty()) {
    if (const int failed = specdec_test::run_catch(argc, argv, "[nogpu]"); failed != 0) return failed;
    std::printf("SKIPPED: %s\n([nogpu] test cases, if any, ran above and passed)\n", skip.c_str());
    return 77;
  }
  return specdec_test::run_catch(argc, argv);
}
