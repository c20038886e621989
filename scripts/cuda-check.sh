#!/usr/bin/env bash
# The CUDA backend's on-device check (issue 16, docs/cuda.md), for a machine with an
# NVIDIA GPU (Hopper, sm_90, by default). One run: builds the CUDA targets (or takes
# them prebuilt), runs the host-side block-math test, each CUDA test case in its own
# process (a kernel fault poisons a CUDA context; the golden models one per process too),
# compute-sanitizer memcheck on the small op tests when it is installed, measures the
# ceilings (device copy GB/s, a BF16 GEMM through PyTorch's cuBLAS), the kernels
# (bench/cuda_bench.cpp: matmul per format, attention at 1k/16k), then
# `ember bench --device cuda` on generated models of the TinyLlama-1.1B shape (Q4_0,
# Q4_K_M), a Gemma-3-270M-like shape (Q8_0: 640 wide, 262,144 vocabulary), a Llama-3-8B
# shape (Q4_0) and on the real Gemma 3 270M file when present (EMBER_MODEL, else ember's
# model cache). Each stage appends one JSON line to $OUT/cuda-check.jsonl (stage,
# status, seconds) and keeps its output in $OUT/STAGE.log; every stage has a time limit;
# the summary (stages, golden agreement, bench tables) comes last. A failing stage is
# recorded and the next one still runs; the exit status is 1 if any failed.
#
#   OUT=/tmp/out scripts/cuda-check.sh            all stages
#   SKIP_8B=1 ...                                  without the 8B-shape model (4.6 GB)
#   CUDA_ARCH=90 BUILD_DIR=build-cuda JOBS=16 ...  build settings (these are the defaults)
#   PACK=DIR scripts/cuda-check.sh                 here: copy the built binaries, libcudart
#                                                  and a golden subset into DIR, for a GPU
#                                                  machine that lacks ember's dependencies
#   PREBUILT=DIR ...                               there: run what PACK put in DIR
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -n "${PACK:-}" ]; then  # here, after a build with -DEMBER_CUDA=ON: the binaries and inputs
  build="${BUILD_DIR:-$root/build-cuda}"
  mkdir -p "$PACK/bin" "$PACK/lib" "$PACK/shared/golden"
  for b in tests/cuda/test_cuda tests/cuda/test_block_math examples/ember bench/ember-make-model \
           bench/ember-cuda-bench; do
    cp "$build/$b" "$PACK/bin/" && strip "$PACK/bin/$(basename "$b")" || exit 1
  done
  cudart="$(ldd "$PACK/bin/test_cuda" | awk '/libcudart/ {print $3}')"
  [ -n "$cudart" ] && cp -L "$cudart" "$PACK/lib/"
  # The golden subset that fits a 64 MiB transfer: every format, BF16 and Gemma's Q8_0 left out.
  for f in "$root"/../shared/golden/*; do
    case "$(basename "$f")" in llama-BF16.*|gemma3-Q8_0.*|README.md) ;; *) cp "$f" "$PACK/shared/golden/" ;; esac
  done
  du -sh "$PACK"
  exit 0
fi
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
  if [ $rc -eq 124 ]; then record "$name" timeout $((SECONDS - t0)); tail -n 20 "$out/$name.log"; return $rc; fi
  if [ $rc -eq 4 ]; then record "$name" skipped $((SECONDS - t0)) '"why": "no CUDA device"'; return 0; fi
  record "$name" "rc=$rc" $((SECONDS - t0))
  tail -n 20 "$out/$name.log"
  return $rc
}

gpu="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
record device "${gpu:+ok}${gpu:-none}" 0 "\"gpu\": \"${gpu:-none}\""
[ -n "$gpu" ] || echo "cuda-check: nvidia-smi sees no GPU; the CUDA tests will skip"

if [ -n "${PREBUILT:-}" ]; then
  pre="$(cd "$PREBUILT" && pwd)"
  test_cuda="$pre/bin/test_cuda" block_math="$pre/bin/test_block_math"
  ember="$pre/bin/ember" make_model_bin="$pre/bin/ember-make-model" cuda_bench="$pre/bin/ember-cuda-bench"
  export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$pre/lib"
  [ -d "$pre/shared" ] && export EMBER_SHARED_DIR="$pre/shared"
  record prebuilt ok 0 "\"dir\": \"$pre\""
else
  stage configure timeout 300 cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$arch" || exit 1
  stage build timeout 900 cmake --build "$build" -j "$jobs" --target test_cuda test_block_math ember_cli \
    ember_make_model ember_cuda_bench || exit 1
  test_cuda="$build/tests/cuda/test_cuda" block_math="$build/tests/cuda/test_block_math"
  ember="$build/examples/ember" make_model_bin="$build/bench/ember-make-model" cuda_bench="$build/bench/ember-cuda-bench"
fi

stage test_block_math timeout 120 "$block_math"
: > "$out/golden.txt"
cases=(buffers "CUDA buffers*" unsupported "CUDA ops report*" small_ops "CUDA small ops*" matmul "CUDA matmul*"
       get_rows "CUDA get_rows*" kv_store "CUDA kv_store*" attention "CUDA attention*")
for ((i = 0; i < ${#cases[@]}; i += 2)); do
  stage "test_${cases[i]}" timeout 120 "$test_cuda" "${cases[i + 1]}" --durations yes
done
golden_dir="${EMBER_SHARED_DIR:-$root/../shared}/golden"
for f in "$golden_dir"/*.gguf; do
  [ -e "$f" ] || { record test_golden skipped 0 '"why": "no golden models"'; break; }
  g="$(basename "$f" .gguf)"
  stage "golden_$g" timeout 120 "$test_cuda" "CUDA forward*" -c "$g"
  grep -E '^cuda golden' "$out/golden_$g.log" >> "$out/golden.txt" 2>/dev/null || true
done

if command -v compute-sanitizer > /dev/null 2>&1; then
  stage memcheck timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$test_cuda" \
    "CUDA get_rows*,CUDA kv_store*,CUDA small ops*,CUDA matmul*,CUDA attention*"
else
  record memcheck skipped 0 '"why": "compute-sanitizer not found"'
fi
stage ceilings timeout 120 python3 "$root/scripts/cuda-ceilings.py"
stage kernels timeout 180 "$cuda_bench"

make_model() {  # make_model FILE ARGS...: generates once, reused by later runs
  local file="$1"; shift
  [ -s "$file" ] || timeout 120 "$make_model_bin" "$@" -o "$file"
}
stage model_tinyllama_q4_0 make_model "$models/tinyllama-q4_0.gguf" --preset tinyllama-1.1b --type q4_0
stage model_tinyllama_q4_k_m make_model "$models/tinyllama-q4_k_m.gguf" --preset tinyllama-1.1b --type q4_k_m
stage model_gemma_shape_q8_0 make_model "$models/gemma-shape-q8_0.gguf" --arch llama --type q8_0 --n-embd 640 \
  --n-ff 2048 --n-layer 18 --n-head 4 --n-head-kv 1 --head-dim 256 --n-vocab 262144 --n-ctx 8192
if [ -z "${SKIP_8B:-}" ]; then
  stage model_llama3_8b_q4_0 make_model "$models/llama3-8b-q4_0.gguf" --arch llama --type q4_0 --n-embd 4096 \
    --n-ff 14336 --n-layer 32 --n-head 32 --n-head-kv 8 --n-vocab 128256 --n-ctx 8192
fi

bench() {  # bench NAME FILE: prefill 512 and decode 64 tokens on the GPU, as JSON
  local name="$1" file="$2"
  [ -s "$file" ] || { record "bench_$name" skipped 0 '"why": "no model file"'; return; }
  stage "bench_$name" timeout 60 "$ember" bench --device cuda -m "$file" -p 512 -n 64 -r 3
}
bench tinyllama_q4_0 "$models/tinyllama-q4_0.gguf"
bench tinyllama_q4_k_m "$models/tinyllama-q4_k_m.gguf"
[ -s "$models/tinyllama-q4_0.gguf" ] && stage bench_tinyllama_q4_0_depth1024 timeout 90 "$ember" bench --device cuda \
  -m "$models/tinyllama-q4_0.gguf" -p 512 -n 64 -d 1024 -r 2
bench gemma_shape_q8_0 "$models/gemma-shape-q8_0.gguf"
[ -z "${SKIP_8B:-}" ] && bench llama3_8b_q4_0 "$models/llama3-8b-q4_0.gguf"
bench gemma3_270m "${EMBER_MODEL:-$HOME/.cache/ember/models/gemma-3-270m-q4_k_m.gguf}"

echo
echo "== summary ($log)"
cat "$log"
[ -s "$out/golden.txt" ] && { echo; cat "$out/golden.txt"; }
[ -s "$out/kernels.log" ] && { echo; cat "$out/kernels.log"; }
for f in "$out"/bench_*.log; do
  [ -e "$f" ] || continue
  echo
  echo "-- $(basename "$f" .log)"
  tail -n 6 "$f"
done
! grep -qE '"status": "(rc=|timeout)' "$log"
