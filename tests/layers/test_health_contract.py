"""The database-health contract on every shipped layer: in memory, SQLite in memory, a file
(opened to create, and opened again read-only)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from runstore.layers import Layer, in_memory, sqlite
from runstore.testing import HealthContract, LayerFactory
from sqlite_template import SqliteTemplate


class TestInMemoryHealth(HealthContract):
    def make_layer(self) -> Layer:
        return in_memory()


class TestSqliteMemoryHealth(HealthContract):
    def make_layer(self) -> Layer:
        return sqlite(":memory:")


class TestSqliteFileHealth(HealthContract):
    @pytest.fixture
    def layer_factory(self, sqlite_files: LayerFactory) -> LayerFactory:
        return sqlite_files


class TestSqliteReadOnlyHealth(HealthContract):
    """A migrated file opened read-only: its health reads the same."""

    writable: ClassVar[bool] = False

    @pytest.fixture
    def layer_factory(self, sqlite_template: SqliteTemplate, tmp_path: Path) -> LayerFactory:
        return lambda: sqlite(sqlite_template.copy(tmp_path), access="read")


class TestPostgresHealth(HealthContract):
    """A fresh database of the session's PostgreSQL server."""

    @pytest.fixture
    def layer_factory(self, postgres_layers: LayerFactory) -> LayerFactory:
        return postgres_layers
