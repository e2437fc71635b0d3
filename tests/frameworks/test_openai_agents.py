"""``RunstoreSession`` beyond the SDK's own tests: what the deselected ones covered (a failed
add stores nothing, a cancelled write's outcome), sharing a file, paging past one page, the
host's storage, and the errors."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from agents.memory import Session

from forking import in_child  # beside the tests
from runstore import aio
from runstore.adapters import openai_agents
from runstore.adapters.openai_agents import (
    InvalidSessionInput,
    RunstoreSession,
    SessionStoreError,
)
from runstore.exceptions import ConnectionUsedAfterFork
from runstore.services import NotFound, ThreadStatus


def _item(text: str, role: str = "user") -> Any:
    return {"role": role, "content": text}


def test_it_is_an_sdk_session_and_reads_back_what_it_stored(tmp_path: Path) -> None:
    session = RunstoreSession("s", tmp_path / "runstore.db")
    try:
        assert isinstance(session, Session)
        items = [_item("hi"), {"type": "function_call", "name": "f", "arguments": "{}"}]

        async def scenario() -> None:
            await session.add_items(items)
            assert await session.get_items() == items
            assert await session.get_items(1) == items[1:]
            assert await session.pop_item() == items[1]
            await session.clear_session()
            assert await session.get_items() == []
            assert await session.pop_item() is None

        asyncio.run(scenario())
    finally:
        session.close()


def test_a_failed_add_stores_nothing_and_the_session_stays_usable(tmp_path: Path) -> None:
    """An item json.dumps cannot write raises its TypeError before any write (the SDK's
    ``failed_add_items_releases_write_lock`` checks this on its own tables)."""
    path = tmp_path / "runstore.db"
    session = RunstoreSession("s", path)
    try:

        async def scenario() -> None:
            unwritable: list[Any] = [_item("kept?"), {"role": "user", "content": object()}]
            with pytest.raises(TypeError):
                await session.add_items(unwritable)
            assert await session.get_items() == []
            async with aio.build(aio.sqlite(path)) as container:
                got = await container.get(aio.AGENT_STORAGE).threads.get("s")
                assert got.failure() == NotFound("thread", "s"), "not even the thread"
            nan: list[Any] = [_item("x"), {"role": "user", "content": math.nan}]
            with pytest.raises(InvalidSessionInput):
                await session.add_items(nan)
            await session.add_items([_item("after")])
            assert await session.get_items() == [_item("after")]

        asyncio.run(scenario())
    finally:
        session.close()


class _Paused:
    """An async agent storage whose message writes wait for :attr:`release` before they
    run, having set :attr:`started`."""

    def __init__(self, agents: aio.AsyncAgentStorage) -> None:
        self.threads = agents.threads
        self.runs = agents.runs
        self.checkpoints = agents.checkpoints
        self.messages = self
        self._messages = agents.messages
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        real = getattr(self._messages, name)
        if name not in ("append_many", "pop", "clear"):
            return real  # type: ignore[no-any-return]

        async def paused(*args: Any, **kwargs: Any) -> Any:
            self.started.set()
            await self.release.wait()
            return await real(*args, **kwargs)

        return paused


@pytest.mark.parametrize(
    ("write", "left"),
    [
        ("add", [_item("a"), _item("b"), _item("c")]),
        ("pop", [_item("a")]),
        ("clear", []),
    ],
)
def test_a_cancelled_write_runs_to_its_outcome_before_the_cancellation_is_raised(
    write: str, left: list[Any]
) -> None:
    """Cancelling the caller while its write is under way: the write is applied, once, and
    the caller sees ``CancelledError`` only then (the SDK's
    ``post_commit_cancellation_propagates_after_known_outcome``, there with a paused
    commit)."""

    async def scenario() -> None:
        async with aio.build(aio.in_memory()) as container:
            paused = _Paused(container.get(aio.AGENT_STORAGE))
            session = RunstoreSession.from_storage("s", paused)  # type: ignore[arg-type]
            paused.release.set()
            await session.add_items([_item("a"), _item("b")])
            paused.release.clear()
            paused.started.clear()
            call = {
                "add": lambda: session.add_items([_item("c")]),
                "pop": session.pop_item,
                "clear": session.clear_session,
            }[write]
            task = asyncio.ensure_future(call())
            await paused.started.wait()
            task.cancel()
            await asyncio.sleep(0.01)
            assert not task.done(), "the cancellation waits for the write"
            paused.release.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await session.get_items() == left

    asyncio.run(scenario())


def test_sessions_on_one_file_share_one_writer_and_stay_apart(tmp_path: Path) -> None:
    path = tmp_path / "runstore.db"
    first = RunstoreSession("a", path)
    second = RunstoreSession("b", str(path))
    try:
        assert first._database is second._database
        assert len(openai_agents._databases) == 1

        async def scenario() -> None:
            await first.add_items([_item("to a")])
            await second.add_items([_item("to b")])
            assert await first.get_items() == [_item("to a")]
            assert await second.get_items() == [_item("to b")]

        asyncio.run(scenario())
        first.close()
        assert len(openai_agents._databases) == 1, "the second session still uses it"
        assert asyncio.run(second.get_items()) == [_item("to b")]
    finally:
        first.close()
        second.close()
    assert openai_agents._databases == {}


def test_any_thread_and_any_loop_may_use_a_session(tmp_path: Path) -> None:
    session = RunstoreSession("s", tmp_path / "runstore.db")
    try:
        asyncio.run(session.add_items([_item("main")]))
        errors: list[BaseException] = []

        def worker(index: int) -> None:
            try:
                asyncio.run(session.add_items([_item(f"thread {index}")]))
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert len(asyncio.run(session.get_items())) == 5
    finally:
        session.close()


def test_get_items_pages_past_one_page(tmp_path: Path) -> None:
    session = RunstoreSession("s", tmp_path / "runstore.db", session_settings={"limit": 1200})
    try:
        items = [_item(str(i)) for i in range(2500)]

        async def scenario() -> None:
            await session.add_items(items)
            assert await session.get_items() == items[-1200:]
            assert await session.get_items(-1) == items
            assert await session.get_items(1001) == items[-1001:]
            assert await session.get_items(0) == []

        asyncio.run(scenario())
    finally:
        session.close()


def test_a_closed_session_refuses_every_call_with_the_sdks_message() -> None:
    session = RunstoreSession("s")
    session.close()
    session.close()
    for call in (
        lambda: session.get_items(),
        lambda: session.add_items([]),
        lambda: session.pop_item(),
        lambda: session.clear_session(),
    ):
        with pytest.raises(RuntimeError, match="SQLiteSession is closed"):
            asyncio.run(call())


def test_failures_of_the_store_are_raised_typed() -> None:
    async def scenario() -> None:
        async with aio.build(aio.in_memory()) as container:
            agents = container.get(aio.AGENT_STORAGE)
            session = RunstoreSession.from_storage("s", agents, project_id="mine")
            await session.add_items([_item("q")])
            assert (await agents.threads.get("s")).unwrap().project_id == "mine"
            (await agents.threads.update("s", status=ThreadStatus.ARCHIVED)).unwrap()
            with pytest.raises(SessionStoreError) as raised:
                await session.pop_item()
            assert raised.value.error.reason == "thread is archived"  # type: ignore[union-attr]
            with pytest.raises(InvalidSessionInput, match=r"^invalid session_id: .*256"):
                await RunstoreSession.from_storage("x" * 300, agents).add_items([_item("q")])
            session.close()
            assert (await agents.threads.get("s")).unwrap().message_count == 1, "host's"

    asyncio.run(scenario())


@pytest.mark.parametrize("call", ["get_items", "add_items", "pop_item", "clear_session"])
def test_a_session_of_another_projects_thread_is_refused_and_changes_nothing(
    tmp_path: Path, call: str
) -> None:
    """A session id is an agent thread id, one across projects: a session whose thread is
    another project's raises on its first call, naming both projects, as RunstoreSaver does
    for a LangGraph thread of another project."""
    path = tmp_path / "runstore.db"
    a = RunstoreSession("user-42", path, project_id="app-a")
    b = RunstoreSession("user-42", path, project_id="app-b")
    try:

        async def scenario() -> None:
            await a.add_items([_item("secret of app A")])
            args: tuple[Any, ...] = ([_item("of app B")],) if call == "add_items" else ()
            for _ in range(2):  # refused every time, not only the first
                with pytest.raises(SessionStoreError) as raised:
                    await getattr(b, call)(*args)
                assert str(raised.value) == (
                    "conflict on session 'user-42': its agent thread belongs to another "
                    "project (expected 'app-b', actual 'app-a')"
                )
            assert await a.get_items() == [_item("secret of app A")]

        asyncio.run(scenario())
    finally:
        a.close()
        b.close()


def test_a_forked_child_is_refused_its_parents_sessions_and_opens_its_own(
    tmp_path: Path,
) -> None:
    """A session made before ``fork()`` raises ``ConnectionUsedAfterFork`` in the child at
    once (it waited forever: the child has none of the parent's threads); a session the
    child makes on the same file opens a database of the child's own; the parent's session
    goes on."""
    path = tmp_path / "runstore.db"
    parents = RunstoreSession("p", path)

    def child() -> str:
        try:
            asyncio.run(asyncio.wait_for(parents.get_items(), 5))
        except ConnectionUsedAfterFork:
            parents.close()  # closes nothing of the parent's
        else:
            return "the parent's session answered"
        own = RunstoreSession("c", path)
        try:
            asyncio.run(asyncio.wait_for(own.add_items([_item("from the child")]), 30))
            return repr(asyncio.run(asyncio.wait_for(own.get_items(), 30)))
        finally:
            own.close()

    try:
        asyncio.run(parents.add_items([_item("from the parent")]))
        assert in_child(child) == repr([_item("from the child")])
        assert asyncio.run(parents.get_items()) == [_item("from the parent")]
        child_session = RunstoreSession("c", path)
        try:
            assert asyncio.run(child_session.get_items()) == [_item("from the child")]
        finally:
            child_session.close()
    finally:
        parents.close()
