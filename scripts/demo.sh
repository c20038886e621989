#!/usr/bin/env bash
# The main demo: from a fresh Debian 12 machine, installs what is missing (Debian
# packages, the model), builds ember in Release and streams a continuation from
# Gemma 3 270M.   scripts/demo.sh ["your prompt"]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-release}"
prompt="${1:-Once upon a time, in a small village by the sea,}"

"$root/scripts/setup-debian.sh"
model="$("$root/scripts/fetch-model.sh")"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target ember_cli
"$build/examples/ember" run -m "$model" -p "$prompt" -n 128 --temp 0.7 --seed 42
