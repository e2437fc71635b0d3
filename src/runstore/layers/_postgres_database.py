"""The PostgreSQL connection pool and the live unit of work (psycopg 3, ``psycopg_pool``).

Every PostgreSQL layer reaches the server through one :class:`PostgresDatabase`, the
counterpart of ``SqliteDatabase``: units of work are transactions and nested SAVEPOINTs
whose outcome follows the ``Result`` of the function they run, mirrors (``TxDict``) are
undone with the transaction or savepoint that changed them, serialization failures,
deadlocks and lock timeouts are retried within a budget and then returned as ``Busy``, and
driver errors become typed values in one place (:mod:`runstore.layers._postgres_errors`).

Connections. A database holds a ``psycopg_pool.ConnectionPool`` and takes a connection
from it for each outermost unit, handing it back when the unit ends. So a container holds
no connection between units, many containers (one per thread) can share one pool, and a
connection the server dropped (a restart, ``pg_terminate_backend``) is discarded by the
pool: that unit returns ``StorageFailure`` of kind ``connection`` and the next one runs on
a fresh connection, with no new container. A unit that loses its connection before its
first statement ran is tried once more on a fresh one. While the server is down a unit waits
``connect_timeout_s`` for a connection and returns ``StorageFailure`` of kind
``connection``; the pool gives up each failing reconnection within half that time, so the
first unit after the server is back connects afresh.

Isolation. ``transact`` runs ``READ COMMITTED``: each layer takes the explicit locks its
rules need (a transaction-level advisory lock per domain, ``SELECT ... FOR UPDATE``, or
``FOR UPDATE SKIP LOCKED`` for queues) and documents them. ``read`` runs ``REPEATABLE READ
READ ONLY``: every statement of the unit sees one snapshot, as a SQLite read transaction
does, and writes are refused by the server (kind ``read_only``).

Values. Statements use psycopg's server-side parameters (``%s`` / ``%(name)s``) only.
PostgreSQL's ``text`` cannot hold NUL, which runstore keeps in free text: strings are sent
with NUL (and the escape character U+FDD0 itself) escaped and read back unescaped, so every
string round-trips; equality is kept, and the order of strings without either character is
the server's. ``numeric`` values without a fractional part (``sum`` over ``bigint``) are
read as ``int``, as SQLite gives them. Times at rest are integer epoch milliseconds.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any, TypeAlias, TypeVar

import attrs
import psycopg
import psycopg.sql
from psycopg import pq
from psycopg.adapt import Buffer
from psycopg.types.numeric import NumericLoader
from psycopg.types.string import StrBinaryDumper, StrDumperUnknown, TextBinaryLoader, TextLoader
from psycopg_pool import ConnectionPool, PoolTimeout
from returns.result import Failure, Result, Success

from runstore.exceptions import ConnectionUsedAfterFork, TransactionMisuse
from runstore.layers._postgres_errors import (
    from_psycopg,
    is_connection_lost,
    is_programmer_error,
    is_retryable,
    password_of,
    redact,
    scrub,
)
from runstore.layers._unit_of_work import RETRY, Retry, UnitOfWork, _not_a_result, retrying
from runstore.services.errors import Busy, StorageFailure, StorageFailureKind

__all__ = ["PostgresDatabase", "PostgresSettings"]

T = TypeVar("T")
E = TypeVar("E")

Params: TypeAlias = Sequence[Any] | Mapping[str, Any]
"""Statement parameters: positional (``%s``) or named (``%(name)s``)."""
Row: TypeAlias = tuple[Any, ...]
Connection: TypeAlias = psycopg.Connection[Row]
Pool: TypeAlias = ConnectionPool[Connection]

_ESCAPE = "\ufdd0"
"""Escape character for strings at rest (a Unicode noncharacter, never in real text)."""
_ESCAPED = re.compile("\ufdd0(.)", re.DOTALL)


def _escape(text: str) -> str:
    return text.replace(_ESCAPE, _ESCAPE + _ESCAPE).replace("\x00", _ESCAPE + "0")


def _unescape(text: str) -> str:
    return _ESCAPED.sub(lambda m: "\x00" if m.group(1) == "0" else m.group(1), text)


class _Text(StrDumperUnknown):
    def dump(self, obj: str) -> Buffer | None:
        if "\x00" in obj or _ESCAPE in obj:
            obj = _escape(obj)
        return super().dump(obj)


class _BinaryText(StrBinaryDumper):
    def dump(self, obj: str) -> Buffer | None:
        if "\x00" in obj or _ESCAPE in obj:
            obj = _escape(obj)
        return super().dump(obj)


class _TextLoader(TextLoader):
    def load(self, data: Buffer) -> bytes | str:
        text = super().load(data)
        return _unescape(text) if isinstance(text, str) and _ESCAPE in text else text


class _BinaryTextLoader(TextBinaryLoader):
    def load(self, data: Buffer) -> bytes | str:
        text = super().load(data)
        return _unescape(text) if isinstance(text, str) and _ESCAPE in text else text


class _Numeric(NumericLoader):
    def load(self, data: Buffer) -> Decimal | int:  # type: ignore[override]
        raw = bytes(data)
        if raw.lstrip(b"-").isdigit():
            return int(raw)
        return super().load(data)


def _configure(connection: psycopg.BaseConnection[Any]) -> None:
    """Adapters of every pooled connection (see the module docstring)."""
    adapters = connection.adapters
    adapters.register_dumper(str, _Text)
    adapters.register_dumper(str, _BinaryText)
    for name in ("text", "varchar", "bpchar", "name"):
        adapters.register_loader(name, _TextLoader)
        adapters.register_loader(name, _BinaryTextLoader)
    adapters.register_loader("numeric", _Numeric)


@attrs.frozen
class PostgresSettings:
    """How units of work wait, and how big the pool a DSN opens is.

    - ``lock_timeout_ms``: how long one statement waits for a lock (ms, >= 0; default
      5 000, SQLite's busy timeout); past it the server cancels it (55P03) and the unit is
      retried. 0 waits for ever.
    - ``busy_budget_ms``: the total time one outermost unit may spend retrying
      serialization failures, deadlocks and lock timeouts before it returns ``Busy`` (ms,
      >= 0; default 15 000, as on SQLite). A unit always gets at least one attempt.
    - ``connect_timeout_s``: how long opening a connection may take (s, >= 1; default 10).
    - ``pool_max_size``: connections of a pool opened from a DSN (>= 1; default 4). A pool
      the caller passes keeps its own sizes.
    """

    lock_timeout_ms: int = attrs.field(default=5_000, validator=attrs.validators.ge(0))
    busy_budget_ms: int = attrs.field(default=15_000, validator=attrs.validators.ge(0))
    connect_timeout_s: int = attrs.field(default=10, validator=attrs.validators.ge(1))
    pool_max_size: int = attrs.field(default=4, validator=attrs.validators.ge(1))



_RETRY_LOCK = "55P03"
"""lock_not_available: ``lock_timeout`` passed; retried like SQLite's SQLITE_BUSY."""


def _retryable(exc: BaseException) -> bool:
    return is_retryable(exc) or (isinstance(exc, psycopg.Error) and exc.sqlstate == _RETRY_LOCK)


class _TransactionLost(Exception):
    """The transaction cannot go on (a retryable error or a lost connection inside a nested
    unit): raised out of every unit up to the outermost, which retries or fails."""

    def __init__(self, cause: psycopg.Error) -> None:
        self.cause = cause
        super().__init__(str(cause))


class _Forks:
    generation = 0


def _after_fork_in_child() -> None:
    _Forks.generation += 1


os.register_at_fork(after_in_child=_after_fork_in_child)


class PostgresDatabase(UnitOfWork):
    """A connection pool and the units of work that run on it (see the module docstring).

    Belongs to the thread that made it, like every unit of work: use from another thread
    raises :class:`~runstore.exceptions.TransactionMisuse`, use in a child after ``fork()``
    :class:`~runstore.exceptions.ConnectionUsedAfterFork`. Statements run inside
    :meth:`transact` or :meth:`read`; outside any unit each statement is its own
    transaction. ``pause(seconds)`` waits between busy retries (``time.sleep``;
    ``runstore.aio`` gives one that yields to the event loop).
    """

    def __init__(
        self,
        pool: Pool,
        settings: PostgresSettings | None = None,
        *,
        owns_pool: bool = False,
        shown: str = "",
        secret: str = "",
        pause: Callable[[float], object] = time.sleep,
    ) -> None:
        super().__init__()
        self._pause = pause
        self._pool = pool
        self._settings = settings or PostgresSettings()
        self._owns_pool = owns_pool
        self._secret = secret
        self._conn: Connection | None = None
        self._lost: psycopg.Error | None = None
        self._last_error: psycopg.Error | None = None
        self._generation = _Forks.generation
        self._pid = os.getpid()
        self._ran = False
        self.shown = shown
        """The DSN without its password, for messages."""

    # -- opening -------------------------------------------------------------------------------

    @classmethod
    def open(
        cls, dsn: str, settings: PostgresSettings | None = None, *, read_only: bool = False
    ) -> Result[PostgresDatabase, StorageFailure]:
        """Open a pool of at most ``settings.pool_max_size`` connections to ``dsn`` (a
        ``postgresql://`` URL or a ``key=value`` string) and check that one connects.

        Returns ``StorageFailure`` when the server cannot be reached or refuses the login
        (kind ``connection`` or ``cant_open``; the message never holds the password); the
        pool is closed again then. The database owns the pool: :meth:`close` closes it.
        With ``read_only`` every transaction of its connections is read-only.
        """
        settings = settings or PostgresSettings()
        unparsable = _unparsable(dsn)
        if unparsable is not None:
            return Failure(unparsable)
        secret = password_of(dsn)
        kwargs = _connection_kwargs(settings, read_only=read_only)
        try:  # one direct connection first: the pool would only log why it cannot connect
            psycopg.connect(dsn, **kwargs).close()
        except psycopg.Error as exc:
            return Failure(open_failure(exc, secret))
        pool: Pool = ConnectionPool(dsn, configure=_configure, **pool_options(settings, kwargs))
        pool.open(wait=False)
        db = cls(pool, settings, owns_pool=True, shown=redact(dsn), secret=secret)
        return Success(db)

    @classmethod
    def on_pool(cls, pool: Pool, settings: PostgresSettings | None = None) -> PostgresDatabase:
        """Run units of work on connections of the caller's ``pool`` (left open by
        :meth:`close`). The pool's connections must be in autocommit mode and configured
        by :func:`configure_connection` (``psycopg_pool.ConnectionPool(dsn,
        kwargs={"autocommit": True}, configure=configure_connection)``)."""
        conninfo = pool.conninfo if isinstance(pool.conninfo, str) else ""
        return cls(pool, settings, shown=redact(conninfo), secret=password_of(conninfo))

    @property
    def settings(self) -> PostgresSettings:
        """The settings this database was opened with."""
        return self._settings

    @property
    def pool(self) -> Pool:
        """The pool units take their connections from."""
        return self._pool

    def close(self) -> None:
        """Roll back open units, and close the pool when this database opened it.
        Idempotent; does nothing in a forked child (the pool belongs to the parent)."""
        if self._generation != _Forks.generation:
            return
        self._rollback_all()
        self._release(discard=True)
        if self._owns_pool:
            self._pool.close()

    def _check_usable(self) -> None:
        if self._generation != _Forks.generation:
            raise ConnectionUsedAfterFork(
                f"PostgreSQL pool of {self.shown} was opened in process {self._pid}, "
                f"used in {os.getpid()}"
            )
        self._check_thread()
        if self._lost is not None:
            raise _TransactionLost(self._lost)

    # -- statements ----------------------------------------------------------------------------

    def execute(self, sql: str, params: Params | None = None) -> list[Row]:
        """Run one statement and return all its rows (RETURNING rows included; [] when it
        returns none).

        Raises the psycopg error of a failing statement; inside :meth:`transact` or
        :meth:`read` the unit turns it into a typed failure.
        """
        self._check_usable()
        if self._conn is None:
            with self._pool.connection() as connection:
                cursor = connection.execute(sql, params)
                return cursor.fetchall() if cursor.description else []
        try:
            cursor = self._conn.execute(sql, params)
            self._ran = True
            return cursor.fetchall() if cursor.description else []
        except psycopg.Error as exc:
            self._note_error(exc)
            raise

    def one(self, sql: str, params: Params | None = None) -> Row | None:
        """Run one statement and return its first row, or None."""
        rows = self.execute(sql, params)
        return rows[0] if rows else None

    def scalar(self, sql: str, params: Params | None = None) -> Any:
        """Run one statement and return the first column of its first row, or None."""
        row = self.one(sql, params)
        return None if row is None else row[0]

    def executemany(self, sql: str, rows: Iterable[Params]) -> None:
        """Run one statement once per parameter row (pipelined, no commits)."""
        self.many(sql, rows, returning=False)

    def many(self, sql: str, rows: Iterable[Params], *, returning: bool = True) -> list[Row]:
        """Run one statement once per parameter row; return the rows each returned
        (RETURNING or SELECT), concatenated in input order."""
        self._check_usable()
        batch = list(rows)
        if not batch:
            return []
        connection = self._conn
        if connection is None:
            raise TransactionMisuse("many() runs inside a unit of work")
        try:
            with connection.cursor() as cursor:
                cursor.executemany(sql, batch, returning=returning)
                self._ran = True
                found: list[Row] = []
                if returning:
                    while True:
                        if cursor.description:
                            found.extend(cursor.fetchall())
                        if not cursor.nextset():
                            break
                return found
        except psycopg.Error as exc:
            self._note_error(exc)
            raise

    def copy_in(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> int:
        """Write ``rows`` (values in ``columns`` order) into ``table`` with ``COPY ... FROM
        STDIN``, the server's bulk path; return how many rows were sent. Strings are escaped
        as every statement's are. ``table`` and ``columns`` are names from the schema,
        quoted here. Runs inside a unit of work; raises like :meth:`execute`."""
        self._check_usable()
        connection = self._conn
        if connection is None:
            raise TransactionMisuse("copy_in() runs inside a unit of work")
        target = psycopg.sql.SQL("COPY {} ({}) FROM STDIN").format(
            psycopg.sql.Identifier(table),
            psycopg.sql.SQL(", ").join(psycopg.sql.Identifier(c) for c in columns),
        )
        sent = 0
        try:
            with connection.cursor() as cursor, cursor.copy(target) as copy:
                self._ran = True
                for row in rows:
                    copy.write_row(row)
                    sent += 1
        except psycopg.Error as exc:
            self._note_error(exc)
            raise
        return sent

    def stream(
        self, sql: str, params: Params | None = None, *, batch_rows: int = 5_000
    ) -> Iterator[Row]:
        """Yield the rows of one query through a server-side cursor, ``batch_rows`` at a
        time, so a table of millions of rows is never held at once. Runs inside a unit of
        work (the cursor lives in its transaction); raises like :meth:`execute`."""
        self._check_usable()
        connection = self._conn
        if connection is None:
            raise TransactionMisuse("stream() runs inside a unit of work")
        try:
            with connection.cursor(name=f"runstore_stream{len(self._frames)}") as cursor:
                cursor.itersize = batch_rows
                cursor.execute(sql, params)
                self._ran = True
                yield from cursor
        except psycopg.Error as exc:
            self._note_error(exc)
            raise

    def _note_error(self, exc: psycopg.Error) -> None:
        """Remember an error that leaves the transaction unable to go on."""
        self._last_error = exc
        if _retryable(exc) or is_connection_lost(exc):
            self._lost = exc

    # -- units of work -------------------------------------------------------------------------

    def transact(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        """Run ``fn`` as a unit of work: ``BEGIN ISOLATION LEVEL READ COMMITTED`` outermost,
        a SAVEPOINT when nested.

        - ``Success``: COMMIT (or RELEASE the savepoint); mirror changes stand, and
          ``on_commit`` callbacks run once the outermost unit has committed.
        - ``Failure``: ROLLBACK (or ROLLBACK TO the savepoint), undo the mirror changes,
          return the Failure unchanged.
        - A psycopg error from the server (a statement, or COMMIT, failed): roll back, undo,
          return ``StorageFailure`` as :func:`from_psycopg` classifies it. In a nested unit
          a constraint error rolls back to its savepoint and is returned there; a
          serialization failure, deadlock, lock timeout or lost connection ends the whole
          transaction and the outermost unit answers for it.
        - Any other exception, and psycopg's refusals of a call (wrong parameters): roll
          back, undo, re-raise (a programmer error).

        Retries: on a serialization failure (40001), a deadlock (40P01) or a lock timeout
        (55P03) the outermost unit rolls back and runs ``fn`` again after a short pause (5
        ms doubling to 100 ms) until ``settings.busy_budget_ms`` has passed, then returns
        ``Busy(operation, waited_ms)`` with nothing written; ``fn`` must be safe to run
        again (all its effects go through this unit). A unit whose connection is lost
        before any statement ran is tried once more on a fresh connection; after that a
        lost connection is ``StorageFailure`` of kind ``connection`` (the outcome of a
        COMMIT that lost its connection is unknown: write units so that running them again
        is harmless).

        Raises :class:`~runstore.exceptions.TransactionMisuse` inside :meth:`read`, from a
        foreign thread, or when ``fn`` returns something other than a Result.
        """
        self._check_usable()
        self._check_can_write(operation)
        if self._frames:
            return self._savepoint(operation, fn)
        begin = "BEGIN ISOLATION LEVEL READ COMMITTED"
        return self._retrying(operation, lambda: self._outermost(operation, fn, begin))

    def read(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        """Run read-only ``fn`` on one snapshot: ``REPEATABLE READ READ ONLY`` outermost
        (always rolled back), a savepoint of the enclosing transaction when nested (seeing
        its writes).

        Returns what ``fn`` returns; psycopg errors become ``StorageFailure`` (a write is
        refused by the server: kind ``read_only``) or ``Busy`` as in :meth:`transact`.
        """
        self._check_usable()
        if self._frames:
            reading = self._reading
            self._reading = True
            try:
                return self._savepoint(operation, fn)
            finally:
                self._reading = reading
        return self._retrying(
            operation,
            lambda: self._outermost(
                operation, fn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", reading=True
            ),
        )

    def _retrying(
        self,
        operation: str,
        attempt: Callable[[], Result[T, E | Busy | StorageFailure] | Retry],
    ) -> Result[T, E | Busy | StorageFailure]:
        """Run ``attempt`` until it is not busy or the busy budget is spent (see
        :func:`~runstore.layers._unit_of_work.retrying`)."""
        return retrying(operation, self._settings.busy_budget_ms, attempt, self._pause)

    def _acquire(self, operation: str) -> StorageFailure | None:
        try:
            self._conn = self._pool.getconn()
        except PoolTimeout:
            return _unreachable(self.shown, self._secret, self._pool, operation)
        return None

    def _release(self, *, discard: bool = False) -> None:
        connection, self._conn = self._conn, None
        if connection is None:
            return
        if discard and not connection.closed:
            try:
                if connection.info.transaction_status != pq.TransactionStatus.IDLE:
                    connection.execute("ROLLBACK")
            except psycopg.Error:
                connection.close()
        self._pool.putconn(connection)

    def _begin(self, operation: str, begin: str) -> StorageFailure | Retry | None:
        """Take a connection and open the transaction; a failure, a retry, or None."""
        for tries_left in (1, 0):
            problem = self._acquire(operation)
            if problem is not None:
                return problem
            assert self._conn is not None
            try:
                self._conn.execute(begin)
                return None
            except psycopg.Error as exc:
                self._release(discard=True)
                if is_programmer_error(exc):
                    raise
                if _retryable(exc):
                    return RETRY
                if not (is_connection_lost(exc) and tries_left):
                    return self._failure(exc, operation)
        raise AssertionError("unreachable")

    def _failure(self, exc: psycopg.Error, operation: str) -> StorageFailure:
        error = from_psycopg(exc, operation=operation, secret=self._secret)
        assert isinstance(error, StorageFailure)  # retryable errors never get here
        return error

    def _outermost(
        self, operation: str, fn: Callable[[], Result[T, E]], begin: str, *, reading: bool = False
    ) -> Result[T, E | Busy | StorageFailure] | Retry:
        started = self._begin(operation, begin)
        if started is not None:
            return started if isinstance(started, Retry) else Failure(started)
        self._push()
        self._reading = reading
        self._lost = None
        self._last_error = None
        self._ran = False
        try:
            result = fn()
        except BaseException as exc:
            lost = self._lost
            self._abort()
            outcome = self._outcome_of(exc, lost, operation)
            if outcome is None:
                raise
            return outcome
        lost = self._lost
        if lost is not None:
            self._abort()
            return RETRY if _retryable(lost) else Failure(self._failure(lost, operation))
        if not isinstance(result, Success):
            self._abort()
            if isinstance(result, Failure):
                return result
            raise _not_a_result(result)
        connection = self._conn
        assert connection is not None
        if connection.info.transaction_status == pq.TransactionStatus.INERROR:
            # ``fn`` swallowed a failed statement: COMMIT would silently roll back.
            failed = self._last_error
            self._abort()
            if failed is None:
                raise TransactionMisuse(f"{operation!r} left its transaction failed")
            return RETRY if _retryable(failed) else Failure(self._failure(failed, operation))
        if connection.info.transaction_status == pq.TransactionStatus.IDLE:
            self._abort()
            raise TransactionMisuse(
                f"{operation!r} ended its transaction itself; let the unit of work commit"
            )
        try:
            connection.execute("ROLLBACK" if reading else "COMMIT")
        except psycopg.Error as exc:
            self._abort()
            if is_programmer_error(exc):
                raise
            return RETRY if _retryable(exc) else Failure(self._failure(exc, operation))
        self._release()
        self._pop_commit()
        return result

    def _outcome_of(
        self, exc: BaseException, lost: psycopg.Error | None, operation: str
    ) -> Failure[Busy | StorageFailure] | Retry | None:
        """What the outermost unit returns for ``exc`` after rolling back; None to re-raise."""
        if isinstance(exc, _TransactionLost):
            cause = lost or exc.cause
            return RETRY if _retryable(cause) else Failure(self._failure(cause, operation))
        if not isinstance(exc, psycopg.Error) or is_programmer_error(exc):
            return None
        if _retryable(exc):
            return RETRY
        return Failure(self._failure(exc, operation))

    def _abort(self) -> None:
        """Roll the outermost transaction back, hand the connection back, undo mirrors."""
        try:
            connection = self._conn
            if connection is not None and not connection.closed:
                try:
                    if connection.info.transaction_status != pq.TransactionStatus.IDLE:
                        connection.execute("ROLLBACK")
                except psycopg.Error:
                    connection.close()  # the pool discards it
            self._release()
        finally:
            self._lost = None
            self._pop_rollback()

    def _savepoint(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        connection = self._conn
        assert connection is not None
        name = f"runstore_sp{len(self._frames)}"
        try:
            connection.execute(f"SAVEPOINT {name}")
        except psycopg.Error as exc:
            self._note_error(exc)
            raise _TransactionLost(exc) from exc
        self._push()
        try:
            result = fn()
        except psycopg.Error as exc:
            self._note_error(exc)
            if self._lost is not None:
                self._pop_rollback()
                raise _TransactionLost(self._lost) from exc
            self._rollback_to(name)
            if is_programmer_error(exc):
                raise
            return Failure(self._failure(exc, operation))
        except BaseException:
            if self._lost is not None:
                self._pop_rollback()
            else:
                self._rollback_to(name)
            raise
        if self._lost is not None:
            self._pop_rollback()
            raise _TransactionLost(self._lost)
        if not isinstance(result, Success):
            self._rollback_to(name)
            if isinstance(result, Failure):
                return result
            raise _not_a_result(result)
        connection.execute(f"RELEASE SAVEPOINT {name}")
        self._pop_commit()
        return result

    def _rollback_to(self, name: str) -> None:
        connection = self._conn
        assert connection is not None
        try:
            connection.execute(f"ROLLBACK TO SAVEPOINT {name}")
            connection.execute(f"RELEASE SAVEPOINT {name}")
        except psycopg.Error as exc:
            self._note_error(exc)
            self._lost = self._lost or exc
            raise _TransactionLost(exc) from exc
        finally:
            self._pop_rollback()


def _unparsable(dsn: str) -> StorageFailure | None:
    """``StorageFailure`` (kind ``cant_open``) when psycopg cannot parse ``dsn``, else None.

    psycopg's parse errors quote the whole connection string, where no parser found the
    password, so the message names the target only as output may show it (a URL without
    its password; any other text not at all)."""
    from runstore.layers._open import postgres_url, shown_database

    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        shown = shown_database(dsn) if postgres_url(dsn) else "the connection string"
        reason = str(exc).replace(dsn, shown).splitlines()[0] if str(exc) else "unparsable"
        if dsn in reason or not postgres_url(dsn):
            reason = "psycopg cannot parse it"
        return StorageFailure(
            "open", StorageFailureKind.CANT_OPEN, -1, f"cannot parse {shown}: {reason}"
        )
    return None


def _connection_kwargs(settings: PostgresSettings, *, read_only: bool) -> dict[str, Any]:
    """Keyword arguments of every connection a DSN's pool opens."""
    options = f"-c lock_timeout={settings.lock_timeout_ms} -c TimeZone=UTC"
    if read_only:
        options += " -c default_transaction_read_only=on"
    return {"autocommit": True, "connect_timeout": settings.connect_timeout_s, "options": options}


def open_failure(exc: psycopg.Error, secret: str) -> StorageFailure:
    """The failure of a first connection that could not be made (never with ``secret``)."""
    failure = from_psycopg(exc, operation="open", secret=secret)
    if isinstance(failure, Busy):  # a deadlock while connecting: report it as such
        failure = StorageFailure("open", StorageFailureKind.OTHER, -1, str(failure))
    return failure


def pool_options(settings: PostgresSettings, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments of a pool a DSN opens, sync or async (``kwargs`` its connections')."""
    return {
        "min_size": 0,
        "max_size": settings.pool_max_size,
        "open": False,
        "kwargs": kwargs,
        "timeout": float(settings.connect_timeout_s),
        # Give up a failing reconnection within half a unit's wait, so the next unit
        # starts a fresh one at once: left to back off (1 s doubling, for 5 min by
        # default), the pool stayed without connections long after a restarted server
        # was back.
        "reconnect_timeout": settings.connect_timeout_s / 2,
        "name": "runstore",
    }


def configure_connection(connection: Connection) -> None:
    """Configure a connection of a caller's pool as runstore needs it (its adapters)."""
    _configure(connection)


def _unreachable(
    shown: str, secret: str, pool: Pool, operation: str = "open"
) -> StorageFailure:
    """The failure of a pool that handed out no connection in time."""
    del pool
    return StorageFailure(
        operation=operation,
        kind=StorageFailureKind.CONNECTION,
        code=-1,
        message=scrub(f"no connection to {shown} could be made in time", secret),
    )

