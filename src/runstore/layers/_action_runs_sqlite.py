"""The live :class:`~runstore.services.action_runs.ActionRunStorage`: the ``action_runs`` table.

``queue`` and ``requeue`` look the execution up through :class:`ExecutionStorage` inside
their own unit of work, on the same connection, so the check and the write see one snapshot
(no other writer can finish the execution in between: the unit holds the write lock). Each
lifecycle step is one conditional ``UPDATE ... RETURNING``; only when it matches no row is
the stored state read to say why (``NotFound`` or ``IllegalTransition``).
"""

from __future__ import annotations

from typing import Any

import apsw
from returns.result import Failure, Result, Success

from runstore.layers._executions_sqlite import next_counter, sqlite_execution_storage
from runstore.layers._layer import Container, Layer, merge
from runstore.layers._sqlite_database import SqliteDatabase
from runstore.layers._sqlite_errors import from_apsw
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

__all__ = ["SqliteActionRunStorage", "sqlite_action_run_storage", "sqlite_execution_ledger"]

COLUMNS = (
    "id, project_id, execution_id, action_id, status, phase, seq, input, attempt, "
    "queued_at_ms, started_at_ms, finished_at_ms, writeback_status, "
    "writeback_completed_at_ms, writeback_result, writeback_failure, effects_status, "
    "effects_completed_at_ms, effects_failure, failure"
)
_STATUS = {s.value: s for s in ActionRunStatus}
_PHASE = {p.value: p for p in ActionRunPhase}

_SELECT_BY_ID = f"SELECT {COLUMNS} FROM action_runs WHERE id = ?"
_STATE = "SELECT status, phase FROM action_runs WHERE id = ?"
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
_WRITEBACK = (
    "UPDATE action_runs SET phase = 'writeback', writeback_status = ?, "
    "writeback_completed_at_ms = ?, writeback_result = ?, writeback_failure = ? "
    f"WHERE id = ? AND status = 'running' AND phase = 'running' RETURNING {COLUMNS}"
)
_EFFECTS = (
    "UPDATE action_runs SET phase = 'effects', effects_status = ?, "
    "effects_completed_at_ms = ?, effects_failure = ? "
    "WHERE id = ? AND status = 'running' AND phase IN ('running', 'writeback') "
    f"RETURNING {COLUMNS}"
)
_FINISH = (
    "UPDATE action_runs SET status = ?, phase = 'finished', finished_at_ms = ?, failure = ? "
    f"WHERE id = ? RETURNING {COLUMNS}"
)


def action_run_row(row: tuple[Any, ...]) -> ActionRun:
    """Return the :class:`ActionRun` stored in ``row`` (the columns of ``COLUMNS``)."""
    return ActionRun(
        row[0],
        row[1],
        row[2],
        row[3],
        _STATUS[row[4]],
        _PHASE[row[5]],
        row[6],
        load_json(row[7]),
        row[8],
        row[9],
        row[10],
        row[11],
        None if row[12] is None else phase_record(row[12], row[13], row[14], row[15]),
        None if row[16] is None else phase_record(row[16], row[17], None, row[18]),
        None if row[19] is None else load_run_failure(row[19]),
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

    def get(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.get`; ``InvalidInput`` for an id that is not valid text."""
        problem = check_text(run_id, "run_id")
        if problem is not None:
            return Failure(problem)
        found = self._query("get action run", _SELECT_BY_ID, (run_id,))
        if isinstance(found, Failure):
            return Failure(found.failure())
        rows = found.unwrap()
        if not rows:
            return Failure(NotFound("action_run", run_id))
        return Success(action_run_row(rows[0]))

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
        where = ["project_id = ?"]
        params: list[Any] = [project_id]
        if execution_id is not None:
            where.append("execution_id = ?")
            params.append(execution_id)
        if only is not None:
            where.append("status = ?")
            params.append(only.value)
        where.append("seq > ?")
        params += [after, size + 1]
        sql = f"SELECT {COLUMNS} FROM action_runs WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?"
        return self._query("list action runs", sql, tuple(params)).map(
            lambda rows: make_page([action_run_row(r) for r in rows], size, "a", _seq)
        )

    # -- writes --------------------------------------------------------------------------------

    def _open_execution(self, project_id: str, execution_id: ExecutionId) -> ActionRunError | None:
        """Why no run of ``project_id`` may be queued in ``execution_id`` now, or None."""
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
            db = self._db
            closed = self._open_execution(new.project_id, new.execution_id)
            if closed is not None:
                return Failure(closed)
            if new.id is not None and db.one("SELECT 1 FROM action_runs WHERE id = ?", (new.id,)):
                return Failure(Conflict("action_run", new.id, "an action run with this id exists"))
            seq = next_counter(db, "action_run_seq")
            row = db.execute(
                _INSERT,
                (
                    new.id if new.id is not None else f"act_{seq}",
                    new.project_id,
                    new.execution_id,
                    seq,
                    new.action_id,
                    dump_json(new.input),
                    self._clock.now_ms(),
                ),
            )[0]
            return Success(action_run_row(row))

        return self._db.transact("queue action run", queue)

    def _why_not(self, run_id: str, step: str) -> ActionRunError:
        state = self._db.one(_STATE, (run_id,))
        error = check_step(run_id, None if state is None else (state[0], state[1]), step)
        if error is None:  # pragma: no cover - the conditional UPDATE and check_step agree
            raise AssertionError(f"action run {run_id!r} matched no row but allows {step}")
        return error

    def requeue(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.requeue`."""
        problem = check_text(run_id, "run_id")
        if problem is not None:
            return Failure(problem)

        def requeue() -> Result[ActionRun, ActionRunError]:
            db = self._db
            state = db.one(
                "SELECT status, phase, project_id, execution_id FROM action_runs WHERE id = ?",
                (run_id,),
            )
            error = check_step(run_id, None if state is None else (state[0], state[1]), "queued")
            if error is not None:
                return Failure(error)
            assert state is not None
            closed = self._open_execution(state[2], state[3])
            if closed is not None:
                return Failure(closed)
            row = db.execute(_REQUEUE, (self._clock.now_ms(), run_id))[0]
            return Success(action_run_row(row))

        return self._db.transact("requeue action run", requeue)

    def start(self, run_id: ActionRunId) -> Result[ActionRun, ActionRunError]:
        """See :meth:`ActionRunStorage.start`."""
        problem = check_text(run_id, "run_id")
        if problem is not None:
            return Failure(problem)

        def start() -> Result[ActionRun, ActionRunError]:
            rows = self._db.execute(_START, (self._clock.now_ms(), run_id))
            if not rows:
                return Failure(self._why_not(run_id, "running"))
            return Success(action_run_row(rows[0]))

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
        if isinstance(done, PhaseFailed):
            params: tuple[Any, ...] = ("failed", None, dump_run_failure(done.failure))
        else:
            params = ("succeeded", dump_json(done.result), None)

        def writeback() -> Result[ActionRun, ActionRunError]:
            rows = self._db.execute(
                _WRITEBACK, (params[0], self._clock.now_ms(), params[1], params[2], run_id)
            )
            if not rows:
                return Failure(self._why_not(run_id, "writeback"))
            return Success(action_run_row(rows[0]))

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
        failure = dump_run_failure(done.failure) if isinstance(done, PhaseFailed) else None
        status = "failed" if isinstance(done, PhaseFailed) else "succeeded"

        def effects() -> Result[ActionRun, ActionRunError]:
            rows = self._db.execute(_EFFECTS, (status, self._clock.now_ms(), failure, run_id))
            if not rows:
                return Failure(self._why_not(run_id, "effects"))
            return Success(action_run_row(rows[0]))

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
            db = self._db
            state = db.one(_STATE, (run_id,))
            error = check_step(
                run_id, None if state is None else (state[0], state[1]), target.value
            )
            if error is not None:
                return Failure(error)
            assert state is not None
            stored = dump_run_failure(with_phase(given, state[1]))
            row = db.execute(_FINISH, (target.value, self._clock.now_ms(), stored, run_id))[0]
            return Success(action_run_row(row))

        return self._db.transact("finish action run", finish)


def _seq(run: ActionRun) -> int:
    return run.seq


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
        ActionRunStorage,  # type: ignore[type-abstract]
        factory,
        requires=(SqliteDatabase, Clock, ExecutionStorage),
    )


def sqlite_execution_ledger() -> Layer:
    """The live execution ledger: :class:`ExecutionStorage` and :class:`ActionRunStorage` on
    the container's :class:`SqliteDatabase` (requires it and a :class:`Clock`)."""
    return merge(sqlite_execution_storage(), sqlite_action_run_storage())
