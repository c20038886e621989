#!/usr/bin/env bash
# The CUDA backend's on-device check (issue 16, docs/cuda.md), for a machine with an
# NVIDIA GPU (Hopper, sm_90, by default). One run: builds the CUDA targets, runs the
# host-side block-math test and the CUDA tests (op tests against the reference, the
# golden models against llama.cpp and the CPU), compute-sanitizer memcheck on the small
# op tests when it is installed, then `ember bench --device cuda` on generated models
# of the TinyLlama-1.1B shape (Q4_0, Q4_K_M), a Llama-3-8B shape (Q4_0) and on the real
# Gemma 3 270M file (EMBER_MODEL, else ember's model cache). Each stage appends one JSON
# line to $OUT/cuda-check.jsonl (stage, status, seconds) and keeps its output in
# $OUT/STAGE.log; the summary (stages, golden agreement, bench tables) comes last. A
# failing stage is recorded and the next one still runs; the exit status is 1 if any
# failed. Not measured yet: the copy-bandwidth and cuBLASLt GEMM ceilings of point 4.
#
#   OUT=/tmp/out scripts/cuda-check.sh            all stages
#   SKIP_8B=1 ...                                  without the 8B-shape model (4.6 GB)
#   CUDA_ARCH=90 BUILD_DIR=build-cuda JOBS=16 ...  build settings (these are the defaults)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$root/cuda-check-out}"
build="${BUILD_DIR:-$root/build-cuda}"
arch="${CUDA_ARCH:-90}"
jobs="${JOBS:-$(nproc)}"
models="${MODEL_DIR:-$out/models}"
mkdir -p "$out" "$models"
log="$out/cuda-check.jsonl"
: > "$log"

# record STAGE STATUS SECONDS [EXTRA_JSON_FIELDS]
record() {
  printf '{"stage": "%s", "status": "%s", "seconds": %s%s}\n' "$1" "$2" "$3" "${4:+, $4}" >> "$log"
  printf '== %-28s %-6s %6ss\n' "$1" "$2" "$3"
}
# stage NAME COMMAND...: runs it with its output in $out/NAME.log and records the result.
stage() {
  local name="$1"; shift
  local t0=$SECONDS rc=0
  "$@" > "$out/$name.log" 2>&1 || rc=$?
  if [ $rc -eq 0 ]; then record "$name" ok $((SECONDS - t0)); return 0; fi
  if [ $rc -eq 4 ]; then record "$name" skipped $((SECONDS - t0)) '"why": "no CUDA device"'; return 0; fi
  record "$name" "rc=$rc" $((SECONDS - t0))
  tail -n 20 "$out/$name.log"
  return $rc
}

gpu="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
record device "${gpu:+ok}${gpu:-none}" 0 "\"gpu\": \"${gpu:-none}\""
[ -n "$gpu" ] || echo "cuda-check: nvidia-smi sees no GPU; the CUDA tests will skip"

stage configure cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" || exit 1
stage build cmake --build "$build" -j "$jobs" --target test_cuda test_block_math ember_cli ember_make_model || exit 1

stage test_block_math "$build/tests/cuda/test_block_math"
stage test_cuda "$build/tests/cuda/test_cuda" --durations yes
grep -E '^cuda golden' "$out/test_cuda.log" > "$out/golden.txt" 2>/dev/null || true

if command -v compute-sanitizer > /dev/null 2>&1; then
  stage memcheck compute-sanitizer --tool memcheck --error-exitcode 9 "$build/tests/cuda/test_cuda" \
    "CUDA get_rows*" "CUDA kv_store*" "CUDA small ops*" "CUDA attention*"
else
  record memcheck skipped 0 '"why": "compute-sanitizer not found"'
fi

make_model() {  # make_model FILE ARGS...: generates once, reused by later runs
  local file="$1"; shift
  [ -s "$file" ] || "$build/bench/ember-make-model" "$@" -o "$file"
}
stage model_tinyllama_q4_0 make_model "$models/tinyllama-q4_0.gguf" --preset tinyllama-1.1b --type q4_0
stage model_tinyllama_q4_k_m make_model "$models/tinyllama-q4_k_m.gguf" --preset tinyllama-1.1b --type q4_k_m
if [ -z "${SKIP_8B:-}" ]; then
  stage model_llama3_8b_q4_0 make_model "$models/llama3-8b-q4_0.gguf" --arch llama --type q4_0 --n-embd 4096 \
    --n-ff 14336 --n-layer 32 --n-head 32 --n-head-kv 8 --n-vocab 128256 --n-ctx 8192
fi

bench() {  # bench NAME FILE: prefill 512 and decode 64 tokens on the GPU, as JSON
  local name="$1" file="$2"
  [ -s "$file" ] || { record "bench_$name" skipped 0 '"why": "no model file"'; return; }
  stage "bench_$name" "$build/examples/ember" bench --device cuda -m "$file" -p 512 -n 64 -r 3
}
bench tinyllama_q4_0 "$models/tinyllama-q4_0.gguf"
bench tinyllama_q4_k_m "$models/tinyllama-q4_k_m.gguf"
[ -z "${SKIP_8B:-}" ] && bench llama3_8b_q4_0 "$models/llama3-8b-q4_0.gguf"
bench gemma3_270m "${EMBER_MODEL:-$HOME/.cache/ember/models/gemma-3-270m-q4_k_m.gguf}"

echo
echo "== summary ($log)"
cat "$log"
[ -s "$out/golden.txt" ] && { echo; cat "$out/golden.txt"; }
for f in "$out"/bench_*.log; do
  [ -e "$f" ] || continue
  echo
  echo "-- $(basename "$f" .log)"
  tail -n 6 "$f"
done
! grep -q '"status": "rc=' "$log"
