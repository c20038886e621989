#!/usr/bin/env python3
"""ember against llama.cpp on the same GGUF files: pp<N> and tg<N> as llama-bench defines them.

For each model, runs `ember bench` and llama.cpp's `llama-bench` alternately, ROUNDS
times each (the program that starts a round alternates too, so that neither always
runs on a cooler or warmer machine), with the same thread count, prompt and
generation lengths. Prints the median tokens/s of each program and the ratio
ember / llama.cpp per model and test, with the load average before and after.

    LLAMA_BENCH=/path/to/llama.cpp/build/bin/llama-bench \\
    EMBER=build/examples/ember \\
    python3 bench/compare.py -t 2 -p 512 -n 64 --rounds 3 MODEL.gguf [MODEL.gguf ...]

llama.cpp is not part of ember: build it from source elsewhere and point LLAMA_BENCH
at its llama-bench. Only the Python standard library is used.
"""

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time


def run(cmd):
    """Runs cmd, returns stdout; exits with its stderr on failure."""
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.stderr.write(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr}\n")
        sys.exit(1)
    return proc.stdout


def llama_bench(binary, model, args):
    """One llama-bench run; returns ({'pp': t/s, 'tg': t/s}, build_commit)."""
    out = run([binary, "-m", model, "-t", str(args.threads), "-p", str(args.n_prompt), "-n", str(args.n_gen),
               "-r", str(args.reps), "-o", "json"])
    result, commit = {}, "unknown"
    for test in json.loads(out):
        commit = test.get("build_commit", commit)
        if test["n_prompt"] > 0 and test["n_gen"] == 0:
            result["pp"] = float(test["avg_ts"])
        elif test["n_gen"] > 0 and test["n_prompt"] == 0:
            result["tg"] = float(test["avg_ts"])
    return result, commit


def ember_bench(binary, model, args):
    """One `ember bench --json` run; returns {'pp': t/s, 'tg': t/s}."""
    out = run([binary, "bench", "-m", model, "-t", str(args.threads), "-p", str(args.n_prompt), "-n",
               str(args.n_gen), "-r", str(args.reps), "--json"])
    line = [l for l in out.splitlines() if l.startswith("{")][-1]
    data = json.loads(line)
    return {"pp": float(data["prefill_tokens_per_s"]), "tg": float(data["decode_tokens_per_s"])}


def idle_fraction(seconds=1.0):
    """Fraction of CPU time spent idle over the next `seconds` (/proc/stat), None if unknown."""
    def sample():
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
        return fields[3] + fields[4], sum(fields)   # idle + iowait, total
    try:
        idle0, total0 = sample()
        time.sleep(seconds)
        idle1, total1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    return (idle1 - idle0) / max(1, total1 - total0)


def wait_for_quiet(max_wait, threshold=0.9):
    """On a shared machine, waits (up to max_wait seconds) until the CPUs are mostly idle."""
    deadline = time.time() + max_wait
    while time.time() < deadline:
        idle = idle_fraction()
        if idle is None or idle >= threshold:
            return
    sys.stderr.write(f"  (machine still busy after {max_wait:.0f} s; measuring anyway)\n")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", help="GGUF files")
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("-p", "--n-prompt", type=int, default=512, help="prompt tokens (pp<N>), default 512")
    parser.add_argument("-n", "--n-gen", type=int, default=64, help="generated tokens (tg<N>), default 64")
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs of each program (>= 3), default 3")
    parser.add_argument("-r", "--reps", type=int, default=1,
                        help="repetitions inside each run (-r of both programs), default 1")
    parser.add_argument("--llama-bench", default=os.environ.get("LLAMA_BENCH"),
                        help="llama-bench binary (default: $LLAMA_BENCH)")
    parser.add_argument("--ember", default=os.environ.get("EMBER") or shutil.which("ember"),
                        help="ember CLI binary (default: $EMBER, else ember on PATH)")
    parser.add_argument("--quiet-wait", type=float, default=0, metavar="SECONDS",
                        help="before each run, wait up to SECONDS for the CPUs to be >= 90%% idle (shared machines)")
    parser.add_argument("--json", metavar="FILE", help="also write every sample and the summary to FILE")
    args = parser.parse_args()
    if not args.llama_bench:
        parser.error("set LLAMA_BENCH to llama.cpp's llama-bench (built from source outside this repository)")
    if not args.ember:
        parser.error("set EMBER to the ember CLI binary (build/examples/ember)")
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")

    load_before = os.getloadavg()
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  cpu: {cpu_model()}  threads: {args.threads}  "
          f"rounds: {args.rounds}  load before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}",
          flush=True)
    pp, tg = f"pp{args.n_prompt}", f"tg{args.n_gen}"
    report = {"threads": args.threads, "rounds": args.rounds, "reps": args.reps, "cpu": cpu_model(),
              "load_before": load_before, "models": []}
    rows = []
    commit = "unknown"
    for model in args.models:
        samples = {"ember": {"pp": [], "tg": []}, "llama.cpp": {"pp": [], "tg": []}}
        for rnd in range(args.rounds):
            order = ["llama.cpp", "ember"] if rnd % 2 == 0 else ["ember", "llama.cpp"]
            for prog in order:
                if args.quiet_wait > 0:
                    wait_for_quiet(args.quiet_wait)
                if prog == "ember":
                    result = ember_bench(args.ember, model, args)
                else:
                    result, commit = llama_bench(args.llama_bench, model, args)
                for test in ("pp", "tg"):
                    samples[prog][test].append(result[test])
                print(f"  {os.path.basename(model)} round {rnd + 1} {prog:9s} {pp} {result['pp']:8.2f}  "
                      f"{tg} {result['tg']:7.2f}  (load {os.getloadavg()[0]:.2f})", flush=True)
        med = {prog: {test: statistics.median(v) for test, v in tests.items()} for prog, tests in samples.items()}
        ratio = {test: med["ember"][test] / med["llama.cpp"][test] for test in ("pp", "tg")}
        rows.append((os.path.basename(model), med, ratio))
        report["models"].append({"model": model, "samples": samples, "median": med, "ratio": ratio})

    load_after = os.getloadavg()
    report["load_after"] = load_after
    report["llama_cpp_build_commit"] = commit
    print(f"\nllama.cpp build_commit: {commit}; load after: {load_after[0]:.2f} {load_after[1]:.2f} "
          f"{load_after[2]:.2f}; medians of {args.rounds} alternating runs, tokens/s\n")
    print(f"| model | llama.cpp {pp} | ember {pp} | ratio | llama.cpp {tg} | ember {tg} | ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, med, ratio in rows:
        print(f"| {name} | {med['llama.cpp']['pp']:.1f} | {med['ember']['pp']:.1f} | **{ratio['pp']:.2f}x** | "
              f"{med['llama.cpp']['tg']:.2f} | {med['ember']['tg']:.2f} | **{ratio['tg']:.2f}x** |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
