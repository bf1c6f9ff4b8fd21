#!/usr/bin/env python3
"""Throughput over the wire: 8 clients, each running the 22 TPC-H queries in its own
random order, against one client running them serially; DuckDB (Python, one cursor per
thread, same data, same run) as the reference.

    bench/.venv/bin/python bench/server_throughput.py --sf 1 --clients 8 --threads 2

Apiary runs as `target/release/apiary serve --tpch SF --threads N`; the clients are
psycopg 3 connections on Python threads (they wait on the network with the GIL
released). DuckDB loads bench/data/sf<SF>/*.tbl with the same DDL and runs with N
threads. Prints queries per second for both set-ups and their ratio. Needs bench/setup.sh.
"""

import argparse
import json
import os
import random
import threading
import time

import duckdb
import psycopg

from server_common import apiary_conninfo, build, machine, schema_sql, start_apiary, tbl_dir, ROOT, TABLES


def queries():
    return [open(os.path.join(ROOT, f"tpch/queries/q{q:02d}.sql")).read() for q in range(1, 23)]


def run_clients(clients, make_runner, texts):
    """Each client runs every query once in its own order; returns (seconds, queries)."""
    errors = []

    def client(seed):
        try:
            run = make_runner()
            order = list(range(len(texts)))
            random.Random(seed).shuffle(order)
            for q in order:
                run(texts[q])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(seed,)) for seed in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(errors[:3])
    return elapsed, clients * len(texts)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sf", type=float, default=1)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--port", type=int, default=55434)
    args = parser.parse_args()
    build()
    texts = queries()
    report = {"machine": machine(), "sf": args.sf, "clients": args.clients, "threads": args.threads, "date": time.strftime("%Y-%m-%d")}

    server = start_apiary(args.sf, args.port, args.threads)
    try:
        def apiary_runner():
            conn = psycopg.connect(apiary_conninfo(args.port), autocommit=True)
            cur = conn.cursor()

            def run(sql):
                cur.execute(sql)
                cur.fetchall()

            return run

        run_clients(1, apiary_runner, texts)  # warm-up
        serial = run_clients(1, apiary_runner, texts)
        concurrent = run_clients(args.clients, apiary_runner, texts)
        report["apiary"] = {"serial_qps": serial[1] / serial[0], "concurrent_qps": concurrent[1] / concurrent[0]}
    finally:
        server.terminate()
        server.wait()

    directory = tbl_dir(args.sf)
    con = duckdb.connect()
    con.execute(f"SET threads = {args.threads}")
    for statement in schema_sql().split(";"):
        if statement.strip():
            con.execute(statement)
    for table in TABLES:
        con.execute(f"COPY {table} FROM '{os.path.join(directory, table + '.tbl')}' (DELIMITER '|')")

    def duckdb_runner():
        cur = con.cursor()

        def run(sql):
            cur.execute(sql).fetchall()

        return run

    run_clients(1, duckdb_runner, texts)
    serial = run_clients(1, duckdb_runner, texts)
    concurrent = run_clients(args.clients, duckdb_runner, texts)
    report["duckdb"] = {"serial_qps": serial[1] / serial[0], "concurrent_qps": concurrent[1] / concurrent[0]}
    print(json.dumps(report, indent=1))
    for engine in ("apiary", "duckdb"):
        r = report[engine]
        print(f"| {engine} | {r['serial_qps']:.2f} | {r['concurrent_qps']:.2f} | {r['concurrent_qps'] / r['serial_qps']:.2f} |")


if __name__ == "__main__":
    main()
