#!/usr/bin/env bash
# The test command: from a fresh Debian 12 machine, installs what is missing
# (Debian packages, the real model), builds ember (Release, tests, benchmarks,
# examples) and runs the whole test suite, the real-model tests included.
#   scripts/test.sh              build and run every test
#   BUILD_DIR=... JOBS=... scripts/test.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build}"
jobs="${JOBS:-$(nproc)}"

"$root/scripts/setup-debian.sh"
export EMBER_MODEL="${EMBER_MODEL:-$("$root/scripts/fetch-model.sh")}"

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs"
cd "$build"
ctest --output-on-failure -j "$jobs" --timeout 1800
