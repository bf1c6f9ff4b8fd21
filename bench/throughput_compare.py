#!/usr/bin/env python3
"""Throughput of many clients side by side: N connections each running random TPC-H
queries (drawn substitution parameters) one after another for a while, against one
client, in Apiary, DuckDB and Tableau Hyper, in the same run (issue 12's 32-client target).

    bench/.venv/bin/python bench/throughput_compare.py --sf 1 --threads 2 --clients 32 \
        [--mix 1,...,22] [--seconds 60] [--data DIR]

Apiary runs `apiary bench throughput` itself (its clients draw parameters with
`apiary::tpch_parameters`). DuckDB (one cursor per client thread on one database) and
Hyper (one connection per client to one database file, pinned to --threads cores) draw
each next query from a pool of 20 drawn texts per query that `apiary bench throughput
--print-pool 20` prints: the same distribution of queries and parameters. Prints one
JSON line per engine and client count, then a table of queries per second.
"""

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tpch_compare  # noqa: E402  (the data and DDL helpers)

ROOT = tpch_compare.ROOT
APIARY = os.path.join(ROOT, "target/release/apiary")


def closed_loop(run_on_client, pool, clients, seconds, seed):
    """`clients` threads run random pool queries until `seconds` passed; (queries, span)."""
    by_query = {}
    for text in pool:
        by_query.setdefault(text["query"], []).append(text["sql"])
    numbers = sorted(by_query)
    barrier = threading.Barrier(clients + 1)
    done = [0] * clients
    errors = []

    def client(i):
        rng = random.Random(seed * 1000 + i)
        barrier.wait()
        begin = time.perf_counter()
        while time.perf_counter() - begin < seconds:
            sql = rng.choice(by_query[rng.choice(numbers)])
            try:
                run_on_client(i, sql)
            except Exception as error:  # a failed query invalidates the measurement
                errors.append(error)
                return
            done[i] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    started = time.perf_counter()
    barrier.wait()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return sum(done), time.perf_counter() - started


def measure(label, make_client, args, pool):
    records = []
    for clients in (1, args.clients):
        runners = [make_client() for _ in range(clients)]
        queries, span = closed_loop(lambda i, sql: runners[i](sql), pool, clients, args.seconds, args.seed)
        record = {"measure": "throughput", "engine": label, "sf": args.sf, "threads": args.threads,
                  "clients": clients, "seconds": span, "queries": queries, "queries_per_s": queries / span}
        print(json.dumps(record), flush=True)
        records.append(record)
    return records


def run_duckdb(args, data_dir, pool):
    import duckdb
    con = duckdb.connect()
    con.execute(f"SET threads = {args.threads}")
    tpch_compare.load_duckdb(con, data_dir)

    def make_client():
        cursor = con.cursor()
        return lambda sql: cursor.execute(sql).fetchall()
    return measure("duckdb", make_client, args, pool)


def run_hyper(args, data_dir, pool):
    from tableauhyperapi import Connection, CreateMode
    opened = []
    with tpch_compare.hyper_server(args.threads) as (hyper, workdir):
        database = os.path.join(workdir, "tpch.hyper")
        with Connection(hyper.endpoint, database, CreateMode.CREATE_AND_REPLACE) as con:
            tpch_compare.load_hyper(con, data_dir)

        def make_client():
            connection = Connection(hyper.endpoint, database)
            opened.append(connection)
            return connection.execute_list_query
        try:
            return measure("hyper", make_client, args, pool)
        finally:
            for connection in opened:
                connection.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sf", type=float, default=1)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--mix", default=",".join(str(q) for q in range(1, 23)))
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data", help="directory with <table>.tbl (default bench/data/sf<SF>)")
    parser.add_argument("--engines", default="apiary,duckdb,hyper")
    args = parser.parse_args()
    subprocess.run(["cargo", "build", "--release", "-p", "apiary-cli"], cwd=ROOT, check=True)
    data_dir = args.data or os.path.join(ROOT, "bench", "data", f"sf{args.sf:g}")
    tpch_compare.ensure_data(args.sf, data_dir, APIARY)
    common = ["--sf", f"{args.sf:g}", "--threads", str(args.threads), "--clients", str(args.clients), "--mix", args.mix,
              "--seconds", f"{args.seconds:g}", "--seed", str(args.seed)]
    pool = json.loads(subprocess.run([APIARY, "bench", "throughput", *common, "--print-pool", "20"],
                                     capture_output=True, text=True, check=True).stdout)
    engines = args.engines.split(",")
    results = {}
    if "apiary" in engines:
        output = subprocess.run([APIARY, "bench", "throughput", *common], capture_output=True, text=True,
                                check=True).stdout
        results["apiary"] = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
        for record in results["apiary"]:
            print(json.dumps(record), flush=True)
    if "duckdb" in engines:
        results["duckdb"] = run_duckdb(args, data_dir, pool)
    if "hyper" in engines:
        results["hyper"] = run_hyper(args, data_dir, pool)
    print(f"\nSF{args.sf:g}, {args.threads} threads, mix {args.mix}, random parameters, {args.seconds:g} s per run")
    print(f"| engine | 1 client (queries/s) | {args.clients} clients (queries/s) | ratio |")
    print("|---|---|---|---|")
    for engine, (one, many) in results.items():
        print(f"| {engine} | {one['queries_per_s']:.2f} | {many['queries_per_s']:.2f} | "
              f"{many['queries_per_s'] / one['queries_per_s']:.2f} |")
    if "apiary" in results and "duckdb" in results:
        print(f"\nApiary / DuckDB at {args.clients} clients: "
              f"{results['apiary'][1]['queries_per_s'] / results['duckdb'][1]['queries_per_s']:.2f}x")


if __name__ == "__main__":
    main()
