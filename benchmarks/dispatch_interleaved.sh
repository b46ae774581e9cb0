#!/usr/bin/env bash
# Run-time ISA dispatch against a -march=native build, interleaved on a noisy machine: N rounds, each
# running the native binary, then the default-flags (dispatching) binary at every level in LEVELS,
# on the cells FILTER selects; per cell the median CPU time of each column and dispatch/native.
#   benchmarks/dispatch_interleaved.sh NATIVE_BIN DISPATCH_BIN N FILTER [LEVELS]
# e.g. benchmarks/dispatch_interleaved.sh build/host/benchmarks/bench_attention_attention \
#        build/host/benchmarks/bench_attention_attention_dispatch 3 'BM_hybrid.*threads:1$' "best avx2 portable"
set -euo pipefail
native=$1; disp=$2; n=$3; filter=$4; levels=${5:-best}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
run() {  # run <tag> <round> <bin> [env...]
  local tag=$1 r=$2 bin=$3; shift 3
  env "$@" "$bin" --benchmark_filter="$filter" --benchmark_min_time=0.2 --benchmark_format=csv 2>/dev/null |
    grep '^"BM' | awk -F, -v t="$tag" '{gsub(/"/, "", $1); f = $5 == "ms" ? 1e3 : $5 == "ns" ? 1e-3 : 1; print t, $1, $4 * f}' >>"$tmp/all"
}
for ((r = 0; r < n; ++r)); do
  run native "$r" "$native"
  for l in $levels; do run "$l" "$r" "$disp" SPECDEC_ISA="$l"; done
done
python3 - "$tmp/all" "$levels" <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(sys.argv[1]):
    tag, name, cpu = line.split()
    rows[name][tag].append(float(cpu))
levels = sys.argv[2].split()
cols = ["native"] + levels
print("| cell | " + " | ".join(f"{c} (us)" for c in cols) + " | " + " | ".join(f"{l}/native" for l in levels) + " |")
print("|---" * (1 + len(cols) + len(levels)) + "|")
for name, d in rows.items():
    med = {c: statistics.median(d[c]) for c in cols if d[c]}
    ratio = [f"{med[l] / med['native']:.3f}" if l in med and 'native' in med else "-" for l in levels]
    print(f"| {name} | " + " | ".join(f"{med.get(c, float('nan')):.1f}" for c in cols) + " | " + " | ".join(ratio) + " |")
PY
