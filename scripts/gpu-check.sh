#!/usr/bin/env bash
# The one-call GPU check, for a machine with an NVIDIA H100/H200 (sm_90). In order of value, since
# a lease is short:
#   1. builds with -arch=sm_90 from what travels (the tree with tests/data, and .carry/ from
#      scripts/prepare-carry.sh: header-only libraries, GoogleTest's sources; Google Benchmark
#      is used only if it links);
#   2. runs every GPU test (the differential ones on fresh random requests), the conformance
#      vectors of every folder on the GPU backend, then the C ABI's GPU tests (router scores,
#      device index, device mirror), each against the CPU calls;
#   3. runs the CLI benchmarks (`prefixhit bench --backend gpu`, and one CPU row beside them);
#   4. runs compute-sanitizer memcheck and racecheck on small inputs;
#   5. runs the Google Benchmark GPU suites when they were built;
#   6. writes a short markdown table to $OUT/gpu-table.md (and prints it).
# A device lease is short, so the whole check runs inside PREFIXHIT_GPU_CHECK_BUDGET seconds
# (default 480): each step's timeout is cut to what is left, and a step with under 15 s left is
# reported as FAILED "out of time" (the CLI benchmarks stop, and their row counts what ran).
# The table and a tarball of every log ($OUT/gpu-check-logs.tar.gz) are rewritten after each
# step, so a run killed at the device's limit still returns what it did (the device returns at
# most 8 files).
# Never changes the GPU's clocks, power or mode. Usage: OUT=/some/dir scripts/gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit
OUT=${OUT:-$PWD/build/gpu-check-out}
mkdir -p "$OUT"
logs=$PWD/build/gpu-check-logs
rm -rf "$logs" && mkdir -p "$logs"
deadline=$(( $(date +%s) + ${PREFIXHIT_GPU_CHECK_BUDGET:-480} ))
log() { echo "[gpu-check $(date +%H:%M:%S)] $*"; }
declare -a rows=()
# The table so far: the step rows, then the benchmark table once there is one.
write_table() {
  {
    echo "### $(date -u +%Y-%m-%dT%H:%MZ) — $(cat "$logs/device.txt" 2>/dev/null || echo 'no GPU found')"
    echo
    echo "| step | result | detail |"
    echo "| --- | --- | --- |"
    printf '%s\n' "${rows[@]}"
    echo
    cat "$logs/bench-table.md" 2>/dev/null
  } >"$OUT/gpu-table.md"
  tar -czf "$OUT/gpu-check-logs.tar.gz" -C "$logs" . 2>/dev/null
}
row() { rows+=("| $1 | $2 | $3 |"); write_table; }
# left WANTED: prints the seconds a step may take (WANTED, cut to the budget's rest), or fails.
left() {
  local rest=$(( deadline - $(date +%s) ))
  [ "$rest" -ge 15 ] || return 1
  echo $(( rest < $1 ? rest : $1 ))
}

vectors=$PWD/tests/data/conformance
vectors_vllm033=$PWD/tests/data/conformance-vllm-0.33
build=build/gpu-check
c_abi_tests=(c_api_router_gpu c_api_device_index c_api_mirror_device)
{
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total \
    --format=csv,noheader
} >"$logs/device.txt" 2>&1
{ nvidia-smi; nvcc --version; } >"$logs/machine.txt" 2>&1

# ---- 1. build ----------------------------------------------------------------------------------
# One ninja run for every target this configuration has (the mirror test exists only with
# ZeroMQ), with -k 0 so that one that fails to build (Google Benchmark that does not link) stops
# nothing else.
log "configure + build (sm_90)"
start=$(date +%s)
# PREFIXHIT_CARRY_ONLY=1 ignores this machine's packages, as on the GPU machine (a dry run here).
carry_only=()
if [ "${PREFIXHIT_CARRY_ONLY:-0}" = 1 ]; then
  for pkg in GTest nlohmann_json CLI11 benchmark; do
    carry_only+=("-DCMAKE_DISABLE_FIND_PACKAGE_${pkg}=ON")
  done
fi
# The carried mirror parts (scripts/prepare-carry.sh), for a machine without ZeroMQ or msgpack.
if [ -d "$PWD/.carry/mirror" ]; then
  carry_only+=("-DCMAKE_PREFIX_PATH=$PWD/.carry/mirror")
  export LD_LIBRARY_PATH=$PWD/.carry/mirror/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
targets=(prefixhit_cli prefixhit_gpu_tests prefixhit_gpu_benchmarks)
for t in "${c_abi_tests[@]}"; do targets+=("prefixhit_$t"); done
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  "${carry_only[@]}" \
  -DPREFIXHIT_THIRD_PARTY_DIR="$PWD/.carry" -DPREFIXHIT_VECTORS_DIR="$vectors" \
  -DPREFIXHIT_BUILD_BENCHMARKS=ON >"$logs/build.log" 2>&1 &&
  {
    # Ninja refuses the whole run for one unknown target (the mirror test without ZeroMQ).
    known=()
    for t in "${targets[@]}"; do
      ninja -C "$build" -t query "$t" >/dev/null 2>&1 && known+=("$t")
    done
    cmake --build "$build" -j "$(nproc)" --target "${known[@]}" -- -k 0 >>"$logs/build.log" 2>&1
  }
cli=$build/host/cli/prefixhit
gpu_tests=$build/tests/prefixhit_gpu_tests
if [ -x "$cli" ] && [ -x "$gpu_tests" ]; then
  row build ok "$(( $(date +%s) - start )) s, $(grep -o 'CUDA backend [A-Z]*' "$logs/build.log" | head -1)"
else
  row build FAILED "see build.log"
  grep -E 'error|FAILED' "$logs/build.log" | head -20
fi

# ---- 2. GPU tests and vectors on the GPU --------------------------------------------------------
if [ -x "$gpu_tests" ] && t=$(left 180); then
  log "GPU tests"
  # GpuBatchLookupWithoutDevice checks the no-device path, and skips where there is a device.
  PREFIXHIT_VECTORS=$vectors timeout "$t" "$gpu_tests" --gtest_brief=1 \
    --gtest_filter='-GpuBatchLookupWithoutDevice.*' --gtest_output="xml:$logs/gpu-tests.xml" >"$logs/gpu-tests.log" 2>&1
  rc=$?
  summary=$(python3 - "$logs/gpu-tests.xml" <<'PY' 2>/dev/null
import sys, xml.etree.ElementTree as ET
# GoogleTest marks a skipped case with a <skipped> child (result="skipped"), not in the totals.
cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
passed = failed = skipped = 0
for case in cases:
    if case.find("failure") is not None or case.find("error") is not None:
        failed += 1
    elif case.get("result") == "skipped" or case.find("skipped") is not None:
        skipped += 1
    else:
        passed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
PY
)
  result=$([ $rc -eq 0 ] && echo ok || echo FAILED)
  case "$summary" in *", 0 skipped") ;; *) result=FAILED ;; esac  # on a GPU nothing may skip
  row "GPU tests" "$result" "${summary:-no xml (rc $rc)}"
else
  row "GPU tests" FAILED "not built, or out of time"
fi
for folder in "$vectors" "$vectors_vllm033" "$PWD/tests/data/extra"; do
  name=$(basename "$folder")
  if [ -x "$cli" ] && t=$(left 120); then
    log "vectors on the GPU backend: $name"
    timeout "$t" "$cli" conformance --backend gpu "$folder" >"$logs/$name-gpu.log" 2>&1
    rc=$?
    row "vectors $name (gpu)" "$([ $rc -eq 0 ] && echo ok || echo FAILED)" \
      "$(tail -1 "$logs/$name-gpu.log")"
  else
    row "vectors $name (gpu)" FAILED "not built, or out of time"
  fi
done

# ---- 2b. the C ABI's GPU calls (router scores, device index, device mirror) --------------------
# Each compares the GPU call with the CPU call on random inputs; on a GPU none may take its
# no-device path ("GPU unavailable"). The mirror test is built only where ZeroMQ and msgpack are.
for t_name in "${c_abi_tests[@]}"; do
  exe=$build/tests/prefixhit_$t_name
  if [ ! -x "$exe" ]; then
    row "C ABI $t_name" skipped "not built here (see build.log)"
  elif t=$(left 60); then
    log "C ABI: $t_name"
    timeout "$t" "$exe" >"$logs/$t_name.log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && ! grep -q "GPU unavailable" "$logs/$t_name.log"; then
      row "C ABI $t_name" ok "$(tail -1 "$logs/$t_name.log")"
    else
      row "C ABI $t_name" FAILED "rc $rc: $(tail -1 "$logs/$t_name.log")"
    fi
  else
    row "C ABI $t_name" FAILED "out of time"
  fi
done

# ---- 3. benchmarks through the CLI --------------------------------------------------------------
bench_table() {
  python3 - "$logs/bench-gpu.jsonl" "$logs/bench-cpu.jsonl" >"$logs/bench-table.md" <<'PY'
import json, os, sys
rows = [json.loads(l) for f in sys.argv[1:] if os.path.exists(f) for l in open(f) if l.strip()]
def num(r, key, fmt):
    return format(r[key], fmt) if isinstance(r.get(key), (int, float)) else "-"
print("| workload | backend | op | requests | us/call | p50 us | p99 us | device us | keys/s |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    print(f"| {r.get('workload', '-')} | {r.get('backend', '-')} | {r.get('op', '-')} | "
          f"{r.get('requests', '-')} | {num(r, 'us_per_call', '.2f')} | {num(r, 'p50_us', '.2f')} | "
          f"{num(r, 'p99_us', '.2f')} | {num(r, 'device_us', '.2f')} | {num(r, 'keys_per_s', '.3g')} |")
PY
}
if [ -x "$cli" ]; then
  runs=("gpu dsv4-flash 1" "gpu dsv4-flash 64" "gpu dsv4-flash 1024" "gpu fa-3swa 64"
        "gpu fa-mamba-align 64" "cpu dsv4-flash 8")
  for spec in "${runs[@]}"; do
    read -r backend workload requests <<<"$spec"
    t=$(left 90) || break
    log "bench --backend $backend $workload, $requests requests"
    timeout "$t" "$cli" bench --backend "$backend" --workload "$workload" \
      --requests "$requests" --min-time 0.3 --json >>"$logs/bench-$backend.jsonl" \
      2>>"$logs/bench.err"
    bench_table
    write_table
  done
  row "bench (cli)" "$([ -s "$logs/bench-gpu.jsonl" ] && echo ok || echo FAILED)" \
    "$(wc -l 2>/dev/null <"$logs/bench-gpu.jsonl" || echo 0) GPU rows of ${#runs[@]} runs, table below"
fi

# ---- 4. compute-sanitizer -----------------------------------------------------------------------
if command -v compute-sanitizer >/dev/null && [ -x "$gpu_tests" ]; then
  for tool in memcheck racecheck; do
    if ! t=$(left 120); then
      row "compute-sanitizer $tool" FAILED "out of time"
      continue
    fi
    # HugeAllocationFailsWithCudaErrorNotACrash makes cudaMalloc fail on purpose, which memcheck
    # counts as an error; the plain GPU test run above checks it.
    log "compute-sanitizer $tool"
    PREFIXHIT_VECTORS=$vectors PREFIXHIT_SMALL_GPU_TESTS=1 timeout "$t" compute-sanitizer \
      --tool "$tool" --error-exitcode 99 "$gpu_tests" --gtest_brief=1 \
      --gtest_filter='-*Large*:*Benchmark*:*HugeAllocation*' >"$logs/sanitizer-$tool.log" 2>&1
    rc=$?
    errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+ error' "$logs/sanitizer-$tool.log" | tail -1)
    row "compute-sanitizer $tool" "$([ $rc -eq 0 ] && echo ok || echo FAILED)" \
      "${errors:-rc $rc}"
  done
else
  row compute-sanitizer FAILED "compute-sanitizer or GPU tests missing"
fi

# ---- 5. Google Benchmark GPU suites -------------------------------------------------------------
# They link the carried Debian build of Google Benchmark; where that does not link, the CLI
# figures above stand alone.
gbench=$build/benchmarks/prefixhit_gpu_benchmarks
if [ ! -x "$gbench" ]; then
  row "gbench (gpu)" skipped "Google Benchmark did not build here (build.log); cli bench used"
elif t=$(left 150); then
  keys=${PREFIXHIT_INDEX_BENCH_KEYS:-100000000}
  log "Google Benchmark GPU suites (device index: $keys keys)"
  PREFIXHIT_INDEX_BENCH_KEYS=$keys timeout "$t" "$gbench" --benchmark_min_time=0.1 \
    --benchmark_format=console >"$logs/gbench-gpu.log" 2>&1
  rc=$?
  result=$([ $rc -eq 0 ] && echo ok || echo FAILED)
  grep -qiE 'no (CUDA|usable) device|skipp' "$logs/gbench-gpu.log" && result=FAILED
  row "gbench (gpu)" "$result" "$(grep -c '^[A-Za-z].*/' "$logs/gbench-gpu.log") rows, see gbench-gpu.log"
else
  row "gbench (gpu)" FAILED "out of time"
fi

# ---- 6. the table -------------------------------------------------------------------------------
write_table
cat "$OUT/gpu-table.md"
! grep -q FAILED "$OUT/gpu-table.md"
