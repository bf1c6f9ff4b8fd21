#!/usr/bin/env python3
"""A TPC-C-style mix from concurrent clients: Apiary's server, PostgreSQL 15 and DuckDB.

    bash bench/setup.sh                       # bench/.venv: duckdb, psycopg
    bench/.venv/bin/python bench/tpcc_compare.py --warehouses 4 --clients 8 --seconds 20 [--json out.json]

The schema and the two write transactions of TPC-C (New-Order and Payment, half each;
payments by customer id, no remote warehouses), at a reduced scale: per warehouse 10
districts, 300 customers per district, stock of 10,000 items (TPC-C has 3,000 and
100,000). Each client has a home warehouse (client % warehouses) and runs transactions
back to back; a transaction that fails with a serialization error (Apiary's and
PostgreSQL's 40001, DuckDB's write conflict) rolls back and runs again with new inputs.
Reported per engine: committed transactions per second (New-Order and Payment), retries,
and the consistency conditions of TPC-C §3.3.2 (1-4) plus one for lost updates:

1. W_YTD = sum(D_YTD) per warehouse;
2. D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID) per district;
3. max(NO_O_ID) - min(NO_O_ID) + 1 = count of NEW_ORDER rows per district;
4. sum(O_OL_CNT) = count of ORDER_LINE rows per district;
5. per warehouse, W_YTD minus its initial value = sum(H_AMOUNT) of its payments (every
   committed payment's update of the warehouse row is there: no lost update).

Engines, all durable (each COMMIT is on disk before it returns), all with --threads:
* Apiary: `target/release/apiary serve DB --port P --threads N` (built here unless
  --no-build), a database file in a temporary directory; psycopg 3 clients.
* PostgreSQL 15: its own cluster in a temporary directory (initdb as user postgres),
  REPEATABLE READ (snapshot isolation, as Apiary's); psycopg 3 clients.
* DuckDB: a database file, one cursor per client thread (embedded: no network).
"""

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from decimal import Decimal

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APIARY = os.path.join(ROOT, "target/release/apiary")
PG_BIN = "/usr/lib/postgresql/15/bin"

DISTRICTS = 10
CUSTOMERS = 300
ITEMS = 10_000

SCHEMA = [
    "CREATE TABLE warehouse (w_id INTEGER PRIMARY KEY, w_name VARCHAR(10), w_tax DECIMAL(4,4), w_ytd DECIMAL(12,2))",
    "CREATE TABLE district (d_id INTEGER, d_w_id INTEGER, d_name VARCHAR(10), d_tax DECIMAL(4,4), d_ytd DECIMAL(12,2), "
    "d_next_o_id INTEGER, PRIMARY KEY (d_w_id, d_id))",
    "CREATE TABLE customer (c_id INTEGER, c_d_id INTEGER, c_w_id INTEGER, c_last VARCHAR(16), c_discount DECIMAL(4,4), "
    "c_balance DECIMAL(12,2), c_ytd_payment DECIMAL(12,2), c_payment_cnt INTEGER, PRIMARY KEY (c_w_id, c_d_id, c_id))",
    "CREATE TABLE history (h_c_id INTEGER, h_c_d_id INTEGER, h_c_w_id INTEGER, h_d_id INTEGER, h_w_id INTEGER, "
    "h_amount DECIMAL(6,2))",
    "CREATE TABLE item (i_id INTEGER PRIMARY KEY, i_name VARCHAR(24), i_price DECIMAL(5,2))",
    "CREATE TABLE stock (s_i_id INTEGER, s_w_id INTEGER, s_quantity INTEGER, s_ytd INTEGER, s_order_cnt INTEGER, "
    "PRIMARY KEY (s_w_id, s_i_id))",
    "CREATE TABLE orders (o_id INTEGER, o_d_id INTEGER, o_w_id INTEGER, o_c_id INTEGER, o_ol_cnt INTEGER, "
    "PRIMARY KEY (o_w_id, o_d_id, o_id))",
    "CREATE TABLE new_order (no_o_id INTEGER, no_d_id INTEGER, no_w_id INTEGER, PRIMARY KEY (no_w_id, no_d_id, no_o_id))",
    "CREATE TABLE order_line (ol_o_id INTEGER, ol_d_id INTEGER, ol_w_id INTEGER, ol_number INTEGER, ol_i_id INTEGER, "
    "ol_quantity INTEGER, ol_amount DECIMAL(6,2), PRIMARY KEY (ol_w_id, ol_d_id, ol_o_id, ol_number))",
]

INITIAL_W_YTD = Decimal("300000.00")
INITIAL_D_YTD = Decimal("30000.00")


def load_statements(warehouses):
    """The initial population, as set-based SQL all three engines run (generate_series)."""
    return [
        f"INSERT INTO warehouse SELECT w, 'w' || w, 0.1000, {INITIAL_W_YTD} FROM generate_series(1, {warehouses}) AS s(w)",
        f"INSERT INTO district SELECT d, w, 'd' || d, 0.0500, {INITIAL_D_YTD}, 1 "
        f"FROM generate_series(1, {warehouses}) AS a(w), generate_series(1, {DISTRICTS}) AS b(d)",
        f"INSERT INTO customer SELECT c, d, w, 'last' || (c % 100), 0.0100 * (c % 10), -10.00, 10.00, 1 "
        f"FROM generate_series(1, {warehouses}) AS a(w), generate_series(1, {DISTRICTS}) AS b(d), generate_series(1, {CUSTOMERS}) AS e(c)",
        f"INSERT INTO item SELECT i, 'item' || i, 1.00 + (i % 100) FROM generate_series(1, {ITEMS}) AS s(i)",
        f"INSERT INTO stock SELECT i, w, 50 + (i % 50), 0, 0 FROM generate_series(1, {warehouses}) AS a(w), generate_series(1, {ITEMS}) AS b(i)",
    ]


def new_order(run, rng, w, warehouses):
    """TPC-C 2.4: a new order of 5-15 lines in district d of warehouse w."""
    d = rng.randint(1, DISTRICTS)
    c = rng.randint(1, CUSTOMERS)
    lines = [(rng.randint(1, ITEMS), rng.randint(1, 10)) for _ in range(rng.randint(5, 15))]
    lines = list({i: (i, q) for i, q in lines}.values())  # distinct items (one stock update each)
    run("BEGIN")
    w_tax = run(f"SELECT w_tax FROM warehouse WHERE w_id = {w}")[0][0]
    d_tax, o_id = run(f"SELECT d_tax, d_next_o_id FROM district WHERE d_w_id = {w} AND d_id = {d}")[0]
    run(f"UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = {w} AND d_id = {d}")
    discount = run(f"SELECT c_discount FROM customer WHERE c_w_id = {w} AND c_d_id = {d} AND c_id = {c}")[0][0]
    run(f"INSERT INTO orders VALUES ({o_id}, {d}, {w}, {c}, {len(lines)})")
    run(f"INSERT INTO new_order VALUES ({o_id}, {d}, {w})")
    for number, (i, quantity) in enumerate(lines, 1):
        price = run(f"SELECT i_price FROM item WHERE i_id = {i}")[0][0]
        stock = run(f"SELECT s_quantity FROM stock WHERE s_w_id = {w} AND s_i_id = {i}")[0][0]
        left = stock - quantity if stock - quantity >= 10 else stock - quantity + 91
        run(f"UPDATE stock SET s_quantity = {left}, s_ytd = s_ytd + {quantity}, s_order_cnt = s_order_cnt + 1 "
            f"WHERE s_w_id = {w} AND s_i_id = {i}")
        amount = (Decimal(quantity) * Decimal(price) * (1 + Decimal(w_tax) + Decimal(d_tax)) * (1 - Decimal(discount))).quantize(Decimal("0.01"))
        run(f"INSERT INTO order_line VALUES ({o_id}, {d}, {w}, {number}, {i}, {quantity}, {amount})")
    run("COMMIT")


def payment(run, rng, w, warehouses):
    """TPC-C 2.5: a payment by customer id in the home warehouse."""
    d = rng.randint(1, DISTRICTS)
    c = rng.randint(1, CUSTOMERS)
    amount = Decimal(rng.randint(100, 500000)) / 100
    run("BEGIN")
    run(f"UPDATE warehouse SET w_ytd = w_ytd + {amount} WHERE w_id = {w}")
    run(f"UPDATE district SET d_ytd = d_ytd + {amount} WHERE d_w_id = {w} AND d_id = {d}")
    run(f"UPDATE customer SET c_balance = c_balance - {amount}, c_ytd_payment = c_ytd_payment + {amount}, "
        f"c_payment_cnt = c_payment_cnt + 1 WHERE c_w_id = {w} AND c_d_id = {d} AND c_id = {c}")
    run(f"INSERT INTO history VALUES ({c}, {d}, {w}, {d}, {w}, {amount})")
    run("COMMIT")


CHECKS = {
    "1 W_YTD = sum(D_YTD)": "SELECT count(*) FROM warehouse w WHERE w_ytd <> (SELECT sum(d_ytd) - {extra} FROM district d WHERE d.d_w_id = w.w_id)",
    "2 D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID)": (
        "SELECT count(*) FROM district d WHERE d_next_o_id - 1 <> coalesce((SELECT max(o_id) FROM orders o WHERE o.o_w_id = d.d_w_id AND o.o_d_id = d.d_id), 0) "
        "OR d_next_o_id - 1 <> coalesce((SELECT max(no_o_id) FROM new_order n WHERE n.no_w_id = d.d_w_id AND n.no_d_id = d.d_id), 0)"
    ),
    "3 NEW_ORDER rows are contiguous": (
        "SELECT count(*) FROM (SELECT no_w_id, no_d_id, max(no_o_id) - min(no_o_id) + 1 AS span, count(*) AS n FROM new_order "
        "GROUP BY no_w_id, no_d_id) AS x WHERE span <> n"
    ),
    "4 sum(O_OL_CNT) = ORDER_LINE rows": (
        "SELECT count(*) FROM (SELECT o_w_id, o_d_id, sum(o_ol_cnt) AS lines FROM orders GROUP BY o_w_id, o_d_id) AS o "
        "WHERE lines <> (SELECT count(*) FROM order_line l WHERE l.ol_w_id = o.o_w_id AND l.ol_d_id = o.o_d_id)"
    ),
    "5 W_YTD - initial = sum(H_AMOUNT) (no lost update)": (
        "SELECT count(*) FROM warehouse w WHERE w_ytd - {initial} <> coalesce((SELECT sum(h_amount) FROM history h WHERE h.h_w_id = w.w_id), 0)"
    ),
}


def check_sql(name):
    # The initial D_YTDs sum to 10 x 30,000 = the initial W_YTD, so condition 1 needs no correction.
    return CHECKS[name].format(extra=Decimal(0), initial=INITIAL_W_YTD)


def is_conflict(error):
    text = str(error)
    code = getattr(error, "sqlstate", None)
    return code in ("40001", "40P01") or "Conflict" in text or "conflict" in text


def drive(engine, make_run, warehouses, clients, seconds):
    """Runs the mix from `clients` threads for `seconds`; returns counts per transaction."""
    stop = time.perf_counter() + seconds
    counts = {"new_order": 0, "payment": 0, "retries": 0}
    lock = threading.Lock()
    errors = []

    def client(number):
        rng = random.Random(1000 + number)
        w = number % warehouses + 1
        try:
            run, rollback = make_run()
            while time.perf_counter() < stop:
                kind = "new_order" if rng.random() < 0.5 else "payment"
                while True:
                    try:
                        (new_order if kind == "new_order" else payment)(run, rng, w, warehouses)
                        break
                    except Exception as e:  # noqa: BLE001 - conflicts retry, others are reported
                        rollback()
                        if not is_conflict(e):
                            raise
                        with lock:
                            counts["retries"] += 1
                with lock:
                    counts[kind] += 1
        except Exception as e:  # noqa: BLE001
            errors.append(f"{engine} client {number}: {e!r}")

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError("; ".join(errors[:3]))
    committed = counts["new_order"] + counts["payment"]
    return {"seconds": elapsed, **counts, "tps": committed / elapsed, "new_order_tpm": counts["new_order"] * 60 / elapsed}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def psycopg_runner(conninfo, isolation=None):
    import psycopg

    def make():
        conn = psycopg.connect(conninfo, autocommit=True)
        cur = conn.cursor()
        if isolation:
            cur.execute(f"SET default_transaction_isolation = '{isolation}'")

        def run(sql):
            cur.execute(sql)
            return cur.fetchall() if cur.description else None

        def rollback():
            try:
                cur.execute("ROLLBACK")
            except Exception:  # noqa: BLE001 - the connection may have ended the block already
                pass

        return run, rollback

    return make


def setup_and_run(engine, make_run, args):
    run, _ = make_run()
    for sql in SCHEMA + load_statements(args.warehouses):
        run(sql)
    result = drive(engine, make_run, args.warehouses, args.clients, args.seconds)
    checks = {}
    for name in CHECKS:
        checks[name] = run(check_sql(name))[0][0] == 0
    result["consistency"] = checks
    totals = run("SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM history)")[0]
    result["rows"] = {"orders": totals[0], "history": totals[1]}
    return result


def run_apiary(args, workdir):
    port = free_port()
    server = subprocess.Popen(
        [APIARY, "serve", os.path.join(workdir, "tpcc.apiary"), "--port", str(port), "--threads", str(args.threads)],
        stderr=subprocess.PIPE, text=True)
    line = server.stderr.readline()
    if "listening" not in line:
        server.kill()
        sys.exit(f"apiary serve did not start: {line}")
    try:
        return setup_and_run("apiary", psycopg_runner(f"host=127.0.0.1 port={port} user=bench dbname=apiary"), args)
    finally:
        server.terminate()
        server.wait()


def run_postgres(args, workdir):
    data = os.path.join(workdir, "pgdata")
    os.makedirs(data)
    shutil.chown(workdir, "postgres")
    shutil.chown(data, "postgres")
    port = free_port()
    as_postgres = ["su", "postgres", "-c"]
    subprocess.run(as_postgres + [f"{PG_BIN}/initdb -D {data} -A trust -U postgres > {workdir}/initdb.log"], check=True)
    settings = f"-p {port} -k {workdir} -c max_connections=50 -c shared_buffers=512MB -c max_worker_processes={args.threads}"
    subprocess.run(as_postgres + [f"{PG_BIN}/pg_ctl -D {data} -o '{settings}' -l {workdir}/pg.log -w start"], check=True)
    try:
        return setup_and_run("postgres", psycopg_runner(f"host=127.0.0.1 port={port} user=postgres dbname=postgres", "repeatable read"), args)
    finally:
        subprocess.run(as_postgres + [f"{PG_BIN}/pg_ctl -D {data} -m fast stop"], check=False)


def run_duckdb(args, workdir):
    import duckdb

    con = duckdb.connect(os.path.join(workdir, "tpcc.duckdb"))
    con.execute(f"SET threads = {args.threads}")

    def make():
        cur = con.cursor()

        def run(sql):
            cur.execute(sql)
            try:
                return cur.fetchall()
            except duckdb.InvalidInputException:
                return None

        def rollback():
            try:
                cur.execute("ROLLBACK")
            except Exception:  # noqa: BLE001 - no transaction was open
                pass

        return run, rollback

    return setup_and_run("duckdb", make, args)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--warehouses", type=int, default=4)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--engines", default="apiary,postgres,duckdb")
    parser.add_argument("--no-build", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    if not args.no_build and "apiary" in args.engines:
        subprocess.run(["cargo", "build", "--release", "-j", "2", "--bin", "apiary"], cwd=ROOT, check=True)
    results = {}
    runners = {"apiary": run_apiary, "postgres": run_postgres, "duckdb": run_duckdb}
    for name in args.engines.split(","):
        workdir = tempfile.mkdtemp(prefix=f"tpcc-{name}-")
        try:
            results[name] = runners[name](args, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        r = results[name]
        failed = [check for check, ok in r["consistency"].items() if not ok]
        print(f"{name:8} {r['tps']:8.1f} tps ({r['new_order']} new orders, {r['payment']} payments, {r['retries']} retries, "
              f"{r['new_order_tpm']:.0f} new orders/min); consistency: {'all 5 hold' if not failed else 'FAILED ' + ', '.join(failed)}",
              flush=True)
    if "apiary" in results:
        for other in [n for n in results if n != "apiary"]:
            print(f"apiary/{other}: {results['apiary']['tps'] / results[other]['tps']:.2f}x transactions per second")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1, default=str)
    if any(not ok for r in results.values() for ok in r["consistency"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
