"""The live :class:`~runstore.services.action_runs.ActionRunStorage`: the ``action_runs`` table.

``queue`` and ``requeue`` look the execution up through :class:`ExecutionStorage` inside
their own unit of work, on the same connection, so the check and the write see one snapshot
(no other writer can finish the execution in between: the unit holds the write lock). Each
lifecycle step is one conditional ``UPDATE ... RETURNING``; only when it matches no row is
the stored state read to say why (``NotFound`` or ``IllegalTransition``). The rules live in
:mod:`runstore.services._ledger_rules`.
"""

from __future__ import annotations

from typing import Any

import apsw
from returns.result import Failure, Result, Success

from runstore.layers._executions_sqlite import next_counter, sqlite_execution_storage
from runstore.layers._layer import Container, Layer, merge
from runstore.layers._sqlite_database import SqliteDatabase
from runstore.layers._sqlite_errors import from_apsw
from runstore.layers._tags import ACTION_RUN_STORAGE
from runstore.services._ledger_rules import (
    ACTION_RUN_COLUMNS,
    ActionRunDraft,
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

__all__ = ["SqliteActionRunStorage", "sqlite_action_run_storage", "sqlite_execution_ledger"]

COLUMNS = ", ".join(ACTION_RUN_COLUMNS)

_SELECT_BY_ID = f"SELECT {COLUMNS} FROM action_runs WHERE id = ?"
_STATE = "SELECT status, phase FROM action_runs WHERE id = ?"
_INSERT = (
    f"INSERT INTO action_runs ({COLUMNS}) "
    f"VALUES ({', '.join('?' * len(ACTION_RUN_COLUMNS))}) RETURNING {COLUMNS}"
)
_REQUEUE = (
    "UPDATE action_runs SET status = 'queued', phase = 'queued', attempt = attempt + 1, "
    "queued_at_ms = ?, started_at_ms = NULL, finished_at_ms = NULL, writeback_status = NULL, "
    "writeback_completed_at_ms = NULL, writeback_result = NULL, writeback_failure = NULL, "
    "effects_status = NULL, effects_completed_at_ms = NULL, effects_failure = NULL, "
    f"failure = NULL WHERE id = ? RETURNING {COLUMNS}"
)
_START = (
    "UPDATE action_runs SET status = 'running', phase = 'running', started_at_ms = ? "
    f"WHERE id = ? AND status = 'queued' RETURNING {COLUMNS}"
)
_PHASE_GUARD = {
    ActionRunPhase.WRITEBACK: "status = 'running' AND phase = 'running'",
    ActionRunPhase.EFFECTS: "status = 'running' AND phase IN ('running', 'writeback')",
}
"""The states from which a phase may be recorded (as :func:`decide_step` has them)."""
_FINISH = (
    "UPDATE action_runs SET status = ?, phase = 'finished', finished_at_ms = ?, failure = ? "
    f"WHERE id = ? RETURNING {COLUMNS}"
)


class SqliteActionRunStorage:
    """:class:`ActionRunStorage` on the ``action_runs`` table of one :class:`SqliteDatabase`.

    ``executions`` must be the execution ledger of the same database (the container's).
    """

    def __init__(self, db: SqliteDatabase, clock: Clock, executions: ExecutionStorage) -> None:
        self._db = db
        self._clock = clock
        self._executions = executions

    # -- reads ---------------------------------------------------------------------------------

    def _query(
        self, operation: str, sql: str, params: tuple[Any, ...]
    ) -> Result[list[Any], ActionRunError]:
        try:
            return Success(self._db.execute(sql, params))
        except apsw.Error as exc:
            return Failure(from_apsw(exc, operation=operation, table="action_runs"))

    def _state(self, run_id: str) -> tuple[str, str] | None:
        state = self._db.one(_STATE, (run_id,))
        return None if state is None else (state[0], state[1])

    def get(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.get`; ``InvalidInput`` for an id that is not valid text."""
        return and_then(check_run_id(run_id), self._get)

    def _get(self, run_id: str) -> Result[ActionRun, ActionRunError]:
        found = self._query("get action run", _SELECT_BY_ID, (run_id,))
        if isinstance(found, Failure):
            return Failure(found.failure())
        rows = found.unwrap()
        if not rows:
            return Failure(NotFound("action_run", run_id))
        return Success(action_run_record(rows[0]))

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
        where = ["project_id = ?"]
        params: list[Any] = [query.project_id]
        if query.execution_id is not None:
            where.append("execution_id = ?")
            params.append(query.execution_id)
        if query.status is not None:
            where.append("status = ?")
            params.append(query.status)
        where.append("seq > ?")
        params += [query.after_seq, query.limit + 1]
        sql = f"SELECT {COLUMNS} FROM action_runs WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?"
        return self._query("list action runs", sql, tuple(params)).map(
            lambda rows: action_run_page(rows, query.limit)
        )

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
            .bind(lambda _: decide_new_run(new.id, self._exists(new.id)))
            .map(lambda _: self._insert(draft))
        )

    def _exists(self, run_id: str | None) -> bool:
        if run_id is None:
            return False
        return self._db.one("SELECT 1 FROM action_runs WHERE id = ?", (run_id,)) is not None

    def _insert(self, draft: ActionRunDraft) -> ActionRun:
        row = draft.row(next_counter(self._db, "action_run_seq"), self._clock.now_ms())
        return action_run_record(self._db.execute(_INSERT, row)[0])

    def _why_not(self, run_id: str, step: str) -> ActionRunError:
        decided = decide_step(run_id, self._state(run_id), step)
        if not isinstance(decided, Failure):  # pragma: no cover - the UPDATE and rules agree
            raise AssertionError(f"action run {run_id!r} matched no row but allows {step}")
        error: ActionRunError = decided.failure()
        return error

    def _step(
        self, run_id: str, step: str, sql: str, params: tuple[Any, ...]
    ) -> Result[ActionRun, ActionRunError]:
        """Apply a conditional ``UPDATE ... RETURNING``; when it matches no row, say why."""
        rows = self._db.execute(sql, params)
        if not rows:
            return Failure(self._why_not(run_id, step))
        return Success(action_run_record(rows[0]))

    def requeue(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.requeue`."""
        return and_then(
            check_run_id(run_id),
            lambda checked: self._db.transact("requeue action run", lambda: self._requeue(checked)),
        )

    def _requeue(self, run_id: str) -> Result[ActionRun, ActionRunError]:
        found = self._db.one(
            "SELECT status, phase, project_id, execution_id FROM action_runs WHERE id = ?",
            (run_id,),
        )
        state = None if found is None else (found[0], found[1])
        stepped: Result[object, ActionRunError] = decide_step(run_id, state, "queued")
        return stepped.bind(lambda _: self._requeue_found(run_id, found))

    def _requeue_found(self, run_id: str, found: Any) -> Result[ActionRun, ActionRunError]:
        """Requeue the run whose ``(status, phase, project_id, execution_id)`` is ``found``."""
        return self._open_execution(found[2], found[3]).map(
            lambda _: action_run_record(
                self._db.execute(_REQUEUE, (self._clock.now_ms(), run_id))[0]
            )
        )

    def start(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.start`."""
        return and_then(
            check_run_id(run_id),
            lambda checked: self._db.transact(
                "start action run",
                lambda: self._step(checked, "running", _START, (self._clock.now_ms(), checked)),
            ),
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
        columns = write.columns(self._clock.now_ms())
        sql = (
            f"UPDATE action_runs SET {', '.join(f'{name} = ?' for name in columns)} "
            f"WHERE id = ? AND {_PHASE_GUARD[write.phase]} RETURNING {COLUMNS}"
        )
        params = (*columns.values(), write.run_id)
        return self._step(write.run_id, write.phase.value, sql, params)

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
        state = self._state(finish.run_id)
        return decide_step(finish.run_id, state, finish.target.value).map(
            lambda allowed: self._end(finish, allowed[1])
        )

    def _end(self, finish: RunFinish, phase: str) -> ActionRun:
        stored = final_failure_json(finish.failure, phase)
        params = (finish.target.value, self._clock.now_ms(), stored, finish.run_id)
        return action_run_record(self._db.execute(_FINISH, params)[0])


def _typed(db: SqliteDatabase, clock: Clock, executions: ExecutionStorage) -> ActionRunStorage:
    return SqliteActionRunStorage(db, clock, executions)


def sqlite_action_run_storage() -> Layer:
    """A layer providing :class:`ActionRunStorage`; requires the database, the clock and the
    execution ledger of that database."""

    def factory(c: Container) -> ActionRunStorage:
        return _typed(
            c.get(SqliteDatabase),
            c.get(Clock),
            c.get(ExecutionStorage),
        )

    return Layer.service(
        ACTION_RUN_STORAGE,
        factory,
        requires=(SqliteDatabase, Clock, ExecutionStorage),
    )


def sqlite_execution_ledger() -> Layer:
    """The live execution ledger: :class:`ExecutionStorage` and :class:`ActionRunStorage` on
    the container's :class:`SqliteDatabase` (requires it and a :class:`Clock`)."""
    return merge(sqlite_execution_storage(), sqlite_action_run_storage())
