#!/usr/bin/env bash
# The slot hash on aarch64, where the CPU index hashes with the crypto extension's AESE/AESMC:
# cross-compiles the slot-hash and slot-logic suites (tests/cpu/slot_hash_test.cpp,
# tests/cpu/index_slots_test.cpp) for aarch64, with +crypto and without it (the table form), runs
# both under qemu-user, and compiles the index's own sources for aarch64 (the hardware check in
# host/random_seed.cpp, the non-SSE2 paths of the lookups). CI's machines are x86-64, so this is
# where the aarch64 path is tested at all.
#   scripts/check-arm-hash.sh [BUILD_DIR]   (default build/arm-hash)
# Needs g++-aarch64-linux-gnu, qemu-user and googletest's sources (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/arm-hash}
cxx=aarch64-linux-gnu-g++
qemu=qemu-aarch64
gtest=/usr/src/googletest/googletest
for tool in "$cxx" "$qemu"; do
  command -v "$tool" >/dev/null || { echo "check-arm-hash: $tool not found" >&2; exit 1; }
done
mkdir -p "$out"
flags=(-std=c++17 -O2 -Wall -Wextra -Wconversion -Wno-sign-conversion -Werror -Iinclude -I.
       -isystem "$gtest/include" -isystem "$gtest")

# googletest, once per build folder (about half a minute).
for src in gtest-all gtest_main; do
  if [ ! -f "$out/$src.o" ]; then
    "$cxx" -std=c++17 -O1 -isystem "$gtest/include" -I "$gtest" -c "$gtest/src/$src.cc" \
      -o "$out/$src.o"
  fi
done

rc=0
for variant in crypto table; do
  arch=(-march=armv8-a+crypto)
  [ "$variant" = table ] && arch=(-march=armv8-a+nocrypto)
  echo "== aarch64, ${variant}: compile the index's sources"
  for src in host/random_seed.cpp host/block_index.cpp host/key_set.cpp; do
    "$cxx" "${flags[@]}" "${arch[@]}" -c "$src" -o "$out/$(basename "$src" .cpp)-$variant.o"
  done
  echo "== aarch64, ${variant}: slot-hash and slot-logic suites under qemu"
  "$cxx" "${flags[@]}" "${arch[@]}" tests/cpu/slot_hash_test.cpp tests/cpu/index_slots_test.cpp \
    "$out/gtest-all.o" "$out/gtest_main.o" -lpthread -o "$out/slot_tests-$variant"
  # -cpu max: an emulated CPU with the crypto extension.
  "$qemu" -cpu max -L /usr/aarch64-linux-gnu "$out/slot_tests-$variant" --gtest_brief=1 || rc=1
done
exit $rc
