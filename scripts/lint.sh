#!/usr/bin/env bash
# clang-format and clang-tidy over the project's C/C++ sources (host code; .cu files are checked
# by clang-format only, since clang-tidy 14 cannot parse CUDA 13 headers). Needs a configured
# build with compile_commands.json (default: build/ci).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/ci}
mapfile -t sources < <(git ls-files '*.cpp' '*.hpp' '*.h' '*.c' '*.cu' '*.cuh' | grep -v '^fuzz/corpus/')
rc=0
if ! clang-format --dry-run --Werror "${sources[@]}"; then
  echo "lint: clang-format would change the files above (run clang-format -i)"
  rc=1
fi
mapfile -t tidy_sources < <(printf '%s\n' "${sources[@]}" | grep -E '^(host|tests/cpu|benchmarks)/.*\.cpp$')
if [ ! -f "$build/compile_commands.json" ]; then
  echo "lint: $build/compile_commands.json missing; configure first"
  exit 1
fi
tidy_log=$(mktemp)
# The path-sensitive analyzer (clang-analyzer-*) costs 3-8x the other checks and most of it is
# spent on gtest's macro expansions, so it runs on the library, CLI and benchmarks; the tests get
# every other check. This keeps the lint step about 5 minutes shorter on CI's 2 cores.
printf '%s\n' "${tidy_sources[@]}" | grep -v '^tests/' |
  xargs -P "$(nproc)" -n 4 clang-tidy -p "$build" --quiet 2>/dev/null >"$tidy_log"
printf '%s\n' "${tidy_sources[@]}" | grep '^tests/' |
  xargs -P "$(nproc)" -n 4 clang-tidy -p "$build" --quiet --checks='-clang-analyzer-*' \
    2>/dev/null >>"$tidy_log"
if grep -E 'warning:|error:' "$tidy_log"; then
  echo "lint: clang-tidy reports the findings above"
  rc=1
else
  echo "lint: clang-tidy clean on ${#tidy_sources[@]} files"
fi
rm -f "$tidy_log"
exit $rc
