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
from runstore.layers._ledger_shared import ActionRunStorageBase
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
    decide_step,
    final_failure_json,
)
from runstore.services.action_runs import (
    ActionRun,
    ActionRunError,
    ActionRunPhase,
    ActionRunStatus,
    ActionRunStorage,
)
from runstore.services.clock import Clock
from runstore.services.errors import NotFound
from runstore.services.executions import ExecutionStorage
from runstore.services.pagination import Page

__all__ = ["InMemoryActionRunStorage", "in_memory_action_run_storage", "in_memory_ledger"]

_RUNNING = ActionRunStatus.RUNNING.value
_FINISHED = ActionRunPhase.FINISHED.value


class InMemoryActionRunStorage(ActionRunStorageBase):
    """:class:`ActionRunStorage` kept in the mirrors of one :class:`InMemoryDatabase`."""

    _db: InMemoryDatabase

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

    # -- facts ---------------------------------------------------------------------------------

    def _get(self, run_id: str) -> Result[ActionRun, ActionRunError]:
        row = self._rows.get(run_id)
        if row is None:
            return Failure(NotFound("action_run", run_id))
        return Success(action_run_record(row))

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

    def _run_exists(self, run_id: str) -> bool:
        return run_id in self._rows

    def _requeue_facts(self, run_id: str) -> tuple[tuple[str, str], str, str] | None:
        row = self._rows.get(run_id)
        return None if row is None else ((row.status, row.phase), row.project_id, row.execution_id)

    # -- writes: decide on the mirrored row, then replace it ------------------------------------

    def _insert(self, draft: ActionRunDraft) -> ActionRun:
        seq = (self._counters.get("action_run_seq") or 0) + 1
        self._counters["action_run_seq"] = seq
        return self._put(draft.row(seq, self._clock.now_ms()))

    def _requeued(self, run_id: str) -> ActionRun:
        return self._put(self._rows[run_id].requeued(self._clock.now_ms()))

    def _start(self, run_id: str) -> Result[ActionRun, ActionRunError]:
        return decide_step(run_id, self._state(run_id), _RUNNING).map(
            lambda _: self._put(
                self._rows[run_id]._replace(
                    status=_RUNNING, phase=_RUNNING, started_at_ms=self._clock.now_ms()
                )
            )
        )

    def _record(self, write: PhaseWrite) -> Result[ActionRun, ActionRunError]:
        return decide_step(write.run_id, self._state(write.run_id), write.phase.value).map(
            lambda _: self._put(
                self._rows[write.run_id]._replace(**write.columns(self._clock.now_ms()))
            )
        )

    def _finish(self, finish: RunFinish) -> Result[ActionRun, ActionRunError]:
        return decide_step(finish.run_id, self._state(finish.run_id), finish.target.value).map(
            lambda allowed: self._put(
                self._rows[finish.run_id]._replace(
                    status=finish.target.value,
                    phase=_FINISHED,
                    finished_at_ms=self._clock.now_ms(),
                    failure=final_failure_json(finish.failure, allowed[1]),
                )
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


def in_memory_ledger() -> Layer:
    """The in-memory execution ledger: :class:`ExecutionStorage` and :class:`ActionRunStorage`
    on the container's :class:`InMemoryDatabase` (requires it and a :class:`Clock`)."""
    return merge(in_memory_execution_storage(), in_memory_action_run_storage())
