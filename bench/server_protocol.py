#!/usr/bin/env python3
"""Protocol overhead and cancellation, Apiary's server side by side with PostgreSQL 15.

    bench/.venv/bin/python bench/server_protocol.py --sf 1 --pg-port 5433

* SELECT 1 round trips per second over the extended protocol from one client: pgbench
  (`-M extended`, C, no client overhead to speak of) and psycopg 3 (`prepare=True`).
* The time to stream all lineitem rows (6M at SF1) to psycopg (`cursor.stream`, text).
* Cancellation (Apiary only): TPC-H Q18 cancelled 300 ms after it starts; the time from
  the cancel request to the client's error, and the server's memory before and after.

PostgreSQL must be running on --pg-port (trust authentication for user postgres), e.g.
  su postgres -c "/usr/lib/postgresql/15/bin/pg_ctl -D /tmp/pgdata -o '-p 5433 -k /tmp' -l /tmp/pg.log start"
lineitem is loaded into it from bench/data/sf<SF>/ on the first run. Apiary runs as
`target/release/apiary serve --tpch SF --threads 2`. Needs bench/setup.sh (psycopg).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import psycopg

from server_common import apiary_conninfo, build, load_postgres, machine, pg_conninfo, rss_mb, start_apiary, ROOT


def pgbench_select1(port, user, dbname, seconds):
    script = tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False)
    script.write("SELECT 1;\n")
    script.close()
    output = subprocess.run(
        ["pgbench", "-n", "-M", "extended", "-c", "1", "-T", str(seconds), "-f", script.name,
         "-h", "127.0.0.1", "-p", str(port), "-U", user, dbname],
        capture_output=True, text=True, check=True,
    ).stdout
    os.unlink(script.name)
    for line in output.splitlines():
        if line.startswith("tps ="):
            return float(line.split()[2])
    raise RuntimeError(output)


def psycopg_select1(conninfo, seconds):
    with psycopg.connect(conninfo, autocommit=True) as conn:
        cur = conn.cursor()
        for _ in range(100):
            cur.execute("SELECT 1", prepare=True)
            cur.fetchone()
        count = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            cur.execute("SELECT 1", prepare=True)
            cur.fetchone()
            count += 1
        return count / (time.perf_counter() - started)


def psycopg_parameters(conninfo, seconds):
    """Round trips/s of a prepared statement with a parameter, a new value each time."""
    sql = "SELECT n_name, r_name FROM nation JOIN region ON n_regionkey = r_regionkey WHERE n_nationkey = %s"
    with psycopg.connect(conninfo, autocommit=True) as conn:
        cur = conn.cursor()
        for key in range(100):
            cur.execute(sql, (key % 25,), prepare=True)
            assert len(cur.fetchall()) == 1
        count = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            cur.execute(sql, (count % 25,), prepare=True)
            cur.fetchall()
            count += 1
        return count / (time.perf_counter() - started)


def stream_lineitem(conninfo, runs):
    times = []
    rows = 0
    for _ in range(runs):
        with psycopg.connect(conninfo, autocommit=True) as conn:
            cur = conn.cursor()
            started = time.perf_counter()
            rows = sum(1 for _ in cur.stream("SELECT * FROM lineitem"))
            times.append(time.perf_counter() - started)
    return statistics.median(times), rows


def cancel_q18(conninfo, pid, runs):
    q18 = open(os.path.join(ROOT, "tpch/queries/q18.sql")).read()
    results = []
    with psycopg.connect(conninfo, autocommit=True) as conn:
        cur = conn.cursor()
        started = time.perf_counter()
        cur.execute(q18)
        cur.fetchall()
        alone = time.perf_counter() - started
        idle = rss_mb(pid)
        for _ in range(runs):
            done = {}

            def run():
                try:
                    cur.execute(q18)
                    cur.fetchall()
                    done["outcome"] = "finished"
                except psycopg.errors.QueryCanceled:
                    done["outcome"] = "cancelled"
                done["at"] = time.perf_counter()

            thread = threading.Thread(target=run)
            thread.start()
            time.sleep(min(0.3, alone / 3))
            peak = rss_mb(pid)
            sent = time.perf_counter()
            conn.cancel_safe()
            thread.join()
            time.sleep(0.5)
            results.append({"outcome": done["outcome"], "ms": (done["at"] - sent) * 1000, "rss_running_mb": peak, "rss_after_mb": rss_mb(pid)})
    return alone, idle, results


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sf", type=float, default=1)
    parser.add_argument("--pg-port", type=int, default=5433)
    parser.add_argument("--port", type=int, default=55433)
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    build()
    load_postgres(args.pg_port, args.sf)
    server = start_apiary(args.sf, args.port, args.threads)
    try:
        apiary, postgres = apiary_conninfo(args.port), pg_conninfo(args.pg_port)
        report = {"machine": machine(), "sf": args.sf, "date": time.strftime("%Y-%m-%d")}
        report["pgbench_select1_tps"] = {
            "apiary": pgbench_select1(args.port, "bench", "apiary", args.seconds),
            "postgres": pgbench_select1(args.pg_port, "postgres", "postgres", args.seconds),
        }
        report["psycopg_select1_per_s"] = {
            "apiary": psycopg_select1(apiary, args.seconds),
            "postgres": psycopg_select1(postgres, args.seconds),
        }
        report["psycopg_parameters_per_s"] = {
            "apiary": psycopg_parameters(apiary, args.seconds),
            "postgres": psycopg_parameters(postgres, args.seconds),
        }
        apiary_s, apiary_rows = stream_lineitem(apiary, args.runs)
        postgres_s, postgres_rows = stream_lineitem(postgres, args.runs)
        assert apiary_rows == postgres_rows, (apiary_rows, postgres_rows)
        report["stream_lineitem_s"] = {"apiary": apiary_s, "postgres": postgres_s, "rows": apiary_rows}
        alone, idle, cancels = cancel_q18(apiary, server.pid, args.runs)
        report["cancel_q18"] = {"q18_alone_s": alone, "rss_idle_mb": idle, "runs": cancels}
        print(json.dumps(report, indent=1))
        print(f"\n{report['machine']}, SF{args.sf:g}, {report['date']}")
        for name, key, better in [
            ("SELECT 1 round trips/s (pgbench, extended)", "pgbench_select1_tps", "higher"),
            ("SELECT 1 round trips/s (psycopg, prepared)", "psycopg_select1_per_s", "higher"),
            ("nation-region join by $1 round trips/s (psycopg, prepared)", "psycopg_parameters_per_s", "higher"),
            ("stream lineitem to psycopg (s)", "stream_lineitem_s", "lower"),
        ]:
            a, p = report[key]["apiary"], report[key]["postgres"]
            print(f"| {name} | {a:,.1f} | {p:,.1f} | {a / p:.2f} ({better} is better) |")
        for run in cancels:
            print(f"cancel Q18: {run['outcome']} {run['ms']:.0f} ms after the request; RSS {run['rss_running_mb']:.0f} MB running, {run['rss_after_mb']:.0f} MB after (idle {idle:.0f} MB)")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
