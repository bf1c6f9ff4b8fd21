"""PEP 249 type objects and constructors."""

from __future__ import annotations

import datetime
import time


class _TypeObject:
    """Compares equal to the SQL type names (``description``'s type codes) of a kind."""

    def __init__(self, *prefixes: str):
        self._prefixes = prefixes

    def __eq__(self, other) -> bool:
        return isinstance(other, str) and other.upper().startswith(self._prefixes)

    def __hash__(self) -> int:
        return hash(self._prefixes)

    def __repr__(self) -> str:
        return f"TypeObject{self._prefixes}"


STRING = _TypeObject("VARCHAR", "CHAR", "TEXT")
BINARY = _TypeObject("BLOB", "BYTEA")
NUMBER = _TypeObject("SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "DECIMAL", "NUMERIC", "REAL", "FLOAT", "DOUBLE", "BOOLEAN")
DATETIME = _TypeObject("DATE", "TIME", "TIMESTAMP", "INTERVAL")
ROWID = _TypeObject("ROWID")

Date = datetime.date
Time = datetime.time
Timestamp = datetime.datetime


def DateFromTicks(ticks: float) -> datetime.date:
    return Date(*time.localtime(ticks)[:3])


def TimeFromTicks(ticks: float) -> datetime.time:
    return Time(*time.localtime(ticks)[3:6])


def TimestampFromTicks(ticks: float) -> datetime.datetime:
    return Timestamp(*time.localtime(ticks)[:6])


def Binary(value) -> bytes:
    return bytes(value)
