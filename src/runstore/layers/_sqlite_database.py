"""The SQLite connection factory and the live unit of work.

Every live layer reaches SQLite through one :class:`SqliteDatabase`: it owns one apsw
connection (one thread, one process), runs units of work as ``BEGIN IMMEDIATE`` transactions
and nested SAVEPOINTs, retries a busy database within a budget, and turns driver errors into
typed values through :func:`runstore.layers._sqlite_errors.from_apsw`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import apsw
import apsw.bestpractice
import attrs
from returns.result import Failure, Result, Success

from runstore.exceptions import ConnectionUsedAfterFork
from runstore.layers._sqlite_errors import from_apsw, is_busy
from runstore.layers._unit_of_work import UnitOfWork
from runstore.services.errors import Busy, StorageFailure, StorageFailureKind

__all__ = ["ConnectionSettings", "SqliteDatabase", "connect"]

T = TypeVar("T")
E = TypeVar("E")

SqlValue = int | float | str | bytes | None
Row = tuple[Any, ...]


@attrs.frozen
class ConnectionSettings:
    """How a connection waits and how durable its commits are.

    - ``busy_timeout_ms``: how long SQLite itself waits for a lock in one attempt (ms).
    - ``busy_budget_ms``: the total time a unit of work may spend retrying a busy database
      before it returns ``Busy`` (ms).
    - ``synchronous``: ``NORMAL`` by default. In WAL mode NORMAL never corrupts the database;
      a power loss may drop the last commits, an application crash loses nothing
      (https://sqlite.org/pragma.html#pragma_synchronous). Use ``FULL`` for power-loss
      durability at the cost of one fsync per commit.
    """

    busy_timeout_ms: int = 5_000
    busy_budget_ms: int = 15_000
    synchronous: str = attrs.field(default="NORMAL")

    @synchronous.validator
    def _check_synchronous(self, _: attrs.Attribute[str], value: str) -> None:
        if value.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {value!r}")


class _TransactionLost(Exception):
    """SQLite rolled the whole transaction back under a savepoint (e.g. on SQLITE_FULL)."""

    def __init__(self, error: Busy | StorageFailure) -> None:
        self.error = error
        super().__init__(str(error))


class _Retry:
    """Marker: the outermost attempt met SQLITE_BUSY and may be tried again."""


_RETRY = _Retry()


def _is_memory(path: str | os.PathLike[str]) -> bool:
    return str(path) == ":memory:" or str(path) == ""


def connect(
    path: str | os.PathLike[str],
    settings: ConnectionSettings | None = None,
    *,
    read_only: bool = False,
) -> Result[apsw.Connection, StorageFailure | Busy]:
    """Open one configured apsw connection to ``path`` (a file, created with its folder, or ``:memory:``).

    Settings applied, from ``apsw.bestpractice`` where it has them: WAL journal, foreign
    keys on (and asserted), double-quoted strings refused, recursive triggers, the busy
    timeout of ``settings``, and ``synchronous``. A fresh file also gets
    ``auto_vacuum=INCREMENTAL`` (runstore databases are pruned). ``read_only`` opens an
    existing file without changing it (no WAL switch, no creation).

    Returns ``StorageFailure`` (``cant_open``, ``not_a_database``, ...) when the file
    cannot be opened or configured, or ``Busy`` when another process holds it too long; the
    connection is closed again in either case.
    """
    settings = settings or ConnectionSettings()
    target = ":memory:" if _is_memory(path) else str(path)
    if target != ":memory:" and not read_only:
        try:
            Path(target).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return Failure(
                StorageFailure(
                    operation="open",
                    kind=StorageFailureKind.CANT_OPEN,
                    code=apsw.SQLITE_CANTOPEN,
                    message=f"cannot create folder for {target}: {exc}",
                )
            )
    flags = apsw.SQLITE_OPEN_READONLY if read_only else (
        apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
    )
    try:
        connection = apsw.Connection(target, flags=flags)
    except apsw.Error as exc:
        return Failure(from_apsw(exc, operation="open"))
    try:
        _configure(connection, settings, read_only=read_only)
    except apsw.Error as exc:
        connection.close()
        return Failure(from_apsw(exc, operation="open", waited_ms=settings.busy_timeout_ms))
    return Success(connection)


def _configure(connection: apsw.Connection, settings: ConnectionSettings, *, read_only: bool) -> None:
    apsw.bestpractice.connection_busy_timeout(connection, settings.busy_timeout_ms)
    apsw.bestpractice.connection_enable_foreign_keys(connection)
    if connection.pragma("foreign_keys") != 1:
        raise apsw.MisuseError("foreign keys could not be enabled")
    apsw.bestpractice.connection_dqs(connection)
    apsw.bestpractice.connection_recursive_triggers(connection)
    if read_only:
        return
    fresh = connection.execute("SELECT count(*) FROM sqlite_schema").fetchall()[0][0] == 0
    if fresh:
        connection.pragma("auto_vacuum", "INCREMENTAL")
    # Switching to WAL takes a lock the busy handler does not always cover on a brand-new
    # file, so retry it briefly within the busy timeout.
    deadline = time.monotonic() + settings.busy_timeout_ms / 1000
    while True:
        try:
            apsw.bestpractice.connection_wal(connection)
            break
        except apsw.BusyError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.01)
    connection.pragma("synchronous", settings.synchronous.upper())


class SqliteDatabase(UnitOfWork):
    """One apsw connection and the units of work that run on it.

    Belongs to the thread and process that opened it: use from another process after
    ``fork()`` raises :class:`~runstore.exceptions.ConnectionUsedAfterFork`.
    """

    def __init__(
        self, connection: apsw.Connection, settings: ConnectionSettings | None = None, *, path: str = ":memory:"
    ) -> None:
        super().__init__()
        self._connection = connection
        self._settings = settings or ConnectionSettings()
        self._pid = os.getpid()
        self.path = path

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], settings: ConnectionSettings | None = None
    ) -> Result[SqliteDatabase, StorageFailure | Busy]:
        """Open ``path`` with :func:`connect` (no migrations; see ``open_migrated``)."""
        settings = settings or ConnectionSettings()
        return connect(path, settings).map(
            lambda connection: cls(connection, settings, path=str(path))
        )

    @classmethod
    def open_read_only(
        cls, path: str | os.PathLike[str], settings: ConnectionSettings | None = None
    ) -> Result[SqliteDatabase, StorageFailure | Busy]:
        """Open an existing ``path`` read-only: nothing about the file is changed."""
        settings = settings or ConnectionSettings()
        return connect(path, settings, read_only=True).map(
            lambda connection: cls(connection, settings, path=str(path))
        )

    @property
    def settings(self) -> ConnectionSettings:
        """The settings this connection was opened with."""
        return self._settings

    @property
    def connection(self) -> apsw.Connection:
        """The raw apsw connection, for layer code and tests; never hand it to services' callers."""
        self._check_pid()
        return self._connection

    def close(self) -> None:
        """Close the connection; open units are rolled back first. Idempotent."""
        if os.getpid() != self._pid:
            return
        self._rollback_all()
        try:
            if not self._connection.getautocommit():
                self._connection.execute("ROLLBACK")
        except apsw.Error:
            pass
        self._connection.close()

    def _check_pid(self) -> None:
        if os.getpid() != self._pid:
            raise ConnectionUsedAfterFork(
                f"connection to {self.path} was opened in process {self._pid}, "
                f"used in {os.getpid()}"
            )

    # -- statements (materialized results only) ------------------------------------------------

    def execute(self, sql: str, params: Sequence[SqlValue] | dict[str, SqlValue] = ()) -> list[Row]:
        """Run one statement and return all its rows (RETURNING rows included)."""
        self._check_pid()
        return self._connection.execute(sql, params).fetchall()

    def one(self, sql: str, params: Sequence[SqlValue] | dict[str, SqlValue] = ()) -> Row | None:
        """Run one statement and return its first row, or None; the cursor is drained."""
        rows = self.execute(sql, params)
        return rows[0] if rows else None

    def scalar(self, sql: str, params: Sequence[SqlValue] | dict[str, SqlValue] = ()) -> Any:
        """Run one statement and return the first column of its first row, or None."""
        row = self.one(sql, params)
        return None if row is None else row[0]

    def executemany(
        self, sql: str, rows: Iterable[Sequence[SqlValue] | dict[str, SqlValue]]
    ) -> None:
        """Run one statement for each parameter row (one prepared statement, no per-row commit)."""
        self._check_pid()
        self._connection.executemany(sql, rows).fetchall()

    # -- units of work -------------------------------------------------------------------------

    def transact(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        """Run ``fn`` as a unit of work: ``BEGIN IMMEDIATE`` outermost, a SAVEPOINT when nested.

        ``operation`` names the unit in errors. ``Success`` commits (or releases the
        savepoint) and keeps every mirror change; ``Failure`` rolls back and is returned; an
        apsw exception rolls back and becomes ``Busy`` or ``StorageFailure``; any other
        exception rolls back and propagates (a programmer error).

        When the outermost unit meets SQLITE_BUSY (taking the write lock, during ``fn`` or at
        COMMIT) it rolls back and runs ``fn`` again, until ``settings.busy_budget_ms`` is
        spent; then it returns ``Busy(operation, waited_ms)``. ``fn`` must therefore be
        safe to run again, which it is when it only writes through this unit.
        """
        self._check_pid()
        if self.in_unit:
            return self._savepoint(operation, fn)
        started = time.monotonic()
        attempt = 0
        while True:
            outcome = self._outermost(operation, fn, started)
            if not isinstance(outcome, _Retry):
                return outcome
            waited_ms = int((time.monotonic() - started) * 1000)
            if waited_ms >= self._settings.busy_budget_ms:
                return Failure(Busy(operation=operation, waited_ms=waited_ms))
            attempt += 1
            time.sleep(min(0.005 * 2**attempt, 0.1))

    def _outermost(
        self, operation: str, fn: Callable[[], Result[T, E]], started: float
    ) -> Result[T, E | Busy | StorageFailure] | _Retry:
        connection = self._connection
        try:
            connection.execute("BEGIN IMMEDIATE")
        except apsw.Error as exc:
            if is_busy(exc):
                return _RETRY
            return Failure(from_apsw(exc, operation=operation))
        self._push()
        try:
            result = fn()
        except _TransactionLost as lost:
            self._abort()
            return _RETRY if isinstance(lost.error, Busy) else Failure(lost.error)
        except apsw.Error as exc:
            self._abort()
            return _RETRY if is_busy(exc) else Failure(from_apsw(exc, operation=operation))
        except BaseException:
            self._abort()
            raise
        if isinstance(result, Failure):
            self._abort()
            return result
        try:
            connection.execute("COMMIT")
        except apsw.Error as exc:
            self._abort()
            return _RETRY if is_busy(exc) else Failure(from_apsw(exc, operation=operation))
        self._pop_commit()
        return result

    def _abort(self) -> None:
        """Roll the outermost transaction back (if SQLite has not already) and undo mirrors."""
        try:
            if not self._connection.getautocommit():
                self._connection.execute("ROLLBACK")
        finally:
            self._pop_rollback()

    def _savepoint(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        connection = self._connection
        name = f"runstore_sp{self.depth}"
        connection.execute(f"SAVEPOINT {name}")
        self._push()
        try:
            result = fn()
        except _TransactionLost:
            self._pop_rollback()
            raise
        except apsw.Error as exc:
            error = from_apsw(exc, operation=operation)
            if connection.getautocommit():
                # SQLite already rolled back the whole transaction: no savepoint is left.
                self._pop_rollback()
                raise _TransactionLost(error) from exc
            self._rollback_to(name)
            return Failure(error)
        except BaseException:
            if connection.getautocommit():
                self._pop_rollback()
            else:
                self._rollback_to(name)
            raise
        if isinstance(result, Failure):
            self._rollback_to(name)
            return result
        connection.execute(f"RELEASE {name}")
        self._pop_commit()
        return result

    def _rollback_to(self, name: str) -> None:
        try:
            self._connection.execute(f"ROLLBACK TO {name}; RELEASE {name}")
        finally:
            self._pop_rollback()

    def read(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        """Run read-only ``fn`` on one consistent snapshot (a deferred transaction).

        Inside an open unit of work ``fn`` runs in it and sees its uncommitted writes. An
        apsw exception becomes ``Busy`` or ``StorageFailure``; others propagate. Mirrors
        changed by ``fn`` are kept (reads may warm caches of committed rows).
        """
        self._check_pid()
        if self.in_unit:
            return self._savepoint(operation, fn)
        connection = self._connection
        try:
            connection.execute("BEGIN")
            try:
                result = fn()
            finally:
                if not connection.getautocommit():
                    connection.execute("COMMIT")
        except apsw.Error as exc:
            return Failure(from_apsw(exc, operation=operation))
        return result
