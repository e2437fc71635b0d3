"""The method skeletons every agent backend shares; each backend adds its storage strategy.

The methods of the thread, run and checkpoint stores (and the messages' pop and clear) of
:class:`~runstore.services.agents.AgentStorage` read the same in every backend::

    validate (rules) -> unit of work -> load facts (backend) -> decide (rules)
                     -> apply (backend) -> row to record (rules)

so they are written here once, over :mod:`runstore.services._agents_rules`, and a backend
(in memory, SQLite, a later one) implements only the abstract hooks: how it finds rows, takes
the next value of a counter and writes a run. A hook runs inside the method's unit of work.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Generic, Protocol, TypeVar

from returns.result import Failure, Result, Success

from runstore.services import _agents_rules as rules
from runstore.services._primitives import and_then
from runstore.services.agents import (
    AgentError,
    AgentRun,
    AgentRunFailure,
    AgentRunStatus,
    ContextCheckpoint,
    JsonValue,
    Message,
    Thread,
    ThreadStatus,
)
from runstore.services.clock import Clock
from runstore.services.errors import Busy, NotFound, StorageFailure
from runstore.services.ledger import ExecutionStorage
from runstore.services.pagination import Page

__all__ = ["AgentRunStoreBase", "CheckpointStoreBase", "MessageRemovalBase", "ThreadStoreBase"]

T = TypeVar("T")
E = TypeVar("E")
H = TypeVar("H")


class _Units(Protocol):
    """The unit-of-work side of ``SqliteDatabase`` and ``InMemoryDatabase``."""

    def transact(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]: ...

    def read(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]: ...


class ThreadStoreBase(ABC):
    """:class:`~runstore.services.agents.ThreadStore` on a backend's hooks."""

    _db: _Units
    _clock: Clock

    @abstractmethod
    def _thread_row(self, thread_id: str) -> rules.ThreadRow | None:
        """The stored thread ``thread_id``, None when there is none."""

    @abstractmethod
    def _next(self, name: str) -> int:
        """Take the next value of counter ``name`` (one of ``rules.COUNTERS``)."""

    @abstractmethod
    def _insert_thread(self, row: rules.ThreadRow) -> None:
        """Store a new thread."""

    @abstractmethod
    def _update_thread(self, row: rules.ThreadRow) -> None:
        """Store the new title, metadata, status and ``updated_at_ms`` of a thread."""

    @abstractmethod
    def _delete_thread(self, thread_id: str) -> bool:
        """Delete the thread with every row of it; whether there was one."""

    @abstractmethod
    def _thread_rows(self, query: rules.ThreadListing) -> Sequence[rules.ThreadRow]:
        """The first ``query.limit + 1`` rows the listing admits, in ``seq`` order."""

    def create(
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
        """See ``ThreadStore.create``."""
        checked = rules.check_thread_create(
            thread_id, project_id, title, metadata, agent_id, owner_id, at, self._clock
        )

        def unit(request: rules.ThreadCreate) -> Result[Thread, AgentError]:
            existing = self._thread_row(request.thread_id)
            decided = rules.decide_thread_create(existing, request, self._next)
            return rules.write_decided(decided, self._insert_thread).map(rules.thread_record)

        return and_then(
            checked, lambda request: self._db.transact("create thread", lambda: unit(request))
        )

    def get(self, thread_id: str) -> Result[Thread, AgentError]:
        """See ``ThreadStore.get``."""

        def read(checked: str) -> Result[Thread, AgentError]:
            found = rules.require_thread(self._thread_row(checked), checked)
            return found.map(rules.thread_record)

        return and_then(
            rules.check_id(thread_id, "thread_id"),
            lambda checked: self._db.read("get thread", lambda: read(checked)),
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
        """See ``ThreadStore.update``."""
        checked = rules.check_thread_update(thread_id, title, metadata, status, at, self._clock)

        def unit(request: rules.ThreadUpdate) -> Result[Thread, AgentError]:
            decided = rules.decide_thread_update(self._thread_row(request.thread_id), request)
            return rules.write_decided(decided, self._update_thread).map(rules.thread_record)

        return and_then(
            checked, lambda request: self._db.transact("update thread", lambda: unit(request))
        )

    def delete(self, thread_id: str) -> Result[None, AgentError]:
        """See ``ThreadStore.delete``."""

        def unit(checked: str) -> Result[None, AgentError]:
            if self._delete_thread(checked):
                return Success(None)
            return Failure(NotFound("thread", checked))

        return and_then(
            rules.check_id(thread_id, "thread_id"),
            lambda checked: self._db.transact("delete thread", lambda: unit(checked)),
        )

    def list(
        self,
        project_id: str,
        *,
        agent_id: str | None = None,
        status: ThreadStatus | None = None,
        owner_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Result[Page[Thread], AgentError]:
        """See ``ThreadStore.list``."""
        checked = rules.check_thread_listing(project_id, agent_id, status, owner_id, limit, cursor)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        query = checked.unwrap()
        rows = self._thread_rows
        return self._db.read(
            "list threads", lambda: Success(rules.thread_page(rows(query), query.limit))
        )


class AgentRunStoreBase(ABC):
    """:class:`~runstore.services.agents.AgentRunStore` on a backend's hooks (see the module
    docstring). ``_executions`` is the ledger of the same database, read inside the unit."""

    _db: _Units
    _clock: Clock
    _executions: ExecutionStorage

    # -- hooks: storage and query strategy -----------------------------------------------------

    @abstractmethod
    def _run_row(self, run_id: str) -> rules.RunRow | None:
        """The stored run ``run_id``, None when there is none."""

    @abstractmethod
    def _thread_row(self, thread_id: str) -> rules.ThreadRow | None:
        """The stored thread ``thread_id``, None when there is none."""

    @abstractmethod
    def _next(self, name: str) -> int:
        """Take the next value of counter ``name`` (one of ``rules.COUNTERS``)."""

    @abstractmethod
    def _write_run(self, row: rules.RunRow, *, new: bool) -> None:
        """Store ``row``: a new run (``new``) or the changed state of a stored one; the
        thread's active run follows its status."""

    @abstractmethod
    def _run_rows(self, run_ids: Sequence[str]) -> Sequence[rules.RunRow]:
        """The stored runs among ``run_ids`` (distinct ids), in any order."""

    @abstractmethod
    def _thread_runs(self, query: rules.RunListing) -> Sequence[rules.RunRow] | None:
        """The first ``query.limit + 1`` runs the listing admits in ``seq`` order, or None
        when the thread does not exist."""

    # -- the methods of AgentRunStore ----------------------------------------------------------

    def _write(
        self,
        operation: str,
        decide: Callable[[], Result[rules.Decided[rules.RunRow], AgentError]],
        *,
        new: bool = False,
    ) -> Result[AgentRun, AgentError]:
        """Run ``decide`` in a unit of work and write the row it decided (a ``new`` run, or
        the new state of a stored one)."""

        def unit() -> Result[AgentRun, AgentError]:
            decided = decide()
            return rules.write_decided(decided, lambda row: self._write_run(row, new=new)).map(
                rules.run_record
            )

        return self._db.transact(operation, unit)

    def queue(
        self,
        run_id: str,
        *,
        thread_id: str,
        execution_id: str | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        """See ``AgentRunStore.queue``."""
        checked = rules.check_run_queue(run_id, thread_id, execution_id, at, self._clock)
        return and_then(
            checked, lambda request: self._write("queue agent run", self._queue(request), new=True)
        )

    def start(
        self,
        run_id: str,
        *,
        thread_id: str,
        owner: str,
        lease_ms: int,
        execution_id: str | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        """See ``AgentRunStore.start``."""
        checked = rules.check_run_start(
            run_id, thread_id, owner, lease_ms, execution_id, at, self._clock
        )
        return and_then(
            checked, lambda request: self._write("start agent run", self._queue(request), new=True)
        )

    def _queue(
        self, request: rules.RunQueue
    ) -> Callable[[], Result[rules.Decided[rules.RunRow], AgentError]]:
        return lambda: rules.decide_run_queue(
            self._thread_row(request.thread_id),
            self._run_row(request.run_id),
            request,
            self._executions,
            self._next,
        )

    def claim(self, run_id: str, *, owner: str, lease_ms: int) -> Result[AgentRun, AgentError]:
        """See ``AgentRunStore.claim``."""

        def decide(request: rules.RunClaim) -> Result[rules.Decided[rules.RunRow], AgentError]:
            row = self._run_row(request.run_id)
            thread = None if row is None else self._thread_row(row.thread_id)
            return rules.decide_run_claim(row, thread, request, self._executions, self._next)

        checked = rules.check_run_claim(run_id, owner, lease_ms, self._clock)
        return and_then(
            checked, lambda request: self._write("claim agent run", lambda: decide(request))
        )

    def renew(
        self, run_id: str, *, fencing_token: int, lease_ms: int
    ) -> Result[AgentRun, AgentError]:
        """See ``AgentRunStore.renew``."""
        checked = rules.check_run_renew(run_id, fencing_token, lease_ms, self._clock)
        return and_then(
            checked,
            lambda request: self._write(
                "renew agent run lease",
                lambda: rules.decide_run_renew(self._run_row(request.run_id), request),
            ),
        )

    def reclaim(self, run_id: str, *, owner: str, lease_ms: int) -> Result[AgentRun, AgentError]:
        """See ``AgentRunStore.reclaim``."""
        checked = rules.check_run_claim(run_id, owner, lease_ms, self._clock)
        return and_then(
            checked,
            lambda request: self._write(
                "reclaim agent run",
                lambda: rules.decide_run_reclaim(
                    self._run_row(request.run_id), request, self._next
                ),
            ),
        )

    def finish(
        self,
        run_id: str,
        *,
        fencing_token: int,
        status: AgentRunStatus,
        failure: AgentRunFailure | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        """See ``AgentRunStore.finish``."""
        checked = rules.check_run_finish(run_id, fencing_token, status, failure, at, self._clock)
        return and_then(checked, lambda request: self._end("finish agent run", request))

    def cancel(
        self,
        run_id: str,
        *,
        failure: AgentRunFailure | None = None,
        at: datetime | int | None = None,
    ) -> Result[AgentRun, AgentError]:
        """See ``AgentRunStore.cancel``."""
        checked = rules.check_run_cancel(run_id, failure, at, self._clock)
        return and_then(checked, lambda request: self._end("cancel agent run", request))

    def _end(self, operation: str, request: rules.RunFinish) -> Result[AgentRun, AgentError]:
        return self._write(
            operation, lambda: rules.decide_run_finish(self._run_row(request.run_id), request)
        )

    def get(self, run_id: str) -> Result[AgentRun, AgentError]:
        """See ``AgentRunStore.get``."""

        def read(checked: str) -> Result[AgentRun, AgentError]:
            return self._db.read(
                "get agent run",
                lambda: rules.require_run(self._run_row(checked), checked).map(rules.run_record),
            )

        return and_then(rules.check_id(run_id, "run_id"), read)

    def get_many(self, run_ids: Sequence[str]) -> Result[tuple[AgentRun, ...], AgentError]:
        """See ``AgentRunStore.get_many``."""
        checked = rules.check_run_ids(run_ids)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        ids = checked.unwrap()
        return self._db.read(
            "get agent runs", lambda: Success(rules.runs_in_order(ids, self._run_rows(ids)))
        )

    def list(
        self,
        thread_id: str,
        *,
        status: AgentRunStatus | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Result[Page[AgentRun], AgentError]:
        """See ``AgentRunStore.list``."""
        checked = rules.check_run_listing(thread_id, status, limit, cursor)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        query = checked.unwrap()

        def read() -> Result[Page[AgentRun], AgentError]:
            rows = self._thread_runs(query)
            if rows is None:
                return Failure(NotFound("thread", query.thread_id))
            return Success(rules.run_page(rows, query.limit))

        return self._db.read("list agent runs", read)


class MessageRemovalBase(ABC, Generic[H]):
    """``MessageStore.pop`` and ``MessageStore.clear`` on a backend's hooks: check the id,
    then in one unit of work read the transcript's facts (backend), decide
    (``rules.decide_removal``) and remove (backend). ``H`` is the backend's handle on the
    thread (its row key, or its row and stored sequence numbers)."""

    _db: _Units
    _clock: Clock

    @abstractmethod
    def _transcript(self, thread_id: str) -> tuple[rules.Transcript, H | None]:
        """The facts a removal is decided on, and the handle on the thread (None: none)."""

    @abstractmethod
    def _message_at(self, thread: H, thread_id: str, seq: int) -> Message | None:
        """The stored message ``seq`` of the thread (read before a pop removes it)."""

    @abstractmethod
    def _remove_from(self, thread: H, first: int, now_ms: int, *, whole: bool) -> int:
        """Remove message ``first`` (a pop), or every message of the thread (``whole``:
        ``first`` is the lowest), and recount the thread; return how many were removed."""

    def _removing(
        self, operation: str, unit: Callable[[], Result[T, AgentError]]
    ) -> Result[T, AgentError]:
        """Run ``unit`` as the write unit ``operation`` (a backend may translate what it
        raises)."""
        return self._db.transact(operation, unit)

    def _decided(self, thread_id: str, *, whole: bool) -> Result[tuple[H, int | None], AgentError]:
        facts, thread = self._transcript(thread_id)
        decided = rules.decide_removal(facts, thread_id, whole=whole)
        if isinstance(decided, Failure):
            return Failure(decided.failure())
        assert thread is not None  # decide_removal found it
        return Success((thread, decided.unwrap()))

    def pop(self, thread_id: str) -> Result[Message | None, AgentError]:
        """Remove and return the newest message (see ``MessageStore.pop``)."""
        checked = rules.check_thread_id(thread_id)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        now = self._clock.now_ms()

        def unit() -> Result[Message | None, AgentError]:
            decided = self._decided(thread_id, whole=False)
            if isinstance(decided, Failure):
                return Failure(decided.failure())
            thread, seq = decided.unwrap()
            if seq is None:
                return Success(None)
            popped = self._message_at(thread, thread_id, seq)
            self._remove_from(thread, seq, now, whole=False)
            return Success(popped)

        return self._removing("pop message", unit)

    def clear(self, thread_id: str) -> Result[int, AgentError]:
        """Remove every message of the thread (see ``MessageStore.clear``)."""
        checked = rules.check_thread_id(thread_id)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        now = self._clock.now_ms()

        def unit() -> Result[int, AgentError]:
            decided = self._decided(thread_id, whole=True)
            if isinstance(decided, Failure):
                return Failure(decided.failure())
            thread, first = decided.unwrap()
            if first is None:
                return Success(0)
            return Success(self._remove_from(thread, first, now, whole=True))

        return self._removing("clear messages", unit)


class CheckpointStoreBase(ABC):
    """:class:`~runstore.services.agents.CheckpointStore` on a backend's hooks."""

    _db: _Units
    _clock: Clock

    @abstractmethod
    def _checkpoint_facts(self, draft: rules.CheckpointDraft) -> rules.CheckpointFacts:
        """What :func:`decide_checkpoint` needs to know about ``draft``."""

    @abstractmethod
    def _store_checkpoint(self, checkpoint: ContextCheckpoint) -> None:
        """Store a new checkpoint and make it its thread's latest (``checkpoint_count``)."""

    @abstractmethod
    def _latest_checkpoint(self, thread_id: str) -> Result[ContextCheckpoint | None, AgentError]:
        """The thread's latest checkpoint (None for none), ``NotFound("thread")``."""

    @abstractmethod
    def _run_checkpoint(self, run_id: str) -> Result[ContextCheckpoint | None, AgentError]:
        """The checkpoint the run created (None for none), ``NotFound("agent_run")``."""

    def create(
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
        """See ``CheckpointStore.create``."""
        checked = rules.check_checkpoint(
            checkpoint_id,
            thread_id,
            run_id,
            fencing_token,
            summary,
            through_seq,
            observed_head_seq,
            expected_latest_id,
            at,
            self._clock,
            reason,
            format_version,
            tokens_before,
            tokens_after,
            summary_model,
        )

        def unit(draft: rules.CheckpointDraft) -> Result[ContextCheckpoint, AgentError]:
            decided = rules.decide_checkpoint(self._checkpoint_facts(draft), draft)
            return rules.write_decided(decided, self._store_checkpoint)

        return and_then(
            checked, lambda draft: self._db.transact("create checkpoint", lambda: unit(draft))
        )

    def latest(self, thread_id: str) -> Result[ContextCheckpoint | None, AgentError]:
        """See ``CheckpointStore.latest``."""
        return and_then(
            rules.check_id(thread_id, "thread_id"),
            lambda checked: self._db.read(
                "latest checkpoint", lambda: self._latest_checkpoint(checked)
            ),
        )

    def for_run(self, run_id: str) -> Result[ContextCheckpoint | None, AgentError]:
        """See ``CheckpointStore.for_run``."""
        return and_then(
            rules.check_id(run_id, "run_id"),
            lambda checked: self._db.read(
                "checkpoint of run", lambda: self._run_checkpoint(checked)
            ),
        )
