"""The 22 TPC-H queries at SF0.01 through the Python API, against the reference
answers in tpch/answers."""

import decimal

import pytest

import apiary
from conftest import REPOSITORY


@pytest.fixture(scope="module")
def tpch():
    con = apiary.connect()
    con.execute("CALL dbgen(sf = 0.01)")
    yield con
    con.close()


def _same(expected: str, actual) -> bool:
    if actual is None:
        return expected == ""
    try:
        a, b = float(expected), float(actual)
        return abs(a - b) <= 0.01 or abs(a - b) <= 1e-6 * max(abs(a), abs(b))
    except (TypeError, ValueError):
        return expected.rstrip() == str(actual).rstrip()


@pytest.mark.parametrize("number", range(1, 23))
def test_tpch_query(tpch, number):
    sql = (REPOSITORY / "tpch" / "queries" / f"q{number:02}.sql").read_text()
    answer = (REPOSITORY / "tpch" / "answers" / "sf0.01" / f"q{number:02}.csv").read_text()
    # One trailing newline ends the file; an empty line before it is a row of one NULL.
    lines = answer.removesuffix("\n").split("\n")
    expected = [line.split("|") for line in lines[1:]]
    table = tpch.sql(sql).arrow()
    rows = tpch.sql(sql).fetchall()
    assert table.num_rows == len(rows) == len(expected)
    for got, want in zip(rows, expected):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            if isinstance(g, decimal.Decimal):
                g = str(g)
            assert _same(w, g), (number, want, got)
