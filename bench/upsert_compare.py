#!/usr/bin/env python3
"""Upserts, MERGE and one-row changes on a keyed table of 1,000,000 rows: Apiary's CLI
against DuckDB in the same run.

    bash bench/setup.sh
    cargo build --release --bin apiary
    bench/.venv/bin/python bench/upsert_compare.py --runs 6 --threads 2

Each run loads `kp (k INTEGER PRIMARY KEY, v BIGINT)` with 1,000,000 rows (untimed),
then times each statement once (Apiary: `apiary --timer`, a fresh in-memory database per
run; DuckDB: one connection, each statement timed after a warm-up of the same kind).
Prints per statement the median over the runs and Apiary's ratio to DuckDB.
"""

import argparse
import os
import re
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APIARY = os.path.join(ROOT, "target/release/apiary")

LOAD = [
    "CREATE TABLE kv AS SELECT g::INTEGER AS k, g * 2 AS v FROM generate_series(1, 1000000) AS s(g)",
    "CREATE TABLE kp (k INTEGER PRIMARY KEY, v BIGINT)",
    "INSERT INTO kp SELECT * FROM kv",
]
TIMED = {
    "one-row upsert": "INSERT INTO kp VALUES (5, {n}) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
    "10,000-row upsert": "INSERT INTO kp SELECT k, v + {n} FROM kv WHERE k % 100 = 0 ON CONFLICT (k) DO UPDATE SET v = excluded.v",
    "10,000-row MERGE": "MERGE INTO kp USING (SELECT k, v FROM kv WHERE k % 100 = 1) AS s ON kp.k = s.k "
    "WHEN MATCHED THEN UPDATE SET v = s.v + {n}",
    "one-row UPDATE": "UPDATE kp SET v = {n} WHERE k = 7",
}


def apiary_times(threads):
    # A warm-up statement of each kind first (n = 0), then the timed one (n = 1).
    statements = [f"SET threads = {threads}"] + LOAD
    for sql in TIMED.values():
        statements += [sql.format(n=0), sql.format(n=1)]
    out = subprocess.run([APIARY, "--timer"], input=";\n".join(statements) + ";\n", capture_output=True, text=True, check=True)
    times = [float(t) for t in re.findall(r"Run Time: ([0-9.]+) s", out.stdout + out.stderr)]
    timed = times[len(LOAD) + 1:]
    return {name: timed[2 * i + 1] for i, name in enumerate(TIMED)}


def duckdb_times(con, round_number):
    result = {}
    for name, sql in TIMED.items():
        con.execute(sql.format(n=2 * round_number))
        started = time.perf_counter()
        con.execute(sql.format(n=2 * round_number + 1))
        result[name] = time.perf_counter() - started
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {args.threads}")
    for sql in LOAD:
        con.execute(sql)
    ours = [apiary_times(args.threads) for _ in range(args.runs)]
    theirs = [duckdb_times(con, r) for r in range(args.runs)]
    print("| statement | Apiary (median) | DuckDB (median) | Apiary / DuckDB |")
    print("|---|---:|---:|---:|")
    for name in TIMED:
        a = statistics.median(r[name] for r in ours)
        d = statistics.median(r[name] for r in theirs)
        print(f"| {name} | {a * 1e3:.2f} ms | {d * 1e3:.2f} ms | {a / d:.2f}x |")


if __name__ == "__main__":
    main()
