"""The live :class:`~runstore.services.ledger.ExecutionStorage`: the ``executions`` table.

Every write is one unit of work on the shared :class:`SqliteDatabase` (``BEGIN IMMEDIATE``
outermost, a SAVEPOINT inside another service's unit); reads are single statements, so a
read inside another unit of work sees its uncommitted rows. Sequences and fencing tokens
come from the ``execution_counters`` rows, so they are dense and never reused: a unit that
rolls back gives its numbers back with its rows. The rules (checks and decisions) live in
:mod:`runstore.services._ledger_rules`; this layer holds the SQL that loads and applies.

The live :class:`~runstore.services.ledger.ActionRunStorage`: the ``action_runs`` table.

Every write looks the execution its fence names up through :class:`ExecutionStorage` inside
its own unit of work, on the same connection, so the check and the write see one snapshot
(no other writer can claim or finish the execution in between: the unit holds the write
lock). It then reads the run by its primary key, lets the rules decide and applies what they
allow with one ``UPDATE ... RETURNING`` by id. The schema also refuses any insert or update
of an action run whose execution is not running (migration 0007). The rules live in
:mod:`runstore.services._ledger_rules`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import apsw
from returns.result import Failure, Result, Success

from runstore.layers._layer import Container, Layer, merge
from runstore.layers._ledger_shared import ActionRunStorageBase, ExecutionStorageBase
from runstore.layers._sqlite_database import SqliteDatabase
from runstore.layers._sqlite_errors import from_apsw
from runstore.layers._tags import ACTION_RUN_STORAGE, EXECUTION_STORAGE
from runstore.services._ledger_rules import (
    ACTION_RUN_COLUMNS,
    EXECUTION_COLUMNS,
    ActionRunDraft,
    ActionRunRow,
    Claim,
    CreateFacts,
    ExecutionDraft,
    Listing,
    Renew,
    action_run_page,
    action_run_record,
    execution_page,
    execution_record,
)
from runstore.services.clock import Clock
from runstore.services.errors import NotFound
from runstore.services.ledger import (
    ActionRun,
    ActionRunError,
    ActionRunStorage,
    Execution,
    ExecutionError,
    ExecutionStorage,
)
from runstore.services.pagination import Page

__all__ = [
    "SqliteActionRunStorage",
    "SqliteExecutionStorage",
    "next_counter",
    "sqlite_action_run_storage",
    "sqlite_execution_storage",
    "sqlite_ledger",
]

COLUMNS = ", ".join(EXECUTION_COLUMNS)

_SELECT_BY_ID = f"SELECT {COLUMNS} FROM executions WHERE id = ?"
_SELECT_BY_KEY = (
    f"SELECT {COLUMNS}, request_digest FROM executions WHERE project_id = ? AND idempotency_key = ?"
)
_INSERT = (
    f"INSERT INTO executions ({COLUMNS}, request_digest) "
    f"VALUES ({', '.join('?' * (len(EXECUTION_COLUMNS) + 1))}) RETURNING {COLUMNS}"
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
_END = (
    "UPDATE executions SET status = ?, output = coalesce(?, output), failure = ?, "
    "finished_at_ms = ?, updated_at_ms = ?, lease_expires_at_ms = NULL WHERE id = ? "
    f"RETURNING {COLUMNS}"
)
_COUNTER = "UPDATE execution_counters SET value = value + 1 WHERE name = ? RETURNING value"


def next_counter(db: SqliteDatabase, name: str) -> int:
    """Take the next value of counter ``name`` (inside the caller's unit of work)."""
    value: int = db.execute(_COUNTER, (name,))[0][0]
    return value


class SqliteExecutionStorage(ExecutionStorageBase):
    """:class:`ExecutionStorage` on the ``executions`` table of one :class:`SqliteDatabase`."""

    _db: SqliteDatabase

    def __init__(self, db: SqliteDatabase, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    # -- facts ---------------------------------------------------------------------------------

    def _query(
        self, operation: str, sql: str, params: tuple[Any, ...]
    ) -> Result[list[Any], ExecutionError]:
        try:
            return Success(self._db.execute(sql, params))
        except apsw.Error as exc:
            return Failure(from_apsw(exc, operation=operation, table="executions"))

    def _get(self, execution_id: str) -> Result[Execution, ExecutionError]:
        found = self._query("get execution", _SELECT_BY_ID, (execution_id,))
        if isinstance(found, Failure):
            return Failure(found.failure())
        rows = found.unwrap()
        if not rows:
            return Failure(NotFound("execution", execution_id))
        return Success(execution_record(rows[0]))

    def _list(self, query: Listing) -> Result[Page[Execution], ExecutionError]:
        if query.status is None:
            sql = (
                f"SELECT {COLUMNS} FROM executions WHERE project_id = ? AND seq > ? "
                "ORDER BY seq LIMIT ?"
            )
            params: tuple[Any, ...] = (query.project_id, query.after_seq, query.limit + 1)
        else:
            sql = (
                f"SELECT {COLUMNS} FROM executions WHERE project_id = ? AND status = ? "
                "AND seq > ? ORDER BY seq LIMIT ?"
            )
            params = (query.project_id, query.status, query.after_seq, query.limit + 1)
        return self._query("list executions", sql, params).map(
            lambda rows: execution_page(rows, query.limit)
        )

    def _create_facts(self, draft: ExecutionDraft) -> CreateFacts:
        db, new = self._db, draft.new
        keyed = None
        if new.idempotency_key is not None:
            keyed = db.one(_SELECT_BY_KEY, (new.project_id, new.idempotency_key))
        parent = None
        if new.parent_id is not None:
            parent = db.one("SELECT project_id FROM executions WHERE id = ?", (new.parent_id,))
        return CreateFacts(
            keyed=None if keyed is None else (execution_record(keyed), keyed[-1]),
            id_taken=new.id is not None
            and db.one("SELECT 1 FROM executions WHERE id = ?", (new.id,)) is not None,
            parent_project=None if parent is None else parent[0],
        )

    def _claimable(self, project_id: str, now_ms: int) -> Iterable[tuple[int, str]]:
        expired = self._db.one(_OLDEST_EXPIRED, (project_id, now_ms))
        queued = self._db.one(_OLDEST_QUEUED, (project_id,))
        return [(row[0], row[1]) for row in (expired, queued) if row is not None]

    def _state(self, execution_id: str) -> tuple[str, int] | None:
        state = self._db.one(_STATE, (execution_id,))
        return None if state is None else (state[0], state[1])

    # -- writes --------------------------------------------------------------------------------

    def _insert(self, draft: ExecutionDraft) -> Execution:
        row = draft.row(next_counter(self._db, "execution_seq"), self._clock.now_ms())
        return execution_record(self._db.execute(_INSERT, row)[0])

    def _grant(self, execution_id: str, claim: Claim, now_ms: int) -> Execution:
        token = next_counter(self._db, "fencing_token")
        params = (now_ms, claim.owner, now_ms + claim.lease_ms, token, now_ms, execution_id)
        return execution_record(self._db.execute(_CLAIM, params)[0])

    def _extend(self, renew: Renew) -> Execution:
        now = self._clock.now_ms()
        params = (now + renew.lease_ms, now, renew.execution_id)
        return execution_record(self._db.execute(_RENEW, params)[0])

    def _end(
        self, execution_id: str, status: str, failure_json: str | None, output_json: str | None
    ) -> Execution:
        now = self._clock.now_ms()
        params = (status, output_json, failure_json, now, now, execution_id)
        return execution_record(self._db.execute(_END, params)[0])


def _typed(db: SqliteDatabase, clock: Clock) -> ExecutionStorage:
    return SqliteExecutionStorage(db, clock)


def sqlite_execution_storage() -> Layer:
    """A layer providing :class:`ExecutionStorage` on the container's :class:`SqliteDatabase`."""

    def factory(c: Container) -> ExecutionStorage:
        return _typed(c.get(SqliteDatabase), c.get(Clock))

    return Layer.service(
        EXECUTION_STORAGE,
        factory,
        requires=(SqliteDatabase, Clock),
    )


_RUN_COLUMNS = ", ".join(ACTION_RUN_COLUMNS)

_SELECT_ACTION_RUN = f"SELECT {_RUN_COLUMNS} FROM action_runs WHERE id = ?"
_SELECT_KEYED_RUN = (
    f"SELECT {_RUN_COLUMNS} FROM action_runs WHERE execution_id = ? AND idempotency_key = ?"
)
_INSERT_RUN = (
    f"INSERT INTO action_runs ({_RUN_COLUMNS}) "
    f"VALUES ({', '.join('?' * len(ACTION_RUN_COLUMNS))}) RETURNING {_RUN_COLUMNS}"
)
_REQUEUE = (
    "UPDATE action_runs SET status = 'queued', phase = 'queued', attempt = attempt + 1, "
    "queued_at_ms = ?, started_at_ms = NULL, finished_at_ms = NULL, writeback_status = NULL, "
    "writeback_completed_at_ms = NULL, writeback_result = NULL, writeback_failure = NULL, "
    "effects_status = NULL, effects_completed_at_ms = NULL, effects_failure = NULL, "
    f"failure = NULL WHERE id = ? RETURNING {_RUN_COLUMNS}"
)
_START = (
    "UPDATE action_runs SET status = ?, phase = ?, started_at_ms = ? "
    f"WHERE id = ? RETURNING {_RUN_COLUMNS}"
)
_FINISH = (
    "UPDATE action_runs SET status = ?, phase = ?, finished_at_ms = ?, failure = ? "
    f"WHERE id = ? RETURNING {_RUN_COLUMNS}"
)
_UPDATES = {
    ("status", "phase", "started_at_ms"): _START,
    ("status", "phase", "finished_at_ms", "failure"): _FINISH,
}
"""The statement text of the fixed updates (start, finish), so they are prepared once."""


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
        found = self._query("get action run", _SELECT_ACTION_RUN, (run_id,))
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
        sql = (
            f"SELECT {_RUN_COLUMNS} FROM action_runs "
            f"WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?"
        )
        return self._query("list action runs", sql, tuple(params)).map(
            lambda rows: action_run_page(rows, query.limit)
        )

    def _row(self, run_id: str) -> ActionRunRow | None:
        found = self._db.one(_SELECT_ACTION_RUN, (run_id,))
        return None if found is None else ActionRunRow(*found)

    def _keyed(self, execution_id: str, idempotency_key: str) -> ActionRunRow | None:
        found = self._db.one(_SELECT_KEYED_RUN, (execution_id, idempotency_key))
        return None if found is None else ActionRunRow(*found)

    def _run_exists(self, run_id: str) -> bool:
        return self._db.one("SELECT 1 FROM action_runs WHERE id = ?", (run_id,)) is not None

    # -- writes: one UPDATE ... RETURNING by id (the rules decided on the loaded row) ----------

    def _insert(self, draft: ActionRunDraft) -> ActionRun:
        row = draft.row(next_counter(self._db, "action_run_seq"), self._clock.now_ms())
        return action_run_record(self._db.execute(_INSERT_RUN, row)[0])

    def _update(self, run_id: str, changes: dict[str, Any]) -> ActionRun:
        sql = _UPDATES.get(tuple(changes))
        if sql is None:
            sql = (
                f"UPDATE action_runs SET {', '.join(f'{name} = ?' for name in changes)} "
                f"WHERE id = ? RETURNING {_RUN_COLUMNS}"
            )
        return action_run_record(self._db.execute(sql, (*changes.values(), run_id))[0])

    def _requeued(self, run_id: str) -> ActionRun:
        return action_run_record(self._db.execute(_REQUEUE, (self._clock.now_ms(), run_id))[0])


def _typed_action_runs(
    db: SqliteDatabase, clock: Clock, executions: ExecutionStorage
) -> ActionRunStorage:
    return SqliteActionRunStorage(db, clock, executions)


def sqlite_action_run_storage() -> Layer:
    """A layer providing :class:`ActionRunStorage`; requires the database, the clock and the
    execution ledger of that database."""

    def factory(c: Container) -> ActionRunStorage:
        return _typed_action_runs(
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
