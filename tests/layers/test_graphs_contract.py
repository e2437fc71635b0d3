"""The graph checkpoint contract on every layer runstore ships, and on broken ones."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from runstore.layers import CLOCK, GRAPH_CHECKPOINTS, Layer, build, in_memory, merge
from runstore.services.clock import FixedClock
from runstore.testing import (
    GraphsContract,
    LayerFactory,
    graphs_broken_prune_layer,
    graphs_broken_writes_layer,
    graphs_state_machine,
)


class TestInMemoryGraphs(GraphsContract):
    def make_layer(self) -> Layer:
        return in_memory()


class TestSqliteMemoryGraphs(GraphsContract):
    @pytest.fixture
    def layer_factory(self, sqlite_memory_layers: LayerFactory) -> LayerFactory:
        return sqlite_memory_layers


class TestSqliteFileGraphs(GraphsContract):
    @pytest.fixture
    def layer_factory(self, sqlite_files: LayerFactory) -> LayerFactory:
        return sqlite_files


def test_state_machine_in_memory() -> None:
    """The model against itself: the machine and the in-memory layer are deterministic."""
    run_state_machine_as_test(
        graphs_state_machine(in_memory), settings=settings(max_examples=10, deadline=None)
    )


def test_state_machine_sqlite_memory(sqlite_memory_layers: LayerFactory) -> None:
    run_state_machine_as_test(
        graphs_state_machine(sqlite_memory_layers),
        settings=settings(max_examples=25, deadline=None),
    )


def test_state_machine_sqlite_file(sqlite_files: LayerFactory) -> None:
    run_state_machine_as_test(
        graphs_state_machine(sqlite_files), settings=settings(max_examples=10, deadline=None)
    )


_FIND_BUG = settings(
    max_examples=300,
    deadline=None,
    database=None,
    phases=[Phase.generate],
    suppress_health_check=[HealthCheck.too_slow],
)


def test_contract_fails_a_layer_whose_special_writes_keep_the_first_value() -> None:
    machine = graphs_state_machine(graphs_broken_writes_layer)
    with pytest.raises(AssertionError, match="layer returned"):
        run_state_machine_as_test(machine, settings=_FIND_BUG)


def test_contract_fails_a_layer_whose_prune_keeps_the_oldest() -> None:
    machine = graphs_state_machine(graphs_broken_prune_layer)
    with pytest.raises(AssertionError, match="layer returned"):
        run_state_machine_as_test(machine, settings=_FIND_BUG)


@pytest.mark.parametrize(
    ("broken", "example"),
    [
        (graphs_broken_writes_layer, "test_normal_writes_keep_the_first_and_special_ones_the_last"),
        (
            graphs_broken_prune_layer,
            "test_keep_latest_keeps_the_newest_of_each_namespace_with_its_values_and_writes",
        ),
    ],
)
def test_the_examples_fail_a_broken_layer(broken: Callable[[], Layer], example: str) -> None:
    """The example contract catches each bug too."""
    with build(merge(broken(), Layer.value(CLOCK, FixedClock()))) as c:
        test = getattr(GraphsContract(), example)
        with pytest.raises(AssertionError):
            test(c.get(GRAPH_CHECKPOINTS))
