"""The database-health contract on every shipped layer: in memory, SQLite in memory, a file
(opened to create, and opened again read-only)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import ClassVar

import pytest

from runstore.layers import Layer, in_memory, open_database, sqlite
from runstore.testing import HealthContract, LayerFactory


class TestInMemoryHealth(HealthContract):
    def make_layer(self) -> Layer:
        return in_memory()


class TestSqliteMemoryHealth(HealthContract):
    def make_layer(self) -> Layer:
        return sqlite(":memory:")


class TestSqliteFileHealth(HealthContract):
    @pytest.fixture
    def layer_factory(self, tmp_path: Path) -> LayerFactory:
        numbers = itertools.count()
        return lambda: sqlite(tmp_path / f"health-{next(numbers)}.db")


class TestSqliteReadOnlyHealth(HealthContract):
    """A migrated file opened read-only: its health reads the same."""

    writable: ClassVar[bool] = False

    @pytest.fixture
    def layer_factory(self, tmp_path: Path) -> LayerFactory:
        numbers = itertools.count()

        def factory() -> Layer:
            path = tmp_path / f"health-ro-{next(numbers)}.db"
            open_database(path).unwrap().close()
            return sqlite(path, access="read")

        return factory


class TestPostgresHealth(HealthContract):
    """A fresh database of the session's PostgreSQL server."""

    @pytest.fixture
    def layer_factory(self, postgres_layers: LayerFactory) -> LayerFactory:
        return postgres_layers
