"""Writes the CSV and Parquet fixtures under tests/files/ with the tools that write such
files in the wild (pandas, pyarrow, DuckDB, R- / MySQL- / Excel- / Spark-style output).
The files are committed; this script documents how they were made and remakes them:

    python3 -m venv /tmp/fixtures && /tmp/fixtures/bin/pip install pandas pyarrow duckdb
    /tmp/fixtures/bin/python tests/files/make_fixtures.py

The expected answers are in tests/sql/files/*.slt, checked against DuckDB reading the
same files (see the comments there)."""

import datetime
import gzip
import os
import shutil

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))


def path(*parts):
    return os.path.join(HERE, *parts)


def write_bytes(name, data):
    with open(path(name), "wb") as f:
        f.write(data)


def pandas_files():
    df = pd.DataFrame(
        {
            "id": [1, 2, 3, 4],
            "name": ["Ann", "Bob, Jr.", 'say "hi"', None],
            "score": [1.5, None, 3.25, -4.0],
            "joined": pd.to_datetime(["2012-01-31", "2013-02-28", None, "2015-12-01"]),
            "active": [True, False, True, None],
            "visits": pd.array([10, None, 30, 40], dtype="Int64"),
        }
    )
    # pandas' defaults: an unnamed index column, NaN and None as empty fields.
    df.to_csv(path("pandas_default.csv"))
    df.to_csv(path("pandas_na.csv"), index=False, na_rep="NA")
    df.to_parquet(path("pandas.parquet"))


def r_style():
    # R's write.csv: quoted strings and header, "" for the row-name column, NA unquoted.
    text = (
        '"","city","population","founded","capital"\n'
        '"1","Vienna",1897000,1137-01-01,TRUE\n'
        '"2","Graz",NA,1128-06-15,FALSE\n'
        '"3","NA",12000,NA,NA\n'
    )
    write_bytes("r_write_csv.csv", text.encode())


def mysql_style():
    # SELECT ... INTO OUTFILE: tabs, \N for NULL, no header.
    text = "1\tapple\t0.50\t2020-01-01 10:00:00\n2\t\\N\t1.25\t\\N\n3\tpear\t\\N\t2020-03-01 23:59:59\n"
    write_bytes("mysql_outfile.tsv", text.encode())


def excel_style():
    # Excel in a European locale: byte-order mark, semicolons, CRLF, dd.mm.yyyy dates.
    text = "\ufeffOrder;Customer;Date;Amount\r\n1001;Müller;31.01.2012;15\r\n1002;Łukasz;29.02.2012;7\r\n1003;Ñandú;01.12.2012;\r\n"
    write_bytes("excel_semicolon.csv", text.encode("utf-8"))


def us_dates():
    text = (
        "event,day,at,flag\n"
        "launch,01/31/2012,01/31/2012 10:05:00 PM,yes\n"
        "review,2/5/2013,02/05/2013 09:00:00 AM,no\n"
        "close,12/24/2014,12/24/2014 12:00:00 PM,yes\n"
    )
    write_bytes("us_dates.csv", text.encode())


def iso_zones():
    text = (
        "id,at\n"
        "1,2012-01-31T10:00:00Z\n"
        "2,2012-01-31T12:30:00+02:00\n"
        "3,2012-02-01T00:00:00.250-05:00\n"
    )
    write_bytes("iso_zones.csv", text.encode())


def duckdb_files():
    con = duckdb.connect()
    con.execute(
        """CREATE TABLE t AS SELECT i AS id, 'item ' || i AS label, (i * 1.25)::DECIMAL(10,2) AS price,
           DATE '2020-01-01' + i::INTEGER AS day, TIMESTAMP '2020-01-01 00:00:00' + i::INTEGER * INTERVAL 90 MINUTE AS at,
           CASE WHEN i % 3 = 0 THEN NULL ELSE i % 2 = 0 END AS even
           FROM range(1, 1001) r(i)"""
    )
    con.execute(f"COPY t TO '{path('duckdb.csv')}' (HEADER)")
    con.execute(f"COPY t TO '{path('duckdb.csv.gz')}' (HEADER, COMPRESSION gzip)")
    con.execute(f"COPY t TO '{path('duckdb.csv.zst')}' (HEADER, COMPRESSION zstd)")
    con.execute(
        f"COPY (SELECT id, INTERVAL (id) DAY + INTERVAL (id) MINUTE AS wait FROM t WHERE id <= 3) TO '{path('duckdb_interval.parquet')}' (FORMAT parquet)"
    )


def duckdb_statistics():
    """One row group of 20,000 rows with the statistics DuckDB writes (min, max, NULL
    counts, distinct counts of dictionary-encoded columns) and strings of every kind."""
    con = duckdb.connect()
    con.execute(
        f"""COPY (SELECT i AS id, 'tag' || (i % 25) AS tag, DATE '2020-01-01' + (i % 400)::INTEGER AS day,
                CASE WHEN i % 10 = 3 THEN NULL WHEN i % 10 = 4 THEN '' WHEN i % 10 = 5 THEN 'twelve bytes'
                     ELSE md5(i::VARCHAR) END AS note
            FROM range(0, 20000) r(i)) TO '{path('duckdb_statistics.parquet')}' (FORMAT parquet)"""
    )


def spark_style():
    # Spark writes a directory of part files (each with its header) and a _SUCCESS marker.
    out = path("spark_out")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    parts = [[(1, "a", "2021-05-01"), (2, "b", "2021-05-02")], [(3, "c", "2021-05-03")], [(4, None, None)]]
    for n, rows in enumerate(parts):
        lines = ["key,value,day"] + [",".join("" if v is None else str(v) for v in row) for row in rows]
        data = ("\n".join(lines) + "\n").encode()
        name = f"part-{n:05d}-5e1c7e5f-c000.csv"
        if n == 2:
            with gzip.open(os.path.join(out, name + ".gz"), "wb") as f:
                f.write(data)
        else:
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
    open(os.path.join(out, "_SUCCESS"), "wb").close()
    table = pa.table({"key": pa.array([1, 2, 3], pa.int64()), "value": pa.array(["x", None, "z"])})
    pq.write_table(table.slice(0, 2), os.path.join(out, "part-00000-5e1c7e5f-c000.snappy.parquet"))
    pq.write_table(table.slice(2, 1), os.path.join(out, "part-00001-5e1c7e5f-c000.snappy.parquet"))


def pyarrow_times():
    instants = [datetime.datetime(2021, 3, 4, 5, 6, 7, 123456), None, datetime.datetime(1999, 12, 31, 23, 59, 59)]
    columns = {}
    for unit in ["s", "ms", "us", "ns"]:
        columns[f"ts_{unit}"] = pa.array(instants, pa.timestamp(unit))
    columns["ts_utc"] = pa.array(instants, pa.timestamp("us", tz="UTC"))
    columns["ts_vienna"] = pa.array(instants, pa.timestamp("ms", tz="Europe/Vienna"))
    columns["d32"] = pa.array([datetime.date(2021, 3, 4), None, datetime.date(1999, 12, 31)], pa.date32())
    columns["d64"] = pa.array([datetime.date(2021, 3, 4), None, datetime.date(1999, 12, 31)], pa.date64())
    pq.write_table(pa.table(columns), path("pyarrow_timestamps.parquet"))
    nested = pa.table({"id": pa.array([1, 2]), "tags": pa.array([["a", "b"], []], pa.list_(pa.string()))})
    pq.write_table(nested, path("pyarrow_nested.parquet"))


def pyarrow_times_of_day():
    # TIME columns in every Arrow unit (Parquet TIME millis/micros/nanos), and instants with
    # a zone other than UTC.
    times = [datetime.time(10, 30, 15, 250000), None, datetime.time(23, 59, 59, 999999), datetime.time(0, 0)]
    columns = {
        "t_s": pa.array([datetime.time(10, 30, 15), None, datetime.time(23, 59, 59), datetime.time(0, 0)], pa.time32("s")),
        "t_ms": pa.array(times, pa.time32("ms")),
        "t_us": pa.array(times, pa.time64("us")),
        "t_ns": pa.array(times, pa.time64("ns")),
        "at": pa.array(
            [datetime.datetime(2024, 7, 31, 10, 0), None, datetime.datetime(2024, 1, 31, 10, 0), datetime.datetime(1999, 12, 31, 23, 0)],
            pa.timestamp("us", tz="America/New_York"),
        ),
    }
    pq.write_table(pa.table(columns), path("pyarrow_times_of_day.parquet"))


if __name__ == "__main__":
    pandas_files()
    r_style()
    mysql_style()
    excel_style()
    us_dates()
    iso_zones()
    duckdb_files()
    duckdb_statistics()
    spark_style()
    pyarrow_times()
    pyarrow_times_of_day()
