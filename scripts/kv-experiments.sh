#!/usr/bin/env bash
# Reproduces the measured figures of docs/kv-cache.md on Gemma 3 270M:
#   1. perplexity of tests/data/gemma3/perplexity.txt (ctx 512) for every KV storage type;
#   2. a 20,480-token stream (the license texts of /usr/share/common-licenses, in
#      alphabetical order, symlinks skipped) through StreamingLLM (4 sinks + 1020),
#      a plain 1024 window and the full cache: perplexity per 1,000 tokens and KV memory;
#   3. budgets of 10/20/50 % of a 2,048-token context for H2O, StreamingLLM and a plain
#      window, over the first 4,096 tokens of the same text cut into 2,048-token parts;
#   4. the plots docs/kv-stream-perplexity.png and docs/kv-stream-memory.png.
# Usage: scripts/kv-experiments.sh [BUILD_DIR] [OUT_DIR]     (needs python3-matplotlib for 4)
#        SECTIONS="2 3 4" scripts/kv-experiments.sh ...       runs only some parts
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
out="${2:-$root/build/kv-experiments}"
ember="$build/examples/ember"
model="${EMBER_MODEL:-$("$root/scripts/fetch-model.sh")}"
threads="${THREADS:-2}"
sections="${SECTIONS:-1 2 3 4}"
want() { [[ " $sections " == *" $1 "* ]]; }
mkdir -p "$out"

text="$out/licenses.txt"
: > "$text"
for f in $(ls /usr/share/common-licenses | sort); do
  p="/usr/share/common-licenses/$f"
  [ -L "$p" ] && continue
  cat "$p" >> "$text"
  printf '\n' >> "$text"
done

if want 1; then
echo "== 1. storage types (perplexity.txt, ctx 512)" | tee "$out/storage.txt"
for kv in "f16 32" "int8 32" "int8 64" "int4 32" "int4 64"; do
  set -- $kv
  r=$("$ember" perplexity -m "$model" -f "$root/tests/data/gemma3/perplexity.txt" --ctx 512 -t "$threads" \
        --kv-type "$1" --kv-group "$2" 2>/dev/null | tail -1)
  echo "$1 g$2 $r" | tee -a "$out/storage.txt"
done
fi

run_stream() {  # name, tokens, flags...
  local name="$1" tokens="$2"; shift 2
  "$ember" perplexity -m "$model" -f "$text" -t "$threads" --stream --tokens "$tokens" --batch 16 --segment 1000 \
    --csv "$out/stream-$name.csv" "$@" 2>/dev/null | tail -1 | sed "s/^/$name: /" | tee -a "$out/stream.txt"
}
if want 2; then
echo "== 2. 20,480-token stream"
run_stream streaming 20480 --evict streaming --sinks 4 --window 1020
run_stream window 20480 --evict streaming --sinks 0 --window 1024
run_stream full 20480 --ctx 20480
fi

if want 3; then
echo "== 3. budgets of a 2,048-token context"
for pct in 10 20 50; do
  b=$((2048 * pct / 100))
  h=$((b / 2))
  run_stream "h2o-$pct" 4096 --restart 2048 --evict h2o --heavy "$h" --recent $((b - h))
  run_stream "streaming-$pct" 4096 --restart 2048 --evict streaming --sinks 4 --window $((b - 4))
  run_stream "window-$pct" 4096 --restart 2048 --evict streaming --sinks 0 --window "$b"
done
run_stream "full-2048" 4096 --restart 2048 --ctx 2048
fi

if want 4 && python3 -c "import matplotlib" 2>/dev/null; then
  python3 "$root/scripts/plot_kv.py" "$out" "$root/docs"
else
  echo "matplotlib missing: no plots (apt-get install python3-matplotlib)"
fi
