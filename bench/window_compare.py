#!/usr/bin/env python3
"""Window functions side by side with DuckDB (issue 13), on TPC-H lineitem, same run.

    bench/.venv/bin/python bench/window_compare.py --sf 1 --threads 2 [--runs 5]

Apiary generates the data in memory (`apiary --tpch SF`, the same generator as the .tbl
files DuckDB loads from bench/data/sf<SF>). Each query is run once to warm up, then
`--runs` times; prints one JSON line per engine and query (median seconds) and the ratio
Apiary / DuckDB. The queries aggregate the window's output so that neither engine spends
the time on returning 6M rows.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tpch_compare  # noqa: E402

QUERIES = {
    "row_number": "SELECT sum(rn) FROM (SELECT row_number() OVER (PARTITION BY l_orderkey ORDER BY l_linenumber) AS rn FROM lineitem) AS t",
    "sliding_avg_100": "SELECT sum(a) FROM (SELECT avg(l_extendedprice) OVER (ORDER BY l_orderkey, l_linenumber ROWS BETWEEN 99 PRECEDING AND CURRENT ROW) AS a FROM lineitem) AS t",
    "rank_by_partition": "SELECT count(*) FROM (SELECT rank() OVER (PARTITION BY l_suppkey ORDER BY l_extendedprice DESC) AS r FROM lineitem) AS t WHERE r <= 3",
    "running_sum": "SELECT max(s) FROM (SELECT sum(l_quantity) OVER (PARTITION BY l_partkey ORDER BY l_shipdate) AS s FROM lineitem) AS t",
    "lag": "SELECT sum(d) FROM (SELECT l_shipdate - lag(l_shipdate) OVER (PARTITION BY l_orderkey ORDER BY l_linenumber) AS d FROM lineitem) AS t",
}


def run_apiary(apiary, sf, threads, runs):
    script = [f"SET threads = {threads}"]
    for sql in QUERIES.values():
        script += [sql] * (runs + 1)
    out = subprocess.run([apiary, "--tpch", f"{sf:g}", "--timer", "--format", "csv", "-c", ";\n".join(script)],
                         capture_output=True, text=True, check=True)
    times = [float(m) for m in re.findall(r"Run Time: ([0-9.]+) s", out.stderr)]
    times = times[-(runs + 1) * len(QUERIES):]
    answers = [line for line in out.stdout.splitlines() if line and not line.startswith("sum") and not line.startswith("max") and not line.startswith("count")]
    results = {}
    for i, name in enumerate(QUERIES):
        mine = times[i * (runs + 1):(i + 1) * (runs + 1)][1:]
        results[name] = {"median_s": statistics.median(mine), "answer": answers[i * (runs + 1)] if answers else None}
    return results


def run_duckdb(data_dir, threads, runs):
    import duckdb
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    tpch_compare.load_duckdb(con, data_dir)
    results = {}
    for name, sql in QUERIES.items():
        answer = con.execute(sql).fetchall()
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            con.execute(sql).fetchall()
            times.append(time.perf_counter() - t)
        results[name] = {"median_s": statistics.median(times), "answer": str(answer[0][0])}
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    apiary = os.path.join(tpch_compare.ROOT, "target/release/apiary")
    data_dir = os.path.join(tpch_compare.ROOT, "bench/data", f"sf{args.sf:g}")
    tpch_compare.ensure_data(args.sf, data_dir, apiary)
    ours = run_apiary(apiary, args.sf, args.threads, args.runs)
    theirs = run_duckdb(data_dir, args.threads, args.runs)
    for name in QUERIES:
        for engine, results in (("apiary", ours), ("duckdb", theirs)):
            print(json.dumps({"measure": "window", "engine": engine, "query": name, "sf": args.sf, "threads": args.threads, **results[name]}))
    print(f"{'query':<20} {'apiary s':>10} {'duckdb s':>10} {'apiary/duckdb':>14}")
    for name in QUERIES:
        a, d = ours[name]["median_s"], theirs[name]["median_s"]
        print(f"{name:<20} {a:>10.3f} {d:>10.3f} {a / d:>14.2f}")


if __name__ == "__main__":
    main()
