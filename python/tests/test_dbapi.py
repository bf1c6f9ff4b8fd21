"""PEP 249 (DB-API 2.0): module globals, connections, cursors, parameters."""

import pytest

import apiary


def test_module_globals():
    assert apiary.apilevel == "2.0"
    assert apiary.threadsafety in (1, 2, 3)
    assert apiary.paramstyle == "qmark"
    assert isinstance(apiary.__version__, str)


def test_exception_hierarchy():
    assert issubclass(apiary.Error, Exception)
    assert issubclass(apiary.Warning, Exception)
    assert issubclass(apiary.InterfaceError, apiary.Error)
    assert issubclass(apiary.DatabaseError, apiary.Error)
    for name in ["DataError", "OperationalError", "IntegrityError", "InternalError", "ProgrammingError", "NotSupportedError"]:
        assert issubclass(getattr(apiary, name), apiary.DatabaseError), name


def test_update_delete_truncate(con):
    import decimal

    con.execute("CREATE TABLE d (id INTEGER PRIMARY KEY, name VARCHAR, amount DECIMAL(10,2))")
    con.executemany("INSERT INTO d VALUES (?, ?, ?)", [(i, f"n{i}", decimal.Decimal(i) / 4) for i in range(10)])
    cur = con.cursor()
    cur.execute("UPDATE d SET amount = amount * 2 WHERE id >= ?", [5])
    assert cur.rowcount == 5
    cur.execute("DELETE FROM d WHERE id < 3 RETURNING id, name")
    assert sorted(cur.fetchall()) == [(0, "n0"), (1, "n1"), (2, "n2")]
    assert con.sql("SELECT count(*), sum(amount) FROM d").fetchone() == (7, decimal.Decimal("19.25"))
    with pytest.raises(apiary.IntegrityError):
        con.execute("UPDATE d SET id = 4 WHERE id = 5")
    assert con.sql("SELECT count(*) FROM d WHERE id = 5").fetchone() == (1,)
    con.execute("TRUNCATE d")
    assert con.sql("SELECT count(*) FROM d").fetchone() == (0,)


def test_upsert_and_merge(con):
    con.execute("CREATE TABLE kv (k INTEGER PRIMARY KEY, v INTEGER)")
    con.execute("INSERT INTO kv VALUES (1, 10), (2, 20)")
    cur = con.cursor()
    cur.execute("INSERT INTO kv VALUES (?, ?), (?, ?) ON CONFLICT (k) DO UPDATE SET v = kv.v + excluded.v RETURNING k, v", [2, 1, 3, 30])
    assert cur.fetchall() == [(2, 21), (3, 30)]
    cur.execute("INSERT INTO kv VALUES (1, 0), (4, 40) ON CONFLICT DO NOTHING")
    assert cur.rowcount == 1
    cur.execute(
        "MERGE INTO kv USING (VALUES (1, -1), (5, 50)) AS s(k, v) ON kv.k = s.k "
        "WHEN MATCHED AND s.v < 0 THEN DELETE WHEN NOT MATCHED THEN INSERT VALUES (s.k, s.v)"
    )
    assert cur.rowcount == 2
    assert con.sql("SELECT k, v FROM kv ORDER BY k").fetchall() == [(2, 21), (3, 30), (4, 40), (5, 50)]
    with pytest.raises(apiary.ProgrammingError) as raised:
        con.execute("INSERT INTO kv VALUES (9, 1), (9, 2) ON CONFLICT (k) DO UPDATE SET v = 0")
    assert raised.value.sqlstate == "21000"


def test_execute_fetch_and_description(con):
    cur = con.cursor()
    assert cur.execute("CREATE TABLE t (a INTEGER, b VARCHAR, c DECIMAL(10,2))") is cur
    assert cur.description is None
    cur.execute("INSERT INTO t VALUES (1, 'one', 1.50), (2, 'two', NULL), (3, NULL, 3.25)")
    assert cur.rowcount == 3
    cur.execute("SELECT a, b, c FROM t ORDER BY a")
    assert [d[0] for d in cur.description] == ["a", "b", "c"]
    assert cur.description[0][1] == apiary.NUMBER
    assert cur.description[1][1] == apiary.STRING
    assert cur.description[1][1] != apiary.NUMBER
    assert all(len(d) == 7 for d in cur.description)
    assert cur.rowcount == 3
    assert cur.fetchone() == (1, "one", __import__("decimal").Decimal("1.50"))
    assert cur.fetchmany(1)[0][0] == 2
    assert [r[0] for r in cur.fetchall()] == [3]
    assert cur.fetchone() is None
    assert cur.fetchall() == []


def test_arraysize_and_iteration(con):
    con.execute("SELECT * FROM range(10)")
    con.arraysize = 4
    assert len(con.fetchmany()) == 4
    assert [r[0] for r in con] == [4, 5, 6, 7, 8, 9]


def test_qmark_and_numbered_parameters(con):
    con.execute("CREATE TABLE p (a INTEGER, b VARCHAR)")
    con.execute("INSERT INTO p VALUES (?, ?)", [1, "x"])
    con.execute("INSERT INTO p VALUES ($1, $2)", (2, None))
    con.execute("INSERT INTO p VALUES ($2, $1)", ("y", 3))
    assert con.execute("SELECT a, b FROM p WHERE a >= ? ORDER BY a", [1]).fetchall() == [(1, "x"), (2, None), (3, "y")]
    # A `?` inside a string is text, not a parameter.
    assert con.execute("SELECT '?', ?", ["v"]).fetchall() == [("?", "v")]


def test_executemany(con):
    con.execute("CREATE TABLE m (a INTEGER, b DOUBLE)")
    con.executemany("INSERT INTO m VALUES (?, ?)", [(i, i / 2) for i in range(100)])
    assert con.rowcount == 100
    assert con.execute("SELECT count(*), sum(b) FROM m").fetchone() == (100, 2475.0)


def test_parameters_need_one_statement(con):
    with pytest.raises(apiary.ProgrammingError, match="one statement"):
        con.execute("SELECT ?; SELECT 1", [1])


def test_missing_parameter_value(con):
    with pytest.raises(apiary.ProgrammingError):
        con.execute("SELECT ? + ?", [1])


def test_scripts_return_the_last_result(con):
    assert con.execute("CREATE TABLE s (a INTEGER); INSERT INTO s VALUES (7); SELECT a FROM s").fetchall() == [(7,)]


def test_fetch_without_a_result(con):
    con.execute("CREATE TABLE e (a INTEGER)")
    with pytest.raises(apiary.ProgrammingError, match="no result"):
        con.fetchall()


def test_close_and_context_manager():
    with apiary.connect() as con:
        assert con.execute("SELECT 1").fetchall() == [(1,)]
    assert con.closed
    with pytest.raises(apiary.InterfaceError):
        con.execute("SELECT 1")
    con.close()  # closing twice is fine


def test_commit_and_rollback(con):
    con.execute("CREATE TABLE c (a INTEGER)")
    con.commit()  # no block open: nothing to do
    con.rollback()
    con.begin()
    con.execute("INSERT INTO c VALUES (1), (2)")
    assert con.sql("SELECT count(*) FROM c").fetchone() == (2,)
    con.rollback()
    assert con.sql("SELECT count(*) FROM c").fetchone() == (0,)
    con.begin().execute("INSERT INTO c VALUES (3)")
    con.commit()
    assert con.sql("SELECT sum(a) FROM c").fetchone() == (3,)
    # First committer wins: the second transaction to update the row cannot commit.
    other = apiary.connect()
    first, second = con.cursor(), con.cursor()
    first.execute("BEGIN; UPDATE c SET a = 10")
    second.execute("BEGIN; UPDATE c SET a = 20")
    first.execute("COMMIT")
    with pytest.raises(apiary.OperationalError) as conflict:
        second.execute("COMMIT")
    assert conflict.value.sqlstate == "40001"
    assert con.sql("SELECT a FROM c").fetchone() == (10,)
    other.close()


def test_ddl_inside_a_transaction(con):
    con.begin()
    con.execute("CREATE TABLE staged AS SELECT * FROM range(5) t(i)")
    con.execute("ALTER TABLE staged ADD COLUMN doubled BIGINT")
    con.execute("UPDATE staged SET doubled = i * 2")
    assert con.sql("SELECT sum(doubled) FROM staged").fetchone() == (20,)
    con.rollback()
    with pytest.raises(apiary.ProgrammingError, match="does not exist"):
        con.execute("SELECT * FROM staged")
    con.begin()
    con.execute("CREATE TABLE staged (i INTEGER)")
    con.execute("INSERT INTO staged VALUES (7)")
    con.commit()
    assert con.sql("SELECT i FROM staged").fetchall() == [(7,)]


def test_cursors_share_the_database():
    con = apiary.connect()
    con.execute("CREATE TABLE shared (a INTEGER)")
    cur = con.cursor()
    cur.execute("INSERT INTO shared VALUES (1)")
    assert con.execute("SELECT count(*) FROM shared").fetchone() == (1,)
    cur.close()
    assert con.execute("SELECT 1").fetchone() == (1,)


def test_file_database_persists(tmp_path):
    path = str(tmp_path / "db.apiary")
    with apiary.connect(path) as con:
        con.execute("CREATE TABLE kept (a INTEGER)")
        con.execute("INSERT INTO kept VALUES (1), (2)")
    with apiary.connect(path) as con:
        assert con.execute("SELECT sum(a) FROM kept").fetchone()[0] == 3


def test_config_applies_settings():
    con = apiary.connect(config={"threads": 1})
    assert con.execute("SHOW threads").fetchone()[0] in ("1", 1)
    with pytest.raises(apiary.Error):
        apiary.connect(config={"no_such_setting": 1})


def test_module_level_functions():
    assert apiary.sql("SELECT 40 + 2").fetchone() == (42,)
    assert apiary.execute("SELECT ?", [5]).fetchall() == [(5,)]
    assert apiary.sql("CREATE TABLE IF NOT EXISTS module_level (a INTEGER)") is None
    assert apiary.table("module_level").fetchall() == []
