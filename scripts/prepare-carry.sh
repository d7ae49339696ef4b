#!/usr/bin/env bash
# Fills .carry/ (git-ignored) with what the GPU machine lacks and `scripts/gpu-check.sh` needs:
# the header-only libraries (nlohmann-json, CLI11), GoogleTest's sources and Debian's Google
# Benchmark build. The vectors travel with the tree (tests/data). Name `.carry` in the device
# tool's `carry` list.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh >/dev/null
rm -rf .carry
mkdir -p .carry/include
cp -r /usr/include/nlohmann .carry/include/
cp -r /usr/include/CLI .carry/include/
cp -r /usr/src/googletest .carry/googletest
# Debian's Google Benchmark (headers, shared library, main); the GPU build uses it if it links.
mkdir -p .carry/benchmark/include .carry/benchmark/lib
cp -r /usr/include/benchmark .carry/benchmark/include/
cp /usr/lib/x86_64-linux-gnu/libbenchmark.so.1.7.1 .carry/benchmark/lib/libbenchmark.so
cp /usr/lib/x86_64-linux-gnu/libbenchmark_main.a .carry/benchmark/lib/
du -sh .carry
