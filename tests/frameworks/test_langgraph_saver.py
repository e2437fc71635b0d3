"""``RunstoreSaver`` beyond the conformance suite: its sync methods from many threads, sync
and async calls on one database, writes that arrive before their checkpoint, the
exceptions it raises, versions, a host's own store, and that runstore imports LangGraph
only in the adapter."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from _watched import run_watched  # beside this file
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.conformance.test_utils import (
    generate_checkpoint,
    generate_config,
    generate_metadata,
)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT
from langgraph.checkpoint.sqlite import SqliteSaver

from runstore import aio
from runstore.adapters.langgraph import (
    LOOP_THREAD,
    CheckpointStoreError,
    InvalidCheckpointInput,
    RunstoreSaver,
)
from runstore.exceptions import ContainerClosed, DatabaseOpenError
from runstore.layers import AGENT_STORAGE, GRAPH_CHECKPOINTS, build, sqlite
from runstore.services.agents import InvalidQuery
from runstore.services.errors import Conflict, InvalidInput


def put(saver: RunstoreSaver, thread_id: str, step: int, parent: str | None = None) -> str:
    """Put a checkpoint of ``step`` with one channel changed; return its id."""
    config = generate_config(thread_id, checkpoint_id=parent)
    checkpoint = generate_checkpoint(
        channel_values={"step": step, "messages": [f"m{step}"]},
        channel_versions={"step": step + 1, "messages": step + 1},
    )
    saver.put(config, checkpoint, generate_metadata(step=step), {"step": step + 1})
    checkpoint_id: str = checkpoint["id"]
    return checkpoint_id


def test_sync_methods_from_many_threads_see_one_database(tmp_path: Path) -> None:
    with RunstoreSaver.from_path(str(tmp_path / "graphs.db")) as saver:

        def work(n: int) -> None:
            parent = None
            for step in range(10):
                parent = put(saver, f"thread-{n}", step, parent)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        found = list(saver.list(None))
        assert len(found) == 80
        assert {t.config["configurable"]["thread_id"] for t in found} == {
            f"thread-{n}" for n in range(8)
        }
        latest = saver.get_tuple(generate_config("thread-3"))
        assert latest is not None
        assert latest.checkpoint["channel_values"]["step"] == 9
        assert latest.parent_config is not None


@pytest.mark.parametrize("path", [":memory:", "file"])
def test_sync_and_async_methods_share_the_database(path: str, tmp_path: Path) -> None:
    target = path if path == ":memory:" else str(tmp_path / "graphs.db")
    with RunstoreSaver.from_path(target) as saver:
        first = put(saver, "t", 0)

        async def then() -> CheckpointTuple | None:
            config = generate_config("t", checkpoint_id=first)
            checkpoint = generate_checkpoint(channel_values={"step": 1})
            await saver.aput(config, checkpoint, generate_metadata(step=1), {"step": 2})
            return await saver.aget_tuple(generate_config("t"))

        latest = asyncio.run(then())
        assert latest is not None
        assert latest.parent_config is not None
        assert latest.parent_config["configurable"]["checkpoint_id"] == first
        assert [t.metadata["step"] for t in saver.list(generate_config("t"))] == [1, 0]


def test_an_async_block_serves_sync_calls_from_another_thread(tmp_path: Path) -> None:
    async def main() -> list[int]:
        async with RunstoreSaver.from_path(str(tmp_path / "graphs.db")) as saver:
            await asyncio.to_thread(put, saver, "t", 0)
            steps = [t.metadata["step"] async for t in saver.alist(generate_config("t"))]
            return [
                *steps,
                *[
                    t.metadata["step"]
                    for t in await asyncio.to_thread(lambda: list(saver.list(generate_config("t"))))
                ],
            ]

    assert asyncio.run(main()) == [0, 0]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_writes_sent_before_their_checkpoint_are_stored_with_it(kind: str) -> None:
    """LangGraph sends a task's writes while its checkpoint's put may still be queued."""
    checkpoint = generate_checkpoint(channel_values={"a": 1}, channel_versions={"a": 1})
    config = generate_config("early", checkpoint_id=checkpoint["id"])
    with RunstoreSaver.from_path(":memory:") as saver:
        if kind == "sync":
            saver.put_writes(config, [("a", 2), (INTERRUPT, "why")], "task-1", "~0")
            assert saver.get_tuple(generate_config("early")) is None
            saver.put(generate_config("early"), checkpoint, generate_metadata(), {"a": 1})
        else:

            async def run() -> None:
                await saver.aput_writes(config, [("a", 2), (INTERRUPT, "why")], "task-1", "~0")
                await saver.aput(
                    generate_config("early"), checkpoint, generate_metadata(), {"a": 1}
                )

            asyncio.run(run())
        stored = saver.get_tuple(config)
    assert stored is not None
    assert stored.pending_writes == [("task-1", INTERRUPT, "why"), ("task-1", "a", 2)]


Saver = Callable[[], AbstractAsyncContextManager[RunstoreSaver]]

TASKS = 4
"""How many tasks of one super-step write at once in the tests below."""


@pytest.fixture(params=["in_memory", "sqlite_file", "postgres"])
def open_saver(request: pytest.FixtureRequest, tmp_path: Path) -> Saver:
    """A fresh saver on each kind of async layer (PostgreSQL: the repository's server)."""
    if request.param == "in_memory":
        return lambda: RunstoreSaver.from_layer(aio.in_memory())
    if request.param == "sqlite_file":
        return lambda: RunstoreSaver.from_path(str(tmp_path / "graphs.db"))
    dsn: str = request.getfixturevalue("postgres_dsn")
    return lambda: RunstoreSaver.from_layer(aio.postgres(dsn))


@pytest.mark.parametrize("order", ["writes first", "gathered with the put"])
def test_concurrent_writes_before_their_checkpoint_are_all_stored(
    open_saver: Saver, order: str
) -> None:
    """A super-step's tasks send their writes at once while the checkpoint's put may still be
    queued (LangGraph's ``pregel/_loop.py``): every write is stored and returned, and the
    loop never freezes (on ``aio.postgres`` every call is a greenlet on the loop's thread)."""
    checkpoint = generate_checkpoint(channel_values={"a": 1}, channel_versions={"a": 1})
    config = generate_config("fan", checkpoint_id=checkpoint["id"])

    async def main() -> CheckpointTuple | None:
        async with open_saver() as saver:
            writes = [
                saver.aput_writes(config, [("a", n), ("b", -n)], f"task-{n}", f"~{n}")
                for n in range(TASKS)
            ]
            put = saver.aput(generate_config("fan"), checkpoint, generate_metadata(), {"a": 1})
            if order == "writes first":
                await asyncio.gather(*writes)
                await put
            else:
                await asyncio.gather(*writes, put)
            return await saver.aget_tuple(config)

    stored = run_watched(main)
    assert stored is not None
    expected = [(f"task-{n}", c, v) for n in range(TASKS) for c, v in (("a", n), ("b", -n))]
    assert stored.pending_writes == expected


def test_pending_writes_come_back_in_writes_sort_key_order() -> None:
    with RunstoreSaver.from_path(":memory:") as saver:
        checkpoint = generate_checkpoint()
        stored = saver.put(generate_config("t"), checkpoint, generate_metadata(), {})
        saver.put_writes(stored, [("c", "b1")], "task-b", "~1")
        saver.put_writes(stored, [("c", "a1"), ("c", "a2")], "task-a", "~1")
        saver.put_writes(stored, [("c", "z1")], "task-z", "~0")
        saver.put_writes(stored, [(ERROR, "boom")], "task-a", "~1")
        found = saver.get_tuple(stored)
    assert found is not None
    assert found.pending_writes == [
        ("task-z", "c", "z1"),
        ("task-a", ERROR, "boom"),
        ("task-a", "c", "a1"),
        ("task-a", "c", "a2"),
        ("task-b", "c", "b1"),
    ]


def test_a_special_channel_write_replaces_and_an_ordinary_one_is_kept() -> None:
    with RunstoreSaver.from_path(":memory:") as saver:
        stored = saver.put(generate_config("t"), generate_checkpoint(), generate_metadata(), {})
        saver.put_writes(stored, [("c", "first"), (ERROR, "first")], "task", "")
        saver.put_writes(stored, [("c", "second")], "task", "")
        saver.put_writes(stored, [(ERROR, "second")], "task", "")
        found = saver.get_tuple(stored)
    assert found is not None
    assert found.pending_writes == [("task", ERROR, "second"), ("task", "c", "first")]


def test_unchanged_channels_keep_their_value_across_checkpoints() -> None:
    with RunstoreSaver.from_path(":memory:") as saver:
        first = generate_checkpoint(
            channel_values={"big": "x" * 1000, "n": 0}, channel_versions={"big": 1, "n": 1}
        )
        stored = saver.put(generate_config("t"), first, generate_metadata(), {"big": 1, "n": 1})
        second = generate_checkpoint(
            channel_values={"big": "x" * 1000, "n": 1}, channel_versions={"big": 1, "n": 2}
        )
        saver.put(stored, second, generate_metadata(step=1), {"n": 2})
        latest = saver.get_tuple(generate_config("t"))
    assert latest is not None
    assert latest.checkpoint["channel_values"] == {"big": "x" * 1000, "n": 1}
    assert latest.checkpoint["channel_versions"] == {"big": 1, "n": 2}


def test_metadata_is_stored_as_json_with_the_config_keys_merged_in() -> None:
    with RunstoreSaver.from_path(":memory:") as saver:
        config = generate_config("t")
        config["configurable"]["user"] = "ann\x00"
        metadata: Any = generate_metadata(counters_since_delta_snapshot={"c": (1, 2)}, note="é")
        stored = saver.put(config, generate_checkpoint(), metadata, {})
        found = saver.get_tuple(stored)
    assert found is not None
    assert found.metadata == {
        "source": "loop",
        "step": 0,
        "parents": {},
        "counters_since_delta_snapshot": {"c": [1, 2]},
        "note": "é",
        "user": "ann",
    }


def test_bad_input_raises_a_value_error_and_writes_nothing() -> None:
    with RunstoreSaver.from_path(":memory:") as saver:
        with pytest.raises(InvalidCheckpointInput) as raised:
            put(saver, "x" * 300, 0)
        assert isinstance(raised.value, ValueError)
        assert isinstance(raised.value.error, InvalidInput)
        with pytest.raises(InvalidCheckpointInput) as limited:
            list(saver.list(None, limit=-1))
        assert isinstance(limited.value.error, InvalidQuery)
        with pytest.raises(ValueError, match="strategy"):
            saver.prune(["t"], strategy="every-other")
        assert list(saver.list(None)) == []


def test_a_thread_of_another_project_is_a_store_error(tmp_path: Path) -> None:
    path = str(tmp_path / "graphs.db")
    with build(sqlite(path)) as container:
        container.get(AGENT_STORAGE).threads.create("shared", project_id="chat").unwrap()
    with RunstoreSaver.from_path(path) as saver, pytest.raises(CheckpointStoreError) as raised:
        put(saver, "shared", 0)
    assert not isinstance(raised.value, ValueError)
    assert isinstance(raised.value.error, Conflict)


def test_threads_are_agent_threads_and_delete_thread_keeps_the_thread(tmp_path: Path) -> None:
    path = str(tmp_path / "graphs.db")
    with RunstoreSaver.from_path(path, project_id="support-bot") as saver:
        put(saver, "conversation-1", 0)
        saver.delete_thread("conversation-1")
        assert saver.get_tuple(generate_config("conversation-1")) is None
    with build(sqlite(path)) as container:
        thread = container.get(AGENT_STORAGE).threads.get("conversation-1").unwrap()
    assert thread.project_id == "support-bot"


def test_a_sync_container_s_store_is_refused_naming_what_to_pass(tmp_path: Path) -> None:
    """A sync container's store belongs to the thread that built it, and a graph's ``invoke``
    puts from LangGraph's worker threads: such a saver failed every ``invoke``."""
    with build(sqlite(str(tmp_path / "graphs.db"))) as container:
        store = container.get(GRAPH_CHECKPOINTS)
        with pytest.raises(TypeError) as raised:
            RunstoreSaver(store)  # type: ignore[arg-type]
    message = str(raised.value)
    assert "takes a runstore.aio.AsyncContainer" in message
    assert "worker threads" in message
    assert "RunstoreSaver.from_path(path)" in message
    assert "RunstoreSaver.from_layer(layer)" in message


def test_an_async_container_s_store_is_refused_too() -> None:
    async def main() -> None:
        async with aio.build(aio.in_memory()) as container:
            RunstoreSaver(container.get(aio.GRAPH_CHECKPOINTS))  # type: ignore[arg-type]

    with pytest.raises(TypeError, match=r"takes a runstore\.aio\.AsyncContainer, not"):
        asyncio.run(main())


def test_a_saver_takes_only_a_container() -> None:
    with pytest.raises(TypeError, match=r"takes a runstore\.aio\.AsyncContainer, not object"):
        RunstoreSaver(object())  # type: ignore[arg-type]


def test_a_filter_json_cannot_hold_is_bad_input() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with RunstoreSaver.from_path(":memory:") as saver:
        put(saver, "t", 0)
        for value in (object(), {1, 2}, cycle):
            with pytest.raises(InvalidCheckpointInput, match="invalid filter: must be JSON"):
                list(saver.list(None, filter={"step": value}))

            async def listed(value: object = value) -> list[CheckpointTuple]:
                return [t async for t in saver.alist(generate_config("t"), filter={"step": value})]

            with pytest.raises(InvalidCheckpointInput) as raised:
                asyncio.run(listed())
            assert isinstance(raised.value.error, InvalidInput)
            assert raised.value.error.field == "filter"
        assert [t.metadata["step"] for t in saver.list(None, filter={"step": 0})] == [0]


def test_versions_are_made_as_langgraphs_savers_make_them() -> None:
    with RunstoreSaver.from_path(":memory:") as saver:
        mine = [saver.get_next_version(None, None)]
        for _ in range(3):
            mine.append(saver.get_next_version(mine[-1], None))
    reference = SqliteSaver(sqlite3.connect(":memory:")).get_next_version(None, None)
    for version in [*mine, reference]:  # f"{n:032}.{random():016}"
        number, fraction = version.split(".", 1)
        assert len(number) == 32, version
        assert 0 <= float(fraction) < 1, version
    assert [int(v.split(".")[0]) for v in mine] == [1, 2, 3, 4]
    assert mine == sorted(mine)
    assert RunstoreSaver.get_next_version(saver, 7, None).startswith(f"{8:032}.")  # type: ignore[arg-type]
    assert InMemorySaver().get_next_version(None, None).startswith(f"{1:032}.")


def test_runstore_imports_langgraph_only_in_the_adapter() -> None:
    probe = (
        "import sys, runstore, runstore.layers, runstore.services, runstore.adapters\n"
        "from runstore import aio\n"
        "aio.sqlite(':memory:'); aio.GRAPH_CHECKPOINTS\n"
        "assert not any(m.split('.')[0] in {'langgraph', 'langchain_core'} for m in sys.modules)\n"
        "import runstore.adapters.langgraph\n"
        "assert 'langgraph.checkpoint.base' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)


def test_a_container_without_the_graph_store_is_refused() -> None:
    async def main() -> None:
        async with aio.build(aio.in_memory()) as container:
            container._provided = frozenset()  # a host layer that provides no graph store
            RunstoreSaver(container)

    with pytest.raises(KeyError, match="no graph checkpoint store"):
        asyncio.run(main())


def saver_threads() -> list[threading.Thread]:
    """The live threads a saver's sync methods run their calls on."""
    return [t for t in threading.enumerate() if t.name == LOOP_THREAD]


def test_a_database_that_cannot_be_opened_leaves_no_thread_behind(tmp_path: Path) -> None:
    (tmp_path / "other.db").write_bytes(b"not a database at all, just some bytes" * 200)
    with pytest.raises(DatabaseOpenError), RunstoreSaver.from_path(str(tmp_path / "other.db")):
        pass
    assert not saver_threads()


def test_a_saver_is_closed_with_its_block() -> None:
    with RunstoreSaver.from_path(":memory:") as saver:
        put(saver, "t", 0)
    with pytest.raises(ContainerClosed):
        saver.get_tuple(generate_config("t"))
    with pytest.raises(ContainerClosed):
        asyncio.run(saver.aget_tuple(generate_config("t")))
    assert not saver_threads()
