#!/usr/bin/env bash
# The avx2vnni kernel level without an AVX-VNNI CPU: builds ember with
# EMBER_EMULATE_AVX_VNNI=ON into build-vnni/ (that level compiled without -mavxvnni, its
# two AVX-VNNI instructions, vpdpbusd and vpdpwssd, computed with AVX2 in
# cpu/kernels/avx2/simd.hpp, and the level offered wherever AVX2 is), then runs the
# kernel tests (every level, avx2vnni included) and the golden tests at the avx2vnni
# level. Everything of that level but the two instructions runs; the instructions' own
# encoding is left to machines that have them (Intel since Alder Lake, AMD Zen 5).
#   scripts/test-vnni.sh
#   VNNI_BUILD_DIR=... JOBS=... scripts/test-vnni.sh
# Prints a note and exits 0 on a CPU without AVX2 or on a non-x86 machine.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${VNNI_BUILD_DIR:-$root/build-vnni}"
jobs="${JOBS:-$(nproc)}"

if [ "$(uname -m)" != x86_64 ] || ! grep -qw avx2 /proc/cpuinfo; then
  echo "ember: emulated avx2vnni tests skipped (not an x86-64 CPU with AVX2)" >&2
  exit 0
fi

start=$(date +%s)
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=OFF -DEMBER_EMULATE_AVX_VNNI=ON \
  -DEMBER_BUILD_TESTS=ON -DEMBER_BUILD_BENCH=OFF -DEMBER_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target test_cpu_kernels test_golden_all
built=$(date +%s)
cd "$build"
echo "== avx2vnni (emulated): kernel tests at every level"
ctest --output-on-failure -j "$jobs" --timeout 1800 -R '^test_cpu_kernels$'
echo "== avx2vnni (emulated): golden tests (EMBER_CPU_ISA=avx2vnni)"
EMBER_CPU_ISA=avx2vnni ctest --output-on-failure -j "$jobs" --timeout 1800 -R '^golden_'
echo "ember: emulated avx2vnni tests passed (build $((built - start)) s, tests $(($(date +%s) - built)) s)"
