#!/usr/bin/env bash
# Installs what a fresh machine lacks for building and testing prefixhit: Debian packages through
# apt-get and Python packages through pip. Does nothing for what is already there.
set -euo pipefail

# cppzmq-dev, libzmq3-dev, libmsgpack-cxx-dev: the event mirror (optional in CMake, built when found).
debian_packages=(cmake ninja-build g++ nlohmann-json3-dev libcli11-dev googletest libgtest-dev
                 libbenchmark-dev clang cppzmq-dev libzmq3-dev libmsgpack-cxx-dev
                 libibverbs1 librdmacm1 libnuma1  # the Mooncake store client needs these, even over TCP
                 g++-aarch64-linux-gnu qemu-user)  # scripts/check-arm-hash.sh: the aarch64 slot hash
missing=()
for pkg in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "install-deps: apt-get install ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# pyzmq and msgpack: the mirror's tests run a real publisher (import names zmq, msgpack).
python_packages=(numpy pytest nanobind scikit-build-core hypothesis pyzmq msgpack)
py_missing=()
for pkg in "${python_packages[@]}"; do
  module=${pkg//-/_}
  [ "$pkg" = pyzmq ] && module=zmq
  python3 -c "import ${module}" 2>/dev/null || py_missing+=("$pkg")
done
if ((${#py_missing[@]})); then
  echo "install-deps: pip install ${py_missing[*]}"
  python3 -m pip install -q "${py_missing[@]}"
fi

# The real Mooncake store (mooncake_master and the Python client) for the remote-mode tests
# (tests/python/test_store_remote.py); its import name is not its package name.
if ! python3 -c "import mooncake.store" 2>/dev/null; then
  echo "install-deps: pip install mooncake-transfer-engine-non-cuda"
  python3 -m pip install -q mooncake-transfer-engine-non-cuda
fi
