#!/usr/bin/env python3
"""Packed against unpacked blocks in one process (issue 14).

    bench/packed_ab.py [--sf 1] [--threads 1] [--reps 5] [--queries 1,6]

Loads TPC-H in memory (packed, the default), copies the eight tables with
`SET packed_blocks = off`, then runs each query alternately on the packed tables and on
the copies and prints the best time of each and their ratio. Same binary, same process,
alternating: on this shared machine that is the comparison the noise leaves standing.
"""
import argparse
import collections
import math
import os
import re
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLES = ["lineitem", "orders", "customer", "partsupp", "part", "supplier", "nation", "region"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sf", default="1")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--queries", default=",".join(map(str, range(1, 23))))
    parser.add_argument("--apiary", default=os.path.join(ROOT, "target/release/apiary"))
    args = parser.parse_args()
    queries = [int(q) for q in args.queries.split(",")]
    setup = [f"SET threads = {args.threads};", "SET packed_blocks = off;"]
    setup += [f"CREATE TABLE plain_{t} AS SELECT * FROM {t};" for t in TABLES]
    statements, order = list(setup), []
    for q in queries:
        packed = open(os.path.join(ROOT, f"tpch/queries/q{q:02d}.sql")).read().strip()
        plain = packed
        for t in TABLES:
            plain = re.sub(rf"\b{t}\b", f"plain_{t}", plain)
        for _ in range(args.reps):
            statements += [packed, plain]
            order += [(q, "packed"), (q, "plain")]
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as script:
        script.write("\n".join(statements) + "\n")
    run = subprocess.run([args.apiary, "--tpch", args.sf, "--timer", "-f", script.name], capture_output=True, text=True)
    os.unlink(script.name)
    times = [float(t) for t in re.findall(r"Run Time: ([0-9.]+) s", run.stdout + run.stderr)][len(setup):]
    if run.returncode != 0 or len(times) != len(order):
        raise SystemExit(f"apiary failed ({run.returncode}): {run.stderr[-2000:]}")
    best = collections.defaultdict(lambda: math.inf)
    for key, seconds in zip(order, times):
        best[key] = min(best[key], seconds * 1000)
    ratios = []
    for q in queries:
        packed, plain = best[(q, "packed")], best[(q, "plain")]
        ratios.append(packed / plain)
        print(f"Q{q:02d}  packed {packed:8.1f} ms  unpacked {plain:8.1f} ms  ratio {packed / plain:.2f}")
    print(f"geometric mean packed / unpacked: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}")


if __name__ == "__main__":
    main()
