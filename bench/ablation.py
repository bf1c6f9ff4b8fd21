#!/usr/bin/env python3
"""Each technique on versus off, per TPC-H query (the ablations of docs/performance.md).

    bench/ablation.py --sf 1 --threads 2 --runs 5 [--queries 1,6] [--data DIR]

Loads the data once (`apiary bench tpch --variant ...`) and runs every query with the
default settings and with one technique switched off at a time: relaxed-operator-fusion
stages (`SET staging = off`), SIMD predicates (`SET simd = off`), group prefetching
(`SET prefetch_group = 0`), the JIT tier (`SET jit = off`), and with one thread instead
of --threads. Prints a Markdown table of median times (ms) and, per technique, off/on: above 1.00 the technique pays.
"""

import json
import subprocess
import sys

from tpch_compare import benchmark_arguments, geomean, prepare

VARIANTS = [
    ("staging_off", "SET staging = off", "stages"),
    ("simd_off", "SET simd = off", "SIMD"),
    ("prefetch_off", "SET prefetch_group = 0", "prefetch"),
    ("jit_off", "SET jit = off", "JIT"),
    # Measured by its own process, so that no query of the other variants runs on a
    # worker pool that was just shrunk and grown again.
    ("threads_1", None, "threads"),
]


def main():
    args = benchmark_arguments(__doc__).parse_args()
    apiary, data_dir = prepare(args)
    base = [apiary, "bench", "tpch", "--sf", str(args.sf), "--runs", str(args.runs), "--data", data_dir, "--queries", args.queries]
    runs = [(base + ["--threads", str(args.threads)]
             + [arg for name, sql, _ in VARIANTS if sql for arg in ("--variant", f"{name}={sql}")], None),
            (base + ["--threads", "1"], "threads_1")]
    times = {}
    wrong = []
    for cmd, rename in runs:
        out = subprocess.run(cmd, capture_output=True, text=True)
        sys.stderr.write(out.stderr)
        for line in out.stdout.splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                variant = rename or r.get("variant", "default")
                times[(r["q"], variant)] = r["median_s"] * 1e3
                if r["correct"] is False:
                    wrong.append(f"Q{r['q']} {variant}")

    queries = [int(q) for q in args.queries.split(",")]
    header = "| query | default ms | " + " | ".join(f"{label} off ms | off/on" if label != "threads" else "1 thread ms | speed-up"
                                                    for _, _, label in VARIANTS) + " |"
    print(f"TPC-H SF{args.sf:g}, {args.threads} threads, median of {args.runs} hot runs\n")
    print(header)
    print("|" + "---|" * (2 + 2 * len(VARIANTS)))
    ratios = {name: [] for name, _, _ in VARIANTS}
    for q in queries:
        base = times.get((q, "default"))
        cells = [f"Q{q:02d}", f"{base:.1f}" if base else "error"]
        for name, _, _ in VARIANTS:
            off = times.get((q, name))
            if base and off:
                ratios[name].append(off / base)
                cells += [f"{off:.1f}", f"{off / base:.2f}"]
            else:
                cells += ["error", "-"]
        print("| " + " | ".join(cells) + " |")
    geo = ["geomean", f"{geomean([times[(q, 'default')] for q in queries if (q, 'default') in times]):.1f}"]
    for name, _, _ in VARIANTS:
        geo += [f"{geomean([times[(q, name)] for q in queries if (q, name) in times]):.1f}", f"{geomean(ratios[name]):.2f}"]
    print("| " + " | ".join(geo) + " |")
    if wrong:
        print(f"\nWRONG ANSWERS: {', '.join(wrong)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
