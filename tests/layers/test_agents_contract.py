"""The agent-storage contract on every layer runstore ships, and on a broken one."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from runstore.layers import Layer, in_memory
from runstore.services.agents import NewMessage
from runstore.testing import (
    AgentsContract,
    AgentsMachine,
    LayerFactory,
    agents_broken_clear_layer,
    agents_broken_client_id_layer,
    agents_broken_fencing_layer,
    agents_broken_sequence_layer,
    agents_state_machine,
)


class TestInMemoryAgents(AgentsContract):
    def make_layer(self) -> Layer:
        return in_memory()


class TestSqliteMemoryAgents(AgentsContract):
    @pytest.fixture
    def layer_factory(self, sqlite_memory_layers: LayerFactory) -> LayerFactory:
        return sqlite_memory_layers


class TestSqliteFileAgents(AgentsContract):
    @pytest.fixture
    def layer_factory(self, sqlite_files: LayerFactory) -> LayerFactory:
        return sqlite_files


def test_state_machine_in_memory() -> None:
    """The model against itself: the machine and the in-memory layer are deterministic."""
    run_state_machine_as_test(
        agents_state_machine(in_memory), settings=settings(max_examples=10, deadline=None)
    )


def test_state_machine_sqlite_memory(sqlite_memory_layers: LayerFactory) -> None:
    run_state_machine_as_test(agents_state_machine(sqlite_memory_layers))


def test_state_machine_sqlite_file(sqlite_files: LayerFactory) -> None:
    run_state_machine_as_test(
        agents_state_machine(sqlite_files), settings=settings(max_examples=10, deadline=None)
    )


_FIND_BUG = settings(
    max_examples=300,
    deadline=None,
    database=None,
    phases=[Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)


def test_contract_fails_a_layer_that_reuses_sequence_numbers() -> None:
    machine = agents_state_machine(agents_broken_sequence_layer)
    with pytest.raises(AssertionError, match="seq"):
        run_state_machine_as_test(machine, settings=_FIND_BUG)


def test_contract_fails_a_layer_that_ignores_the_fencing_token() -> None:
    machine = agents_state_machine(agents_broken_fencing_layer)
    with pytest.raises(AssertionError, match="is stale"):
        run_state_machine_as_test(machine, settings=_FIND_BUG)


def test_contract_fails_a_layer_that_stores_a_retried_client_id_twice() -> None:
    machine = agents_state_machine(agents_broken_client_id_layer)
    with pytest.raises(AssertionError, match="layer returned"):
        run_state_machine_as_test(machine, settings=_FIND_BUG)


def _script(
    broken_layer: Callable[[], Layer],
    match: str,
    setup: Callable[[AgentsMachine], object],
    step: Callable[[AgentsMachine], object],
) -> None:
    """Run ``setup`` then ``step`` on a machine over the in-memory layer (the step passes and
    the state stays the model's) and over ``broken_layer`` (the step fails, matching
    ``match``)."""
    for factory, broken in ((in_memory, False), (broken_layer, True)):
        machine = agents_state_machine(factory)()
        try:
            machine.first_threads(["p1", "p1"])
            setup(machine)
            if broken:
                with pytest.raises(AssertionError, match=match):
                    step(machine)
            else:
                step(machine)
                machine.same_state()
        finally:
            machine.teardown()


def test_the_retry_script_catches_a_client_id_stored_twice() -> None:
    """The scenario the machine finds, scripted: an append with a client id, retried."""
    message = NewMessage("user", "hi", client_id="m1")
    _script(
        agents_broken_client_id_layer,
        "seq=2",
        lambda m: m._append("t1", message),
        lambda m: m._append("t1", message),
    )


def test_the_late_worker_script_catches_an_unfenced_finish() -> None:
    """The scenario the machine finds, scripted: a worker finishes with an older token."""

    def setup(machine: AgentsMachine) -> None:
        machine.start_run("r1", "t1", None, "w1", 1)
        machine.tick(1)
        machine.reclaim_run("r1", "w2", 60_000)

    _script(
        agents_broken_fencing_layer, "is stale", setup, lambda m: m.late_worker("r1", "finish")
    )


def test_the_retry_turn_script_catches_sequence_reuse() -> None:
    """The same scenario the machine finds, scripted: one turn, then retry it."""
    _script(
        agents_broken_sequence_layer,
        "seq=3",
        lambda m: m.turn("t1", 2, None),
        lambda m: m.delete_newest_run("t1", True),
    )


def test_contract_fails_a_layer_whose_clear_restarts_the_numbers() -> None:
    machine = agents_state_machine(agents_broken_clear_layer)
    with pytest.raises(AssertionError, match="seq=1"):
        run_state_machine_as_test(machine, settings=_FIND_BUG)


def test_the_clear_script_catches_restarted_numbers() -> None:
    """The scenario the machine finds, scripted: append, clear, append again."""
    _script(
        agents_broken_clear_layer,
        "seq=1",
        lambda m: m._append("t1", NewMessage("user", "hi")),
        lambda m: m.clear("t1", True),
    )
