"""A process forked after ``runstore.aio`` opened a container: every call there answers
``ConnectionUsedAfterFork`` at once (a child inherits the runner's executors and loops but
not their threads, so a call would otherwise wait forever), closing there closes nothing,
and the parent goes on as before."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from forking import in_child  # beside the tests
from runstore import aio
from runstore.adapters._loop import LoopThread
from runstore.exceptions import ConnectionUsedAfterFork


def _refused(runner: aio.Runner) -> str:
    """In the child: a call, then the runner's close, each within 5 s."""

    async def main() -> str:
        try:
            await asyncio.wait_for(runner.call("read", lambda c: "ran"), 5)
        except ConnectionUsedAfterFork:
            await asyncio.wait_for(runner.aclose(), 5)
            return "refused"
        return "answered"

    return asyncio.run(main())


@pytest.mark.parametrize("layer", ["sqlite", "in_memory"])
def test_a_forked_child_is_refused_at_once_and_the_parent_goes_on(
    tmp_path: Path, layer: str
) -> None:
    async def main() -> None:
        opened = aio.sqlite(tmp_path / "a.db") if layer == "sqlite" else aio.in_memory()
        async with aio.build(opened) as c:
            threads = c.get(aio.AGENT_STORAGE).threads
            (await threads.create("t", project_id="p")).unwrap()
            child = await asyncio.to_thread(in_child, lambda: _refused(c.runner))
            assert child == "refused"
            assert (await threads.get("t")).unwrap().id == "t"
            (await threads.create("u", project_id="p")).unwrap()

    asyncio.run(main())


def test_a_loop_thread_refuses_a_forked_child_and_serves_the_parent() -> None:
    loop = LoopThread("runstore-test-fork")

    async def answer() -> int:
        return 1

    try:
        assert loop.run(answer()) == 1

        def child() -> str:
            try:
                loop.run(answer())
            except ConnectionUsedAfterFork:
                loop.stop()
                return "refused"
            return "answered"

        assert in_child(child) == "refused"
        assert loop.run(answer()) == 1
    finally:
        loop.stop()
