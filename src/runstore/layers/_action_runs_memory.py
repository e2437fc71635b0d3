"""The in-memory :class:`~runstore.services.action_runs.ActionRunStorage`.

Rows live in :class:`~runstore.layers.TxDict` mirrors of the shared :class:`InMemoryDatabase`
in the live layer's at-rest form (:class:`ActionRunRow`, JSON as text), and
``queue``/``requeue`` consult the :class:`ExecutionStorage` of the same database inside their
unit of work. The rules live in :mod:`runstore.services._ledger_rules`.
"""

from __future__ import annotations

from returns.result import Failure, Result, Success

from runstore.layers._executions_memory import in_memory_execution_storage
from runstore.layers._layer import Container, Layer, merge
from runstore.layers._memory_database import InMemoryDatabase
from runstore.layers._tags import ACTION_RUN_STORAGE
from runstore.layers._unit_of_work import TxDict
from runstore.services._ledger_rules import (
    ActionRunDraft,
    ActionRunRow,
    Listing,
    PhaseWrite,
    RunFinish,
    action_run_page,
    action_run_record,
    check_action_run_listing,
    check_new_action_run,
    check_phase,
    check_run_finish,
    check_run_id,
    decide_new_run,
    decide_queue,
    decide_step,
    final_failure_json,
)
from runstore.services._primitives import and_then
from runstore.services.action_runs import (
    ActionRun,
    ActionRunError,
    ActionRunFailure,
    ActionRunId,
    ActionRunPhase,
    ActionRunStatus,
    ActionRunStorage,
    NewActionRun,
    PhaseOutcome,
)
from runstore.services.clock import Clock
from runstore.services.errors import NotFound
from runstore.services.executions import DEFAULT_LIMIT, ExecutionId, ExecutionStorage
from runstore.services.pagination import Page

__all__ = ["InMemoryActionRunStorage", "in_memory_action_run_storage", "in_memory_execution_ledger"]

_QUEUED = ActionRunStatus.QUEUED.value
_RUNNING = ActionRunStatus.RUNNING.value
_FINISHED = ActionRunPhase.FINISHED.value


class InMemoryActionRunStorage:
    """:class:`ActionRunStorage` kept in the mirrors of one :class:`InMemoryDatabase`."""

    def __init__(self, db: InMemoryDatabase, clock: Clock, executions: ExecutionStorage) -> None:
        self._db = db
        self._clock = clock
        self._executions = executions
        self._rows: TxDict[str, ActionRunRow] = db.mirror()
        self._counters: TxDict[str, int] = db.mirror()

    def _put(self, row: ActionRunRow) -> ActionRun:
        self._rows[row.id] = row
        return action_run_record(row)

    def _state(self, run_id: str) -> tuple[str, str] | None:
        row = self._rows.get(run_id)
        return None if row is None else (row.status, row.phase)

    # -- reads ---------------------------------------------------------------------------------

    def get(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.get`; ``InvalidInput`` for an id that is not valid text."""
        return and_then(check_run_id(run_id), self._get)

    def _get(self, run_id: str) -> Result[ActionRun, ActionRunError]:
        row = self._rows.get(run_id)
        if row is None:
            return Failure(NotFound("action_run", run_id))
        return Success(action_run_record(row))

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

    def _list(self, query: Listing) -> Result[Page[ActionRun], ActionRunError]:
        rows = sorted(
            (
                r
                for r in self._rows.values()
                if r.project_id == query.project_id
                and r.seq > query.after_seq
                and (query.execution_id is None or r.execution_id == query.execution_id)
                and (query.status is None or r.status == query.status)
            ),
            key=lambda r: r.seq,
        )
        return Success(action_run_page(rows[: query.limit + 1], query.limit))

    # -- writes --------------------------------------------------------------------------------

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
            .bind(lambda _: decide_new_run(new.id, new.id in self._rows))
            .map(lambda _: self._insert(draft))
        )

    def _insert(self, draft: ActionRunDraft) -> ActionRun:
        seq = (self._counters.get("action_run_seq") or 0) + 1
        self._counters["action_run_seq"] = seq
        return self._put(draft.row(seq, self._clock.now_ms()))

    def requeue(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.requeue`."""
        return and_then(
            check_run_id(run_id),
            lambda checked: self._db.transact("requeue action run", lambda: self._requeue(checked)),
        )

    def _requeue(self, run_id: str) -> Result[ActionRun, ActionRunError]:
        stepped: Result[object, ActionRunError] = decide_step(run_id, self._state(run_id), _QUEUED)
        return stepped.bind(lambda _: self._requeue_row(self._rows[run_id]))

    def _requeue_row(self, row: ActionRunRow) -> Result[ActionRun, ActionRunError]:
        return self._open_execution(row.project_id, ExecutionId(row.execution_id)).map(
            lambda _: self._put(row.requeued(self._clock.now_ms()))
        )

    def start(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.start`."""
        return and_then(
            check_run_id(run_id),
            lambda checked: self._db.transact("start action run", lambda: self._start(checked)),
        )

    def _start(self, run_id: str) -> Result[ActionRun, ActionRunError]:
        return decide_step(run_id, self._state(run_id), _RUNNING).map(
            lambda _: self._put(
                self._rows[run_id]._replace(
                    status=_RUNNING, phase=_RUNNING, started_at_ms=self._clock.now_ms()
                )
            )
        )

    def record_writeback(
        self, run_id: ActionRunId, outcome: PhaseOutcome
    ) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.record_writeback`."""
        return and_then(
            check_phase(run_id, outcome, ActionRunPhase.WRITEBACK),
            lambda write: self._db.transact(
                "record action run writeback", lambda: self._record(write)
            ),
        )

    def record_effects(
        self, run_id: ActionRunId, outcome: PhaseOutcome
    ) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.record_effects`."""
        return and_then(
            check_phase(run_id, outcome, ActionRunPhase.EFFECTS),
            lambda write: self._db.transact(
                "record action run effects", lambda: self._record(write)
            ),
        )

    def _record(self, write: PhaseWrite) -> Result[ActionRun, ActionRunError]:
        return decide_step(write.run_id, self._state(write.run_id), write.phase.value).map(
            lambda _: self._put(
                self._rows[write.run_id]._replace(**write.columns(self._clock.now_ms()))
            )
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

    def _finish(self, finish: RunFinish) -> Result[ActionRun, ActionRunError]:
        return decide_step(finish.run_id, self._state(finish.run_id), finish.target.value).map(
            lambda _: self._end(self._rows[finish.run_id], finish)
        )

    def _end(self, row: ActionRunRow, finish: RunFinish) -> ActionRun:
        return self._put(
            row._replace(
                status=finish.target.value,
                phase=_FINISHED,
                finished_at_ms=self._clock.now_ms(),
                failure=final_failure_json(finish.failure, row.phase),
            )
        )


def _typed(db: InMemoryDatabase, clock: Clock, executions: ExecutionStorage) -> ActionRunStorage:
    return InMemoryActionRunStorage(db, clock, executions)


def in_memory_action_run_storage() -> Layer:
    """A layer providing the in-memory :class:`ActionRunStorage`; requires the in-memory
    database, the clock and the execution ledger of that database."""

    def factory(c: Container) -> ActionRunStorage:
        return _typed(c.get(InMemoryDatabase), c.get(Clock), c.get(ExecutionStorage))

    return Layer.service(
        ACTION_RUN_STORAGE,
        factory,
        requires=(InMemoryDatabase, Clock, ExecutionStorage),
    )


def in_memory_execution_ledger() -> Layer:
    """The in-memory execution ledger: :class:`ExecutionStorage` and :class:`ActionRunStorage`
    on the container's :class:`InMemoryDatabase` (requires it and a :class:`Clock`)."""
    return merge(in_memory_execution_storage(), in_memory_action_run_storage())
