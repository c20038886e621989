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

At depth (llama-bench's -d): `-d 0,4096,16384` measures each test after that many
tokens in the cache; `--pp-depths 4096` limits the prefill tests to those depths (the
fills are the slow part). `--fa 0,1` runs llama-bench with and without flash attention
and compares ember with the better of the two; `--ember-kv f16,int8,int4` runs ember
once per KV storage type (ratios use the first). `--plot FILE` draws tokens/s against
depth for every program (needs matplotlib).

llama.cpp is not part of ember: build it from source elsewhere and point LLAMA_BENCH
at its llama-bench. Only the Python standard library is used.
"""

import argparse
import json
import os
import platform
import shlex
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


def parse_tests(items, speed):
    """{(kind, depth): t/s} from llama-bench or ember JSON test objects; kind 'pp' or 'tg'."""
    result = {}
    for test in items:
        depth = int(test.get("n_depth", 0))
        if test["n_prompt"] > 0 and test["n_gen"] == 0:
            result[("pp", depth)] = float(speed(test))
        elif test["n_gen"] > 0 and test["n_prompt"] == 0:
            result[("tg", depth)] = float(speed(test))
    return result


def test_runs(args):
    """The (n_prompt, n_gen, depths) invocations that cover the wanted tests."""
    pp_depths = args.pp_depths if args.pp_depths is not None else args.depths
    if pp_depths == args.depths:
        return [(args.n_prompt, args.n_gen, args.depths)]
    return [(args.n_prompt, 0, pp_depths), (0, args.n_gen, args.depths)]


def csv(values):
    return ",".join(str(v) for v in values)


def llama_bench(binary, model, args, fa):
    """llama-bench runs with flash attention `fa`; returns ({(kind, depth): t/s}, build_commit)."""
    result, commit = {}, "unknown"
    for n_prompt, n_gen, depths in test_runs(args):
        cmd = [binary, "-m", model, "-t", str(args.threads), "-p", str(n_prompt), "-n", str(n_gen),
               "-r", str(args.reps), "-o", "json"]
        if depths != [0]:
            cmd += ["-d", csv(depths)]
        if fa is not None:
            cmd += ["-fa", str(fa)]
        cmd += shlex.split(args.llama_args)
        tests = json.loads(run(cmd))
        for test in tests:
            commit = test.get("build_commit", commit)
        result.update(parse_tests(tests, lambda t: t["avg_ts"]))
    return result, commit


def ember_bench(binary, model, args, kv):
    """`ember bench --json` runs with KV storage `kv`; returns {(kind, depth): t/s}."""
    result = {}
    for n_prompt, n_gen, depths in test_runs(args):
        # ember bench needs -p and -n >= 1; a test kind not wanted is measured short and dropped.
        cmd = [binary, "bench", "-m", model, "-t", str(args.threads), "-p", str(max(n_prompt, 1)), "-n",
               str(max(n_gen, 1)), "-d", csv(depths), "-r", str(args.reps), "--kv-type", kv, "--json"]
        tests = [json.loads(l) for l in run(cmd).splitlines() if l.startswith("{")]
        tests = [t for t in tests if (t["n_gen"] == 0 and n_prompt > 0) or (t["n_prompt"] == 0 and n_gen > 0)]
        result.update(parse_tests(tests, lambda t: t.get("prefill_tokens_per_s", t.get("decode_tokens_per_s"))))
    return result


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
    parser.add_argument("--llama-args", default="", metavar="ARGS",
                        help="extra llama-bench arguments, one shell-quoted string (e.g. \"-ot exps=CPU\")")
    parser.add_argument("--ember", default=os.environ.get("EMBER") or shutil.which("ember"),
                        help="ember CLI binary (default: $EMBER, else ember on PATH)")
    parser.add_argument("--quiet-wait", type=float, default=0, metavar="SECONDS",
                        help="before each run, wait up to SECONDS for the CPUs to be >= 90%% idle (shared machines)")
    parser.add_argument("-d", "--depths", type=lambda v: [int(x) for x in v.split(",")], default=[0],
                        help="comma list of depths (tokens in the cache before each test), default 0")
    parser.add_argument("--pp-depths", type=lambda v: [int(x) for x in v.split(",")], default=None,
                        help="depths of the prefill tests (default: --depths)")
    parser.add_argument("--fa", type=lambda v: [int(x) for x in v.split(",")], default=None,
                        help="llama-bench -fa values to run (e.g. 0,1); ember is compared with the best")
    parser.add_argument("--ember-kv", type=lambda v: v.split(","), default=["f16"],
                        help="ember --kv-type values to run (e.g. f16,int8,int4); ratios use the first")
    parser.add_argument("--plot", metavar="FILE", help="draw tokens/s against depth per program to FILE (matplotlib)")
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
    programs = [f"llama.cpp fa{fa}" for fa in args.fa] if args.fa else ["llama.cpp"]
    programs += [f"ember {kv}" for kv in args.ember_kv]
    report = {"threads": args.threads, "rounds": args.rounds, "reps": args.reps, "cpu": cpu_model(),
              "depths": args.depths, "load_before": load_before, "models": []}
    commit = "unknown"
    for model in args.models:
        samples = {prog: {} for prog in programs}
        for rnd in range(args.rounds):
            order = programs if rnd % 2 == 0 else programs[::-1]
            for prog in order:
                if args.quiet_wait > 0:
                    wait_for_quiet(args.quiet_wait)
                if prog.startswith("ember"):
                    result = ember_bench(args.ember, model, args, prog.split()[1])
                else:
                    fa = int(prog[-1]) if args.fa else None
                    result, commit = llama_bench(args.llama_bench, model, args, fa)
                for key, value in result.items():
                    samples[prog].setdefault(key, []).append(value)
                shown = "  ".join(f"{kind}@d{depth} {value:.2f}" for (kind, depth), value in sorted(result.items()))
                print(f"  {os.path.basename(model)} round {rnd + 1} {prog:14s} {shown}  (load {os.getloadavg()[0]:.2f})",
                      flush=True)
        med = {prog: {key: statistics.median(v) for key, v in tests.items()} for prog, tests in samples.items()}
        report["models"].append({"model": model, "samples": {p: {f"{k}@{d}": v for (k, d), v in t.items()}
                                                                for p, t in samples.items()},
                                 "median": {p: {f"{k}@{d}": v for (k, d), v in t.items()} for p, t in med.items()}})
        report["models"][-1]["_med"] = med

    load_after = os.getloadavg()
    report["load_after"] = load_after
    report["llama_cpp_build_commit"] = commit
    print(f"\nllama.cpp build_commit: {commit}; load after: {load_after[0]:.2f} {load_after[1]:.2f} "
          f"{load_after[2]:.2f}; medians of {args.rounds} alternating runs, tokens/s\n")
    llama_progs = [p for p in programs if p.startswith("llama")]
    ember_progs = [p for p in programs if p.startswith("ember")]
    print("| model | test | " + " | ".join(programs) + " | ratio (" + ember_progs[0] + " / best llama.cpp) |")
    print("|---|---|" + "---|" * (len(programs) + 1))
    for entry in report["models"]:
        med = entry.pop("_med")
        keys = sorted({k for prog in med.values() for k in prog}, key=lambda k: (k[0] == "tg", k[1]))
        ratios = {}
        for kind, depth in keys:
            name = f"{'pp' if kind == 'pp' else 'tg'}{args.n_prompt if kind == 'pp' else args.n_gen}"
            name += f" @ d{depth}" if depth else ""
            best = max((med[p].get((kind, depth), 0.0) for p in llama_progs), default=0.0)
            ours = med[ember_progs[0]].get((kind, depth), 0.0)
            ratio = ours / best if best > 0 else float("nan")
            ratios[f"{kind}@{depth}"] = ratio
            cells = " | ".join(f"{med[p].get((kind, depth), float('nan')):.2f}" for p in programs)
            print(f"| {os.path.basename(entry['model'])} | {name} | {cells} | **{ratio:.2f}x** |")
        entry["ratio"] = ratios
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if args.plot:
        try:
            plot(report, programs, args)
        except ImportError:
            print(f"--plot: matplotlib is not installed (pip install matplotlib); {args.plot} not drawn",
                  file=sys.stderr)


def plot(report, programs, args):
    """Tokens/s against depth, one row of panels (prefill, decode) per model."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    models = report["models"]
    fig, axes = plt.subplots(len(models), 2, figsize=(10, 3.2 * len(models)), squeeze=False)
    for row, entry in zip(axes, models):
        for ax, kind in zip(row, ("pp", "tg")):
            for prog in programs:
                points = sorted((int(k.split("@")[1]), v) for k, v in entry["median"][prog].items()
                                if k.startswith(kind + "@"))
                if points:
                    ax.plot([d for d, _ in points], [v for _, v in points], marker="o",
                            linestyle="--" if prog.startswith("llama") else "-", label=prog)
            test = f"pp{args.n_prompt}" if kind == "pp" else f"tg{args.n_gen}"
            ax.set_title(f"{os.path.basename(entry['model'])}: {test}", fontsize=9)
            ax.set_xlabel("depth (tokens in the cache)")
            ax.set_ylabel("tokens/s")
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(f"{report['cpu']}, {report['threads']} threads, medians of {report['rounds']} rounds", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
