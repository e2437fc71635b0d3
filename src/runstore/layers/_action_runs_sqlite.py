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
from runstore.layers._ledger_shared import ActionRunStorageBase
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
    decide_step,
    final_failure_json,
)
from runstore.services.action_runs import (
    ActionRun,
    ActionRunError,
    ActionRunPhase,
    ActionRunStorage,
)
from runstore.services.clock import Clock
from runstore.services.errors import NotFound
from runstore.services.executions import ExecutionStorage
from runstore.services.pagination import Page

__all__ = ["SqliteActionRunStorage", "sqlite_action_run_storage", "sqlite_ledger"]

COLUMNS = ", ".join(ACTION_RUN_COLUMNS)

_SELECT_BY_ID = f"SELECT {COLUMNS} FROM action_runs WHERE id = ?"
_STATE = "SELECT status, phase FROM action_runs WHERE id = ?"
_REQUEUE_FACTS = "SELECT status, phase, project_id, execution_id FROM action_runs WHERE id = ?"
_INSERT = (
    "INSERT INTO action_runs (id, project_id, execution_id, seq, action_id, input, status, "
    "phase, attempt, queued_at_ms) VALUES (?, ?, ?, ?, ?, ?, 'queued', 'queued', 1, ?) "
    f"RETURNING {COLUMNS}"
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


class SqliteActionRunStorage(ActionRunStorageBase):
    """:class:`ActionRunStorage` on the ``action_runs`` table of one :class:`SqliteDatabase`.

    ``executions`` must be the execution ledger of the same database (the container's).
    """

    _db: SqliteDatabase

    def __init__(self, db: SqliteDatabase, clock: Clock, executions: ExecutionStorage) -> None:
        self._db = db
        self._clock = clock
        self._executions = executions

    # -- facts ---------------------------------------------------------------------------------

    def _query(
        self, operation: str, sql: str, params: tuple[Any, ...]
    ) -> Result[list[Any], ActionRunError]:
        try:
            return Success(self._db.execute(sql, params))
        except apsw.Error as exc:
            return Failure(from_apsw(exc, operation=operation, table="action_runs"))

    def _get(self, run_id: str) -> Result[ActionRun, ActionRunError]:
        found = self._query("get action run", _SELECT_BY_ID, (run_id,))
        if isinstance(found, Failure):
            return Failure(found.failure())
        rows = found.unwrap()
        if not rows:
            return Failure(NotFound("action_run", run_id))
        return Success(action_run_record(rows[0]))

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

    def _run_exists(self, run_id: str) -> bool:
        return self._db.one("SELECT 1 FROM action_runs WHERE id = ?", (run_id,)) is not None

    def _requeue_facts(self, run_id: str) -> tuple[tuple[str, str], str, str] | None:
        found = self._db.one(_REQUEUE_FACTS, (run_id,))
        return None if found is None else ((found[0], found[1]), found[2], found[3])

    # -- writes: one conditional UPDATE; only when it matches no row, decide why ---------------

    def _insert(self, draft: ActionRunDraft) -> ActionRun:
        row = draft.row(next_counter(self._db, "action_run_seq"), self._clock.now_ms())
        params = (row.id, row.project_id, row.execution_id, row.seq, row.action_id, row.input)
        return action_run_record(self._db.execute(_INSERT, (*params, row.queued_at_ms))[0])

    def _requeued(self, run_id: str) -> ActionRun:
        return action_run_record(self._db.execute(_REQUEUE, (self._clock.now_ms(), run_id))[0])

    def _apply(
        self, run_id: str, step: str, sql: str, params: tuple[Any, ...]
    ) -> Result[ActionRun, ActionRunError]:
        """Run a conditional ``UPDATE ... RETURNING``; when it matches no row, say why."""
        rows = self._db.execute(sql, params)
        if rows:
            return Success(action_run_record(rows[0]))
        state = self._db.one(_STATE, (run_id,))
        decided = decide_step(run_id, None if state is None else (state[0], state[1]), step)
        if not isinstance(decided, Failure):  # pragma: no cover - the UPDATE and rules agree
            raise AssertionError(f"action run {run_id!r} matched no row but allows {step}")
        error: ActionRunError = decided.failure()
        return Failure(error)

    def _start(self, run_id: str) -> Result[ActionRun, ActionRunError]:
        return self._apply(run_id, "running", _START, (self._clock.now_ms(), run_id))

    def _record(self, write: PhaseWrite) -> Result[ActionRun, ActionRunError]:
        columns = write.columns(self._clock.now_ms())
        sql = (
            f"UPDATE action_runs SET {', '.join(f'{name} = ?' for name in columns)} "
            f"WHERE id = ? AND {_PHASE_GUARD[write.phase]} RETURNING {COLUMNS}"
        )
        return self._apply(write.run_id, write.phase.value, sql, (*columns.values(), write.run_id))

    def _finish(self, finish: RunFinish) -> Result[ActionRun, ActionRunError]:
        state = self._db.one(_STATE, (finish.run_id,))
        allowed = decide_step(
            finish.run_id, None if state is None else (state[0], state[1]), finish.target.value
        )
        return allowed.map(lambda at: self._end(finish, at[1]))

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


def sqlite_ledger() -> Layer:
    """The live execution ledger: :class:`ExecutionStorage` and :class:`ActionRunStorage` on
    the container's :class:`SqliteDatabase` (requires it and a :class:`Clock`)."""
    return merge(sqlite_execution_storage(), sqlite_action_run_storage())
