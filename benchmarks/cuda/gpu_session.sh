#!/usr/bin/env bash
# What a session with a lent H100/H200 runs for the CUDA backend (issue #7), in one command:
#   benchmarks/cuda/gpu_session.sh BUILD_DIR OUT_DIR [tests|sanitize|bench|sdpa|torch|all]
# BUILD_DIR holds the CUDA test and benchmark binaries (configure with -DSPECDEC_CUDA=ON
# -DSPECDEC_BUILD_BENCHMARKS=ON -DSPECDEC_CUDA_TEST_DEVICE_CODE=FULL and build the cuda_test_* and
# bench_cuda_attention targets; they can be built on a machine without a GPU and carried over, but
# without FULL such a machine builds the tests' device code for compile checks only, and they skip). Every step has its own time limit so that
# one hung step cannot eat the lease; logs go to OUT_DIR, a summary to stdout.
# The device tool's upload is 64 MiB with the working tree: carry the binaries stripped and packed
# (21 test binaries, two benchmarks and gpu_decode came to 29.7 MB in session 63):
#   mkdir -p c/{tests,benchmarks,examples,lib}; cp BUILD/tests/cuda_test_* c/tests; cp BUILD/benchmarks/bench_cuda_* \
#     c/benchmarks; cp BUILD/examples/gpu_decode c/examples; strip c/*/*; cp -L <libbenchmark.so.1debian,
#     libcudart.so.13> c/lib; (cd c && tar -cf - tests benchmarks examples lib | xz -9e -T2 > CARRY/bins.tar.xz)
# and pass the carried folder as BUILD_DIR: a BUILD_DIR/bins.tar.xz is unpacked there first.
#   tests     every tests/cuda binary (compares each kernel with the host backend and the reference),
#             then examples/gpu_decode when BUILD_DIR has it (the whole step on the GPU: greedy
#             speculative output against greedy autoregressive output, tok/s, tau; GPU_DECODE_ARGS)
#   sanitize  compute-sanitizer memcheck and racecheck on each test binary (run side by side; memcheck
#             on a small gpu_decode too, when it is there), with
#             SPECDEC_CUDA_TEST_SMALL=1 (the tests skip their largest shapes, which the plain run
#             covers: racecheck on them ran past 340 s in session 31; set it empty to keep them)
#   bench     bench_cuda_attention (JSON to OUT_DIR/bench.json), then every other bench_cuda_* binary
#             (JSON and text to OUT_DIR/<name>.{json,txt}). If BUILD_DIR/benchmarks holds
#             bench_cuda_attention_base (the same benchmark built from an earlier commit), the two run
#             interleaved, base then ours, ROUNDS times (default 2), and a per-cell before/after table
#             of median graph times goes to OUT_DIR/before_after.md
#   sdpa      sdpa_compare.py: PyTorch SDPA on the same shapes, one table with OUT_DIR/bench.json
#   torch     step_torch_compare.py: torch.topk / argmax / multinomial (and FlashInfer's sampling
#             when it imports) on bench_cuda_step's shapes, one table with OUT_DIR/bench_cuda_step.json
# 'all' runs tests, bench, sanitize, sdpa, torch in that order: timings before the sanitizers load the GPU,
# and the most important results first should the lease run out.
set -u
build=${1:?build dir}
out=${2:?out dir}
what=${3:-all}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
if [[ -f $build/bins.tar.xz && ! -d $build/tests ]]; then tar -xJf "$build/bins.tar.xz" -C "$build" || exit 1; fi
# libbenchmark's shared object travels in BUILD_DIR/lib when the device image lacks it.
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# TESTS (a glob, default cuda_test_*) narrows the test and sanitizer steps, e.g. when only some
# binaries changed since the last GPU run: TESTS='cuda_test_{kv_commit,rope}'.
tests=$(cd "$build/tests" && eval "ls ${TESTS:-cuda_test_*}" 2>/dev/null | sort)
status=0

if [[ $what == tests || $what == all ]]; then
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,memory.total --format=csv \
    | tee "$out/gpu.txt"
  # TEST_JOBS binaries at a time (default 6; session 63 ran all 21 in 45 s this way on an H200's 16
  # cores): the tests compare against host references, which are CPU work, and time nothing.
  export build out
  if ! printf '%s\n' $tests | xargs -P "${TEST_JOBS:-6}" -I{} bash -c \
      'timeout 300 "$build/tests/{}" --durations yes >"$out/{}.log" 2>&1; rc=$?
       echo "test {} rc=$rc $(grep -E "^(All tests passed|test cases:)" "$out/{}.log" | tail -1)"; exit $(( rc != 0 ))'; then
    status=1
  fi
  if [[ -x $build/examples/gpu_decode ]]; then
    timeout 300 "$build/examples/gpu_decode" ${GPU_DECODE_ARGS:-} >"$out/gpu_decode.log" 2>&1
    rc=$?
    echo "example gpu_decode rc=$rc"
    tail -6 "$out/gpu_decode.log"
    [[ $rc == 0 ]] || status=1
  fi
fi

if [[ $what == bench || $what == all ]]; then
  base="$build/benchmarks/bench_cuda_attention_base"
  bench_run() {  # bench_run <binary> <json>
    timeout 300 "$1" --benchmark_min_time=0.2 --benchmark_counters_tabular=true \
      --benchmark_out="$2" --benchmark_out_format=json >"${2%.json}.txt" 2>&1 || status=1
  }
  if [[ -x $base ]]; then
    for ((r = 0; r < ${ROUNDS:-2}; ++r)); do
      bench_run "$base" "$out/base$r.json"
      bench_run "$build/benchmarks/bench_cuda_attention" "$out/ours$r.json"
    done
    cp "$out/ours0.json" "$out/bench.json"
    python3 - "$out" "${ROUNDS:-2}" >"$out/before_after.md" <<'PY' || status=1
import json, statistics, sys, collections
out, rounds = sys.argv[1], int(sys.argv[2])
t = collections.defaultdict(lambda: collections.defaultdict(list))
for tag in ("base", "ours"):
    for r in range(rounds):
        try:
            for b in json.load(open(f"{out}/{tag}{r}.json"))["benchmarks"]:
                t[b["name"]][tag].append(b["real_time"])
        except (OSError, ValueError, KeyError):
            pass
print("| cell | base (median) | ours (median) | ours / base | runs |")
print("|---|---:|---:|---:|---:|")
for name, d in t.items():
    if d["base"] and d["ours"]:
        b, o = statistics.median(d["base"]), statistics.median(d["ours"])
        print(f"| {name} | {b:.1f} | {o:.1f} | {o / b:.3f} | {len(d['base'])}+{len(d['ours'])} |")
PY
    cat "$out/before_after.md"
  elif [[ -x $build/benchmarks/bench_cuda_attention ]]; then
    bench_run "$build/benchmarks/bench_cuda_attention" "$out/bench.json"
    cat "$out/bench.txt"
  else
    echo "bench: no $build/benchmarks/bench_cuda_attention (not built for this run)"
  fi
  # Every other CUDA benchmark binary (the step's kernels: bench_cuda_step, ...), once each.
  for b in "$build"/benchmarks/bench_cuda_*; do
    name=$(basename "$b")
    [[ $name == bench_cuda_attention || $name == bench_cuda_attention_base ]] && continue
    bench_run "$b" "$out/$name.json"
    cat "$out/$name.txt"
  done
fi

if [[ $what == sanitize || $what == all ]]; then
  pids=()
  for t in $tests; do
    for tool in memcheck racecheck; do
      SPECDEC_CUDA_TEST_SMALL=${SPECDEC_CUDA_TEST_SMALL-1} timeout ${SANITIZE_TIMEOUT:-420} compute-sanitizer --tool $tool --error-exitcode 99 "$build/tests/$t" \
        >"$out/$t.$tool.log" 2>&1 &
      pids+=("$!:$t:$tool")
    done
  done
  if [[ -x $build/examples/gpu_decode ]]; then
    timeout ${SANITIZE_TIMEOUT:-420} compute-sanitizer --tool memcheck --error-exitcode 99 "$build/examples/gpu_decode" \
      --requests 3 --new 24 --slots 2 --layers 2 --hidden 128 >"$out/gpu_decode.memcheck.log" 2>&1 &
    pids+=("$!:gpu_decode:memcheck")
  fi
  for p in "${pids[@]}"; do
    IFS=: read -r pid t tool <<<"$p"
    wait "$pid"
    rc=$?
    echo "$tool $t rc=$rc $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/$t.$tool.log" | tail -1)"
    [[ $rc == 0 ]] || status=1
  done
fi

if [[ $what == sdpa || $what == all ]]; then
  PYTHONUNBUFFERED=1 timeout 300 python3 "$here/sdpa_compare.py" --ours "$out/bench.json" \
    --out "$out/sdpa_table.md" >"$out/sdpa.log" 2>&1 || status=1
  tail -25 "$out/sdpa.log"
fi

if [[ $what == torch || $what == all ]]; then
  PYTHONUNBUFFERED=1 timeout 300 python3 "$here/step_torch_compare.py" --ours "$out/bench_cuda_step.json" \
    --out "$out/step_torch_table.md" >"$out/step_torch.log" 2>&1 || status=1
  tail -80 "$out/step_torch.log"
fi
exit $status
