"""The method skeleton every ledger backend shares; each backend adds its storage strategy.

Each public method of :class:`ExecutionStorage` and :class:`ActionRunStorage` reads the same
in every backend::

    validate (rules) -> unit of work -> load facts (backend) -> decide (rules)
                     -> apply (backend) -> row to record (rules)

so the skeleton is written here once, over the rules of
:mod:`runstore.services._ledger_rules`, and a backend (in memory, SQLite, a later one) only
implements the abstract hooks: how it finds rows (the facts) and how it writes them. A hook
runs inside the method's unit of work.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from returns.result import Failure, Result, Success

from runstore.services._ledger_rules import (
    ActionRunDraft,
    ActionRunRow,
    Claim,
    CreateFacts,
    DamagedRecord,
    ExecutionDraft,
    Finish,
    Listing,
    PhaseWrite,
    Renew,
    RunCall,
    RunFinish,
    check_action_run_listing,
    check_cancel,
    check_claim,
    check_execution_id,
    check_execution_listing,
    check_finish,
    check_new_action_run,
    check_new_execution,
    check_phase,
    check_renew,
    check_run_call,
    check_run_finish,
    check_run_id,
    damaged,
    decide_cancel,
    decide_create,
    decide_fence,
    decide_held,
    decide_new_run,
    decide_phase,
    decide_requeue,
    decide_run,
    decide_step,
    final_failure_json,
    oldest,
)
from runstore.services._primitives import and_then
from runstore.services.clock import Clock
from runstore.services.errors import Busy, InvalidInput, StorageFailure
from runstore.services.ledger import (
    DEFAULT_LIMIT,
    ActionRun,
    ActionRunError,
    ActionRunFailure,
    ActionRunId,
    ActionRunPhase,
    ActionRunStatus,
    Execution,
    ExecutionError,
    ExecutionFailure,
    ExecutionId,
    ExecutionStatus,
    ExecutionStorage,
    Fence,
    JsonValue,
    NewActionRun,
    NewExecution,
    PhaseOutcome,
)
from runstore.services.pagination import Page

__all__ = ["ActionRunStorageBase", "ExecutionStorageBase"]

T = TypeVar("T")
E = TypeVar("E")
C = TypeVar("C")

_CANCELLED = ExecutionStatus.CANCELLED.value
_RUNNING = ActionRunStatus.RUNNING.value
_FINISHED = ActionRunPhase.FINISHED.value


class _Units(Protocol):
    """The unit-of-work side of ``SqliteDatabase`` and ``InMemoryDatabase``."""

    def transact(
        self, operation: str, fn: Callable[[], Result[T, E]]
    ) -> Result[T, E | Busy | StorageFailure]: ...


class ExecutionStorageBase(ABC):
    """:class:`ExecutionStorage` on a backend's hooks (see the module docstring)."""

    _db: _Units
    _clock: Clock

    # -- hooks: storage and query strategy -----------------------------------------------------

    @abstractmethod
    def _get(self, execution_id: str) -> Result[Execution, ExecutionError]:
        """The execution ``execution_id`` (a checked id), ``NotFound`` when there is none."""

    @abstractmethod
    def _list(self, query: Listing) -> Result[Page[Execution], ExecutionError]:
        """The page ``query`` names (rows fetched as ``limit + 1``, see ``execution_page``)."""

    @abstractmethod
    def _create_facts(self, draft: ExecutionDraft) -> CreateFacts:
        """What :func:`decide_create` needs to know about ``draft`` (only what it names)."""

    @abstractmethod
    def _insert(self, draft: ExecutionDraft) -> Execution:
        """Store ``draft.row(...)`` under the next execution sequence number."""

    @abstractmethod
    def _claimable(self, project_id: str, now_ms: int) -> Iterable[tuple[int, str]]:
        """``(seq, id)`` of the project's claimable executions at ``now_ms`` (at least the
        oldest of them; see :func:`is_claimable`)."""

    @abstractmethod
    def _grant(self, execution_id: str, claim: Claim, now_ms: int) -> Execution:
        """Store the claim of ``execution_id``: running under a lease until
        ``now_ms + claim.lease_ms``, a fresh fencing token, one more attempt."""

    @abstractmethod
    def _state(self, execution_id: str) -> tuple[str, int] | None:
        """The stored ``(status, fencing_token)``, None when there is no such execution."""

    @abstractmethod
    def _extend(self, renew: Renew) -> Execution:
        """Store the renewed lease (``now + renew.lease_ms``)."""

    @abstractmethod
    def _end(
        self, execution_id: str, status: str, failure_json: str | None, output_json: str | None
    ) -> Execution:
        """Store the final ``status`` and failure, the output unless ``output_json`` is None,
        with the lease expiry cleared."""

    # -- the methods of ExecutionStorage -------------------------------------------------------

    def get(self, execution_id: ExecutionId) -> Result[Execution, ExecutionError]:
        """See :meth:`ExecutionStorage.get`; ``InvalidInput`` for an id that is not valid text."""
        return and_then(check_execution_id(execution_id), self._get)

    def list(
        self,
        project_id: str,
        *,
        status: ExecutionStatus | None = None,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
    ) -> Result[Page[Execution], ExecutionError]:
        """See :meth:`ExecutionStorage.list`."""
        return and_then(check_execution_listing(project_id, status, limit, cursor), self._list)

    def create(self, new: NewExecution) -> Result[Execution, ExecutionError]:
        """See :meth:`ExecutionStorage.create`."""
        return and_then(
            check_new_execution(new),
            lambda draft: self._db.transact("create execution", lambda: self._create(draft)),
        )

    def _create(self, draft: ExecutionDraft) -> Result[Execution, ExecutionError]:
        return decide_create(draft, self._create_facts(draft)).map(
            lambda replay: self._insert(draft) if replay is None else replay
        )

    def claim(
        self, project_id: str, owner: str, lease_ms: int
    ) -> Result[Execution | None, ExecutionError]:
        """See :meth:`ExecutionStorage.claim`."""
        return and_then(
            check_claim(project_id, owner, lease_ms),
            lambda claim: self._db.transact("claim execution", lambda: self._claim(claim)),
        )

    def _claim(self, claim: Claim) -> Result[Execution | None, ExecutionError]:
        now = self._clock.now_ms()
        chosen = oldest(self._claimable(claim.project_id, now))
        return Success(None if chosen is None else self._grant(chosen, claim, now))

    def renew(
        self, execution_id: ExecutionId, fencing_token: int, lease_ms: int
    ) -> Result[Execution, ExecutionError]:
        """See :meth:`ExecutionStorage.renew`."""
        return and_then(
            check_renew(execution_id, fencing_token, lease_ms),
            lambda renew: self._db.transact("renew execution lease", lambda: self._renew(renew)),
        )

    def _renew(self, renew: Renew) -> Result[Execution, ExecutionError]:
        state = self._state(renew.execution_id)
        return decide_held(renew.execution_id, state, renew.fencing_token, None).map(
            lambda _: self._extend(renew)
        )

    def finish(
        self,
        execution_id: ExecutionId,
        fencing_token: int,
        status: ExecutionStatus,
        *,
        output: JsonValue = None,
        failure: ExecutionFailure | None = None,
    ) -> Result[Execution, ExecutionError]:
        """See :meth:`ExecutionStorage.finish`."""
        return and_then(
            check_finish(execution_id, fencing_token, status, output, failure),
            lambda finish: self._db.transact("finish execution", lambda: self._finish(finish)),
        )

    def _finish(self, finish: Finish) -> Result[Execution, ExecutionError]:
        state = self._state(finish.execution_id)
        return decide_held(finish.execution_id, state, finish.fencing_token, finish.target).map(
            lambda _: self._end(
                finish.execution_id, finish.target.value, finish.failure_json, finish.output_json
            )
        )

    def cancel(
        self, execution_id: ExecutionId, failure: ExecutionFailure | None = None
    ) -> Result[Execution, ExecutionError]:
        """See :meth:`ExecutionStorage.cancel`."""
        return and_then(
            check_cancel(execution_id, failure),
            lambda checked: self._db.transact("cancel execution", lambda: self._cancel(*checked)),
        )

    def _cancel(
        self, execution_id: str, failure_json: str | None
    ) -> Result[Execution, ExecutionError]:
        state = self._state(execution_id)
        return decide_cancel(execution_id, None if state is None else state[0]).map(
            lambda _: self._end(execution_id, _CANCELLED, failure_json, None)
        )


class ActionRunStorageBase(ABC):
    """:class:`ActionRunStorage` on a backend's hooks (see the module docstring).

    ``_executions`` is the execution ledger of the same database: every write reads the
    execution its fence names through it, inside the write's own unit of work, so the check
    and the write see one snapshot. Each write then loads the facts (the stored run, the
    keyed run), lets the rules decide and applies what they allow; a damaged stored row
    (:class:`DamagedRecord`) comes back as ``StorageFailure(kind=corrupt)``.
    """

    _db: _Units
    _clock: Clock
    _executions: ExecutionStorage

    # -- hooks: storage and query strategy -----------------------------------------------------

    @abstractmethod
    def _get(self, run_id: str) -> Result[ActionRun, ActionRunError]:
        """The run ``run_id`` (a checked id), ``NotFound`` when there is none."""

    @abstractmethod
    def _list(self, query: Listing) -> Result[Page[ActionRun], ActionRunError]:
        """The page ``query`` names (rows fetched as ``limit + 1``, see ``action_run_page``)."""

    @abstractmethod
    def _row(self, run_id: str) -> ActionRunRow | None:
        """The stored run ``run_id`` at rest, None when there is none."""

    @abstractmethod
    def _keyed(self, execution_id: str, idempotency_key: str) -> ActionRunRow | None:
        """The run of ``execution_id`` queued with ``idempotency_key``, None when unused."""

    @abstractmethod
    def _run_exists(self, run_id: str) -> bool:
        """Whether a run has the id ``run_id``."""

    @abstractmethod
    def _insert(self, draft: ActionRunDraft) -> ActionRun:
        """Store ``draft.row(...)`` under the next action-run sequence number."""

    @abstractmethod
    def _update(self, run_id: str, changes: dict[str, Any]) -> ActionRun:
        """Set the at-rest ``changes`` (column -> value) on the stored run ``run_id``."""

    @abstractmethod
    def _requeued(self, run_id: str) -> ActionRun:
        """Store the run queued again (see ``ActionRunRow.requeued``)."""

    # -- the methods of ActionRunStorage -------------------------------------------------------

    def get(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.get`; ``InvalidInput`` for an id that is not valid text."""
        return self._sound("get action run", lambda: and_then(check_run_id(run_id), self._get))

    def list(
        self,
        project_id: str,
        *,
        execution_id: ExecutionId | None = None,
        status: ActionRunStatus | None = None,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
    ) -> Result[Page[ActionRun], ActionRunError]:
        """See :meth:`ActionRunStorage.list`."""
        checked = check_action_run_listing(project_id, execution_id, status, limit, cursor)
        return self._sound("list action runs", lambda: and_then(checked, self._list))

    def queue(self, new: NewActionRun, fence: Fence) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.queue`."""
        return self._write("queue action run", check_new_action_run(new, fence), self._queue)

    def requeue(self, run_id: ActionRunId, fence: Fence) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.requeue`."""
        return self._write("requeue action run", check_run_call(run_id, fence), self._requeue)

    def start(self, run_id: ActionRunId, fence: Fence) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.start`."""
        return self._write("start action run", check_run_call(run_id, fence), self._start)

    def record_writeback(
        self, run_id: ActionRunId, fence: Fence, outcome: PhaseOutcome
    ) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.record_writeback`."""
        checked = check_phase(run_id, fence, outcome, ActionRunPhase.WRITEBACK)
        return self._write("record action run writeback", checked, self._record)

    def record_effects(
        self, run_id: ActionRunId, fence: Fence, outcome: PhaseOutcome
    ) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.record_effects`."""
        checked = check_phase(run_id, fence, outcome, ActionRunPhase.EFFECTS)
        return self._write("record action run effects", checked, self._record)

    def finish(
        self,
        run_id: ActionRunId,
        fence: Fence,
        status: ActionRunStatus,
        failure: ActionRunFailure | None = None,
    ) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.finish`."""
        checked = check_run_finish(run_id, fence, status, failure)
        return self._write("finish action run", checked, self._finish)

    # -- the skeleton: validate -> unit of work -> authorise -> load -> decide -> apply --------

    def _sound(
        self, operation: str, fn: Callable[[], Result[T, ActionRunError]]
    ) -> Result[T, ActionRunError]:
        """``fn()``, with a damaged stored row returned as ``StorageFailure(kind=corrupt)``
        (a write's unit of work has rolled back by then)."""
        try:
            return fn()
        except DamagedRecord as error:
            return Failure(damaged(operation, error))

    def _write(
        self,
        operation: str,
        checked: Result[C, InvalidInput],
        decide: Callable[[C], Result[ActionRun, ActionRunError]],
    ) -> Result[ActionRun, ActionRunError]:
        """Run ``decide(call)`` on the checked call in one unit of work named ``operation``."""
        return self._sound(
            operation,
            lambda: and_then(
                checked, lambda call: self._db.transact(operation, lambda: decide(call))
            ),
        )

    def _authorise(self, fence: Fence, project_id: str | None) -> Result[None, ActionRunError]:
        """Whether the execution ``fence`` names allows the write (see :func:`decide_fence`)."""
        return decide_fence(fence, project_id, self._executions.get(fence.execution_id))

    def _held(self, run_id: str, fence: Fence) -> Result[ActionRunRow, ActionRunError]:
        """The stored run, when the fence is current and the run one of its execution's."""
        allowed = self._authorise(fence, None)
        if isinstance(allowed, Failure):
            return Failure(allowed.failure())
        found = decide_run(run_id, self._row(run_id), fence)
        if isinstance(found, Failure):
            return Failure(found.failure())
        return Success(found.unwrap())

    def _queue(self, draft: ActionRunDraft) -> Result[ActionRun, ActionRunError]:
        new = draft.new
        allowed = self._authorise(draft.fence, new.project_id)
        if isinstance(allowed, Failure):
            return Failure(allowed.failure())
        keyed = None
        if new.idempotency_key is not None:
            keyed = self._keyed(new.execution_id, new.idempotency_key)
        taken = new.id is not None and keyed is None and self._run_exists(new.id)
        decided = decide_new_run(draft, keyed, taken)
        if isinstance(decided, Failure):
            return Failure(decided.failure())
        replay = decided.unwrap()
        return Success(self._insert(draft) if replay is None else replay)

    def _requeue(self, call: RunCall) -> Result[ActionRun, ActionRunError]:
        held = self._held(call.run_id, call.fence)
        if isinstance(held, Failure):
            return Failure(held.failure())
        decided = decide_requeue(call.run_id, held.unwrap())
        if isinstance(decided, Failure):
            return Failure(decided.failure())
        return Success(self._requeued(call.run_id))

    def _start(self, call: RunCall) -> Result[ActionRun, ActionRunError]:
        held = self._held(call.run_id, call.fence)
        if isinstance(held, Failure):
            return Failure(held.failure())
        row = held.unwrap()
        decided = decide_step(call.run_id, (row.status, row.phase), _RUNNING)
        if isinstance(decided, Failure):
            return Failure(decided.failure())
        changes = {"status": _RUNNING, "phase": _RUNNING, "started_at_ms": self._clock.now_ms()}
        return Success(self._update(call.run_id, changes))

    def _record(self, write: PhaseWrite) -> Result[ActionRun, ActionRunError]:
        held = self._held(write.run_id, write.fence)
        if isinstance(held, Failure):
            return Failure(held.failure())
        decided = decide_phase(write, held.unwrap())
        if isinstance(decided, Failure):
            return Failure(decided.failure())
        repeat = decided.unwrap()
        if repeat is not None:
            return Success(repeat)
        return Success(self._update(write.run_id, write.columns(self._clock.now_ms())))

    def _finish(self, finish: RunFinish) -> Result[ActionRun, ActionRunError]:
        held = self._held(finish.run_id, finish.fence)
        if isinstance(held, Failure):
            return Failure(held.failure())
        row = held.unwrap()
        decided = decide_step(finish.run_id, (row.status, row.phase), finish.target.value)
        if isinstance(decided, Failure):
            return Failure(decided.failure())
        changes = {
            "status": finish.target.value,
            "phase": _FINISHED,
            "finished_at_ms": self._clock.now_ms(),
            "failure": final_failure_json(finish.failure, row.phase),
        }
        return Success(self._update(finish.run_id, changes))
