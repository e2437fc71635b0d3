"""The async twin of every runstore service Protocol.

Each Protocol here has the methods of its sync twin in :mod:`runstore.services`, with the
same names, parameters (kinds, defaults, annotations), records, errors and ``Result``s; each
method is ``async def`` and returns, awaited, exactly what the sync method returns for the
same arguments on the same layer: shapes, units and every ``Failure`` are documented once,
on the twin. A test compares each pair (``tests/aio/test_parity.py``), so they cannot drift.

Where a method of a twin returns a service, the async one returns the async service:
``AsyncAgentStorage.threads`` is an :class:`AsyncThreadStore`,
``AsyncSessionRepository.open`` gives an :class:`AsyncSessionStorage`. The one method whose
parameters differ is :meth:`AsyncSessionRepository.atomic`: its function is sync and gets
the sync repository, because a unit of work cannot span awaits.

The façade of :mod:`runstore.aio` (``container.get(aio.DATA_STORE)``) implements each of
them by running the sync method on its layer's runner, off the event loop.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from returns.result import Result

from runstore.services.graphs import PruneStrategy
from runstore.services.ledger import DEFAULT_LIMIT
from runstore.services.test_runs import (
    DEFAULT_FIX_CHECKS,
    DEFAULT_FLAKY_POLICY,
    DEFAULT_TESTS_FOR_RUNS,
)

if TYPE_CHECKING:
    from runstore.services._primitives import JsonValue
    from runstore.services.agents import (
        AgentError,
        AgentRun,
        AgentRunFailure,
        AgentRunStatus,
        ContextCheckpoint,
        Message,
        NewMessage,
        Thread,
        ThreadStatus,
        TokenUsage,
    )
    from runstore.services.errors import Busy, StorageFailure
    from runstore.services.graphs import (
        GraphCheckpoint,
        GraphError,
        GraphWrite,
        NewGraphCheckpoint,
    )
    from runstore.services.health import (
        DatabaseCheck,
        HealthError,
        MigrationStatus,
        ReadinessError,
    )
    from runstore.services.ledger import (
        ActionRun,
        ActionRunError,
        ActionRunFailure,
        ActionRunId,
        ActionRunStatus,
        Execution,
        ExecutionError,
        ExecutionFailure,
        ExecutionId,
        ExecutionStatus,
        Fence,
        NewActionRun,
        NewExecution,
        PhaseOutcome,
    )
    from runstore.services.pagination import Page
    from runstore.services.search import EntryHit, FailureHit, TestHit
    from runstore.services.sessions import (
        BranchMove,
        Entry,
        EntryId,
        NewEntry,
        NewSession,
        SessionContext,
        SessionError,
        SessionId,
        SessionRecord,
        SessionRepository,
        SessionSummary,
    )
    from runstore.services.test_runs import (
        CollectionError,
        CoverageReport,
        CoverageTrendPoint,
        DataReaderError,
        DataStoreError,
        FailureRecord,
        FailureSignature,
        FileCoverage,
        FixCheck,
        FixCheckResult,
        FlakyPolicy,
        FlakyTest,
        HistoryEntry,
        Outcome,
        PruneRunsResult,
        QuarantinedItem,
        RunComparison,
        RunId,
        RunRetentionPolicy,
        RunStart,
        RunStatus,
        RunSummary,
        Selection,
        TestCell,
        TestClassification,
        TestDetail,
        TestLines,
        TestRecord,
        TestResult,
        TestsFor,
    )

__all__ = [
    "AsyncActionRunStorage",
    "AsyncAgentRunStore",
    "AsyncAgentStorage",
    "AsyncCheckpointStore",
    "AsyncDataReader",
    "AsyncDataStore",
    "AsyncDatabaseHealth",
    "AsyncExecutionStorage",
    "AsyncGraphCheckpointStore",
    "AsyncMessageStore",
    "AsyncSessionRepository",
    "AsyncSessionStorage",
    "AsyncThreadStore",
]

T = TypeVar("T")
E = TypeVar("E")


class AsyncDataStore(Protocol):
    """The async twin of :class:`~runstore.services.DataStore`: test-run writes."""

    async def begin_run(self, start: RunStart) -> Result[RunId, DataStoreError]:
        ...

    async def record_results(
        self, run_id: RunId, results: Sequence[TestResult]
    ) -> Result[int, DataStoreError]:
        ...

    async def record_collection_errors(
        self, run_id: RunId, errors: Sequence[CollectionError]
    ) -> Result[int, DataStoreError]:
        ...

    async def finish_run(
        self, run_id: RunId, status: RunStatus, finished_at: datetime
    ) -> Result[RunSummary, DataStoreError]:
        ...

    async def record_selection(
        self, run_id: RunId, selection: Selection
    ) -> Result[RunSummary, DataStoreError]:
        ...

    async def abort_stale_runs(
        self, project: str, *, older_than: datetime
    ) -> Result[tuple[RunId, ...], DataStoreError]:
        ...

    async def write_coverage(
        self, run_id: RunId, files: Sequence[FileCoverage]
    ) -> Result[int, DataStoreError]:
        ...

    async def prune_runs(
        self,
        policy: RunRetentionPolicy,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> Result[PruneRunsResult, DataStoreError]:
        ...

    async def plan_prune(
        self, policy: RunRetentionPolicy
    ) -> Result[PruneRunsResult, DataStoreError]:
        ...

    async def write_test_coverage(
        self, run_id: RunId, tests: Sequence[TestLines]
    ) -> Result[int, DataStoreError]:
        ...

    async def mark_quarantined(
        self, run_id: RunId, items: Sequence[QuarantinedItem]
    ) -> Result[int, DataStoreError]:
        ...

    async def record_fix_check(self, result: FixCheckResult) -> Result[FixCheck, DataStoreError]:
        ...


class AsyncDataReader(Protocol):
    """The async twin of :class:`~runstore.services.DataReader`: test-run reads."""

    async def latest_run(self, project: str) -> Result[RunSummary, DataReaderError]:
        ...

    async def get_run(self, run_id: RunId) -> Result[RunSummary, DataReaderError]:
        ...

    async def list_runs(
        self,
        project: str | None,
        *,
        status: RunStatus | None = None,
        limit: int = 20,
        cursor: str | None = None,
        session_id: str | None = None,
    ) -> Result[Page[RunSummary], DataReaderError]:
        ...

    async def projects(self) -> Result[tuple[str, ...], DataReaderError]:
        ...

    async def tests(
        self, run_id: RunId, *, outcomes: frozenset[Outcome] | None = None
    ) -> Result[tuple[TestRecord, ...], DataReaderError]:
        ...

    async def test_detail(self, run_id: RunId, nodeid: str) -> Result[TestDetail, DataReaderError]:
        ...

    async def failures(self, run_id: RunId) -> Result[tuple[FailureRecord, ...], DataReaderError]:
        ...

    async def classify(
        self, run_id: RunId, *, policy: FlakyPolicy = DEFAULT_FLAKY_POLICY
    ) -> Result[tuple[TestClassification, ...], DataReaderError]:
        ...

    async def flaky_tests(
        self, project: str, *, policy: FlakyPolicy = DEFAULT_FLAKY_POLICY
    ) -> Result[tuple[FlakyTest, ...], DataReaderError]:
        ...

    async def history(
        self, project: str, nodeid: str
    ) -> Result[tuple[HistoryEntry, ...], DataReaderError]:
        ...

    async def find_tests(
        self, project: str, fragment: str, *, limit: int = 20
    ) -> Result[tuple[str, ...], DataReaderError]:
        ...

    async def slowest(
        self, run_id: RunId, *, limit: int = 10
    ) -> Result[tuple[TestRecord, ...], DataReaderError]:
        ...

    async def coverage(self, run_id: RunId) -> Result[CoverageReport, DataReaderError]:
        ...

    async def coverage_trend(
        self, project: str, *, limit: int = 50
    ) -> Result[tuple[CoverageTrendPoint, ...], DataReaderError]:
        ...

    async def compare(self, run_a: RunId, run_b: RunId) -> Result[RunComparison, DataReaderError]:
        ...

    async def tests_for(
        self,
        project: str,
        path: str,
        *,
        line: int | None = None,
        runs: int = DEFAULT_TESTS_FOR_RUNS,
        limit: int = 100,
    ) -> Result[TestsFor, DataReaderError]:
        ...

    async def search_failures(
        self,
        text: str,
        *,
        project: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> Result[Page[FailureHit], DataReaderError]:
        ...

    async def search_tests(
        self,
        text: str,
        *,
        project: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> Result[Page[TestHit], DataReaderError]:
        ...

    async def classify_unstable(
        self, run_id: RunId, *, policy: FlakyPolicy = DEFAULT_FLAKY_POLICY
    ) -> Result[tuple[TestClassification, ...], DataReaderError]:
        ...

    async def failure_signatures(
        self, project: str, *, limit: int = 20, cursor: str | None = None
    ) -> Result[Page[FailureSignature], DataReaderError]:
        ...

    async def quarantined(
        self, run_id: RunId
    ) -> Result[tuple[QuarantinedItem, ...], DataReaderError]:
        ...

    async def fix_checks(
        self, project: str, nodeid: str | None = None, *, limit: int = DEFAULT_FIX_CHECKS
    ) -> Result[tuple[FixCheck, ...], DataReaderError]:
        ...

    async def known_tests(
        self, project: str, nodeids: Iterable[str]
    ) -> Result[frozenset[str], DataReaderError]:
        ...

    async def run_cells(
        self,
        run_ids: Iterable[RunId],
        *,
        nodeids: Iterable[str] | None = None,
        outcomes: frozenset[Outcome] | None = None,
    ) -> Result[tuple[TestCell, ...], DataReaderError]:
        ...


class AsyncExecutionStorage(Protocol):
    """The async twin of :class:`~runstore.services.ExecutionStorage`:
    the execution ledger's executions."""

    async def create(self, new: NewExecution) -> Result[Execution, ExecutionError]:
        ...

    async def get(self, execution_id: ExecutionId) -> Result[Execution, ExecutionError]:
        ...

    async def list(
        self,
        project_id: str,
        *,
        status: ExecutionStatus | None = None,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
    ) -> Result[Page[Execution], ExecutionError]:
        ...

    async def claim(
        self, project_id: str, owner: str, lease_ms: int
    ) -> Result[Execution | None, ExecutionError]:
        ...

    async def renew(
        self, execution_id: ExecutionId, fencing_token: int, lease_ms: int
    ) -> Result[Execution, ExecutionError]:
        ...

    async def finish(
        self,
        execution_id: ExecutionId,
        fencing_token: int,
        status: ExecutionStatus,
        *,
        output: JsonValue = None,
        failure: ExecutionFailure | None = None,
    ) -> Result[Execution, ExecutionError]:
        ...

    async def cancel(
        self, execution_id: ExecutionId, failure: ExecutionFailure | None = None
    ) -> Result[Execution, ExecutionError]:
        ...


class AsyncActionRunStorage(Protocol):
    """The async twin of :class:`~runstore.services.ActionRunStorage`:
    the execution ledger's action runs."""

    async def queue(self, new: NewActionRun, fence: Fence) -> Result[ActionRun, ActionRunError]:
        ...

    async def requeue(self, run_id: ActionRunId, fence: Fence) -> Result[ActionRun, ActionRunError]:
        ...

    async def start(self, run_id: ActionRunId, fence: Fence) -> Result[ActionRun, ActionRunError]:
        ...

    async def record_writeback(
        self, run_id: ActionRunId, fence: Fence, outcome: PhaseOutcome
    ) -> Result[ActionRun, ActionRunError]:
        ...

    async def record_effects(
        self, run_id: ActionRunId, fence: Fence, outcome: PhaseOutcome
    ) -> Result[ActionRun, ActionRunError]:
        ...

    async def finish(
        self,
        run_id: ActionRunId,
        fence: Fence,
        status: ActionRunStatus,
        failure: ActionRunFailure | None = None,
    ) -> Result[ActionRun, ActionRunError]:
        ...

    async def get(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        ...

    async def list(
        self,
        project_id: str,
        *,
        execution_id: ExecutionId | None = None,
        status: ActionRunStatus | None = None,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
    ) -> Result[Page[ActionRun], ActionRunError]:
        ...


class AsyncThreadStore(Protocol):
    """The async twin of :class:`~runstore.services.ThreadStore`: agent threads."""

    async def create(
        self,
        thread_id: str,
        *,
        project_id: str,
        title: str = "",
        metadata: Mapping[str, JsonValue] | None = None,
        agent_id: str | None = None,
        owner_id: str | None = None,
        at: datetime | int | None = None,
    ) -> Result[Thread, AgentError]:
        ...

    async def list(
        self,
        project_id: str,
        *,
        agent_id: str | None = None,
        status: ThreadStatus | None = None,
        owner_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Result[Page[Thread], AgentError]:
        ...

    async def get(self, thread_id: str) -> Result[Thread, AgentError]:
        ...

    async def update(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
        status: ThreadStatus | None = None,
        at: datetime | int | None = None,
    ) -> Result[Thread, AgentError]:
        ...

    async def delete(self, thread_id: str) -> Result[None, AgentError]:
        ...


class AsyncAgentRunStore(Protocol):
    """The async twin of :class:`~runstore.services.AgentRunStore`: single-flight agent runs."""

    async def queue(
        self,
        run_id: str,
        *,
        thread_id: str,
        execution_id: str | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        ...

    async def start(
        self,
        run_id: str,
        *,
        thread_id: str,
        owner: str,
        lease_ms: int,
        execution_id: str | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        ...

    async def claim(
        self, run_id: str, *, owner: str, lease_ms: int
    ) -> Result[AgentRun, AgentError]:
        ...

    async def renew(
        self, run_id: str, *, fencing_token: int, lease_ms: int
    ) -> Result[AgentRun, AgentError]:
        ...

    async def reclaim(
        self, run_id: str, *, owner: str, lease_ms: int
    ) -> Result[AgentRun, AgentError]:
        ...

    async def finish(
        self,
        run_id: str,
        *,
        fencing_token: int,
        status: AgentRunStatus,
        failure: AgentRunFailure | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        ...

    async def cancel(
        self,
        run_id: str,
        *,
        failure: AgentRunFailure | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        ...

    async def get(self, run_id: str) -> Result[AgentRun, AgentError]:
        ...

    async def get_many(self, run_ids: Sequence[str]) -> Result[tuple[AgentRun, ...], AgentError]:
        ...

    async def list(
        self,
        thread_id: str,
        *,
        status: AgentRunStatus | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Result[Page[AgentRun], AgentError]:
        ...


class AsyncMessageStore(Protocol):
    """The async twin of :class:`~runstore.services.MessageStore`: a thread's sequenced messages."""

    async def append(
        self,
        thread_id: str,
        *,
        role: str,
        content: JsonValue,
        run_id: str | None = None,
        fencing_token: int | None = None,
        usage: TokenUsage | None = None,
        cost: Decimal | None = None,
        at: datetime | int | None = None,
        client_id: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
    ) -> Result[Message, AgentError]:
        ...

    async def append_many(
        self, thread_id: str, messages: Sequence[NewMessage]
    ) -> Result[tuple[Message, ...], AgentError]:
        ...

    async def get(self, thread_id: str, seq: int) -> Result[Message, AgentError]:
        ...

    async def list(
        self,
        thread_id: str,
        *,
        after_seq: int | None = None,
        before_seq: int | None = None,
        roles: Collection[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Result[Page[Message], AgentError]:
        ...

    async def delete_by_run(self, thread_id: str, run_id: str) -> Result[int, AgentError]:
        ...

    async def pop(self, thread_id: str) -> Result[Message | None, AgentError]:
        ...

    async def clear(self, thread_id: str) -> Result[int, AgentError]:
        ...


class AsyncCheckpointStore(Protocol):
    """The async twin of :class:`~runstore.services.CheckpointStore`:
    a thread's context checkpoints."""

    async def create(
        self,
        checkpoint_id: str,
        *,
        thread_id: str,
        run_id: str,
        fencing_token: int,
        summary: str,
        through_seq: int,
        observed_head_seq: int,
        expected_latest_id: str | None,
        at: datetime | int | None = None,
        reason: str = "manual",
        format_version: int = 1,
        tokens_before: int | None = None,
        tokens_after: int | None = None,
        summary_model: str | None = None,
    ) -> Result[ContextCheckpoint, AgentError]:
        ...

    async def latest(self, thread_id: str) -> Result[ContextCheckpoint | None, AgentError]:
        ...

    async def for_run(self, run_id: str) -> Result[ContextCheckpoint | None, AgentError]:
        ...


class AsyncAgentStorage(Protocol):
    """The async twin of :class:`~runstore.services.AgentStorage`:
    agent state: four async stores."""

    @property
    def threads(self) -> AsyncThreadStore:
        ...

    @property
    def runs(self) -> AsyncAgentRunStore:
        ...

    @property
    def messages(self) -> AsyncMessageStore:
        ...

    @property
    def checkpoints(self) -> AsyncCheckpointStore:
        ...


class AsyncSessionStorage(Protocol):
    """The async twin of :class:`~runstore.services.SessionStorage`:
    one open tree-shaped session."""

    @property
    def session_id(self) -> SessionId:
        ...

    async def info(self) -> Result[SessionRecord, SessionError]:
        ...

    async def summary(self) -> Result[SessionSummary, SessionError]:
        ...

    async def leaf(self) -> Result[EntryId | None, SessionError]:
        ...

    async def append(self, entry: NewEntry) -> Result[Entry, SessionError]:
        ...

    async def append_many(
        self, entries: Sequence[NewEntry], *, strict_compactions: bool = True
    ) -> Result[int, SessionError]:
        ...

    async def set_leaf(self, entry_id: str | None) -> Result[EntryId | None, SessionError]:
        ...

    async def move_to(
        self, entry_id: str | None, summary: BranchMove | None = None
    ) -> Result[Entry | None, SessionError]:
        ...

    async def entry(self, entry_id: str) -> Result[Entry, SessionError]:
        ...

    async def children(self, entry_id: str | None) -> Result[tuple[Entry, ...], SessionError]:
        ...

    async def path_to_root(self, entry_id: str) -> Result[tuple[Entry, ...], SessionError]:
        ...

    async def path_to_root_or_compaction(
        self, entry_id: str
    ) -> Result[tuple[Entry, ...], SessionError]:
        ...

    async def entries(
        self, after_seq: int = 0, limit: int = 100
    ) -> Result[Page[Entry], SessionError]:
        ...

    async def build_context(self, leaf: str | None = None) -> Result[SessionContext, SessionError]:
        ...


class AsyncSessionRepository(Protocol):
    """The async twin of :class:`~runstore.services.SessionRepository`:
    tree-shaped agent sessions."""

    async def create(self, new: NewSession) -> Result[SessionRecord, SessionError]:
        ...

    async def get(self, session_id: str) -> Result[SessionRecord, SessionError]:
        ...

    async def list(
        self, cwd: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> Result[Page[SessionRecord], SessionError]:
        ...

    async def open(self, session_id: str) -> Result[AsyncSessionStorage, SessionError]:
        ...

    async def delete(self, session_id: str) -> Result[int, SessionError]:
        ...

    async def fork(
        self,
        source: str,
        *,
        at_entry: str | None = None,
        session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        cwd: str | None = None,
    ) -> Result[SessionRecord, SessionError]:
        ...

    async def search(
        self,
        text: str,
        *,
        cwd: str | None = None,
        limit: int = 20,
        cursor: str | None = None,
    ) -> Result[Page[EntryHit], SessionError]:
        ...

    async def atomic(
        self, operation: str, fn: Callable[[SessionRepository], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]:
        """Run the sync ``fn`` as one unit of work, given the sync repository it must call.

        As :meth:`runstore.services.SessionRepository.atomic`: ``Success`` keeps everything
        ``fn`` wrote, ``Failure`` or an exception undoes all of it. ``fn`` runs on the
        runner's side (the writer thread for SQLite), so it must not await: a unit of work
        holds the database's write lock, which must not wait on the event loop.
        """
        ...


class AsyncDatabaseHealth(Protocol):
    """The async twin of :class:`~runstore.services.DatabaseHealth`:
    the health of the database under the services."""

    async def readiness(self) -> Result[None, ReadinessError]:
        ...

    async def quick_check(self) -> Result[None, HealthError]:
        ...

    async def status(self) -> Result[MigrationStatus, HealthError]:
        ...

    async def check(self) -> Result[DatabaseCheck, HealthError]:
        ...


class AsyncGraphCheckpointStore(Protocol):
    """The async twin of :class:`~runstore.services.graphs.GraphCheckpointStore`:
    the graph checkpoints of agent threads (LangGraph's saver calls)."""

    async def put(
        self,
        thread_id: str,
        checkpoint: NewGraphCheckpoint,
        *,
        project_id: str,
        checkpoint_ns: str = "",
        at: datetime | int | None = None,
    ) -> Result[None, GraphError]:
        ...

    async def put_writes(
        self,
        thread_id: str,
        writes: Sequence[GraphWrite],
        *,
        checkpoint_id: str,
        task_id: str,
        task_path: str = "",
        checkpoint_ns: str = "",
        project_id: str | None = None,
    ) -> Result[None, GraphError]:
        ...

    async def get(
        self,
        thread_id: str,
        *,
        checkpoint_ns: str = "",
        checkpoint_id: str | None = None,
    ) -> Result[GraphCheckpoint | None, GraphError]:
        ...

    async def list(
        self,
        thread_id: str | None,
        *,
        checkpoint_ns: str | None = None,
        checkpoint_id: str | None = None,
        filter: Mapping[str, JsonValue] | None = None,  # LangGraph's name
        before: str | None = None,
        limit: int | None = None,
    ) -> Result[tuple[GraphCheckpoint, ...], GraphError]:
        ...

    async def delete_thread(self, thread_id: str) -> Result[int, GraphError]:
        ...

    async def delete_for_runs(self, run_ids: Sequence[str]) -> Result[int, GraphError]:
        ...

    async def copy_thread(
        self, source_thread_id: str, target_thread_id: str
    ) -> Result[int, GraphError]:
        ...

    async def prune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: PruneStrategy | str = PruneStrategy.KEEP_LATEST,
    ) -> Result[int, GraphError]:
        ...
