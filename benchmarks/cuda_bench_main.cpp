// Google Benchmark main shared by every benchmarks/cuda/bench_*.cu program (benchmarks/CMakeLists.txt
// links it in; the .cu files only define BENCHMARKs). Exits 77 -- "skipped" for .ci/run's smoke run --
// when cudaGetDeviceCount fails or finds no device, so CI machines without a GPU pass.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstdio>

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no usable CUDA device (%s)\n",
                status != cudaSuccess ? cudaGetErrorString(status) : "device count is 0");
    return 77;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
