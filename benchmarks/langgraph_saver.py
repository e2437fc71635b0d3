"""Benchmark: LangGraph checkpoints, put then get-latest, RunstoreSaver vs LangGraph's SQLite
savers, at equal durability, in one run.

Run (in an environment with the ``langgraph`` extra and ``langgraph-checkpoint-sqlite``, such
as the frameworks profile's ``.venv-frameworks``):
``.venv-frameworks/bin/python benchmarks/langgraph_saver.py [--steps 600] [--chunk 50]``.

**The workload** is a graph's loop: each step puts a checkpoint whose ``messages`` channel
(a list of 20 short strings, about 1 KB) and ``step`` channel changed and whose ``context``
channel (4 KB) did not, with ``new_versions`` naming only the changed two (as LangGraph's
loop calls ``put``), parented on the previous one, then reads the thread's latest checkpoint
(``get_tuple`` without an id) and checks it is the one just put.

**The pairs**: the async methods, ``RunstoreSaver`` (``aput``/``aget_tuple`` through
``runstore.aio``'s SQLite writer and reader threads) against ``AsyncSqliteSaver`` (aiosqlite);
the sync methods, ``RunstoreSaver`` (``put``/``get_tuple``) against ``SqliteSaver``. Each
saver has a fresh database file.

**Equal durability.** LangGraph's savers open WAL and set no ``synchronous``, so they keep
SQLite's compiled-in default, read here from a connection opened the same way (``FULL``
with the usual builds: one fsync per commit); runstore is opened with that level
(``--synchronous`` sets another on every saver). The ``durability:`` line prints the level
each saver ran with, read back from its own connection.

**Equal load.** The savers take turns in slices of ``--chunk`` steps, the order rotating
each round, so that all meet the same machine load; a saver's time is the sum of its
slices. The ratios (runstore / reference, per pair) are printed last.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import aiosqlite
from agent_messages import LEVELS, sdk_synchronous  # LangGraph's savers open SQLite as the SDK
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    empty_checkpoint,
)
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from runstore import aio
from runstore.adapters.langgraph import RunstoreSaver
from runstore.layers import ConnectionSettings, SqliteDatabase

DESCRIPTION = (
    "LangGraph checkpoints, put then get-latest: RunstoreSaver vs LangGraph's SQLite savers"
)
CONTEXT = "c" * 4096


class Contestant:
    """A saver running steps of the workload on one thread of its own."""

    def __init__(self, name: str, saver: BaseCheckpointSaver[Any], level: str) -> None:
        self.name = name
        self.saver = saver
        self.level = level
        self.config: RunnableConfig = {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}
        self.versions: dict[str, Any] = {}
        self.seconds = 0.0
        self.steps = 0

    def _next(self) -> tuple[Checkpoint, CheckpointMetadata, ChannelVersions]:
        """The next step's checkpoint, metadata and new versions."""
        saver, step = self.saver, self.steps
        changed = ["messages", "step"] if step else ["messages", "step", "context"]
        new: ChannelVersions = {
            ch: saver.get_next_version(self.versions.get(ch), None) for ch in changed
        }
        self.versions.update(new)
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {
            "messages": [f"message {step}.{i}: the quick brown fox" for i in range(20)],
            "step": step,
            "context": CONTEXT,
        }
        checkpoint["channel_versions"] = dict(self.versions)
        checkpoint["versions_seen"] = {"agent": dict(self.versions)}
        metadata: CheckpointMetadata = {"source": "loop", "step": step, "parents": {}}
        return checkpoint, metadata, new

    async def arun(self, steps: int) -> None:
        latest: RunnableConfig = {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}
        started = time.perf_counter()
        for _ in range(steps):
            checkpoint, metadata, new = self._next()
            self.config = await self.saver.aput(self.config, checkpoint, metadata, new)
            found = await self.saver.aget_tuple(latest)
            assert found is not None
            assert found.checkpoint["id"] == checkpoint["id"]
            assert found.checkpoint["channel_values"]["step"] == self.steps
            self.steps += 1
        self.seconds += time.perf_counter() - started

    def run(self, steps: int) -> None:
        latest: RunnableConfig = {"configurable": {"thread_id": "bench", "checkpoint_ns": ""}}
        started = time.perf_counter()
        for _ in range(steps):
            checkpoint, metadata, new = self._next()
            self.config = self.saver.put(self.config, checkpoint, metadata, new)
            found = self.saver.get_tuple(latest)
            assert found is not None
            assert found.checkpoint["id"] == checkpoint["id"]
            assert found.checkpoint["channel_values"]["step"] == self.steps
            self.steps += 1
        self.seconds += time.perf_counter() - started


@asynccontextmanager
async def runstore_saver(path: Path, level: str) -> AsyncIterator[Contestant]:
    """RunstoreSaver on a host's ``aio.sqlite`` container opened with ``synchronous=level``."""
    layer = aio.sqlite(str(path), ConnectionSettings(synchronous=level))
    async with aio.build(layer) as container:
        read: int = await container.runner.call(
            "write", lambda c: c.get(SqliteDatabase).scalar("PRAGMA synchronous")
        )
        saver = RunstoreSaver(container)
        try:
            yield Contestant("RunstoreSaver", saver, LEVELS[read])
        finally:
            saver.close()


@asynccontextmanager
async def async_sqlite_saver(path: Path, level: str | None) -> AsyncIterator[Contestant]:
    async with aiosqlite.connect(str(path)) as connection:
        saver = AsyncSqliteSaver(connection)
        await saver.setup()
        if level is not None:
            await connection.execute(f"PRAGMA synchronous={level}")
        async with connection.execute("PRAGMA synchronous") as cursor:
            row = await cursor.fetchone()
        assert row is not None
        yield Contestant("AsyncSqliteSaver", saver, LEVELS[row[0]])


def sqlite_saver(path: Path, level: str | None) -> Contestant:
    connection = sqlite3.connect(str(path), check_same_thread=False)
    saver = SqliteSaver(connection)
    saver.setup()
    if level is not None:
        connection.execute(f"PRAGMA synchronous={level}")
    read: int = connection.execute("PRAGMA synchronous").fetchone()[0]
    return Contestant("SqliteSaver", saver, LEVELS[read])


async def async_pair(
    folder: Path, level: str, forced: str | None, steps: int, chunk: int
) -> tuple[Contestant, Contestant]:
    async with AsyncExitStack() as stack:
        mine = await stack.enter_async_context(runstore_saver(folder / "rs-async.db", level))
        theirs = await stack.enter_async_context(
            async_sqlite_saver(folder / "ref-async.db", forced)
        )
        contestants = [mine, theirs]
        for round_ in range(steps // chunk):
            for contestant in contestants[round_ % 2 :] + contestants[: round_ % 2]:
                await contestant.arun(chunk)
        return mine, theirs
    raise AssertionError("unreachable")  # pragma: no cover


async def sync_pair(
    folder: Path, level: str, forced: str | None, steps: int, chunk: int
) -> tuple[Contestant, Contestant]:
    async with runstore_saver(folder / "rs-sync.db", level) as mine:
        theirs = sqlite_saver(folder / "ref-sync.db", forced)
        contestants = [mine, theirs]
        for round_ in range(steps // chunk):
            for contestant in contestants[round_ % 2 :] + contestants[: round_ % 2]:
                await asyncio.to_thread(contestant.run, chunk)  # sync calls, off the loop
        return mine, theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=DESCRIPTION)
    parser.add_argument("--steps", type=int, default=600, help="steps per saver (default 600)")
    parser.add_argument("--chunk", type=int, default=50, help="steps per slice (default 50)")
    parser.add_argument("--synchronous", choices=LEVELS, help="set this level on every saver")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        level = args.synchronous or sdk_synchronous(folder)
        pairs = [
            (
                "async",
                asyncio.run(async_pair(folder, level, args.synchronous, args.steps, args.chunk)),
            ),
            (
                "sync",
                asyncio.run(sync_pair(folder, level, args.synchronous, args.steps, args.chunk)),
            ),
        ]
    print(f"workload: {args.steps} steps of put + get-latest per saver, slices of {args.chunk}")
    print(
        "durability: "
        + ", ".join(
            f"{c.name} ({kind}) synchronous={c.level}" for kind, pair in pairs for c in pair
        )
    )
    for kind, (mine, theirs) in pairs:
        for contestant in (mine, theirs):
            per_step = contestant.seconds / contestant.steps * 1e3
            print(f"  {kind:5} {contestant.name:17} {per_step:6.3f} ms/step")
    for kind, (mine, theirs) in pairs:
        print(f"ratio {kind}: {mine.name} / {theirs.name} = {mine.seconds / theirs.seconds:.2f}")


if __name__ == "__main__":
    main()
