#!/usr/bin/env python3
"""Work sharing side by side: N concurrent TPC-H queries against running them one after
another, in Apiary, DuckDB and Tableau Hyper, in the same run (issue 12).

    bench/.venv/bin/python bench/concurrent_compare.py --sf 1 --threads 2 --clients 8 \
        --mix 1,3,5,6,9,10,12,14 [--random-params] [--rounds 3] [--data DIR] [--set "SET ..."]

The query texts come from `apiary bench concurrent --print-queries` (the same mix, the
same drawn substitution parameters for every engine). Apiary runs `apiary bench
concurrent` itself; DuckDB runs the clients as one cursor per thread on one database,
Hyper as one connection per thread to one database file (pinned to --threads cores like
bench/tpch_compare.py). Each round: the queries serially (the serial sum), then all at
once, started together (the makespan). Prints one JSON line per engine and round and a
table of the median ratio makespan / serial sum (lower is better; 1.0 is no sharing).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tpch_compare  # noqa: E402  (the data and DDL helpers)

ROOT = tpch_compare.ROOT
APIARY = os.path.join(ROOT, "target/release/apiary")


def apiary_args(args):
    return ["--sf", f"{args.sf:g}", "--threads", str(args.threads), "--clients", str(args.clients), "--mix", args.mix,
            "--seed", str(args.seed), "--rounds", str(args.rounds)] + (["--random-params"] if args.random_params else []) \
        + [a for statement in args.set for a in ("--set", statement)]


def rounds(label, serial_run, concurrent_run, queries, count):
    """Runs `count` rounds of serial-then-concurrent; returns the JSON records."""
    records = []
    for round_ in range(count):
        serial = []
        for sql in queries:
            started = time.perf_counter()
            serial_run(sql)
            serial.append(time.perf_counter() - started)
        makespan, latencies = concurrent_run(queries)
        record = {"measure": "concurrent", "engine": label, "round": round_, "serial_sum_s": sum(serial),
                  "makespan_s": makespan, "ratio": makespan / sum(serial), "serial_s": serial,
                  "concurrent_latency_s": latencies}
        print(json.dumps(record), flush=True)
        records.append(record)
    return records


def concurrently(run_on_client, queries):
    """Runs query i on client i, all started together; (makespan, latencies)."""
    barrier = threading.Barrier(len(queries) + 1)
    spans = [None] * len(queries)
    errors = []

    def client(i, sql):
        barrier.wait()
        started = time.perf_counter()
        try:
            run_on_client(i, sql)
        except Exception as error:  # reported below: a failed query makes the round invalid
            errors.append(error)
        spans[i] = (started, time.perf_counter())

    threads = [threading.Thread(target=client, args=(i, sql)) for i, sql in enumerate(queries)]
    for t in threads:
        t.start()
    barrier.wait()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return max(s[1] for s in spans) - min(s[0] for s in spans), [s[1] - s[0] for s in spans]


def run_duckdb(args, data_dir, queries):
    import duckdb
    con = duckdb.connect()
    con.execute(f"SET threads = {args.threads}")
    tpch_compare.load_duckdb(con, data_dir)
    cursors = [con.cursor() for _ in queries]
    for sql in queries:
        con.execute(sql).fetchall()
    return rounds("duckdb", lambda sql: con.execute(sql).fetchall(),
                  lambda qs: concurrently(lambda i, sql: cursors[i].execute(sql).fetchall(), qs), queries, args.rounds)


def run_hyper(args, data_dir, queries):
    from tableauhyperapi import Connection, CreateMode
    with tpch_compare.hyper_server(args.threads) as (hyper, workdir):
        database = os.path.join(workdir, "tpch.hyper")
        with Connection(hyper.endpoint, database, CreateMode.CREATE_AND_REPLACE) as con:
            tpch_compare.load_hyper(con, data_dir)
        clients = [Connection(hyper.endpoint, database) for _ in queries]
        try:
            for sql in queries:
                clients[0].execute_list_query(sql)
            return rounds("hyper", lambda sql: clients[0].execute_list_query(sql),
                          lambda qs: concurrently(lambda i, sql: clients[i].execute_list_query(sql), qs), queries,
                          args.rounds)
        finally:
            for client in clients:
                client.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sf", type=float, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--mix", default="1,3,5,6,9,10,12,14")
    parser.add_argument("--random-params", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--set", action="append", default=[],
                        help="a SET statement for Apiary's connections, e.g. \"SET shared_operators = on\" (repeatable)")
    parser.add_argument("--data", help="directory with <table>.tbl (default bench/data/sf<SF>)")
    args = parser.parse_args()
    subprocess.run(["cargo", "build", "--release", "-p", "apiary-cli"], cwd=ROOT, check=True)
    data_dir = args.data or os.path.join(ROOT, "bench", "data", f"sf{args.sf:g}")
    tpch_compare.ensure_data(args.sf, data_dir, APIARY)
    texts = json.loads(subprocess.run([APIARY, "bench", "concurrent", *apiary_args(args), "--print-queries"],
                                      capture_output=True, text=True, check=True).stdout)
    queries = [t["sql"] for t in texts]
    output = subprocess.run([APIARY, "bench", "concurrent", *apiary_args(args)], capture_output=True, text=True,
                            check=True).stdout
    results = {"apiary": [json.loads(line) for line in output.splitlines() if line.startswith("{")]}
    for record in results["apiary"]:
        print(json.dumps(record), flush=True)
    results["duckdb"] = run_duckdb(args, data_dir, queries)
    results["hyper"] = run_hyper(args, data_dir, queries)
    mode = "random parameters" if args.random_params else "validation parameters"
    print(f"\nSF{args.sf:g}, {args.threads} threads, {args.clients} clients, mix {args.mix}, {mode}, "
          f"median of {args.rounds} rounds")
    print("| engine | serial sum (s) | makespan (s) | makespan / serial sum |")
    print("|---|---|---|---|")
    for engine, records in results.items():
        serial = statistics.median(r["serial_sum_s"] for r in records)
        makespan = statistics.median(r["makespan_s"] for r in records)
        ratio = statistics.median(r["ratio"] for r in records)
        print(f"| {engine} | {serial:.3f} | {makespan:.3f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
