"""The runners of ``aio.sqlite`` and ``aio.in_memory``: where calls run, from which loops and
threads they may be awaited, what cancelling one does, and how a container closes.

Plain sync tests that each call ``asyncio.run`` (a fresh loop apiece).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
from returns.result import Failure, Success

from runstore import aio
from runstore.aio._threads import ThreadRunner, _Worker
from runstore.exceptions import ContainerClosed, DatabaseOpenError
from runstore.layers import AGENT_STORAGE, Container, Layer, Tag, build, sqlite
from runstore.services import NotFound
from runstore.services.errors import StorageFailureKind
from runstore.services.sessions import NewEntry, NewSession

T = TypeVar("T")


def run(main: Callable[[], Awaitable[T]]) -> T:
    async def wrapped() -> T:
        return await main()

    return asyncio.run(wrapped())


def _threads(container: aio.AsyncContainer) -> ThreadRunner:
    runner = container.runner
    assert isinstance(runner, ThreadRunner)
    return runner


def test_writes_run_on_the_writer_and_reads_on_the_readers(tmp_path: Path) -> None:
    async def main() -> tuple[set[str], set[str], str, tuple[str, ...]]:
        async with aio.build(aio.sqlite(tmp_path / "a.db", readers=2)) as c:
            runner = _threads(c)
            here = lambda _c: threading.current_thread().name  # noqa: E731
            writes = {await runner.call("write", here) for _ in range(5)}
            reads = set(await asyncio.gather(*(runner.call("read", here) for _ in range(20))))
            return writes, reads, threading.current_thread().name, tuple(
                t.name for t in runner.threads
            )

    writes, reads, loop_thread, threads = run(main)
    assert writes == {threads[0]}
    assert "writer" in threads[0]
    assert reads <= set(threads[1:])
    assert len(threads) == 3
    assert loop_thread not in writes | reads


@pytest.mark.parametrize("layer", [lambda: aio.sqlite(":memory:"), aio.in_memory])
def test_a_layer_without_readers_runs_everything_on_its_one_thread(
    layer: Callable[[], aio.AsyncLayer],
) -> None:
    async def main() -> set[str]:
        async with aio.build(layer()) as c:
            here = lambda _c: threading.current_thread().name  # noqa: E731
            names = {await c.runner.call(kind, here) for kind in ("read", "write") * 3}
            assert len(_threads(c).threads) == 1
            return names

    (name,) = run(main)
    assert name != threading.current_thread().name


def test_a_read_sees_the_write_awaited_before_it(tmp_path: Path) -> None:
    async def main() -> None:
        async with aio.build(aio.sqlite(tmp_path / "a.db")) as c:
            agents = c.get(aio.AGENT_STORAGE)
            for i in range(20):
                (await agents.threads.create(f"t{i}", project_id="p")).unwrap()
                assert (await agents.threads.get(f"t{i}")).unwrap().id == f"t{i}"

    run(main)


def test_one_container_serves_other_loops_and_threads(tmp_path: Path) -> None:
    """Built on one loop, awaited from loops of other threads at the same time."""

    async def main() -> list[int]:
        async with aio.build(aio.sqlite(tmp_path / "a.db")) as c:
            messages = c.get(aio.AGENT_STORAGE).messages
            await c.get(aio.AGENT_STORAGE).threads.create("t", project_id="p")

            def elsewhere(i: int) -> int:
                async def append() -> int:
                    got = await messages.append("t", role="user", content=i)
                    return got.unwrap().seq

                return asyncio.run(append())

            async def here() -> int:
                return (await messages.append("t", role="user", content="here")).unwrap().seq

            seqs = await asyncio.gather(
                *(asyncio.to_thread(elsewhere, i) for i in range(4)), here()
            )
            return sorted(seqs)

    assert run(main) == [1, 2, 3, 4, 5]


def test_what_the_function_raises_is_raised_to_the_caller() -> None:
    def boom(_c: Container) -> None:
        raise LookupError("from the writer")

    async def main() -> None:
        async with aio.build(aio.in_memory()) as c:
            await c.runner.call("write", boom)

    with pytest.raises(LookupError, match="from the writer"):
        run(main)


# -- cancellation ------------------------------------------------------------------------------


def _hold(started: threading.Event, release: threading.Event) -> Callable[[Container], None]:
    def hold(_c: Container) -> None:
        started.set()
        assert release.wait(10)

    return hold


def test_a_cancelled_call_that_has_not_started_never_runs(tmp_path: Path) -> None:
    async def main() -> object:
        async with aio.build(aio.sqlite(tmp_path / "a.db")) as c:
            threads = c.get(aio.AGENT_STORAGE).threads
            started, release = threading.Event(), threading.Event()
            holding = asyncio.create_task(c.runner.call("write", _hold(started, release)))
            await asyncio.to_thread(started.wait, 10)
            queued = asyncio.create_task(threads.create("never", project_id="p"))
            await asyncio.sleep(0.01)  # handed to the writer, behind the holding call
            queued.cancel()
            await asyncio.sleep(0.01)  # the loop passes the cancel on to the queued job
            release.set()
            await holding
            with pytest.raises(asyncio.CancelledError):
                await queued
            return await threads.get("never")

    assert run(main) == Failure(NotFound("thread", "never"))


def test_a_cancelled_write_that_has_started_runs_to_its_outcome(tmp_path: Path) -> None:
    async def main() -> object:
        async with aio.build(aio.sqlite(tmp_path / "a.db")) as c:
            started, release = threading.Event(), threading.Event()
            hold = _hold(started, release)

            def write(container: Container) -> object:
                hold(container)
                return container.get(AGENT_STORAGE).threads.create("kept", project_id="p")

            task = asyncio.create_task(c.runner.call("write", write))
            await asyncio.to_thread(started.wait, 10)
            task.cancel()
            await asyncio.sleep(0.01)
            assert not task.done(), "the cancelled caller waits for the write's outcome"
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            # Read on a reader: the write was committed before the caller saw CancelledError.
            return (await c.get(aio.AGENT_STORAGE).threads.get("kept")).map(lambda t: t.id)

    assert run(main) == Success("kept")


# -- opening and closing -----------------------------------------------------------------------


def _recorder(log: list[tuple[str, str]]) -> Layer:
    """A scoped resource in each sync container, noting where it opens and closes."""

    def resource(_c: Container) -> Iterator[None]:
        log.append(("open", threading.current_thread().name))
        yield
        log.append(("close", threading.current_thread().name))

    return Layer.service(Tag[None]("tests.aio.recorder"), resource)


def test_closing_lets_handed_over_calls_finish_then_closes_readers_before_the_writer(
    tmp_path: Path,
) -> None:
    log: list[tuple[str, str]] = []
    path = tmp_path / "a.db"

    threads: list[threading.Thread] = []

    async def main() -> list[object]:
        layer = aio.sqlite(path, readers=2).merge(_recorder(log))
        async with aio.build(layer) as c:
            threads.extend(_threads(c).threads)
            agents = c.get(aio.AGENT_STORAGE)
            await agents.threads.create("t", project_id="p")
            writes = [
                asyncio.create_task(agents.messages.append("t", role="user", content=i))
                for i in range(30)
            ]
            await asyncio.sleep(0)  # each task has handed its call to the writer
        return list(await asyncio.gather(*writes))

    results = run(main)
    assert all(isinstance(r, Success) for r in results)
    with build(sqlite(path)) as sync:
        assert sync.get(AGENT_STORAGE).threads.get("t").unwrap().message_count == 30
    opened = [name for event, name in log if event == "open"]
    closed = [name for event, name in log if event == "close"]
    assert "writer" in opened[0]
    assert len(opened) == 3
    assert sorted(closed) == sorted(opened)
    assert closed[-1] == opened[0], "the writer closes last"
    for thread in threads:  # each ends once its last job (its close) is done
        thread.join(timeout=10)
    assert [t.name for t in threads if t.is_alive()] == [], "threads left running"


def test_closing_never_blocks_the_loop() -> None:
    """The writer is busy when the block exits, until a task on the loop releases it once
    the exit has begun: the close can only end early if the loop keeps running while the
    close waits (a close that blocked the loop would leave the writer waiting its full 30 s,
    and the call would answer False). The container closes on the writer's thread."""
    log: list[tuple[str, str]] = []
    release = threading.Event()

    async def main() -> tuple[bool, str]:
        async with aio.build(aio.in_memory().merge(_recorder(log))) as c:
            busy = asyncio.create_task(c.runner.call("write", lambda _c: release.wait(30)))
            await asyncio.sleep(0)  # handed to the writer
            releasing = asyncio.create_task(_release_once_closing(c, release))
        await releasing
        return await busy, threading.current_thread().name

    released, loop_thread = run(main)
    assert released, "the loop stood still while the container closed"
    closed_on = [name for event, name in log if event == "close"]
    assert len(closed_on) == 1
    assert closed_on[0] != loop_thread
    assert "writer" in closed_on[0]


async def _release_once_closing(c: aio.AsyncContainer, release: threading.Event) -> None:
    """Set ``release`` once ``c``'s block has exited, after the loop ran other tasks."""
    while True:
        try:
            c.get(aio.DATABASE_HEALTH)
        except ContainerClosed:
            break
        await asyncio.sleep(0.001)
    for _ in range(10):  # the exit goes on to await the close meanwhile
        await asyncio.sleep(0)
    release.set()


def test_after_close_every_call_is_refused_the_same_way_and_runs_nothing(
    tmp_path: Path,
) -> None:
    """``ContainerClosed`` from every call, whether its service was used before the close or
    not, except the session services' ``StorageFailure(closed)`` (their contract's answer);
    no service code runs, on the loop's thread or any other."""
    ran: list[str] = []

    async def main() -> None:
        async with aio.build(aio.sqlite(tmp_path / "a.db", readers=1)) as c:
            repo = c.get(aio.SESSION_REPOSITORY)
            threads = c.get(aio.AGENT_STORAGE).threads
            health = c.get(aio.DATABASE_HEALTH)
            (await repo.list()).unwrap()
            (await repo.create(NewSession(id="s"))).unwrap()
            session = (await repo.open("s")).unwrap()
            await threads.get("t")
            runner = c.runner
        with pytest.raises(ContainerClosed):
            c.get(aio.DATABASE_HEALTH)
        for refused_call in (health.readiness(), threads.get("t"), threads.list("p")):
            with pytest.raises(ContainerClosed):
                await refused_call
        for access in ("read", "write"):
            with pytest.raises(ContainerClosed):
                await runner.call(access, lambda _c: ran.append("ran"))
        answers = [
            await repo.list(),
            await repo.open("s"),
            await repo.atomic("t", lambda _r: Success(1)),
            await session.append(NewEntry.message("a", None, {"role": "user"}, timestamp=0)),
            await session.info(),
        ]
        for answer in answers:
            assert isinstance(answer, Failure), answer
            assert answer.failure().kind is StorageFailureKind.CLOSED

    run(main)
    assert ran == []


@pytest.fixture
def lingering(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each worker thread lingers after its close job until its executor is joined (as a
    thread does for a moment after its last job): a close that did not join its threads would
    return with them alive, every time."""
    gates: dict[ThreadPoolExecutor, threading.Event] = {}

    def close(self: _Worker, after: tuple[Future[None], ...] = ()) -> Future[None]:
        done = self.executor.submit(self._close, after)
        gates[self.executor] = gate = threading.Event()
        self.executor.submit(gate.wait)
        self.executor.shutdown(wait=False)
        return done

    shutdown = ThreadPoolExecutor.shutdown

    def joining(self: ThreadPoolExecutor, wait: bool = True, **kwargs: bool) -> None:
        if wait and self in gates:
            gates[self].set()
        shutdown(self, wait, **kwargs)

    monkeypatch.setattr(_Worker, "close", close)
    monkeypatch.setattr(ThreadPoolExecutor, "shutdown", joining)
    try:
        yield
    finally:
        for gate in gates.values():
            gate.set()


def _workers_alive(before: set[threading.Thread]) -> list[str]:
    return sorted(t.name for t in set(threading.enumerate()) - before
                  if t.name.startswith("runstore-") and not t.name.endswith("-joiner"))


@pytest.mark.usefixtures("lingering")
def test_a_database_that_cannot_open_fails_the_build_only_once_its_threads_have_ended(
    tmp_path: Path,
) -> None:
    foreign = tmp_path / "foreign.db"
    foreign.write_bytes(b"not a database at all, but long enough to be read as one" * 100)
    before = set(threading.enumerate())

    async def main() -> None:
        async with aio.build(aio.sqlite(foreign)):
            pass  # pragma: no cover

    with pytest.raises(DatabaseOpenError):
        run(main)
    assert _workers_alive(before) == []


@pytest.mark.usefixtures("lingering")
def test_closing_returns_only_once_every_thread_has_ended(tmp_path: Path) -> None:
    before = set(threading.enumerate())

    async def main() -> None:
        async with aio.build(aio.sqlite(tmp_path / "r.db", readers=2)) as c:
            assert len(_threads(c).threads) == 3
            assert len(_workers_alive(before)) == 3

    run(main)
    assert _workers_alive(before) == []


def test_a_missing_service_and_a_bad_reader_count_are_refused() -> None:
    async def main() -> None:
        async with aio.build(aio.in_memory()) as c:
            assert aio.DATA_STORE in c
            assert Tag[Any]("no.such.Service") not in c
            with pytest.raises(KeyError, match=r"no\.such\.Service"):
                c.get(Tag[Any]("no.such.Service"))

    run(main)
    with pytest.raises(ValueError, match="readers"):
        aio.sqlite(":memory:", readers=-1)
    with pytest.raises(ValueError, match="readers"):
        aio.sqlite(":memory:", readers=True)


def test_the_facade_has_exactly_the_protocol_methods_each_a_coroutine_function() -> None:
    async def main() -> None:
        async with aio.build(aio.in_memory()) as c:
            agents = c.get(aio.AGENT_STORAGE)
            assert asyncio.iscoroutinefunction(agents.messages.append)
            assert agents.messages is agents.messages
            with pytest.raises(AttributeError, match="no_such"):
                agents.messages.no_such  # type: ignore[attr-defined]  # noqa: B018
            assert "append" in dir(agents.messages)

    run(main)


def test_a_sync_layer_and_an_unknown_access_are_refused_naming_what_is_wanted() -> None:
    async def main() -> None:
        async with aio.build(sqlite(":memory:")):  # type: ignore[arg-type]
            pass  # pragma: no cover

    with pytest.raises(TypeError, match=r"async layer \(runstore\.aio\.sqlite"):
        run(main)
    for make in (aio.sqlite, sqlite):
        with pytest.raises(ValueError, match=r"'create', 'write', 'read'.*'bogus'"):
            make(":memory:", access="bogus")  # type: ignore[arg-type]


def test_a_facade_method_has_its_protocol_methods_signature_and_doc() -> None:
    import inspect

    from runstore.aio._services import AsyncMessageStore, AsyncSessionStorage

    async def main() -> None:
        async with aio.build(aio.in_memory()) as c:
            method = c.get(aio.AGENT_STORAGE).messages.append
            template = AsyncMessageStore.append
            wanted = inspect.signature(template)
            assert inspect.signature(method) == wanted.replace(
                parameters=tuple(wanted.parameters.values())[1:]
            )
            assert "thread_id" in inspect.signature(method).parameters
            assert method.__doc__ == template.__doc__
            repo = c.get(aio.SESSION_REPOSITORY)
            storage = (await repo.create(NewSession(cwd="/w"))).unwrap()
            opened = (await repo.open(storage.id)).unwrap()
            assert inspect.signature(opened.append).parameters.keys() == (
                inspect.signature(AsyncSessionStorage.append).parameters.keys() - {"self"}
            )

    run(main)
