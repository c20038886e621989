#!/usr/bin/env python3
"""Aggregate decode of N concurrent sequences: ember batched-bench against llama-batched-bench.

Runs `ember batched-bench --json` and `llama-batched-bench --output-format jsonl` on the
same GGUF files with the same threads, prompt and generation lengths and N list, the
program that starts each round alternating (the machine is shared and drifts). Prints
the median of the rounds per (file, N) and the ratios ember / llama.cpp, and, with
--plot, draws throughput and TPOT against N.

  LLAMA_BATCHED_BENCH=/path/to/llama-batched-bench EMBER=build/examples/ember \\
    python3 bench/compare_batched.py -t 2 -npp 128 -ntg 32 -npl 1,2,4,8,16 --rounds 2 \\
      --json results.json --plot docs/engine-batched.png MODEL.gguf [MODEL.gguf ...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run_ember(ember, model, args):
    cmd = [ember, "batched-bench", "-m", model, "-t", str(args.threads), "-npp", str(args.npp), "-ntg",
           str(args.ntg), "-npl", args.npl, "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            rows[r["pl"]] = {"speed_tg": r["speed_tg"], "speed_pp": r["speed_pp"], "tpot_ms": r["tpot_ms"],
                             "scheduler_share": r["scheduler_share"],
                             "sampling_share": r["sampling_share"]}
    return rows


def run_llama(binary, model, args):
    n_kv = max(int(n) for n in args.npl.split(",")) * (args.npp + args.ntg) + 64
    cmd = [binary, "-m", model, "-t", str(args.threads), "-c", str(n_kv), "-b", "2048", "-ub", "512",
           "-npp", str(args.npp), "-ntg", str(args.ntg), "-npl", args.npl, "--output-format", "jsonl"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            rows[r["pl"]] = {"speed_tg": r["speed_tg"], "speed_pp": r["speed_pp"],
                             "tpot_ms": 1e3 * r["t_tg"] / r["tg"]}
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("-npp", type=int, default=128)
    p.add_argument("-ntg", type=int, default=32)
    p.add_argument("-npl", default="1,2,4,8,16")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", help="write every sample here")
    p.add_argument("--plot", help="PNG with throughput and TPOT against N (needs matplotlib)")
    args = p.parse_args()
    ember = os.environ.get("EMBER", "build/examples/ember")
    llama = os.environ.get("LLAMA_BATCHED_BENCH")
    if not llama:
        sys.exit("set LLAMA_BATCHED_BENCH to llama.cpp's llama-batched-bench binary")

    samples = {}
    for model in args.models:
        name = os.path.basename(model)
        samples[name] = {"ember": [], "llama": []}
        for rnd in range(args.rounds):
            order = [("ember", run_ember, ember), ("llama", run_llama, llama)]
            if rnd % 2:
                order.reverse()
            for who, fn, binary in order:
                rows = fn(binary, model, args)
                samples[name][who].append(rows)
                print(f"{name} round {rnd} {who}: " +
                      ", ".join(f"N={n}: {r['speed_tg']:.1f} t/s" for n, r in sorted(rows.items())), flush=True)

    print(f"\n| file | N | ember S_TG t/s | llama.cpp S_TG t/s | ratio | ember TPOT ms | llama.cpp TPOT ms | "
          f"ember scheduler % | ember sampling % |")
    print("|---|---|---|---|---|---|---|---|---|")
    table = {}
    for name, s in samples.items():
        table[name] = {}
        for n in sorted(s["ember"][0]):
            med = lambda who, key: statistics.median(r[n][key] for r in s[who])
            e, l = med("ember", "speed_tg"), med("llama", "speed_tg")
            et, lt = med("ember", "tpot_ms"), med("llama", "tpot_ms")
            sched = 100 * med("ember", "scheduler_share")
            sampling = 100 * med("ember", "sampling_share")
            table[name][n] = {"ember": e, "llama": l, "ember_tpot": et, "llama_tpot": lt}
            print(f"| {name} | {n} | {e:.1f} | {l:.1f} | {e / l:.2f}x | {et:.1f} | {lt:.1f} | {sched:.2f} | {sampling:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "samples": samples}, f, indent=1)
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(len(table), 2, figsize=(10, 3.6 * len(table)), squeeze=False)
        for row, (name, t) in enumerate(table.items()):
            ns = sorted(t)
            panels = [("", "aggregate decode tokens/s"), ("_tpot", "time per output token, ms")]
            for col, (suffix, ylabel) in enumerate(panels):
                ax = axes[row][col]
                ax.plot(ns, [t[n]["ember" + suffix] for n in ns], "o-", label="ember")
                ax.plot(ns, [t[n]["llama" + suffix] for n in ns], "s--", label="llama.cpp")
                ax.set_xscale("log", base=2)
                ax.set_xlabel("concurrent sequences N")
                ax.set_ylabel(ylabel)
                ax.legend()
            axes[row][0].set_title(name, fontsize=9)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=90)


if __name__ == "__main__":
    main()
