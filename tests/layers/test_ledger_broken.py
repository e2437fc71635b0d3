"""Testing the tester: the execution-ledger contract must fail deliberately broken layers."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test
from returns.result import Failure, Result, Success

from runstore.layers import (
    ACTION_RUN_STORAGE,
    EXECUTION_STORAGE,
    InMemoryActionRunStorage,
    InMemoryDatabase,
    InMemoryExecutionStorage,
    Layer,
    SqliteActionRunStorage,
    SqliteDatabase,
    in_memory,
    merge,
    sqlite,
)
from runstore.services import (
    ActionRunError,
    Clock,
    Execution,
    ExecutionError,
    ExecutionFailure,
    ExecutionId,
    ExecutionStatus,
    ExecutionStorage,
    NotFound,
)
from runstore.testing import LedgerContractViolation, ledger_state_machine

FIND_IT = settings(
    max_examples=300,
    phases=[Phase.generate],
    database=None,
    suppress_health_check=list(HealthCheck),
)


class NoOwnershipCheckRuns(InMemoryActionRunStorage):
    """Queues runs into executions of any project and any status."""

    def _open_execution(
        self, project_id: str, execution_id: ExecutionId
    ) -> Result[None, ActionRunError]:
        got = self._executions.get(execution_id)
        return (
            Failure(NotFound("execution", execution_id))
            if isinstance(got, Failure)
            else Success(None)
        )


class NoOwnershipCheckSqliteRuns(SqliteActionRunStorage):
    """The live layer with the same check removed (the schema's foreign key still refuses)."""

    def _open_execution(
        self, project_id: str, execution_id: ExecutionId
    ) -> Result[None, ActionRunError]:
        got = self._executions.get(execution_id)
        return (
            Failure(NotFound("execution", execution_id))
            if isinstance(got, Failure)
            else Success(None)
        )


class MutableFinishedExecutions(InMemoryExecutionStorage):
    """Lets ``cancel`` overwrite executions that already finished."""

    def cancel(
        self, execution_id: ExecutionId, failure: ExecutionFailure | None = None
    ) -> Result[Execution, ExecutionError]:
        got = self.get(execution_id)
        if isinstance(got, Success) and got.unwrap().status.is_finished:
            row = self._rows[execution_id]
            self._rows[execution_id] = row._replace(
                status=ExecutionStatus.CANCELLED.value, updated_at_ms=row.updated_at_ms + 1
            )
            return self.get(execution_id)
        return super().cancel(execution_id, failure)


def _no_ownership_in_memory() -> Layer:
    return merge(
        in_memory(),
        Layer.service(
            ACTION_RUN_STORAGE,
            lambda c: NoOwnershipCheckRuns(
                c.get(InMemoryDatabase), c.get(Clock), c.get(ExecutionStorage)
            ),
        ),
    )


def _no_ownership_sqlite() -> Layer:
    return merge(
        sqlite(":memory:"),
        Layer.service(
            ACTION_RUN_STORAGE,
            lambda c: NoOwnershipCheckSqliteRuns(
                c.get(SqliteDatabase), c.get(Clock), c.get(ExecutionStorage)
            ),
        ),
    )


def _mutable_finished() -> Layer:
    broken = Layer.service(
        EXECUTION_STORAGE,
        lambda c: MutableFinishedExecutions(c.get(InMemoryDatabase), c.get(Clock)),
    )
    return merge(in_memory(), broken, _runs_on_broken_ledger())


def _runs_on_broken_ledger() -> Layer:
    return Layer.service(
        ACTION_RUN_STORAGE,
        lambda c: InMemoryActionRunStorage(
            c.get(InMemoryDatabase), c.get(Clock), c.get(ExecutionStorage)
        ),
    )


@pytest.mark.parametrize(
    "factory", [_no_ownership_in_memory, _no_ownership_sqlite, _mutable_finished]
)
def test_the_contract_fails_a_broken_layer(factory: object) -> None:
    machine = ledger_state_machine(factory)  # type: ignore[arg-type]
    with pytest.raises(LedgerContractViolation):
        run_state_machine_as_test(machine, settings=FIND_IT)


def test_the_invariant_alone_catches_a_finished_execution_that_changes() -> None:
    """Even when the model is broken the same way, the immutability invariant fails."""
    machine = ledger_state_machine(_mutable_finished, model_factory=_mutable_finished)
    with pytest.raises(LedgerContractViolation, match="finished execution"):
        run_state_machine_as_test(machine, settings=FIND_IT)
