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

from returns.result import Result, Success

from runstore.services._ledger_rules import (
    ActionRunDraft,
    Claim,
    CreateFacts,
    ExecutionDraft,
    Finish,
    Listing,
    PhaseWrite,
    Renew,
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
    check_run_finish,
    check_run_id,
    decide_cancel,
    decide_create,
    decide_held,
    decide_new_run,
    decide_queue,
    decide_step,
    oldest,
)
from runstore.services._primitives import and_then
from runstore.services.clock import Clock
from runstore.services.errors import Busy, StorageFailure
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
    JsonValue,
    NewActionRun,
    NewExecution,
    PhaseOutcome,
)
from runstore.services.pagination import Page

__all__ = ["ActionRunStorageBase", "ExecutionStorageBase"]

T = TypeVar("T")
E = TypeVar("E")

_CANCELLED = ExecutionStatus.CANCELLED.value
_QUEUED = ActionRunStatus.QUEUED.value


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

    ``_executions`` is the execution ledger of the same database: ``queue`` and ``requeue``
    read the execution through it inside their own unit of work.
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
    def _run_exists(self, run_id: str) -> bool:
        """Whether a run has the id ``run_id``."""

    @abstractmethod
    def _insert(self, draft: ActionRunDraft) -> ActionRun:
        """Store ``draft.row(...)`` under the next action-run sequence number."""

    @abstractmethod
    def _requeue_facts(self, run_id: str) -> tuple[tuple[str, str], str, str] | None:
        """The run's stored ``((status, phase), project_id, execution_id)``, or None."""

    @abstractmethod
    def _requeued(self, run_id: str) -> ActionRun:
        """Store the run queued again (see ``ActionRunRow.requeued``)."""

    @abstractmethod
    def _start(self, run_id: str) -> Result[ActionRun, ActionRunError]:
        """Start the run if :func:`decide_step` allows ``running``, else say why."""

    @abstractmethod
    def _record(self, write: PhaseWrite) -> Result[ActionRun, ActionRunError]:
        """Store ``write`` if :func:`decide_step` allows its phase, else say why."""

    @abstractmethod
    def _finish(self, finish: RunFinish) -> Result[ActionRun, ActionRunError]:
        """Finish the run if :func:`decide_step` allows the target, else say why (the stored
        failure from :func:`final_failure_json` with the run's phase)."""

    # -- the methods of ActionRunStorage -------------------------------------------------------

    def get(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.get`; ``InvalidInput`` for an id that is not valid text."""
        return and_then(check_run_id(run_id), self._get)

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
        return and_then(checked, self._list)

    def _open_execution(
        self, project_id: str, execution_id: ExecutionId
    ) -> Result[None, ActionRunError]:
        """Whether a run of ``project_id`` may be queued in ``execution_id`` now."""
        return decide_queue(project_id, execution_id, self._executions.get(execution_id))

    def queue(self, new: NewActionRun) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.queue`."""
        return and_then(
            check_new_action_run(new),
            lambda draft: self._db.transact("queue action run", lambda: self._queue(draft)),
        )

    def _queue(self, draft: ActionRunDraft) -> Result[ActionRun, ActionRunError]:
        new = draft.new
        return (
            self._open_execution(new.project_id, new.execution_id)
            .bind(lambda _: decide_new_run(new.id, new.id is not None and self._run_exists(new.id)))
            .map(lambda _: self._insert(draft))
        )

    def requeue(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.requeue`."""
        return and_then(
            check_run_id(run_id),
            lambda checked: self._db.transact("requeue action run", lambda: self._requeue(checked)),
        )

    def _requeue(self, run_id: str) -> Result[ActionRun, ActionRunError]:
        facts = self._requeue_facts(run_id)
        stepped: Result[Any, ActionRunError] = decide_step(
            run_id, None if facts is None else facts[0], _QUEUED
        )
        return stepped.bind(lambda _: self._requeue_allowed(run_id, facts))

    def _requeue_allowed(
        self, run_id: str, facts: tuple[tuple[str, str], str, str] | None
    ) -> Result[ActionRun, ActionRunError]:
        assert facts is not None  # decide_step refused a missing run
        return self._open_execution(facts[1], ExecutionId(facts[2])).map(
            lambda _: self._requeued(run_id)
        )

    def start(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.start`."""
        return and_then(
            check_run_id(run_id),
            lambda checked: self._db.transact("start action run", lambda: self._start(checked)),
        )

    def record_writeback(
        self, run_id: ActionRunId, outcome: PhaseOutcome
    ) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.record_writeback`."""
        return self._phase("record action run writeback", run_id, outcome, ActionRunPhase.WRITEBACK)

    def record_effects(
        self, run_id: ActionRunId, outcome: PhaseOutcome
    ) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.record_effects`."""
        return self._phase("record action run effects", run_id, outcome, ActionRunPhase.EFFECTS)

    def _phase(
        self, operation: str, run_id: str, outcome: PhaseOutcome, phase: ActionRunPhase
    ) -> Result[ActionRun, ActionRunError]:
        return and_then(
            check_phase(run_id, outcome, phase),
            lambda write: self._db.transact(operation, lambda: self._record(write)),
        )

    def finish(
        self,
        run_id: ActionRunId,
        status: ActionRunStatus,
        failure: ActionRunFailure | None = None,
    ) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.finish`."""
        return and_then(
            check_run_finish(run_id, status, failure),
            lambda finish: self._db.transact("finish action run", lambda: self._finish(finish)),
        )
