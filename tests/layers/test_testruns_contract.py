"""Run the shipped DataStore/DataReader contract on every layer runstore provides: in memory,
SQLite ``:memory:`` and an SQLite file."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest
from hypothesis import settings

from runstore.layers import Layer, in_memory, sqlite
from runstore.testing import DataReaderContract, DataStoreContract, LayerFactory


def _quick(examples: int) -> settings | None:
    """Fewer, shorter state-machine runs under the default (local) profile; the ``ci`` and
    ``deep`` profiles keep their own numbers. Each step compares about 130 reads per layer."""
    if os.environ.get("HYPOTHESIS_PROFILE", "default") != "default":
        return None
    return settings(max_examples=examples, stateful_step_count=25)


class TestInMemoryDataStore(DataStoreContract):
    state_machine_settings = _quick(10)

    def make_layer(self) -> Layer:
        return in_memory()


class TestInMemoryDataReader(DataReaderContract):
    def make_layer(self) -> Layer:
        return in_memory()


class TestSqliteMemoryDataStore(DataStoreContract):
    state_machine_settings = _quick(12)

    def make_layer(self) -> Layer:
        return sqlite(":memory:")


class TestSqliteMemoryDataReader(DataReaderContract):
    def make_layer(self) -> Layer:
        return sqlite(":memory:")


def _files(tmp_path: Path) -> LayerFactory:
    counter = itertools.count()
    return lambda: sqlite(tmp_path / f"runs-{next(counter)}.db")


class TestSqliteFileDataStore(DataStoreContract):
    state_machine_settings = _quick(5)

    @pytest.fixture
    def layer_factory(self, tmp_path: Path) -> LayerFactory:
        return _files(tmp_path)


class TestSqliteFileDataReader(DataReaderContract):
    @pytest.fixture
    def layer_factory(self, tmp_path: Path) -> LayerFactory:
        return _files(tmp_path)
