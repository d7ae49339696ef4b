#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, -fsanitize=fuzzer,address,undefined) and runs each for a
# short smoke run starting from its committed seed corpus (fuzz/corpus/<target>/).
# Usage: scripts/fuzz-smoke.sh [seconds per target, default 60] [target ...]
# Environment: PREFIXHIT_FUZZ_DIR (build folder, default build/fuzz), PREFIXHIT_JOBS.
# A crash, sanitizer report, timeout (>10 s per input), leak or out-of-memory (>2 GB RSS or a
# single malloc over 1 GB) is a finding: the reproducer is kept under
# <build>/artifacts/ and the script exits non-zero. The committed corpus is never modified.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-60}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(fuzz_vectors fuzz_coordinator fuzz_index_file)
build_dir=${PREFIXHIT_FUZZ_DIR:-build/fuzz}
jobs=${PREFIXHIT_JOBS:-$(nproc)}

if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz-smoke: clang++ not found (apt-get install clang)" >&2
  exit 2
fi

echo "== fuzz-smoke: building in ${build_dir}"
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DPREFIXHIT_ENABLE_CUDA=OFF \
  -DPREFIXHIT_BUILD_FUZZERS=ON -DPREFIXHIT_BUILD_TESTS=OFF -DPREFIXHIT_BUILD_CLI=OFF \
  -DPREFIXHIT_BUILD_BENCHMARKS=OFF -DPREFIXHIT_BUILD_PYTHON=OFF >/dev/null
cmake --build "$build_dir" -j "$jobs" --target "${targets[@]}"

artifacts="${build_dir}/artifacts"
mkdir -p "$artifacts"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Leaks are findings too; a huge allocation is reported by libFuzzer's malloc limit.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

failed=()
for target in "${targets[@]}"; do
  extra=()
  case $target in
    fuzz_vectors) extra=(-dict=fuzz/fuzz_vectors.dict -max_len=16384) ;;
    fuzz_coordinator) extra=(-max_len=1024) ;;
    fuzz_index_file) extra=(-max_len=8192) ;;
  esac
  mkdir -p "${work}/${target}"
  echo "== fuzz-smoke: ${target} for ${seconds} s"
  log="${artifacts}/${target}.log"
  if "${build_dir}/fuzz/${target}" "${work}/${target}" "fuzz/corpus/${target}" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -print_final_stats=1 -artifact_prefix="${artifacts}/${target}-" "${extra[@]}" \
    >"$log" 2>&1; then
    runs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' || echo '?')
    echo "   ok: ${runs} executions in ${seconds} s, no finding"
  else
    echo "   FINDING in ${target}:"
    grep -E 'ERROR|runtime error|SUMMARY|invariant|Test unit written|fuzz_[a-z_]+:' "$log" | head -20
    failed+=("$target")
  fi
done
if ((${#failed[@]})); then
  echo "== fuzz-smoke: findings in ${failed[*]} (reproducers and logs in ${artifacts})"
  exit 1
fi
echo "== fuzz-smoke: all targets clean"
