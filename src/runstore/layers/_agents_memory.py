"""The in-memory agent stores: the reference the contract suite compares every layer with.

All state lives in :class:`~runstore.layers.TxDict` mirrors of the container's
:class:`InMemoryDatabase`, and every write runs as one of its units of work, so a write that
fails (a ``Failure`` or an exception half-way) leaves every mirror as it was: exactly what a
rolled-back SQLite transaction does to the rows.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from decimal import Decimal

import attrs
from returns.result import Failure, Result, Success

from runstore.layers._layer import Container, Layer
from runstore.layers._memory_database import InMemoryDatabase
from runstore.layers._unit_of_work import TxDict
from runstore.services.agents import (
    MAX_TITLE_CHARS,
    ActiveRunExists,
    AgentError,
    AgentRun,
    AgentRunFailure,
    AgentRunId,
    AgentRunStatus,
    AgentStorage,
    CheckpointDraft,
    CheckpointId,
    ContextCheckpoint,
    JsonValue,
    ListQuery,
    Message,
    MessageDraft,
    NewMessage,
    Thread,
    ThreadId,
    ThreadStatus,
    TokenUsage,
    check_checkpoint,
    check_failure,
    check_id,
    check_list_query,
    check_messages,
    check_seq,
    check_text,
    check_thread_status,
    decode_cost,
    decode_failure,
    decode_json,
    encode_object,
    to_epoch_ms,
)
from runstore.services.clock import Clock
from runstore.services.errors import Conflict, IllegalTransition, NotFound
from runstore.services.executions import (
    ExecutionFinished,
    ExecutionId,
    ExecutionStorage,
    ProjectMismatch,
    StaleFencingToken,
)
from runstore.services.pagination import Page

__all__ = [
    "InMemoryAgentRunStore",
    "InMemoryAgentStorage",
    "InMemoryCheckpointStore",
    "InMemoryMessageStore",
    "InMemoryThreadStore",
    "in_memory_agent_storage",
]


@attrs.frozen
class _ThreadRow:
    id: str
    project_id: str
    title: str
    metadata_json: str
    status: ThreadStatus
    head_seq: int
    message_count: int
    last_message_at_ms: int | None
    checkpoint_count: int
    created_at_ms: int
    updated_at_ms: int


@attrs.frozen
class _RunRow:
    id: str
    thread_id: str
    execution_id: str | None
    status: AgentRunStatus
    failure_json: str | None
    started_at_ms: int
    finished_at_ms: int | None


@attrs.frozen
class _MessageRow:
    role: str
    run_id: str | None
    usage: TokenUsage
    cost_text: str | None
    created_at_ms: int
    content_json: str


def _canonical(text: str) -> str:
    return json.dumps(json.loads(text), sort_keys=True, ensure_ascii=False)


class _State:
    """Every mirror of one in-memory agent storage."""

    def __init__(self, db: InMemoryDatabase, clock: Clock, executions: ExecutionStorage) -> None:
        self.db = db
        self.clock = clock
        self.executions = executions
        self.threads: TxDict[str, _ThreadRow] = db.mirror()
        self.runs: TxDict[str, _RunRow] = db.mirror()
        self.active: TxDict[str, str] = db.mirror()  # thread id -> running run id
        self.messages: TxDict[tuple[str, int], _MessageRow] = db.mirror()
        self.checkpoints: TxDict[str, ContextCheckpoint] = db.mirror()
        self.checkpoint_numbers: TxDict[tuple[str, int], str] = db.mirror()
        self.checkpoint_by_run: TxDict[str, str] = db.mirror()

    def thread(self, row: _ThreadRow) -> Thread:
        metadata = decode_json(row.metadata_json)
        assert isinstance(metadata, dict)
        active = self.active.get(row.id)
        return Thread(
            id=ThreadId(row.id),
            project_id=row.project_id,
            title=row.title,
            metadata=metadata,
            status=row.status,
            active_run_id=None if active is None else AgentRunId(active),
            head_seq=row.head_seq,
            message_count=row.message_count,
            last_message_at_ms=row.last_message_at_ms,
            checkpoint_count=row.checkpoint_count,
            created_at_ms=row.created_at_ms,
            updated_at_ms=row.updated_at_ms,
        )

    def run(self, row: _RunRow) -> AgentRun:
        return AgentRun(
            id=AgentRunId(row.id),
            thread_id=ThreadId(row.thread_id),
            project_id=self.threads[row.thread_id].project_id,
            execution_id=row.execution_id,
            status=row.status,
            failure=decode_failure(row.failure_json),
            started_at_ms=row.started_at_ms,
            finished_at_ms=row.finished_at_ms,
        )

    def run_in_thread(self, run_id: str, thread_id: str) -> Result[_RunRow, AgentError]:
        row = self.runs.get(run_id)
        if row is None:
            return Failure(NotFound("agent_run", run_id))
        if row.thread_id != thread_id:
            return Failure(
                Conflict(
                    "agent_run",
                    run_id,
                    "run belongs to another thread",
                    expected=thread_id,
                    actual=row.thread_id,
                )
            )
        return Success(row)


def _message(thread_id: str, seq: int, row: _MessageRow) -> Message:
    return Message(
        thread_id=ThreadId(thread_id),
        seq=seq,
        role=row.role,
        content=decode_json(row.content_json),
        run_id=None if row.run_id is None else AgentRunId(row.run_id),
        usage=row.usage,
        cost=decode_cost(row.cost_text),
        created_at_ms=row.created_at_ms,
    )


class InMemoryThreadStore:
    """Threads in memory; see :class:`~runstore.services.agents.ThreadStore`."""

    def __init__(self, state: _State) -> None:
        self._s = state

    def create(
        self,
        thread_id: str,
        *,
        project_id: str,
        title: str = "",
        metadata: Mapping[str, JsonValue] | None = None,
        at: datetime | int | None = None,
    ) -> Result[Thread, AgentError]:
        """Create an open, empty thread (see ``ThreadStore.create``)."""
        s = self._s
        checked_id = check_id("thread_id", thread_id)
        if isinstance(checked_id, Failure):
            return checked_id
        checked_project = check_id("project_id", project_id)
        if isinstance(checked_project, Failure):
            return checked_project
        checked_title = check_text("title", title, max_chars=MAX_TITLE_CHARS, allow_empty=True)
        if isinstance(checked_title, Failure):
            return checked_title
        encoded = encode_object("metadata", metadata)
        if isinstance(encoded, Failure):
            return encoded
        at_ms = to_epoch_ms("at", at, s.clock)
        if isinstance(at_ms, Failure):
            return at_ms
        metadata_json, now = encoded.unwrap(), at_ms.unwrap()

        def unit() -> Result[Thread, AgentError]:
            existing = s.threads.get(thread_id)
            if existing is not None:
                if (
                    existing.project_id == project_id
                    and existing.title == title
                    and _canonical(existing.metadata_json) == _canonical(metadata_json)
                ):
                    return Success(s.thread(existing))
                return Failure(Conflict("thread", thread_id, "thread exists with other values"))
            row = _ThreadRow(
                id=thread_id,
                project_id=project_id,
                title=title,
                metadata_json=metadata_json,
                status=ThreadStatus.OPEN,
                head_seq=0,
                message_count=0,
                last_message_at_ms=None,
                checkpoint_count=0,
                created_at_ms=now,
                updated_at_ms=now,
            )
            s.threads[thread_id] = row
            return Success(s.thread(row))

        return s.db.transact("create thread", unit)

    def get(self, thread_id: str) -> Result[Thread, AgentError]:
        """Return the thread (see ``ThreadStore.get``)."""
        checked = check_id("thread_id", thread_id)
        if isinstance(checked, Failure):
            return checked
        row = self._s.threads.get(thread_id)
        return (
            Failure(NotFound("thread", thread_id)) if row is None else Success(self._s.thread(row))
        )

    def update(
        self,
        thread_id: str,
        *,
        title: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
        status: ThreadStatus | None = None,
        at: datetime | int | None = None,
    ) -> Result[Thread, AgentError]:
        """Change title, metadata and/or status (see ``ThreadStore.update``)."""
        s = self._s
        checked = check_id("thread_id", thread_id)
        if isinstance(checked, Failure):
            return checked
        if title is not None:
            checked_title = check_text("title", title, max_chars=MAX_TITLE_CHARS, allow_empty=True)
            if isinstance(checked_title, Failure):
                return checked_title
        metadata_json: str | None = None
        if metadata is not None:
            encoded = encode_object("metadata", metadata)
            if isinstance(encoded, Failure):
                return encoded
            metadata_json = encoded.unwrap()
        new_status: ThreadStatus | None = None
        if status is not None:
            checked_status = check_thread_status(status)
            if isinstance(checked_status, Failure):
                return checked_status
            new_status = checked_status.unwrap()
        at_ms = to_epoch_ms("at", at, s.clock)
        if isinstance(at_ms, Failure):
            return at_ms
        now = at_ms.unwrap()

        def unit() -> Result[Thread, AgentError]:
            row = s.threads.get(thread_id)
            if row is None:
                return Failure(NotFound("thread", thread_id))
            active = s.active.get(thread_id)
            if new_status is ThreadStatus.ARCHIVED and active is not None:
                return Failure(Conflict("thread", thread_id, "active run", actual=active))
            row = attrs.evolve(
                row,
                title=row.title if title is None else title,
                metadata_json=row.metadata_json if metadata_json is None else metadata_json,
                status=row.status if new_status is None else new_status,
                updated_at_ms=now,
            )
            s.threads[thread_id] = row
            return Success(s.thread(row))

        return s.db.transact("update thread", unit)

    def delete(self, thread_id: str) -> Result[None, AgentError]:
        """Delete the thread and everything of it (see ``ThreadStore.delete``)."""
        s = self._s
        checked = check_id("thread_id", thread_id)
        if isinstance(checked, Failure):
            return checked

        def unit() -> Result[None, AgentError]:
            row = s.threads.get(thread_id)
            if row is None:
                return Failure(NotFound("thread", thread_id))
            for seq in range(1, row.head_seq + 1):
                s.messages.pop((thread_id, seq), None)
            for number in range(1, row.checkpoint_count + 1):
                checkpoint_id = s.checkpoint_numbers.pop((thread_id, number))
                checkpoint = s.checkpoints.pop(checkpoint_id)
                del s.checkpoint_by_run[checkpoint.run_id]
            for run_id in [r.id for r in s.runs.values() if r.thread_id == thread_id]:
                del s.runs[run_id]
            s.active.pop(thread_id, None)
            del s.threads[thread_id]
            return Success(None)

        return s.db.transact("delete thread", unit)


class InMemoryAgentRunStore:
    """Runs in memory; see :class:`~runstore.services.agents.AgentRunStore`."""

    def __init__(self, state: _State) -> None:
        self._s = state

    def start(
        self,
        run_id: str,
        *,
        thread_id: str,
        execution_id: str | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        """Start the thread's one active run (see ``AgentRunStore.start``)."""
        s = self._s
        for field, value in (("run_id", run_id), ("thread_id", thread_id)):
            checked = check_id(field, value)
            if isinstance(checked, Failure):
                return checked
        if execution_id is not None:
            checked_execution = check_id("execution_id", execution_id)
            if isinstance(checked_execution, Failure):
                return checked_execution
        at_ms = to_epoch_ms("at", at, s.clock)
        if isinstance(at_ms, Failure):
            return at_ms
        now = at_ms.unwrap()

        def unit() -> Result[AgentRun, AgentError]:
            thread = s.threads.get(thread_id)
            if thread is None:
                return Failure(NotFound("thread", thread_id))
            existing = s.runs.get(run_id)
            if existing is not None:
                if existing.thread_id == thread_id and existing.execution_id == execution_id:
                    return Success(s.run(existing))
                return Failure(
                    Conflict("agent_run", run_id, "run exists with another thread or execution")
                )
            if thread.status is ThreadStatus.ARCHIVED:
                return Failure(Conflict("thread", thread_id, "thread is archived"))
            if execution_id is not None:
                checked = _check_execution(s.executions, execution_id, thread.project_id)
                if isinstance(checked, Failure):
                    return checked
            active = s.active.get(thread_id)
            if active is not None:
                return Failure(ActiveRunExists(thread_id, active))
            row = _RunRow(
                id=run_id,
                thread_id=thread_id,
                execution_id=execution_id,
                status=AgentRunStatus.RUNNING,
                failure_json=None,
                started_at_ms=now,
                finished_at_ms=None,
            )
            s.runs[run_id] = row
            s.active[thread_id] = run_id
            return Success(s.run(row))

        return s.db.transact("start agent run", unit)

    def finish(
        self,
        run_id: str,
        *,
        status: AgentRunStatus,
        failure: AgentRunFailure | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        """Finish a running run (see ``AgentRunStore.finish``)."""
        s = self._s
        checked = check_id("run_id", run_id)
        if isinstance(checked, Failure):
            return checked
        final = check_failure(status, failure)
        if isinstance(final, Failure):
            return final
        target, failure_json = final.unwrap()
        at_ms = to_epoch_ms("at", at, s.clock)
        if isinstance(at_ms, Failure):
            return at_ms
        now = at_ms.unwrap()

        def unit() -> Result[AgentRun, AgentError]:
            row = s.runs.get(run_id)
            if row is None:
                return Failure(NotFound("agent_run", run_id))
            if row.status is not AgentRunStatus.RUNNING:
                if row.status is target and row.failure_json == failure_json:
                    return Success(s.run(row))
                return Failure(IllegalTransition("agent_run", run_id, str(row.status), str(target)))
            row = attrs.evolve(row, status=target, failure_json=failure_json, finished_at_ms=now)
            s.runs[run_id] = row
            if s.active.get(row.thread_id) == run_id:
                del s.active[row.thread_id]
            return Success(s.run(row))

        return s.db.transact("finish agent run", unit)

    def get(self, run_id: str) -> Result[AgentRun, AgentError]:
        """Return the run (see ``AgentRunStore.get``)."""
        checked = check_id("run_id", run_id)
        if isinstance(checked, Failure):
            return checked
        row = self._s.runs.get(run_id)
        return Failure(NotFound("agent_run", run_id)) if row is None else Success(self._s.run(row))


def _check_execution(
    executions: ExecutionStorage, execution_id: str, project_id: str
) -> Result[None, AgentError]:
    found = executions.get(ExecutionId(execution_id))
    if isinstance(found, Failure):
        error = found.failure()
        if isinstance(error, StaleFencingToken):  # pragma: no cover - get never returns it
            raise TypeError(f"ExecutionStorage.get returned {error!r}")
        return Failure(error)
    execution = found.unwrap()
    if execution.project_id != project_id:
        return Failure(ProjectMismatch("execution", execution_id, project_id, execution.project_id))
    if execution.status.is_finished:
        return Failure(ExecutionFinished(execution_id, str(execution.status)))
    return Success(None)


class InMemoryMessageStore:
    """Messages in memory; see :class:`~runstore.services.agents.MessageStore`."""

    def __init__(self, state: _State) -> None:
        self._s = state

    def append(
        self,
        thread_id: str,
        *,
        role: str,
        content: JsonValue,
        run_id: str | None = None,
        usage: TokenUsage | None = None,
        cost: Decimal | None = None,
        at: datetime | int | None = None,
    ) -> Result[Message, AgentError]:
        """Append one message (see ``MessageStore.append_many``)."""
        message = NewMessage(
            role=role,
            content=content,
            run_id=run_id,
            usage=TokenUsage() if usage is None else usage,
            cost=cost,
            at=at,
        )
        return self.append_many(thread_id, (message,)).map(lambda stored: stored[0])

    def append_many(
        self, thread_id: str, messages: Sequence[NewMessage]
    ) -> Result[tuple[Message, ...], AgentError]:
        """Append messages with consecutive sequence numbers (see ``MessageStore.append_many``)."""
        s = self._s
        checked = check_id("thread_id", thread_id)
        if isinstance(checked, Failure):
            return checked
        drafts = check_messages(messages, s.clock)
        if isinstance(drafts, Failure):
            return drafts
        now = s.clock.now_ms()
        return s.db.transact(
            "append messages", lambda: self._append(thread_id, drafts.unwrap(), now)
        )

    def _next_seqs(self, thread: _ThreadRow, count: int) -> range:
        """The sequence numbers of the next ``count`` messages: after the counter, never reused."""
        return range(thread.head_seq + 1, thread.head_seq + count + 1)

    def _append(
        self, thread_id: str, drafts: tuple[MessageDraft, ...], now: int
    ) -> Result[tuple[Message, ...], AgentError]:
        s = self._s
        thread = s.threads.get(thread_id)
        if thread is None:
            return Failure(NotFound("thread", thread_id))
        if not drafts:
            return Success(())
        if thread.status is ThreadStatus.ARCHIVED:
            return Failure(Conflict("thread", thread_id, "thread is archived"))
        seqs = self._next_seqs(thread, len(drafts))
        s.threads[thread_id] = attrs.evolve(
            thread,
            head_seq=max(thread.head_seq, seqs[-1]),
            message_count=thread.message_count + len(drafts),
            last_message_at_ms=drafts[-1].at_ms,
            updated_at_ms=now,
        )
        for draft in drafts:
            if draft.run_id is not None:
                run = s.run_in_thread(draft.run_id, thread_id)
                if isinstance(run, Failure):
                    return run
        stored: list[Message] = []
        for seq, draft in zip(seqs, drafts, strict=True):
            row = _MessageRow(
                role=draft.role,
                run_id=draft.run_id,
                usage=draft.usage,
                cost_text=draft.cost_text,
                created_at_ms=draft.at_ms,
                content_json=draft.content_json,
            )
            s.messages[(thread_id, seq)] = row
            stored.append(_message(thread_id, seq, row))
        return Success(tuple(stored))

    def get(self, thread_id: str, seq: int) -> Result[Message, AgentError]:
        """Return one message (see ``MessageStore.get``)."""
        s = self._s
        checked = check_id("thread_id", thread_id)
        if isinstance(checked, Failure):
            return checked
        checked_seq = check_seq(seq)
        if isinstance(checked_seq, Failure):
            return checked_seq
        if thread_id not in s.threads:
            return Failure(NotFound("thread", thread_id))
        row = s.messages.get((thread_id, seq))
        if row is None:
            return Failure(NotFound("message", f"{thread_id}#{seq}"))
        return Success(_message(thread_id, seq, row))

    def list(
        self,
        thread_id: str,
        *,
        after_seq: int | None = None,
        before_seq: int | None = None,
        roles: Collection[str] | None = None,
        limit: int = 50,
    ) -> Result[Page[Message], AgentError]:
        """Return one page of messages in ascending seq (see ``MessageStore.list``)."""
        query = check_list_query(after_seq, before_seq, roles, limit)
        if isinstance(query, Failure):
            return query
        checked = check_id("thread_id", thread_id)
        if isinstance(checked, Failure):
            return checked
        return self._list(thread_id, query.unwrap())

    def _list(self, thread_id: str, query: ListQuery) -> Result[Page[Message], AgentError]:
        s = self._s
        thread = s.threads.get(thread_id)
        if thread is None:
            return Failure(NotFound("thread", thread_id))
        low = 1 if query.after_seq is None else query.after_seq + 1
        high = (
            thread.head_seq
            if query.before_seq is None
            else min(thread.head_seq, query.before_seq - 1)
        )
        seqs = range(low, high + 1) if query.forward else range(high, low - 1, -1)
        found: list[Message] = []
        has_more = False
        for seq in seqs:
            row = s.messages.get((thread_id, seq))
            if row is None or (query.roles is not None and row.role not in query.roles):
                continue
            if len(found) == query.limit:
                has_more = True
                break
            found.append(_message(thread_id, seq, row))
        if not query.forward:
            found.reverse()
        cursor = None
        if has_more:
            cursor = str(found[-1].seq if query.forward else found[0].seq)
        return Success(Page(items=tuple(found), has_more=has_more, next_cursor=cursor))

    def delete_by_run(self, thread_id: str, run_id: str) -> Result[int, AgentError]:
        """Delete the run's messages and recompute counters (see ``MessageStore.delete_by_run``)."""
        s = self._s
        for field, value in (("thread_id", thread_id), ("run_id", run_id)):
            checked = check_id(field, value)
            if isinstance(checked, Failure):
                return checked
        now = s.clock.now_ms()

        def unit() -> Result[int, AgentError]:
            thread = s.threads.get(thread_id)
            if thread is None:
                return Failure(NotFound("thread", thread_id))
            run = s.run_in_thread(run_id, thread_id)
            if isinstance(run, Failure):
                return run
            doomed = [
                seq
                for seq in range(1, thread.head_seq + 1)
                if (row := s.messages.get((thread_id, seq))) is not None and row.run_id == run_id
            ]
            for seq in doomed:
                del s.messages[(thread_id, seq)]
            if doomed:
                last = next(
                    (
                        row.created_at_ms
                        for seq in range(thread.head_seq, 0, -1)
                        if (row := s.messages.get((thread_id, seq))) is not None
                    ),
                    None,
                )
                s.threads[thread_id] = attrs.evolve(
                    thread,
                    message_count=thread.message_count - len(doomed),
                    last_message_at_ms=last,
                    updated_at_ms=now,
                )
            return Success(len(doomed))

        return s.db.transact("delete messages by run", unit)


class InMemoryCheckpointStore:
    """Checkpoints in memory; see :class:`~runstore.services.agents.CheckpointStore`."""

    def __init__(self, state: _State) -> None:
        self._s = state

    def create(
        self,
        checkpoint_id: str,
        *,
        thread_id: str,
        run_id: str,
        summary: str,
        through_seq: int,
        observed_head_seq: int,
        expected_latest_id: str | None,
        at: datetime | int | None = None,
    ) -> Result[ContextCheckpoint, AgentError]:
        """Create a checkpoint by compare-and-swap (see ``CheckpointStore.create``)."""
        checked = check_checkpoint(
            checkpoint_id,
            thread_id,
            run_id,
            summary,
            through_seq,
            observed_head_seq,
            expected_latest_id,
            at,
            self._s.clock,
        )
        if isinstance(checked, Failure):
            return checked
        draft = checked.unwrap()
        return self._s.db.transact("create checkpoint", lambda: self._create(draft))

    def _create(self, draft: CheckpointDraft) -> Result[ContextCheckpoint, AgentError]:
        s = self._s
        thread = s.threads.get(draft.thread_id)
        if thread is None:
            return Failure(NotFound("thread", draft.thread_id))
        run = s.run_in_thread(draft.run_id, draft.thread_id)
        if isinstance(run, Failure):
            return run
        mine_id = s.checkpoint_by_run.get(draft.run_id)
        if mine_id is not None:
            stored = s.checkpoints[mine_id]
            if (
                stored.id == draft.checkpoint_id
                and stored.summary == draft.summary
                and stored.through_seq == draft.through_seq
                and stored.observed_head_seq == draft.observed_head_seq
                and stored.previous_id == draft.expected_latest_id
            ):
                return Success(stored)
            return Failure(
                Conflict(
                    "checkpoint",
                    draft.checkpoint_id,
                    "run already created a different checkpoint",
                    actual=stored.id,
                )
            )
        if run.unwrap().status is not AgentRunStatus.RUNNING:
            return Failure(
                Conflict(
                    "agent_run", draft.run_id, "run is not running", actual=str(run.unwrap().status)
                )
            )
        if draft.checkpoint_id in s.checkpoints:
            return Failure(Conflict("checkpoint", draft.checkpoint_id, "checkpoint id taken"))
        latest_id = s.checkpoint_numbers.get((draft.thread_id, thread.checkpoint_count))
        latest = None if latest_id is None else s.checkpoints[latest_id]
        if latest_id != draft.expected_latest_id:
            return Failure(
                Conflict(
                    "thread",
                    draft.thread_id,
                    "latest checkpoint changed",
                    expected=draft.expected_latest_id or "",
                    actual=latest_id or "",
                )
            )
        if thread.head_seq != draft.observed_head_seq:
            return Failure(
                Conflict(
                    "thread",
                    draft.thread_id,
                    "head moved",
                    expected=str(draft.observed_head_seq),
                    actual=str(thread.head_seq),
                )
            )
        if latest is not None and draft.through_seq <= latest.through_seq:
            return Failure(
                Conflict(
                    "thread",
                    draft.thread_id,
                    "checkpoint does not advance",
                    expected=f"> {latest.through_seq}",
                    actual=str(draft.through_seq),
                )
            )
        number = thread.checkpoint_count + 1
        checkpoint = ContextCheckpoint(
            id=CheckpointId(draft.checkpoint_id),
            thread_id=ThreadId(draft.thread_id),
            run_id=AgentRunId(draft.run_id),
            number=number,
            previous_id=None
            if draft.expected_latest_id is None
            else CheckpointId(draft.expected_latest_id),
            summary=draft.summary,
            through_seq=draft.through_seq,
            observed_head_seq=draft.observed_head_seq,
            created_at_ms=draft.at_ms,
        )
        s.checkpoints[draft.checkpoint_id] = checkpoint
        s.checkpoint_numbers[(draft.thread_id, number)] = draft.checkpoint_id
        s.checkpoint_by_run[draft.run_id] = draft.checkpoint_id
        s.threads[draft.thread_id] = attrs.evolve(thread, checkpoint_count=number)
        return Success(checkpoint)

    def latest(self, thread_id: str) -> Result[ContextCheckpoint | None, AgentError]:
        """Return the newest checkpoint or None (see ``CheckpointStore.latest``)."""
        s = self._s
        checked = check_id("thread_id", thread_id)
        if isinstance(checked, Failure):
            return checked
        thread = s.threads.get(thread_id)
        if thread is None:
            return Failure(NotFound("thread", thread_id))
        latest_id = s.checkpoint_numbers.get((thread_id, thread.checkpoint_count))
        return Success(None if latest_id is None else s.checkpoints[latest_id])


class InMemoryAgentStorage:
    """The four agent stores in memory; see :class:`~runstore.services.agents.AgentStorage`.

    ``executions`` is the ledger runs are checked against (the container's in-memory one).
    """

    message_store_class: type[InMemoryMessageStore] = InMemoryMessageStore
    """The message store to build (a test may swap in a deliberately broken one)."""

    def __init__(self, db: InMemoryDatabase, clock: Clock, executions: ExecutionStorage) -> None:
        state = _State(db, clock, executions)
        self._state = state
        self._threads = InMemoryThreadStore(state)
        self._runs = InMemoryAgentRunStore(state)
        self._messages = self.message_store_class(state)
        self._checkpoints = InMemoryCheckpointStore(state)

    @property
    def threads(self) -> InMemoryThreadStore:
        """The thread store."""
        return self._threads

    @property
    def runs(self) -> InMemoryAgentRunStore:
        """The run store."""
        return self._runs

    @property
    def messages(self) -> InMemoryMessageStore:
        """The message store."""
        return self._messages

    @property
    def checkpoints(self) -> InMemoryCheckpointStore:
        """The checkpoint store."""
        return self._checkpoints


def _typed(db: InMemoryDatabase, clock: Clock, executions: ExecutionStorage) -> AgentStorage:
    """Checked by mypy: the in-memory layer satisfies the Protocol."""
    return InMemoryAgentStorage(db, clock, executions)


def in_memory_agent_storage() -> Layer:
    """A layer providing :class:`~runstore.services.agents.AgentStorage` in memory; requires
    the container's :class:`InMemoryDatabase`, a ``Clock`` and an ``ExecutionStorage``."""

    def factory(c: Container) -> AgentStorage:
        return _typed(c.get(InMemoryDatabase), c.get(Clock), c.get(ExecutionStorage))

    return Layer.service(
        AgentStorage,  # type: ignore[type-abstract]
        factory,
        requires=(InMemoryDatabase, Clock, ExecutionStorage),
    )
