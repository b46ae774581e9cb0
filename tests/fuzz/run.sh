#!/usr/bin/env bash
# Builds and runs specdec's libFuzzer targets (tests/fuzz/README.md); .ci/run's fuzz step.
#   tests/fuzz/run.sh [SECONDS [TARGET...]]
# 1. clang++-14 -fsyntax-only on the umbrella header and examples/common/*.hpp (the project must
#    build with clang too; the fuzz build only sees what the targets include);
# 2. configures and builds build/fuzz (one executable, specdec_fuzz);
# 3. ctest there: every target over its seed corpus once, and every open finding (expected to fail);
# 4. fuzzes each TARGET (default: all) for SECONDS (default 5) from its seed corpus, SPECDEC_JOBS at a
#    time. New inputs go to build/fuzz/corpus/<target>, crashes to build/fuzz/artifacts/<target>/.
# Exits non-zero when any step fails or any target finds something. Root on Debian installs the
# missing packages (clang-14, libclang-rt-14-dev); otherwise it prints the apt-get line.
# Environment: SPECDEC_JOBS (default: all cores), SPECDEC_FUZZ_CXX (default clang++-14).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
root=$(pwd)
secs=${1:-5}
shift $(( $# > 0 ? 1 : 0 ))
jobs=${SPECDEC_JOBS:-$(nproc)}
cxx=${SPECDEC_FUZZ_CXX:-clang++-14}
build="$root/build/fuzz"
status=0
t_all=$(date +%s)
step_time() { echo "--- $1: $(( $(date +%s) - $2 ))s"; }

# 0. packages
missing=()
if command -v dpkg-query >/dev/null; then
  for p in clang-14 libclang-rt-14-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "specdec fuzz: installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -q && \
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" || exit 1
  else
    echo "specdec fuzz: missing Debian packages; as root: apt-get install -y ${missing[*]}"
    exit 1
  fi
fi

# 1. headers with clang (cheap; catches clang-only breakage in headers no target includes): one
#    translation unit with the umbrella header and every examples/common header
t0=$(date +%s)
includes=()
for h in include/specdec/specdec.hpp examples/common/*.hpp; do includes+=(-include "$root/$h"); done
if "$cxx" -std=c++20 -fsyntax-only -Wall -Wextra -Werror -I"$root/include" "${includes[@]}" -x c++ /dev/null; then
  echo "clang -fsyntax-only: include/specdec/specdec.hpp and examples/common/*.hpp ok"
else
  echo "clang -fsyntax-only: FAILED"
  status=1
fi
step_time "clang header check" "$t0"

# 2. build
t0=$(date +%s)
cmake -S tests/fuzz -B "$build" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE= >/dev/null &&
  cmake --build "$build" --parallel "$jobs" || { echo "specdec fuzz: build FAILED"; exit 1; }
step_time "build" "$t0"

# 3. regressions: seed corpora and open findings
t0=$(date +%s)
ctest --test-dir "$build" --output-on-failure -j "$jobs" || status=1
step_time "ctest (corpora, open findings)" "$t0"

# 4. fuzz
t0=$(date +%s)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <("$build/specdec_fuzz" -target=list)
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fuzz_one() {  # fuzz_one <build> <root> <seconds> <target>: one line "target execs status"
  local build=$1 root=$2 secs=$3 t=$4
  mkdir -p "$build/corpus/$t" "$build/artifacts/$t" "$root/tests/fuzz/corpus/$t"
  local dict=() log="$build/artifacts/$t/fuzz.log"
  [ -f "$root/tests/fuzz/dict/$t.dict" ] && dict=(-dict="$root/tests/fuzz/dict/$t.dict")
  "$build/specdec_fuzz" -target="$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$t/" "${dict[@]}" "$build/corpus/$t" "$root/tests/fuzz/corpus/$t" >"$log" 2>&1
  local rc=$? execs
  execs=$(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$')
  if [ $rc -eq 0 ]; then
    printf '  %-26s %9s execs  ok\n' "$t" "${execs:-?}"
  else
    printf '  %-26s %9s execs  FINDING (exit %d): %s\n' "$t" "${execs:-?}" "$rc" "$log"
    grep -E 'FINDING|runtime error|ERROR: (AddressSanitizer|libFuzzer)|Test unit written' "$log" | head -4 | cut -c1-400
    return 1
  fi
}
export -f fuzz_one
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'fuzz_one "$@"' _ "$build" "$root" "$secs" {} || status=1
step_time "fuzz (${#targets[@]} targets x ${secs}s, $jobs at a time)" "$t0"

echo "specdec fuzz: total $(( $(date +%s) - t_all ))s on $(nproc) cores: $([ $status -eq 0 ] && echo ok || echo FAILED)"
exit $status
