"""``aio.postgres``: the sync PostgreSQL layer on psycopg's ``AsyncConnectionPool``.

Each call runs the unchanged sync PostgreSQL layer (its statements, rules and units of
work) in a child greenlet on the running event loop (:mod:`runstore.aio._greenlet`): the
layer's :class:`~runstore.layers._postgres_database.PostgresDatabase` sits on a sync-looking
proxy of an ``AsyncConnectionPool``, so every statement is awaited on the loop and the loop
runs other tasks while the server works. A busy retry pauses with ``asyncio.sleep``.

- **Loops.** A pool belongs to one event loop (its connections and maintenance tasks do):
  the runner opens one pool per running loop, lazily, on that loop's first call, so one
  container serves several loops and threads (``asyncio.run`` twice, a loop per thread).
  ``aclose`` closes every loop's pool: on the closing loop it is awaited, on a loop still
  running in another thread it is handed to that loop and awaited, and a pool whose loop
  has ended has only its connections closed.
- **Concurrency.** Each concurrent call gets a sync container of its own (a
  ``PostgresDatabase`` holds the state of one unit at a time), taken from the loop's idle
  ones or built; so calls run at once up to the pool's size, each a transaction of its own.
- **Cancellation.** A call cancelled before it started never runs. A read that started is
  cancelled where it waits: its transaction rolls back. A write that started runs to its
  outcome (committed or rolled back) and then the caller gets ``CancelledError``, as on
  ``aio.sqlite``.
- **Work on the loop.** What the layer does between statements (validation, JSON encoding
  and decoding of bodies, building records) runs on the loop thread, between two awaits.
  Measured (``benchmarks/aio_postgres.py``, 2 cores at load 8 to 10): an append holds the
  loop 0.5 ms at most for a 64 KiB body, about 20 ms per MiB beyond (1 MiB 21 ms, 4 MiB
  80 ms, 16 MiB 370 ms); in the load test (100 clients) every stretch stayed under 2 ms at
  p99. Most of it is the body's JSON (profiled, 4 MiB: encoding 88 ms, reading it back
  28 ms, UTF-8 28 ms). So a body over about 2 MiB keeps the loop from other tasks for more
  than 50 ms: a host that stores such bodies and must answer within that should call the
  sync PostgreSQL layer on a thread of its own for them. Per call the bridge costs about
  1.3x to 1.6x the sync layer's time (an append 9.4 ms against 5.8 ms, a page read 3.4 ms
  against 2.5 ms, awaited one at a time on that loaded machine).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, ExitStack, asynccontextmanager
from typing import Any, TypeAlias, TypeVar, cast

import attrs
import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from returns.result import Failure

from runstore.aio._greenlet import SyncPool, await_only, greenlet_spawn
from runstore.aio._runner import Access, AsyncLayer, Runner, refuse_after_fork
from runstore.exceptions import ContainerClosed, DatabaseOpenError
from runstore.layers._layer import Container, Layer, build, merge
from runstore.layers._open import Access as OpenAccess
from runstore.layers._postgres_database import (
    Pool,
    PostgresDatabase,
    PostgresSettings,
    _configure,
    _connection_kwargs,
    _unparsable,
    open_failure,
    pool_options,
)
from runstore.layers._postgres_errors import password_of, redact

__all__ = [
    "AsyncPool",
    "PostgresRunner",
    "configure_postgres_connection",
    "open_runner",
    "postgres",
]

T = TypeVar("T")
Row: TypeAlias = tuple[Any, ...]
AsyncPool: TypeAlias = AsyncConnectionPool[AsyncConnection[Row]]
"""What ``aio.postgres`` takes as a caller's pool."""

_IDLE_CONTAINERS = 16
"""Idle sync containers a loop keeps for its next calls (more are built when needed)."""


async def configure_postgres_connection(connection: AsyncConnection[Any]) -> None:
    """Configure a connection of a caller's ``AsyncConnectionPool`` as runstore needs it:
    ``AsyncConnectionPool(dsn, kwargs={"autocommit": True},
    configure=configure_postgres_connection)``."""
    _configure(connection)


def _pause(seconds: float) -> None:
    """A busy retry's pause: yield to the loop for ``seconds`` (s)."""
    await_only(asyncio.sleep(seconds))


@attrs.define(eq=False)
class _Slot:
    """One sync container and the database it runs on."""

    db: PostgresDatabase
    container: Container
    stack: ExitStack

    def close(self) -> None:
        try:
            self.stack.close()
        finally:
            self.db.close()


@attrs.define(eq=False)
class _LoopPool:
    """A loop's pool, the task that opens it, and its idle containers."""

    loop: asyncio.AbstractEventLoop
    pool: AsyncPool
    owned: bool
    opening: asyncio.Future[None]
    """Opens the pool (done at once for a caller's pool)."""
    idle: list[_Slot] = attrs.field(factory=list)
    running: set[asyncio.Future[Any]] = attrs.field(factory=set)


class PostgresRunner:
    """Runs sync-layer calls on PostgreSQL for ``runstore.aio`` (see the module docstring).

    ``services`` is the sync layer built over each call's ``PostgresDatabase`` (it must
    provide every tag the façade asks for and may require only ``PostgresDatabase``).
    """

    def __init__(
        self,
        target: str | AsyncPool,
        settings: PostgresSettings,
        services: Layer,
        *,
        read_only: bool = False,
    ) -> None:
        self._target = target
        self._settings = settings
        self._services = services
        self._read_only = read_only
        conninfo = target if isinstance(target, str) else target.conninfo
        conninfo = conninfo if isinstance(conninfo, str) else ""
        self._shown = redact(conninfo)
        self._secret = password_of(conninfo)
        self._lock = threading.Lock()
        self._loops: dict[asyncio.AbstractEventLoop, _LoopPool] = {}
        self._closed = False
        self._pid = os.getpid()

    # -- calls ---------------------------------------------------------------------------------

    async def call(self, access: Access, fn: Callable[[Container], T]) -> T:
        """Run ``fn`` on a sync container of this loop's pool and return what it returns
        (see :meth:`runstore.aio.Runner.call`).

        Cancelled before ``fn`` started, it never runs. Once started, a ``"write"`` runs to
        its outcome (committed or rolled back) and the caller's ``CancelledError`` comes
        after it; a ``"read"`` is cancelled where it waits (its transaction rolls back).
        Raises :class:`~runstore.exceptions.ContainerClosed` once :meth:`aclose` has begun,
        and :class:`~runstore.exceptions.ConnectionUsedAfterFork` in a process forked from
        the one that opened the runner (its pools and connections are the parent's).
        """
        state = await self._loop_pool()
        started: list[bool] = []
        task = asyncio.ensure_future(greenlet_spawn(self._run, state, fn, started))
        state.running.add(task)
        task.add_done_callback(state.running.discard)
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not started or access != "write":
                task.cancel()
            else:
                await _outcome(task)
            raise

    def _run(self, state: _LoopPool, fn: Callable[[Container], T], started: list[bool]) -> T:
        """In a bridge greenlet: run ``fn`` on an idle container (or a new one)."""
        started.append(True)
        slot = state.idle.pop() if state.idle else self._slot(state)
        reusable = False
        try:
            result = fn(slot.container)
            reusable = not slot.db.in_unit
            return result
        finally:
            if reusable and not self._closed and len(state.idle) < _IDLE_CONTAINERS:
                state.idle.append(slot)
            else:
                slot.close()

    def _slot(self, state: _LoopPool) -> _Slot:
        db = PostgresDatabase(
            cast(Pool, SyncPool(state.pool)),
            self._settings,
            shown=self._shown,
            secret=self._secret,
            pause=_pause,
        )
        stack = ExitStack()
        try:
            container = stack.enter_context(
                build(merge(Layer.value(PostgresDatabase, db), self._services))
            )
        except BaseException:
            stack.close()
            raise
        return _Slot(db, container, stack)

    async def database(self, fn: Callable[[PostgresDatabase], T]) -> T:
        """Run ``fn`` on a ``PostgresDatabase`` of this loop's pool (opening, migrating)."""
        return await self.call("write", lambda c: fn(c.get(PostgresDatabase)))

    # -- pools ---------------------------------------------------------------------------------

    async def _loop_pool(self) -> _LoopPool:
        refuse_after_fork(self._pid, f"the PostgreSQL container of {self._shown}")
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closed:
                raise ContainerClosed(f"the PostgreSQL container of {self._shown} is closed")
            state = self._loops.get(loop)
            if state is None:
                state = self._loops[loop] = self._new_pool(loop)
                ended = [other for other in self._loops.values() if other.loop.is_closed()]
                for other in ended:
                    del self._loops[other.loop]
            else:
                ended = []
        for other in ended:
            _abandon(other)
        await asyncio.shield(state.opening)
        return state

    def _new_pool(self, loop: asyncio.AbstractEventLoop) -> _LoopPool:
        target = self._target
        if isinstance(target, str):
            pool: AsyncPool = AsyncConnectionPool(
                target,
                configure=configure_postgres_connection,
                **pool_options(
                    self._settings,
                    _connection_kwargs(self._settings, read_only=self._read_only),
                ),
            )
            opening = asyncio.ensure_future(pool.open(wait=False))
            return _LoopPool(loop, pool, owned=True, opening=opening)
        done: asyncio.Future[None] = loop.create_future()
        done.set_result(None)
        return _LoopPool(loop, target, owned=False, opening=done)

    # -- closing -------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Once the calls handed over have run, drop the idle containers and close every
        loop's pool this runner opened (a caller's pool stays open). Idempotent; calls made
        afterwards raise ``ContainerClosed``. In a forked child it closes nothing (the pools
        are the parent's)."""
        if os.getpid() != self._pid:
            return
        with self._lock:
            self._closed = True
            states = list(self._loops.values())
            self._loops.clear()
        here = asyncio.get_running_loop()
        for state in states:
            await self._close(state, here)

    async def _close(self, state: _LoopPool, here: asyncio.AbstractEventLoop) -> None:
        if state.loop is here:
            await _drop_and_close(state)
        elif state.loop.is_running() and not state.loop.is_closed():
            closing = asyncio.run_coroutine_threadsafe(_drop_and_close(state), state.loop)
            await asyncio.wrap_future(closing)
        else:
            _abandon(state)


async def _outcome(task: asyncio.Future[Any]) -> None:
    """Wait until ``task`` is done, however often the waiter is cancelled meanwhile."""
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            continue
        except BaseException:  # its outcome is not the cancelled caller's to see
            return


async def _drop_idle(state: _LoopPool) -> None:
    idle, state.idle = state.idle, []
    for slot in idle:
        await greenlet_spawn(slot.close)


async def _drop_and_close(state: _LoopPool) -> None:
    """On the state's own loop: let the calls handed over finish, drop the idle containers,
    close the pool if it is ours."""
    if state.running:
        await asyncio.wait(list(state.running))
    await _drop_idle(state)
    if state.owned:
        await state.pool.close()


def _abandon(state: _LoopPool) -> None:
    """Forget the pool of a loop that has ended: close its idle connections' sockets (the
    loop that could await them is gone) and drop its containers."""
    state.idle.clear()
    if not state.owned:
        return
    for connection in list(getattr(state.pool, "_pool", ())):
        connection.pgconn.finish()


async def _check_connects(dsn: str, settings: PostgresSettings, *, read_only: bool) -> None:
    """Connect once to ``dsn`` (the pool would only log why it cannot); raise
    ``DatabaseOpenError`` with the typed reason when that fails."""
    unparsable = _unparsable(dsn)
    if unparsable is not None:
        raise DatabaseOpenError(unparsable)
    kwargs = _connection_kwargs(settings, read_only=read_only)
    try:
        connection = await AsyncConnection.connect(dsn, **kwargs)
    except psycopg.Error as exc:
        raise DatabaseOpenError(open_failure(exc, password_of(dsn))) from None
    await connection.close()


@asynccontextmanager
async def open_runner(
    target: str | AsyncPool,
    settings: PostgresSettings | None,
    services: Layer,
    *,
    access: OpenAccess = "create",
) -> AsyncIterator[PostgresRunner]:
    """Open a :class:`PostgresRunner` on ``target`` as ``access`` says (as the sync
    ``open_postgres`` does: migrated unless read), closed on leaving.

    Raises :class:`~runstore.exceptions.DatabaseOpenError` carrying the typed reason when
    the database cannot be reached, opened or migrated (the sync layer's failures).
    """
    from runstore.layers._postgres_layer import _check_and_migrate

    settings = settings or PostgresSettings()
    read_only = access == "read"
    if isinstance(target, str):
        await _check_connects(target, settings, read_only=read_only)
    runner = PostgresRunner(target, settings, services, read_only=read_only)
    try:
        if not read_only:
            checked = await runner.database(
                lambda db: _check_and_migrate(db, create=access == "create")
            )
            if isinstance(checked, Failure):
                raise DatabaseOpenError(checked.failure())
        yield runner
    finally:
        await runner.aclose()


def postgres(
    target: str | AsyncPool,
    settings: PostgresSettings | None = None,
    *,
    access: OpenAccess = "create",
) -> AsyncLayer:
    """The PostgreSQL layer of ``runstore.aio``: every service of the sync
    :func:`runstore.layers.postgres`, async, on psycopg's ``AsyncConnectionPool``.

    ``target`` is a DSN (``postgresql://user:password@host:5432/dbname`` or ``"host=...
    dbname=..."``; the password never appears in errors) or an ``AsyncConnectionPool`` the
    caller owns (made with ``kwargs={"autocommit": True}`` and
    ``configure=runstore.aio.configure_postgres_connection``; left open, used on whatever
    loop calls, so use it from the loop it belongs to). ``settings`` and ``access`` are as
    for the sync layer (``"create"`` migrates, ``"write"`` needs runstore's schema,
    ``"read"`` makes every transaction read-only). The database is checked (and, unless
    read, migrated) when :func:`runstore.aio.build` opens the layer, which raises
    :class:`~runstore.exceptions.DatabaseOpenError` with the typed reason when it cannot.

    A DSN opens one pool of at most ``settings.pool_max_size`` connections per event loop
    that calls (see :mod:`runstore.aio._postgres`), all closed with the container.
    Requires the ``postgresql`` extra (psycopg, psycopg_pool, greenlet).
    """
    from runstore.layers._postgres_layer import postgres_services

    def open_(over: Layer) -> AbstractAsyncContextManager[Runner]:
        return open_runner(target, settings, merge(postgres_services(), over), access=access)

    return AsyncLayer("postgres", open_)
