#!/usr/bin/env bash
# ARM64 correctness without ARM hardware: cross-builds ember with Debian's aarch64
# compiler (cmake/toolchains/aarch64-linux-gnu.cmake) into build-aarch64/ and runs the
# kernel, op, KV-format and golden tests under qemu-user.
# qemu's CPU model sets the features the kernels see through getauxval (HWCAP):
#   cortex-a72   ASIMD only             -> best level neon
#   neoverse-n1  + dot product (SDOT)   -> best level dotprod
#   max          + i8mm (SMMLA)         -> best level i8mm
# The kernel and KV-format tests loop over every level the CPU offers, so they run once,
# under `max`, where that is scalar, neon, dotprod and i8mm. The golden and op tests run
# at the best level of each CPU model, and once more at the scalar level. Each CPU model
# also checks that the level detected is the one expected (EMBER_TEST_EXPECT_ISA, the
# "ISA detection" case of tests/quant/test_kernels.cpp), so that a detection fault
# cannot quietly test fewer levels.
#   scripts/test-arm.sh               build and test
#   ARM_BUILD_DIR=... JOBS=... scripts/test-arm.sh
# Prints a note and exits 0 when the cross compiler or qemu-aarch64 is missing
# (scripts/setup-debian.sh installs both).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ARM_BUILD_DIR:-$root/build-aarch64}"
jobs="${JOBS:-$(nproc)}"

if ! command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || ! command -v qemu-aarch64 >/dev/null 2>&1; then
  echo "ember: ARM tests skipped (aarch64-linux-gnu-g++ or qemu-aarch64 missing; scripts/setup-debian.sh installs them)" >&2
  exit 0
fi

start=$(date +%s)
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=OFF \
  -DCMAKE_TOOLCHAIN_FILE="$root/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DEMBER_BUILD_TESTS=ON -DEMBER_BUILD_BENCH=OFF -DEMBER_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j "$jobs" --target test_cpu_kernels test_quant test_ops test_kv_formats test_golden_all
built=$(date +%s)

all_tests='^(test_cpu_kernels|test_quant|test_ops|test_kv_formats|golden_.*)$'
best_level_tests='^(test_quant|test_ops|golden_.*)$'
cd "$build"
run() {  # run <qemu cpu> <expected best level> <ctest regex>
  echo "== ARM level $2 (qemu -cpu $1)"
  QEMU_CPU="$1" EMBER_TEST_EXPECT_ISA="$2" qemu-aarch64 -L /usr/aarch64-linux-gnu \
    tests/quant/test_cpu_kernels "ISA detection"
  QEMU_CPU="$1" EMBER_TEST_EXPECT_ISA="$2" ctest --output-on-failure -j "$jobs" --timeout 1800 -R "$3"
}
run cortex-a72 neon "$best_level_tests"
run neoverse-n1 dotprod "$best_level_tests"
run max i8mm "$all_tests"
echo "== ARM level scalar, golden tests (qemu -cpu max, EMBER_CPU_ISA=scalar)"
QEMU_CPU=max EMBER_CPU_ISA=scalar ctest --output-on-failure -j "$jobs" --timeout 1800 -R '^golden_'
echo "ember: ARM tests passed (build $((built - start)) s, tests under qemu $(($(date +%s) - built)) s)"
