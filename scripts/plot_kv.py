#!/usr/bin/env python3
"""Plots the stream results of scripts/kv-experiments.sh: perplexity per 1,000-token
segment and KV memory over the stream, one line per cache policy."""
import csv
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

out, docs = Path(sys.argv[1]), Path(sys.argv[2])
runs = {
    "full cache": "stream-full.csv",
    "StreamingLLM (4 sinks + 1020)": "stream-streaming.csv",
    "window 1024, no sinks": "stream-window.csv",
}
data = {}
for label, name in runs.items():
    with open(out / name) as f:
        rows = list(csv.DictReader(f))
    data[label] = rows


def plot(value, ylabel, title, name):
    """One line per policy: `value(row)` against the last token of each segment."""
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, rows in data.items():
        ax.plot([int(r["last_token"]) for r in rows], [value(r) for r in rows], marker="o", label=label)
    ax.set_xlabel("token in the stream")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(docs / name, dpi=110)


plot(lambda r: float(r["perplexity"]), "perplexity of the last 1,000 tokens",
     "Gemma 3 270M Q4_K_M over 20,480 tokens of license texts", "kv-stream-perplexity.png")
plot(lambda r: int(r["kv_bytes"]) / 2**20, "KV cache of the session (MiB, F16)", "KV memory over the stream",
     "kv-stream-memory.png")
print("wrote", docs / "kv-stream-perplexity.png", docs / "kv-stream-memory.png")
