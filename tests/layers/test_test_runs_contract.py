"""Run the shipped DataStore/DataReader contract on every layer runstore provides: in memory,
SQLite ``:memory:`` and an SQLite file."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import settings

from runstore.layers import Container, Layer, build, in_memory, merge, sqlite
from runstore.services.clock import Clock
from runstore.services.test_runs import DataReader, DataStore
from runstore.testing import LayerFactory, TestRunsReaderContract, TestRunsStoreContract
from sqlite_template import SqliteTemplate


def _quick(examples: int, ci: int | None = None) -> settings | None:
    """Fewer, shorter state-machine runs under the default (local) profile; under ``ci``,
    ``ci`` examples when given (a layer whose examples cost seconds each: on PostgreSQL 5
    examples of 25 steps took 32 s on 2 cores at a load average of 6, so the profile's 60
    of 50 steps would take about 13 minutes), else the profile's; ``deep`` keeps its own
    numbers. Each step compares about 130 reads per layer."""
    profile = os.environ.get("HYPOTHESIS_PROFILE", "default")
    if profile == "default":
        return settings(max_examples=examples, stateful_step_count=25)
    if profile == "ci" and ci is not None:
        return settings(max_examples=ci)
    return None


class TestInMemoryDataStore(TestRunsStoreContract):
    state_machine_settings = _quick(10)

    def make_layer(self) -> Layer:
        return in_memory()


class TestInMemoryDataReader(TestRunsReaderContract):
    def make_layer(self) -> Layer:
        return in_memory()


class TestSqliteMemoryDataStore(TestRunsStoreContract):
    state_machine_settings = _quick(12)

    @pytest.fixture
    def layer_factory(self, sqlite_memory_layers: LayerFactory) -> LayerFactory:
        return sqlite_memory_layers


class TestSqliteMemoryDataReader(TestRunsReaderContract):
    @pytest.fixture
    def layer_factory(self, sqlite_memory_layers: LayerFactory) -> LayerFactory:
        return sqlite_memory_layers


class TestSqliteFileDataStore(TestRunsStoreContract):
    state_machine_settings = _quick(5)

    @pytest.fixture
    def layer_factory(self, sqlite_files: LayerFactory) -> LayerFactory:
        return sqlite_files


class TestSqliteFileDataReader(TestRunsReaderContract):
    @pytest.fixture
    def layer_factory(self, sqlite_files: LayerFactory) -> LayerFactory:
        return sqlite_files


class _Alternating:
    """Sends each call to the next of several services in turn (two connections to one
    file): what one connection cached must not go stale when the other one writes."""

    def __init__(self, *targets: object) -> None:
        self._targets = itertools.cycle(targets)

    def __getattr__(self, name: str) -> Any:
        return getattr(next(self._targets), name)


def _two_connections(template: SqliteTemplate, tmp_path: Path) -> LayerFactory:
    def factory() -> Layer:
        path = template.copy(tmp_path, "shared")

        def pair(c: Container) -> Iterator[tuple[DataStore, DataReader]]:
            clock = Layer.value(Clock, c.get(Clock))
            with build(merge(sqlite(path), clock)) as a, build(merge(sqlite(path), clock)) as b:
                yield (
                    cast(DataStore, _Alternating(a.get(DataStore), b.get(DataStore))),
                    cast(DataReader, _Alternating(b.get(DataReader), a.get(DataReader))),
                )

        return merge(
            Layer.service(_Pair, pair, requires=(Clock,)),  # type: ignore[arg-type]
            Layer.service(DataStore, lambda c: c.get(_Pair)[0], requires=(_Pair,)),
            Layer.service(DataReader, lambda c: c.get(_Pair)[1], requires=(_Pair,)),
        )

    return factory


class _Pair(tuple):  # type: ignore[type-arg]
    """Container key of the two alternating services."""


class TestSqliteTwoConnectionsDataStore(TestRunsStoreContract):
    """Every call goes to the other of two connections to the same file."""

    state_machine_settings = _quick(5, ci=20)

    @pytest.fixture
    def layer_factory(self, sqlite_template: SqliteTemplate, tmp_path: Path) -> LayerFactory:
        return _two_connections(sqlite_template, tmp_path)


class TestPostgresDataStore(TestRunsStoreContract):
    """Each layer on a fresh database of the session's PostgreSQL server."""

    state_machine_settings = _quick(5, ci=15)

    @pytest.fixture
    def layer_factory(self, postgres_layers: LayerFactory) -> LayerFactory:
        return postgres_layers


class TestPostgresDataReader(TestRunsReaderContract):
    @pytest.fixture
    def layer_factory(self, postgres_layers: LayerFactory) -> LayerFactory:
        return postgres_layers
