"""Engine errors arrive as PEP 249 exception classes with the SQLSTATE."""

import pytest

import apiary


@pytest.mark.parametrize(
    "sql, error, sqlstate",
    [
        ("SELEC 1", apiary.ProgrammingError, "42601"),
        ("SELECT * FROM no_such_table", apiary.ProgrammingError, "42P01"),
        ("SELECT no_such_column", apiary.ProgrammingError, "42703"),
        ("SELECT 'a' + 1", apiary.DataError, None),
        ("SELECT true + 1", apiary.ProgrammingError, None),
        ("SELECT 1 / 0", apiary.DataError, None),
        ("SELECT CAST('x' AS INTEGER)", apiary.DataError, None),
        ("SELECT 2147483647::INTEGER + 1", apiary.DataError, None),
    ],
)
def test_error_classes(con, sql, error, sqlstate):
    with pytest.raises(error) as raised:
        con.execute(sql)
    assert raised.value.sqlstate
    if sqlstate:
        assert raised.value.sqlstate == sqlstate


def test_constraint_is_integrity_error(con):
    con.execute("CREATE TABLE n (a INTEGER NOT NULL)")
    with pytest.raises(apiary.IntegrityError) as raised:
        con.execute("INSERT INTO n VALUES (NULL)")
    assert raised.value.sqlstate.startswith("23")


def test_duplicate_table(con):
    con.execute("CREATE TABLE d (a INTEGER)")
    with pytest.raises(apiary.ProgrammingError) as raised:
        con.execute("CREATE TABLE d (a INTEGER)")
    assert raised.value.sqlstate == "42P07"


def test_failed_statement_changes_nothing(con):
    con.execute("CREATE TABLE f (a INTEGER)")
    with pytest.raises(apiary.DataError):
        con.execute("INSERT INTO f SELECT 1 / (x - 5) FROM range(10) t(x)")
    assert con.execute("SELECT count(*) FROM f").fetchone() == (0,)


def test_deep_expression_is_an_error_not_a_crash(con):
    sql = "SELECT " + "(" * 5000 + "1" + ")" * 5000
    with pytest.raises(apiary.Error):
        con.execute(sql)


def test_unsupported_parameter_type(con):
    with pytest.raises(apiary.NotSupportedError):
        con.execute("SELECT ?", [object()])


def test_non_string_query(con):
    with pytest.raises(apiary.ProgrammingError):
        con.execute(42)


def test_deep_statements_with_parameters(con):
    # Long operator chains bind on the statement's own thread: a result or a clean error.
    for depth in (500, 3000):
        sql = "SELECT " + " + ".join(["?"] * depth)
        try:
            assert con.execute(sql, [1] * depth).fetchone() == (depth,)
        except apiary.Error as e:
            assert e.sqlstate
    nested = "SELECT " + "(" * 200 + "?" + ")" * 200
    assert con.execute(nested, [7]).fetchone() == (7,)
