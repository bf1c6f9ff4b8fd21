#!/usr/bin/env python3
"""TPC-DS data, queries and reference answers from DuckDB's tpcds extension (dsdgen).

    bench/.venv/tpcds/bin/python bench/tpcds_gen.py data --sf 1 --dir bench/data/tpcds-sf1
    bench/.venv/tpcds/bin/python bench/tpcds_gen.py fixture --sf 0.01 [--dir tests/tpcds] [--no-data]

Runs in the generator's own environment, bench/.venv/tpcds (made by bench/tpcds_setup.sh):
DuckDB 1.5.5 with the tpcds extension from the PyPI wheel `duckdb-extension-tpcds` (the
extension is loaded from the file inside the wheel, so nothing is downloaded at run time).
The extension only exists for that DuckDB version; the timing runs of bench/tpcds_compare.py
use the newer DuckDB in bench/.venv.

`data` writes DIR/<table>.parquet (zstd, one file per table, the types of dsdgen's tables:
BIGINT/INTEGER, VARCHAR, DECIMAL(p,2), DATE) and DIR/schema.sql.

`fixture` writes the test-suite fixture (see tests/tpcds/README.md): the 99 queries
(qNN.sql, the text of `tpcds_queries()`), schema.sql, answers/qNN.csv (DuckDB's answers on
the data of that scale factor) and, unless --no-data, data/<table>.parquet.
"""

import argparse
import datetime
import decimal
import glob
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLES = [
    "call_center", "catalog_page", "catalog_returns", "catalog_sales", "customer", "customer_address",
    "customer_demographics", "date_dim", "household_demographics", "income_band", "inventory", "item",
    "promotion", "reason", "ship_mode", "store", "store_returns", "store_sales", "time_dim", "warehouse",
    "web_page", "web_returns", "web_sales", "web_site",
]


def connect(threads=2):
    """A DuckDB connection with the tpcds extension loaded from the installed wheel."""
    import duckdb
    import duckdb_extension_tpcds
    package = os.path.dirname(duckdb_extension_tpcds.__file__)
    paths = glob.glob(os.path.join(package, "extensions", f"v{duckdb.__version__}", "tpcds.duckdb_extension"))
    if not paths:
        sys.exit(f"no tpcds extension for DuckDB {duckdb.__version__} in {package} (pin duckdb to the wheel's version)")
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    con.execute(f"LOAD '{paths[0]}'")
    return con


def generate(con, sf):
    con.execute(f"CALL dsdgen(sf = {sf})")


def schema(con):
    """CREATE TABLE statements for the 24 tables as dsdgen made them (DuckDB's types)."""
    statements = []
    for table in TABLES:
        columns = con.execute(
            "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
            [table]).fetchall()
        body = ",\n".join(f"    {name} {data_type}" for name, data_type in columns)
        statements.append(f"CREATE TABLE {table} (\n{body}\n);\n")
    return "\n".join(statements)


def write_parquet(con, directory, level=3):
    """One zstd Parquet file per table (level 19 for the committed fixture: smaller, slower)."""
    os.makedirs(directory, exist_ok=True)
    for table in TABLES:
        path = os.path.join(directory, f"{table}.parquet")
        con.execute(f"COPY {table} TO '{path}' (FORMAT parquet, COMPRESSION zstd, COMPRESSION_LEVEL {level})")


def queries(con):
    return {q: sql for q, sql in con.execute("SELECT query_nr, query FROM tpcds_queries() ORDER BY query_nr").fetchall()}


def format_value(value):
    """One field of an answer file: NULL for NULL, decimals with all their digits, doubles
    with 10 decimal places (trailing zeros kept), dates as YYYY-MM-DD, text as is."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.10f}"
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    text = str(value)
    if "|" in text or "\n" in text:
        raise ValueError(f"field {text!r} has a separator")
    return text


def answer_text(columns, rows):
    lines = ["|".join(columns)]
    lines += ["|".join(format_value(v) for v in row) for row in rows]
    return "\n".join(lines) + "\n"


def cmd_data(args):
    con = connect(args.threads)
    generate(con, args.sf)
    write_parquet(con, args.dir)
    with open(os.path.join(args.dir, "schema.sql"), "w") as f:
        f.write(schema(con))
    print(f"wrote TPC-DS SF{args.sf:g} to {args.dir}", file=sys.stderr)


def cmd_fixture(args):
    import duckdb
    con = connect(args.threads)
    generate(con, args.sf)
    directory = args.dir
    os.makedirs(os.path.join(directory, "answers"), exist_ok=True)
    with open(os.path.join(directory, "schema.sql"), "w") as f:
        f.write(f"-- TPC-DS tables as DuckDB's dsdgen creates them (DuckDB {duckdb.__version__}, tpcds extension)\n\n")
        f.write(schema(con))
    empty = []
    for q, sql in queries(con).items():
        with open(os.path.join(directory, f"q{q:02d}.sql"), "w") as f:
            f.write(sql.rstrip() + "\n")
        cursor = con.execute(sql)
        columns = [d[0] for d in cursor.description]
        rows = cursor.fetchall()
        if not rows:
            empty.append(q)
        with open(os.path.join(directory, "answers", f"q{q:02d}.csv"), "w") as f:
            f.write(answer_text(columns, rows))
    if not args.no_data:
        write_parquet(con, os.path.join(directory, "data"), level=19)
    print(f"wrote the fixture for SF{args.sf:g} to {directory}; empty answers: {empty}", file=sys.stderr)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    data = sub.add_parser("data", help="Parquet files and schema.sql for one scale factor")
    data.add_argument("--sf", type=float, required=True)
    data.add_argument("--dir", required=True)
    data.add_argument("--threads", type=int, default=2)
    fixture = sub.add_parser("fixture", help="queries, schema, answers (and data) for the test suite")
    fixture.add_argument("--sf", type=float, default=0.01)
    fixture.add_argument("--dir", default=os.path.join(ROOT, "tests", "tpcds"))
    fixture.add_argument("--threads", type=int, default=2)
    fixture.add_argument("--no-data", action="store_true")
    args = parser.parse_args()
    {"data": cmd_data, "fixture": cmd_fixture}[args.command](args)


if __name__ == "__main__":
    main()
