"""The in-memory agent stores: the reference the contract suite compares every layer with.

All state lives in :class:`~runstore.layers.TxDict` mirrors of the container's
:class:`InMemoryDatabase`, and every write runs as one of its units of work, so a write that
fails (a ``Failure`` or an exception half-way) leaves every mirror as it was: exactly what a
rolled-back SQLite transaction does to the rows.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import attrs
from returns.result import Failure, Result, Success

from runstore.layers._agents_shared import (
    AgentRunStoreBase,
    CheckpointStoreBase,
    MessageRemovalBase,
    ThreadStoreBase,
)
from runstore.layers._layer import Container, Layer
from runstore.layers._memory_database import InMemoryDatabase
from runstore.layers._tags import AGENT_STORAGE
from runstore.layers._unit_of_work import TxDict
from runstore.services import _agents_rules as rules
from runstore.services.agents import (
    AgentError,
    AgentRunStatus,
    AgentStorage,
    ContextCheckpoint,
    Message,
    NewMessage,
    ThreadId,
)
from runstore.services.clock import Clock
from runstore.services.errors import NotFound
from runstore.services.ledger import ExecutionStorage
from runstore.services.pagination import Page

__all__ = [
    "InMemoryAgentRunStore",
    "InMemoryAgentStorage",
    "InMemoryCheckpointStore",
    "InMemoryMessageStore",
    "InMemoryThreadStore",
    "in_memory_agents",
]


class _State:
    """Every mirror of one in-memory agent storage: the rows of the rules module, by key."""

    def __init__(self, db: InMemoryDatabase, clock: Clock, executions: ExecutionStorage) -> None:
        self.db = db
        self.clock = clock
        self.executions = executions
        self.threads: TxDict[str, rules.ThreadRow] = db.mirror()
        self.runs: TxDict[str, rules.RunRow] = db.mirror()
        self.messages: TxDict[tuple[str, int], rules.MessageDraft] = db.mirror()
        self.checkpoints: TxDict[str, ContextCheckpoint] = db.mirror()
        self.checkpoint_numbers: TxDict[tuple[str, int], str] = db.mirror()
        self.checkpoint_by_run: TxDict[str, str] = db.mirror()
        self.counters: TxDict[str, int] = db.mirror()
        self.client_ids: TxDict[tuple[str, str], int] = db.mirror()

    def drop_message(self, thread_id: str, seq: int) -> None:
        """Delete message ``seq`` of the thread (if stored) with its client id."""
        row = self.messages.pop((thread_id, seq), None)
        if row is not None and row.client_id is not None:
            self.client_ids.pop((thread_id, row.client_id), None)

    def next(self, name: str) -> int:
        """Take the next value of counter ``name`` (see ``rules.Counter``)."""
        value = self.counters.get(name, 0) + 1
        self.counters[name] = value
        return value

    def put_thread(self, row: rules.ThreadRow) -> None:
        self.threads[row.id] = row

    def put_run(self, row: rules.RunRow) -> None:
        """Store a run row and keep its thread's active run in step with its status."""
        self.runs[row.id] = row
        thread = self.threads[row.thread_id]
        active = row.id if row.status is AgentRunStatus.RUNNING else None
        if active is not None or thread.active_run_id == row.id:
            self.threads[thread.id] = attrs.evolve(thread, active_run_id=active)

    def put_checkpoint(self, checkpoint: ContextCheckpoint) -> None:
        self.checkpoints[checkpoint.id] = checkpoint
        self.checkpoint_numbers[(checkpoint.thread_id, checkpoint.number)] = checkpoint.id
        self.checkpoint_by_run[checkpoint.run_id] = checkpoint.id
        thread = self.threads[checkpoint.thread_id]
        self.threads[thread.id] = attrs.evolve(thread, checkpoint_count=checkpoint.number)

    def latest_checkpoint(self, thread: rules.ThreadRow) -> ContextCheckpoint | None:
        latest_id = self.checkpoint_numbers.get((thread.id, thread.checkpoint_count))
        return None if latest_id is None else self.checkpoints[latest_id]


def _seq(row: rules.ThreadRow | rules.RunRow) -> int:
    return row.seq


def _message(thread_id: str, seq: int, row: rules.MessageDraft) -> Message:
    return row.record(ThreadId(thread_id), seq)


class InMemoryThreadStore(ThreadStoreBase):
    """Threads in memory; see :class:`~runstore.services.agents.ThreadStore`."""

    def __init__(self, state: _State) -> None:
        self._s = state
        self._db = state.db
        self._clock = state.clock

    def _thread_row(self, thread_id: str) -> rules.ThreadRow | None:
        return self._s.threads.get(thread_id)

    def _next(self, name: str) -> int:
        return self._s.next(name)

    def _insert_thread(self, row: rules.ThreadRow) -> None:
        self._s.put_thread(row)

    def _update_thread(self, row: rules.ThreadRow) -> None:
        self._s.put_thread(row)

    def _thread_rows(self, query: rules.ThreadListing) -> list[rules.ThreadRow]:
        rows = sorted((r for r in self._s.threads.values() if query.admits(r)), key=_seq)
        return rows[: query.limit + 1]

    def _delete_thread(self, thread_id: str) -> bool:
        s = self._s
        row = s.threads.get(thread_id)
        if row is None:
            return False
        for seq in range(1, row.head_seq + 1):
            s.drop_message(thread_id, seq)
        for number in range(1, row.checkpoint_count + 1):
            checkpoint = s.checkpoints.pop(s.checkpoint_numbers.pop((thread_id, number)))
            del s.checkpoint_by_run[checkpoint.run_id]
        for run_id in [r.id for r in s.runs.values() if r.thread_id == thread_id]:
            del s.runs[run_id]
        del s.threads[thread_id]
        return True


class InMemoryAgentRunStore(AgentRunStoreBase):
    """Runs in memory; see :class:`~runstore.services.agents.AgentRunStore`."""

    def __init__(self, state: _State) -> None:
        self._s = state
        self._db = state.db
        self._clock = state.clock
        self._executions = state.executions

    def _run_row(self, run_id: str) -> rules.RunRow | None:
        return self._s.runs.get(run_id)

    def _thread_row(self, thread_id: str) -> rules.ThreadRow | None:
        return self._s.threads.get(thread_id)

    def _next(self, name: str) -> int:
        return self._s.next(name)

    def _write_run(self, row: rules.RunRow, *, new: bool) -> None:
        del new  # a dict stores both alike
        self._s.put_run(row)

    def _run_rows(self, run_ids: Sequence[str]) -> list[rules.RunRow]:
        return [row for run_id in run_ids if (row := self._s.runs.get(run_id)) is not None]

    def _thread_runs(self, query: rules.RunListing) -> list[rules.RunRow] | None:
        if query.thread_id not in self._s.threads:
            return None
        rows = sorted((r for r in self._s.runs.values() if query.admits(r)), key=_seq)
        return rows[: query.limit + 1]


class InMemoryMessageStore(
    rules.AppendsOne, MessageRemovalBase[tuple[rules.ThreadRow, tuple[int, ...]]]
):
    """Messages in memory; see :class:`~runstore.services.agents.MessageStore`."""

    def __init__(self, state: _State) -> None:
        self._s = state
        self._db = state.db
        self._clock = state.clock

    def append_many(
        self, thread_id: str, messages: Sequence[NewMessage]
    ) -> Result[tuple[Message, ...], AgentError]:
        """Append messages with consecutive sequence numbers (see ``MessageStore.append_many``)."""
        checked = rules.check_append(thread_id, messages, self._s.clock)
        if isinstance(checked, Failure):
            return checked
        request = checked.unwrap()
        return self._s.db.transact("append messages", lambda: self._append(request))

    def _head(self, thread: rules.ThreadRow) -> int:
        """The counter new sequence numbers follow (a test may break it on purpose)."""
        return thread.head_seq

    def _known(self, thread_id: str, drafts: Sequence[rules.MessageDraft]) -> rules.Known:
        """The thread's stored messages of the drafts' client ids (a test may break it)."""
        s = self._s
        found = {cid: s.client_ids.get((thread_id, cid)) for cid in rules.client_ids(drafts)}
        return {cid: (seq, s.messages[(thread_id, seq)]) for cid, seq in found.items() if seq}

    def _append(self, request: rules.Append) -> Result[tuple[Message, ...], AgentError]:
        s, thread_id, drafts = self._s, request.thread_id, request.drafts
        thread = s.threads.get(thread_id)
        head = None if thread is None else rules.ThreadHead(thread.status, self._head(thread))
        runs = {run_id: s.runs.get(run_id) for run_id in rules.message_run_ids(drafts)}
        decided = rules.decide_append(head, runs, request, self._known(thread_id, drafts))
        if isinstance(decided, Failure):
            return Failure(decided.failure())
        plan = decided.unwrap()
        if plan.head_seq is None:
            return Success(plan.messages)
        assert thread is not None
        s.threads[thread_id] = attrs.evolve(
            thread,
            head_seq=max(thread.head_seq, plan.head_seq),
            message_count=thread.message_count + len(plan.new),
            last_message_at_ms=plan.new[-1][1].at_ms,
            updated_at_ms=request.now_ms,
        )
        for seq, draft in plan.new:
            s.messages[(thread_id, seq)] = draft
            if draft.client_id is not None:
                s.client_ids[(thread_id, draft.client_id)] = seq
        return Success(plan.messages)

    def get(self, thread_id: str, seq: int) -> Result[Message, AgentError]:
        """Return one message (see ``MessageStore.get``)."""
        s = self._s
        checked = rules.check_message_ref(thread_id, seq)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
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
        cursor: str | None = None,
    ) -> Result[Page[Message], AgentError]:
        """Return one page of messages in ascending seq (see ``MessageStore.list``)."""
        query = rules.check_list(thread_id, after_seq, before_seq, roles, limit, cursor)
        if isinstance(query, Failure):
            return Failure(query.failure())
        return self._list(thread_id, query.unwrap())

    def _list(self, thread_id: str, query: rules.ListQuery) -> Result[Page[Message], AgentError]:
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
        return Success(rules.message_page(found, has_more, query))

    def delete_by_run(self, thread_id: str, run_id: str) -> Result[int, AgentError]:
        """Delete the run's messages and recompute counters (see ``MessageStore.delete_by_run``)."""
        s = self._s
        checked = rules.check_delete_by_run(thread_id, run_id)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        now = s.clock.now_ms()

        def unit() -> Result[int, AgentError]:
            thread = s.threads.get(thread_id)
            if thread is None:
                return Failure(NotFound("thread", thread_id))
            run = rules.check_run_in_thread(s.runs.get(run_id), run_id, thread_id)
            if isinstance(run, Failure):
                return Failure(run.failure())
            doomed = [
                seq
                for seq in range(1, thread.head_seq + 1)
                if (row := s.messages.get((thread_id, seq))) is not None and row.run_id == run_id
            ]
            self._remove(thread, doomed, now)
            return Success(len(doomed))

        return s.db.transact("delete messages by run", unit)

    def _remove(self, thread: rules.ThreadRow, seqs: Collection[int], now_ms: int) -> int:
        """Drop messages ``seqs`` of the thread and recount it (nothing when there are none);
        ``head_seq`` stays. Return how many were dropped."""
        s = self._s
        if not seqs:
            return 0
        for seq in seqs:
            s.drop_message(thread.id, seq)
        last = next(
            (
                row.at_ms
                for seq in range(thread.head_seq, 0, -1)
                if (row := s.messages.get((thread.id, seq))) is not None
            ),
            None,
        )
        s.threads[thread.id] = attrs.evolve(
            thread,
            message_count=thread.message_count - len(seqs),
            last_message_at_ms=last,
            updated_at_ms=now_ms,
        )
        return len(seqs)

    def _transcript(
        self, thread_id: str
    ) -> tuple[rules.Transcript, tuple[rules.ThreadRow, tuple[int, ...]] | None]:
        s = self._s
        thread = s.threads.get(thread_id)
        if thread is None:
            return rules.Transcript(None, None, None, None), None
        stored = self._stored(thread)
        latest = s.latest_checkpoint(thread)
        facts = rules.Transcript(
            thread,
            stored[0] if stored else None,
            stored[-1] if stored else None,
            None if latest is None else latest.through_seq,
        )
        return facts, (thread, stored)

    def _stored(self, thread: rules.ThreadRow) -> tuple[int, ...]:
        """The thread's stored sequence numbers, ascending."""
        if not thread.message_count:
            return ()
        messages = self._s.messages
        return tuple(seq for seq in range(1, thread.head_seq + 1) if (thread.id, seq) in messages)

    def _message_at(
        self, thread: tuple[rules.ThreadRow, tuple[int, ...]], thread_id: str, seq: int
    ) -> Message:
        return _message(thread_id, seq, self._s.messages[(thread_id, seq)])

    def _remove_from(
        self,
        thread: tuple[rules.ThreadRow, tuple[int, ...]],
        first: int,
        now_ms: int,
        *,
        whole: bool,
    ) -> int:
        row, stored = thread
        return self._remove(row, stored if whole else (first,), now_ms)


class InMemoryCheckpointStore(CheckpointStoreBase):
    """Checkpoints in memory; see :class:`~runstore.services.agents.CheckpointStore`."""

    def __init__(self, state: _State) -> None:
        self._s = state
        self._db = state.db
        self._clock = state.clock

    def _checkpoint_facts(self, draft: rules.CheckpointDraft) -> rules.CheckpointFacts:
        s = self._s
        thread = s.threads.get(draft.thread_id)
        mine = s.checkpoint_by_run.get(draft.run_id)
        return rules.CheckpointFacts(
            thread=thread,
            run=s.runs.get(draft.run_id),
            mine=None if mine is None else s.checkpoints[mine],
            id_taken=draft.checkpoint_id in s.checkpoints,
            latest=None if thread is None else s.latest_checkpoint(thread),
            first_kept=None if thread is None else self._first_kept(thread, draft.through_seq),
        )

    def _first_kept(self, thread: rules.ThreadRow, through_seq: int) -> tuple[int, str] | None:
        """``(seq, role)`` of the first stored message after ``through_seq``."""
        messages = self._s.messages
        for seq in range(through_seq + 1, thread.head_seq + 1):
            row = messages.get((thread.id, seq))
            if row is not None:
                return seq, row.role
        return None

    def _store_checkpoint(self, checkpoint: ContextCheckpoint) -> None:
        self._s.put_checkpoint(checkpoint)

    def _latest_checkpoint(self, thread_id: str) -> Result[ContextCheckpoint | None, AgentError]:
        found = rules.require_thread(self._s.threads.get(thread_id), thread_id)
        return found.map(self._s.latest_checkpoint)

    def _run_checkpoint(self, run_id: str) -> Result[ContextCheckpoint | None, AgentError]:
        s = self._s
        mine = s.checkpoint_by_run.get(run_id)
        found = rules.require_run(s.runs.get(run_id), run_id)
        return found.map(lambda _: None if mine is None else s.checkpoints[mine])


class InMemoryAgentStorage(
    rules.AgentStores[
        InMemoryThreadStore, InMemoryAgentRunStore, InMemoryMessageStore, InMemoryCheckpointStore
    ]
):
    """The four agent stores in memory; see :class:`~runstore.services.agents.AgentStorage`.

    ``executions`` is the ledger runs are checked against (the container's in-memory one).
    """

    message_store_class: type[InMemoryMessageStore] = InMemoryMessageStore
    """The message store to build (a test may swap in a deliberately broken one)."""

    run_store_class: type[InMemoryAgentRunStore] = InMemoryAgentRunStore
    """The run store to build (likewise)."""

    def __init__(self, db: InMemoryDatabase, clock: Clock, executions: ExecutionStorage) -> None:
        state = _State(db, clock, executions)
        super().__init__(
            InMemoryThreadStore(state),
            self.run_store_class(state),
            self.message_store_class(state),
            InMemoryCheckpointStore(state),
        )


def _typed(db: InMemoryDatabase, clock: Clock, executions: ExecutionStorage) -> AgentStorage:
    """Checked by mypy: the in-memory layer satisfies the Protocol."""
    return InMemoryAgentStorage(db, clock, executions)


def in_memory_agents() -> Layer:
    """A layer providing :class:`~runstore.services.agents.AgentStorage` in memory; requires
    the container's :class:`InMemoryDatabase`, a ``Clock`` and an ``ExecutionStorage``."""

    def factory(c: Container) -> AgentStorage:
        return _typed(c.get(InMemoryDatabase), c.get(Clock), c.get(ExecutionStorage))

    return Layer.service(
        AGENT_STORAGE,
        factory,
        requires=(InMemoryDatabase, Clock, ExecutionStorage),
    )
