#!/usr/bin/env python3
"""Perplexity against KV-cache bytes per token: `ember perplexity` over each text with each
KV storage type, the change against F16 per text, and a plot of the trade-off.

    EMBER=build/examples/ember python3 bench/kv_quality.py -m MODEL.gguf --ctx 1024 --chunks 6 \\
        --kv f16,int8:32,int8:64,int4:32,int4:64 --plot kv.png TEXT [TEXT ...]

Each change is also given with its standard error: `ember perplexity --nll` writes every
scored token's negative log-likelihood, and the change of the mean over the same tokens
(ln of the perplexity ratio) has the standard error std(delta) / sqrt(n) of the per-token
differences: a change smaller than about twice that is noise (a quantized cache moves
individual tokens' probabilities both ways).

With --nll-dir DIR the per-token files are kept there as TEXT.TYPE.gGROUP.nll (the text's
file name without its extension) with the perplexity in TEXT.TYPE.gGROUP.ppl, and a run
whose two files exist is not repeated: a new storage type can be added to a table without
running the others again (only valid for files the same build wrote).

A type may end in :xR, e.g. int4:32:x16: the newest R tokens also kept in F16
(`--kv-exact R`, KVCacheOptions::exact_recent). Its bytes per token add that window
spread over the context: R + 2 pages of 16 tokens of F16 rows per sequence (what the
window holds during decode: R plus a page of slack, over three pages of each layer).

Bytes per token come from `ember info` (the model's KV bytes per token at each storage).
Only the Python standard library is needed, and matplotlib for --plot.
"""

import argparse
import os
import re
import math
import shutil
import sys
import tempfile

from compare import run  # same folder: runs a command, exits with its stderr on failure


def perplexity(ember, model, text, ctx, threads, kv_type, group, exact, chunks, nll_file):
    """(perplexity, [per-token negative log-likelihoods])."""
    cmd = [ember, "perplexity", "-m", model, "-f", text, "--ctx", str(ctx), "-t", str(threads),
           "--kv-type", kv_type, "--kv-group", str(group), "--nll", nll_file]
    if exact:
        cmd += ["--kv-exact", str(exact)]
    if chunks:
        cmd += ["--chunks", str(chunks)]
    out = run(cmd)
    match = re.search(r"perplexity: ([0-9.]+)", out)
    if not match:
        sys.exit(f"no perplexity in the output of ember perplexity:\n{out}")
    with open(nll_file) as f:
        nll = [float(line) for line in f if line.strip()]
    return float(match.group(1)), nll


def change(base_nll, nll):
    """(change of the perplexity in %, its standard error in %) from per-token NLLs."""
    deltas = [b - a for a, b in zip(base_nll, nll)]
    n = len(deltas)
    mean = sum(deltas) / n
    var = sum((d - mean) ** 2 for d in deltas) / max(n - 1, 1)
    rise = math.exp(mean)
    return 100 * (rise - 1), 100 * rise * math.sqrt(var / n)


def bytes_per_token(ember, model):
    """{(type, group): bytes} from the KV table of `ember info`."""
    out = run([ember, "info", "-m", model])
    table = {}
    for line in out.splitlines():
        match = re.search(r"\b(f16|f32|int8|int4o|int4|k8v4)(?: g(\d+))?\b.*?([0-9][0-9,]*) bytes", line, re.IGNORECASE)
        if match:
            table[(match.group(1).lower(), int(match.group(2) or 32))] = int(match.group(3).replace(",", ""))
    return table


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("texts", nargs="+")
    parser.add_argument("-m", "--model", required=True)
    parser.add_argument("--ctx", type=int, default=1024)
    parser.add_argument("--chunks", type=int, default=0, help="windows of CTX tokens per text (0: all)")
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--kv", default="f16,int8:32,int4:32", help="TYPE[:GROUP] list, the first is the baseline")
    parser.add_argument("--ember", default=os.environ.get("EMBER") or shutil.which("ember"))
    parser.add_argument("--plot", metavar="FILE")
    parser.add_argument("--nll-dir", metavar="DIR", help="keep (and reuse) the per-token files here")
    args = parser.parse_args()
    if not args.ember:
        parser.error("set EMBER to the ember CLI binary (build/examples/ember)")
    kvs = []
    for k in args.kv.split(","):
        parts = k.split(":")
        exact = int(parts[2][1:]) if len(parts) > 2 and parts[2].startswith("x") else 0
        kvs.append((parts[0], int(parts[1]) if len(parts) > 1 else 32, exact))
    row_sizes = bytes_per_token(args.ember, args.model)
    # The exact window: R + 2 pages of 16 F16 tokens per sequence, spread over the context.
    sizes = {k: row_sizes.get(k[:2], float("nan")) + (row_sizes.get(("f16", 32), float("nan")) * (k[2] + 32) / args.ctx
                                                       if k[2] else 0) for k in kvs}
    name = lambda t, g, x: t + (f" g{g}" if t not in ("f16", "f32") else "") + (f" +{x} exact" if x else "")
    results, nlls = {}, {}
    scratch = args.nll_dir or tempfile.mkdtemp(prefix="kv_quality_")
    os.makedirs(scratch, exist_ok=True)
    for text in args.texts:
        for kv_type, group, exact in kvs:
            stem = os.path.join(scratch, f"{os.path.splitext(os.path.basename(text))[0]}.{kv_type}.g{group}" +
                                (f".x{exact}" if exact else ""))
            if args.nll_dir and os.path.exists(stem + ".nll") and os.path.exists(stem + ".ppl"):
                with open(stem + ".ppl") as f:
                    ppl = float(f.read())
                with open(stem + ".nll") as f:
                    nll = [float(line) for line in f if line.strip()]
            else:
                ppl, nll = perplexity(args.ember, args.model, text, args.ctx, args.threads, kv_type, group, exact,
                                      args.chunks, stem + ".nll")
                with open(stem + ".ppl", "w") as f:
                    f.write(f"{ppl}\n")
            results[(text, kv_type, group, exact)], nlls[(text, kv_type, group, exact)] = ppl, nll
            print(f"  {os.path.basename(text)} {name(kv_type, group, exact)}: {ppl:.4f} ({len(nll)} tokens)", flush=True)
    base = kvs[0]
    print(f"\n| text | " + " | ".join(name(*k) for k in kvs) + " |")
    print("|---|" + "---|" * len(kvs))
    for text in args.texts:
        cells = [f"{results[(text, *base)]:.4f}"]
        for k in kvs[1:]:
            rise, err = change(nlls[(text, *base)], nlls[(text, *k)])
            cells.append(f"{results[(text, *k)]:.4f} ({rise:+.2f} ± {err:.2f} %)")
        print(f"| {os.path.basename(text)} | " + " | ".join(cells) + " |")
    print("| bytes per token | " + " | ".join(f"{sizes[k]:,.0f}" for k in kvs) + " |")
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 4))
        for text in args.texts:
            # Points in the order of their bytes, so each text's line runs left to right.
            order = sorted(kvs, key=lambda k: sizes[k])
            xs = [sizes[k] for k in order]
            changes = [change(nlls[(text, *base)], nlls[(text, *k)]) for k in order]
            ys, errs = [c[0] for c in changes], [c[1] for c in changes]
            ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=os.path.basename(text))
            for x, y, k in zip(xs, ys, order):
                ax.annotate(name(*k), (x, y), fontsize=6, textcoords="offset points", xytext=(3, 3))
        ax.axhline(0, color="grey", linewidth=0.5)
        ax.set_xlabel("KV bytes per token")
        ax.set_ylabel(f"perplexity vs {name(*base)}, % (ctx {args.ctx})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
