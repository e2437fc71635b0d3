"""LangGraph's own conformance suite on ``RunstoreSaver``, every capability, every backend.

``langgraph-checkpoint-conformance`` 0.0.2 has 58 base tests (put, put_writes, get_tuple,
list, delete_thread) and 23 extended ones (delete_for_runs, copy_thread, prune). Its
``report.passed_all()`` looks only at the capabilities it *detected*, so a saver without the
extended methods passes it too; these tests therefore assert, for each of the 8
capabilities, that it was detected and passed with no failure, and the totals 58 and 23.

The suite calls only the async methods. The sync ones run it too, through
:class:`SyncMethods`, a saver whose async methods are the wrapped saver's sync methods (so
every spec function drives ``put``, ``get_tuple``, ``list``... of ``RunstoreSaver``).
The factory makes a fresh database for each capability, as the suite expects.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import (
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
    Capability,
)
from langgraph.checkpoint.conformance.report import CapabilityReport, ProgressCallbacks

from runstore import aio
from runstore.adapters.langgraph import RunstoreSaver, SaverScope

BASE_TESTS = 58
EXTENDED_TESTS = 23


class SyncMethods(BaseCheckpointSaver[str]):
    """A saver whose async methods call ``saver``'s sync ones (blocking the loop, which the
    suite does not mind), so the conformance suite tests the sync methods."""

    def __init__(self, saver: RunstoreSaver) -> None:
        super().__init__(serde=saver.serde)
        self.saver = saver

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.saver.get_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for found in self.saver.list(config, filter=filter, before=before, limit=limit):
            yield found

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self.saver.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.saver.put_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        self.saver.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.saver.delete_for_runs(run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.saver.copy_thread(source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.saver.prune(thread_ids, strategy=strategy)


def conformance(name: str, scope: Callable[[], SaverScope], *, sync: bool) -> CapabilityReport:
    """Run the whole suite on savers that ``scope`` opens, one per capability, through the
    async methods (or the sync ones when ``sync``); return the report."""
    failures: list[str] = []

    @checkpointer_test(name=name)
    async def saver() -> AsyncIterator[BaseCheckpointSaver[str]]:
        async with scope() as opened:
            yield SyncMethods(opened) if sync else opened

    def failed(capability: str, test: str, passed: bool, error: str | None) -> None:
        if not passed:
            failures.append(f"{capability}.{test}: {error}")

    report = asyncio.run(validate(saver, progress=ProgressCallbacks(on_test_result=failed)))
    assert not failures, "\n".join(failures)
    return report


def assert_passed_everything(report: CapabilityReport) -> None:
    """Every capability detected and passed, 58 base and 23 extended tests passed."""
    for capability in Capability:
        result = report.results[capability.value]
        assert result.detected is True, capability
        assert result.passed is True, (capability, result.failures)
        assert result.tests_failed == 0, (capability, result.failures)
    base = sum(report.results[c.value].tests_passed for c in BASE_CAPABILITIES)
    extended = sum(report.results[c.value].tests_passed for c in EXTENDED_CAPABILITIES)
    assert (base, extended) == (BASE_TESTS, EXTENDED_TESTS)


METHODS = pytest.mark.parametrize("sync", [False, True], ids=["async-methods", "sync-methods"])


@METHODS
def test_in_memory_passes_the_whole_suite(sync: bool) -> None:
    report = conformance(
        "runstore-memory", lambda: RunstoreSaver.from_layer(aio.in_memory()), sync=sync
    )
    assert_passed_everything(report)


@METHODS
def test_sqlite_memory_passes_the_whole_suite(sync: bool) -> None:
    report = conformance(
        "runstore-sqlite-memory", lambda: RunstoreSaver.from_path(":memory:"), sync=sync
    )
    assert_passed_everything(report)


@METHODS
def test_sqlite_file_passes_the_whole_suite(sync: bool, tmp_path: Path) -> None:
    numbers = itertools.count()
    report = conformance(
        "runstore-sqlite-file",
        lambda: RunstoreSaver.from_path(str(tmp_path / f"graphs-{next(numbers)}.db")),
        sync=sync,
    )
    assert_passed_everything(report)


@pytest.fixture
def postgres_databases(postgres_server: Any) -> Iterator[Callable[[], str]]:
    """Make fresh migrated databases on the test server (``tests/postgres/fixtures.py``'s
    ``PostgresCluster``; the DSN of each), dropped after the test."""
    made: list[str] = []

    def fresh() -> str:
        made.append(f"langgraph_{uuid.uuid4().hex}")
        dsn: str = postgres_server.create(made[-1])
        return dsn

    yield fresh
    for name in made:
        postgres_server.drop(name)


@METHODS
def test_postgres_passes_the_whole_suite(sync: bool, postgres_databases: Callable[[], str]) -> None:
    report = conformance(
        "runstore-postgres",
        lambda: RunstoreSaver.from_layer(aio.postgres(postgres_databases())),
        sync=sync,
    )
    assert_passed_everything(report)


def test_the_report_check_refuses_a_saver_without_the_extended_methods() -> None:
    """The trap the assertions above avoid: LangGraph's own ``InMemorySaver`` implements no
    extended capability and still ``passed_all()``, but not ``assert_passed_everything``."""
    from langgraph.checkpoint.memory import InMemorySaver

    @checkpointer_test(name="langgraph-memory")
    async def reference() -> AsyncIterator[BaseCheckpointSaver[Any]]:
        yield InMemorySaver()

    report = asyncio.run(validate(reference))
    assert report.passed_all()
    with pytest.raises(AssertionError):
        assert_passed_everything(report)
