"""Apiary: an analytical SQL database, in process.

    import apiary
    apiary.sql("SELECT 42 AS answer").fetchall()          # [(42,)]

    con = apiary.connect("sales.apiary")                   # or ":memory:" (the default)
    con.execute("CREATE TABLE t AS SELECT * FROM read_csv('t.csv')")
    con.sql("SELECT region, sum(amount) FROM t GROUP BY ALL").df()

    import pandas as pd
    orders = pd.DataFrame({"id": [1, 2], "amount": [9.5, 3.0]})
    con.sql("SELECT sum(amount) FROM orders").fetchone()    # the DataFrame, by name

The connection follows PEP 249 (DB-API 2.0, ``paramstyle = "qmark"``; ``$1`` also
works) and DuckDB's conventions: ``sql()`` returns a relation whose rows come out as
Python tuples, Arrow (``arrow()``, ``__arrow_c_stream__``), pandas (``df()``), Polars
(``pl()``) or NumPy (``fetchnumpy()``). Results cross into Arrow without copying
fixed-width columns; DataFrames and Arrow data named in ``FROM`` (a variable in the
calling function, or registered with ``register()``) are scanned in place.
"""

from __future__ import annotations

import sys
import threading
from typing import Any, Iterable, Optional, Sequence

from . import _apiary
from ._apiary import (
    DatabaseError,
    DataError,
    Error,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    ProgrammingError,
    Warning,
)
from ._convert import Interval, arrow_source, batches_to_rows, decimals_as_floats, intervals_as_durations, to_numpy
from ._dbapi import (
    BINARY,
    DATETIME,
    NUMBER,
    ROWID,
    STRING,
    Binary,
    Date,
    DateFromTicks,
    Time,
    TimeFromTicks,
    Timestamp,
    TimestampFromTicks,
)

__version__ = _apiary.version()

# PEP 249 module globals.
apilevel = "2.0"
# Threads may share the module and connections; a connection runs one statement at a
# time (``cursor()`` makes another session for a thread of its own).
threadsafety = 1
paramstyle = "qmark"

__all__ = [
    "connect",
    "sql",
    "execute",
    "table",
    "read_csv",
    "read_parquet",
    "from_arrow",
    "default_connection",
    "Connection",
    "Relation",
    "Interval",
    "Warning",
    "Error",
    "InterfaceError",
    "DatabaseError",
    "DataError",
    "OperationalError",
    "IntegrityError",
    "InternalError",
    "ProgrammingError",
    "NotSupportedError",
    "STRING",
    "BINARY",
    "NUMBER",
    "DATETIME",
    "ROWID",
    "Date",
    "Time",
    "Timestamp",
    "DateFromTicks",
    "TimeFromTicks",
    "TimestampFromTicks",
    "Binary",
]


def connect(database: str = ":memory:", config: Optional[dict] = None) -> "Connection":
    """Opens a database: in memory (``":memory:"``, the default) or the file ``database``.

    ``config`` holds settings applied with ``SET`` (``{"threads": 4, "memory_limit":
    "8GB"}``), and ``"progress_bar": True`` (DuckDB's name ``enable_progress_bar`` too)
    for a progress bar on stderr while a statement runs longer than a second.
    """
    connection = Connection(_apiary.connect(database))
    settings = dict(config or {})
    progress = [settings.pop(name) for name in ("progress_bar", "enable_progress_bar") if name in settings]
    if any(progress):
        connection._progress = _ProgressBar()
    for name, value in settings.items():
        connection.execute(f"SET {_identifier(name)} = {_literal(value)}")
    return connection


class _ProgressBar:
    """Draws the engine's progress lines on stderr, each over the last (a terminal and
    Jupyter both honour a carriage return); ``None`` clears the line."""

    def __init__(self):
        self._width = 0

    def __call__(self, line: Optional[str]) -> None:
        stream = sys.stderr
        if line is None:
            stream.write("\r" + " " * self._width + "\r")
            self._width = 0
        else:
            stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
        stream.flush()


class Connection:
    """A session on a database, usable as a DB-API connection and as its own cursor."""

    def __init__(self, native: "_apiary.Connection"):
        self._native = native
        self._registered: dict = {}
        self._result: Optional["_apiary.QueryResult"] = None
        # The last result's rows, when it has any: fetching goes through it.
        self._relation: Optional[Relation] = None
        self._rowcount = -1
        self.arraysize = 1
        # Draws a progress bar while statements run (`progress_bar` in connect's config).
        self._progress: Optional[_ProgressBar] = None

    # -- DB-API: connection ------------------------------------------------------------

    def cursor(self) -> "Connection":
        """A new cursor: another session on the same database (as in DuckDB), so that
        each thread can run statements of its own at the same time. Registered objects
        are shared with it."""
        cursor = Connection(self._native.duplicate())
        cursor._registered = self._registered
        cursor._progress = self._progress
        return cursor

    def close(self) -> None:
        self._native.close()
        self._set_result(None)

    @property
    def closed(self) -> bool:
        return self._native.closed

    def begin(self) -> "Connection":
        """Opens a transaction block (as DuckDB's `begin()`): the statements after it see
        one snapshot and their own changes, and commit together with `commit()` or vanish
        with `rollback()`. Without it every statement commits as it ends."""
        self.execute("BEGIN")
        return self

    def commit(self) -> None:
        """Commits the open transaction block (nothing to do without one). A conflict with
        another transaction's commit raises OperationalError (SQLSTATE 40001): retry."""
        self._check_open()
        self.execute("COMMIT")

    def rollback(self) -> None:
        """Undoes the open transaction block (nothing to do without one)."""
        self._check_open()
        self.execute("ROLLBACK")

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- DB-API: cursor ----------------------------------------------------------------

    def execute(self, query: str, parameters: Optional[Sequence] = None) -> "Connection":
        """Runs ``query`` (several ``;``-separated statements without parameters; one
        statement with ``?`` or ``$n`` placeholders when ``parameters`` are given)."""
        self._set_result(self._run(query, parameters, _caller_frame()))
        return self

    def executemany(self, query: str, seq_of_parameters: Iterable[Sequence]) -> "Connection":
        frame = _caller_frame()
        count = 0
        ran = False
        for parameters in seq_of_parameters:
            result = self._run(query, parameters, frame)
            ran = True
            if result is not None and result.rowcount > 0:
                count += result.rowcount
        self._set_result(None)
        self._rowcount = count if ran else -1
        return self

    @property
    def description(self) -> Optional[list]:
        result = self._result
        if result is None or not result.has_rows:
            return None
        return [(name, type_name, None, None, None, None, None) for name, type_name in zip(result.columns, result.types)]

    @property
    def rowcount(self) -> int:
        if self._result is None:
            return self._rowcount
        return self._result.rowcount

    def fetchone(self) -> Optional[tuple]:
        return self._current().fetchone()

    def fetchmany(self, size: Optional[int] = None) -> list:
        return self._current().fetchmany(self.arraysize if size is None else size)

    def fetchall(self) -> list:
        return self._current().fetchall()

    def setinputsizes(self, sizes) -> None:
        pass

    def setoutputsize(self, size, column=None) -> None:
        pass

    def __iter__(self):
        return iter(self.fetchone, None)

    # -- results of the last execute() as columns ---------------------------------------

    def arrow(self):
        """The last result as a ``pyarrow.Table``."""
        return self._current().arrow()

    def df(self):
        return self._current().df()

    def pl(self):
        return self._current().pl()

    def fetchnumpy(self) -> dict:
        return self._current().fetchnumpy()

    def fetch_record_batch(self, rows_per_batch: int = 1_000_000):
        return self._current().fetch_record_batch(rows_per_batch)

    fetch_arrow_table = arrow
    fetchdf = df

    # -- relations ---------------------------------------------------------------------

    def sql(self, query: str, params: Optional[Sequence] = None) -> Optional["Relation"]:
        """Runs ``query``; a query's rows come back as a :class:`Relation`, other
        statements return ``None``."""
        return _relation(self._run(query, params, _caller_frame()))

    query = sql

    def table(self, name: str) -> "Relation":
        return self.sql(f"SELECT * FROM {_identifier(name)}")

    def read_csv(self, path, **options) -> "Relation":
        """``read_csv(path, option = value, ...)`` (DuckDB's option names)."""
        return self._table_function("read_csv", path, options)

    def read_parquet(self, path, **options) -> "Relation":
        return self._table_function("read_parquet", path, options)

    def from_arrow(self, data) -> "Relation":
        """A relation over Arrow data (anything with ``__arrow_c_stream__``, a pandas or
        Polars DataFrame)."""
        source = arrow_source(data)
        if source is None:
            raise ProgrammingError(f"cannot read a {type(data).__name__} as Arrow data")
        return _relation(self._native.execute("SELECT * FROM __apiary_arrow", None, lambda name: source if name == "__apiary_arrow" else None))

    from_df = from_arrow

    def register(self, name: str, data) -> "Connection":
        """Makes ``data`` (a pandas or Polars DataFrame, a pyarrow Table, Dataset or
        RecordBatchReader, a relation) a table named ``name`` for this connection's
        queries. It is read in place at each query; a catalog table of the same name
        wins."""
        if arrow_source(data) is None:
            raise ProgrammingError(f"cannot register a {type(data).__name__}: it is not a DataFrame or Arrow data")
        self._registered[name.lower()] = data
        return self

    def unregister(self, name: str) -> "Connection":
        self._registered.pop(name.lower(), None)
        return self

    def interrupt(self) -> None:
        """Cancels the statement this connection is running (from another thread)."""
        self._native.interrupt()

    # -- internals ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._native.closed:
            raise InterfaceError("the connection is closed")

    def _run(self, query: str, parameters, frame):
        if not isinstance(query, str):
            raise ProgrammingError(f"a query is a string, not {type(query).__name__}")
        resolve = _Resolver(self._registered, frame)
        return self._native.execute(query, None if parameters is None else list(parameters), resolve, self._progress)

    def _table_function(self, function: str, path, options: dict) -> "Relation":
        paths = [path] if isinstance(path, str) else list(path)
        args = ["[" + ", ".join(_literal(str(p)) for p in paths) + "]"]
        args += [f"{_identifier(key)} = {_literal(value)}" for key, value in options.items()]
        return self.sql(f"SELECT * FROM {function}({', '.join(args)})")

    def _set_result(self, result) -> None:
        self._result = result
        self._relation = _relation(result)
        self._rowcount = -1

    def _current(self) -> "Relation":
        if self._relation is None:
            raise ProgrammingError("there is no result to fetch: run a query first")
        return self._relation


class Relation:
    """The rows of a query, ready to be fetched in any form (it may be fetched many
    times). It has ``__arrow_c_stream__``, so it can be named in another query's
    ``FROM`` or handed to any Arrow consumer."""

    def __init__(self, result: "_apiary.QueryResult"):
        self._result = result
        self._rows: Optional[list] = None
        self._position = 0

    @property
    def columns(self) -> list:
        return self._result.columns

    @property
    def types(self) -> list:
        return self._result.types

    @property
    def description(self) -> list:
        return [(name, type_name, None, None, None, None, None) for name, type_name in zip(self.columns, self.types)]

    @property
    def engine_seconds(self) -> float:
        """Seconds the engine spent running the query (parsing to result), without
        Python or the conversion of its rows."""
        return self._result.engine_seconds

    @property
    def shape(self) -> tuple:
        return (self._result.rowcount, len(self.columns))

    def __len__(self) -> int:
        return self._result.rowcount

    def __arrow_c_stream__(self, requested_schema=None):
        return self._result.__arrow_c_stream__(requested_schema)

    def __arrow_c_schema__(self):
        return self._result.__arrow_c_schema__()

    def arrow(self):
        """The rows as a ``pyarrow.Table`` (fixed-width columns share Apiary's memory)."""
        import pyarrow

        return pyarrow.RecordBatchReader.from_stream(self._result).read_all()

    to_arrow_table = arrow
    fetch_arrow_table = arrow

    def fetch_record_batch(self, rows_per_batch: int = 1_000_000):
        """The rows as a ``pyarrow.RecordBatchReader`` of batches of at most
        ``rows_per_batch`` rows."""
        return self.arrow().to_reader(max_chunksize=rows_per_batch)

    def df(self):
        """The rows as a pandas DataFrame (DECIMAL columns as float64, as in DuckDB)."""
        return decimals_as_floats(self.arrow()).to_pandas()

    to_df = df
    fetchdf = df

    def pl(self):
        """The rows as a Polars DataFrame. Text is handed over as Arrow string views,
        which Polars keeps as they are: no column's bytes are copied."""
        import polars
        import pyarrow

        schema = pyarrow.schema(self._result)
        views = pyarrow.schema([f.with_type(pyarrow.string_view()) if pyarrow.types.is_string(f.type) else f for f in schema])
        table = pyarrow.RecordBatchReader.from_stream(self._result, schema=views).read_all()
        return polars.from_arrow(intervals_as_durations(table), rechunk=False)

    def fetchnumpy(self) -> dict:
        """The columns as NumPy arrays (masked arrays where a column has NULLs)."""
        return to_numpy(self.arrow())

    def fetchall(self) -> list:
        return self.fetchmany(len(self._all_rows()))

    def fetchone(self) -> Optional[tuple]:
        rows = self.fetchmany(1)
        return rows[0] if rows else None

    def fetchmany(self, size: int = 1) -> list:
        rows = self._all_rows()
        chunk = rows[self._position : self._position + size]
        self._position += len(chunk)
        return chunk

    def _all_rows(self) -> list:
        """Every row as Python values, converted at the first fetch."""
        if self._rows is None:
            self._rows = batches_to_rows(self.arrow())
        return self._rows

    def show(self, max_rows: int = 20) -> None:
        print(self._preview(max_rows))

    def __repr__(self) -> str:
        return self._preview(10)

    def _preview(self, max_rows: int) -> str:
        table = self.arrow()
        head = batches_to_rows(table.slice(0, max_rows))
        cells = [list(map(str, self.columns)), list(map(str, self.types))]
        cells += [["NULL" if v is None else str(v) for v in row] for row in head]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.columns))]
        lines = [" | ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
        lines.insert(2, "-+-".join("-" * w for w in widths))
        if table.num_rows > max_rows:
            lines.append(f"({table.num_rows} rows, {max_rows} shown)")
        return "\n".join(lines)


def _relation(result) -> Optional[Relation]:
    if result is None or not result.has_rows:
        return None
    return Relation(result)


class _Resolver:
    """Finds a name the database does not know among the connection's registered
    objects, then the variables of the code that ran the query (see ``_scopes``), as
    DuckDB does: an exact match first, then one that differs only in letter case
    (unquoted SQL names are lowercased)."""

    def __init__(self, registered: dict, frame):
        self._registered = registered
        self._frame = frame

    def __call__(self, name: str):
        if name in self._registered:
            return arrow_source(self._registered[name])
        if self._frame is None:
            return None
        for scope in self._scopes():
            found = scope.get(name)
            if found is None:
                matches = [value for key, value in scope.items() if isinstance(key, str) and key.lower() == name]
                found = matches[0] if len(matches) == 1 else None
            if found is not None:
                source = arrow_source(found)
                if source is not None:
                    return source
        return None

    def _scopes(self):
        """The locals of the calling function and of the functions that called it
        (innermost first: a lambda or nested function sees its callers' variables), then
        the calling module's globals."""
        frame = self._frame
        while frame is not None:
            yield frame.f_locals
            frame = frame.f_back
        yield self._frame.f_globals


def _caller_frame():
    """The frame of the code that called into the package (skipping its own frames)."""
    frame = sys._getframe(1)
    package = __name__
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == package:
        frame = frame.f_back
    return frame


def _identifier(name: str) -> str:
    return '"' + str(name).replace('"', '""') + '"'


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_literal(str(k))}: {_literal(v)}" for k, v in value.items()) + "}"
    return "'" + str(value).replace("'", "''") + "'"


_default: Optional[Connection] = None
_default_lock = threading.Lock()


def default_connection() -> Connection:
    """The in-memory connection the module-level functions use."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = connect(":memory:")
        return _default


def sql(query: str, params: Optional[Sequence] = None) -> Optional[Relation]:
    """``default_connection().sql(query)``."""
    return _relation(default_connection()._run(query, params, _caller_frame()))


query = sql


def execute(query: str, parameters: Optional[Sequence] = None) -> Connection:
    connection = default_connection()
    connection._set_result(connection._run(query, parameters, _caller_frame()))
    return connection


def table(name: str) -> Relation:
    return default_connection().table(name)


def read_csv(path, **options) -> Relation:
    return default_connection().read_csv(path, **options)


def read_parquet(path, **options) -> Relation:
    return default_connection().read_parquet(path, **options)


def from_arrow(data) -> Relation:
    return default_connection().from_arrow(data)
