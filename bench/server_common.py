"""What the server benchmarks share: a release `apiary serve` with TPC-H in memory, a
PostgreSQL 15 server for comparison, and the TPC-H data."""

import os
import subprocess
import sys
import time

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
APIARY = os.path.join(ROOT, "target/release/apiary")
TABLES = ["region", "nation", "part", "supplier", "partsupp", "customer", "orders", "lineitem"]


def build():
    subprocess.run(["cargo", "build", "--release", "-j", "2", "--bin", "apiary"], cwd=ROOT, check=True)


def start_apiary(sf, port, threads):
    """`apiary serve --tpch SF` on PORT; returns the process once it accepts connections."""
    process = subprocess.Popen(
        [APIARY, "serve", "--port", str(port), "--tpch", str(sf), "--threads", str(threads)],
        stderr=subprocess.PIPE,
        text=True,
    )
    line = process.stderr.readline()
    if "listening" not in line:
        process.kill()
        sys.exit(f"apiary serve did not start: {line}")
    return process


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def apiary_conninfo(port):
    return f"host=127.0.0.1 port={port} user=bench dbname=apiary"


def pg_conninfo(port):
    return f"host=127.0.0.1 port={port} user=postgres dbname=postgres"


def schema_sql():
    import re

    source = open(os.path.join(ROOT, "crates/engine/src/tpch.rs")).read()
    return re.search(r'pub const SCHEMA: &str = "(.*?)";', source, re.S).group(1)


def tbl_dir(sf):
    directory = os.path.join(ROOT, f"bench/data/sf{sf:g}")
    if not os.path.exists(os.path.join(directory, "lineitem.tbl")):
        os.makedirs(directory, exist_ok=True)
        subprocess.run([APIARY, "tpch-gen", "--sf", str(sf), "--dir", directory], check=True)
    return directory


def load_postgres(port, sf, tables=TABLES):
    """TPC-H into PostgreSQL (once: skipped when lineitem has the rows already)."""
    directory = tbl_dir(sf)
    with psycopg.connect(pg_conninfo(port), autocommit=True) as conn:
        cur = conn.cursor()
        cur.execute("SELECT count(*) FROM pg_tables WHERE tablename = 'lineitem'")
        if cur.fetchone()[0] == 1:
            cur.execute("SELECT count(*) FROM lineitem")
            if cur.fetchone()[0] > 5_900_000 * sf:
                return
        for table in TABLES:
            cur.execute(f"DROP TABLE IF EXISTS {table}")
        for statement in schema_sql().split(";"):
            if statement.strip():
                cur.execute(statement)
        for table in tables:
            started = time.time()
            with cur.copy(f"COPY {table} FROM STDIN (DELIMITER '|')") as copy:
                with open(os.path.join(directory, f"{table}.tbl"), "rb") as source:
                    for line in source:
                        # dbgen ends every line with the delimiter.
                        copy.write(line[:-2] + b"\n" if line.endswith(b"|\n") else line)
            print(f"postgres: loaded {table} in {time.time() - started:.1f} s", file=sys.stderr)
        cur.execute("VACUUM ANALYZE")


def machine():
    model = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores"
