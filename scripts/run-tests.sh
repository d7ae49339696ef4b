#!/usr/bin/env bash
# Quick start, command 2: build prefixhit and run every test.
#   1. the CMake `ci` workflow: configure (CUDA when nvcc exists; host warnings are errors),
#      build everything, run ctest (unit, property, conformance, C ABI; GPU tests skip without
#      a GPU and ctest reports them as skipped);
#   2. the conformance vectors through the CLI, on every backend built here, and the linters
#      (clang-format, clang-tidy: scripts/lint.sh);
#   3. the Python package and its pytest suite;
#   4. ASan+UBSan and ThreadSanitizer builds of the CPU suites;
#   5. a short libFuzzer smoke run of each fuzz target.
# Exits non-zero if any step fails, and ends with a one-line total.
set -uo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh || exit 1

log_dir=$(mktemp -d)
failed_steps=()
passed=0
failed=0
skipped=0

step() {  # step NAME COMMAND...: runs a step, tees its log, records failure
  local name=$1
  shift
  echo "==== ${name}"
  if "$@" 2>&1 | tee "${log_dir}/${name}.log"; then
    echo "==== ${name}: ok"
  else
    echo "==== ${name}: FAILED"
    failed_steps+=("${name}")
  fi
}

count_ctest() {  # adds a ctest log's counts
  local log=$1 total fail skip
  total=$(grep -Eo 'tests failed out of [0-9]+' "$log" | tail -1 | grep -Eo '[0-9]+$')
  fail=$(grep -Eo '[0-9]+ tests failed out of' "$log" | tail -1 | grep -Eo '^[0-9]+')
  skip=$(grep -c '(Skipped)' "$log")
  total=${total:-0} fail=${fail:-0}
  passed=$((passed + total - fail - skip))
  failed=$((failed + fail))
  skipped=$((skipped + skip))
}

step ctest cmake --workflow --preset ci
count_ctest "${log_dir}/ctest.log"

conformance() {
  local cli=./build/ci/host/cli/prefixhit rc=0
  "$cli" conformance tests/data/conformance || rc=1
  "$cli" conformance tests/data/conformance-vllm-0.33 || rc=1
  "$cli" conformance tests/data/extra || rc=1
  if "$cli" conformance --backend gpu tests/data/conformance/dsv4.json >/dev/null 2>&1; then
    "$cli" conformance --backend gpu tests/data/conformance || rc=1
  else
    echo "conformance --backend gpu: skipped ($("$cli" conformance --backend gpu \
      tests/data/conformance/dsv4.json 2>&1 | tail -1))"
  fi
  return $rc
}
step conformance conformance
step lint ./scripts/lint.sh build/ci

step python ./scripts/test-python.sh
py_line=$(grep -E '^=+ .*(passed|failed).* in [0-9.]+s' "${log_dir}/python.log" | tail -1)
for kind in passed failed skipped; do
  n=$(echo "$py_line" | grep -Eo "[0-9]+ ${kind}" | grep -Eo '^[0-9]+')
  case $kind in
    passed) passed=$((passed + ${n:-0})) ;;
    failed) failed=$((failed + ${n:-0})) ;;
    skipped) skipped=$((skipped + ${n:-0})) ;;
  esac
done

step sanitizers ./scripts/sanitizers.sh
step fuzz-smoke ./scripts/fuzz-smoke.sh "${PREFIXHIT_FUZZ_SECONDS:-60}"

echo
if ((${#failed_steps[@]})); then
  echo "failed steps: ${failed_steps[*]} (logs in ${log_dir})"
  failed=$((failed > 0 ? failed : ${#failed_steps[@]}))
  echo "total: ${passed} passed, ${failed} failed, ${skipped} skipped"
  exit 1
fi
echo "total: ${passed} passed, ${failed} failed, ${skipped} skipped"
