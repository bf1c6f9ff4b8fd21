#!/usr/bin/env python3
"""Changing data side by side: Apiary, DuckDB and Tableau Hyper on the same TPC-H data, in the same run.

    bash bench/setup.sh                       # bench/.venv: duckdb, tableauhyperapi
    bench/.venv/bin/python bench/dml_compare.py --sf 1 --threads 2 --runs 3 [--json out.json] [--no-build]

Installs Apiary's Python package (release) into this interpreter's virtual environment
(`maturin develop --release`, skip with --no-build), writes the TPC-H .tbl files once
(bench/data/sf<SF>, `apiary tpch-gen` through `CALL dbgen` + COPY TO) and loads them into
all three engines with the same DDL. Every engine then runs the same statements:

1. scans after changes (issue 16's first target): the 22 TPC-H queries (median of --runs
   after a warm-up, geometric mean) on the loaded data; again after deleting 1% of
   lineitem (`l_orderkey % 100 = 1`) and updating another 1% (`% 100 = 2`); again after
   CHECKPOINT (Apiary compacts the deleted rows away; DuckDB runs CHECKPOINT too, Hyper
   has none). Reported per engine as the ratio to its own unmodified time.
2. the refresh functions at 0.1% (the second target): RF1 inserts new orders and their
   lineitems from staging tables (staged untimed), RF2 deletes 0.1% of the orders and
   their lineitems by key (`DELETE ... WHERE key IN (SELECT k FROM rf2_keys)`). Times per
   engine and Apiary's ratio to DuckDB and to Hyper.
3. upserts on a keyed copy of orders (`keyed (k BIGINT PRIMARY KEY, v DECIMAL(15,2))`,
   loaded untimed): `INSERT ... ON CONFLICT (k) DO UPDATE` of 0.1% existing and 0.1% new
   keys, the same change as `MERGE`, and one single-row upsert (median of --runs * 5).
   Apiary and DuckDB (Hyper has neither statement).

Engines are pinned to the first --threads cores when that is fewer than the machine's.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from python_compare import median_time  # noqa: E402
from tpch_compare import TABLES, hyper_server, load_duckdb, load_hyper, pinned, query_text, schema_sql  # noqa: E402

QUERIES = list(range(1, 23))
# 1% of lineitem deleted, another 1% updated (spread over every block: keys are dense).
DELETE_1PCT = "DELETE FROM lineitem WHERE l_orderkey % 100 = 1"
UPDATE_1PCT = "UPDATE lineitem SET l_tax = l_tax + 0.01, l_comment = upper(l_comment) WHERE l_orderkey % 100 = 2"
# Refresh functions at 0.1% of the orders: new orders (keys past the largest) and old ones.
STAGE = [
    "CREATE TABLE rf1_orders AS SELECT o_orderkey + 100000000 AS o_orderkey, o_custkey, o_orderstatus, o_totalprice, "
    "o_orderdate, o_orderpriority, o_clerk, o_shippriority, o_comment FROM orders WHERE o_orderkey % 1000 = 3",
    "CREATE TABLE rf1_lineitem AS SELECT l_orderkey + 100000000 AS l_orderkey, l_partkey, l_suppkey, l_linenumber, "
    "l_quantity, l_extendedprice, l_discount, l_tax, l_returnflag, l_linestatus, l_shipdate, l_commitdate, "
    "l_receiptdate, l_shipinstruct, l_shipmode, l_comment FROM lineitem WHERE l_orderkey % 1000 = 3",
    "CREATE TABLE rf2_keys AS SELECT o_orderkey AS k FROM orders WHERE o_orderkey % 1000 = 5",
]
RF1 = ["INSERT INTO orders SELECT * FROM rf1_orders", "INSERT INTO lineitem SELECT * FROM rf1_lineitem"]
RF2 = ["DELETE FROM orders WHERE o_orderkey IN (SELECT k FROM rf2_keys)",
       "DELETE FROM lineitem WHERE l_orderkey IN (SELECT k FROM rf2_keys)"]
COUNTS = "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM lineitem)"
# Upserts: 0.1% of the orders' keys changed and as many new keys, by ON CONFLICT and by MERGE.
KEYED = ["CREATE TABLE keyed (k BIGINT PRIMARY KEY, v DECIMAL(15,2))", "INSERT INTO keyed SELECT o_orderkey, o_totalprice FROM orders"]
CHANGES = ("SELECT o_orderkey AS k, o_totalprice + {delta} AS v FROM orders WHERE o_orderkey % 1000 = 7 "
           "UNION ALL SELECT o_orderkey + {offset} AS k, o_totalprice AS v FROM orders WHERE o_orderkey % 1000 = 7")
UPSERT = "INSERT INTO keyed " + CHANGES.format(delta=1, offset=300000000) + " ON CONFLICT (k) DO UPDATE SET v = excluded.v"
MERGE = ("MERGE INTO keyed USING (" + CHANGES.format(delta=2, offset=400000000) + ") AS s ON keyed.k = s.k "
         "WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT VALUES (s.k, s.v)")
SINGLE_UPSERT = "INSERT INTO keyed VALUES (7, 1.00) ON CONFLICT (k) DO UPDATE SET v = keyed.v + excluded.v"


def build():
    env = dict(os.environ, VIRTUAL_ENV=os.path.dirname(os.path.dirname(sys.executable)))
    maturin = os.path.join(ROOT, "python", ".venv", "bin", "maturin")
    if not os.path.exists(maturin):
        raise SystemExit("python/.venv/bin/maturin is missing: run `bash python/setup.sh` first")
    subprocess.run([maturin, "develop", "--release", "--quiet", "-m", os.path.join(ROOT, "python", "Cargo.toml")],
                   check=True, env=env)
    # A first install's .pth file was not there when this interpreter started.
    import site
    for directory in site.getsitepackages():
        site.addsitedir(directory)


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


class Engine:
    """One engine behind the same few calls: run a statement, time a query."""

    def __init__(self, name, execute, fetch):
        self.name, self.execute, self.fetch = name, execute, fetch

    def timed(self, statements):
        started = time.perf_counter()
        for sql in statements:
            self.execute(sql)
        return time.perf_counter() - started

    def query_times(self, runs):
        """Median seconds per TPC-H query, after one warm-up run each."""
        return {q: median_time(lambda sql=query_text(q): self.fetch(sql), runs) for q in QUERIES}


def measure_upserts(engine, runs):
    """Bulk upsert, MERGE and single-row upsert times on the keyed copy of orders."""
    for sql in KEYED:
        engine.execute(sql)
    before = engine.fetch("SELECT count(*) FROM keyed")[0][0]
    result = {"upsert_s": engine.timed([UPSERT]), "merge_s": engine.timed([MERGE])}
    result["upsert_rows_added"] = engine.fetch("SELECT count(*) FROM keyed")[0][0] - before
    result["single_upsert_s"] = median_time(lambda: engine.execute(SINGLE_UPSERT), runs * 5)
    return result


def measure(engine, runs, checkpoint):
    """The scan and refresh measurements on one loaded engine."""
    result = {}
    base = engine.query_times(runs)
    result["changes_s"] = {"delete_1pct": engine.timed([DELETE_1PCT]), "update_1pct": engine.timed([UPDATE_1PCT])}
    changed = engine.query_times(runs)
    result["counts_after_changes"] = list(engine.fetch(COUNTS)[0])
    if checkpoint:
        result["changes_s"]["checkpoint"] = engine.timed(["CHECKPOINT"])
        compacted = engine.query_times(runs)
    else:
        compacted = None
    result["geomean_s"] = {"unmodified": geomean(base.values()), "after_changes": geomean(changed.values())}
    result["scan_ratio_after_changes"] = geomean([changed[q] / base[q] for q in QUERIES])
    if compacted:
        result["geomean_s"]["after_checkpoint"] = geomean(compacted.values())
        result["scan_ratio_after_checkpoint"] = geomean([compacted[q] / base[q] for q in QUERIES])
    result["per_query_s"] = {"unmodified": base, "after_changes": changed, "after_checkpoint": compacted}
    for sql in STAGE:
        engine.execute(sql)
    before = list(engine.fetch(COUNTS)[0])
    result["rf1_s"] = engine.timed(RF1)
    after_rf1 = list(engine.fetch(COUNTS)[0])
    result["rf2_s"] = engine.timed(RF2)
    after_rf2 = list(engine.fetch(COUNTS)[0])
    result["rf_rows"] = {"inserted": [a - b for a, b in zip(after_rf1, before)], "deleted": [a - b for a, b in zip(after_rf1, after_rf2)]}
    if engine.name != "hyper":
        result["upserts"] = measure_upserts(engine, runs)
    return result


def run_apiary(data_dir, threads, runs):
    import apiary
    con = apiary.connect(config={"threads": threads})
    con.execute(schema_sql())
    for t in TABLES:
        con.execute(f"COPY {t} FROM '{os.path.join(data_dir, t + '.tbl')}' (DELIMITER '|')")
    engine = Engine("apiary", lambda sql: con.execute(sql), lambda sql: con.execute(sql).fetchall())
    return measure(engine, runs, checkpoint=True)


def run_duckdb(data_dir, threads, runs):
    import duckdb
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    load_duckdb(con, data_dir)
    engine = Engine("duckdb", lambda sql: con.execute(sql), lambda sql: con.execute(sql).fetchall())
    return measure(engine, runs, checkpoint=True)


def run_hyper(data_dir, threads, runs):
    from tableauhyperapi import Connection, CreateMode
    with hyper_server(threads) as (hyper, workdir):
        with Connection(hyper.endpoint, os.path.join(workdir, "dml.hyper"), CreateMode.CREATE_AND_REPLACE) as con:
            load_hyper(con, data_dir)
            engine = Engine("hyper", con.execute_command, con.execute_list_query)
            return measure(engine, runs, checkpoint=False)


def ensure_data(sf, data_dir):
    if all(os.path.exists(os.path.join(data_dir, f"{t}.tbl")) for t in TABLES):
        return
    import apiary
    os.makedirs(data_dir, exist_ok=True)
    con = apiary.connect()
    con.execute(f"CALL dbgen(sf = {sf})")
    for t in TABLES:
        con.execute(f"COPY {t} TO '{os.path.join(data_dir, t + '.tbl')}' (DELIMITER '|')")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sf", type=float, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--data", help="directory of the .tbl files (default bench/data/sf<SF>)")
    parser.add_argument("--engines", default="apiary,duckdb,hyper")
    parser.add_argument("--no-build", action="store_true")
    parser.add_argument("--json", help="write the measurements here")
    args = parser.parse_args()
    if not args.no_build:
        build()
    data_dir = args.data or os.path.join(ROOT, "bench", "data", f"sf{args.sf:g}")
    ensure_data(args.sf, data_dir)
    results = {}
    runners = {"apiary": run_apiary, "duckdb": run_duckdb, "hyper": run_hyper}
    for name in args.engines.split(","):
        with pinned(args.threads):
            results[name] = runners[name](data_dir, args.threads, args.runs)
        r = results[name]
        after_checkpoint = r.get("scan_ratio_after_checkpoint")
        print(f"{name:7} scans after 1% deleted + 1% updated: {r['scan_ratio_after_changes']:.3f}x"
              + (f", after CHECKPOINT: {after_checkpoint:.3f}x" if after_checkpoint else "")
              + f"; RF1 {r['rf1_s'] * 1e3:.1f} ms, RF2 {r['rf2_s'] * 1e3:.1f} ms (rows {r['rf_rows']});"
              + f" delete 1% {r['changes_s']['delete_1pct'] * 1e3:.0f} ms, update 1% {r['changes_s']['update_1pct'] * 1e3:.0f} ms",
              flush=True)
    if "apiary" in results:
        ours = results["apiary"]
        for other in [n for n in results if n != "apiary"]:
            theirs = results[other]
            print(f"apiary/{other}: RF1 {ours['rf1_s'] / theirs['rf1_s']:.2f}x, RF2 {ours['rf2_s'] / theirs['rf2_s']:.2f}x, "
                  f"TPC-H unmodified {ours['geomean_s']['unmodified'] / theirs['geomean_s']['unmodified']:.2f}x, "
                  f"after changes {ours['geomean_s']['after_changes'] / theirs['geomean_s']['after_changes']:.2f}x")
            if "upserts" in theirs:
                a, b = ours["upserts"], theirs["upserts"]
                print(f"apiary/{other}: upsert {a['upsert_s'] / b['upsert_s']:.2f}x, MERGE {a['merge_s'] / b['merge_s']:.2f}x, "
                      f"single-row upsert {a['single_upsert_s'] / b['single_upsert_s']:.2f}x "
                      f"(apiary {a['upsert_s'] * 1e3:.1f} / {a['merge_s'] * 1e3:.1f} / {a['single_upsert_s'] * 1e3:.2f} ms)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"sf": args.sf, "threads": args.threads, "runs": args.runs, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
