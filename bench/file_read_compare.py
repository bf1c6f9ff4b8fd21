#!/usr/bin/env python3
"""Reading files side by side: Apiary, DuckDB and Hyper querying the same Parquet and CSV
files straight from disk (no load step), in the same run.

    bench/.venv/bin/python bench/file_read_compare.py [--rows 600000] [--runs 5] [--threads 2]

bench/setup.sh installs DuckDB and tableauhyperapi into bench/.venv; Apiary is the release
binary (target/release/apiary, built when missing). The files are written once by DuckDB
into --dir: a Parquet file of --rows rows (an integer key, a DOUBLE, a DATE, a short
low-cardinality string, a 60-byte string: about 5 MB at the default) and the same rows as
CSV. Each query runs --runs times in one process per engine after a warm-up run (the file
stays in the OS cache); the median is reported, and the ratio to DuckDB. Hyper reads only
the Parquet file (its CSV reader needs the columns declared).
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
APIARY = os.path.join(ROOT, "target", "release", "apiary")

QUERIES = [
    ("count", "SELECT count(*) FROM {f}"),
    ("one column", "SELECT sum(price) FROM {f}"),
    ("filter + group", "SELECT tag, count(*), avg(price) FROM {f} WHERE day >= DATE '2021-01-01' GROUP BY tag ORDER BY tag"),
    ("all columns", "SELECT count(DISTINCT id), sum(price), max(day), max(tag), max(note) FROM {f}"),
]


def make_files(directory, rows):
    import duckdb

    os.makedirs(directory, exist_ok=True)
    parquet = os.path.join(directory, f"bench_{rows}.parquet")
    csv = os.path.join(directory, f"bench_{rows}.csv")
    if not (os.path.exists(parquet) and os.path.exists(csv)):
        con = duckdb.connect()
        con.execute(
            f"""CREATE TABLE t AS SELECT i AS id, (i % 10007) * 1.25 AS price,
                DATE '2020-01-01' + (i % 1500)::INTEGER AS day, 'tag' || (i % 25) AS tag,
                md5(i::VARCHAR) || '-' || md5((i * 7)::VARCHAR) AS note FROM range(0, {rows}) r(i)"""
        )
        con.execute(f"COPY t TO '{parquet}' (FORMAT parquet)")
        con.execute(f"COPY t TO '{csv}' (HEADER)")
    return parquet, csv


def apiary_times(sql, runs, threads):
    script = f"SET threads = {threads};\n" + ";\n".join([sql] * (runs + 1)) + ";"
    out = subprocess.run([APIARY, "--timer", "-c", script], capture_output=True, text=True, check=True)
    times = [float(t) for t in re.findall(r"Run Time: ([0-9.]+) s", out.stdout + out.stderr)]
    return statistics.median(times[-runs:])


def duckdb_times(sql, runs, threads):
    import duckdb

    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    con.execute(sql).fetchall()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        con.execute(sql).fetchall()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def hyper_times(sql, runs, threads):
    from tableauhyperapi import Connection, HyperProcess, Telemetry

    parameters = {"max_query_size": "10000000000", "log_config": ""}
    if threads:
        parameters["hard_concurrent_query_thread_limit"] = str(threads)
    with HyperProcess(Telemetry.DO_NOT_SEND_USAGE_DATA_TO_TABLEAU, parameters=parameters) as hyper:
        with Connection(hyper.endpoint) as con:
            con.execute_list_query(sql)
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                con.execute_list_query(sql)
                times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=600_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dir", default=os.path.join(BENCH, "data", "files"))
    args = parser.parse_args()
    if not os.path.exists(APIARY):
        subprocess.run(["cargo", "build", "--release", "-p", "apiary-cli"], cwd=ROOT, check=True)
    parquet, csv = make_files(args.dir, args.rows)
    print(f"Parquet {os.path.getsize(parquet) / 1e6:.1f} MB, CSV {os.path.getsize(csv) / 1e6:.1f} MB, {args.rows} rows, {args.threads} threads")
    print(f"{'file':8} {'query':16} {'apiary ms':>10} {'duckdb ms':>10} {'hyper ms':>9} {'apiary/duckdb':>14} {'apiary/hyper':>13}")
    for kind, path in [("parquet", parquet), ("csv", csv)]:
        for name, template in QUERIES:
            a = apiary_times(template.format(f=f"'{path}'"), args.runs, args.threads)
            d = duckdb_times(template.format(f=f"'{path}'"), args.runs, args.threads)
            h = hyper_times(template.format(f=f"external('{path}')"), args.runs, args.threads) if kind == "parquet" else None
            hyper = f"{h * 1000:9.1f}" if h else f"{'-':>9}"
            ratio_h = f"{a / h:13.2f}" if h else f"{'-':>13}"
            print(f"{kind:8} {name:16} {a * 1000:10.1f} {d * 1000:10.1f} {hyper} {a / d:14.2f} {ratio_h}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
