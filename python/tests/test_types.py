"""Every Apiary type round-trips to its natural Python, Arrow, pandas and Polars type,
NULLs included."""

import datetime
import decimal

import pyarrow as pa
import pytest

import apiary

# (SQL type, a SQL literal, the Python value, the Arrow type)
CASES = [
    ("BOOLEAN", "true", True, pa.bool_()),
    ("SMALLINT", "-7", -7, pa.int16()),
    ("INTEGER", "2147483647", 2147483647, pa.int32()),
    ("BIGINT", "-9223372036854775808", -9223372036854775808, pa.int64()),
    ("REAL", "1.5", 1.5, pa.float32()),
    ("DOUBLE", "2.25", 2.25, pa.float64()),
    ("DECIMAL(15,2)", "1234567890123.45", decimal.Decimal("1234567890123.45"), pa.decimal128(15, 2)),
    ("DECIMAL(38,10)", "1234567890123456789012345678.0123456789", decimal.Decimal("1234567890123456789012345678.0123456789"), pa.decimal128(38, 10)),
    ("VARCHAR", "'héllo, wörld — a longer string'", "héllo, wörld — a longer string", pa.string()),
    ("DATE", "DATE '1998-12-01'", datetime.date(1998, 12, 1), pa.date32()),
    ("TIME", "TIME '13:14:15.123456'", datetime.time(13, 14, 15, 123456), pa.time64("us")),
    ("TIMESTAMP", "TIMESTAMP '2024-02-29 23:59:59.5'", datetime.datetime(2024, 2, 29, 23, 59, 59, 500000), pa.timestamp("us")),
    (
        "TIMESTAMPTZ",
        "TIMESTAMPTZ '2024-02-29 23:59:59+00'",
        datetime.datetime(2024, 2, 29, 23, 59, 59, tzinfo=datetime.timezone.utc),
        pa.timestamp("us", tz="UTC"),
    ),
    ("INTERVAL", "INTERVAL '3 days 4 hours'", datetime.timedelta(days=3, hours=4), pa.month_day_nano_interval()),
    ("INTERVAL", "INTERVAL '1 month 2 days'", apiary.Interval(1, 2, 0), pa.month_day_nano_interval()),
]


@pytest.mark.parametrize("sql_type, literal, value, arrow_type", CASES, ids=[c[0] + str(i) for i, c in enumerate(CASES)])
def test_round_trip(con, sql_type, literal, value, arrow_type):
    con.execute(f"CREATE TABLE v (x {sql_type})")
    con.execute(f"INSERT INTO v VALUES ({literal}), (NULL)")
    # Python values
    assert con.execute("SELECT x FROM v").fetchall() == [(value,), (None,)]
    # Arrow
    table = tbl = con.sql("SELECT x FROM v").arrow()  # noqa: F841 (read by name below)
    assert table.schema.field("x").type == arrow_type
    assert table.column("x").null_count == 1
    # pandas and Polars keep the NULL
    frame = con.sql("SELECT x FROM v").df()
    assert frame["x"].isna().tolist() == [False, True]
    if isinstance(value, apiary.Interval):
        # Polars has no type for intervals with months.
        with pytest.raises(apiary.NotSupportedError):
            con.sql("SELECT x FROM v").pl()
    else:
        polars_frame = con.sql("SELECT x FROM v").pl()
        assert polars_frame["x"].null_count() == 1
    # A parameter of the Python value comes back equal.
    if sql_type != "REAL":
        assert con.execute(f"SELECT CAST(? AS {sql_type})", [value]).fetchone() == (value,)
    # Arrow data goes back in unchanged.
    back = con.sql("SELECT x FROM tbl").arrow()
    assert back.equals(table)


def test_timestamptz_in_the_session_time_zone_is_still_utc_in_arrow(con):
    con.execute("SET TimeZone = 'America/New_York'")
    table = con.sql("SELECT TIMESTAMPTZ '2024-01-01 12:00:00+00' AS t").arrow()
    assert table.column("t")[0].as_py() == datetime.datetime(2024, 1, 1, 12, tzinfo=datetime.timezone.utc)


def test_parameters_of_every_kind(con):
    values = [
        None,
        True,
        42,
        2**62,
        10**30,
        1.25,
        "text",
        decimal.Decimal("-12.345"),
        datetime.date(2000, 2, 29),
        datetime.datetime(2000, 1, 1, 12, 30),
        datetime.datetime(2000, 1, 1, 12, 30, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
        datetime.time(1, 2, 3),
        datetime.timedelta(days=-1, seconds=5, microseconds=7),
    ]
    row = con.execute("SELECT " + ", ".join("?" for _ in values), values).fetchone()
    assert row[:9] == tuple(values[:9])
    assert row[9] == values[9]
    assert row[10] == values[10]
    assert row[11] == values[11]
    assert row[12] == values[12]


def test_large_integer_parameters(con):
    assert con.execute("SELECT ?, ?", [2**63 - 1, 2**63]).fetchone() == (2**63 - 1, 2**63)
    with pytest.raises(apiary.DataError):
        con.execute("SELECT ? + 1", [2**63 - 1])  # BIGINT overflow, as in PostgreSQL
    with pytest.raises(apiary.DataError):
        con.execute("SELECT ?", [10**40])


def test_fetchnumpy(con):
    import numpy as np

    result = con.sql("SELECT x, CASE WHEN x % 2 = 0 THEN x END AS even, x::VARCHAR AS s FROM range(5) t(x)").fetchnumpy()
    assert result["x"].dtype == np.int64
    assert result["x"].tolist() == [0, 1, 2, 3, 4]
    assert isinstance(result["even"], np.ma.MaskedArray)
    assert result["even"].mask.tolist() == [False, True, False, True, False]
    assert result["s"].tolist() == ["0", "1", "2", "3", "4"]


def test_empty_results_keep_their_schema(con):
    rel = con.sql("SELECT 1 AS a, 'x' AS b WHERE false")
    assert rel.fetchall() == []
    assert rel.arrow().schema.names == ["a", "b"]
    assert list(rel.df().columns) == ["a", "b"]
    assert rel.pl().columns == ["a", "b"]


def test_many_chunks_become_few_batches_with_their_nulls(con):
    # Results are made of vector-sized chunks; Arrow gets batches of up to 2^20 rows.
    rel = con.sql(
        "SELECT x, CASE WHEN x % 3 = 0 THEN NULL ELSE x::VARCHAR END AS s, "
        "CASE WHEN x % 5 = 0 THEN NULL ELSE x * 1.5 END AS d, (x % 100)::DECIMAL(10,2) AS m "
        "FROM range(2500000) t(x)"
    )
    table = rel.arrow()
    assert table.num_rows == 2500000
    assert len(table.to_batches()) == 3
    assert table.column("s").null_count == 833334
    assert table.column("d").null_count == 500000
    sample = table.slice(2499990, 10).to_pylist()
    for row in sample:
        x = row["x"]
        assert row["s"] == (None if x % 3 == 0 else str(x))
        assert row["d"] == (None if x % 5 == 0 else __import__("decimal").Decimal(x) * __import__("decimal").Decimal("1.5"))
        assert row["m"] == __import__("decimal").Decimal(x % 100)
