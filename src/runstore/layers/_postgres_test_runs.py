"""The test-run services on PostgreSQL: ``PostgresDataStore`` and ``PostgresDataReader``.

A small adapter. The services are the SQLite layer's storage and query hooks
(``_test_runs_sqlite``) over the shared skeleton (``_test_runs_shared``), so both backends
run the same statements and the same rules; only what differs is here:

- :class:`_Dialect` turns the layer's SQLite statements into PostgreSQL ones, once per
  statement text: ``?``/``?N`` parameters become psycopg's server-side ``%(pN)s``;
  ``x IN (SELECT value FROM json_each(?))`` becomes ``x = ANY(%(pN)s)`` with the JSON array
  passed as a list (``NOT IN`` as ``<> ALL``); SQLite's join-order hint ``CROSS JOIN ... ON``
  a plain ``JOIN``; the null-safe ``a IS b`` ``a IS NOT DISTINCT FROM b``; the two-argument
  ``min(a, b)`` ``LEAST(a, b)``. Nothing else is rewritten, so a statement the rules below
  do not cover fails loudly in the contract suite rather than meaning something else.
- Locks. Every write unit starts with ``pg_advisory_xact_lock(TEST_RUNS_LOCK)``: test-run
  writers are serialized as ``BEGIN IMMEDIATE`` serializes them on SQLite, which is what the
  ids read from ``max(id) + 1`` and the counter rows rely on; the transaction is ``READ
  COMMITTED`` (each statement sees every commit made before the lock was granted). Reads
  run ``REPEATABLE READ READ ONLY`` (one snapshot) and take no lock.
- Caches. The file and module id mirrors stand within one unit only (there is no
  ``PRAGMA data_version`` to tell that another client pruned rows): each write unit starts
  with them empty. ``compact()`` is PostgreSQL's ``VACUUM`` (``full`` for ``VACUUM FULL``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Any, TypeVar, cast

import psycopg
from returns.result import Failure, Result, Success

from runstore.exceptions import TransactionMisuse
from runstore.layers import _postgres_search as postgres_search
from runstore.layers._layer import Container, Layer, merge
from runstore.layers._postgres_database import PostgresDatabase, Row
from runstore.layers._postgres_errors import from_psycopg
from runstore.layers._sqlite_database import SqliteDatabase
from runstore.layers._test_runs_sqlite import SqliteDataReader, SqliteDataStore
from runstore.layers._unit_of_work import TxDict
from runstore.services._search_rules import FailureRow, SearchQuery, TestRow
from runstore.services.clock import Clock
from runstore.services.errors import Busy, StorageFailure
from runstore.services.test_runs import DataReader, DataStore, DataStoreError

__all__ = ["TEST_RUNS_LOCK", "PostgresDataReader", "PostgresDataStore", "postgres_test_runs"]

T = TypeVar("T")
E = TypeVar("E")
K = TypeVar("K")
V = TypeVar("V")

TEST_RUNS_LOCK = 0x72756E7374657374
"""The advisory lock every test-run write unit holds (the bytes of ``runstest``)."""

_JSON_LIST = re.compile(
    r"(NOT\s+)?IN\s*\(\s*SELECT\s+value\s+FROM\s+json_each\((\?\d*)\)\s*\)", re.IGNORECASE
)
_PARAMETER = re.compile(r"\?(\d*)")
_NULL_SAFE_IS = re.compile(r"\bIS\s+(?!NOT\b|NULL\b|DISTINCT\b)", re.IGNORECASE)
_LEAST = re.compile(r"\bmin\(([^(),]+),([^(),]+)\)", re.IGNORECASE)
_CROSS_JOIN = re.compile(r"\bCROSS\s+JOIN\b", re.IGNORECASE)
_PLAIN_INSERT = re.compile(
    r"\s*INSERT\s+INTO\s+(\w+)\s*\(([\w\s,]+)\)\s*VALUES\s*\(\s*\?(?:\s*,\s*\?)*\s*\)\s*",
    re.IGNORECASE,
)

COPY_FROM_ROWS = 32
"""From this many rows on, a plain ``INSERT ... VALUES (?, ...)`` batch is sent as ``COPY``."""


class _Statement:
    """One translated statement: its PostgreSQL text and how to bind SQLite's parameters."""

    __slots__ = ("json_params", "named", "sql")

    def __init__(self, sql: str, named: bool, json_params: frozenset[int]) -> None:
        self.sql = sql
        self.named = named
        self.json_params = json_params

    def bind(self, params: Sequence[Any]) -> dict[str, Any]:
        """The named parameters of ``params`` (SQLite's, in order, numbered from 1)."""
        bound = {f"p{index}": value for index, value in enumerate(params, start=1)}
        for index in self.json_params:
            bound[f"p{index}"] = json.loads(bound[f"p{index}"])
        return bound


@lru_cache(maxsize=512)
def translate(sql: str) -> _Statement:
    """The PostgreSQL form of one of the test-run layer's SQLite statements (see the module
    docstring for the rules)."""
    json_params: set[int] = set()
    counter = 0

    def number(token: str) -> int:
        nonlocal counter
        if token[1:]:
            return int(token[1:])
        counter += 1
        return counter

    def json_list(match: re.Match[str]) -> str:
        index = number(match.group(2))
        json_params.add(index)
        operator = "<> ALL" if match.group(1) else "= ANY"
        return f"{operator}(%(p{index})s)"

    text = sql.replace("%", "%%")
    # One pass over both kinds of parameter keeps bare ``?`` numbered in textual order.
    combined = re.compile(f"{_JSON_LIST.pattern}|{_PARAMETER.pattern}", re.IGNORECASE)

    def parameter(match: re.Match[str]) -> str:
        if match.group(2) is not None:
            return json_list(match)
        return f"%(p{number(match.group(0))})s"

    text = combined.sub(parameter, text)
    text = _CROSS_JOIN.sub("JOIN", text)
    text = _NULL_SAFE_IS.sub("IS NOT DISTINCT FROM ", text)
    text = _LEAST.sub(r"LEAST(\1,\2)", text)
    return _Statement(text, True, frozenset(json_params))


@lru_cache(maxsize=256)
def copy_target(sql: str) -> tuple[str, tuple[str, ...]] | None:
    """The table and columns of a plain ``INSERT INTO t (a, b) VALUES (?, ?)``, else None
    (``RETURNING``, ``ON CONFLICT``, ``SELECT``, numbered or fewer parameters)."""
    match = _PLAIN_INSERT.fullmatch(sql)
    if match is None:
        return None
    columns = tuple(c.strip() for c in match.group(2).split(","))
    return (match.group(1), columns) if sql.count("?") == len(columns) else None


class _Dialect:
    """The statements, units and mirrors the SQLite hooks use, run on PostgreSQL."""

    def __init__(self, db: PostgresDatabase, lock: int) -> None:
        self._pg = db
        self._lock = lock

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        statement = translate(sql)
        return self._pg.execute(statement.sql, statement.bind(params))

    def one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        rows = self.execute(sql, params)
        return rows[0] if rows else None

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        row = self.one(sql, params)
        return None if row is None else row[0]

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run ``sql`` once per row; a batch of at least :data:`COPY_FROM_ROWS` rows of a
        plain ``INSERT INTO t (columns) VALUES (?, ...)`` goes as one ``COPY t (columns)
        FROM STDIN`` instead: the same rows, constraints and errors (foreign keys are
        checked at the end of the statement, as for a multi-row INSERT), without the
        server's per-statement work for each row, which made up most of a large
        ``record_results`` (see ``benchmarks/postgres_test_runs.py``)."""
        batch = rows if isinstance(rows, list) else list(rows)
        target = copy_target(sql)
        if target is not None and len(batch) >= COPY_FROM_ROWS:
            self._pg.copy_in(target[0], target[1], batch)
            return
        statement = translate(sql)
        self._pg.executemany(statement.sql, [statement.bind(row) for row in batch])

    def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> list[Row]:
        statement = translate(sql)
        return self._pg.many(statement.sql, [statement.bind(row) for row in rows])

    def mirror(self) -> TxDict[K, V]:
        return self._pg.mirror()

    @property
    def in_unit(self) -> bool:
        return self._pg.in_unit

    def transact(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        if self._pg.in_unit:
            return self._pg.transact(operation, fn)

        def locked() -> Result[T, E]:
            self._pg.execute("SELECT pg_advisory_xact_lock(%s)", (self._lock,))
            return fn()

        return self._pg.transact(operation, locked)

    def read(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        return self._pg.read(operation, fn)


def _as_sqlite(dialect: _Dialect) -> SqliteDatabase:
    """The dialect where the SQLite hooks expect their database.

    They use only ``execute``, ``one``, ``scalar``, ``executemany``, ``mirror``,
    ``in_unit``, ``transact`` and ``read`` of it, which :class:`_Dialect` provides; the three
    hooks that reach apsw itself (``_many``, ``_sync``, ``compact``) are overridden below,
    and the contract suites run every hook on PostgreSQL.
    """
    return cast(SqliteDatabase, dialect)


class PostgresDataStore(SqliteDataStore):
    """``DataStore`` on PostgreSQL (see the module docstring)."""

    def __init__(self, db: PostgresDatabase, clock: Clock) -> None:
        self._dialect = _Dialect(db, TEST_RUNS_LOCK)
        self._postgres = db
        super().__init__(_as_sqlite(self._dialect), clock)

    def _sync(self) -> None:
        """Start every unit with empty id caches (see the module docstring)."""
        if self._files:
            self._files.clear()
        if self._modules:
            self._modules.clear()

    def _many(self, sql: str, rows: Iterable[Sequence[Any]]) -> list[Row]:
        return self._dialect.many(sql, rows)

    def compact(self, *, full: bool = False) -> Result[None, DataStoreError]:
        """``VACUUM`` the test-run tables (``VACUUM FULL`` with ``full``: rewrites them,
        holding an exclusive lock), outside any unit of work.

        Returns ``StorageFailure`` when the server refuses; raises
        :class:`~runstore.exceptions.TransactionMisuse` inside a unit of work.
        """
        if self._postgres.in_unit:
            raise TransactionMisuse("compact() cannot run inside a unit of work")
        try:
            self._postgres.execute("VACUUM FULL" if full else "VACUUM")
        except psycopg.Error as exc:
            return Failure(from_psycopg(exc, operation="compact"))
        return Success(None)


class PostgresDataReader(SqliteDataReader):
    """``DataReader`` on PostgreSQL; every method reads one snapshot."""

    def __init__(self, db: PostgresDatabase) -> None:
        super().__init__(_as_sqlite(_Dialect(db, TEST_RUNS_LOCK)))
        self._postgres = db

    # -- search (runstore.services.search): tsvector queries, not the translated FTS5 ones -----

    def _search_failures(
        self, query: SearchQuery, project: str | None, start: tuple[int, ...] | None, count: int
    ) -> Sequence[FailureRow]:
        return postgres_search.search_failures(self._postgres, query, project, start, count)

    def _search_tests(
        self, query: SearchQuery, project: str | None, start: tuple[int, ...] | None, count: int
    ) -> Sequence[TestRow]:
        return postgres_search.search_tests(self._postgres, query, project, start, count)


def postgres_test_runs() -> Layer:
    """The test-run services ``DataStore`` and ``DataReader`` on the container's
    :class:`PostgresDatabase` (requires it and a ``Clock``)."""

    def store(c: Container) -> DataStore:
        return PostgresDataStore(c.get(PostgresDatabase), c.get(Clock))

    def reader(c: Container) -> DataReader:
        return PostgresDataReader(c.get(PostgresDatabase))

    return merge(
        Layer.service(DataStore, store, requires=(PostgresDatabase, Clock)),
        Layer.service(DataReader, reader, requires=(PostgresDatabase,)),
    )


def _check_protocols(db: PostgresDatabase, clock: Clock) -> tuple[DataStore, DataReader]:
    """Static check that both classes satisfy their Protocols (mypy reads this)."""
    return PostgresDataStore(db, clock), PostgresDataReader(db)

