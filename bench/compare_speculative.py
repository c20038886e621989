#!/usr/bin/env python3
"""Speculative decoding: ember against llama.cpp's llama-speculative and llama-lookup.

For each prompt kind (story, code, question answering, summarising a given text),
runs greedy generation of N tokens with the same files and threads:
  ember plain, ember with each draft mode given by --ember-draft (e.g. "-md DRAFT",
  "--draft lookup", "--draft self-vocab:16384"), llama-speculative with the draft
  model, and llama-lookup. Programs alternate within a round; ROUNDS rounds; the
  median decode tokens/s (after the prompt) and acceptance are reported per prompt,
  with ratios, as a Markdown table, and optionally as JSON and a plot of speedup
  against acceptance with the expected-speedup curve.

    LLAMA_BIN=/path/to/llama.cpp/build/bin EMBER=build/examples/ember \\
    python3 bench/compare_speculative.py -t 2 -n 128 --rounds 2 --target T.gguf --draft D.gguf \\
        --ember-draft "-md D.gguf --draft-max 4" --ember-draft "--draft lookup --draft-max 8"

llama.cpp is not part of ember: build it elsewhere and point LLAMA_BIN at its bin/.
Only the Python standard library is used (matplotlib for --plot, if installed).
"""

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys

PROMPTS = {
    "story": "Write a long story about a lighthouse keeper who finds a message in a bottle. Once upon a time,",
    "code": ("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
             "def mul(a, b):\n    return a * b\n\nclass Calculator:\n    def __init__(self):\n"),
    "qa": ("Question: What is the capital of France, and what river flows through it? "
           "Explain in a few sentences.\nAnswer:"),
    "summary": ("The Industrial Revolution began in Britain in the late eighteenth century. Steam engines, "
                "first used to pump water from mines, were soon driving looms and locomotives. Factories drew "
                "workers from the countryside into fast-growing towns, where wages were low and housing was "
                "crowded. Over the next century the changes spread to Europe and North America, raising output "
                "and, slowly, living standards.\n\nSummarise the text above in three sentences.\nSummary: The "
                "Industrial Revolution began in Britain"),
    # Text that drafts cannot predict: for the adaptive-k check.
    "random": "qz xv 81 jw qz pk 93 mv qz rt 27 xv lb qz 55 hh kd 08 zz qm 71 op",
}


def run(cmd):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.stderr.write(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}\n")
        sys.exit(1)
    return proc.stdout + proc.stderr


def ember(args, prompt, extra):
    out = run([args.ember, "run", "-m", args.target, "-p", prompt, "-n", str(args.n_gen), "--temp", "0", "-t",
               str(args.threads), "--ignore-eos", "--no-display-prompt"] + shlex.split(extra))
    tps = float(re.search(r"generated at ([0-9.]+) tok/s", out).group(1))
    m = re.search(r"drafts: (\d+) proposed, (\d+) accepted \((\d+) %, alpha ([0-9.]+)\), ([0-9.]+) tokens a step, "
                  r"k (\d+), (\d+) verify steps \(([0-9.]+) \+ ([0-9.]+) ms\), (\d+) plain steps \(([0-9.]+) ms\)", out)
    if not m:
        return {"tps": tps, "accept": None, "per_step": None}
    g = m.groups()
    return {"tps": tps, "accept": float(g[2]) / 100, "alpha": float(g[3]), "per_step": float(g[4]),
            "drafted": int(g[0]), "steps": int(g[6]), "draft_ms": float(g[7]), "verify_ms": float(g[8]),
            "plain_steps": int(g[9]), "plain_ms": float(g[10])}


def expected_tokens(alpha, k):
    """Tokens a verification step yields when each of k drafts is kept with probability alpha until the first
    rejection (Leviathan et al. 2023)."""
    return k + 1.0 if alpha >= 1.0 else (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def predicted_speedup(run, plain_tps):
    """The formula of docs/speculative.md with this run's measured alpha and costs: steps of k drafts (k = the
    run's mean drafts a step) yield expected_tokens(alpha, k) for draft + verify ms; plain steps one token."""
    if run.get("steps", 0) == 0:
        return None
    k = run["drafted"] / run["steps"]
    tokens = run["steps"] * expected_tokens(run["alpha"], k) + run["plain_steps"]
    ms = run["steps"] * (run["draft_ms"] + run["verify_ms"]) + run["plain_steps"] * run["plain_ms"]
    return tokens / ms * 1000.0 / plain_tps


def llama(args, tool, prompt, extra):
    cmd = [os.path.join(args.llama_bin, tool), "-m", args.target, "-p", prompt, "-n", str(args.n_gen), "--temp",
           "0", "-t", str(args.threads), "-ngl", "0", "-c", "4096", "--seed", "1"] + extra
    out = run(cmd)
    tps = float(re.findall(r"decoded\s+\d+ tokens in\s+[0-9.]+ seconds, speed:\s+([0-9.]+) t/s", out)[-1])
    acc = re.findall(r"accept\s+=\s+([0-9.]+)%", out)
    return {"tps": tps, "accept": float(acc[-1]) / 100 if acc else None, "per_step": None}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-n", "--n-gen", type=int, default=128)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--target", required=True)
    p.add_argument("--draft", help="draft GGUF for llama-speculative (and ember -md)")
    p.add_argument("--draft-max", type=int, default=4, help="llama-speculative's and llama-lookup's --draft-max")
    p.add_argument("--ember-draft", action="append", default=[], help="ember run flags of one speculative mode")
    p.add_argument("--prompts", default="story,code,qa,summary,random")
    p.add_argument("--json")
    p.add_argument("--plot")
    p.add_argument("--ember", default=os.environ.get("EMBER", "build/examples/ember"))
    p.add_argument("--llama-bin", default=os.environ.get("LLAMA_BIN", ""))
    args = p.parse_args()

    programs = [("ember plain", lambda pr: ember(args, pr, ""))]
    for flags in args.ember_draft:
        programs.append((f"ember {flags}", lambda pr, f=flags: ember(args, pr, f)))
    if args.llama_bin:
        if args.draft:
            programs.append(("llama-speculative", lambda pr: llama(
                args, "llama-speculative", pr, ["-md", args.draft, "--draft-max", str(args.draft_max), "-ngld", "0"])))
        programs.append(("llama-lookup", lambda pr: llama(args, "llama-lookup", pr,
                                                          ["--draft-max", str(args.draft_max)])))

    results = {}
    for kind in args.prompts.split(","):
        for r in range(args.rounds):
            order = programs if r % 2 == 0 else list(reversed(programs))
            for name, fn in order:
                results.setdefault(kind, {}).setdefault(name, []).append(fn(PROMPTS[kind]))
                sys.stderr.write(f"{kind} round {r + 1}: {name}: {results[kind][name][-1]}\n")

    table = {}
    print(f"| prompt | program | decode t/s | x ember plain | formula | acceptance | alpha | tokens a step |")
    print("|---|---|---|---|---|---|---|---|")
    for kind, by_prog in results.items():
        base = statistics.median(x["tps"] for x in by_prog["ember plain"])
        for name, runs in by_prog.items():
            tps = statistics.median(x["tps"] for x in runs)
            med = lambda key: statistics.median(v) if (v := [x[key] for x in runs if x.get(key) is not None]) else None
            preds = [p for x in runs if (p := predicted_speedup(x, base)) is not None]
            pred = statistics.median(preds) if preds else None
            acc, alpha, per = med("accept"), med("alpha"), med("per_step")
            table.setdefault(kind, {})[name] = {"tps": tps, "speedup": tps / base, "predicted": pred, "accept": acc,
                                                "alpha": alpha, "per_step": per}
            fmt = lambda v, f: "" if v is None else f.format(v)
            print(f"| {kind} | {name} | {tps:.1f} | {tps / base:.2f} | {fmt(pred, '{:.2f}')} | "
                  f"{fmt(None if acc is None else 100 * acc, '{:.0f} %')} | {fmt(alpha, '{:.2f}')} | "
                  f"{fmt(per, '{:.2f}')} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "n_gen": args.n_gen, "rounds": args.rounds, "target": args.target,
                       "draft": args.draft, "results": table}, f, indent=1)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.5))
        for kind, by_prog in table.items():
            for name, v in by_prog.items():
                if v["alpha"] is None or not name.startswith("ember"):
                    continue
                ax.scatter(v["alpha"], v["speedup"], label=f"{kind}: {name[6:]}", s=20)
                if v["predicted"] is not None:
                    bx.scatter(v["predicted"], v["speedup"], s=20)
        for k in (4, 8):  # the formula at a cost ratio typical of these runs: draft 0.2, verify 1 + 0.08 k
            xs = [i / 100 for i in range(0, 100)]
            ax.plot(xs, [expected_tokens(a, k) / (1 + 0.08 * k + 0.2 * k) for a in xs], lw=0.8, ls="--",
                    label=f"formula, k {k}, c 0.2, v 1 + 0.08 k")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("per-draft acceptance alpha")
        ax.set_ylabel("decode speed / ember plain")
        ax.legend(fontsize=5)
        lim = [0.5, max(3.0, max(v["speedup"] for by in table.values() for v in by.values()) + 0.2)]
        bx.plot(lim, lim, color="grey", lw=0.8)
        bx.set_xlabel("speedup predicted by the formula (measured alpha and costs)")
        bx.set_ylabel("measured speedup")
        fig.tight_layout()
        fig.savefig(args.plot, dpi=130)


if __name__ == "__main__":
    main()
