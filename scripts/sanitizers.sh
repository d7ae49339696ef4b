#!/usr/bin/env bash
# Sanitizer builds of the host code (CUDA compiled out), for CI and for local checks:
#   1. ASan+UBSan: builds the CPU test suites and runs the whole CPU ctest suite under them
#      (leaks, out-of-bounds, use-after-free, signed overflow, misaligned access, ...; any report
#      aborts the test);
#   2. ThreadSanitizer: builds the CPU test suite and runs the concurrency tests (index stress,
#      concurrent BlockIndex readers/writers, batch lookups) under it, then the event mirror's
#      suites (its two threads and their queue) where the library has the mirror.
# Usage: scripts/sanitizers.sh [asan] [tsan]      (default: both)
# Environment: PREFIXHIT_JOBS (build/test parallelism, default nproc),
#              PREFIXHIT_ASAN_DIR / PREFIXHIT_TSAN_DIR (build folders, default build/asan, build/tsan),
#              PREFIXHIT_STRESS_MS (stress test duration, default 1500 ms).
# Exits non-zero if a build fails, a test fails or a sanitizer reports anything.
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=${PREFIXHIT_JOBS:-$(nproc)}
asan_dir=${PREFIXHIT_ASAN_DIR:-build/asan}
tsan_dir=${PREFIXHIT_TSAN_DIR:-build/tsan}
steps=("$@")
((${#steps[@]})) || steps=(asan tsan)

# The tests that exercise threads; TSan runs these (the rest is single-threaded and covered by
# the ASan run).
tsan_tests='IndexStress|Concurrent|Batch|Parallel|Hardening|WorkerPool'

stress_figures() {  # stress_figures DIR: the stress test's operation counts under this sanitizer
  "$1/tests/prefixhit_tests" --gtest_filter='IndexStress.*' 2>&1 | grep -E '^\[ stress' || true
}

configure() {  # configure DIR SANITIZERS
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPREFIXHIT_ENABLE_CUDA=OFF \
    -DPREFIXHIT_SANITIZE="$2" -DPREFIXHIT_BUILD_TESTS=ON -DPREFIXHIT_BUILD_CLI=ON \
    -DPREFIXHIT_BUILD_BENCHMARKS=OFF -DPREFIXHIT_BUILD_PYTHON=OFF -DPREFIXHIT_BUILD_FUZZERS=OFF \
    >/dev/null
}

# abort_on_error: a report fails the test; allocator_may_return_null: a huge allocation returns
# null (the production behaviour the code must handle) instead of ASan aborting first.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1:detect_stack_use_after_return=1:strict_init_order=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

status=0
for step in "${steps[@]}"; do
  case $step in
    asan)
      echo "== sanitizers: ASan+UBSan build in ${asan_dir}"
      start=$SECONDS
      configure "$asan_dir" address,undefined
      cmake --build "$asan_dir" -j "$jobs"
      echo "== sanitizers: ASan+UBSan: the whole CPU ctest suite"
      if ! ctest --test-dir "$asan_dir" -j "$jobs" --output-on-failure --timeout 900 \
        --no-tests=error -LE gpu; then
        status=1
      fi
      stress_figures "$asan_dir"
      echo "== sanitizers: ASan+UBSan done in $((SECONDS - start)) s"
      ;;
    tsan)
      echo "== sanitizers: ThreadSanitizer build in ${tsan_dir}"
      start=$SECONDS
      configure "$tsan_dir" thread
      cmake --build "$tsan_dir" -j "$jobs" --target prefixhit_tests
      echo "== sanitizers: ThreadSanitizer: tests matching '${tsan_tests}'"
      if ! ctest --test-dir "$tsan_dir" -j "$jobs" --output-on-failure --timeout 900 \
        --no-tests=error -R "$tsan_tests" -LE gpu; then
        status=1
      fi
      # The event mirror's receiving and applying threads and their queue (C++ and C ABI), where
      # the library has the mirror (ZeroMQ and msgpack found).
      if grep -q '^build prefixhit_mirror_tests:' "$tsan_dir/build.ninja"; then
        cmake --build "$tsan_dir" -j "$jobs" --target prefixhit_mirror_tests prefixhit_c_api_mirror
        echo "== sanitizers: ThreadSanitizer: the mirror suite"
        if ! ctest --test-dir "$tsan_dir" -j "$jobs" --output-on-failure --timeout 900 \
          --no-tests=error -L mirror -LE gpu; then
          status=1
        fi
      fi
      stress_figures "$tsan_dir"
      echo "== sanitizers: ThreadSanitizer done in $((SECONDS - start)) s"
      ;;
    *)
      echo "sanitizers.sh: unknown step '${step}' (expected asan or tsan)" >&2
      exit 2
      ;;
  esac
done
if ((status)); then
  echo "== sanitizers: FAILED"
else
  echo "== sanitizers: all clean"
fi
exit $status
