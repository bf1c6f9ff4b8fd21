#!/usr/bin/env python3
"""Differential testing: the same random queries on Apiary and on DuckDB.

    bench/setup.sh                                   # DuckDB into bench/.venv
    cargo build -p apiary-cli                        # or --apiary path/to/apiary
    bench/.venv/bin/python bench/differential.py --seeds 1-20 --queries 1000

For each seed, `apiary bench fuzz --seed S --queries N --emit` writes a workload (random
tables with NULL-heavy data, then queries: random full queries and both sides of the TLP /
NoREC oracle pairs). The script runs it on DuckDB (Python API, one in-memory database per
schema) and on Apiary (`apiary bench replay`, which prints one JSON line per query and is
restarted after the query that crashed it), compares every query's rows and prints a
summary; every disagreement goes to `--out` (default bench/results/differential/).

Rows compare as multisets unless the query's ORDER BY names every output column (then in
order). Values are normalised: integers and DECIMALs are exact numbers, floats compare with
a relative tolerance (1e-9, 1e-5 when Apiary says REAL), NaN equals NaN; a DATE is the
TIMESTAMP of its midnight; an INTERVAL is its length in microseconds with a month of 30
days and a day of 24 hours (both engines compare intervals that way; DuckDB's Python API
returns a timedelta that counts a month as 30 days).

Where DuckDB deliberately differs from PostgreSQL (Apiary follows PostgreSQL), the
generator writes SQL that means the same in both, or the comparison normalises:
  * integer division: `/` only divides DOUBLEs (`CAST(.. AS DOUBLE) / NULLIF(.., 0)`);
    DuckDB's `/` on integers gives a DOUBLE, PostgreSQL's truncates;
  * division by zero (an error in PostgreSQL, NULL/infinity in DuckDB): divisors are
    NULLIF(x, 0); `1 / 0` appears only in branches SQL never evaluates;
  * NULL ordering: every ORDER BY says NULLS FIRST or NULLS LAST (DuckDB sorts NULLs
    last in both directions, PostgreSQL first for DESC);
  * result types: `avg`, `sum` of integers, decimal division and `date_part` have other
    types in DuckDB (DOUBLE, HUGEINT, DOUBLE, BIGINT): numbers compare by value;
    `date_trunc` of a TIMESTAMP is a DATE in Apiary: dates compare as midnight timestamps;
  * implicit casts: literals are typed (`DATE '...'`, `CAST(1.5 AS DOUBLE)`), string
    literals never end in a blank (PostgreSQL compares an unknown literal with a CHAR column
    as CHAR, DuckDB as VARCHAR), and CHAR data never has trailing blanks;
  * `||` with NULL is NULL in both; `concat` skips NULLs in both;
  * scalar subqueries aggregate or use `ORDER BY 1 LIMIT 1`: never two rows (an error in
    PostgreSQL, in DuckDB since 1.1);
  * no `round(DOUBLE)` (half to even in PostgreSQL, half away from zero in DuckDB), no
    casts of floats or intervals to text (formats differ), no backslashes in LIKE
    patterns (PostgreSQL's default escape);
  * special floats (NaN, infinity) are off by default (`--enable special_floats`).
  * DuckDB narrows the scale of a DECIMAL unifying two 38-digit types (CASE, UNION) and
    rounds, PostgreSQL and Apiary keep every digit: counted as `decimal_scale`, apart;
  * REAL arithmetic: DuckDB computes `DECIMAL + REAL` in REAL, PostgreSQL in DOUBLE: a
    REAL result on either side compares with the REAL tolerance.
Classes in the summary: `match`; `mismatch` (both returned rows, different ones);
`apiary_error` (Apiary failed, DuckDB returned rows; `not_implemented` counted apart);
`duckdb_error` (the reverse); `both_error`; `apiary_internal` (internal error or panic);
`apiary_crash` (the process died).
"""

import argparse
import datetime
import decimal
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MICROS_PER_DAY = 86_400_000_000
DOUBLE_TOLERANCE = 1e-9
REAL_TOLERANCE = 1e-5
SORT_DIGITS = 8


def parse_seeds(text):
    seeds = []
    for part in text.split(","):
        if "-" in part:
            low, high = part.split("-", 1)
            seeds.extend(range(int(low), int(high) + 1))
        elif part:
            seeds.append(int(part))
    return seeds


# ── normalisation ────────────────────────────────────────────────────────────────────────
# A cell is None or a tuple (tag, value): ("b", bool), ("n", Decimal) exact number,
# ("f", float, real?) float, ("s", str), ("t", "YYYY-MM-DD HH:MM:SS.ffffff"), ("i", micros).


def timestamp_text(value):
    if isinstance(value, datetime.datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    return value.strftime("%Y-%m-%d") + " 00:00:00.000000"


def duckdb_cell(value, real=False):
    if value is None:
        return None
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, int):
        return ("n", decimal.Decimal(value))
    if isinstance(value, float):
        return ("f", value, real)
    if isinstance(value, decimal.Decimal):
        return ("n", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, (datetime.datetime, datetime.date)):
        return ("t", timestamp_text(value))
    if isinstance(value, datetime.timedelta):
        return ("i", (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds)
    return ("s", str(value))


def apiary_cell(value, type_name):
    if value is None:
        return None
    t = type_name.upper()
    if t == "BOOLEAN":
        return ("b", bool(value))
    if t in ("SMALLINT", "INTEGER", "BIGINT"):
        return ("n", decimal.Decimal(int(value)))
    if t in ("REAL", "DOUBLE"):
        return ("f", float(value), t == "REAL")
    if t.startswith("DECIMAL"):
        return ("n", decimal.Decimal(value))
    if t == "DATE":
        return ("t", value + " 00:00:00.000000")
    if t == "TIMESTAMP":
        date, _, time_part = value.partition(" ")
        whole, _, fraction = time_part.partition(".")
        return ("t", f"{date} {whole}.{(fraction + '000000')[:6]}")
    if t == "INTERVAL":
        months, days, micros = value
        return ("i", months * 30 * MICROS_PER_DAY + days * MICROS_PER_DAY + micros)
    return ("s", value)


def as_float(cell):
    return float(cell[1])


def cells_match(a, b):
    if a is None or b is None:
        return a is None and b is None
    if a[0] in ("n", "f") and b[0] in ("n", "f"):
        if a[0] == "n" and b[0] == "n":
            return a[1] == b[1]
        x, y = as_float(a), as_float(b)
        if math.isnan(x) or math.isnan(y):
            return math.isnan(x) and math.isnan(y)
        if x == y:
            return True
        if math.isinf(x) or math.isinf(y):
            return False
        real = (a[0] == "f" and a[2]) or (b[0] == "f" and b[2])
        tolerance = REAL_TOLERANCE if real else DOUBLE_TOLERANCE
        return abs(x - y) <= tolerance * max(abs(x), abs(y)) or abs(x - y) <= 1e-12
    return a[0] == b[0] and a[1] == b[1]


def cells_match_coarser_decimal(a, d):
    """DuckDB narrows the scale of a DECIMAL that unifies two 38-digit types (CASE, UNION,
    COALESCE) and rounds; PostgreSQL's NUMERIC and Apiary keep it. Apiary's exact value
    within one unit of DuckDB's last digit counts as this difference, not a mismatch."""
    if cells_match(a, d):
        return True
    if a is None or d is None or a[0] != "n" or d[0] != "n" or not isinstance(d[1], decimal.Decimal):
        return False
    d_exponent, a_exponent = d[1].as_tuple().exponent, a[1].as_tuple().exponent
    if not isinstance(d_exponent, int) or not isinstance(a_exponent, int) or d_exponent <= a_exponent:
        return False
    return abs(a[1] - d[1]) <= decimal.Decimal(1).scaleb(d_exponent)


def sort_key(cell):
    if cell is None:
        return (0, 0)
    tag = cell[0]
    if tag in ("n", "f"):
        x = as_float(cell)
        if math.isnan(x):
            return (2, math.inf, decimal.Decimal(0))
        if x == 0 or math.isinf(x):
            return (2, x, decimal.Decimal(0))
        digits = SORT_DIGITS - 1 - int(math.floor(math.log10(abs(x))))
        # Exact numbers also sort by their exact value, so large integers that round alike
        # keep one order on both sides.
        return (2, round(x, digits), cell[1] if tag == "n" else decimal.Decimal(x))
    rank = {"b": 1, "s": 3, "t": 4, "i": 5}.get(tag, 6)
    return (rank, cell[1])


def row_key(row):
    return tuple(sort_key(c) for c in row)


def rows_match(a, b):
    return len(a) == len(b) and all(cells_match(x, y) for x, y in zip(a, b))


def compare(apiary_rows, duckdb_rows, ordered):
    """None when equal, "decimal scale" for DuckDB's narrowed decimals, else a description."""
    difference = compare_with(apiary_rows, duckdb_rows, ordered, rows_match)
    if difference is not None:
        coarse = compare_with(apiary_rows, duckdb_rows, ordered, rows_match_coarser_decimal)
        if coarse is None:
            return "decimal scale"
    return difference


def rows_match_coarser_decimal(a, b):
    return len(a) == len(b) and all(cells_match_coarser_decimal(x, y) for x, y in zip(a, b))


def compare_with(apiary_rows, duckdb_rows, ordered, rows_match):
    if ordered:
        if len(apiary_rows) == len(duckdb_rows) and all(rows_match(a, b) for a, b in zip(apiary_rows, duckdb_rows)):
            return None
    a = sorted(apiary_rows, key=row_key)
    b = sorted(duckdb_rows, key=row_key)
    if len(a) == len(b) and all(rows_match(x, y) for x, y in zip(a, b)):
        return "same rows, different order" if ordered else None
    only_a, only_b = [], []
    i = j = 0
    while i < len(a) and j < len(b):
        if rows_match(a[i], b[j]):
            i += 1
            j += 1
        elif row_key(a[i]) < row_key(b[j]):
            only_a.append(a[i])
            i += 1
        else:
            only_b.append(b[j])
            j += 1
    only_a.extend(a[i:])
    only_b.extend(b[j:])
    # Rows whose sort keys tie after rounding may sit in a different order on each side:
    # pair the leftovers directly.
    unmatched_b = list(only_b)
    still_a = []
    for row in only_a:
        partner = next((k for k, other in enumerate(unmatched_b) if rows_match(row, other)), None)
        if partner is None:
            still_a.append(row)
        else:
            unmatched_b.pop(partner)
    only_a, only_b = still_a, unmatched_b
    if not only_a and not only_b:
        return "same rows, different order" if ordered else None
    return (f"apiary {len(a)} rows, duckdb {len(b)} rows; only in apiary ({len(only_a)}): {show(only_a)}; "
            f"only in duckdb ({len(only_b)}): {show(only_b)}")


def show_cell(cell):
    if cell is None:
        return "NULL"
    return repr(cell[1]) if cell[0] != "n" else str(cell[1])


def show(rows, limit=5):
    text = " ".join("(" + ", ".join(show_cell(c) for c in row) + ")" for row in rows[:limit])
    return text + (f" ... {len(rows) - limit} more" if len(rows) > limit else "")


# ── engines ──────────────────────────────────────────────────────────────────────────────


def read_workload(path):
    schemas, queries = {}, []
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            if record["kind"] == "schema":
                schemas[record["schema"]] = []
            elif record["kind"] == "setup":
                schemas[record["schema"]].append(record["sql"])
            elif record["kind"] == "query":
                queries.append(record)
    return schemas, queries


def run_duckdb(schemas, queries, threads):
    import duckdb

    results = {}
    current, conn = None, None
    for query in queries:
        if query["schema"] != current:
            current = query["schema"]
            conn = duckdb.connect()
            if threads:
                conn.execute(f"SET threads = {threads}")
            for sql in schemas[current]:
                conn.execute(sql)
        try:
            cursor = conn.execute(query["sql"])
            real = [str(d[1]) == "FLOAT" for d in cursor.description]
            rows = cursor.fetchall()
            results[query["id"]] = ("rows", [[duckdb_cell(v, r) for v, r in zip(row, real)] for row in rows])
        except Exception as e:  # noqa: BLE001 - every DuckDB error is a result here
            message = str(e).splitlines()[0] if str(e) else type(e).__name__
            results[query["id"]] = ("error", message)
            if "FATAL" in message or "invalidated" in message:
                # DuckDB's own internal error poisons the database: start a new one.
                current = None
    return results


def run_apiary(apiary, workload, queries, settings, timeout):
    """Replays the workload, restarting after a crash; returns id -> outcome."""
    results = {}
    ids = [q["id"] for q in queries]
    start = 0
    while start < len(ids):
        command = [apiary, "bench", "replay", workload, "--from", str(ids[start])]
        for setting in settings:
            command += ["--set", setting]
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
            stdout, stderr, code = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            stderr, code = "timeout", -1
        last = None
        for line in stdout.splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            last = record["id"]
            if "error" in record:
                results[last] = ("error", record["error"], record.get("class", "error"))
            else:
                types = record["types"]
                rows = [[apiary_cell(v, t) for v, t in zip(row, types)] for row in record["rows"]]
                results[last] = ("rows", rows, types)
        if code == 0:
            break
        # The query after the last printed one crashed (or hung) the process.
        position = ids.index(last) + 1 if last is not None else start
        if position >= len(ids):
            break
        crashed = ids[position]
        tail = (stderr or "").strip().splitlines()
        results[crashed] = ("crash", " | ".join(tail[-3:]) if tail else f"exit code {code}")
        start = position + 1
    return results


# ── main ─────────────────────────────────────────────────────────────────────────────────


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--apiary", default=os.path.join(ROOT, "target", "debug", "apiary"))
    parser.add_argument("--seeds", default="1-20", help="e.g. 1-20 or 3,7")
    parser.add_argument("--queries", type=int, default=1000, help="queries per seed")
    parser.add_argument("--schemas", type=int, default=None, help="schemas per seed (default: one per 200 queries)")
    parser.add_argument("--threads", type=int, default=None, help="threads for both engines")
    parser.add_argument("--set", action="append", default=[], help="SET statement for Apiary")
    parser.add_argument("--enable", default="", help="sqlfuzz features to switch on")
    parser.add_argument("--disable", default="", help="sqlfuzz features to switch off")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "differential"))
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per Apiary replay process")
    args = parser.parse_args()

    os.makedirs(args.out, exist_ok=True)
    settings = list(args.set)
    if args.threads:
        settings.insert(0, f"SET threads = {args.threads}")
    mismatch_path = os.path.join(args.out, "mismatches.txt")
    classes = {}
    by_source = {}
    messages = {}
    total = 0
    started = time.time()
    with open(mismatch_path, "w") as mismatches:
        for seed in parse_seeds(args.seeds):
            workload = os.path.join(args.out, f"workload-{seed}.jsonl")
            command = [args.apiary, "bench", "fuzz", "--seed", str(seed), "--queries", str(args.queries), "--emit", workload]
            if args.schemas:
                command += ["--schemas", str(args.schemas)]
            if args.enable:
                command += ["--enable", args.enable]
            if args.disable:
                command += ["--disable", args.disable]
            subprocess.run(command, check=True, capture_output=True)
            schemas, queries = read_workload(workload)
            duck = run_duckdb(schemas, queries, args.threads)
            api = run_apiary(args.apiary, workload, queries, settings, args.timeout)
            for query in queries:
                total += 1
                qid = query["id"]
                a = api.get(qid, ("crash", "no output"))
                d = duck[qid]
                detail = None
                if a[0] == "crash":
                    cls, detail = "apiary_crash", a[1]
                elif a[0] == "error" and a[2] == "internal":
                    cls, detail = "apiary_internal", a[1]
                elif a[0] == "error" and d[0] == "error":
                    cls = "both_error"
                elif a[0] == "error":
                    cls = "not_implemented" if a[2] == "not_implemented" else "apiary_error"
                    detail = a[1]
                elif d[0] == "error":
                    cls, detail = "duckdb_error", d[1]
                else:
                    difference = compare(a[1], d[1], query["ordered"])
                    if difference is None:
                        cls = "match"
                    elif difference == "decimal scale":
                        cls = "decimal_scale"
                    else:
                        cls, detail = "mismatch", difference
                classes[cls] = classes.get(cls, 0) + 1
                per = by_source.setdefault(query["source"], {})
                per[cls] = per.get(cls, 0) + 1
                if cls in ("apiary_error", "duckdb_error", "not_implemented", "apiary_internal", "apiary_crash"):
                    key = (cls, "".join("#" if ch.isdigit() else ch for ch in (detail or ""))[:140])
                    messages[key] = messages.get(key, 0) + 1
                if cls not in ("match", "both_error", "not_implemented", "decimal_scale"):
                    mismatches.write(f"-- seed {seed} schema {query['schema']} query {qid} ({query['source']}): {cls}\n")
                    mismatches.write(f"-- {detail}\n{query['sql']};\n\n")
            for schema, statements in schemas.items():
                with open(os.path.join(args.out, f"setup-{seed}-{schema}.sql"), "w") as f:
                    f.write(";\n".join(statements) + ";\n")
            print(f"seed {seed}: {len(queries)} queries, "
                  + ", ".join(f"{k} {v}" for k, v in sorted(classes.items())), file=sys.stderr)

    print(f"\n{total} queries in {time.time() - started:.0f} s")
    for cls, count in sorted(classes.items(), key=lambda kv: -kv[1]):
        print(f"  {cls:<16} {count:>7}")
    print("\nby source:")
    for source, per in sorted(by_source.items()):
        print(f"  {source:<14} " + ", ".join(f"{k} {v}" for k, v in sorted(per.items())))
    print("\nmost frequent errors:")
    for (cls, message), count in sorted(messages.items(), key=lambda kv: -kv[1])[:25]:
        print(f"  {count:>6}  {cls:<16} {message}")
    print(f"\ndisagreements written to {mismatch_path} (setup SQL: {args.out}/setup-SEED-SCHEMA.sql)")
    print(json.dumps({"queries": total, "classes": classes, "seconds": round(time.time() - started, 1)}))


if __name__ == "__main__":
    main()
