"""The in-memory :class:`~runstore.services.action_runs.ActionRunStorage`.

Rows live in :class:`~runstore.layers.TxDict` mirrors of the shared :class:`InMemoryDatabase`
in the live layer's at-rest form (JSON as text), and ``queue``/``requeue`` consult the
:class:`ExecutionStorage` of the same database inside their unit of work.
"""

from __future__ import annotations

import attrs
from returns.result import Failure, Result, Success

from runstore.layers._executions_memory import in_memory_execution_storage
from runstore.layers._layer import Container, Layer, merge
from runstore.layers._memory_database import InMemoryDatabase
from runstore.layers._unit_of_work import TxDict
from runstore.services.action_runs import (
    ActionRun,
    ActionRunError,
    ActionRunFailure,
    ActionRunId,
    ActionRunPhase,
    ActionRunStatus,
    ActionRunStorage,
    NewActionRun,
    PhaseFailed,
    PhaseOutcome,
    PhaseStatus,
    check_finish_args,
    check_new_action_run,
    check_outcome,
    check_step,
    dump_run_failure,
    load_run_failure,
    parse_run_status,
    phase_record,
    with_phase,
)
from runstore.services.clock import Clock
from runstore.services.errors import Conflict, NotFound
from runstore.services.executions import (
    DEFAULT_LIMIT,
    ExecutionError,
    ExecutionFinished,
    ExecutionId,
    ExecutionStorage,
    ProjectMismatch,
    StaleFencingToken,
    check_listing,
    check_text,
    dump_json,
    load_json,
    make_page,
)
from runstore.services.pagination import Page

__all__ = ["InMemoryActionRunStorage", "in_memory_action_run_storage", "in_memory_execution_ledger"]


@attrs.frozen
class _Row:
    """One action run as the live layer stores it (JSON values as text)."""

    id: ActionRunId
    project_id: str
    execution_id: ExecutionId
    action_id: str
    status: ActionRunStatus
    phase: ActionRunPhase
    seq: int
    input: str
    attempt: int
    queued_at_ms: int
    started_at_ms: int | None = None
    finished_at_ms: int | None = None
    writeback_status: str | None = None
    writeback_completed_at_ms: int | None = None
    writeback_result: str | None = None
    writeback_failure: str | None = None
    effects_status: str | None = None
    effects_completed_at_ms: int | None = None
    effects_failure: str | None = None
    failure: str | None = None

    @property
    def state(self) -> tuple[str, str]:
        return (self.status.value, self.phase.value)

    def record(self) -> ActionRun:
        return ActionRun(
            id=self.id,
            project_id=self.project_id,
            execution_id=self.execution_id,
            action_id=self.action_id,
            status=self.status,
            phase=self.phase,
            seq=self.seq,
            input=load_json(self.input),
            attempt=self.attempt,
            queued_at_ms=self.queued_at_ms,
            started_at_ms=self.started_at_ms,
            finished_at_ms=self.finished_at_ms,
            writeback=phase_record(
                self.writeback_status,
                self.writeback_completed_at_ms,
                self.writeback_result,
                self.writeback_failure,
            ),
            effects=phase_record(
                self.effects_status, self.effects_completed_at_ms, None, self.effects_failure
            ),
            failure=load_run_failure(self.failure),
        )


class InMemoryActionRunStorage:
    """:class:`ActionRunStorage` kept in the mirrors of one :class:`InMemoryDatabase`."""

    def __init__(self, db: InMemoryDatabase, clock: Clock, executions: ExecutionStorage) -> None:
        self._db = db
        self._clock = clock
        self._executions = executions
        self._rows: TxDict[str, _Row] = db.mirror()
        self._counters: TxDict[str, int] = db.mirror()

    def _put(self, row: _Row) -> ActionRun:
        self._rows[row.id] = row
        return row.record()

    def _state(self, run_id: str) -> tuple[str, str] | None:
        row = self._rows.get(run_id)
        return None if row is None else row.state

    # -- reads ---------------------------------------------------------------------------------

    def get(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.get`; ``InvalidInput`` for an id that is not valid text."""
        problem = check_text(run_id, "run_id")
        if problem is not None:
            return Failure(problem)
        row = self._rows.get(run_id)
        if row is None:
            return Failure(NotFound("action_run", run_id))
        return Success(row.record())

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
        if execution_id is not None:
            problem = check_text(execution_id, "execution_id")
            if problem is not None:
                return Failure(problem)
        wanted = parse_run_status(status)
        if isinstance(wanted, Failure):
            return Failure(wanted.failure())
        checked = check_listing(project_id, limit, cursor, "a")
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        size, after = checked.unwrap()
        only = wanted.unwrap()
        rows = sorted(
            (
                r
                for r in self._rows.values()
                if r.project_id == project_id
                and r.seq > after
                and (execution_id is None or r.execution_id == execution_id)
                and (only is None or r.status is only)
            ),
            key=lambda r: r.seq,
        )[: size + 1]
        return Success(make_page([r.record() for r in rows], size, "a", lambda run: run.seq))

    # -- writes --------------------------------------------------------------------------------

    def _open_execution(self, project_id: str, execution_id: ExecutionId) -> ActionRunError | None:
        got = self._executions.get(execution_id)
        if isinstance(got, Failure):
            error: ExecutionError = got.failure()
            if isinstance(error, StaleFencingToken):  # pragma: no cover - get never returns it
                raise TypeError("ExecutionStorage.get returned StaleFencingToken")
            return error
        execution = got.unwrap()
        if execution.project_id != project_id:
            return ProjectMismatch("execution", execution_id, project_id, execution.project_id)
        if execution.status.is_finished:
            return ExecutionFinished(execution_id, execution.status.value)
        return None

    def queue(self, new: NewActionRun) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.queue`."""
        problem = check_new_action_run(new)
        if problem is not None:
            return Failure(problem)

        def queue() -> Result[ActionRun, ActionRunError]:
            closed = self._open_execution(new.project_id, new.execution_id)
            if closed is not None:
                return Failure(closed)
            if new.id is not None and new.id in self._rows:
                return Failure(Conflict("action_run", new.id, "an action run with this id exists"))
            seq = (self._counters.get("action_run_seq") or 0) + 1
            self._counters["action_run_seq"] = seq
            return Success(
                self._put(
                    _Row(
                        id=new.id if new.id is not None else ActionRunId(f"act_{seq}"),
                        project_id=new.project_id,
                        execution_id=new.execution_id,
                        action_id=new.action_id,
                        status=ActionRunStatus.QUEUED,
                        phase=ActionRunPhase.QUEUED,
                        seq=seq,
                        input=dump_json(new.input),
                        attempt=1,
                        queued_at_ms=self._clock.now_ms(),
                    )
                )
            )

        return self._db.transact("queue action run", queue)

    def requeue(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.requeue`."""
        problem = check_text(run_id, "run_id")
        if problem is not None:
            return Failure(problem)

        def requeue() -> Result[ActionRun, ActionRunError]:
            error = check_step(run_id, self._state(run_id), "queued")
            if error is not None:
                return Failure(error)
            row = self._rows[run_id]
            closed = self._open_execution(row.project_id, row.execution_id)
            if closed is not None:
                return Failure(closed)
            return Success(
                self._put(
                    _Row(
                        id=row.id,
                        project_id=row.project_id,
                        execution_id=row.execution_id,
                        action_id=row.action_id,
                        status=ActionRunStatus.QUEUED,
                        phase=ActionRunPhase.QUEUED,
                        seq=row.seq,
                        input=row.input,
                        attempt=row.attempt + 1,
                        queued_at_ms=self._clock.now_ms(),
                    )
                )
            )

        return self._db.transact("requeue action run", requeue)

    def start(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.start`."""
        problem = check_text(run_id, "run_id")
        if problem is not None:
            return Failure(problem)

        def start() -> Result[ActionRun, ActionRunError]:
            error = check_step(run_id, self._state(run_id), "running")
            if error is not None:
                return Failure(error)
            return Success(
                self._put(
                    attrs.evolve(
                        self._rows[run_id],
                        status=ActionRunStatus.RUNNING,
                        phase=ActionRunPhase.RUNNING,
                        started_at_ms=self._clock.now_ms(),
                    )
                )
            )

        return self._db.transact("start action run", start)

    def record_writeback(
        self, run_id: ActionRunId, outcome: PhaseOutcome
    ) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.record_writeback`."""
        problem = check_text(run_id, "run_id")
        if problem is not None:
            return Failure(problem)
        checked = check_outcome(outcome, ActionRunPhase.WRITEBACK)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        done = checked.unwrap()

        def writeback() -> Result[ActionRun, ActionRunError]:
            error = check_step(run_id, self._state(run_id), "writeback")
            if error is not None:
                return Failure(error)
            failed = isinstance(done, PhaseFailed)
            return Success(
                self._put(
                    attrs.evolve(
                        self._rows[run_id],
                        phase=ActionRunPhase.WRITEBACK,
                        writeback_status=(
                            PhaseStatus.FAILED if failed else PhaseStatus.SUCCEEDED
                        ).value,
                        writeback_completed_at_ms=self._clock.now_ms(),
                        writeback_result=None
                        if isinstance(done, PhaseFailed)
                        else dump_json(done.result),
                        writeback_failure=dump_run_failure(done.failure)
                        if isinstance(done, PhaseFailed)
                        else None,
                    )
                )
            )

        return self._db.transact("record action run writeback", writeback)

    def record_effects(
        self, run_id: ActionRunId, outcome: PhaseOutcome
    ) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.record_effects`."""
        problem = check_text(run_id, "run_id")
        if problem is not None:
            return Failure(problem)
        checked = check_outcome(outcome, ActionRunPhase.EFFECTS)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        done = checked.unwrap()

        def effects() -> Result[ActionRun, ActionRunError]:
            error = check_step(run_id, self._state(run_id), "effects")
            if error is not None:
                return Failure(error)
            failed = isinstance(done, PhaseFailed)
            return Success(
                self._put(
                    attrs.evolve(
                        self._rows[run_id],
                        phase=ActionRunPhase.EFFECTS,
                        effects_status=(
                            PhaseStatus.FAILED if failed else PhaseStatus.SUCCEEDED
                        ).value,
                        effects_completed_at_ms=self._clock.now_ms(),
                        effects_failure=dump_run_failure(done.failure)
                        if isinstance(done, PhaseFailed)
                        else None,
                    )
                )
            )

        return self._db.transact("record action run effects", effects)

    def finish(
        self,
        run_id: ActionRunId,
        status: ActionRunStatus,
        failure: ActionRunFailure | None = None,
    ) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.finish`."""
        problem = check_text(run_id, "run_id")
        if problem is not None:
            return Failure(problem)
        checked = check_finish_args(status, failure)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        target, given = checked.unwrap()

        def finish() -> Result[ActionRun, ActionRunError]:
            error = check_step(run_id, self._state(run_id), target.value)
            if error is not None:
                return Failure(error)
            row = self._rows[run_id]
            return Success(
                self._put(
                    attrs.evolve(
                        row,
                        status=target,
                        phase=ActionRunPhase.FINISHED,
                        finished_at_ms=self._clock.now_ms(),
                        failure=dump_run_failure(with_phase(given, row.phase.value)),
                    )
                )
            )

        return self._db.transact("finish action run", finish)


def _typed(db: InMemoryDatabase, clock: Clock, executions: ExecutionStorage) -> ActionRunStorage:
    return InMemoryActionRunStorage(db, clock, executions)


def in_memory_action_run_storage() -> Layer:
    """A layer providing the in-memory :class:`ActionRunStorage`; requires the in-memory
    database, the clock and the execution ledger of that database."""

    def factory(c: Container) -> ActionRunStorage:
        return _typed(c.get(InMemoryDatabase), c.get(Clock), c.get(ExecutionStorage))

    return Layer.service(
        ActionRunStorage,  # type: ignore[type-abstract]
        factory,
        requires=(InMemoryDatabase, Clock, ExecutionStorage),
    )


def in_memory_execution_ledger() -> Layer:
    """The in-memory execution ledger: :class:`ExecutionStorage` and :class:`ActionRunStorage`
    on the container's :class:`InMemoryDatabase` (requires it and a :class:`Clock`)."""
    return merge(in_memory_execution_storage(), in_memory_action_run_storage())
