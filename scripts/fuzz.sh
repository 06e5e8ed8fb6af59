#!/usr/bin/env bash
# Runs every libFuzzer harness (fuzz/*_fuzz.cpp, built by the asan preset) for SECONDS each.
#   scripts/fuzz.sh BUILD_DIR SECONDS [HARNESS...]      (`make fuzz FUZZ_SECONDS=N`)
# Seeds: BUILD_DIR/fuzz/seeds (fuzz/seeds.py, kiln-fuzz-seeds and the ONNX conformance models,
# written afresh each run). Inputs that reach new code accumulate in BUILD_DIR/fuzz/corpus/<name>,
# so later runs start where earlier ones stopped. A crash, sanitizer report, leak, timeout (10 s)
# or memory blow-up (2 GiB) is written to BUILD_DIR/fuzz/findings/<name>/ and fails the run;
# `BUILD_DIR/bin/fuzz/<name> FILE` replays one.
# FUZZ_PARALLEL=N runs N harnesses at once; FUZZ_RUNS=N stops a harness after N executions (SECONDS
# is then the most it may take). Prints executions and findings per harness, also kept in
# BUILD_DIR/fuzz/summary.txt.
set -uo pipefail
build=${1:?usage: fuzz.sh BUILD_DIR SECONDS [HARNESS...]}
seconds=${2:?usage: fuzz.sh BUILD_DIR SECONDS [HARNESS...]}
shift 2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin="$build/bin/fuzz"
work="$build/fuzz"
[[ -x "$build/bin/kiln-fuzz-seeds" ]] || { echo "fuzz.sh: build the kiln_fuzzers target of the asan preset first" >&2; exit 1; }

harnesses=("$@")
if [[ ${#harnesses[@]} -eq 0 ]]; then
  for f in "$bin"/*; do harnesses+=("$(basename "$f")"); done
fi

export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
rm -rf "$work/seeds"
mkdir -p "$work/seeds"
"$build/bin/kiln-fuzz-seeds" "$work/seeds" >/dev/null || exit 1
cases=()
[[ -d "$build/onnx-node-tests/node" ]] && cases=("$build/onnx-node-tests")
/usr/bin/python3 "$here/fuzz/seeds.py" "$work/seeds" "${cases[@]}" || exit 1

run_one() {
  local name=$1
  local corpus="$work/corpus/$name" findings="$work/findings/$name" log="$work/logs/$name.log"
  rm -rf "$findings"  # this run's findings only; reproduce one with: $bin/$name <file>
  mkdir -p "$corpus" "$findings" "$work/logs" "$work/seeds/$name"
  local runs=()
  [[ -n "${FUZZ_RUNS:-}" ]] && runs=(-runs="$FUZZ_RUNS")
  "$bin/$name" -max_total_time="$seconds" "${runs[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$findings/" "$corpus" "$work/seeds/$name" >"$log" 2>&1
  local status=$?
  local execs rate found
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  found=$(find "$findings" -type f | wc -l)
  printf '%-20s %12s %10s %8s %9s %s\n' "$name" "${execs:-?}" "${rate:-?}" "$(find "$corpus" -type f | wc -l)" \
    "$found" "$([[ $status -eq 0 && $found -eq 0 ]] && echo ok || echo "FAILED (exit $status; $log)")"
}
export -f run_one
export work bin seconds

{
  printf '%-20s %12s %10s %8s %9s %s\n' harness executions "execs/s" corpus findings result
  printf '%s\n' "${harnesses[@]}" | xargs -P "${FUZZ_PARALLEL:-1}" -I{} bash -c 'run_one {}'
} | tee "$work/summary.txt"
! grep -q FAILED "$work/summary.txt"
