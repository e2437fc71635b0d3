"""The in-memory :class:`~runstore.services.executions.ExecutionStorage`.

All state lives in :class:`~runstore.layers.TxDict` mirrors of the shared
:class:`InMemoryDatabase`, so a unit of work that fails (here or in another in-memory service
calling ``get`` inside its own unit) leaves everything as it was. Rows are kept in the live
layer's at-rest form (:class:`ExecutionRow`, JSON as text) and turned into records by the same
rules, so callers never share mutable state with the store. The rules themselves (checks and
decisions) live in :mod:`runstore.services._ledger_rules`; this layer only stores and finds.
"""

from __future__ import annotations

from returns.result import Failure, Result, Success

from runstore.layers._layer import Container, Layer
from runstore.layers._memory_database import InMemoryDatabase
from runstore.layers._tags import EXECUTION_STORAGE
from runstore.layers._unit_of_work import TxDict
from runstore.services._ledger_rules import (
    Claim,
    CreateFacts,
    ExecutionDraft,
    ExecutionRow,
    Finish,
    Listing,
    Renew,
    check_cancel,
    check_claim,
    check_execution_id,
    check_execution_listing,
    check_finish,
    check_new_execution,
    check_renew,
    decide_cancel,
    decide_create,
    decide_held,
    execution_page,
    execution_record,
    is_claimable,
    oldest,
)
from runstore.services._primitives import and_then
from runstore.services.clock import Clock
from runstore.services.errors import NotFound
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
)
from runstore.services.pagination import Page

__all__ = ["InMemoryExecutionStorage", "in_memory_execution_storage"]

_RUNNING = ExecutionStatus.RUNNING.value
_CANCELLED = ExecutionStatus.CANCELLED.value


class InMemoryExecutionStorage:
    """:class:`ExecutionStorage` kept in the mirrors of one :class:`InMemoryDatabase`."""

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

    def _state(self, execution_id: str) -> tuple[str, int] | None:
        row = self._rows.get(execution_id)
        return None if row is None else (row.status, row.fencing_token)

    # -- reads ---------------------------------------------------------------------------------

    def get(self, execution_id: ExecutionId) -> Result[Execution, ExecutionError]:
        """See :meth:`ExecutionStorage.get`; ``InvalidInput`` for an id that is not valid text."""
        return and_then(check_execution_id(execution_id), self._get)

    def _get(self, execution_id: str) -> Result[Execution, ExecutionError]:
        row = self._rows.get(execution_id)
        if row is None:
            return Failure(NotFound("execution", execution_id))
        return Success(execution_record(row))

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

    # -- writes --------------------------------------------------------------------------------

    def create(self, new: NewExecution) -> Result[Execution, ExecutionError]:
        """See :meth:`ExecutionStorage.create`."""
        return and_then(
            check_new_execution(new),
            lambda draft: self._db.transact("create execution", lambda: self._create(draft)),
        )

    def _create(self, draft: ExecutionDraft) -> Result[Execution, ExecutionError]:
        new = draft.new
        key = None if new.idempotency_key is None else (new.project_id, new.idempotency_key)
        keyed = None if key is None else self._rows.get(self._keys.get(key, ""))
        parent = None if new.parent_id is None else self._rows.get(new.parent_id)
        facts = CreateFacts(
            keyed=None if keyed is None else (execution_record(keyed), keyed.request_digest),
            id_taken=new.id is not None and new.id in self._rows,
            parent_project=None if parent is None else parent.project_id,
        )
        return decide_create(draft, facts).map(
            lambda replay: self._insert(draft, key) if replay is None else replay
        )

    def _insert(self, draft: ExecutionDraft, key: tuple[str, str] | None) -> Execution:
        row = draft.row(self._next("execution_seq"), self._clock.now_ms())
        if key is not None:
            self._keys[key] = row.id
        return self._put(row)

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
        chosen = oldest(
            (r.seq, r.id)
            for r in self._rows.values()
            if r.project_id == claim.project_id
            and is_claimable(r.status, r.lease_expires_at_ms, now)
        )
        if chosen is None:
            return Success(None)
        row = self._rows[chosen]
        return Success(
            self._put(
                row._replace(
                    status=_RUNNING,
                    started_at_ms=now if row.started_at_ms is None else row.started_at_ms,
                    lease_owner=claim.owner,
                    lease_expires_at_ms=now + claim.lease_ms,
                    fencing_token=self._next("fencing_token"),
                    attempts=row.attempts + 1,
                    updated_at_ms=now,
                )
            )
        )

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

    def _extend(self, renew: Renew) -> Execution:
        now = self._clock.now_ms()
        row = self._rows[renew.execution_id]
        return self._put(row._replace(lease_expires_at_ms=now + renew.lease_ms, updated_at_ms=now))

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

    def _end(
        self, execution_id: str, status: str, failure_json: str | None, output_json: str | None
    ) -> Execution:
        """Store the final ``status`` (keeping the output when ``output_json`` is None)."""
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
