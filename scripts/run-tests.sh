#!/usr/bin/env bash
# Quick start, command 2: build prefixhit and run every test.
#   1. the CMake `ci` workflow: configure (CUDA when nvcc exists; host warnings are errors),
#      build everything, run ctest (unit, property, conformance, C ABI; GPU tests skip without
#      a GPU and ctest reports them as skipped);
#   2. the conformance vectors through the CLI, on every backend built here, and the linters
#      (clang-format, clang-tidy: scripts/lint.sh);
#   3. the Python package and its pytest suite;
#   4. ASan+UBSan and ThreadSanitizer builds of the CPU suites;
#   5. a short libFuzzer smoke run of each fuzz target, and the slot hash's aarch64 path
#      cross-compiled and run under qemu (scripts/check-arm-hash.sh);
#   6. CUDA emulation (tools/cuemu, preset `emu`): the kernels and every GPU test run on the CPU,
#      the GPU conformance run over every public vector folder, three random-schedule runs of
#      the GPU suites (fresh GPU-vs-CPU differential requests each time) and an ASan+UBSan
#      emulated run; the Python module built on the emulator and its GPU tests.
# Exits non-zero if any step fails, and ends with a one-line total.
set -uo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh || exit 1

log_dir=$(mktemp -d)
failed_steps=()
step_times=()  # "name Ns" per step, printed at the end: CI has a time budget
passed=0
failed=0
skipped=0

step() {  # step NAME COMMAND...: runs a step, tees its log, records failure
  local name=$1
  shift
  local start=$SECONDS
  echo "==== ${name}"
  if "$@" 2>&1 | tee "${log_dir}/${name}.log"; then
    echo "==== ${name}: ok ($((SECONDS - start)) s)"
  else
    echo "==== ${name}: FAILED ($((SECONDS - start)) s)"
    failed_steps+=("${name}")
  fi
  step_times+=("${name} $((SECONDS - start))s")
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

# ---- 6. CUDA emulation: the real kernels on tools/cuemu ------------------------------------------
count_gtest() {  # adds a GoogleTest log's counts (one or more runs of a test binary)
  local log=$1 p f s
  local sum='{s += $1} END {print s + 0}'
  p=$(grep -Eo '^\[  PASSED  \] [0-9]+' "$log" | grep -Eo '[0-9]+$' | awk "$sum")
  f=$(grep -Eo '^\[  FAILED  \] [0-9]+ test' "$log" | grep -Eo '[0-9]+' | awk "$sum")
  s=$(grep -Eo '^\[  SKIPPED \] [0-9]+ test' "$log" | grep -Eo '[0-9]+' | awk "$sum")
  passed=$((passed + ${p:-0}))
  failed=$((failed + ${f:-0}))
  skipped=$((skipped + ${s:-0}))
}
count_cases() {  # adds `prefixhit conformance` "N passed, M failed" lines (FAILS=0: print only)
  local log=$1 counted_failures=${2:-1} line n m
  while read -r line; do
    n=$(echo "$line" | grep -Eo '^[0-9]+')
    m=$(echo "$line" | grep -Eo '[0-9]+ failed' | grep -Eo '^[0-9]+')
    passed=$((passed + n))
    if [ "$counted_failures" = 1 ]; then failed=$((failed + m)); fi
  done < <(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log")
}

# The slot hash's aarch64 path (AESE/AESMC) and its table form, cross-compiled, under qemu.
step arm-hash ./scripts/check-arm-hash.sh build/arm-hash
count_gtest "${log_dir}/arm-hash.log"

step emu cmake --workflow --preset emu
count_ctest "${log_dir}/emu.log"

emu_cli=./build/emu/host/cli/prefixhit
# Every public vector folder through the real kernels (vLLM PR #49069, vLLM 0.33, our own).
emu_conformance() {
  local rc=0 folder
  for folder in tests/data/conformance tests/data/conformance-vllm-0.33 tests/data/extra; do
    "$emu_cli" conformance --backend gpu "$folder" || rc=1
  done
  return $rc
}
step emu-conformance emu_conformance
count_cases "${log_dir}/emu-conformance.log"

# The Python module's CUDA paths on the emulator: _core built into build/emu (preset emu-python)
# beside the package's .py files, and the Python GPU tests run against it (round robin, then
# test_gpu.py under a random schedule), then with no device (CUEMU_NO_DEVICE=1), where the
# no-GPU checks run and the GPU ones skip.
count_pytest() {  # adds every pytest summary line of a log
  local log=$1 line kind n
  while read -r line; do
    for kind in passed failed skipped; do
      n=$(echo "$line" | grep -Eo "[0-9]+ ${kind}" | grep -Eo '^[0-9]+')
      case $kind in
        passed) passed=$((passed + ${n:-0})) ;;
        failed) failed=$((failed + ${n:-0})) ;;
        skipped) skipped=$((skipped + ${n:-0})) ;;
      esac
    done
  done < <(grep -E '^=+ .*(passed|failed).* in [0-9.]+s' "$log")
}
emu_python() {
  local py seed rc=0
  py=$("${PYTHON:-python3}" -c 'import sys; print(sys.executable)') || return 1
  cmake --preset emu-python -DPython_EXECUTABLE="$py" >/dev/null &&
    cmake --build --preset emu-python || return 1
  local tests=(tests/python/test_gpu.py
    tests/python/test_block_index.py::test_cuda_index_is_refused_clearly_without_a_gpu
    tests/python/test_store_remote.py::test_answers_reach_the_gpu_engine
    tests/python/test_router.py::test_gpu_scores_equal_the_cpu_scorer
    tests/python/test_router.py::test_gpu_scoring_without_a_gpu_is_a_typed_error
    tests/python/test_mirror.py::test_device_choice_and_typed_errors
    tests/python/test_mirror.py::test_cuda_index_mirrors_like_the_cpu_index)
  export PYTHONPATH=$PWD/build/emu/python/package
  "$py" -c 'import prefixhit, sys; info = prefixhit.build_info(); print(prefixhit.__file__, info)
sys.exit(not (prefixhit.__file__.startswith(sys.argv[1]) and "cuemu" in info["device"]))' \
    "$PYTHONPATH" || return 1
  "$py" -m pytest -p no:cacheprovider -ra "${tests[@]}" || rc=1
  seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
  echo "---- random schedule: CUEMU_SCHEDULE=random:${seed} CUEMU_PREEMPT=0.3 (replay with these)"
  CUEMU_SCHEDULE=random:${seed} CUEMU_PREEMPT=0.3 "$py" -m pytest -p no:cacheprovider -ra \
    tests/python/test_gpu.py || rc=1
  CUEMU_NO_DEVICE=1 "$py" -m pytest -p no:cacheprovider -ra "${tests[@]}" || rc=1
  return $rc
}
step emu-python emu_python
count_pytest "${log_dir}/emu-python.log"

# Other interleavings: random order of the CUDA threads, preemption at atomics and hinted loads,
# 4 resident blocks. The vector-file suites are left to the conformance step above; the
# differential and index suites draw fresh requests in each run.
emu_schedules() {
  local rc=0 i seed
  for i in 1 2 3; do
    seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
    echo "---- random schedule ${i}/3: CUEMU_SCHEDULE=random:${seed} CUEMU_PREEMPT=0.3" \
      "CUEMU_RESIDENT_BLOCKS=4 (replay with these variables)"
    CUEMU_SCHEDULE=random:${seed} CUEMU_PREEMPT=0.3 CUEMU_RESIDENT_BLOCKS=4 \
      PREFIXHIT_VECTORS=$PWD/tests/data/conformance \
      ./build/emu/tests/prefixhit_gpu_tests --gtest_brief=1 \
      --gtest_filter='-GpuVectors*:*WithoutDevice*' || rc=1
  done
  return $rc
}
step emu-schedules emu_schedules
count_gtest "${log_dir}/emu-schedules.log"

# ASan+UBSan over the emulated kernels: device memory is host memory, so an out-of-bounds
# kernel access is a heap-buffer-overflow report.
emu_asan() {
  cmake -S . -B build/emu-asan -G Ninja --preset emu -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPREFIXHIT_SANITIZE=address,undefined -DPREFIXHIT_BUILD_CLI=OFF >/dev/null &&
    cmake --build build/emu-asan --target prefixhit_emu_suite &&
    ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:allocator_may_return_null=1 \
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir build/emu-asan -L gpu-emu --output-on-failure -j2
}
step emu-asan emu_asan
count_ctest "${log_dir}/emu-asan.log"

echo
echo "step times: ${step_times[*]} (total $((SECONDS / 60)) min)"
if ((${#failed_steps[@]})); then
  echo "failed steps: ${failed_steps[*]} (logs in ${log_dir})"
  failed=$((failed > 0 ? failed : ${#failed_steps[@]}))
  echo "total: ${passed} passed, ${failed} failed, ${skipped} skipped"
  exit 1
fi
echo "total: ${passed} passed, ${failed} failed, ${skipped} skipped"
