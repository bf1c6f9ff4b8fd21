#!/usr/bin/env python3
"""Database files side by side: Apiary and DuckDB loading TPC-H into a file, in the same run.

    bench/storage_compare.py --sf 1 --threads 2 --rounds 3

For each round and each engine (the order alternates between rounds): delete the database
file, run the same CREATE TABLE and COPY statements from the .tbl files (bench/data/sf<SF>/,
written by `apiary tpch-gen` if missing) and a final CHECKPOINT, in a fresh process, and time
it; record the file size; then, in a new process, time opening the file plus the first run
of Q6, and the median of five further (hot) runs of Q6. Prints the medians over the rounds
and the ratios Apiary/DuckDB. Also times Q6 hot on Apiary's in-memory engine for the
"within 5% of in-memory" check. Needs bench/.venv (bench/setup.sh).
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLES = ["region", "nation", "part", "supplier", "partsupp", "customer", "orders", "lineitem"]
APIARY = os.path.join(ROOT, "target/release/apiary")


def schema_sql():
    source = open(os.path.join(ROOT, "crates/engine/src/tpch.rs")).read()
    return re.search(r'pub const SCHEMA: &str = "(.*?)";', source, re.S).group(1)


def load_sql(data):
    copies = "".join(f"COPY {t} FROM '{data}/{t}.tbl' (DELIMITER '|');\n" for t in TABLES)
    return schema_sql() + "\n" + copies + "CHECKPOINT;\n"


def q6():
    return open(os.path.join(ROOT, "tpch/queries/q06.sql")).read()


def remove(path):
    for p in (path, path + ".wal"):
        if os.path.exists(p):
            os.remove(p)


def timed(command, stdin=None):
    started = time.perf_counter()
    subprocess.run(command, input=stdin, check=True, capture_output=True, text=True)
    return time.perf_counter() - started


def apiary_round(path, data, threads):
    remove(path)
    script = f"SET threads = {threads};\n" + load_sql(data)
    load = timed([APIARY, path, "-f", "/dev/stdin"], stdin=script)
    size = os.path.getsize(path)
    first = timed([APIARY, path, "-c", f"SET threads = {threads}", "-c", q6()])
    hot_script = f"SET threads = {threads};\n" + (q6().rstrip().rstrip(";") + ";\n") * 6
    out = subprocess.run([APIARY, path, "--timer", "-f", "/dev/stdin"], input=hot_script, check=True, capture_output=True, text=True)
    times = [float(m) for m in re.findall(r"Run Time: ([0-9.]+) s", out.stderr)]
    return load, size, first, statistics.median(times[-5:])


def apiary_in_memory_hot(data, threads):
    script = f"SET threads = {threads};\n" + load_sql(data) + (q6().rstrip().rstrip(";") + ";\n") * 6
    out = subprocess.run([APIARY, "--timer", "-f", "/dev/stdin"], input=script, check=True, capture_output=True, text=True)
    times = [float(m) for m in re.findall(r"Run Time: ([0-9.]+) s", out.stderr)]
    return statistics.median(times[-5:])


DUCKDB_LOAD = """
import duckdb, sys
con = duckdb.connect(sys.argv[1])
con.execute(f"SET threads = {sys.argv[2]}")
con.execute(sys.stdin.read())
con.close()
"""

DUCKDB_Q6 = """
import duckdb, sys, time
con = duckdb.connect(sys.argv[1])
con.execute(f"SET threads = {sys.argv[2]}")
q = sys.stdin.read()
con.execute(q).fetchall()
times = []
for _ in range(int(sys.argv[3])):
    t = time.perf_counter(); con.execute(q).fetchall(); times.append(time.perf_counter() - t)
print(sorted(times)[len(times) // 2] if times else 0)
"""


def duckdb_round(python, path, data, threads):
    remove(path)
    load = timed([python, "-c", DUCKDB_LOAD, path, str(threads)], stdin=load_sql(data))
    size = os.path.getsize(path)
    first = timed([python, "-c", DUCKDB_Q6, path, str(threads), "0"], stdin=q6())
    out = subprocess.run([python, "-c", DUCKDB_Q6, path, str(threads), "5"], input=q6(), check=True, capture_output=True, text=True)
    return load, size, first, float(out.stdout.strip())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default="/tmp/apiary-storage-bench")
    args = parser.parse_args()
    python = os.path.join(ROOT, "bench/.venv/bin/python")
    data = os.path.join(ROOT, f"bench/data/sf{args.sf:g}")
    subprocess.run(["cargo", "build", "--release", "--bin", "apiary"], cwd=ROOT, check=True)
    if not os.path.exists(os.path.join(data, "lineitem.tbl")):
        subprocess.run([APIARY, "tpch-gen", "--sf", str(args.sf), "--dir", data], check=True)
    os.makedirs(args.dir, exist_ok=True)
    results = {"apiary": [], "duckdb": []}
    for round_number in range(args.rounds):
        order = ["apiary", "duckdb"] if round_number % 2 == 0 else ["duckdb", "apiary"]
        for engine in order:
            if engine == "apiary":
                r = apiary_round(os.path.join(args.dir, "tpch.apiary"), data, args.threads)
            else:
                r = duckdb_round(python, os.path.join(args.dir, "tpch.duckdb"), data, args.threads)
            results[engine].append(r)
            print(f"round {round_number + 1} {engine}: load {r[0]:.2f} s, file {r[1] / 1e6:.1f} MB, "
                  f"open+first Q6 {r[2] * 1e3:.0f} ms, hot Q6 {r[3] * 1e3:.1f} ms", file=sys.stderr)
    in_memory = apiary_in_memory_hot(data, args.threads)
    print(f"\nTPC-H SF{args.sf:g}, {args.threads} threads, median of {args.rounds} rounds")
    print(f"{'':28} {'Apiary':>10} {'DuckDB':>10} {'ratio':>7}")
    labels = ["load (COPY all tables) s", "file size MB", "open + first Q6 ms", "hot Q6 ms"]
    scale = [1, 1e-6, 1e3, 1e3]
    for i, label in enumerate(labels):
        a = statistics.median(r[i] for r in results["apiary"]) * scale[i]
        d = statistics.median(r[i] for r in results["duckdb"]) * scale[i]
        print(f"{label:28} {a:10.2f} {d:10.2f} {a / d:7.2f}")
    hot_file = statistics.median(r[3] for r in results["apiary"]) * 1e3
    print(f"\nApiary hot Q6: file {hot_file:.2f} ms, in memory {in_memory * 1e3:.2f} ms, ratio {hot_file / (in_memory * 1e3):.2f}")


if __name__ == "__main__":
    main()
