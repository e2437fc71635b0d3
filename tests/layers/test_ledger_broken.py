"""Testing the tester: the execution-ledger contract must fail deliberately broken layers."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test
from returns.result import Failure, Result, Success

from runstore.layers import (
    ACTION_RUN_STORAGE,
    CLOCK,
    EXECUTION_STORAGE,
    InMemoryActionRunStorage,
    InMemoryDatabase,
    InMemoryExecutionStorage,
    Layer,
    SqliteActionRunStorage,
    SqliteDatabase,
    build,
    in_memory,
    merge,
    sqlite,
)
from runstore.layers._ledger_shared import ActionRunStorageBase
from runstore.layers._postgres_database import PostgresDatabase
from runstore.layers._postgres_ledger import PostgresActionRunStorage
from runstore.services import (
    ActionRunError,
    ActionRunStorage,
    Clock,
    Execution,
    ExecutionError,
    ExecutionFailure,
    ExecutionId,
    ExecutionStatus,
    ExecutionStorage,
    Fence,
    FixedClock,
    NotFound,
)
from runstore.testing import (
    LayerFactory,
    LedgerContract,
    LedgerContractViolation,
    ledger_state_machine,
)
from runstore.testing._ledger import T0_MS, Ledger

FIND_IT = settings(
    max_examples=300,
    phases=[Phase.generate],
    database=None,
    suppress_health_check=list(HealthCheck),
)


def _exists(runs: ActionRunStorageBase, fence: Fence) -> Result[None, ActionRunError]:
    """Only that the fence's execution exists: no project, status or token check."""
    if isinstance(runs._executions.get(fence.execution_id), Failure):
        return Failure(NotFound("execution", fence.execution_id))
    return Success(None)


class NoOwnershipCheckRuns(InMemoryActionRunStorage):
    """Writes runs into executions of any project, any status, under any token."""

    def _authorise(self, fence: Fence, project_id: str | None) -> Result[None, ActionRunError]:
        return _exists(self, fence)


class NoOwnershipCheckSqliteRuns(SqliteActionRunStorage):
    """The live layer with the same check removed (the schema's foreign key and its
    running-execution triggers still refuse some writes)."""

    def _authorise(self, fence: Fence, project_id: str | None) -> Result[None, ActionRunError]:
        return _exists(self, fence)


def _current(runs: ActionRunStorageBase, fence: Fence) -> Fence:
    """The fence with the execution's current token, whatever token it carried."""
    got = runs._executions.get(fence.execution_id)
    return fence if isinstance(got, Failure) else got.unwrap().fence


class NoFencingRuns(InMemoryActionRunStorage):
    """Checks everything but the fencing token: a stale worker's writes go through."""

    def _authorise(self, fence: Fence, project_id: str | None) -> Result[None, ActionRunError]:
        return super()._authorise(_current(self, fence), project_id)


class NoFencingSqliteRuns(SqliteActionRunStorage):
    """The live layer skipping the fencing token check."""

    def _authorise(self, fence: Fence, project_id: str | None) -> Result[None, ActionRunError]:
        return super()._authorise(_current(self, fence), project_id)


class NoOwnershipCheckPostgresRuns(PostgresActionRunStorage):
    """The PostgreSQL layer with the ownership check removed (its schema's foreign key and
    running-execution triggers still refuse some writes)."""

    def _authorise(self, fence: Fence, project_id: str | None) -> Result[None, ActionRunError]:
        return _exists(self, fence)


class NoFencingPostgresRuns(PostgresActionRunStorage):
    """The PostgreSQL layer skipping the fencing token check."""

    def _authorise(self, fence: Fence, project_id: str | None) -> Result[None, ActionRunError]:
        return super()._authorise(_current(self, fence), project_id)


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


def _in_memory_with(runs: type[InMemoryActionRunStorage]) -> Layer:
    return merge(
        in_memory(),
        Layer.service(
            ACTION_RUN_STORAGE,
            lambda c: runs(c.get(InMemoryDatabase), c.get(Clock), c.get(ExecutionStorage)),
        ),
    )


def _sqlite_with(runs: type[SqliteActionRunStorage]) -> Layer:
    return merge(
        sqlite(":memory:"),
        Layer.service(
            ACTION_RUN_STORAGE,
            lambda c: runs(c.get(SqliteDatabase), c.get(Clock), c.get(ExecutionStorage)),
        ),
    )


def _postgres_with(
    postgres_layers: LayerFactory, runs: type[PostgresActionRunStorage]
) -> LayerFactory:
    def factory() -> Layer:
        return merge(
            postgres_layers(),
            Layer.service(
                ACTION_RUN_STORAGE,
                lambda c: runs(c.get(PostgresDatabase), c.get(Clock), c.get(ExecutionStorage)),
            ),
        )

    return factory


def _no_ownership_in_memory() -> Layer:
    return _in_memory_with(NoOwnershipCheckRuns)


def _no_ownership_sqlite() -> Layer:
    return _sqlite_with(NoOwnershipCheckSqliteRuns)


def _no_fencing_in_memory() -> Layer:
    return _in_memory_with(NoFencingRuns)


def _no_fencing_sqlite() -> Layer:
    return _sqlite_with(NoFencingSqliteRuns)


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
    "factory",
    [
        _no_ownership_in_memory,
        _no_ownership_sqlite,
        _no_fencing_in_memory,
        _no_fencing_sqlite,
        _mutable_finished,
    ],
)
def test_the_contract_fails_a_broken_layer(factory: object) -> None:
    machine = ledger_state_machine(factory)  # type: ignore[arg-type]
    with pytest.raises(LedgerContractViolation):
        run_state_machine_as_test(machine, settings=FIND_IT)


@pytest.mark.parametrize("factory", [_no_fencing_in_memory, _no_fencing_sqlite])
def test_the_state_machine_finds_a_stale_worker_that_gets_through(factory: object) -> None:
    """The layer that skips the token check fails on a stale fence, nothing else."""
    machine = ledger_state_machine(factory)  # type: ignore[arg-type]
    with pytest.raises(LedgerContractViolation, match=r"fencing token [0-9]+ is stale"):
        run_state_machine_as_test(machine, settings=FIND_IT)


@pytest.mark.parametrize("factory", [_no_fencing_in_memory, _no_fencing_sqlite])
def test_the_examples_find_a_stale_worker_that_gets_through(factory: object) -> None:
    contract = LedgerContract()
    clock = FixedClock(T0_MS)
    with build(merge(factory(), Layer.value(CLOCK, clock))) as container:  # type: ignore[operator]
        ledger = Ledger(
            container.get(ExecutionStorage), container.get(ActionRunStorage), container, clock
        )
        with pytest.raises(AssertionError):
            contract.test_a_stale_worker_is_refused_every_action_run_write(ledger)


def test_the_invariant_alone_catches_a_finished_execution_that_changes() -> None:
    """Even when the model is broken the same way, the immutability invariant fails."""
    machine = ledger_state_machine(_mutable_finished, model_factory=_mutable_finished)
    with pytest.raises(LedgerContractViolation, match="finished execution"):
        run_state_machine_as_test(machine, settings=FIND_IT)


@pytest.mark.parametrize("runs", [NoOwnershipCheckPostgresRuns, NoFencingPostgresRuns])
def test_the_contract_fails_a_broken_postgres_layer(
    postgres_layers: LayerFactory, runs: type[PostgresActionRunStorage]
) -> None:
    machine = ledger_state_machine(_postgres_with(postgres_layers, runs))
    with pytest.raises(LedgerContractViolation):
        run_state_machine_as_test(machine, settings=FIND_IT)


def test_the_state_machine_finds_a_stale_worker_that_gets_through_on_postgres(
    postgres_layers: LayerFactory,
) -> None:
    machine = ledger_state_machine(_postgres_with(postgres_layers, NoFencingPostgresRuns))
    with pytest.raises(LedgerContractViolation, match=r"fencing token [0-9]+ is stale"):
        run_state_machine_as_test(machine, settings=FIND_IT)
