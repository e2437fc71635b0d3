"""The in-memory :class:`~runstore.services.ledger.ExecutionStorage`.

All state lives in :class:`~runstore.layers.TxDict` mirrors of the shared
:class:`InMemoryDatabase`, so a unit of work that fails (here or in another in-memory service
calling ``get`` inside its own unit) leaves everything as it was. Rows are kept in the live
layer's at-rest form (:class:`ExecutionRow`, JSON as text) and turned into records by the same
rules, so callers never share mutable state with the store. The rules themselves (checks and
decisions) live in :mod:`runstore.services._ledger_rules`; this layer only stores and finds.

The in-memory :class:`~runstore.services.ledger.ActionRunStorage`.

Rows live in :class:`~runstore.layers.TxDict` mirrors of the shared :class:`InMemoryDatabase`
in the live layer's at-rest form (:class:`ActionRunRow`, JSON as text), idempotency keys in
one more (``(execution_id, key) -> run id``), and every write consults the
:class:`ExecutionStorage` of the same database inside its unit of work. The rules live in
:mod:`runstore.services._ledger_rules`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from returns.result import Failure, Result, Success

from runstore.layers._layer import Container, Layer, merge
from runstore.layers._ledger_shared import ActionRunStorageBase, ExecutionStorageBase
from runstore.layers._memory_database import InMemoryDatabase
from runstore.layers._tags import ACTION_RUN_STORAGE, EXECUTION_STORAGE
from runstore.layers._unit_of_work import TxDict
from runstore.services._ledger_rules import (
    ActionRunDraft,
    ActionRunRow,
    Claim,
    CreateFacts,
    ExecutionDraft,
    ExecutionRow,
    Listing,
    Renew,
    action_run_page,
    action_run_record,
    execution_page,
    execution_record,
    is_claimable,
)
from runstore.services.clock import Clock
from runstore.services.errors import NotFound
from runstore.services.ledger import (
    ActionRun,
    ActionRunError,
    ActionRunStorage,
    Execution,
    ExecutionError,
    ExecutionStatus,
    ExecutionStorage,
)
from runstore.services.pagination import Page

__all__ = [
    "InMemoryActionRunStorage",
    "InMemoryExecutionStorage",
    "in_memory_action_run_storage",
    "in_memory_execution_storage",
    "in_memory_ledger",
]


class InMemoryExecutionStorage(ExecutionStorageBase):
    """:class:`ExecutionStorage` kept in the mirrors of one :class:`InMemoryDatabase`."""

    _db: InMemoryDatabase

    def __init__(self, db: InMemoryDatabase, clock: Clock) -> None:
        self._db = db
        self._clock = clock
        self._rows: TxDict[str, ExecutionRow] = db.mirror()
        self._keys: TxDict[tuple[str, str], str] = db.mirror()
        self._counters: TxDict[str, int] = db.mirror()

    def _next(self, name: str) -> int:
        value = (self._counters.get(name) or 0) + 1
        self._counters[name] = value
        return value

    def _put(self, row: ExecutionRow) -> Execution:
        self._rows[row.id] = row
        return execution_record(row)

    # -- facts ---------------------------------------------------------------------------------

    def _get(self, execution_id: str) -> Result[Execution, ExecutionError]:
        row = self._rows.get(execution_id)
        if row is None:
            return Failure(NotFound("execution", execution_id))
        return Success(execution_record(row))

    def _list(self, query: Listing) -> Result[Page[Execution], ExecutionError]:
        rows = sorted(
            (
                r
                for r in self._rows.values()
                if r.project_id == query.project_id
                and r.seq > query.after_seq
                and (query.status is None or r.status == query.status)
            ),
            key=lambda r: r.seq,
        )
        return Success(execution_page(rows[: query.limit + 1], query.limit))

    def _create_facts(self, draft: ExecutionDraft) -> CreateFacts:
        new = draft.new
        keyed = None
        if new.idempotency_key is not None:
            keyed = self._rows.get(self._keys.get((new.project_id, new.idempotency_key), ""))
        parent = None if new.parent_id is None else self._rows.get(new.parent_id)
        return CreateFacts(
            keyed=None if keyed is None else (execution_record(keyed), keyed.request_digest),
            id_taken=new.id in self._rows,
            parent_project=None if parent is None else parent.project_id,
        )

    def _claimable(self, project_id: str, now_ms: int) -> Iterable[tuple[int, str]]:
        return (
            (r.seq, r.id)
            for r in self._rows.values()
            if r.project_id == project_id and is_claimable(r.status, r.lease_expires_at_ms, now_ms)
        )

    def _state(self, execution_id: str) -> tuple[str, int] | None:
        row = self._rows.get(execution_id)
        return None if row is None else (row.status, row.fencing_token)

    # -- writes --------------------------------------------------------------------------------

    def _insert(self, draft: ExecutionDraft) -> Execution:
        row = draft.row(self._next("execution_seq"), self._clock.now_ms())
        if row.idempotency_key is not None:
            self._keys[(row.project_id, row.idempotency_key)] = row.id
        return self._put(row)

    def _grant(self, execution_id: str, claim: Claim, now_ms: int) -> Execution:
        row = self._rows[execution_id]
        return self._put(
            row._replace(
                status=ExecutionStatus.RUNNING.value,
                started_at_ms=now_ms if row.started_at_ms is None else row.started_at_ms,
                lease_owner=claim.owner,
                lease_expires_at_ms=now_ms + claim.lease_ms,
                fencing_token=self._next("fencing_token"),
                attempts=row.attempts + 1,
                updated_at_ms=now_ms,
            )
        )

    def _extend(self, renew: Renew) -> Execution:
        now = self._clock.now_ms()
        row = self._rows[renew.execution_id]
        return self._put(row._replace(lease_expires_at_ms=now + renew.lease_ms, updated_at_ms=now))

    def _end(
        self, execution_id: str, status: str, failure_json: str | None, output_json: str | None
    ) -> Execution:
        now = self._clock.now_ms()
        row = self._rows[execution_id]
        return self._put(
            row._replace(
                status=status,
                output=row.output if output_json is None else output_json,
                failure=failure_json,
                finished_at_ms=now,
                updated_at_ms=now,
                lease_expires_at_ms=None,
            )
        )


def _typed(db: InMemoryDatabase, clock: Clock) -> ExecutionStorage:
    return InMemoryExecutionStorage(db, clock)


def in_memory_execution_storage() -> Layer:
    """A layer providing :class:`ExecutionStorage` on the container's :class:`InMemoryDatabase`."""

    def factory(c: Container) -> ExecutionStorage:
        return _typed(c.get(InMemoryDatabase), c.get(Clock))

    return Layer.service(
        EXECUTION_STORAGE,
        factory,
        requires=(InMemoryDatabase, Clock),
    )


class InMemoryActionRunStorage(ActionRunStorageBase):
    """:class:`ActionRunStorage` kept in the mirrors of one :class:`InMemoryDatabase`."""

    _db: InMemoryDatabase

    def __init__(self, db: InMemoryDatabase, clock: Clock, executions: ExecutionStorage) -> None:
        self._db = db
        self._clock = clock
        self._executions = executions
        self._rows: TxDict[str, ActionRunRow] = db.mirror()
        self._keys: TxDict[tuple[str, str], str] = db.mirror()
        self._counters: TxDict[str, int] = db.mirror()

    def _put(self, row: ActionRunRow) -> ActionRun:
        self._rows[row.id] = row
        return action_run_record(row)

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

    def _row(self, run_id: str) -> ActionRunRow | None:
        return self._rows.get(run_id)

    def _keyed(self, execution_id: str, idempotency_key: str) -> ActionRunRow | None:
        run_id = self._keys.get((execution_id, idempotency_key))
        return None if run_id is None else self._rows.get(run_id)

    def _run_exists(self, run_id: str) -> bool:
        return run_id in self._rows

    # -- writes: replace the mirrored row -------------------------------------------------------

    def _insert(self, draft: ActionRunDraft) -> ActionRun:
        seq = (self._counters.get("action_run_seq") or 0) + 1
        self._counters["action_run_seq"] = seq
        row = draft.row(seq, self._clock.now_ms())
        if row.idempotency_key is not None:
            self._keys[(row.execution_id, row.idempotency_key)] = row.id
        return self._put(row)

    def _update(self, run_id: str, changes: dict[str, Any]) -> ActionRun:
        return self._put(self._rows[run_id]._replace(**changes))

    def _requeued(self, run_id: str) -> ActionRun:
        return self._put(self._rows[run_id].requeued(self._clock.now_ms()))


def _typed_action_runs(
    db: InMemoryDatabase, clock: Clock, executions: ExecutionStorage
) -> ActionRunStorage:
    return InMemoryActionRunStorage(db, clock, executions)


def in_memory_action_run_storage() -> Layer:
    """A layer providing the in-memory :class:`ActionRunStorage`; requires the in-memory
    database, the clock and the execution ledger of that database."""

    def factory(c: Container) -> ActionRunStorage:
        return _typed_action_runs(c.get(InMemoryDatabase), c.get(Clock), c.get(ExecutionStorage))

    return Layer.service(
        ACTION_RUN_STORAGE,
        factory,
        requires=(InMemoryDatabase, Clock, ExecutionStorage),
    )


def in_memory_ledger() -> Layer:
    """The in-memory execution ledger: :class:`ExecutionStorage` and :class:`ActionRunStorage`
    on the container's :class:`InMemoryDatabase` (requires it and a :class:`Clock`)."""
    return merge(in_memory_execution_storage(), in_memory_action_run_storage())
