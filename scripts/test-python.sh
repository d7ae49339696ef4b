#!/usr/bin/env bash
# Builds and installs the prefixhit Python package from this checkout, then runs the Python
# suite (tests/python: every conformance vector through the Python API, the round-trip
# scenarios, bad inputs, batch == one-by-one, the BlockIndex; GPU cases skip without a GPU).
#
# Environment:
#   PYTHON            interpreter to use (default: python3)
#   PREFIXHIT_VECTORS vectors folder (default: tests/data/conformance)
#   PREFIXHIT_SEED    replay the random tests (and the Hypothesis properties) with this seed
#   HYPOTHESIS_PROFILE "ci" (default, about a minute of property tests) or "long"
#   PREFIXHIT_PY_CUDA OFF to build the extension without the CUDA backend even where nvcc exists
#   PYTEST_ARGS       pytest arguments (default: -ra; the run ends with pytest's "=== N passed ===" line,
#                     which scripts/run-tests.sh reads)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
pip_install() {
  "$PYTHON" -m pip install --disable-pip-version-check --quiet "$@"
}

# Build requirements are installed here and the build runs without isolation, so a rerun does
# not download them again and reuses the incremental build in build-python/.
pip_install numpy pytest hypothesis "scikit-build-core>=0.10" "nanobind>=2.0" pyzmq msgpack  # pyzmq, msgpack: test_mirror.py
version_at_least() {  # version_at_least <have> <want>
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]
}
have_cmake=$(cmake --version 2>/dev/null | head -n1 | awk '{print $3}' || true)
if [ -z "$have_cmake" ] || ! version_at_least "$have_cmake" 3.25; then
  pip_install "cmake>=3.25"
fi
command -v ninja >/dev/null 2>&1 || pip_install ninja

# Always explicit: the build folder is reused, and a cached OFF from an earlier run must not stick.
build_args=(-C "cmake.define.PREFIXHIT_ENABLE_CUDA=${PREFIXHIT_PY_CUDA:-ON}")
echo "== building and installing prefixhit (pip install .)"
pip_install --no-build-isolation "${build_args[@]}" .

echo "== import check"
(cd /tmp && "$PYTHON" -c 'import prefixhit; print("prefixhit", prefixhit.__version__, prefixhit.build_info())')

echo "== pytest tests/python"
# shellcheck disable=SC2086
"$PYTHON" -m pytest tests/python ${PYTEST_ARGS:--ra}
