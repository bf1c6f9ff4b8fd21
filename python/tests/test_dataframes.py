"""Python data queried in place: registered objects and variables named in FROM."""

import pandas as pd
import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pytest

import apiary


def test_pandas_variable_by_name(con):
    sales = pd.DataFrame({"region": ["n", "s", "n", None], "amount": [1.5, 2.0, 3.0, 4.0]})
    rows = con.sql("SELECT region, sum(amount) FROM sales GROUP BY region ORDER BY region NULLS LAST").fetchall()
    assert rows == [("n", 4.5), ("s", 2.0), (None, 4.0)]


def test_mixed_case_variable(con):
    myFrame = pd.DataFrame({"a": [1, 2, 3]})  # noqa: N806
    assert con.sql("SELECT sum(a) FROM myFrame").fetchone()[0] == 6
    assert con.sql('SELECT count(*) FROM "myFrame"').fetchone()[0] == 3


def test_polars_and_arrow_variables(con):
    frame = pl.DataFrame({"k": [1, 2, 2], "s": ["a", "bb", "a string longer than twelve"]})
    weights = pa.table({"k": [2, 3], "w": [10.0, 20.0]})
    rows = con.sql("SELECT f.s, t.w FROM frame f JOIN weights t ON f.k = t.k ORDER BY f.s").fetchall()
    assert rows == [("a string longer than twelve", 10.0), ("bb", 10.0)]
    lazy = frame.lazy().filter(pl.col("k") == 2)
    assert con.sql("SELECT count(*) FROM lazy").fetchone()[0] == 2


def test_record_batch_reader_and_dataset(con, tmp_path):
    table = pa.table({"x": list(range(1000))})
    reader = pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=100))
    assert con.sql("SELECT sum(x) FROM reader").fetchone()[0] == 499500
    import pyarrow.parquet as pq

    pq.write_table(table, tmp_path / "x.parquet")
    dataset = ds.dataset(tmp_path / "x.parquet")
    assert con.sql("SELECT max(x) FROM dataset").fetchone()[0] == 999


def test_register_and_unregister(con):
    df = pd.DataFrame({"v": [1, 2, 3]})
    con.register("numbers", df)
    assert con.sql("SELECT sum(v) FROM numbers").fetchone()[0] == 6
    # Read at each query: a change to the DataFrame shows.
    df.loc[3] = [4]
    assert con.sql("SELECT sum(v) FROM numbers").fetchone()[0] == 10
    con.unregister("numbers")
    with pytest.raises(apiary.ProgrammingError):
        con.sql("SELECT * FROM numbers")


def test_catalog_tables_win_over_python_names(con):
    t = pd.DataFrame({"a": [100]})  # noqa: F841
    con.execute("CREATE TABLE t (a INTEGER)")
    con.execute("INSERT INTO t VALUES (1)")
    assert con.sql("SELECT a FROM t").fetchall() == [(1,)]


def test_register_rejects_other_objects(con):
    with pytest.raises(apiary.ProgrammingError):
        con.register("x", 42)


def test_relations_in_from_and_from_arrow(con):
    first = con.sql("SELECT x, x * 2 AS y FROM range(5) t(x)")
    assert con.sql("SELECT sum(y) FROM first").fetchone()[0] == 20
    rel = con.from_arrow(pa.table({"z": [1, 2]}))
    assert rel.fetchall() == [(1,), (2,)]


def test_dataframe_round_trip(con):
    df = pd.DataFrame(
        {
            "i": pd.array([1, None, 3], dtype="Int64"),
            "f": [1.5, None, 3.5],
            "s": ["a", None, "c"],
            "t": pd.to_datetime(["2024-01-01", None, "2024-01-03"]),
            "b": [True, False, None],
        }
    )
    out = con.sql("SELECT * FROM df").df()
    assert out["i"].isna().tolist() == [False, True, False]
    assert out["f"].isna().tolist() == [False, True, False]
    assert out["s"].tolist()[0] == "a" and pd.isna(out["s"].tolist()[1])
    assert out["t"].tolist()[2] == pd.Timestamp("2024-01-03")
    assert out["b"].isna().tolist() == [False, False, True]


def test_zero_copy_numeric_columns(con):
    import numpy as np

    df = pd.DataFrame({"x": np.arange(1_000_000, dtype=np.int64)})
    assert con.sql("SELECT sum(x) FROM df").fetchone()[0] == 499999500000
    # A result column shares Apiary's memory: pyarrow reports no copy needed.
    table = con.sql("SELECT x FROM df WHERE x < 10").arrow()
    assert table.column("x").to_pylist() == list(range(10))


def test_read_csv_and_parquet(con, tmp_path):
    path = tmp_path / "a.csv"
    path.write_text("id,name\n1,x\n2,y\n")
    assert con.read_csv(str(path)).fetchall() == [(1, "x"), (2, "y")]
    assert con.read_csv(str(path), header=True, delim=",").fetchall() == [(1, "x"), (2, "y")]
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"q": [1.0, 2.0]}), tmp_path / "p.parquet")
    assert con.read_parquet(str(tmp_path / "p.parquet")).fetchall() == [(1.0,), (2.0,)]


def test_fetch_record_batch(con):
    reader = con.sql("SELECT * FROM range(2500) t(x)").fetch_record_batch(1000)
    sizes = [batch.num_rows for batch in reader]
    assert sum(sizes) == 2500 and max(sizes) <= 1000


def test_arrow_c_stream_consumers(con):
    rel = con.sql("SELECT 1 AS a")
    assert pa.table(rel).to_pylist() == [{"a": 1}]
    assert pl.DataFrame(rel).to_dicts() == [{"a": 1}]


def test_variables_of_enclosing_functions(con):
    outer = pd.DataFrame({"v": [1, 2]})  # noqa: F841 (read by name)

    def inner():
        return con.sql("SELECT sum(v) FROM outer").fetchone()[0]

    assert inner() == 3
    assert (lambda: con.sql("SELECT count(*) FROM outer").fetchone()[0])() == 2


def test_text_as_string_views(con):
    # Text of many chunks (short strings inline, long ones in heaps shared by several
    # chunks), with NULLs, through the string-view export that .pl() asks for.
    con.execute(
        "CREATE TABLE words AS SELECT i, CASE WHEN i % 7 = 0 THEN NULL WHEN i % 2 = 0 THEN 'w' || i "
        "ELSE 'a string longer than twelve bytes #' || i END AS s FROM range(20000) t(i)"
    )
    expected = con.sql("SELECT s FROM words ORDER BY i").arrow().column("s").to_pylist()
    assert expected[0] is None and expected[2] == "w2" and expected[1].endswith("#1")
    assert con.sql("SELECT s FROM words ORDER BY i").pl()["s"].to_list() == expected
    # The stream follows a requested schema's string views, and only those.
    rel = con.sql("SELECT i, s, s AS plain FROM words ORDER BY i")
    requested = pa.schema([("i", pa.int64()), ("s", pa.string_view()), ("plain", pa.string())])
    table = pa.RecordBatchReader.from_stream(rel, schema=requested).read_all()
    assert table.schema.field("s").type == pa.string_view()
    assert table.schema.field("plain").type == pa.string()
    assert table.column("s").to_pylist() == expected == table.column("plain").to_pylist()
    # Views of a filtered and of an empty result.
    assert con.sql("SELECT s FROM words WHERE i % 5 = 1 ORDER BY i").pl()["s"].to_list() == expected[1::5]
    assert con.sql("SELECT s FROM words WHERE i < 0").pl().shape == (0, 1)


def test_large_results_convert_every_column_kind(con):
    # More rows than one Arrow batch and many chunks: decimals with NULLs (widened to
    # 128 bits while concatenated), few-valued text (held as dictionary codes by packed
    # blocks, exported from the codes), both as plain strings and as views.
    con.execute(
        "CREATE TABLE kinds AS SELECT i, CASE WHEN i % 11 = 0 THEN NULL ELSE (i % 1000)::DECIMAL(12,2) / 8 END AS d, "
        "CASE i % 3 WHEN 0 THEN 'AIR' WHEN 1 THEN 'a mode of shipping by rail' ELSE NULL END AS mode FROM range(1100000) t(i)"
    )
    sql = "SELECT i, d, mode FROM kinds"
    table = con.sql(sql).arrow()
    assert table.num_rows == 1100000 and len(table.column("d").chunks) >= 2
    sums = con.sql("SELECT sum(d), count(d), count(mode), count(*) FILTER (WHERE mode = 'AIR') FROM kinds").fetchone()
    import pyarrow.compute as pc

    assert pc.sum(table.column("d")).as_py() == sums[0]
    assert table.column("d").null_count == 1100000 - sums[1]
    assert table.column("mode").null_count == 1100000 - sums[2]
    assert pc.sum(pc.equal(table.column("mode"), "AIR")).as_py() == sums[3]
    frame = con.sql(sql).pl()
    assert frame["mode"].null_count() == 1100000 - sums[2] and (frame["mode"] == "AIR").sum() == sums[3]
    assert frame["mode"].to_list()[:3] == ["AIR", "a mode of shipping by rail", None]


def test_pandas_numeric_columns_and_missing_values(con):
    import numpy as np

    frame = pd.DataFrame(
        {
            "f64": [1.0, np.nan, -np.inf],
            "f32": np.array([np.nan, 2.5, 1.0], dtype=np.float32),
            "clean": [0.5, 1.5, 2.5],
            "u8": np.array([1, 2, 255], dtype=np.uint8),
            "b": [True, False, True],
            "s": ["x", None, "z"],
        }
    )
    rows = con.sql("SELECT * FROM frame").fetchall()
    assert rows == [(1.0, None, 0.5, 1, True, "x"), (None, 2.5, 1.5, 2, False, None), (float("-inf"), 1.0, 2.5, 255, True, "z")]
    assert con.sql("SELECT count(f64), count(f32), sum(clean) FROM frame").fetchone() == (2, 2, 4.5)
    empty = frame.iloc[0:0]
    assert con.sql("SELECT count(*) FROM empty").fetchone() == (0,)
    # Names that are not unique strings: converted as pyarrow converts them.
    numbered = pd.DataFrame({0: [1, 2], 1: [np.nan, 3.0]})
    assert con.sql("SELECT \"0\", \"1\" FROM numbered").fetchall() == [(1, None), (2, 3.0)]
