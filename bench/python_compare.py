"""Apiary's Python package side by side with DuckDB's, in the same process and run.

    bash python/setup.sh                        # python/.venv with duckdb, pandas, polars, pinned
    python/.venv/bin/python bench/python_compare.py --sf 1 --threads 2 --runs 5 [--json out.json]

Builds and installs the package in release mode (`maturin develop --release`; skip with
--no-build), generates TPC-H in Apiary (`CALL dbgen`) and hands the same tables to DuckDB
through Arrow, then measures (medians of --runs, after one warm-up):

1. the 22 TPC-H queries as `con.sql(q).arrow()` (DuckDB: `.arrow().read_all()`), and
   Apiary's overhead per query: the Python call's time minus the engine's own time
   (`Relation.engine_seconds`, parse to result);
2. fetching all of lineitem (6M rows at SF1) as Arrow, pandas and Polars;
3. `SELECT g, sum(x), count(*) FROM df GROUP BY g` over a 10M-row pandas DataFrame
   registered with both connections (both engines scan it in place).

Ratios are Apiary's time over DuckDB's (below 1: Apiary is faster).
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build():
    env = dict(os.environ, VIRTUAL_ENV=os.path.dirname(os.path.dirname(sys.executable)))
    subprocess.run([os.path.join(os.path.dirname(sys.executable), "maturin"), "develop", "--release", "--quiet", "-m",
                    os.path.join(ROOT, "python", "Cargo.toml")], check=True, env=env)


def median_time(fn, runs):
    fn()  # warm-up
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sf", type=float, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rows", type=int, default=10_000_000, help="rows of the pandas DataFrame")
    parser.add_argument("--no-build", action="store_true")
    parser.add_argument("--json", help="write the measurements here")
    args = parser.parse_args()
    if not args.no_build:
        build()

    import duckdb
    import numpy as np
    import pandas as pd

    import apiary

    print(f"apiary {apiary.__version__} ({apiary._apiary.__file__}), duckdb {duckdb.__version__}", file=sys.stderr)
    con = apiary.connect(config={"threads": args.threads})
    duck = duckdb.connect(config={"threads": args.threads})
    started = time.perf_counter()
    con.execute(f"CALL dbgen(sf = {args.sf})")
    print(f"apiary dbgen sf{args.sf:g}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    for table in ["region", "nation", "part", "supplier", "partsupp", "customer", "orders", "lineitem"]:
        data = con.table(table).arrow()  # noqa: F841 (DuckDB reads it by name)
        duck.execute(f"CREATE TABLE {table} AS SELECT * FROM data")
        del data
    report = {"sf": args.sf, "threads": args.threads, "runs": args.runs, "tpch": {}, "fetch": {}, "dataframe": {}}

    # 1. TPC-H through Python, as Arrow tables.
    skip_tpch = os.environ.get("SKIP_TPCH")
    print(f"{'query':>5} {'apiary s':>9} {'engine s':>9} {'overhead ms':>11} {'duckdb s':>9} {'ratio':>6}")
    for number in ([] if skip_tpch else range(1, 23)):
        sql = open(os.path.join(ROOT, "tpch", "queries", f"q{number:02}.sql")).read()
        engine = []

        def run_apiary():
            rel = con.sql(sql)
            rel.arrow()
            engine.append(rel.engine_seconds)

        ours = median_time(run_apiary, args.runs)
        engine_time = statistics.median(engine[1:])
        theirs = median_time(lambda: duck.sql(sql).arrow().read_all(), args.runs)
        overhead_ms = (ours - engine_time) * 1000
        report["tpch"][number] = {"apiary": ours, "engine": engine_time, "overhead_ms": overhead_ms, "duckdb": theirs}
        print(f"{'Q' + str(number):>5} {ours:9.4f} {engine_time:9.4f} {overhead_ms:11.3f} {theirs:9.4f} {ours / theirs:6.2f}", flush=True)
    ratios = [r["apiary"] / r["duckdb"] for r in report["tpch"].values()] or [1]
    overheads = [r["overhead_ms"] for r in report["tpch"].values()] or [0]
    print(f"TPC-H geomean ratio apiary/duckdb: {geomean(ratios):.2f}; overhead ms: median {statistics.median(overheads):.3f}, "
          f"max {max(overheads):.3f}")
    report["tpch_geomean_ratio"] = geomean(ratios)
    report["tpch_overhead_ms_max"] = max(overheads)

    # 2. All of lineitem into Python.
    fetches = {
        "arrow": (lambda: con.sql("SELECT * FROM lineitem").arrow(), lambda: duck.sql("SELECT * FROM lineitem").arrow().read_all()),
        "pandas": (lambda: con.sql("SELECT * FROM lineitem").df(), lambda: duck.sql("SELECT * FROM lineitem").df()),
        "polars": (lambda: con.sql("SELECT * FROM lineitem").pl(), lambda: duck.sql("SELECT * FROM lineitem").pl()),
    }
    for name, (ours_fn, theirs_fn) in fetches.items():
        ours = median_time(ours_fn, args.runs)
        theirs = median_time(theirs_fn, args.runs)
        report["fetch"][name] = {"apiary": ours, "duckdb": theirs}
        print(f"lineitem as {name:6}: apiary {ours:.3f} s, duckdb {theirs:.3f} s, ratio {ours / theirs:.2f}", flush=True)

    # 3. A pandas DataFrame scanned in place.
    rng = np.random.default_rng(42)
    df = pd.DataFrame({"g": rng.integers(0, 1000, args.rows), "x": rng.random(args.rows)})
    con.register("df", df)
    duck.register("df", df)
    query = "SELECT g, sum(x), count(*) FROM df GROUP BY g"
    ours = median_time(lambda: con.sql(query).arrow(), args.runs)
    theirs = median_time(lambda: duck.sql(query).arrow().read_all(), args.runs)
    a = sorted(con.sql(query).fetchall())
    b = sorted(duck.sql(query).fetchall())
    assert len(a) == len(b) and all(x[0] == y[0] and x[2] == y[2] and abs(x[1] - y[1]) < 1e-6 * abs(y[1]) for x, y in zip(a, b))
    report["dataframe"] = {"rows": args.rows, "apiary": ours, "duckdb": theirs}
    print(f"pandas {args.rows} rows GROUP BY: apiary {ours:.3f} s, duckdb {theirs:.3f} s, ratio {ours / theirs:.2f}")

    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
