#!/usr/bin/env bash
# Compares specdec_demo modes on a noisy machine: N rounds, each running every mode once in turn
# (interleaved, so a slow minute hits all modes alike), then per mode the sorted speedups over
# autoregressive decoding, their median, and the medians of tau and of the mean drafted depth.
#   benchmarks/demo_interleaved.sh BIN N "MODE ARGS" ["MODE ARGS" ...]
# e.g. benchmarks/demo_interleaved.sh build/demo-native/examples/specdec_demo 7 "" "--fixed-depth --depth 0" "--fixed-depth"
# ("" = the demo's defaults). Every run must be lossless: a run whose output differs stops the script.
set -euo pipefail
bin=$1; n=$2; shift 2
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
declare -a spd tau dep
for ((i = 0; i < n; ++i)); do
  k=0
  for m in "$@"; do
    # shellcheck disable=SC2086
    out=$("$bin" --quiet $m 2>/dev/null) || { echo "run failed or not lossless: $bin $m" >&2; exit 1; }
    spd[k]+="$(grep -oP 'speedup \K[0-9.]+' <<<"$out") "
    tau[k]+="$(grep -oP '^tau: +\K[0-9.]+' <<<"$out") "
    dep[k]+="$(grep -oP 'mean drafted \K[0-9.]+' <<<"$out") "
    k=$((k + 1))
  done
done
k=0
for m in "$@"; do
  echo "[${m:-defaults}] speedup: $(tr ' ' '\n' <<<"${spd[k]}" | grep . | sort -n | tr '\n' ' ')median $(median <<<"${spd[k]}");" \
       "tau median $(median <<<"${tau[k]}"); mean depth median $(median <<<"${dep[k]}")"
  k=$((k + 1))
done
