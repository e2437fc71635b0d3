"""The shipped state machines through the async façade on PostgreSQL.

Each machine drives ``sync call -> bridge loop -> aio façade -> greenlet -> sync PostgreSQL
layer`` (``runstore.testing._aio.bridged(aio.postgres(dsn))``) beside the in-memory model and
compares whole ``Result``\\ s after every step (each example on a database of its own,
copied from the session's migrated template; :func:`examples` says how many). The full
contracts run through the façade on SQLite; a forwarding bug shows on any backend, so here
the machines prove the PostgreSQL runner (greenlets, per-call containers, per-loop pools).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test
from test_contracts import DEEP, MACHINES

from postgres.fixtures import PostgresCluster
from postgres.server import fresh_name
from runstore import aio
from runstore.layers import Layer
from runstore.testing import LayerFactory, bridged


def examples(machine: str) -> settings | None:
    """A machine's settings: 10 examples of 10 steps, the test-runs machine 2 (its invariant
    reads every run through both readers after each step: an example costs about 7 s here,
    19 s on the sync PostgreSQL layer at 50 steps); the profile's own under ``deep``."""
    if DEEP:
        return None
    count = 2 if machine == "test_runs" else 10
    return settings(max_examples=count, stateful_step_count=10, deadline=None)


@pytest.fixture
def aio_postgres_layers(postgres_server: PostgresCluster) -> Iterator[LayerFactory]:
    """Bridged ``aio.postgres`` layers, each on a fresh migrated database (all dropped when
    the test ends; each layer's pools close with its container)."""
    made: list[str] = []

    def factory() -> Layer:
        name = fresh_name()
        made.append(name)
        return bridged(aio.postgres(postgres_server.create(name), access="write"))

    yield factory
    for name in made:
        postgres_server.drop(name)


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_state_machine_through_the_facade(aio_postgres_layers: LayerFactory, machine: str) -> None:
    run_state_machine_as_test(MACHINES[machine](aio_postgres_layers), settings=examples(machine))
