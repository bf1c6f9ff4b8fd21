"""psycopg 3 against a running Apiary server (TPC-H loaded, table t(a INTEGER, b VARCHAR)).

Run by crates/server/tests/clients.rs: python psycopg_check.py HOST PORT. Exits non-zero
with the failing check on stderr; prints "psycopg: ok" at the end.
"""

import sys
from decimal import Decimal
import datetime

import psycopg
from psycopg import errors


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    conninfo = f"host={host} port={port} user=pytest dbname=apiary"

    with psycopg.connect(conninfo, autocommit=True) as conn:
        cur = conn.cursor()
        # Parameters of several types (psycopg binds them server-side, extended protocol).
        cur.execute(
            "SELECT count(*) FROM lineitem WHERE l_quantity > %s AND l_shipmode = %s AND l_shipdate < %s",
            (Decimal("30"), "AIR", datetime.date(1995, 1, 1)),
        )
        (count,) = cur.fetchone()
        cur.execute(
            "SELECT count(*) FROM lineitem WHERE l_quantity > 30 AND l_shipmode = 'AIR' AND l_shipdate < DATE '1995-01-01'"
        )
        check(cur.fetchone() == (count,) and count > 0, f"parameters: {count}")
        # Values come back as Python types, in text and in binary.
        for binary in (False, True):
            cur = conn.cursor(binary=binary)
            cur.execute(
                "SELECT 1::int2, 2::int4, 3::int8, 1.5::real, 0.25::double, 12.50::numeric(10,2), 'x'::varchar, "
                "DATE '2024-02-29', TIMESTAMP '2001-02-03 04:05:06.5', true, NULL::int"
            )
            row = cur.fetchone()
            expected = (
                1, 2, 3, 1.5, 0.25, Decimal("12.50"), "x", datetime.date(2024, 2, 29),
                datetime.datetime(2001, 2, 3, 4, 5, 6, 500000), True, None,
            )
            check(row == expected, f"types (binary={binary}): {row}")
        # TIMESTAMPTZ and TIME: psycopg reads instants in the session's zone (from the
        # TimeZone parameter the server reports) and binds aware datetimes and times.
        conn.execute("SET TimeZone = 'Europe/Vienna'")
        check(conn.info.parameter_status("TimeZone") == "Europe/Vienna", "TimeZone reported")
        instant = datetime.datetime(2024, 7, 31, 10, 0, tzinfo=datetime.timezone.utc)
        for binary in (False, True):
            cur = conn.cursor(binary=binary)
            cur.execute("SELECT TIMESTAMPTZ '2024-07-31 12:00:00', TIME '10:30:00.5', %s::timestamptz + INTERVAL '1 hour', %s::time", (instant, datetime.time(23, 59)))
            row = cur.fetchone()
            check(row[0] == instant and row[0].utcoffset() == datetime.timedelta(hours=2), f"timestamptz (binary={binary}): {row}")
            check(row[1] == datetime.time(10, 30, 0, 500000), f"time (binary={binary}): {row}")
            check(row[2] == instant + datetime.timedelta(hours=1), f"timestamptz parameter (binary={binary}): {row}")
            check(row[3] == datetime.time(23, 59), f"time parameter (binary={binary}): {row}")
        cur = conn.cursor()
        cur.execute("CREATE TABLE stamps (id INTEGER, at TIMESTAMPTZ, opens TIME)")
        cur.executemany("INSERT INTO stamps VALUES (%s, %s, %s)", [(1, instant, datetime.time(8)), (2, None, None)])
        cur.execute("SELECT at::text, opens FROM stamps ORDER BY id")
        check(cur.fetchall() == [("2024-07-31 12:00:00+02", datetime.time(8)), (None, None)], "timestamptz round trip")
        conn.execute("RESET TimeZone")
        check(conn.info.parameter_status("TimeZone") == "UTC", "TimeZone reset reported")
        cur = conn.cursor()
        # Prepared statements reused (prepare=True: Parse once, Bind/Execute many).
        total = 0
        for line in range(1, 8):
            cur.execute("SELECT count(*) FROM lineitem WHERE l_linenumber = %s", (line,), prepare=True)
            total += cur.fetchone()[0]
        cur.execute("SELECT count(*) FROM lineitem")
        check(cur.fetchone()[0] == total, "prepared statements")
        # executemany (a pipeline of Bind/Execute).
        cur.execute("CREATE TABLE py (id INTEGER, name VARCHAR, amount DECIMAL(10,2))")
        cur.executemany("INSERT INTO py VALUES (%s, %s, %s)", [(i, f"n{i}", Decimal(i) / 4) for i in range(100)])
        cur.execute("SELECT count(*), sum(amount) FROM py")
        check(cur.fetchone() == (100, Decimal("1237.50")), "executemany")
        # COPY in and out.
        with cur.copy("COPY py FROM STDIN") as copy:
            for i in range(100, 150):
                copy.write_row((i, None if i % 2 else f"c{i}", Decimal("1.25")))
        cur.execute("SELECT count(*), count(name) FROM py")
        check(cur.fetchone() == (150, 125), "copy from stdin")
        rows = []
        with cur.copy("COPY (SELECT id, name FROM py WHERE id >= 148 ORDER BY id) TO STDOUT") as copy:
            for row in copy.rows():
                rows.append(row)
        check(rows == [("148", "c148"), ("149", None)], f"copy to stdout: {rows}")
        # UPDATE and DELETE with parameters (extended protocol): rowcount, RETURNING.
        cur.execute("UPDATE py SET amount = amount + %s WHERE id < %s", (Decimal("0.50"), 10))
        check(cur.rowcount == 10, f"update rowcount {cur.rowcount}")
        cur.execute("DELETE FROM py WHERE id >= %s RETURNING id, amount", (148,))
        check(sorted(cur.fetchall()) == [(148, Decimal("1.25")), (149, Decimal("1.25"))], "delete returning")
        cur.execute("SELECT count(*), sum(amount) FROM py WHERE id < 10")
        check(cur.fetchone() == (10, Decimal("16.25")), "after update and delete")
        # Upsert with parameters: rowcount counts inserted and updated rows; RETURNING.
        cur.execute("CREATE TABLE py_keyed (id INTEGER PRIMARY KEY, amount DECIMAL(10,2))")
        cur.execute("INSERT INTO py_keyed VALUES (1, 1.00), (2, 2.00)")
        cur.execute(
            "INSERT INTO py_keyed VALUES (%s, %s), (%s, %s) ON CONFLICT (id) DO UPDATE "
            "SET amount = py_keyed.amount + excluded.amount RETURNING id, amount",
            (2, Decimal("0.50"), 3, Decimal("3.00")),
        )
        check(cur.rowcount == 2, f"upsert rowcount {cur.rowcount}")
        check(cur.fetchall() == [(2, Decimal("2.50")), (3, Decimal("3.00"))], "upsert returning")
        # Errors are typed by SQLSTATE and the connection goes on.
        try:
            cur.execute("SELECT * FROM no_such_table")
            check(False, "error expected")
        except errors.UndefinedTable:
            pass
        cur.execute("SELECT 1")
        check(cur.fetchone() == (1,), "after an error")

    # Default (non-autocommit) mode: psycopg opens a transaction; a server-side cursor
    # fetches in batches; writes commit with conn.commit() and vanish with rollback().
    with psycopg.connect(conninfo) as conn:
        with conn.cursor(name="big") as named:
            named.itersize = 1000
            named.execute("SELECT l_orderkey FROM lineitem ORDER BY l_orderkey, l_linenumber")
            first = named.fetchmany(10)
            check(len(first) == 10, "server-side cursor fetchmany")
            rest = sum(1 for _ in named)
        cur = conn.cursor()
        cur.execute("SELECT count(*) FROM lineitem")
        check(cur.fetchone()[0] == 10 + rest, "server-side cursor iteration")
        cur.execute("INSERT INTO t VALUES (9, 'nine')")
        cur.execute("SELECT count(*) FROM t WHERE a = 9")
        check(cur.fetchone()[0] == 1, "a transaction reads its own write")
        conn.rollback()
        cur.execute("SELECT count(*) FROM t WHERE a = 9")
        check(cur.fetchone()[0] == 0, "rolled back")
        cur.execute("INSERT INTO t VALUES (10, 'ten')")
        conn.commit()
    with psycopg.connect(conninfo, autocommit=True) as other:
        check(other.execute("SELECT count(*) FROM t WHERE a = 10").fetchone()[0] == 1, "committed")
        # Two transactions updating one row: the second to commit gets a serialization
        # failure (first committer wins), nothing is lost.
        with psycopg.connect(conninfo) as first, psycopg.connect(conninfo) as second:
            first.execute("UPDATE t SET b = 'first' WHERE a = 10")
            second.execute("UPDATE t SET b = 'second' WHERE a = 10")
            first.commit()
            try:
                second.commit()
                check(False, "the second commit must fail")
            except errors.SerializationFailure:
                pass
        check(other.execute("SELECT b FROM t WHERE a = 10").fetchone()[0] == "first", "first committer wins")
        # DDL in default mode (what pandas' to_sql and SQLAlchemy's create_all do): the
        # table is the transaction's until commit; rollback removes it.
        with psycopg.connect(conninfo) as conn:
            conn.execute("CREATE TABLE made_in_tx (id SERIAL PRIMARY KEY, name VARCHAR)")
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO made_in_tx (name) VALUES (%s)", [("a",), ("b",)])
            new_id = conn.execute("INSERT INTO made_in_tx (name) VALUES (%s) RETURNING id", ("c",)).fetchone()[0]
            check(new_id == 3, "SERIAL ids with RETURNING")
            conn.execute("DELETE FROM made_in_tx WHERE id = 3")
            check(conn.execute("SELECT count(*) FROM made_in_tx").fetchone()[0] == 2, "a block reads its new table")
            try:
                other.execute("SELECT * FROM made_in_tx")
                check(False, "an uncommitted table must not be visible")
            except errors.UndefinedTable:
                pass
            conn.commit()
            conn.execute("DROP TABLE made_in_tx")
            conn.rollback()
        check(other.execute("SELECT count(*) FROM made_in_tx").fetchone()[0] == 2, "committed DDL; rolled-back DROP")
    print("psycopg: ok")


if __name__ == "__main__":
    main()
