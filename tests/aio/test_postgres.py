"""``aio.postgres``: the sync PostgreSQL layer on ``AsyncConnectionPool`` through the greenlet
bridge, used from several loops and threads, cancelled, closed, retried without blocking.

Plain sync tests calling ``asyncio.run`` (no pytest-asyncio); each test has a database of its
own copied from the session's migrated template (``tests/postgres/fixtures.py``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool
from returns.result import Failure, Success

from forking import in_child
from postgres.fixtures import PostgresCluster
from postgres.server import fresh_name
from runstore import aio
from runstore.aio import _postgres
from runstore.aio._greenlet import SyncPool, await_only, greenlet_spawn, in_bridge
from runstore.aio._postgres import configure_postgres_connection, postgres
from runstore.aio._runner import Runner
from runstore.exceptions import (
    ConnectionUsedAfterFork,
    ContainerClosed,
    DatabaseOpenError,
    TransactionMisuse,
)
from runstore.layers import AGENT_STORAGE, Container, Layer
from runstore.layers._postgres_agents import AGENTS_LOCK
from runstore.layers._postgres_database import PostgresDatabase, PostgresSettings
from runstore.services.errors import Busy, NotARunstoreDatabase, StorageFailure

T = TypeVar("T")


@pytest.fixture
def dsn(postgres_server: PostgresCluster) -> Iterator[str]:
    """The DSN of a fresh migrated database, dropped after the test."""
    name = fresh_name()
    yield postgres_server.create(name)
    postgres_server.drop(name)


def run_on(target: str, body: Callable[[Runner], Awaitable[T]], **options: Any) -> T:
    """Open ``aio.postgres(target)``, run ``body`` on its runner in a fresh loop, close it."""

    async def main() -> T:
        async with postgres(target, **options).open(Layer()) as runner:
            return await body(runner)

    return asyncio.run(main())


def create_thread(thread_id: str) -> Callable[[Container], Any]:
    return lambda c: c.get(AGENT_STORAGE).threads.create(thread_id, project_id="p")


def message_count(thread_id: str) -> Callable[[Container], Any]:
    return lambda c: c.get(AGENT_STORAGE).threads.get(thread_id).map(lambda t: t.message_count)


# -- the bridge ----------------------------------------------------------------------------------


def test_await_only_outside_the_bridge_is_refused_and_runs_nothing() -> None:
    ran: list[int] = []

    async def work() -> None:
        ran.append(1)

    awaitable = work()
    with pytest.raises(TransactionMisuse, match="greenlet_spawn"):
        await_only(awaitable)
    assert ran == []
    assert not in_bridge()


def test_greenlet_spawn_awaits_each_step_and_passes_exceptions_both_ways() -> None:
    seen: list[str] = []

    def sync_code(x: int) -> int:
        assert in_bridge()
        value = await_only(asyncio.sleep(0, result=x + 1))
        try:
            await_only(_raise(KeyError("inner")))
        except KeyError as exc:
            seen.append(str(exc))
        return value * 10

    async def _raise(exc: BaseException) -> None:
        raise exc

    assert asyncio.run(greenlet_spawn(sync_code, 4)) == 50
    assert seen == ["'inner'"]

    def failing() -> None:
        raise ValueError("out")

    with pytest.raises(ValueError, match="out"):
        asyncio.run(greenlet_spawn(failing))


def test_the_proxies_stream_and_copy_through_async_connections(dsn: str) -> None:
    """``copy_in`` and ``stream`` (the bulk paths ``copy`` between databases uses) run on
    the proxy's ``COPY`` and server-side cursor."""

    async def main() -> tuple[int, list[tuple[Any, ...]]]:
        async with AsyncConnectionPool(
            dsn, kwargs={"autocommit": True}, configure=configure_postgres_connection, open=False
        ) as pool:

            def work() -> tuple[int, list[tuple[Any, ...]]]:
                db = PostgresDatabase(SyncPool(pool))  # type: ignore[arg-type]
                rows = [(i, f"r{i}\x00") for i in range(7)]

                def unit() -> Any:
                    db.execute("CREATE TEMP TABLE t (id int, name text)")
                    sent = db.copy_in("t", ("id", "name"), rows)
                    streamed = list(db.stream("SELECT id, name FROM t ORDER BY id", batch_rows=3))
                    return Success((sent, streamed))

                return db.transact("bulk", unit).unwrap()  # type: ignore[no-any-return]

            return await greenlet_spawn(work)

    sent, streamed = asyncio.run(main())
    assert sent == 7
    assert streamed == [(i, f"r{i}\x00") for i in range(7)]


# -- opening and closing -------------------------------------------------------------------------


def test_a_write_is_read_back_through_the_runner(dsn: str) -> None:
    async def body(runner: Runner) -> tuple[Any, Any]:
        created = await runner.call("write", create_thread("t1"))
        return created, await runner.call("read", message_count("t1"))

    created, count = run_on(dsn, body)
    assert isinstance(created, Success)
    assert created.unwrap().id == "t1"
    assert count == Success(0)


def test_the_facade_runs_on_postgres(dsn: str) -> None:
    async def main() -> tuple[Any, Any, Any]:
        async with aio.build(aio.postgres(dsn)) as container:
            agents = container.get(aio.AGENT_STORAGE)
            await agents.threads.create("t1", project_id="p")
            appended = await agents.messages.append("t1", role="user", content={"n": 1})
            listed = await agents.messages.list("t1")
            health = await container.get(aio.DATABASE_HEALTH).quick_check()
            return appended, listed, health

    appended, listed, health = asyncio.run(main())
    assert appended.unwrap().seq == 1
    assert [m.content for m in listed.unwrap().items] == [{"n": 1}]
    assert health == Success(None)


def test_an_unreachable_server_is_a_typed_open_error() -> None:
    with pytest.raises(DatabaseOpenError) as raised:
        run_on(
            "postgresql://runstore:secret@127.0.0.1:9/none",
            lambda runner: runner.call("read", lambda c: None),
            settings=PostgresSettings(connect_timeout_s=1),
        )
    assert isinstance(raised.value.error, StorageFailure)
    assert "secret" not in str(raised.value)


def test_a_foreign_database_is_refused_and_left_alone(postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        admin.execute("CREATE TABLE theirs (x int)")
    with pytest.raises(DatabaseOpenError) as raised:
        run_on(postgres_dsn, lambda runner: runner.call("read", lambda c: None))
    assert isinstance(raised.value.error, NotARunstoreDatabase)
    with psycopg.connect(postgres_dsn, autocommit=True) as admin:
        tables = admin.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchall()
    assert tables == [("theirs",)]


def test_read_access_refuses_writes(dsn: str) -> None:
    created = run_on(dsn, lambda runner: runner.call("write", create_thread("t1")), access="read")
    assert isinstance(created, Failure)
    assert isinstance(created.failure(), StorageFailure)
    assert created.failure().kind.value == "read_only"


def test_a_callers_pool_serves_the_calls_and_stays_open(dsn: str) -> None:
    async def main() -> tuple[Any, bool]:
        async with AsyncConnectionPool(
            dsn, kwargs={"autocommit": True}, configure=configure_postgres_connection, open=False
        ) as pool:
            async with postgres(pool).open(Layer()) as runner:
                created = await runner.call("write", create_thread("t1"))
            async with pool.connection() as connection:
                cursor = await connection.execute("SELECT count(*) FROM agent_threads")
                row = await cursor.fetchone()
            return created, row == (1,) and not pool.closed

    created, still_open = asyncio.run(main())
    assert isinstance(created, Success)
    assert still_open


def test_calls_after_closing_are_refused(dsn: str) -> None:
    async def main() -> None:
        async with postgres(dsn).open(Layer()) as runner:
            pass
        await runner.aclose()  # idempotent
        with pytest.raises(ContainerClosed):
            await runner.call("read", lambda c: None)

    asyncio.run(main())


# -- loops and threads ---------------------------------------------------------------------------


class LoopThread:
    """An event loop running in a thread of its own, to submit coroutines to."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Awaitable[T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)  # type: ignore[arg-type]
        return future.result(timeout=60)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


def open_connections(dsn: str) -> int:
    """Client connections to ``dsn``'s database other than this query's own."""
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(dsn, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def connections_end(dsn: str, within_s: float = 10.0) -> bool:
    """Whether every client connection to ``dsn``'s database ends within ``within_s`` (a
    closed connection's server process leaves ``pg_stat_activity`` a moment later)."""
    deadline = time.monotonic() + within_s
    while open_connections(dsn):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_one_runner_serves_loops_in_several_threads_and_closes_every_pool(dsn: str) -> None:
    """Opened on one loop, called from two ``asyncio.run`` loops (one ended before the next
    began), from a loop still running in another thread and from 4 threads at once; the
    owner's close leaves no connection open."""
    owner, other = LoopThread(), LoopThread()
    try:
        opened = postgres(dsn).open(Layer())
        runner = owner.run(opened.__aenter__())
        assert isinstance(owner.run(runner.call("write", create_thread("t0"))), Success)
        for n in (1, 2):
            created = asyncio.run(runner.call("write", create_thread(f"t{n}")))
            assert isinstance(created, Success)
        assert isinstance(other.run(runner.call("write", create_thread("t3"))), Success)
        results: list[Any] = []

        def in_thread(n: int) -> None:
            results.append(asyncio.run(runner.call("write", create_thread(f"u{n}"))))

        threads = [threading.Thread(target=in_thread, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert [isinstance(r, Success) for r in results] == [True] * 4
        listed = other.run(
            runner.call("read", lambda c: c.get(AGENT_STORAGE).threads.list(project_id="p"))
        )
        assert sorted(t.id for t in listed.unwrap().items) == [
            "t0",
            "t1",
            "t2",
            "t3",
            "u0",
            "u1",
            "u2",
            "u3",
        ]
        assert open_connections(dsn) > 0
        owner.run(opened.__aexit__(None, None, None))
        assert connections_end(dsn)
    finally:
        owner.stop()
        other.stop()


# -- cancellation --------------------------------------------------------------------------------


async def until_server_shows(dsn: str, query: str, *, deadline_s: float = 30.0) -> None:
    """Return once ``query`` (one count) counts a row on the server, polled every 10 ms from
    another connection on a thread; fail after ``deadline_s`` s (a bound for a call that
    never reached the server, far above the connect and first statement on a loaded box)."""

    def poll() -> bool:
        with psycopg.connect(dsn, autocommit=True) as watcher:
            end = time.monotonic() + deadline_s
            while time.monotonic() < end:
                row = watcher.execute(query).fetchone()
                if row is not None and row[0] > 0:
                    return True
                time.sleep(0.01)
        return False

    assert await asyncio.to_thread(poll), f"the server never showed: {query}"


WAITING_ON_AN_ADVISORY_LOCK = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
)


def test_a_cancelled_write_that_started_commits_before_the_caller_is_cancelled(
    dsn: str,
) -> None:
    """The write waits on a lock another connection holds; cancelled there, it commits once
    the lock is given up, and only then does the caller get ``CancelledError``."""
    admin = psycopg.connect(dsn, autocommit=True)
    admin.execute("SELECT pg_advisory_lock(%s, hashtext('t1'))", (AGENTS_LOCK,))
    unlocked: list[float] = []

    def unlock_later() -> None:
        time.sleep(0.3)
        unlocked.append(time.monotonic())
        admin.execute("SELECT pg_advisory_unlock(%s, hashtext('t1'))", (AGENTS_LOCK,))

    async def body(runner: Runner) -> tuple[str, float]:
        task = asyncio.ensure_future(runner.call("write", create_thread("t1")))
        await until_server_shows(dsn, WAITING_ON_AN_ADVISORY_LOCK)  # the write started
        task.cancel()
        unlocking = asyncio.get_running_loop().run_in_executor(None, unlock_later)
        try:
            await task
        except asyncio.CancelledError:
            outcome = "cancelled"
        else:
            outcome = "not cancelled"
        cancelled_at = time.monotonic()
        await unlocking
        return outcome, cancelled_at

    try:
        outcome, cancelled_at = run_on(dsn, body)
        stored = admin.execute("SELECT count(*) FROM agent_threads").fetchone()
    finally:
        admin.close()
    assert outcome == "cancelled"
    assert cancelled_at > unlocked[0]
    assert stored == (1,)


def test_a_cancelled_read_rolls_back_where_it_waits(dsn: str) -> None:
    async def body(runner: Runner) -> tuple[float, Any]:
        task = asyncio.ensure_future(
            runner.call("read", lambda c: c.get(PostgresDatabase).execute("SELECT pg_sleep(5)"))
        )
        await until_server_shows(
            dsn,
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE state = 'active' AND query = 'SELECT pg_sleep(5)'",
        )
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        waited = time.monotonic() - started
        return waited, await runner.call("read", message_count("none"))

    waited, after = run_on(dsn, body)
    assert waited < 4.0  # the server's sleep (5 s) was cut short
    assert isinstance(after, Failure)  # the runner still answers: NotFound for that thread


def test_a_call_cancelled_before_it_started_never_runs(dsn: str) -> None:
    """Cancelled while its loop's pool is still opening (the first call on a new loop),
    the call's function never runs."""
    ran: list[int] = []
    owner = LoopThread()
    try:
        opened = postgres(dsn).open(Layer())
        runner = owner.run(opened.__aenter__())

        async def body() -> bool:
            task = asyncio.ensure_future(runner.call("write", lambda c: ran.append(1)))
            await asyncio.sleep(0)  # handed over: waiting for this loop's pool
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.sleep(0.05)
            return task.cancelled()

        assert asyncio.run(body())
        owner.run(opened.__aexit__(None, None, None))
    finally:
        owner.stop()
    assert ran == []


def test_reads_cancelled_at_any_point_leave_the_pool_whole(dsn: str) -> None:
    """60 reads cancelled after 0 to 6 ms (waiting for a connection, mid-statement, giving
    the connection back): afterwards the pool (at most 2 connections) still serves 8
    concurrent reads, none waiting out its 1 s for a connection."""

    async def body(runner: Runner) -> list[Any]:
        for n in range(60):
            tasks = [
                asyncio.ensure_future(runner.call("read", message_count("none"))) for _ in range(3)
            ]
            await asyncio.sleep((n % 7) / 1000)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return list(
            await asyncio.gather(*(runner.call("read", message_count("none")) for _ in range(8)))
        )

    answers = run_on(dsn, body, settings=PostgresSettings(pool_max_size=2, connect_timeout_s=1))
    assert [type(a.failure()).__name__ for a in answers] == ["NotFound"] * 8


# -- busy retries --------------------------------------------------------------------------------


def test_busy_retries_pause_on_the_loop_and_end_in_busy(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that keeps meeting a held lock retries for ``busy_budget_ms`` and returns
    ``Busy``; its pauses (5 ms doubling to 100 ms) await, so a ticker sleeping 1 ms ticks
    during every pause (its timer is due before the pause's, however loaded the machine;
    with ``time.sleep`` pauses it would tick during none)."""
    admin = psycopg.connect(dsn, autocommit=True)
    admin.execute("SELECT pg_advisory_lock(%s, hashtext('t1'))", (AGENTS_LOCK,))
    ticks = 0
    during: list[int] = []
    pause = _postgres._pause

    def counted(seconds: float) -> None:
        before = ticks
        pause(seconds)
        during.append(ticks - before)

    monkeypatch.setattr(_postgres, "_pause", counted)

    async def body(runner: Runner) -> Any:
        nonlocal ticks
        done = False

        async def ticker() -> None:
            nonlocal ticks
            while not done:
                await asyncio.sleep(0.001)
                ticks += 1

        running = asyncio.ensure_future(ticker())
        await asyncio.sleep(0)
        outcome = await runner.call("write", create_thread("t1"))
        done = True
        await running
        return outcome

    try:
        outcome = run_on(
            dsn, body, settings=PostgresSettings(lock_timeout_ms=1, busy_budget_ms=600)
        )
    finally:
        admin.close()
    assert isinstance(outcome, Failure)
    assert isinstance(outcome.failure(), Busy)
    assert outcome.failure().waited_ms >= 600
    assert len(during) >= 3, during
    assert min(during) >= 1, during


# -- fork ----------------------------------------------------------------------------------------


def test_a_forked_child_is_refused_at_once_and_the_parent_goes_on(dsn: str) -> None:
    """In a child forked after the runner opened its pool, a call (on the child's own loop)
    raises ``ConnectionUsedAfterFork`` and the close closes nothing of the parent's."""

    def child(runner: Runner) -> str:
        async def main() -> str:
            try:
                await asyncio.wait_for(runner.call("write", create_thread("c")), 5)
            except ConnectionUsedAfterFork:
                await asyncio.wait_for(runner.aclose(), 5)
                return "refused"
            return "answered"

        return asyncio.run(main())

    async def body(runner: Runner) -> tuple[str, Any, Any]:
        (await runner.call("write", create_thread("t"))).unwrap()
        answer = await asyncio.to_thread(in_child, lambda: child(runner))
        (await runner.call("write", create_thread("u"))).unwrap()
        return answer, await runner.call("read", message_count("t")), await runner.call(
            "read", message_count("c")
        )

    answer, parents, childs = run_on(dsn, body)
    assert answer == "refused"
    assert parents == Success(0)
    assert isinstance(childs, Failure)  # the child wrote nothing
