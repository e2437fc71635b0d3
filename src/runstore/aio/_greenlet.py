"""Run the sync PostgreSQL layer on psycopg's async connections: the greenlet bridge.

:func:`greenlet_spawn` runs an ordinary sync function in a child greenlet on the running
event loop; whenever that function needs I/O it calls :func:`await_only`, which hands the
awaitable to :func:`greenlet_spawn` (switching back to the loop's greenlet), which awaits it
and switches the result (or exception) back in. The sync code never blocks the loop: while
it waits for the server, the loop runs other tasks. This is the technique of SQLAlchemy's
asyncio extension (``sqlalchemy.util.concurrency``), and it lets ``runstore.aio`` reuse every
statement, rule and unit-of-work path of the sync PostgreSQL layer unchanged.

:class:`SyncPool`, :class:`SyncConnection`, :class:`SyncCursor` and :class:`SyncCopy` are
sync-looking proxies over ``psycopg_pool.AsyncConnectionPool``, ``psycopg.AsyncConnection``,
its cursors and ``COPY``: they cover exactly what
:class:`~runstore.layers._postgres_database.PostgresDatabase` calls (``connection``,
``getconn``, ``putconn``, ``close`` and ``conninfo`` of the pool; ``execute``, ``cursor``,
``info``, ``closed``, ``close`` and ``adapters`` of a connection; ``execute``,
``executemany``, ``fetchall``, ``description``, ``nextset``, ``itersize``, iteration and
``copy`` of a cursor; ``write_row`` of a copy), each I/O call through :func:`await_only`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import Any, TypeVar

import greenlet  # type: ignore[import-untyped]  # greenlet ships no type information
import psycopg
import psycopg.sql
from psycopg import AsyncConnection, AsyncCursor, AsyncServerCursor
from psycopg.abc import Params
from psycopg_pool import AsyncConnectionPool

from runstore.exceptions import TransactionMisuse

__all__ = [
    "BridgeStretches",
    "SyncConnection",
    "SyncCopy",
    "SyncCursor",
    "SyncPool",
    "await_only",
    "greenlet_spawn",
    "in_bridge",
]

T = TypeVar("T")
Row = tuple[Any, ...]
Query = str | bytes | psycopg.sql.SQL | psycopg.sql.Composed


class _Bridge(greenlet.greenlet):  # type: ignore[misc]  # an untyped base
    """The child greenlet :func:`greenlet_spawn` runs sync code in (a marker type)."""


def in_bridge() -> bool:
    """Whether the caller runs inside :func:`greenlet_spawn` (so :func:`await_only` works)."""
    return isinstance(greenlet.getcurrent(), _Bridge)


def await_only(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` on the event loop from sync code run by :func:`greenlet_spawn`, and
    return its result (or raise its exception, ``CancelledError`` included).

    Raises :class:`~runstore.exceptions.TransactionMisuse` outside :func:`greenlet_spawn`
    (the awaitable is closed, never run): sync code cannot wait for the loop it blocks.
    """
    current = greenlet.getcurrent()
    if not isinstance(current, _Bridge):
        close = getattr(awaitable, "close", None)
        if close is not None:
            close()
        raise TransactionMisuse("await_only() runs inside greenlet_spawn() only")
    result: T = current.parent.switch(awaitable)
    return result


async def greenlet_spawn(fn: Callable[..., T], *args: Any) -> T:
    """Run sync ``fn(*args)`` in a child greenlet on the running loop, awaiting each
    awaitable it hands over with :func:`await_only`; return what ``fn`` returns or raise
    what it raises.

    When the awaiting task is cancelled, ``CancelledError`` is raised inside ``fn`` at the
    :func:`await_only` it waits in, so its ``finally`` blocks and rollbacks run (awaiting as
    they need); ``fn``'s own outcome then propagates.
    """
    child = _Bridge(fn)
    handed = child.switch(*args)
    while not child.dead:
        try:
            value = await handed
        except BaseException as exc:  # every outcome goes back into fn
            handed = child.throw(exc)
        else:
            handed = child.switch(value)
    result: T = handed
    return result


@contextmanager
def _entered(manager: AbstractAsyncContextManager[T]) -> Iterator[T]:
    """An async context manager used as a sync one, through :func:`await_only`."""
    value = await_only(manager.__aenter__())
    try:
        yield value
    except BaseException as exc:
        if not await_only(manager.__aexit__(type(exc), exc, exc.__traceback__)):
            raise
    else:
        await_only(manager.__aexit__(None, None, None))


class SyncCopy:
    """A ``COPY ... FROM STDIN`` in progress (``psycopg.AsyncCopy``), sync-looking."""

    __slots__ = ("_copy",)

    def __init__(self, copy: psycopg.AsyncCopy) -> None:
        self._copy = copy

    def write_row(self, row: Sequence[Any]) -> None:
        """Send one row (values in the COPY's column order)."""
        await_only(self._copy.write_row(row))


class SyncCursor:
    """A cursor of an async connection (client- or server-side), sync-looking."""

    __slots__ = ("_cursor",)

    def __init__(self, cursor: AsyncCursor[Row] | AsyncServerCursor[Row]) -> None:
        self._cursor = cursor

    def __enter__(self) -> SyncCursor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        await_only(self._cursor.close())

    @property
    def description(self) -> list[psycopg.Column] | None:
        """The columns of the current result (None when it returns no rows)."""
        return self._cursor.description

    @property
    def itersize(self) -> int:
        """Rows a server-side cursor fetches per round trip while iterated."""
        return self._server().itersize

    @itersize.setter
    def itersize(self, rows: int) -> None:
        self._server().itersize = rows

    def _server(self) -> AsyncServerCursor[Row]:
        cursor = self._cursor
        assert isinstance(cursor, AsyncServerCursor)
        return cursor

    def execute(self, query: Query, params: Params | None = None) -> SyncCursor:
        """Run one statement on this cursor."""
        await_only(self._cursor.execute(query, params))
        return self

    def executemany(
        self, query: Query, params_seq: Iterable[Params], *, returning: bool = False
    ) -> None:
        """Run one statement once per parameter row (pipelined)."""
        cursor = self._cursor
        assert isinstance(cursor, AsyncCursor)  # a server-side cursor runs one query
        await_only(cursor.executemany(query, params_seq, returning=returning))

    def fetchall(self) -> list[Row]:
        """Every (remaining) row of the current result."""
        return await_only(self._cursor.fetchall())

    def nextset(self) -> bool | None:
        """Move to the next result of an ``executemany(returning=True)``."""
        return self._cursor.nextset()

    def __iter__(self) -> Iterator[Row]:
        cursor = self._server()
        while True:
            batch = await_only(cursor.fetchmany(cursor.itersize))
            yield from batch
            if len(batch) < cursor.itersize:
                return

    @contextmanager
    def copy(self, statement: Query) -> Iterator[SyncCopy]:
        """Start ``COPY ... FROM STDIN``; the copy ends when the block does."""
        cursor = self._cursor
        assert isinstance(cursor, AsyncCursor)
        with _entered(cursor.copy(statement)) as copy:
            yield SyncCopy(copy)


class SyncConnection:
    """An ``AsyncConnection`` taken from the pool, sync-looking."""

    __slots__ = ("_connection",)

    def __init__(self, connection: AsyncConnection[Row]) -> None:
        self._connection = connection

    @property
    def connection(self) -> AsyncConnection[Row]:
        """The async connection this proxy drives."""
        return self._connection

    @property
    def info(self) -> psycopg.ConnectionInfo:
        """The connection's state (``transaction_status``, ...); no I/O."""
        return self._connection.info

    @property
    def closed(self) -> bool:
        """Whether the connection is closed."""
        return self._connection.closed

    @property
    def adapters(self) -> psycopg.adapt.AdaptersMap:
        """The connection's dumpers and loaders."""
        return self._connection.adapters

    def close(self) -> None:
        """Close the connection (the pool then discards it)."""
        await_only(self._connection.close())

    def execute(self, query: Query, params: Params | None = None) -> SyncCursor:
        """Run one statement; return its cursor (``fetchall``, ``description``)."""
        return SyncCursor(await_only(self._connection.execute(query, params)))

    def cursor(self, name: str = "") -> SyncCursor:
        """A new cursor: server-side when ``name`` is given (for streaming)."""
        if name:
            return SyncCursor(self._connection.cursor(name=name))
        return SyncCursor(self._connection.cursor())


class SyncPool:
    """An ``AsyncConnectionPool``, sync-looking, handing out :class:`SyncConnection`\\ s.

    :meth:`close` does nothing: the pool belongs to whoever opened it (``runstore.aio``'s
    PostgreSQL runner, or the caller), not to the database that uses this proxy.
    """

    __slots__ = ("_pool",)

    def __init__(self, pool: AsyncConnectionPool[AsyncConnection[Row]]) -> None:
        self._pool = pool

    @property
    def conninfo(self) -> str:
        """The pool's connection string (as the caller gave it)."""
        return self._pool.conninfo if isinstance(self._pool.conninfo, str) else ""

    def getconn(self, timeout: float | None = None) -> SyncConnection:
        """Take a connection, waiting up to ``timeout`` s (the pool's own by default)."""
        return SyncConnection(await_only(self._pool.getconn(timeout)))

    def putconn(self, connection: SyncConnection) -> None:
        """Give a connection back (the pool discards a closed or broken one)."""
        await_only(self._pool.putconn(connection.connection))

    @contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[SyncConnection]:
        """A connection for one block, given back when it ends."""
        with _entered(self._pool.connection(timeout)) as connection:
            yield SyncConnection(connection)

    def close(self) -> None:
        """Nothing: see the class docstring."""


class BridgeStretches:
    """Records how long each run of a bridge greenlet lasted between two switches: the time
    the sync code held the event loop's thread without awaiting (a diagnostic for tests and
    benchmarks; ``with BridgeStretches() as held: ...``).

    ``stretches`` holds ``(ended, seconds)`` pairs, ``ended`` a ``time.perf_counter()``
    reading. Installs a ``greenlet.settrace`` hook for the block (the previous one is put
    back after), so it sees the bridge greenlets of every thread.
    """

    def __init__(self) -> None:
        self.stretches: list[tuple[float, float]] = []
        self._entered: float | None = None
        self._previous: Any = None

    def _trace(self, event: str, args: tuple[Any, Any]) -> None:
        now = time.perf_counter()
        if self._entered is not None:
            self.stretches.append((now, now - self._entered))
            self._entered = None
        if event in ("switch", "throw") and isinstance(args[1], _Bridge):
            self._entered = now

    @property
    def longest(self) -> float:
        """The longest stretch (s; 0.0 when none)."""
        return max((seconds for _, seconds in self.stretches), default=0.0)

    def __enter__(self) -> BridgeStretches:
        self._previous = greenlet.settrace(self._trace)
        return self

    def __exit__(self, *exc_info: object) -> None:
        greenlet.settrace(self._previous)
