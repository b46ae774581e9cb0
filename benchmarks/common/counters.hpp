// The roofline counters every specdec benchmark reports: "GB/s" and "GFLOP/s" as rates over the
// iteration's bytes and FLOPs (read against the machine's measured read bandwidth and FMA peak),
// plus Google Benchmark's own bytes_per_second.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>

namespace specdec_bench {

//! Sets GB/s and GFLOP/s from the bytes and FLOPs of one iteration.
inline void set_counters(benchmark::State& st, double bytes, double flops) {
  st.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.SetBytesProcessed(static_cast<std::int64_t>(bytes) * st.iterations());
}

}  // namespace specdec_bench
