#!/usr/bin/env python3
"""TPC-DS side by side: Apiary and DuckDB (and with --hyper, Tableau Hyper) on the same
Parquet data, in the same run.

    bench/.venv/bin/python bench/tpcds_compare.py --sf 1 --threads 2 --runs 3 [--hyper] [--queries 1,5-9] [--timeout 120]

Needs bench/tpcds_setup.sh (DuckDB in bench/.venv for the timing runs; DuckDB 1.5.5 with the
tpcds extension in bench/.venv/tpcds for the data). The data: one Parquet file per table in
--data (default tests/tpcds/data for the fixture's scale factor 0.01, else
bench/data/tpcds-sf<SF>), written by bench/tpcds_gen.py (dsdgen) when missing. The queries:
tests/tpcds/qNN.sql (DuckDB's texts). Both engines get the same DDL (tests/tpcds/schema.sql)
and load the same files.

Apiary runs as `apiary serve` (release binary, data in memory, loaded once) and is queried
over its PostgreSQL protocol with psycopg; a query that runs past --timeout is cancelled (the
server is restarted if it does not stop, crashes or disappears). DuckDB runs in this process
(interrupted after --timeout). Each query runs once to warm up (that run's answer is compared)
and --runs times more; the times are the medians of those runs, taken by this script around
execute + fetch for both engines.

Answers: Apiary's answer is compared with DuckDB's answer of the same run (and, at the fixture's
scale factor, DuckDB's with tests/tpcds/answers: `ref` column). Rows are compared as multisets
when the query has no top-level ORDER BY; with one, in order, except that rows with equal ORDER
BY keys may come in any order (and, when the answer is cut by LIMIT inside such a group, the
group's other columns are not compared). ORDER BY keys are found among the output columns by
name, alias, position or expression text; where one is not an output column (Q36, Q47, Q57,
Q70, Q86, Q89) ties cannot be seen, and the same rows in another order are reported as
`order?`. Numbers match within 0.01 or a relative 1e-6 (the convention of tpch/README.md);
`~` marks answers that needed more than a relative 1e-6; text matches after trimming trailing
blanks.

Prints per query: Apiary's status (correct / wrong: why / order? / error: first line /
timeout), both median times, the ratio Apiary/DuckDB, and the geometric means over the
queries correct in both. With --hyper, also Hyper's median time and Apiary/Hyper (Hyper's
answers are not compared; its errors are reported), and a second geometric mean over the
queries Hyper ran too.
"""

import argparse
import contextlib
import datetime
import decimal
import json
import math
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
FIXTURE = os.path.join(ROOT, "tests", "tpcds")
FIXTURE_SF = 0.01
GEN_PYTHON = os.path.join(BENCH, ".venv", "tpcds", "bin", "python")
sys.path.insert(0, BENCH)
from tpcds_gen import TABLES  # noqa: E402


# ---------------------------------------------------------------------------------------------
# queries, data


def parse_queries(text):
    """"1,3,5-9" -> [1, 3, 5, 6, 7, 8, 9]."""
    queries = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            a, b = part.split("-")
            queries += list(range(int(a), int(b) + 1))
        else:
            queries.append(int(part))
    return queries


def query_text(q):
    return open(os.path.join(FIXTURE, f"q{q:02d}.sql")).read()


def schema_statements():
    text = open(os.path.join(FIXTURE, "schema.sql")).read()
    text = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    return [s.strip() for s in text.split(";") if s.strip()]


def default_data_dir(sf):
    if sf == FIXTURE_SF:
        return os.path.join(FIXTURE, "data")
    return os.path.join(ROOT, "bench", "data", f"tpcds-sf{sf:g}")


def ensure_data(sf, data_dir):
    if all(os.path.exists(os.path.join(data_dir, f"{t}.parquet")) for t in TABLES):
        return
    if not os.path.exists(GEN_PYTHON):
        sys.exit("no TPC-DS generator: run bench/tpcds_setup.sh first")
    print(f"generating TPC-DS SF{sf:g} into {data_dir} (dsdgen)", file=sys.stderr)
    subprocess.run([GEN_PYTHON, os.path.join(BENCH, "tpcds_gen.py"), "data", "--sf", str(sf), "--dir", data_dir], check=True)


def load_statements(data_dir):
    statements = schema_statements()
    for t in TABLES:
        statements.append(f"COPY {t} FROM '{os.path.abspath(os.path.join(data_dir, t + '.parquet'))}'")
    return statements


# ---------------------------------------------------------------------------------------------
# comparing answers


def normalize(value):
    """A value as compared: None, float for numbers, str for the rest."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, decimal.Decimal)):
        return float(value)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    return str(value).rstrip()


def reference_rows(q):
    """tests/tpcds/answers/qNN.csv as (columns, rows of normalized values)."""
    path = os.path.join(FIXTURE, "answers", f"q{q:02d}.csv")
    if not os.path.exists(path):
        return None
    lines = open(path).read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    columns = lines[0].split("|")
    rows = []
    for line in lines[1:]:
        row = []
        for field in line.split("|"):
            if field == "NULL":
                row.append(None)
            else:
                try:
                    row.append(float(field))
                except ValueError:
                    row.append(field.rstrip())
        rows.append(row)
    return columns, rows


def value_diff(e, a):
    """0 when equal, a relative difference (> 0) for numbers that are close, None when different."""
    if e is None or a is None:
        return 0 if e is None and a is None else None
    if isinstance(e, float) or isinstance(a, float):
        try:
            x, y = float(e), float(a)
        except ValueError:
            return None
        if x == y or (math.isnan(x) and math.isnan(y)):
            return 0
        d = abs(x - y)
        rel = d / max(abs(x), abs(y))
        if d <= 0.01 or rel <= 1e-6:
            return rel
        return None
    return 0 if str(e) == str(a) else None


def sort_key(row):
    """A total order on normalized rows (numbers rounded so float noise does not reorder)."""
    key = []
    for v in row:
        if v is None:
            key.append((0, 0, ""))
        elif isinstance(v, float):
            key.append((1, round(v, 2), ""))
        else:
            key.append((2, 0, v))
    return key


def split_top_level(text, separator=","):
    parts, depth, current, quote = [], 0, [], False
    for ch in text:
        if ch == "'":
            quote = not quote
        elif not quote and ch == "(":
            depth += 1
        elif not quote and ch == ")":
            depth -= 1
        if ch == separator and depth == 0 and not quote:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def mask_nested(sql):
    """`sql` with comments removed and everything inside parentheses or quotes blanked (same length)."""
    sql = re.sub(r"--[^\n]*", lambda m: " " * len(m.group(0)), sql)
    depth, quote, masked = 0, False, []
    for ch in sql:
        if ch == "'":
            quote = not quote
        if ch == "(" and not quote:
            depth += 1
        masked.append(ch if depth == 0 and not quote else " ")
        if ch == ")" and not quote:
            depth -= 1
    return sql, "".join(masked)


def top_level_order_by(sql):
    """(ORDER BY items, LIMIT n or None) of the outermost query, or (None, limit)."""
    sql, masked = mask_nested(sql)
    limit = None
    m = re.search(r"\blimit\s+(\d+)\s*;?\s*$", masked, re.I | re.S)
    if m:
        limit = int(m.group(1))
    orders = list(re.finditer(r"\border\s+by\b", masked, re.I))
    if not orders:
        return None, limit
    start = orders[-1].end()
    end = m.start() if m else len(sql)
    clause = sql[start:end].strip().rstrip(";")
    items = []
    for item in split_top_level(clause):
        item = re.sub(r"\s+nulls\s+(first|last)\s*$", "", item.strip(), flags=re.I)
        item = re.sub(r"\s+(asc|desc)\s*$", "", item.strip(), flags=re.I)
        items.append(item.strip())
    return items, limit


def flat(text):
    return re.sub(r"\s+", "", text.lower()).replace('"', "")


def select_list(sql):
    """[(expression, alias)] of the outermost query's first SELECT (alias None when absent)."""
    sql, masked = mask_nested(sql)
    select = re.search(r"\bselect\b", masked, re.I)
    if not select:
        return []
    after = masked[select.end():]
    frm = re.search(r"\bfrom\b", after, re.I)
    body = sql[select.end():select.end() + (frm.start() if frm else len(after))]
    body = re.sub(r"^\s*distinct\b", "", body, flags=re.I)
    items = []
    for item in split_top_level(body):
        item = item.strip()
        m = re.fullmatch(r"(.*?\S)\s+(?:as\s+)?(\w+|\"[^\"]+\")", item, re.I | re.S)
        if m and not re.fullmatch(r".*\b(case|when|then|else|and|or|not|is|in|between|like)", m.group(1), re.I | re.S):
            items.append((m.group(1), m.group(2).strip('"')))
        else:
            items.append((item, None))
    return items


def order_key_columns(sql, columns):
    """Indexes of the ORDER BY keys among the result's columns; None when some key is not a
    result column (then ties cannot be seen); [] without ORDER BY."""
    items, _ = top_level_order_by(sql)
    if items is None:
        return []
    names = [flat(c) for c in columns]
    selected = select_list(sql)
    if len(selected) != len(columns):
        selected = []
    keys = []
    for item in items:
        if item.isdigit():
            keys.append(int(item) - 1)
            continue
        f = flat(item)
        found = None
        for i, (expression, alias) in enumerate(selected):
            if (alias and flat(alias) == f) or flat(expression) == f:
                found = i
                break
        if found is None and f in names:
            found = names.index(f)
        if found is None and re.fullmatch(r"\w+\.\w+", f):
            bare = f.split(".")[1]
            matches = [i for i, (expression, alias) in enumerate(selected) if flat(expression).split(".")[-1] == bare and alias is None]
            found = matches[0] if len(matches) == 1 else (names.index(bare) if bare in names else None)
        if found is None:
            return None
        keys.append(found)
    return keys


def groups_by_key(rows, keys):
    groups, last = [], object()
    for row in rows:
        key = [None if row[k] is None else (round(row[k], 2) if isinstance(row[k], float) else row[k]) for k in keys]
        if groups and key == last:
            groups[-1].append(row)
        else:
            groups.append([row])
            last = key
    return groups


def match_rows(columns, e_rows, a_rows, loose=frozenset(), keys=()):
    """(None, worst relative difference) when the rows match pairwise, else (why, None)."""
    worst = 0.0
    for i, (e, a) in enumerate(zip(e_rows, a_rows)):
        for j, (x, y) in enumerate(zip(e, a)):
            if i in loose and j not in keys:
                continue
            d = value_diff(x, y)
            if d is None:
                return f"row {i + 1} column {columns[j]!r}: {y!r}, expected {x!r}", None
            worst = max(worst, d)
    return None, worst


def compare(sql, columns, expected, actual):
    """(status, note): status 'correct', 'wrong' or 'order?'; expected/actual are normalized rows."""
    if len(expected) != len(actual):
        return "wrong", f"{len(actual)} rows, expected {len(expected)}"
    if expected and len(expected[0]) != len(actual[0]):
        return "wrong", f"{len(actual[0])} columns, expected {len(expected[0])}"
    keys = order_key_columns(sql, columns)
    _, limit = top_level_order_by(sql)
    notes = []
    if keys == []:
        why, worst = match_rows(columns, sorted(expected, key=sort_key), sorted(actual, key=sort_key))
    elif keys is None:
        why, worst = match_rows(columns, expected, actual)
        if why is not None and match_rows(columns, sorted(expected, key=sort_key), sorted(actual, key=sort_key))[0] is None:
            # Some ORDER BY key is no output column, so ties cannot be told from a wrong order.
            return "order?", "same rows in another order (ORDER BY on expressions not in the result: ties?)"
    else:
        e_groups, a_groups = groups_by_key(expected, keys), groups_by_key(actual, keys)
        e_rows = [r for g in e_groups for r in sorted(g, key=sort_key)]
        a_rows = [r for g in a_groups for r in sorted(g, key=sort_key)]
        loose = frozenset()
        # The LIMIT cut the last group of ties: which of its rows come is not determined.
        if limit is not None and len(expected) == limit and len(e_groups[-1]) > 1:
            loose = frozenset(range(len(expected) - len(e_groups[-1]), len(expected)))
            notes.append(f"ties at LIMIT ({len(loose)} rows)")
        why, worst = match_rows(columns, e_rows, a_rows, loose, keys)
    if why is not None:
        return "wrong", why
    if worst > 1e-6:
        notes.append(f"~ numbers within 0.01 (relative {worst:.1e})")
    return "correct", "; ".join(notes)


# ---------------------------------------------------------------------------------------------
# engines


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ApiaryServer:
    """`apiary serve` with the data in memory; restarted (and reloaded) after a crash or a
    query that does not stop when cancelled."""

    def __init__(self, binary, data_dir, threads, settings):
        self.binary, self.data_dir, self.threads, self.settings = binary, data_dir, threads, settings
        self.process = None
        self.conn = None
        self.load_seconds = None

    def start(self):
        import psycopg
        for _ in range(120):  # the binary may be being rebuilt
            if os.path.exists(self.binary):
                break
            time.sleep(5)
        port = free_port()
        self.log = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen([self.binary, "serve", "--port", str(port), "--threads", str(self.threads)],
                                        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        line = self.process.stderr.readline()
        if "listening" not in line:
            self.process.kill()
            sys.exit(f"apiary serve did not start: {line}")
        threading.Thread(target=self._drain, args=(self.process,), daemon=True).start()
        self.conn = psycopg.connect(f"host=127.0.0.1 port={port} user=bench dbname=apiary", autocommit=True)
        started = time.perf_counter()
        with self.conn.cursor() as cur:
            cur.execute(f"SET threads = {self.threads}")
            for setting in self.settings:
                cur.execute(f"SET {setting}")
            for statement in load_statements(self.data_dir):
                cur.execute(statement)
        self.load_seconds = time.perf_counter() - started
        print(f"apiary loaded {self.data_dir} in {self.load_seconds:.2f} s", file=sys.stderr)

    def _drain(self, process):
        for line in process.stderr:
            self.log.write(line)

    def stop(self):
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.conn = self.process = None

    def restart(self):
        self.stop()
        self.start()

    def execute(self, sql, timeout):
        """(columns, rows, seconds) or raises; 'timeout' errors as TimeoutError."""
        import psycopg
        cancelled = threading.Event()
        killed = threading.Event()
        conn, process = self.conn, self.process

        def cancel():
            cancelled.set()
            with contextlib.suppress(Exception):
                conn.cancel_safe(timeout=10)

        def kill():
            killed.set()
            with contextlib.suppress(Exception):
                process.kill()

        timers = [threading.Timer(timeout, cancel), threading.Timer(timeout + 30, kill)]
        for t in timers:
            t.start()
        try:
            started = time.perf_counter()
            with conn.cursor() as cur:
                cur.execute(sql)
                rows = cur.fetchall() if cur.description else []
                columns = [d.name for d in cur.description] if cur.description else []
            return columns, rows, time.perf_counter() - started
        except psycopg.errors.QueryCanceled:
            if cancelled.is_set():
                raise TimeoutError(f"timeout after {timeout:g} s")
            raise
        except psycopg.OperationalError as e:
            # The server died (crash, or killed because it did not stop): restart it.
            crashed = process.poll() is not None or conn.closed
            if killed.is_set():
                self.restart()
                raise TimeoutError(f"timeout after {timeout:g} s (server did not stop: restarted)")
            if crashed:
                self.log.seek(0)
                tail = [line for line in self.log.read().splitlines() if line.strip()][-3:]
                self.restart()
                raise RuntimeError(f"server crashed: {' / '.join(tail) or e}")
            raise
        finally:
            for t in timers:
                t.cancel()


def timed(run, interrupt, timeout):
    """(columns, rows, seconds) of `run()`, which returns columns and rows; `interrupt` is
    called after `timeout` seconds, and the error of a run it stopped becomes TimeoutError."""
    timer = threading.Timer(timeout, interrupt)
    timer.start()
    try:
        started = time.perf_counter()
        columns, rows = run()
        return columns, rows, time.perf_counter() - started
    except Exception:
        # `finished` is set here only when the timer fired (cancel() comes after).
        if timer.finished.is_set():
            raise TimeoutError(f"timeout after {timeout:g} s")
        raise
    finally:
        timer.cancel()


class DuckDB:
    def __init__(self, data_dir, threads):
        import duckdb
        self.con = duckdb.connect()
        self.con.execute(f"SET threads = {threads}")
        started = time.perf_counter()
        for statement in schema_statements():
            self.con.execute(statement)
        for t in TABLES:
            self.con.execute(f"INSERT INTO {t} SELECT * FROM read_parquet('{os.path.join(data_dir, t + '.parquet')}')")
        self.load_seconds = time.perf_counter() - started
        self.version = duckdb.__version__
        print(f"duckdb {self.version} loaded {data_dir} in {self.load_seconds:.2f} s", file=sys.stderr)

    def execute(self, sql, timeout):
        def run():
            cur = self.con.execute(sql)
            rows = cur.fetchall()
            return [d[0] for d in cur.description], rows
        return timed(run, self.con.interrupt, timeout)


class Hyper:
    """Tableau Hyper (PyPI tableauhyperapi) on the same DDL and Parquet files: a hyperd process
    pinned to --threads cores (tpch_compare.hyper_server), one database file, queried over
    one connection; a query past the timeout is cancelled."""

    def __init__(self, data_dir, threads):
        import tableauhyperapi
        from tableauhyperapi import Connection, CreateMode
        import tpch_compare
        self._server = tpch_compare.hyper_server(threads)
        hyper, workdir = self._server.__enter__()
        self.con = Connection(hyper.endpoint, os.path.join(workdir, "tpcds.hyper"), CreateMode.CREATE_AND_REPLACE)
        started = time.perf_counter()
        for statement in schema_statements():
            self.con.execute_command(statement)
        for t in TABLES:
            self.con.execute_command(f"INSERT INTO {t} SELECT * FROM external('{os.path.join(data_dir, t + '.parquet')}')")
        self.load_seconds = time.perf_counter() - started
        self.version = getattr(tableauhyperapi, "__version__", "?")
        print(f"hyper {self.version} loaded {data_dir} in {self.load_seconds:.2f} s", file=sys.stderr)

    def execute(self, sql, timeout):
        def run():
            with self.con.execute_query(sql) as result:
                return [str(c.name) for c in result.schema.columns], [list(r) for r in result]
        return timed(run, self.con.cancel, timeout)

    def close(self):
        self.con.close()
        self._server.__exit__(None, None, None)


def first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def run_query(engine, sql, runs, timeout):
    """Warm-up run (its answer) and `runs` timed runs; a dict with columns, rows, times or error."""
    try:
        columns, rows, seconds = engine.execute(sql, timeout)
    except TimeoutError as e:
        return {"status": "timeout", "error": str(e)}
    except Exception as e:  # noqa: BLE001 - every engine error is a result here
        return {"status": "error", "error": first_line(e)}
    times = []
    # A slow query gets fewer timed runs, so that the whole run stays bounded.
    for _ in range(runs if seconds < 10 else min(runs, 1)):
        try:
            times.append(engine.execute(sql, timeout)[2])
        except Exception as e:  # noqa: BLE001
            return {"status": "error", "error": "later run: " + first_line(e), "columns": columns, "rows": rows}
    return {"status": "ok", "columns": columns, "rows": rows, "times": times or [seconds],
            "median_s": statistics.median(times or [seconds])}


# ---------------------------------------------------------------------------------------------


def geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def write_order_keys():
    """tests/tpcds/order_keys.txt: per query, how crates/engine/tests/tpcds.rs compares rows
    (the same rules as compare()): `unordered`, `hidden` (some ORDER BY key is no result
    column: rows in order, any ties invisible), or the key columns (0-based) and the LIMIT."""
    lines = ["# Written by bench/tpcds_compare.py --write-order-keys: how each answer is compared",
             "# (unordered | hidden | keys=<0-based result columns> [limit=<n>])."]
    for q in range(1, 100):
        sql = query_text(q)
        columns, _ = reference_rows(q)
        keys = order_key_columns(sql, columns)
        _, limit = top_level_order_by(sql)
        if keys == []:
            spec = "unordered"
        elif keys is None:
            spec = "hidden"
        else:
            spec = "keys=" + ",".join(map(str, keys)) + (f" limit={limit}" if limit is not None else "")
        lines.append(f"q{q:02d} {spec}")
    with open(os.path.join(FIXTURE, "order_keys.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sf", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--queries", default="1-99", help="e.g. 1,3,10-20")
    parser.add_argument("--data", help="directory with <table>.parquet (default tests/tpcds/data at SF0.01, else bench/data/tpcds-sf<SF>)")
    parser.add_argument("--timeout", type=float, default=120, help="seconds per query run")
    parser.add_argument("--set", action="append", default=[], help="extra SET statement for Apiary, e.g. --set 'vector_size = 2048'")
    parser.add_argument("--apiary", default=os.path.join(ROOT, "target", "release", "apiary"))
    parser.add_argument("--build", action="store_true", help="cargo build --release --bin apiary first")
    parser.add_argument("--no-duckdb", action="store_true", help="compare with tests/tpcds/answers only (SF0.01)")
    parser.add_argument("--no-apiary", action="store_true")
    parser.add_argument("--hyper", action="store_true", help="also time Tableau Hyper (tableauhyperapi in bench/.venv)")
    parser.add_argument("--json", help="also write one JSON line per query to this file")
    parser.add_argument("--write-order-keys", action="store_true",
                        help="write tests/tpcds/order_keys.txt (what the Rust test compares in order) and exit")
    args = parser.parse_args()
    if args.write_order_keys:
        write_order_keys()
        return
    queries = parse_queries(args.queries)
    data_dir = os.path.abspath(args.data or default_data_dir(args.sf))
    ensure_data(args.sf, data_dir)
    if args.build or not os.path.exists(args.apiary):
        subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", "apiary"], cwd=ROOT, check=True)

    duck = None if args.no_duckdb else DuckDB(data_dir, args.threads)
    hyper = Hyper(data_dir, args.threads) if args.hyper else None
    apiary = None
    if not args.no_apiary:
        apiary = ApiaryServer(args.apiary, data_dir, args.threads, args.set)
        apiary.start()
    with_reference = args.sf == FIXTURE_SF

    print(f"TPC-DS SF{args.sf:g}, {args.threads} threads, median of {args.runs} hot runs (ms), timeout {args.timeout:g} s; "
          f"ratio = Apiary / DuckDB{' ' + duck.version if duck else ''}")
    hyper_header = f" {'hyper':>10} {'a/hyper':>7}" if hyper else ""
    print(f"{'query':>5} {'apiary':>10} {'duckdb':>10} {'ratio':>7}{hyper_header} {'ref':>4} {'rows':>5}  apiary's answer")
    records = []
    try:
        for q in queries:
            sql = query_text(q)
            d = run_query(duck, sql, args.runs, args.timeout) if duck else None
            h = run_query(hyper, sql, args.runs, args.timeout) if hyper else None
            a = run_query(apiary, sql, args.runs, args.timeout) if apiary else None
            reference = reference_rows(q) if with_reference else None
            if d and d["status"] == "ok":
                columns, expected = d["columns"], [[normalize(v) for v in r] for r in d["rows"]]
            elif reference:
                columns, expected = reference
            else:
                columns, expected = None, None
            ref = "-"
            if reference and d and d["status"] == "ok":
                ref = "ok" if compare(sql, columns, reference[1], expected)[0] == "correct" else "DIFF"
            verdict, note = "-", ""
            if a is not None:
                if a["status"] != "ok":
                    verdict, note = a["status"], a["error"]
                elif expected is None:
                    verdict = "unchecked"
                else:
                    verdict, note = compare(sql, columns, expected, [[normalize(v) for v in r] for r in a["rows"]])
            ms = lambda r: r["median_s"] * 1e3 if r and r["status"] == "ok" else float("nan")
            ratio = ms(a) / ms(d) if a and d else float("nan")
            rows = len(expected) if expected is not None else -1
            text = verdict + (": " + note if note else "")
            if d and d["status"] != "ok":
                text += f" (duckdb {d['status']}: {d['error']})"
            hyper_ratio = ms(a) / ms(h) if a and h else float("nan")
            hyper_cells = f" {ms(h):10.1f} {hyper_ratio:7.2f}" if hyper else ""
            if h and h["status"] != "ok":
                text += f" (hyper {h['status']}: {h['error']})"
            print(f"{'Q%02d' % q:>5} {ms(a):10.1f} {ms(d):10.1f} {ratio:7.2f}{hyper_cells} {ref:>4} {rows:5d}  {text}", flush=True)
            records.append({"q": q, "sf": args.sf, "threads": args.threads, "apiary_ms": ms(a), "duckdb_ms": ms(d),
                            "hyper_ms": ms(h), "hyper_ratio": hyper_ratio,
                            "ratio": ratio, "status": verdict, "note": note, "reference": ref, "rows": rows,
                            "duckdb_error": d.get("error") if d else None, "hyper_error": h.get("error") if h else None})
    finally:
        if apiary:
            apiary.stop()
        if hyper:
            hyper.close()

    both = [r for r in records if r["status"] == "correct" and not math.isnan(r["ratio"])]
    counts = {}
    for r in records:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print(f"{'geo':>5} {geomean([r['apiary_ms'] for r in both]):10.1f} {geomean([r['duckdb_ms'] for r in both]):10.1f} "
          f"{geomean([r['ratio'] for r in both]):7.2f}  over {len(both)} queries correct in both")
    if hyper:
        with_hyper = [r for r in both if not math.isnan(r["hyper_ratio"])]
        print(f"{'geo':>5} {geomean([r['apiary_ms'] for r in with_hyper]):10.1f} {geomean([r['duckdb_ms'] for r in with_hyper]):10.1f} "
              f"{geomean([r['ratio'] for r in with_hyper]):7.2f} {geomean([r['hyper_ms'] for r in with_hyper]):10.1f} "
              f"{geomean([r['hyper_ratio'] for r in with_hyper]):7.2f}  over {len(with_hyper)} queries correct in Apiary that Hyper also ran")
    over = [f"Q{r['q']:02d} ({r['ratio']:.1f}x)" for r in both if r["ratio"] > 2]
    print("apiary: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f" of {len(records)}; "
          f"over 2x DuckDB's time: {', '.join(over) or 'none'}")
    if args.json:
        with open(args.json, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
