"""The live :class:`~runstore.services.executions.ExecutionStorage`: the ``executions`` table.

Every write is one unit of work on the shared :class:`SqliteDatabase` (``BEGIN IMMEDIATE``
outermost, a SAVEPOINT inside another service's unit); reads are single statements, so a
read inside another unit of work sees its uncommitted rows. Sequences and fencing tokens
come from the ``execution_counters`` rows, so they are dense and never reused: a unit that
rolls back gives its numbers back with its rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import apsw
from returns.result import Failure, Result, Success

from runstore.layers._layer import Container, Layer
from runstore.layers._sqlite_database import SqliteDatabase
from runstore.layers._sqlite_errors import from_apsw
from runstore.services.clock import Clock
from runstore.services.errors import Conflict, IllegalTransition, NotFound
from runstore.services.executions import (
    DEFAULT_LIMIT,
    Execution,
    ExecutionError,
    ExecutionFailure,
    ExecutionId,
    ExecutionStatus,
    ExecutionStorage,
    JsonValue,
    NewExecution,
    ProjectMismatch,
    check_failure,
    check_finish,
    check_held,
    check_lease,
    check_listing,
    check_new_execution,
    check_text,
    check_token,
    dump_failure,
    dump_json,
    load_failure,
    load_json,
    make_page,
    parse_status,
)
from runstore.services.pagination import Page

__all__ = ["SqliteExecutionStorage", "execution_row", "next_counter", "sqlite_execution_storage"]

T = TypeVar("T")

COLUMNS = (
    "id, project_id, status, seq, name, input, output, failure, parent_id, metadata, "
    "idempotency_key, created_at_ms, updated_at_ms, started_at_ms, finished_at_ms, "
    "lease_owner, lease_expires_at_ms, fencing_token, attempts"
)
_STATUS = {status.value: status for status in ExecutionStatus}

_SELECT_BY_ID = f"SELECT {COLUMNS} FROM executions WHERE id = ?"
_SELECT_BY_KEY = (
    f"SELECT {COLUMNS}, request_digest FROM executions WHERE project_id = ? AND idempotency_key = ?"
)
_INSERT = (
    "INSERT INTO executions (id, project_id, seq, name, status, input, output, failure, "
    "parent_id, metadata, idempotency_key, request_digest, created_at_ms, updated_at_ms) "
    "VALUES (?, ?, ?, ?, 'queued', ?, 'null', NULL, ?, ?, ?, ?, ?, ?) "
    f"RETURNING {COLUMNS}"
)
_OLDEST_QUEUED = (
    "SELECT seq, id FROM executions WHERE project_id = ? AND status = 'queued' ORDER BY seq LIMIT 1"
)
_OLDEST_EXPIRED = (
    "SELECT seq, id FROM executions WHERE project_id = ? AND status = 'running' "
    "AND lease_expires_at_ms <= ? ORDER BY seq LIMIT 1"
)
_CLAIM = (
    "UPDATE executions SET status = 'running', started_at_ms = coalesce(started_at_ms, ?), "
    "lease_owner = ?, lease_expires_at_ms = ?, fencing_token = ?, attempts = attempts + 1, "
    f"updated_at_ms = ? WHERE id = ? RETURNING {COLUMNS}"
)
_STATE = "SELECT status, fencing_token FROM executions WHERE id = ?"
_RENEW = (
    "UPDATE executions SET lease_expires_at_ms = ?, updated_at_ms = ? WHERE id = ? "
    f"RETURNING {COLUMNS}"
)
_FINISH = (
    "UPDATE executions SET status = ?, output = ?, failure = ?, finished_at_ms = ?, "
    f"updated_at_ms = ?, lease_expires_at_ms = NULL WHERE id = ? RETURNING {COLUMNS}"
)
_CANCEL = (
    "UPDATE executions SET status = 'cancelled', failure = ?, finished_at_ms = ?, "
    f"updated_at_ms = ?, lease_expires_at_ms = NULL WHERE id = ? RETURNING {COLUMNS}"
)
_COUNTER = "UPDATE execution_counters SET value = value + 1 WHERE name = ? RETURNING value"


def execution_row(row: tuple[Any, ...]) -> Execution:
    """Return the :class:`Execution` stored in ``row`` (the columns of ``COLUMNS``)."""
    return Execution(
        row[0],
        row[1],
        _STATUS[row[2]],
        row[3],
        row[4],
        load_json(row[5]),
        load_json(row[6]),
        load_failure(row[7]),
        row[8],
        load_json(row[9]),  # type: ignore[arg-type]
        row[10],
        row[11],
        row[12],
        row[13],
        row[14],
        row[15],
        row[16],
        row[17],
        row[18],
    )


def next_counter(db: SqliteDatabase, name: str) -> int:
    """Take the next value of counter ``name`` (inside the caller's unit of work)."""
    value: int = db.execute(_COUNTER, (name,))[0][0]
    return value


class SqliteExecutionStorage:
    """:class:`ExecutionStorage` on the ``executions`` table of one :class:`SqliteDatabase`."""

    def __init__(self, db: SqliteDatabase, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    # -- reads ---------------------------------------------------------------------------------

    def _query(
        self, operation: str, sql: str, params: tuple[Any, ...]
    ) -> Result[list[Any], ExecutionError]:
        try:
            return Success(self._db.execute(sql, params))
        except apsw.Error as exc:
            return Failure(from_apsw(exc, operation=operation, table="executions"))

    def get(self, execution_id: ExecutionId) -> Result[Execution, ExecutionError]:
        """See :meth:`ExecutionStorage.get`; ``InvalidInput`` for an id that is not valid text."""
        problem = check_text(execution_id, "execution_id")
        if problem is not None:
            return Failure(problem)
        try:
            rows = self._db.execute(_SELECT_BY_ID, (execution_id,))
        except apsw.Error as exc:
            return Failure(from_apsw(exc, operation="get execution", table="executions"))
        if not rows:
            return Failure(NotFound("execution", execution_id))
        return Success(execution_row(rows[0]))

    def list(
        self,
        project_id: str,
        *,
        status: ExecutionStatus | None = None,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
    ) -> Result[Page[Execution], ExecutionError]:
        """See :meth:`ExecutionStorage.list`."""
        wanted = parse_status(status)
        if isinstance(wanted, Failure):
            return Failure(wanted.failure())
        checked = check_listing(project_id, limit, cursor, "e")
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        size, after = checked.unwrap()
        only = wanted.unwrap()
        if only is None:
            sql = (
                f"SELECT {COLUMNS} FROM executions WHERE project_id = ? AND seq > ? "
                "ORDER BY seq LIMIT ?"
            )
            params: tuple[Any, ...] = (project_id, after, size + 1)
        else:
            sql = (
                f"SELECT {COLUMNS} FROM executions WHERE project_id = ? AND status = ? "
                "AND seq > ? ORDER BY seq LIMIT ?"
            )
            params = (project_id, only.value, after, size + 1)
        return self._query("list executions", sql, params).map(
            lambda rows: make_page([execution_row(r) for r in rows], size, "e", _seq)
        )

    # -- writes --------------------------------------------------------------------------------

    def _unit(
        self, operation: str, fn: Callable[[], Result[T, ExecutionError]]
    ) -> Result[T, ExecutionError]:
        return self._db.transact(operation, fn)

    def create(self, new: NewExecution) -> Result[Execution, ExecutionError]:
        """See :meth:`ExecutionStorage.create`."""
        problem = check_new_execution(new)
        if problem is not None:
            return Failure(problem)
        return self._unit("create execution", lambda: self._create(new))

    def _create(self, new: NewExecution) -> Result[Execution, ExecutionError]:
        db = self._db
        digest = new.digest()
        if new.idempotency_key is not None:
            found = db.one(_SELECT_BY_KEY, (new.project_id, new.idempotency_key))
            if found is not None:
                existing = execution_row(found)
                if found[-1] == digest:
                    return Success(existing)
                return Failure(_key_conflict(existing.id, new.idempotency_key))
        if new.id is not None and db.one("SELECT 1 FROM executions WHERE id = ?", (new.id,)):
            return Failure(Conflict("execution", new.id, "an execution with this id exists"))
        if new.parent_id is not None:
            parent_project = db.one(
                "SELECT project_id FROM executions WHERE id = ?", (new.parent_id,)
            )
            if parent_project is None:
                return Failure(NotFound("execution", new.parent_id))
            if parent_project[0] != new.project_id:
                return Failure(
                    ProjectMismatch("execution", new.parent_id, new.project_id, parent_project[0])
                )
        seq = next_counter(db, "execution_seq")
        now = self._clock.now_ms()
        row = db.execute(
            _INSERT,
            (
                new.id if new.id is not None else f"exe_{seq}",
                new.project_id,
                seq,
                new.name,
                dump_json(new.input),
                new.parent_id,
                dump_json(new.metadata),
                new.idempotency_key,
                digest,
                now,
                now,
            ),
        )[0]
        return Success(execution_row(row))

    def claim(
        self, project_id: str, owner: str, lease_ms: int
    ) -> Result[Execution | None, ExecutionError]:
        """See :meth:`ExecutionStorage.claim`."""
        problem = (
            check_text(project_id, "project_id")
            or check_text(owner, "owner")
            or check_lease(lease_ms)
        )
        if problem is not None:
            return Failure(problem)
        return self._unit("claim execution", lambda: self._claim(project_id, owner, lease_ms))

    def _claim(
        self, project_id: str, owner: str, lease_ms: int
    ) -> Result[Execution | None, ExecutionError]:
        db = self._db
        now = self._clock.now_ms()
        candidates = [
            row
            for row in (
                db.one(_OLDEST_EXPIRED, (project_id, now)),
                db.one(_OLDEST_QUEUED, (project_id,)),
            )
            if row is not None
        ]
        if not candidates:
            return Success(None)
        _, execution_id = min(candidates)
        token = next_counter(db, "fencing_token")
        row = db.execute(_CLAIM, (now, owner, now + lease_ms, token, now, execution_id))[0]
        return Success(execution_row(row))

    def renew(
        self, execution_id: ExecutionId, fencing_token: int, lease_ms: int
    ) -> Result[Execution, ExecutionError]:
        """See :meth:`ExecutionStorage.renew`."""
        problem = (
            check_text(execution_id, "execution_id")
            or check_token(fencing_token)
            or check_lease(lease_ms)
        )
        if problem is not None:
            return Failure(problem)

        def renew() -> Result[Execution, ExecutionError]:
            state = self._db.one(_STATE, (execution_id,))
            held = check_held(execution_id, state, fencing_token, None)
            if held is not None:
                return Failure(held)
            now = self._clock.now_ms()
            row = self._db.execute(_RENEW, (now + lease_ms, now, execution_id))[0]
            return Success(execution_row(row))

        return self._unit("renew execution lease", renew)

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
        problem = check_text(execution_id, "execution_id") or check_token(fencing_token)
        if problem is not None:
            return Failure(problem)
        checked = check_finish(status, output, failure)
        if isinstance(checked, Failure):
            return Failure(checked.failure())
        target = checked.unwrap()

        def finish() -> Result[Execution, ExecutionError]:
            state = self._db.one(_STATE, (execution_id,))
            held = check_held(execution_id, state, fencing_token, target)
            if held is not None:
                return Failure(held)
            now = self._clock.now_ms()
            row = self._db.execute(
                _FINISH,
                (target.value, dump_json(output), dump_failure(failure), now, now, execution_id),
            )[0]
            return Success(execution_row(row))

        return self._unit("finish execution", finish)

    def cancel(
        self, execution_id: ExecutionId, failure: ExecutionFailure | None = None
    ) -> Result[Execution, ExecutionError]:
        """See :meth:`ExecutionStorage.cancel`."""
        problem = check_text(execution_id, "execution_id") or check_failure(failure, "failure")
        if problem is not None:
            return Failure(problem)

        def cancel() -> Result[Execution, ExecutionError]:
            state = self._db.one(_STATE, (execution_id,))
            if state is None:
                return Failure(NotFound("execution", execution_id))
            if _STATUS[state[0]].is_finished:
                return Failure(
                    IllegalTransition(
                        "execution", execution_id, state[0], ExecutionStatus.CANCELLED.value
                    )
                )
            now = self._clock.now_ms()
            row = self._db.execute(_CANCEL, (dump_failure(failure), now, now, execution_id))[0]
            return Success(execution_row(row))

        return self._unit("cancel execution", cancel)


def _seq(execution: Execution) -> int:
    return execution.seq


def _key_conflict(execution_id: str, key: str) -> Conflict:
    return Conflict(
        "execution",
        execution_id,
        f"idempotency key {key!r} was used for a different request",
    )


def _typed(db: SqliteDatabase, clock: Clock) -> ExecutionStorage:
    return SqliteExecutionStorage(db, clock)


def sqlite_execution_storage() -> Layer:
    """A layer providing :class:`ExecutionStorage` on the container's :class:`SqliteDatabase`."""

    def factory(c: Container) -> ExecutionStorage:
        return _typed(c.get(SqliteDatabase), c.get(Clock))

    return Layer.service(
        ExecutionStorage,  # type: ignore[type-abstract]
        factory,
        requires=(SqliteDatabase, Clock),
    )
