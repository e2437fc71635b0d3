"""Every shipped contract through the async façade, unchanged: each sync call of a contract
goes through the bridge's event loop to the façade, the runner's threads and the sync layer,
and its ``Result`` is compared as on any layer.

In every run: the whole of every contract on ``aio.sqlite(file)`` (a writer thread and two
reader threads, so reads take another connection than the writes they follow), state
machines at 10 examples; the state machines alone, at 10 examples, on ``aio.in_memory()``
and ``aio.sqlite(":memory:")``. The façade is one generic forwarding module, so a forwarding
mistake shows on any layer; the full matrix (every contract on every async layer, the
hypothesis profile's examples) runs under ``HYPOTHESIS_PROFILE=deep``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, run_state_machine_as_test

from runstore import aio
from runstore.layers import Layer, SqliteDatabase, build, sqlite
from runstore.testing import (
    AgentsContract,
    BadTypesContract,
    GraphsContract,
    HealthContract,
    LayerFactory,
    LedgerContract,
    SearchContract,
    SessionsContract,
    TestRunsReaderContract,
    TestRunsStoreContract,
    agents_state_machine,
    bridged,
    graphs_state_machine,
    ledger_state_machine,
    sessions_state_machine,
    test_runs_state_machine,
)
from sqlite_template import SqliteTemplate

DEEP = os.environ.get("HYPOTHESIS_PROFILE") == "deep"

QUICK: settings | None = None if DEEP else settings(
    max_examples=10, deadline=None, suppress_health_check=list(HealthCheck)
)
"""The state machines' settings through the façade (the profile's own under ``deep``)."""

QUICK_RUNS: settings | None = None if DEEP else settings(QUICK, stateful_step_count=10)
"""The test-run machine's: 10 steps of the 50 (each step compares about 130 reads per layer,
each read a hand-over to the runner's thread and back: 50 steps took 140 to 170 s per layer
on 2 busy cores)."""


@pytest.fixture
def aio_files(sqlite_template: SqliteTemplate, tmp_path: Path) -> LayerFactory:
    """Bridged ``aio.sqlite`` layers, each on a fresh copy of the migrated template file."""
    return lambda: bridged(aio.sqlite(sqlite_template.copy(tmp_path, "aio")))


class _OnFiles:
    """The contract's layers are bridged ``aio.sqlite`` files (see ``aio_files``)."""

    @pytest.fixture
    def layer_factory(self, aio_files: LayerFactory) -> LayerFactory:
        return aio_files


class TestAioSqliteFileAgents(_OnFiles, AgentsContract):
    pass


class TestAioSqliteFileLedger(_OnFiles, LedgerContract):
    state_machine_settings: ClassVar[settings] = QUICK or LedgerContract.state_machine_settings


class TestAioSqliteFileGraphs(GraphsContract):
    """Counts stored values in the test's file itself (the façade's store has no
    ``stored_values``: it is not part of the Protocol)."""

    @pytest.fixture
    def layer_factory(self, sqlite_template: SqliteTemplate, tmp_path: Path) -> LayerFactory:
        self.files: list[Path] = []

        def fresh() -> Layer:
            self.files.append(sqlite_template.copy(tmp_path, "aio"))
            return bridged(aio.sqlite(self.files[-1]))

        return fresh

    def count_stored_values(self, graphs: object) -> int:
        with build(sqlite(self.files[-1], access="read")) as c:
            count: int = c.get(SqliteDatabase).scalar("SELECT count(*) FROM graph_blobs", ())
        return count


class TestAioSqliteFileHealth(_OnFiles, HealthContract):
    pass


class TestAioSqliteFileSearch(_OnFiles, SearchContract):
    search_settings: ClassVar[settings] = settings(
        SearchContract.search_settings, max_examples=10
    )


class TestAioSqliteFileSessions(_OnFiles, SessionsContract):
    state_machine_settings: ClassVar[settings] = QUICK or SessionsContract.state_machine_settings


class TestAioSqliteFileDataStore(_OnFiles, TestRunsStoreContract):
    state_machine_settings: ClassVar[settings | None] = QUICK_RUNS


class TestAioSqliteFileDataReader(_OnFiles, TestRunsReaderContract):
    pass


class TestAioSqliteFileBadTypes(_OnFiles, BadTypesContract):
    pass


# -- the state machines on the other async layers ----------------------------------------------

MACHINES: dict[str, Callable[[LayerFactory], type[RuleBasedStateMachine]]] = {
    "agents": agents_state_machine,
    "graphs": graphs_state_machine,
    "ledger": ledger_state_machine,
    "sessions": sessions_state_machine,
    "test_runs": test_runs_state_machine,
}

LAYERS: dict[str, LayerFactory] = {
    "in_memory": lambda: bridged(aio.in_memory()),
    "sqlite_memory": lambda: bridged(aio.sqlite(":memory:")),
}


@pytest.mark.parametrize("machine", ["agents", "graphs"])
def test_state_machine_on_a_file(machine: str, aio_files: LayerFactory) -> None:
    """The machines no contract class runs (the others run in the classes above)."""
    run_state_machine_as_test(MACHINES[machine](aio_files), settings=QUICK)


@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_state_machine(machine: str, layer: str) -> None:
    quick = QUICK_RUNS if machine == "test_runs" else QUICK
    run_state_machine_as_test(MACHINES[machine](LAYERS[layer]), settings=quick)


# -- the full matrix, under the deep profile ---------------------------------------------------

CONTRACTS: tuple[type[Any], ...] = (
    AgentsContract, GraphsContract, LedgerContract, HealthContract, SearchContract,
    SessionsContract, TestRunsStoreContract, TestRunsReaderContract, BadTypesContract,
)

if DEEP:
    for _contract in CONTRACTS:
        for _name, _factory in LAYERS.items():
            _title = "".join(part.title() for part in _name.split("_"))
            _class = f"TestAio{_title}{_contract.__name__.removesuffix('Contract')}"

            def _make(self: object, factory: LayerFactory = _factory) -> Layer:
                return factory()

            globals()[_class] = type(_class, (_contract,), {"make_layer": _make})
