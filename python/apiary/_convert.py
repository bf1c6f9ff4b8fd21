"""Conversions between Python values and Arrow data for the package."""

from __future__ import annotations

import datetime
import decimal
from typing import NamedTuple, Optional


class Interval(NamedTuple):
    """An INTERVAL with months, which no ``datetime.timedelta`` represents exactly
    (one without months comes back as a ``timedelta``)."""

    months: int
    days: int
    microseconds: int


def arrow_source(data) -> Optional[object]:
    """``data`` as an object with ``__arrow_c_stream__``, or ``None`` if it is not
    tabular data Apiary can read (pandas and Polars DataFrames, pyarrow tables,
    record batches, readers and datasets, relations, any Arrow stream exporter)."""
    module = type(data).__module__.split(".")[0]
    if module == "pandas":
        import pandas
        import pyarrow

        if isinstance(data, pandas.DataFrame):
            return _pandas_table(data)
        return None
    if module == "polars":
        import polars

        if isinstance(data, polars.LazyFrame):
            data = data.collect()
        return data if isinstance(data, polars.DataFrame) else None
    if module == "pyarrow":
        import pyarrow

        if isinstance(data, pyarrow.RecordBatch):
            return pyarrow.Table.from_batches([data])
        try:
            import pyarrow.dataset

            if isinstance(data, pyarrow.dataset.Dataset):
                return data.scanner().to_reader()
        except ImportError:
            pass
    if hasattr(data, "__arrow_c_stream__"):
        return data
    return None


def _pandas_table(frame):
    """A pandas DataFrame as a ``pyarrow.Table``. Numeric NumPy columns keep their
    memory (no copy); a float column is scanned for NaN (pandas' missing value, NULL in
    SQL) only when its minimum is NaN, which one vectorised pass finds (``min``
    propagates NaN), instead of pyarrow's element-by-element null check. Other columns
    convert as ``pyarrow.Table.from_pandas`` converts them."""
    import numpy
    import pyarrow

    names = list(frame.columns)
    if not all(isinstance(name, str) for name in names) or len(set(names)) != len(names):
        return pyarrow.Table.from_pandas(frame, preserve_index=False)
    arrays = {}
    for position, name in enumerate(names):
        dtype = frame.dtypes.iloc[position]
        if not isinstance(dtype, numpy.dtype) or dtype.kind not in "iufb":
            continue
        values = frame.iloc[:, position].to_numpy(copy=False)
        if dtype.kind == "f" and len(values) and numpy.isnan(values.min()):
            arrays[name] = pyarrow.array(values, from_pandas=True)
        else:
            arrays[name] = pyarrow.array(values)
    rest = [name for name in names if name not in arrays]
    if rest:
        converted = pyarrow.Table.from_pandas(frame[rest], preserve_index=False)
        arrays.update(zip(rest, converted.columns))
    return pyarrow.table({name: arrays[name] for name in names})


def batches_to_rows(table) -> list:
    """The rows of a ``pyarrow.Table`` as tuples of Python values."""
    columns = [_column_values(table.column(i)) for i in range(table.num_columns)]
    if not columns:
        return [() for _ in range(table.num_rows)]
    return list(zip(*columns))


def _column_values(column) -> list:
    import pyarrow

    values = column.to_pylist()
    if pyarrow.types.is_interval(column.type):
        return [_interval(v) for v in values]
    return values


def _interval(value):
    if value is None:
        return None
    months, days, nanoseconds = value.months, value.days, value.nanoseconds
    if months == 0:
        return datetime.timedelta(days=days, microseconds=nanoseconds // 1000)
    return Interval(months, days, nanoseconds // 1000)


def decimals_as_floats(table):
    """DECIMAL columns as float64, as DuckDB's ``df()`` and ``fetchnumpy()`` give them:
    NumPy has no decimal type, and a column of ``decimal.Decimal`` objects is slow."""
    import pyarrow

    for index, field in enumerate(table.schema):
        if pyarrow.types.is_decimal(field.type):
            table = table.set_column(index, field.name, table.column(index).cast(pyarrow.float64()))
    return table


def intervals_as_durations(table):
    """INTERVAL columns as Arrow durations (which Polars reads); an interval with months
    has no exact duration and raises ``NotSupportedError``."""
    import pyarrow
    import pyarrow.compute

    for index, field in enumerate(table.schema):
        if not pyarrow.types.is_interval(field.type):
            continue
        values = table.column(index).to_pylist()
        if any(v is not None and v.months != 0 for v in values):
            raise _error("NotSupportedError", f"column {field.name}: an INTERVAL with months has no exact duration for Polars")
        micros = [None if v is None else v.days * 86_400_000_000 + v.nanoseconds // 1000 for v in values]
        table = table.set_column(index, field.name, pyarrow.array(micros, pyarrow.duration("us")))
    return table


def to_numpy(table) -> dict:
    """The columns of a ``pyarrow.Table`` as NumPy arrays; a column with NULLs becomes a
    masked array."""
    import numpy

    out = {}
    table = decimals_as_floats(table)
    for name, column in zip(table.column_names, table.columns):
        array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        if array.null_count:
            mask = array.is_null().to_numpy(zero_copy_only=False)
            values = array.fill_null(_filler(array.type)).to_numpy(zero_copy_only=False) if _filler(array.type) is not None else array.to_numpy(zero_copy_only=False)
            out[name] = numpy.ma.masked_array(values, mask=mask)
        else:
            out[name] = array.to_numpy(zero_copy_only=False)
    return out


def _filler(arrow_type):
    import pyarrow

    if pyarrow.types.is_integer(arrow_type) or pyarrow.types.is_floating(arrow_type):
        return 0
    if pyarrow.types.is_boolean(arrow_type):
        return False
    return None


def parameter(value) -> tuple:
    """A parameter value the extension module does not convert itself, as (type, text)
    for the engine to cast: DECIMAL, DATE, TIME, TIMESTAMP[TZ], INTERVAL."""
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise _error("DataError", f"decimal {value} is not a finite number")
        return ("decimal", format(value, "f"))
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            return ("timestamp", value.isoformat(sep=" "))
        return ("timestamptz", value.astimezone(datetime.timezone.utc).isoformat(sep=" "))
    if isinstance(value, datetime.date):
        return ("date", value.isoformat())
    if isinstance(value, datetime.time):
        if value.tzinfo is not None:
            raise _error("NotSupportedError", "TIME WITH TIME ZONE parameters are not supported")
        return ("time", value.isoformat())
    if isinstance(value, datetime.timedelta):
        micros = value.microseconds
        return ("interval", f"{value.days} days {value.seconds} seconds {micros} microseconds")
    if isinstance(value, Interval):
        return ("interval", f"{value.months} months {value.days} days {value.microseconds} microseconds")
    raise _error("NotSupportedError", f"cannot pass a {type(value).__name__} as a parameter")


def _error(name: str, message: str) -> Exception:
    from . import _apiary

    return getattr(_apiary, name)(message)
