#!/usr/bin/env bash
# The test command: from a fresh Debian 12 machine, installs what is missing
# (Debian packages, the real model), builds ember (Release, tests, benchmarks,
# examples) and runs the whole test suite, the real-model tests included; then, with
# the ARM cross compiler and qemu-user present, the ARM64 kernel, op, KV-format and
# golden tests under emulation at every ARM level (scripts/test-arm.sh); and on x86 the
# kernel and golden tests of the avx2vnni level with its AVX-VNNI instructions emulated
# (scripts/test-vnni.sh).
#   scripts/test.sh              build and run every test
#   BUILD_DIR=... JOBS=... scripts/test.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
jobs="${JOBS:-$(nproc)}"

"$root/scripts/setup-debian.sh"
export EMBER_MODEL="${EMBER_MODEL:-$("$root/scripts/fetch-model.sh")}"

# ccache, when installed (scripts/setup-debian.sh does), for every build below and the
# ones the tests configure: CMake takes these variables from the environment. Paths are
# hashed relative to the checkout, so builds at the same depth under it share objects
# (build/, build-vnni/, and build-shared-lib/ of the install test); the cache is ccache's
# own (~/.cache/ccache), outside the tree. EMBER_NO_CCACHE=1 leaves it out.
if [ -z "${EMBER_NO_CCACHE:-}" ] && command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
  ccache -z >/dev/null
fi

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs"
cd "$build"
ctest --output-on-failure -j "$jobs" --timeout 1800
"$root/scripts/test-arm.sh"
"$root/scripts/test-vnni.sh"
if [ -n "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]; then
  echo "ember: ccache over all builds: $(ccache -s | grep -E '^ *Hits:' | head -1 | tr -s ' ')"
fi
