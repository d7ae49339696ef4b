#!/usr/bin/env bash
# Fills .carry/ (git-ignored) with what the GPU machine lacks and `scripts/gpu-check.sh` needs:
# the header-only libraries (nlohmann-json, CLI11), GoogleTest's sources and a copy of the
# conformance vectors. Name `.carry` in the device tool's `carry` list.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh >/dev/null
rm -rf .carry
mkdir -p .carry/include
cp -r /usr/include/nlohmann .carry/include/
cp -r /usr/include/CLI .carry/include/
cp -r /usr/src/googletest .carry/googletest
mkdir -p .carry/vectors
cp ../shared/conformance/vectors/*.json .carry/vectors/
du -sh .carry
