#!/usr/bin/env bash
# Quick start, command 1: build prefixhit and run the main job, `prefixhit demo` (a realistic
# lookup workload; on the GPU when one is present, else on the CPU). Extra arguments go to the
# demo, e.g. ./scripts/run-demo.sh --workload fa-3swa
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset cli
exec ./build/release/host/cli/prefixhit demo "$@"
