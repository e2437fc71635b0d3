"""The SQLite connection factory and the live unit of work.

Every live layer reaches SQLite through one :class:`SqliteDatabase`: it owns one apsw
connection (one thread, one process), runs units of work as ``BEGIN IMMEDIATE`` transactions
and nested SAVEPOINTs, retries a busy database within a budget, and turns driver errors into
typed values through :func:`runstore.layers._sqlite_errors.from_apsw`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, TypeAlias, TypeVar

import apsw
import attrs
from returns.result import Failure, Result, Success

from runstore.exceptions import ConnectionUsedAfterFork, TransactionMisuse
from runstore.layers._sqlite_errors import from_apsw, is_busy, is_programmer_error
from runstore.layers._unit_of_work import RETRY, Retry, UnitOfWork, _not_a_result, retrying
from runstore.services.errors import Busy, StorageFailure, StorageFailureKind

__all__ = ["ConnectionSettings", "SqliteDatabase", "connect"]

T = TypeVar("T")
E = TypeVar("E")

SqlValue = int | float | str | bytes | None
"""A value SQLite stores: INTEGER, REAL, TEXT, BLOB or NULL."""
Params = Sequence[SqlValue] | dict[str, SqlValue]
"""Statement parameters: positional (``?``) or named (``:name``)."""
Row = tuple[Any, ...]


@attrs.frozen
class ConnectionSettings:
    """How a connection waits and how durable its commits are.

    - ``busy_timeout_ms``: how long SQLite itself waits for a lock in one attempt (ms,
      >= 0; default 5 000). SQLite's busy handler sleeps and retries inside this window.
    - ``busy_budget_ms``: the total time one outermost unit of work may spend on a busy
      database, all attempts included, before it returns ``Busy`` (ms, >= 0; default
      15 000, so about three attempts of the default timeout). A unit always gets at least
      one attempt.
    - ``synchronous``: ``NORMAL`` by default. In WAL mode NORMAL never corrupts the database;
      a power loss may drop the last commits, an application crash loses nothing
      (https://sqlite.org/pragma.html#pragma_synchronous). Use ``FULL`` for power-loss
      durability at the cost of one fsync per commit.
    """

    busy_timeout_ms: int = attrs.field(default=5_000, validator=attrs.validators.ge(0))
    busy_budget_ms: int = attrs.field(default=15_000, validator=attrs.validators.ge(0))
    synchronous: str = attrs.field(default="NORMAL")

    @synchronous.validator
    def _check_synchronous(self, _: attrs.Attribute[str], value: str) -> None:
        if value.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {value!r}")


class _TransactionLost(Exception):
    """SQLite rolled the whole transaction back under a savepoint (e.g. on SQLITE_FULL).

    Raised out of the nested unit and out of any statement run afterwards, so the enclosing
    units unwind to the outermost one, which returns ``error``.
    """

    def __init__(self, error: Busy | StorageFailure) -> None:
        self.error = error
        super().__init__(str(error))




class _Forks:
    """How many times this process is a fork child of the process that imported runstore."""

    generation = 0


def _after_fork_in_child() -> None:
    _Forks.generation += 1


os.register_at_fork(after_in_child=_after_fork_in_child)


def _is_memory(path: str | os.PathLike[str]) -> bool:
    return str(path) == ":memory:" or str(path) == ""


def connect(
    path: str | os.PathLike[str],
    settings: ConnectionSettings | None = None,
    *,
    read_only: bool = False,
) -> Result[apsw.Connection, StorageFailure | Busy]:
    """Open one configured apsw connection to ``path`` (a file or ``:memory:``).

    A file is created, with its folder, when missing. Settings applied, as
    ``apsw.bestpractice`` has them where it does: WAL journal, foreign keys on (and asserted),
    double-quoted string literals refused, recursive triggers, the busy timeout of
    ``settings`` and ``synchronous``. A fresh file also gets ``auto_vacuum=INCREMENTAL``
    (runstore databases are pruned). ``PRAGMA optimize`` on close is left out: it may write,
    and closing must not change a database that was only read. ``read_only`` opens an
    existing file without changing it (no WAL switch, no creation).

    Returns ``StorageFailure`` when the file cannot be opened or configured (kind
    ``cant_open`` for a missing folder, a directory or a missing file opened read-only,
    ``not_a_database`` for a file that is not SQLite, ``corrupt``, ``io``, ...), or ``Busy``
    when another process holds it past the busy timeout. The connection is closed again in
    either case.
    """
    return _connect(
        path,
        settings or ConnectionSettings(),
        open_as="read_only" if read_only else "create",
        prepare=True,
    )


OpenAs: TypeAlias = Literal["create", "existing", "query_only", "read_only"]
"""How :func:`_connect` opens a file: ``create`` it (and its folder) when missing; an
``existing`` one for reading and writing; an existing one whose connection refuses every
write (``query_only``: SQL cannot change the file, yet as the last connection to close it
still removes the WAL files, as a writer's would); or ``read_only`` at the file level (the
``-wal`` and ``-shm`` files it needs stay behind)."""


def _connect(
    path: str | os.PathLike[str],
    settings: ConnectionSettings,
    *,
    open_as: OpenAs,
    prepare: bool,
) -> Result[apsw.Connection, StorageFailure | Busy]:
    """Open and configure the connection; ``prepare`` also sets the file up (WAL, vacuum)."""
    target = ":memory:" if _is_memory(path) else os.fspath(path)
    if target != ":memory:" and open_as == "create":
        try:
            os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
        except OSError as exc:
            return Failure(
                StorageFailure(
                    operation="open",
                    kind=StorageFailureKind.CANT_OPEN,
                    code=apsw.SQLITE_CANTOPEN,
                    message=f"cannot create folder for {target}: {exc}",
                )
            )
    flags = {
        "create": apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE,
        "existing": apsw.SQLITE_OPEN_READWRITE,
        "query_only": apsw.SQLITE_OPEN_READWRITE,
        "read_only": apsw.SQLITE_OPEN_READONLY,
    }[open_as]
    try:
        connection = apsw.Connection(target, flags=flags)
    except apsw.Error as exc:
        return Failure(from_apsw(exc, operation="open"))
    try:
        _configure_connection(connection, settings)
        if open_as == "query_only":
            connection.pragma("query_only", "ON")
        elif prepare and open_as != "read_only":
            _prepare_file(connection, settings)
    except apsw.Error as exc:
        connection.close()
        return Failure(from_apsw(exc, operation="open", waited_ms=settings.busy_timeout_ms))
    return Success(connection)


def _configure_connection(connection: apsw.Connection, settings: ConnectionSettings) -> None:
    """Per-connection settings; none of them writes to the file.

    The busy timeout, foreign keys, refused double-quoted strings and recursive triggers are
    what ``apsw.bestpractice`` sets, done here as its functions do them (apsw 3.50), without
    importing it: it imports ``apsw.ext``, which costs every command a tenth of its start-up.
    """
    connection.set_busy_timeout(settings.busy_timeout_ms)
    _enable_foreign_keys(connection)
    if connection.pragma("foreign_keys") != 1:
        raise apsw.MisuseError("foreign keys could not be enabled")
    connection.config(apsw.SQLITE_DBCONFIG_DQS_DML, 0)
    connection.config(apsw.SQLITE_DBCONFIG_DQS_DDL, 0)
    connection.pragma("recursive_triggers", "ON")
    connection.pragma("synchronous", settings.synchronous.upper())


def _enable_foreign_keys(connection: apsw.Connection) -> None:
    """Turn foreign-key enforcement on (a no-op inside a transaction, hence the assertion)."""
    connection.pragma("foreign_keys", "ON")


def _prepare_file(connection: apsw.Connection, settings: ConnectionSettings) -> None:
    """Settings stored in the file: auto_vacuum for a fresh one, then the WAL journal.

    Switching to WAL rewrites the file header, so :func:`open_database` does this only
    after the migration check has accepted the database.
    """
    fresh = connection.execute("SELECT count(*) FROM sqlite_schema").fetchall()[0][0] == 0
    if fresh:
        connection.pragma("auto_vacuum", "INCREMENTAL")
    # Switching to WAL takes a lock the busy handler does not always cover on a brand-new
    # file, so retry it briefly within the busy timeout.
    # As apsw.bestpractice.connection_wal: a file SQLite opened read-only keeps its journal.
    deadline = time.monotonic() + settings.busy_timeout_ms / 1000
    while True:
        try:
            if not connection.readonly("main"):
                connection.pragma("journal_mode", "wal")
            return
        except apsw.ReadOnlyError:
            return
        except apsw.BusyError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


class SqliteDatabase(UnitOfWork):
    """One apsw connection and the units of work that run on it.

    Belongs to the thread and the process that opened it. Use from another thread raises
    :class:`~runstore.exceptions.TransactionMisuse`; use in a child after ``fork()``
    raises :class:`~runstore.exceptions.ConnectionUsedAfterFork` (open a new one there).

    Services run every statement inside :meth:`transact` (writes) or :meth:`read`
    (reads), which turn driver errors into typed failures; :meth:`execute` and friends
    raise apsw exceptions as they come.
    """

    def __init__(
        self,
        connection: apsw.Connection,
        settings: ConnectionSettings | None = None,
        *,
        path: str = ":memory:",
    ) -> None:
        super().__init__()
        self._connection = connection
        self._settings = settings or ConnectionSettings()
        self._pid = os.getpid()
        self._generation = _Forks.generation
        self._lost: Busy | StorageFailure | None = None
        self._operation = ""
        self.path = path

    @classmethod
    def open(
        cls, path: str | os.PathLike[str], settings: ConnectionSettings | None = None
    ) -> Result[SqliteDatabase, StorageFailure | Busy]:
        """Open ``path`` with :func:`connect` (no migrations; see :func:`open_database`).

        Returns the failures of :func:`connect`.
        """
        settings = settings or ConnectionSettings()
        return connect(path, settings).map(
            lambda connection: cls(connection, settings, path=os.fspath(path))
        )

    @classmethod
    def open_read_only(
        cls, path: str | os.PathLike[str], settings: ConnectionSettings | None = None
    ) -> Result[SqliteDatabase, StorageFailure | Busy]:
        """Open an existing ``path`` read-only: nothing about the file is changed.

        Returns ``StorageFailure`` (``cant_open`` for a missing file, ...) or ``Busy``. A
        write through the connection fails with kind ``read_only``.
        """
        settings = settings or ConnectionSettings()
        return connect(path, settings, read_only=True).map(
            lambda connection: cls(connection, settings, path=os.fspath(path))
        )

    @property
    def settings(self) -> ConnectionSettings:
        """The settings this connection was opened with."""
        return self._settings

    @property
    def connection(self) -> apsw.Connection:
        """The raw apsw connection, for layer code and tests; never hand it to services' callers."""
        self._check_fork()
        return self._connection

    def close(self) -> Result[None, StorageFailure | Busy]:
        """Close the connection; open units are rolled back first. Idempotent; never raises
        a driver error.

        Closing the last connection of a WAL database checkpoints it into the main file,
        which can fail (the disk is full, the file system turned read-only): what was
        committed stays in the ``-wal`` file for the next open, and the connection is
        released all the same. Returns ``Success(None)``, or ``StorageFailure`` (``full``,
        ``io``, ``read_only``, ...; operation ``"close"``) or ``Busy`` when SQLite reported
        an error while closing; that failure is also logged as a warning on the
        ``runstore.layers`` logger, since a container closing its database has no caller
        to return it to.

        In a forked child this does nothing: the connection belongs to the parent.
        """
        if self._generation != _Forks.generation:
            return Success(None)
        self._rollback_all()
        self._lost = None
        try:
            if not self._connection.getautocommit():
                self._connection.execute("ROLLBACK")
        except apsw.Error:
            pass
        try:
            self._connection.close()
        except apsw.Error as exc:
            failure = from_apsw(exc, operation="close")
            self._connection.close(True)  # release it whatever SQLite still reports
            import logging  # only here: importing it costs every command ~3 ms

            logging.getLogger("runstore.layers").warning(
                "closing %s failed: %s", self.path, failure
            )
            return Failure(failure)
        return Success(None)

    def _check_fork(self) -> None:
        if self._generation != _Forks.generation:
            raise ConnectionUsedAfterFork(
                f"connection to {self.path} was opened in process {self._pid}, "
                f"used in {os.getpid()}"
            )

    def _check_usable(self) -> None:
        self._check_fork()
        self._check_thread()
        if self._lost is not None:
            raise _TransactionLost(self._lost)

    def _note_error(self, exc: apsw.Error) -> None:
        """Remember that SQLite rolled back the whole open transaction while raising ``exc``."""
        if self._frames and self._lost is None and self._connection.getautocommit():
            self._lost = from_apsw(exc, operation=self._operation)

    # -- statements (materialized results only) ------------------------------------------------

    def execute(self, sql: str, params: Params = ()) -> list[Row]:
        """Run ``sql`` (one or more statements) and return all rows (RETURNING rows included).

        Raises the apsw exception of a failing statement; inside :meth:`transact` or
        :meth:`read` the unit turns it into a typed failure. After SQLite has rolled back
        the whole transaction under a savepoint, every further statement in that unit is
        refused, so nothing runs outside the transaction by accident.
        """
        if (
            self._generation != _Forks.generation
            or self._lost is not None
            or threading.get_ident() != self._thread
        ):
            self._check_usable()
        try:
            return self._connection.execute(sql, params).fetchall()
        except apsw.Error as exc:
            self._note_error(exc)
            raise

    def one(self, sql: str, params: Params = ()) -> Row | None:
        """Run one statement and return its first row, or None; the cursor is drained."""
        rows = self.execute(sql, params)
        return rows[0] if rows else None

    def scalar(self, sql: str, params: Params = ()) -> Any:
        """Run one statement and return the first column of its first row, or None."""
        row = self.one(sql, params)
        return None if row is None else row[0]

    def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        """Run one statement once per parameter row (one prepared statement, no commits).

        RETURNING rows are drained and dropped. Raises like :meth:`execute`.
        """
        self._check_usable()
        try:
            self._connection.executemany(sql, rows).fetchall()
        except apsw.Error as exc:
            self._note_error(exc)
            raise

    # -- units of work -------------------------------------------------------------------------

    def transact(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        """Run ``fn`` as a unit of work: ``BEGIN IMMEDIATE`` outermost, a SAVEPOINT when nested.

        ``operation`` names the unit in errors. ``fn`` returns a ``Result``:

        - ``Success``: COMMIT (or RELEASE the savepoint); mirror changes stand, and
          :meth:`on_commit` callbacks run once the outermost unit has committed.
        - ``Failure``: ROLLBACK (or ROLLBACK TO the savepoint), undo the mirror changes,
          return the Failure unchanged.
        - An apsw exception (a statement, or COMMIT, failed): roll back, undo, and return
          ``StorageFailure`` (constraint kinds, ``full``, ``io``, ``corrupt``, ``read_only``,
          ...) or ``Busy``, as classified by ``from_apsw``. When SQLite rolled back the
          whole transaction under a savepoint (SQLITE_FULL, SQLITE_IOERR, ...), the whole
          outermost unit returns that failure.
        - Any other exception, and apsw's misuse errors (wrong bindings, closed
          connection): roll back, undo, re-raise (a programmer error).

        Busy: when the outermost unit meets SQLITE_BUSY (taking the write lock, inside
        ``fn`` or at COMMIT) after SQLite's own wait of ``settings.busy_timeout_ms``, it
        rolls back and runs ``fn`` again after a short pause (5 ms doubling to 100 ms),
        until ``settings.busy_budget_ms`` has passed since the first attempt; then it returns
        ``Busy(operation, waited_ms)`` with nothing written. ``fn`` must therefore be safe
        to run again, which it is when all its effects go through this unit (statements,
        mirrors, ``on_commit``). A nested unit never retries: its ``Busy`` is a value.

        If COMMIT itself fails with an I/O error the outcome may be unknown to the caller;
        write units so that running them again is harmless (idempotent).

        Raises :class:`~runstore.exceptions.TransactionMisuse` when called inside
        :meth:`read`, from a foreign thread, when ``fn`` returns something other than a
        Result, or when ``fn`` ended the transaction itself (COMMIT/ROLLBACK);
        :class:`~runstore.exceptions.ConnectionUsedAfterFork` in a forked child.
        """
        self._check_usable()
        self._check_can_write(operation)
        if self._frames:
            return self._savepoint(operation, fn)
        return self._retrying(operation, lambda: self._outermost(operation, fn, "BEGIN IMMEDIATE"))

    def read(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        """Run read-only ``fn`` on one consistent snapshot.

        Outermost, ``fn`` runs in a deferred transaction (``BEGIN``): every statement sees
        the same committed state, and writers of other connections are not blocked (WAL).
        The transaction is always rolled back at the end. Inside :meth:`transact`, ``fn``
        runs in a savepoint of that transaction and sees its uncommitted writes.

        Returns what ``fn`` returns; an apsw exception becomes ``StorageFailure`` or, once
        the busy budget is spent, ``Busy`` (reads retry like writes). Mirror changes made
        by ``fn`` (warmed caches) stand when it returns ``Success`` and are undone
        otherwise. Other exceptions propagate.

        Raises :class:`~runstore.exceptions.TransactionMisuse` when ``fn`` changes any row
        (the change is rolled back) or opens a :meth:`transact`, and for the thread and
        result checks of :meth:`transact`.
        """
        self._check_usable()
        connection = self._connection
        before = connection.total_changes()
        if self._frames:
            reading = self._reading
            self._reading = True
            try:
                result = self._savepoint(operation, fn)
            finally:
                self._reading = reading
        else:
            result = self._retrying(operation, lambda: self._outermost(operation, fn, "BEGIN"))
        if connection.total_changes() != before:
            raise TransactionMisuse(
                f"read({operation!r}) changed rows; writes belong in transact()"
            )
        return result

    def _retrying(
        self,
        operation: str,
        attempt: Callable[[], Result[T, E | Busy | StorageFailure] | Retry],
    ) -> Result[T, E | Busy | StorageFailure]:
        """Run ``attempt`` until it is not busy or the busy budget is spent (see
        :func:`~runstore.layers._unit_of_work.retrying`)."""
        return retrying(operation, self._settings.busy_budget_ms, attempt)

    def _outermost(
        self, operation: str, fn: Callable[[], Result[T, E]], begin: str
    ) -> Result[T, E | Busy | StorageFailure] | Retry:
        connection = self._connection
        try:
            connection.execute(begin)
        except apsw.Error as exc:
            if is_programmer_error(exc):
                raise
            return RETRY if is_busy(exc) else Failure(from_apsw(exc, operation=operation))
        self._push()
        self._reading = begin == "BEGIN"
        self._operation = operation
        try:
            result = fn()
        except BaseException as exc:
            lost = self._lost
            self._abort()
            outcome = _outcome_of_exception(exc, lost, operation)
            if outcome is None:
                raise
            return outcome
        lost = self._lost
        if lost is None and connection.getautocommit():
            self._abort()
            raise TransactionMisuse(
                f"{operation!r} ended its transaction itself; let the unit of work commit"
            )
        if lost is not None:
            self._abort()
            return RETRY if isinstance(lost, Busy) else Failure(lost)
        if not isinstance(result, Success):
            self._abort()
            if isinstance(result, Failure):
                return result
            raise _not_a_result(result)
        try:
            connection.execute("ROLLBACK" if self._reading else "COMMIT")
        except apsw.Error as exc:
            self._abort()
            if is_programmer_error(exc):
                raise
            return RETRY if is_busy(exc) else Failure(from_apsw(exc, operation=operation))
        self._pop_commit()
        return result

    def _abort(self) -> None:
        """Roll the outermost transaction back (if SQLite has not already) and undo mirrors."""
        try:
            if not self._connection.getautocommit():
                self._connection.execute("ROLLBACK")
        finally:
            self._lost = None
            self._pop_rollback()

    def _savepoint(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        connection = self._connection
        name = f"runstore_sp{len(self._frames)}"
        connection.execute(f"SAVEPOINT {name}")
        self._push()
        try:
            result = fn()
        except apsw.Error as exc:
            self._note_error(exc)
            if self._lost is not None:
                self._pop_rollback()
                raise _TransactionLost(self._lost) from exc
            self._rollback_to(name)
            if is_programmer_error(exc):
                raise
            return Failure(from_apsw(exc, operation=operation))
        except BaseException:
            if self._lost is not None or connection.getautocommit():
                self._pop_rollback()  # SQLite already rolled back: no savepoint is left
            else:
                self._rollback_to(name)
            raise
        if self._lost is not None:
            self._pop_rollback()
            raise _TransactionLost(self._lost)
        if connection.getautocommit():
            self._pop_rollback()
            raise TransactionMisuse(
                f"{operation!r} ended the enclosing transaction itself; "
                "let the unit of work commit"
            )
        if not isinstance(result, Success):
            self._rollback_to(name)
            if isinstance(result, Failure):
                return result
            raise _not_a_result(result)
        connection.execute(f"RELEASE {name}")
        self._pop_commit()
        return result

    def _rollback_to(self, name: str) -> None:
        try:
            self._connection.execute(f"ROLLBACK TO {name}; RELEASE {name}")
        finally:
            self._pop_rollback()


def _outcome_of_exception(
    exc: BaseException, lost: Busy | StorageFailure | None, operation: str
) -> Failure[Busy | StorageFailure] | Retry | None:
    """What the outermost unit returns for ``exc`` after rolling back; None to re-raise."""
    if isinstance(exc, _TransactionLost):
        error = lost or exc.error
        return RETRY if isinstance(error, Busy) else Failure(error)
    if not isinstance(exc, apsw.Error) or is_programmer_error(exc):
        return None
    if lost is not None:
        return RETRY if isinstance(lost, Busy) else Failure(lost)
    return RETRY if is_busy(exc) else Failure(from_apsw(exc, operation=operation))
