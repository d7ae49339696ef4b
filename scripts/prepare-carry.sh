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
# The event mirror's parts (cppzmq, libzmq's headers and library with the libraries it needs that a
# CUDA image may lack, msgpack-cxx), so that the device mirror's C ABI test builds there too.
# gpu-check.sh finds them through CMAKE_PREFIX_PATH and LD_LIBRARY_PATH.
mkdir -p .carry/mirror/include .carry/mirror/lib
cp /usr/include/zmq.h /usr/include/zmq_utils.h /usr/include/zmq.hpp /usr/include/zmq_addon.hpp \
  .carry/mirror/include/
cp -r /usr/include/msgpack /usr/include/msgpack.hpp .carry/mirror/include/
for lib in libzmq.so.5 libsodium.so.23 libpgm-5.3.so.0 libnorm.so.1 libbsd.so.0 libmd.so.0 \
           libgssapi_krb5.so.2 libkrb5.so.3 libk5crypto.so.3 libcom_err.so.2 libkrb5support.so.0 \
           libkeyutils.so.1; do
  cp -L "/lib/x86_64-linux-gnu/$lib" .carry/mirror/lib/
done
cp .carry/mirror/lib/libzmq.so.5 .carry/mirror/lib/libzmq.so  # the name find_library looks for
du -sh .carry
